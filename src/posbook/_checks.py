"""Argument checks shared by the public functions.

Every message names the argument, the value received and what was expected, so a reader who passes the wrong
thing learns what to pass instead. Nothing is coerced silently.
"""

from __future__ import annotations

import difflib
import math
import os
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import torch

# The largest size posbook turns into a tensor dimension or a loop: torch indexes with int64, and a dimension this
# long already needs gigabytes. Sizes that only enter arithmetic (bytes of a KV cache at 2**40 tokens) may be larger.
MAX_SIZE = 2**31 - 1


def _show(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"tensor(shape={tuple(value.shape)}, dtype={value.dtype}, device={value.device})"
    return repr(value)


def tensor(name: str, value: Any, *, ndim_min: int | None = None, ndim: int | None = None,
           floating: bool = False, integer: bool = False) -> torch.Tensor:
    """A tensor with the given number of dimensions; ``floating``: a real floating dtype; ``integer``: an integer one."""
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__} {_show(value)}")
    if ndim is not None and value.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimension(s), got {_show(value)}")
    if ndim_min is not None and value.ndim < ndim_min:
        raise ValueError(f"{name} must have at least {ndim_min} dimension(s), got {_show(value)}")
    if floating and not value.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got {_show(value)}")
    if integer and (value.is_floating_point() or value.is_complex() or value.dtype == torch.bool):
        raise TypeError(f"{name} must be an integer tensor, got {_show(value)}")
    return value


def finite(name: str, value: torch.Tensor) -> torch.Tensor:
    if not bool(torch.isfinite(value).all()):
        raise ValueError(f"{name} must be finite (no NaN or inf), got {_show(value)} with non-finite entries")
    return value


def number(name: str, value: Any, *, positive: bool = False, min_value: float | None = None,
           max_value: float | None = None, integer: bool = False) -> float:
    """A real number (an int where ``integer``): never a bool, a string or a tensor, always finite."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        kind = "an int" if integer else "a real number"
        raise TypeError(f"{name} must be {kind}, got {type(value).__name__} {_show(value)}")
    if integer and not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    # Only a float can be inf or NaN. (Asking an int is also what a compiled model cannot do with a symbolic size.)
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}")
    if positive and not value > 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    if min_value is not None and value < min_value:
        raise ValueError(f"{name} must be >= {min_value}, got {value!r}")
    if max_value is not None and value > max_value:
        raise ValueError(f"{name} must be <= {max_value}, got {value!r}")
    return value


def size(name: str, value: Any, *, min_value: int = 1) -> int:
    """An int that becomes a tensor dimension or a loop count: min_value (default 1) … MAX_SIZE."""
    number(name, value, integer=True, min_value=min_value)
    if value > MAX_SIZE:
        raise ValueError(f"{name} must be at most 2**31 - 1 (a tensor dimension), got {value!r}")
    return int(value)


def axis(name: str, value: Any, ndim: int) -> int:
    """A dimension index of a tensor with ``ndim`` dimensions, negative counting from the end."""
    number(name, value, integer=True)
    if not -ndim <= value < ndim:
        raise ValueError(f"{name} must be a dimension of a {ndim}-dimensional tensor (-{ndim} … {ndim - 1}), "
                         f"got {value!r}")
    return int(value)


def flag(name: str, value: Any) -> bool:
    """A bool: 1, "True" or None are not taken for one."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__} {_show(value)}")
    return value


def text(name: str, value: Any, *, empty: bool = False) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__} {_show(value)}")
    if not empty and not value:
        raise ValueError(f"{name} must not be empty")
    return value


def function(name: str, value: Any) -> Callable:
    if not callable(value):
        raise TypeError(f"{name} must be callable, got {type(value).__name__} {_show(value)}")
    return value


def module(name: str, value: Any) -> torch.nn.Module:
    if not isinstance(value, torch.nn.Module):
        raise TypeError(f"{name} must be a torch.nn.Module, got {type(value).__name__} {_show(value)}")
    return value


def mapping(name: str, value: Any) -> Mapping:
    if not isinstance(value, Mapping):
        raise TypeError(f"{name} must be a dict, got {type(value).__name__} {_show(value)}")
    return value


