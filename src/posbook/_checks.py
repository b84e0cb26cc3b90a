"""Argument checks shared by the public functions.

Every message names the argument, the value received and what was expected, so a reader who passes the wrong
thing learns what to pass instead. Nothing is coerced silently.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping

import torch


def _show(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"tensor(shape={tuple(value.shape)}, dtype={value.dtype}, device={value.device})"
    return repr(value)


def tensor(name: str, value: Any, *, ndim_min: int | None = None, ndim: int | None = None,
           floating: bool = False) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__} {_show(value)}")
    if ndim is not None and value.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimension(s), got {_show(value)}")
    if ndim_min is not None and value.ndim < ndim_min:
        raise ValueError(f"{name} must have at least {ndim_min} dimension(s), got {_show(value)}")
    if floating and not value.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got {_show(value)}")
    return value


def finite(name: str, value: torch.Tensor) -> torch.Tensor:
    if not bool(torch.isfinite(value).all()):
        raise ValueError(f"{name} must be finite (no NaN or inf), got {_show(value)} with non-finite entries")
    return value


def number(name: str, value: Any, *, positive: bool = False, min_value: float | None = None,
           integer: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        kind = "an int" if integer else "a real number"
        raise TypeError(f"{name} must be {kind}, got {type(value).__name__} {value!r}")
    if integer and not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}")
    if positive and not value > 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    if min_value is not None and value < min_value:
        raise ValueError(f"{name} must be >= {min_value}, got {value!r}")
    return value


def choice(name: str, value: Any, options: Iterable[str]) -> str:
    options = tuple(options)
    if value not in options:
        raise ValueError(f"{name} must be one of {options}, got {value!r}")
    return value


def dtype(name: str, value: Any, *, floating: bool = True) -> torch.dtype:
    if not isinstance(value, torch.dtype):
        raise TypeError(f"{name} must be a torch.dtype, got {type(value).__name__} {value!r}")
    if floating and not value.is_floating_point:
        raise TypeError(f"{name} must be a floating-point dtype, got {value}")
    return value


def query_key_lengths(q_len: Any, k_len: Any) -> tuple[int, int]:
    """q_len and k_len (default: q_len), queries being the last q_len of k_len positions."""
    k_len = q_len if k_len is None else k_len
    number("q_len", q_len, integer=True, positive=True)
    number("k_len", k_len, integer=True, positive=True)
    if k_len < q_len:
        raise ValueError(f"k_len must be >= q_len (queries are the last q_len positions), got k_len={k_len}, q_len={q_len}")
    return q_len, k_len


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
