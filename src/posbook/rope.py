"""Rotary position embedding: cos/sin tables, rotation of q and k, and the two memory layouts.

Chapter "RoPE from first principles" derives everything here. Two layouts exist in the wild:

* ``"interleaved"`` — RoFormer (Su et al., Eq. 34), GPT-J, Meta's original LLaMA code: plane i is the
  pair of dimensions (2i, 2i+1).
* ``"half"`` — GPT-NeoX and Hugging Face Llama: plane i is (i, i + rotary_dim/2), rotated with ``rotate_half``.

Both give the same attention scores when the q/k projection weights are permuted to match
(:func:`interleaved_to_half`); weights trained for one layout run through the other give scores that are still a
function of relative position, but of the wrong planes and frequencies.
"""

from __future__ import annotations

import torch

from . import _checks

LAYOUTS = ("half", "interleaved")


def rope_cos_sin(positions: torch.Tensor, inv_freq: torch.Tensor, *, attention_factor: float = 1.0,
                 layout: str = "half", dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of the angles position·θ_i, laid out for :func:`apply_rope`.

    Args:
        positions: 1-D tensor [T] of token positions (integers or reals).
        inv_freq: 1-D tensor [rotary_dim/2] of frequencies θ_i.
        attention_factor: multiplies cos and sin; folding it in here scales every q·k logit by its square
            (YaRN's attention scaling, chapter "Context extension").
        layout: ``"half"`` (cos = [c, c]) or ``"interleaved"`` (cos = [c0, c0, c1, c1, ...]).
        dtype: the dtype the angles are computed in, and of the result. Keep float32 (the default) or float64:
            in bfloat16 the position itself is rounded (bf16 holds integers exactly only up to 256), so
            neighbouring positions get the same angles. Autocast is switched off inside, as Hugging Face does.

    Returns:
        (cos, sin), each [T, rotary_dim].
    """
    _checks.tensor("positions", positions, ndim=1)
    _checks.tensor("inv_freq", inv_freq, ndim=1, floating=True)
    if inv_freq.numel() == 0:
        raise ValueError("inv_freq must hold at least one frequency, got an empty tensor")
    if positions.device != inv_freq.device:
        raise ValueError(f"positions and inv_freq must be on one device, got {positions.device} and {inv_freq.device}")
    _checks.finite("inv_freq", inv_freq)
    if positions.is_floating_point():
        _checks.finite("positions", positions)
    elif positions.dtype == torch.bool or positions.is_complex():
        raise TypeError(f"positions must hold integers or reals, got dtype {positions.dtype}")
    _checks.number("attention_factor", attention_factor, positive=True)
    _checks.choice("layout", layout, LAYOUTS)
    _checks.dtype("dtype", dtype)

    with torch.autocast(device_type=positions.device.type, enabled=False):
        angles = positions.to(dtype)[:, None] * inv_freq.to(dtype)[None, :]
        cos, sin = angles.cos(), angles.sin()
        if attention_factor != 1.0:
            cos, sin = cos * attention_factor, sin * attention_factor
    if layout == "half":
        return torch.cat((cos, cos), dim=-1), torch.cat((sin, sin), dim=-1)
    return cos.repeat_interleave(2, dim=-1), sin.repeat_interleave(2, dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *, layout: str = "half") -> torch.Tensor:
    """Rotate the first ``rotary_dim = cos.shape[-1]`` dimensions of x; pass the rest through (partial RoPE).

    Args:
        x: [..., T, head_dim] queries or keys.
        cos, sin: [T, rotary_dim] (or with leading dimensions that broadcast against x), from :func:`rope_cos_sin`
            with the same ``layout``.
        layout: ``"half"`` or ``"interleaved"``.

    The result has x's dtype: cos and sin are cast to it, as Hugging Face does (the angles themselves should have
    been computed in float32, see :func:`rope_cos_sin`).
    """
    _checks.tensor("x", x, ndim_min=2, floating=True)
    _checks.tensor("cos", cos, ndim_min=2, floating=True)
    _checks.tensor("sin", sin, ndim_min=2, floating=True)
    _checks.choice("layout", layout, LAYOUTS)
    if cos.shape != sin.shape:
        raise ValueError(f"cos and sin must have one shape, got {tuple(cos.shape)} and {tuple(sin.shape)}")
    if x.device != cos.device or x.device != sin.device:
        raise ValueError(f"x, cos and sin must be on one device, got {x.device}, {cos.device}, {sin.device}")
    rotary_dim, head_dim = cos.shape[-1], x.shape[-1]
    if rotary_dim % 2 or rotary_dim == 0:
        raise ValueError(f"cos.shape[-1] (rotary_dim) must be even and > 0, got {rotary_dim}")
    if rotary_dim > head_dim:
        raise ValueError(f"cos.shape[-1] (rotary_dim={rotary_dim}) must be <= x.shape[-1] (head_dim={head_dim})")
    if cos.shape[-2] != x.shape[-2]:
        raise ValueError(f"cos has {cos.shape[-2]} positions but x has {x.shape[-2]} (x must be [..., T, head_dim])")

    half = rotary_dim // 2
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    if layout == "half":
        # In the half layout cos = [c, c]: one half of the table is enough.
        c, s = cos[..., :half], sin[..., :half]
        x1, x2 = x[..., :half], x[..., half:rotary_dim]
        rotated = (x1 * c - x2 * s, x2 * c + x1 * s)
        parts = [*rotated, x[..., rotary_dim:]] if rotary_dim < head_dim else list(rotated)
        return torch.cat(parts, dim=-1)
    c, s = cos[..., 0::2], sin[..., 0::2]
    pairs = x[..., :rotary_dim].unflatten(-1, (half, 2))
    xe, xo = pairs[..., 0], pairs[..., 1]
    out = torch.stack((xe * c - xo * s, xo * c + xe * s), dim=-1).flatten(-2)
    return torch.cat((out, x[..., rotary_dim:]), dim=-1) if rotary_dim < head_dim else out


def _layout_index(size: int, head_dim: int, rotary_dim: int, to_half: bool) -> torch.Tensor:
    # Within each head, the rotary part is reordered; the pass-through part keeps its place.
    within = torch.arange(head_dim)
    evens_then_odds = torch.cat((torch.arange(0, rotary_dim, 2), torch.arange(1, rotary_dim, 2)))
    if to_half:
        within[:rotary_dim] = evens_then_odds          # half[j] = interleaved[2j], half[j+h] = interleaved[2j+1]
    else:
        within[:rotary_dim] = torch.argsort(evens_then_odds)
    heads = torch.arange(size // head_dim)[:, None] * head_dim
    return (heads + within[None, :]).reshape(-1)


def _permute_layout(x: torch.Tensor, dim: int, head_dim: int | None, rotary_dim: int | None,
                    to_half: bool) -> torch.Tensor:
    _checks.tensor("x", x, ndim_min=1)
    _checks.number("dim", dim, integer=True)
    if not -x.ndim <= dim < x.ndim:
        raise ValueError(f"dim must be in [{-x.ndim}, {x.ndim - 1}] for x with {x.ndim} dimensions, got {dim}")
    size = x.shape[dim]
    head_dim = size if head_dim is None else _checks.number("head_dim", head_dim, integer=True, positive=True)
    rotary_dim = head_dim if rotary_dim is None else _checks.number("rotary_dim", rotary_dim, integer=True,
                                                                    positive=True)
    if size % head_dim:
        raise ValueError(f"x.shape[{dim}]={size} must be a multiple of head_dim={head_dim}")
    if rotary_dim % 2 or rotary_dim > head_dim:
        raise ValueError(f"rotary_dim must be even and <= head_dim={head_dim}, got {rotary_dim}")
    index = _layout_index(size, head_dim, rotary_dim, to_half).to(x.device)
    return x.index_select(dim, index)


def interleaved_to_half(x: torch.Tensor, *, dim: int = -1, head_dim: int | None = None,
                        rotary_dim: int | None = None) -> torch.Tensor:
    """Reorder dimension ``dim`` from the interleaved layout to the half layout, head by head.

    For vectors (q, k, cos, sin) use ``dim=-1``. For a q/k projection weight [n_heads·head_dim, hidden] use
    ``dim=0, head_dim=...``: the output rows are reordered, so the permuted weight produces half-layout q and k
    and, with :func:`apply_rope` in the half layout, exactly the same attention scores. Only the first
    ``rotary_dim`` dimensions of each head move (partial RoPE).
    """
    return _permute_layout(x, dim, head_dim, rotary_dim, to_half=True)


def half_to_interleaved(x: torch.Tensor, *, dim: int = -1, head_dim: int | None = None,
                        rotary_dim: int | None = None) -> torch.Tensor:
    """The inverse of :func:`interleaved_to_half`."""
    return _permute_layout(x, dim, head_dim, rotary_dim, to_half=False)