def numbers(name: str, value: Any, *, integer: bool = False, min_len: int = 1, **bounds: Any) -> list:
    """A list or tuple of numbers, each checked as :func:`number` would (``name[i]`` in the message)."""
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, (list, tuple)):
        raise TypeError(f"{name} must be a list of {'ints' if integer else 'numbers'}, got {type(value).__name__} "
                        f"{_show(value)}")
    if len(value) < min_len:
        raise ValueError(f"{name} must hold at least {min_len} value(s), got {list(value)!r}")
    for i, item in enumerate(value):
        number(f"{name}[{i}]", item, integer=integer, **bounds)
    return list(value)


def path(name: str, value: Any) -> Path:
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{name} must be a path (str or pathlib.Path), got {type(value).__name__} {_show(value)}")
    return Path(value)


def generator(name: str, value: Any, *, optional: bool = True) -> torch.Generator | None:
    if value is None and optional:
        return None
    if not isinstance(value, torch.Generator):
        raise TypeError(f"{name} must be a torch.Generator{' or None' if optional else ''}, got "
                        f"{type(value).__name__} {_show(value)}")
    return value


def device(name: str, value: Any) -> torch.device:
    """A torch device that torch has here: 'cuda:3' on a machine with one GPU is refused by name."""
    if isinstance(value, bool) or not isinstance(value, (str, torch.device)):
        raise TypeError(f"{name} must be a torch.device or a device string such as 'cpu' or 'cuda', got "
                        f"{type(value).__name__} {_show(value)}")
    try:
        found = torch.device(value)
    except RuntimeError:
        raise ValueError(f"{name} must name a torch device such as 'cpu', 'cuda' or 'mps', got {value!r}") from None
    if torch.compiler.is_compiling():
        # Traced inside a compiled model, the device comes from a tensor that is already on it; asking torch how many
        # GPUs there are would break the graph (fullgraph=True refuses).
        return found
    if found.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0 or (found.index is not None and found.index >= count):
            raise ValueError(f"{name}={str(value)!r} but torch sees {count} CUDA device(s)")
    elif found.type == "mps":
        if getattr(torch.backends, "mps", None) is None or not torch.backends.mps.is_available():
            raise ValueError(f"{name}={str(value)!r} but torch has no MPS device here")
    elif found.type != "cpu":
        raise ValueError(f"{name} must be 'cpu', 'cuda', 'cuda:N' or 'mps', got {value!r}")
    return found


def token_ids(name: str, value: Any, vocab_size: int, *, ndim: int | None = 2) -> torch.Tensor:
    """Integer token ids in 0 … vocab_size - 1 (int64, int32 or the corpus's uint8)."""
    tensor(name, value, ndim=ndim)
    if value.is_floating_point() or value.is_complex() or value.dtype == torch.bool:
        raise TypeError(f"{name} must hold integer token ids, got {_show(value)}")
    wide = value.long()  # uint8 ids compared with vocab_size 256 would wrap around
    if value.numel() and (bool((wide < 0).any()) or bool((wide >= vocab_size).any())):
        raise ValueError(f"{name} must hold token ids in 0 … {vocab_size - 1} (vocab_size={vocab_size}), got values "
                         f"{int(value.min())} … {int(value.max())}")
    return value


def choice(name: str, value: Any, options: Iterable[str]) -> str:
    options = tuple(options)
    if not isinstance(value, str) and all(isinstance(option, str) for option in options):
        raise TypeError(f"{name} must be one of {options} (a str), got {type(value).__name__} {_show(value)}")
    if value not in options:
        raise ValueError(f"{name} must be one of {options}, got {value!r}{did_you_mean(value, options)}")
    return value


def close_matches(value: Any, options: Iterable[str], *, n: int = 3, cutoff: float = 0.6) -> list[str]:
    """The options closest to a misspelt name (difflib's ratio at least ``cutoff``), closest first."""
    if not isinstance(value, str):
        return []
    return difflib.get_close_matches(value, [str(option) for option in options], n=n, cutoff=cutoff)


def did_you_mean(value: Any, options: Iterable[str]) -> str:
    """``"; did you mean 'llama3'?"`` for a misspelt name (:func:`close_matches`), else ``""``."""
    close = close_matches(value, options)
    return f"; did you mean {' or '.join(map(repr, close))}?" if close else ""


