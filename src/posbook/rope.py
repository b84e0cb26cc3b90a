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

import itertools
import math

import torch
from torch.autograd import forward_ad

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
    been computed in float32, see :func:`rope_cos_sin`). Large CPU inputs outside autograd take a blocked,
    cache-friendly path that returns the same bits as the formula (see ``_apply_rope_chunked``).
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

    if _fast_path_applies(x, cos, sin):
        return _apply_rope_chunked(x, cos, sin, layout)
    return _apply_rope_reference(x, cos, sin, layout)


def _apply_rope_reference(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str) -> torch.Tensor:
    """The rotation written as the formula: differentiable, runs anywhere, allocates a temporary per product."""
    rotary_dim, head_dim = cos.shape[-1], x.shape[-1]
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


# The fast path works on blocks of x of about this many bytes. A block's x, output, scratch buffer and cos/sin
# slices (about 5x this) then stay in the CPU caches across the four passes made over it, so main memory sees x
# read once and the output written once, as in a copy. Much smaller blocks lose to Python and per-call overhead
# (several µs per op; ops under 32k elements also run on a single thread); much larger ones fall out of cache.
# Measured with benchmarks/rope_apply.py on a 2-core AVX2 machine: 1-4 MiB within noise, 256 KiB 1.5-2x slower.
# Inputs up to two blocks go to the formula, which was as fast or faster there.
_BLOCK_BYTES = 1 << 20


