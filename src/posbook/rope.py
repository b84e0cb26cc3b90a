"""Rotary position embedding: cos/sin tables, rotation of q and k, and the two memory layouts.

Chapter "RoPE from first principles" derives everything here. Two layouts exist in the wild:

* ``"interleaved"`` — RoFormer (Su et al., Eq. 34), GPT-J, Meta's original LLaMA code: plane i is the
  pair of dimensions (2i, 2i+1).
* ``"half"`` — GPT-NeoX and Hugging Face Llama: plane i is (i, i + rotary_dim/2), rotated with ``rotate_half``.

Both give the same attention scores when the q/k projection weights are permuted to match
(:func:`interleaved_to_half`); weights trained for one layout run through the other give scores that are still a
function of relative position, but of the wrong planes and frequencies.

Multimodal RoPE (M-RoPE: Qwen2-VL, Qwen2.5-VL, Qwen3-VL) gives each token three positions, time, height and width,
and lets each plane read one of them (:func:`mrope_plane_axes`); :func:`rope_cos_sin` takes the [3, T] positions.

:func:`apply_rope` checks its arguments and rotates in x's dtype, as Hugging Face does; :func:`rotate` is the
rotation unchecked, in float32, for callers that made their q and k themselves. Large CPU inputs take the blocked
path of :mod:`posbook.rope_cpu`, which gives the same bits.
"""

from __future__ import annotations

import torch

from . import _checks
from .rope_cpu import fast_path_applies, rotate_blocked

LAYOUTS = ("half", "interleaved")
_MROPE_AXES = ("time", "height", "width")


def mrope_plane_axes(mrope_section: list[int] | tuple[int, ...], n_planes: int, *,
                     interleaved: bool = False) -> torch.Tensor:
    """Which position row each plane reads under multimodal RoPE: a [n_planes] int64 tensor of 0 (time), 1 (height)
    or 2 (width), plane i being the pair of dimensions with frequency θ_i.

    ``mrope_section`` gives the number of planes per row, summing to n_planes = rotary_dim/2. Two layouts, as in
    Hugging Face's rotary modules:

    * contiguous (Qwen2-VL, Qwen2.5-VL: ``Qwen2VLRotaryEmbedding.recomposition_frequencies``): the first
      section[0] planes, the fastest, read time, the next section[1] height, the last section[2] width;
    * interleaved (Qwen3-VL, ``mrope_interleaved``: ``Qwen3VLTextRotaryEmbedding``): plane i reads height if
      i ≡ 1 (mod 3) and i < 3·section[1], width if i ≡ 2 (mod 3) and i < 3·section[2], time otherwise, so every
      axis gets fast and slow planes. section[0] is not read; the rule gives each axis its share only if the last
      height and width planes, 3·section[1] − 2 and 3·section[2] − 1, exist. Hugging Face silently lays out other
      sections with fewer height/width planes than they state; here they are an error.

    For text tokens the three rows are equal, and either layout is ordinary RoPE.
    """
    _checks.number("n_planes", n_planes, integer=True, positive=True)
    _checks.flag("interleaved", interleaved)
    if not isinstance(mrope_section, (list, tuple)):
        raise TypeError(f"mrope_section must be a list of 3 ints (planes for time, height, width), got "
                        f"{type(mrope_section).__name__} {mrope_section!r}")
    if len(mrope_section) != 3:
        raise ValueError(f"mrope_section must have 3 entries (planes for time, height, width), got {mrope_section!r}")
    for axis, planes in zip(_MROPE_AXES, mrope_section):
        _checks.number(f"mrope_section ({axis})", planes, integer=True, min_value=0)
    if sum(mrope_section) != n_planes:
        raise ValueError(f"mrope_section must sum to the number of planes, rotary_dim/2 = inv_freq.numel() = "
                         f"{n_planes}, got {list(mrope_section)} (sum {sum(mrope_section)})")
    if not interleaved:
        return torch.repeat_interleave(torch.arange(3), torch.tensor(mrope_section))
    plane = torch.arange(n_planes)
    axes = torch.zeros(n_planes, dtype=torch.int64)
    for axis in (1, 2):
        axes[(plane % 3 == axis) & (plane < 3 * mrope_section[axis])] = axis
    counts = torch.bincount(axes, minlength=3).tolist()
    if counts != list(mrope_section):
        raise ValueError(f"mrope_section {list(mrope_section)} cannot be interleaved over {n_planes} planes: it "
                         f"gives time, height, width {counts} planes (the last height and width planes, "
                         f"3·section[1] − 2 and 3·section[2] − 1, must be below {n_planes})")
    return axes