def dtype(name: str, value: Any, *, floating: bool = True) -> torch.dtype:
    if not isinstance(value, torch.dtype):
        raise TypeError(f"{name} must be a torch.dtype, got {type(value).__name__} {value!r}")
    if floating and not value.is_floating_point:
        raise TypeError(f"{name} must be a floating-point dtype, got {value}")
    return value


def query_key_sizes(q_len: Any, k_len: Any) -> tuple[int, int]:
    """q_len and k_len (default: q_len), queries being the last q_len of k_len positions, each small enough to be a
    tensor dimension."""
    k_len = q_len if k_len is None else k_len
    number("q_len", q_len, integer=True, positive=True)
    number("k_len", k_len, integer=True, positive=True)
    if k_len < q_len:
        raise ValueError(f"k_len must be >= q_len (queries are the last q_len positions), got k_len={k_len}, q_len={q_len}")
    return size("q_len", q_len), size("k_len", k_len)


def positions(name: str, value: Any, *, ndim: int | None = None, integer: bool = False) -> torch.Tensor:
    """A tensor of positions or distances: integers, or (unless ``integer``) finite reals; never bool or complex."""
    tensor(name, value, ndim=ndim)
    if value.dtype == torch.bool or value.is_complex() or (integer and value.is_floating_point()):
        raise TypeError(f"{name} must hold integers{'' if integer else ' or reals'}, got dtype {value.dtype}")
    if value.is_floating_point():
        finite(name, value)
    return value


def owned_options(argument: str, kind: Any, registry: Mapping[str, Any], given: Mapping[str, Any], *, option: str,
                  required: str | None = None) -> None:
    """``kind`` one of ``registry``, and options that each belong to one kind of it: a mask's ``window`` or
    ``chunk_size``, a normaliser's ``sink`` or ``sigmoid_bias``. Each entry names the option it reads in its attribute
    ``option`` (None: it reads none); ``required`` names the attribute that says whether it must be given (without
    one, it must). An option given with another kind is an error, not silently ignored."""
    choice(argument, kind, registry)
    owners = {getattr(entry, option): name for name, entry in registry.items() if getattr(entry, option) is not None}
    must = True if required is None else getattr(registry[kind], required)
    for name, value in given.items():
        if owners[name] != kind:
            if value is not None:
                raise ValueError(f"{name} only applies to {argument}={owners[name]!r}, got {name}={_show(value)} "
                                 f"with {argument}={kind!r}")
        elif value is None and must:
            raise ValueError(f"{argument}={kind!r} needs {name}, got None")


def scores(name: str, value: Any, min_len: int) -> torch.Tensor:
    """A floating tensor of finite scores with at least ``min_len`` entries (distances) in its last dimension."""
    tensor(name, value, ndim_min=1, floating=True)
    if value.shape[-1] < min_len:
        raise ValueError(f"{name} must hold at least {min_len} distances in its last dimension, got "
                         f"{tuple(value.shape)}")
    return finite(name, value)


def broadcastable_to(name: str, value: torch.Tensor, shape: tuple[int, ...]) -> None:
    """value must broadcast *to* shape (not merely with it)."""
    # It must broadcast *to* the shape, not with it: a mask for all 8 positions passed with 1 query would
    # otherwise silently turn the output into 8 rows.
    try:
        ok = torch.broadcast_shapes(value.shape, shape) == torch.Size(shape)
    except RuntimeError:
        ok = False
    if not ok:
        raise ValueError(f"{name} of shape {tuple(value.shape)} does not broadcast to {shape}")


def real_or_tensor(name: str, value: Any, *, positive: bool = False, min_value: float | None = None) -> torch.Tensor:
    """A real number or a floating tensor of them, finite, each > 0 where ``positive`` and >= ``min_value``; as float64
    (a tensor keeps its device)."""
    if not isinstance(value, torch.Tensor):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"{name} must be a real number or a floating-point tensor, got {type(value).__name__} "
                            f"{_show(value)}")
        number(name, value, positive=positive, min_value=min_value)
        return torch.tensor(float(value), dtype=torch.float64)
    tensor(name, value, floating=True)
    finite(name, value)
    if positive and not bool((value > 0).all()):
        raise ValueError(f"{name} must be > 0, got {_show(value)} with entries <= 0")
    if min_value is not None and not bool((value >= min_value).all()):
        raise ValueError(f"{name} must be >= {min_value}, got {_show(value)} with entries below it")
    return value.to(torch.float64)