def _fast_path_applies(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> bool:
    """Whether :func:`_apply_rope_chunked` may be used. It gives the same bits as the formula, but it writes into its
    output with ``out=`` and in-place ops, which nothing that records or transforms operations may see."""
    if x.numel() * x.element_size() <= 2 * _BLOCK_BYTES:
        return False      # small: the formula's temporaries stay in cache anyway, and it makes half as many calls
    if x.device.type != "cpu" or x.layout != torch.strided or type(x) is not torch.Tensor:
        return False      # on GPUs the one-kernel-per-op formula is already fast; subclasses may not support out=
    if torch.is_grad_enabled() and (x.requires_grad or cos.requires_grad or sin.requires_grad):
        return False      # autograd needs the formula's graph; writes into `out` cannot be differentiated
    if any(forward_ad.unpack_dual(t).tangent is not None for t in (x, cos, sin)):
        return False      # forward-mode AD has no rule for out= ops either
    if getattr(torch._C, "_are_functorch_transforms_active", lambda: False)():
        return False      # torch.func.vmap / grad / jvp cannot batch or differentiate out= ops
    if getattr(getattr(torch, "compiler", None), "is_compiling", lambda: False)():
        return False      # a compiler fuses the plain formula better than it traces a Python loop
    # The output must have x's shape: cos's leading dimensions (sin has the same shape) must each be 1 or x's. Any
    # other case (cos broadcasting x up, or not broadcasting at all) is left to the formula and its errors.
    rows, table_rows = x.shape[:-1], cos.shape[:-1]
    return len(table_rows) <= len(rows) and all(n in (1, m) for n, m in zip(reversed(table_rows), reversed(rows)))


def _row_blocks(rows: tuple[int, ...], rows_per_block: int) -> list[tuple]:
    """Index tuples that cut a tensor with leading shape ``rows`` (``x.shape[:-1]``) into blocks of at most about
    ``rows_per_block`` rows (or a single row where one row is already larger).

    Take the outermost dimension k whose slices ``x[i0, ..., ik]`` hold at most ``rows_per_block`` rows each; a block
    is ``step`` consecutive indices along k, for one index of every dimension before k. E.g. rows = (8, 16, 2048)
    and 2048 rows per block give the 128 blocks ``(b, slice(h, h + 1))``, one head each; rows = (8, 16, 1) gives
    one block, the whole tensor. For a contiguous x the blocks follow memory order, and all have the same
    shape except the last along k, which may be shorter in its first dimension.
    """
    k = next(k for k in range(len(rows)) if math.prod(rows[k + 1:]) <= rows_per_block)
    step = max(1, rows_per_block // max(1, math.prod(rows[k + 1:])))
    return [(*outer, slice(start, start + step))
            for outer in itertools.product(*(range(n) for n in rows[:k]))
            for start in range(0, rows[k], step)]


def _apply_rope_chunked(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str) -> torch.Tensor:
    """Same arithmetic as :func:`_apply_rope_reference`, rewritten for memory traffic.

    The formula makes six products and sums, each a fresh tensor half the size of x, then concatenates them into
    the output: three times x's size in temporaries, each written to and read back from main memory. On a CPU a fresh
    large allocation costs more still: the operating system maps and zeroes it page by page (4 KiB) on first write,
    which alone takes most of the time of a plain ``x.clone()``. Here the only large allocation is the output, and the
    work goes block by block (see ``_BLOCK_BYTES``), four passes over each block while it sits in cache. In the
    half layout (x = [x1, x2]; interleaved: the same with x1, x2 = even, odd dimensions)::

        out = x * cos_full                  # [x1·c, x2·c]
        tmp = x * sin_full                  # [x1·s, x2·s], into a scratch buffer reused by every block
        out1 -= tmp2;  out2 += tmp1         # [x1·c − x2·s, x2·c + x1·s]

    Each product is rounded to x.dtype and then subtracted or added in the same order as in the formula, so every
    result is the same IEEE operation on the same operands: bit-identical output. (NaNs stay NaN but may come back
    with another bit pattern: PyTorch's vectorised and scalar bf16/fp16 loops write different NaNs, so even a single
    op's NaN bits depend on its operands' strides.) ``torch.addcmul`` would save a pass but is not used: it may
    round once per multiply-add instead of twice (fused multiply-add; float32 arithmetic for bf16/fp16) — on an
    AVX2 CPU it changed about 15% of float32 results.
    """
    rotary_dim, head_dim = cos.shape[-1], x.shape[-1]
    half = rotary_dim // 2
    # Full-width tables built from the half the formula reads (c = cos[..., :half] or cos[..., 0::2]), so a
    # caller's cos whose two copies differ still gets exactly the formula's answer. Small: [..., T, rotary_dim].
    if layout == "half":
        c, s = cos[..., :half].to(x.dtype), sin[..., :half].to(x.dtype)
        cos_full, sin_full = torch.cat((c, c), dim=-1), torch.cat((s, s), dim=-1)
    else:
        c, s = cos[..., 0::2].to(x.dtype), sin[..., 0::2].to(x.dtype)
        cos_full, sin_full = c.repeat_interleave(2, dim=-1), s.repeat_interleave(2, dim=-1)
    rows = x.shape[:-1]
    cos_full, sin_full = cos_full.expand(*rows, rotary_dim), sin_full.expand(*rows, rotary_dim)   # views, no copy

    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    scratch = None
    for index in _row_blocks(rows, max(1, _BLOCK_BYTES // (head_dim * x.element_size()))):
        xb, ob = x[index], out[index]
        x_rot, out_rot = xb[..., :rotary_dim], ob[..., :rotary_dim]
        if scratch is None:      # the first block is the largest; later ones use a prefix of the same buffer
            scratch = torch.empty(x_rot.shape, dtype=x.dtype, device=x.device)
        tmp = scratch[:x_rot.shape[0]]
        torch.mul(x_rot, cos_full[index], out=out_rot)
        torch.mul(x_rot, sin_full[index], out=tmp)
        if layout == "half":
            out_rot[..., :half].sub_(tmp[..., half:])
            out_rot[..., half:].add_(tmp[..., :half])
        else:
            out_rot[..., 0::2].sub_(tmp[..., 1::2])
            out_rot[..., 1::2].add_(tmp[..., 0::2])
        if rotary_dim < head_dim:
            ob[..., rotary_dim:].copy_(xb[..., rotary_dim:])
    return out


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