def rope_cos_sin(positions: torch.Tensor, inv_freq: torch.Tensor, *, attention_factor: float = 1.0,
                 layout: str = "half", dtype: torch.dtype = torch.float32,
                 mrope_section: list[int] | tuple[int, ...] | None = None,
                 mrope_interleaved: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of the angles position·θ_i, laid out for :func:`apply_rope`.

    Args:
        positions: tensor [T] of token positions (integers or reals). With ``mrope_section``, also [3, T] or
            [3, B, T]: time, height and width position ids, as Hugging Face's Qwen-VL models build them. A [T]
            tensor then stands for text, all three rows equal (ordinary RoPE). Two dimensions always mean [3, T]
            (a [B, T] batch with B = 3 would be ambiguous): pass a batch of text as [3, B, T].
        inv_freq: 1-D tensor [rotary_dim/2] of frequencies θ_i.
        attention_factor: multiplies cos and sin; folding it in here scales every q·k logit by its square
            (YaRN's attention scaling, chapter "Context extension").
        layout: ``"half"`` (cos = [c, c]) or ``"interleaved"`` (cos = [c0, c0, c1, c1, ...]).
        dtype: the dtype the angles are computed in, and of the result. Keep float32 (the default) or float64:
            in bfloat16 the position itself is rounded (bf16 holds integers exactly only up to 256), so
            neighbouring positions get the same angles. Autocast is switched off inside, as Hugging Face does.
        mrope_section: planes per position row (time, height, width) for multimodal RoPE, summing to
            inv_freq.numel(); plane i takes its angle from the row :func:`mrope_plane_axes` assigns it.
            :func:`posbook.scaling.mrope_layout` reads it, and ``mrope_interleaved``, from a config.
        mrope_interleaved: the Qwen3-VL layout (rows interleaved plane by plane) instead of contiguous sections.

    Returns:
        (cos, sin), each [T, rotary_dim], or [B, T, rotary_dim] for [3, B, T] positions (for x of shape
        [B, heads, T, head_dim], pass ``cos[:, None]``, ``sin[:, None]`` to :func:`apply_rope`).
    """
    _checks.tensor("positions", positions)
    _checks.tensor("inv_freq", inv_freq, ndim=1, floating=True)
    if inv_freq.numel() == 0:
        raise ValueError("inv_freq must hold at least one frequency, got an empty tensor")
    _checks.flag("mrope_interleaved", mrope_interleaved)
    if mrope_section is None:
        if mrope_interleaved:
            raise ValueError("mrope_interleaved=True needs mrope_section, got None")
        if positions.ndim != 1:
            raise ValueError(f"positions must have 1 dimension [T] (or [3, T], [3, B, T] with mrope_section), got "
                             f"{_checks._show(positions)}")
        axes = None
    else:
        axes = mrope_plane_axes(mrope_section, inv_freq.numel(), interleaved=mrope_interleaved)
        if positions.ndim not in (1, 2, 3) or (positions.ndim > 1 and positions.shape[0] != 3):
            raise ValueError(f"positions must be [T], [3, T] or [3, B, T] (time, height, width rows) with "
                             f"mrope_section, got {_checks._show(positions)}")
    if positions.device != inv_freq.device:
        raise ValueError(f"positions and inv_freq must be on one device, got {positions.device} and {inv_freq.device}")
    _checks.finite("inv_freq", inv_freq)
    _checks.positions("positions", positions)
    _checks.number("attention_factor", attention_factor, positive=True)
    _checks.choice("layout", layout, LAYOUTS)
    _checks.dtype("dtype", dtype)

    if axes is not None and positions.ndim > 1:
        # plane i reads row axes[i]: [3, ..., T] -> [n_planes, ..., T] -> [..., T, n_planes]
        return _cos_sin(positions[axes.to(positions.device)].movedim(0, -1), inv_freq, attention_factor, layout, dtype)
    return _cos_sin(positions[..., None], inv_freq, attention_factor, layout, dtype)


def cos_sin_at(positions: torch.Tensor, inv_freq: torch.Tensor, *, attention_factor: float = 1.0,
               layout: str = "half", dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`rope_cos_sin` unchecked and without mrope, for positions of any shape [..., T] (e.g. a batch of
    position ids [B, T]) → (cos, sin) of [..., T, rotary_dim]; for callers that checked their positions and
    frequencies once (the experiment model, at every step). Equal, element for element, to :func:`rope_cos_sin` of
    the same positions."""
    return _cos_sin(positions[..., None], inv_freq, attention_factor, layout, dtype)


def _cos_sin(positions: torch.Tensor, inv_freq: torch.Tensor, attention_factor: float, layout: str,
             dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of positions · inv_freq, positions [..., 1] or [..., n_planes] (one row per plane)."""
    with torch.autocast(device_type=positions.device.type, enabled=False):
        angles = positions.to(dtype) * inv_freq.to(dtype)
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
    been computed in float32, see :func:`rope_cos_sin`); :func:`rotate` computes in float32 instead. Large CPU
    inputs outside autograd take a blocked, cache-friendly path that returns the same bits as the formula and runs
    on ``torch.get_num_threads()`` threads (:mod:`posbook.rope_cpu`). The entries are not checked for NaN or inf (a
    pass over every element would cost as much as the rotation): a non-finite entry of x, cos or sin gives
    non-finite outputs where the formula uses it, as any elementwise torch op does.
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

    return _rotated(x, cos, sin, layout)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *, layout: str = "half") -> torch.Tensor:
    """:func:`apply_rope` unchecked, computing in float32 (float64 stays float64) and rounding once to x's dtype.

    The experiment model, :class:`posbook.diff_attention.DiffAttention` and :mod:`posbook.theory` rotate through
    it, so one rotation has one precision wherever the book runs it: under autocast q and k arrive in bfloat16, and
    a bfloat16 product would round every rotated pair to 8 bits of mantissa, far past the tables' own precision.
    In float32 (and float64) it gives :func:`apply_rope`'s bits. Arguments as for :func:`apply_rope`; the caller
    made or checked them.
    """
    compute = torch.promote_types(x.dtype, torch.float32)
    return _rotated(x.to(compute), cos, sin, layout).to(x.dtype)


def _rotated(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str) -> torch.Tensor:
    """The rotation in x's dtype: the blocked CPU path where it applies (the same bits), else the formula."""
    if fast_path_applies(x, cos, sin):
        return rotate_blocked(x, cos, sin, layout)
    return _apply_rope_reference(x, cos, sin, layout)


def _apply_rope_reference(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str) -> torch.Tensor:
    """The rotation written as the formula: differentiable, runs anywhere, allocates a temporary per product."""
    rotary_dim, head_dim = cos.shape[-1], x.shape[-1]
    first, second = plane_slices(layout, rotary_dim)
    # Each plane's angle sits at both of its coordinates in cos and sin: the first one is enough.
    c, s = cos[..., first].to(x.dtype), sin[..., first].to(x.dtype)
    x1, x2 = x[..., first], x[..., second]
    rotated = (x1 * c - x2 * s, x2 * c + x1 * s)
    out = torch.cat(rotated, dim=-1) if layout == "half" else torch.stack(rotated, dim=-1).flatten(-2)
    return torch.cat((out, x[..., rotary_dim:]), dim=-1) if rotary_dim < head_dim else out


def plane_slices(layout: str, rotary_dim: int) -> tuple[slice, slice]:
    """Where the two coordinates of each plane sit in the last dimension, as (first, second): plane i is
    (first[i], second[i]), the pair of dimensions (i, i + rotary_dim/2) in the ``"half"`` layout and (2i, 2i + 1) in
    the ``"interleaved"`` one. Unchecked: ``layout`` one of ``LAYOUTS``, ``rotary_dim`` even."""
    half = rotary_dim // 2
    if layout == "half":
        return slice(0, half), slice(half, rotary_dim)
    return slice(0, rotary_dim, 2), slice(1, rotary_dim, 2)


def _layout_index(size: int, head_dim: int, rotary_dim: int, to_half: bool) -> torch.Tensor:
    # Within each head, the rotary part is reordered; the pass-through part keeps its place.
    within = torch.arange(head_dim)
    first, second = plane_slices("interleaved", rotary_dim)
    evens_then_odds = torch.cat((within[first], within[second]))   # the interleaved planes' coordinates, in order
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

    A permutation: it moves entries of any dtype (``torch.arange(8)`` shows where each dimension goes) and any
    value, NaN and inf included, unchanged.
    """
    return _permute_layout(x, dim, head_dim, rotary_dim, to_half=True)


def half_to_interleaved(x: torch.Tensor, *, dim: int = -1, head_dim: int | None = None,
                        rotary_dim: int | None = None) -> torch.Tensor:
    """The inverse of :func:`interleaved_to_half`: the same arguments, and like it a permutation of entries of any
    dtype and value (NaN and inf included)."""
    return _permute_layout(x, dim, head_dim, rotary_dim, to_half=False)