def logits(name: str, value: Any) -> torch.Tensor:
    """A floating tensor of logits: −inf hides an entry (weight 0); NaN and +inf have no meaning and are refused."""
    tensor(name, value, floating=True)
    if bool(torch.isnan(value).any()) or bool((value == math.inf).any()):
        raise ValueError(f"{name} must not contain NaN or +inf (−inf hides an entry), got {_show(value)} with such "
                         "entries")
    return value


def logit_rows(name: str, value: Any) -> torch.Tensor:
    """Rows of logits to normalise: at least one key each, −inf for a hidden key, no NaN or +inf."""
    tensor(name, value, ndim_min=1, floating=True)
    if value.shape[-1] == 0:
        raise ValueError(f"{name} must hold at least one key in its last dimension, got shape {tuple(value.shape)}")
    return logits(name, value)


def qkv(q: Any, k: Any, v: Any) -> None:
    """q, k and v of one attention call: shapes, one dtype, one device, finite entries."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        tensor(name, x, ndim=4, floating=True)
    batch, hq, tq, d = q.shape
    _, hkv, tk, dk = k.shape
    if k.shape[0] != batch or v.shape[0] != batch:
        raise ValueError(f"q, k and v must share the batch size, got {q.shape[0]}, {k.shape[0]}, {v.shape[0]}")
    if dk != d:
        raise ValueError(f"k.shape[-1] must equal q.shape[-1]={d} (the q·k dot product), got {dk}")
    if d == 0:
        raise ValueError(f"q and k must have head_dim > 0, got q of shape {tuple(q.shape)}")
    if v.shape[1] != hkv or v.shape[2] != tk:
        raise ValueError(f"v must be [batch, {hkv}, {tk}, dv] like k, got {tuple(v.shape)}")
    if hkv == 0 or hq % hkv:
        raise ValueError(f"q has {hq} heads, which is not a multiple of k's {hkv} heads (grouped-query attention)")
    if tk < tq:
        raise ValueError(f"k must have at least as many positions as q (queries are the last ones), got {tk} < {tq}")
    if tk == 0:
        raise ValueError(f"k must hold at least one key position, got k of shape {tuple(k.shape)}")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k and v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k and v must be on one device, got {q.device}, {k.device}, {v.device}")
    for name, x in (("q", q), ("k", k), ("v", v)):
        finite(name, x)


def query_scale(value: Any, q: torch.Tensor) -> None:
    """An optional factor per query row: finite, broadcastable to [batch, Hq, Tq] of q."""
    if value is not None:
        tensor("query_scale", value, floating=True)
        broadcastable_to("query_scale", value, tuple(q.shape[:3]))
        finite("query_scale", value)


def flex_backward(*tensors: torch.Tensor | None, alternative: str) -> None:
    """flex_attention has no backward on the CPU and refuses, there, any input that requires grad (under
    torch.no_grad() too): refuse it here by name, with what to use instead."""
    if any(t is not None and t.requires_grad and t.device.type == "cpu" for t in tensors):
        raise ValueError(f"impl='flex' has no backward on the CPU (flex_attention runs forward only there), and an "
                         f"input requires grad; use {alternative}, or detach the inputs")


def cos_sin(name: str, value: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """A (cos, sin) pair of floating tensors of one shape [..., T, rotary_dim], as rope_cos_sin returns it."""
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        length = f" of length {len(value)}" if isinstance(value, (tuple, list)) else ""
        raise TypeError(f"{name} must be a (cos, sin) pair of tensors, got {type(value).__name__}{length}")
    cos, sin = value
    tensor(f"{name}[0]", cos, ndim_min=2, floating=True)
    tensor(f"{name}[1]", sin, ndim_min=2, floating=True)
    if cos.shape != sin.shape:
        raise ValueError(f"{name} must hold cos and sin of one shape, got {tuple(cos.shape)} and {tuple(sin.shape)}")
    return cos, sin


def instance(name: str, value: Any, kind: type, *, optional: bool = False) -> Any:
    """An instance of ``kind`` (a config dataclass, a model class): a dict or another object is refused by name."""
    if value is None and optional:
        return None
    if not isinstance(value, kind):
        raise TypeError(f"{name} must be a {kind.__name__}{' or None' if optional else ''}, got "
                        f"{type(value).__name__} {_show(value)}")
    return value
