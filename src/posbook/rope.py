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
"""

from __future__ import annotations

import itertools
import math
import os
import platform
import threading
from concurrent.futures import ThreadPoolExecutor

import torch
from torch.autograd import forward_ad

from . import _checks

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
    if positions.is_floating_point():
        _checks.finite("positions", positions)
    elif positions.dtype == torch.bool or positions.is_complex():
        raise TypeError(f"positions must hold integers or reals, got dtype {positions.dtype}")
    _checks.number("attention_factor", attention_factor, positive=True)
    _checks.choice("layout", layout, LAYOUTS)
    _checks.dtype("dtype", dtype)

    with torch.autocast(device_type=positions.device.type, enabled=False):
        positions = positions.to(dtype)
        if axes is not None and positions.ndim > 1:
            # plane i reads row axes[i]: [3, ..., T] -> [n_planes, ..., T] -> [..., T, n_planes]
            positions = positions[axes.to(positions.device)].movedim(0, -1)
        else:
            positions = positions[..., None]
        angles = positions * inv_freq.to(dtype)
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
    cache-friendly path that returns the same bits as the formula and runs on ``torch.get_num_threads()`` threads
    (see ``_apply_rope_chunked``). The entries are not checked for NaN or inf (a pass over every element would cost
    as much as the rotation): a non-finite entry of x, cos or sin gives non-finite outputs where the formula uses it,
    as any elementwise torch op does.
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


# The fast path. Small inputs go to the formula: its temporaries stay in cache anyway, and the blocked path's fixed
# costs (tables, block views, waking helper threads) would dominate.
_MIN_FAST_BYTES = 2 << 20

# Elementwise ATen ops on fewer elements than this (at::internal::GRAIN_SIZE) run entirely on the calling thread;
# larger ones are split across torch's intra-op threads. The blocked path relies on it twice: its helper threads
# (see _run_blocks) must not each start an OpenMP team of their own, and the complex multiply below is exact only
# when no split cuts a row (see _complex_rotation_is_exact).
_SERIAL_NUMEL = 32768

# With one intra-op thread the blocks can be larger: about this many bytes of x each. A block's x, output, scratch and
# cos/sin slices (about 5x this) then stay in the 2 MiB L2 across the four passes made over it, so main memory sees x
# read once and the output written once, as in a copy; fewer, larger blocks save Python overhead (several µs per
# block). Measured with benchmarks/rope_apply.py (2-core AVX-512 machine, float32 [8, 16, 2048, 128]): 128-256 KiB
# within noise of each other, 384 KiB and more about 5% slower. The complex multiply makes a single pass, so its
# blocks only need to be large: 1 MiB to the whole tensor measured within 3%, smaller blocks slower.
_BLOCK_BYTES = 192 << 10
_COMPLEX_BLOCK_BYTES = 16 << 20


def _fast_path_applies(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> bool:
    """Whether :func:`_apply_rope_chunked` may be used. It gives the same bits as the formula, but it writes into its
    output with ``out=`` and in-place ops, partly from helper threads, which nothing that records or transforms
    operations may see."""
    if x.numel() * x.element_size() <= _MIN_FAST_BYTES:
        return False      # small: see _MIN_FAST_BYTES
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
    if torch._C._len_torch_function_stack() or torch._C._len_torch_dispatch_stack():
        return False      # a torch function / dispatch mode is thread-local: ops on helper threads would bypass it
    # The output must have x's shape: cos's leading dimensions (sin has the same shape) must each be 1 or x's. Any
    # other case (cos broadcasting x up, or not broadcasting at all) is left to the formula and its errors.
    rows, table_rows = x.shape[:-1], cos.shape[:-1]
    return len(table_rows) <= len(rows) and all(n in (1, m) for n, m in zip(reversed(table_rows), reversed(rows)))


def _apply_rope_chunked(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str) -> torch.Tensor:
    """Same arithmetic as :func:`_apply_rope_reference`, rewritten for memory traffic.

    The formula makes six products and sums, each a fresh tensor half the size of x, then concatenates them into
    the output: three times x's size in temporaries, each written to and read back from main memory. On a CPU a fresh
    large allocation costs more still: the operating system maps and zeroes it page by page (4 KiB) on first write,
    which alone takes most of the time of a plain ``x.clone()``. Here the only large allocation is the output, and the
    work goes block by block of rows while each block sits in cache, spread over torch's intra-op threads
    (:func:`_run_blocks`). Each block is rotated in one of two ways, both bit-identical to the formula:

    * Interleaved layout, float32/float64, where :func:`_complex_rotation_is_exact` allows: one complex multiply, a
      single pass like a copy. Seen as complex numbers, (x0 + i·x1)(c + i·s) = (x0·c − x1·s) + i(x1·c + x0·s) is the
      rotation itself, and ATen's vectorised complex multiply computes it as two rounded products and one rounded
      difference or sum, in the formula's order (up to swapping the operands of the sum, which IEEE addition does not
      notice).
    * Otherwise four elementwise passes, in the half layout (x = [x1, x2]; interleaved: the same with x1, x2 = even,
      odd dimensions)::

        out = x * cos_full                  # [x1·c, x2·c]
        tmp = x * sin_full                  # [x1·s, x2·s], into a scratch buffer reused by every block
        out1 -= tmp2;  out2 += tmp1         # [x1·c − x2·s, x2·c + x1·s]

      Each product is rounded to x.dtype and then subtracted or added in the same order as in the formula, so every
      result is the same IEEE operation on the same operands. Three passes cannot do it: out1 needs the product of
      the *other* half, x2·s, and moving one half onto the other is a reflection that no view with positive strides
      expresses, so combining the products takes two ops however they are arranged (a three-op variant that writes
      all four products with one broadcast multiply measured slower).

    (NaNs stay NaN but may come back with another bit pattern: PyTorch's vectorised and scalar loops write different
    NaNs, so even a single op's NaN bits depend on its operands' strides.) ``torch.addcmul`` is not used: it may round
    once per multiply-add instead of twice (fused multiply-add; float32 arithmetic for bf16/fp16) — on an AVX2 CPU it
    changed about 15% of float32 results.
    """
    rotary_dim, head_dim = cos.shape[-1], x.shape[-1]
    half = rotary_dim // 2
    rows = x.shape[:-1]
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    x_rot, out_rot = x[..., :rotary_dim], out[..., :rotary_dim]
    # The tables are built from the half of cos/sin the formula reads (c = cos[..., :half] or cos[..., 0::2]), so a
    # caller's cos whose two copies differ still gets exactly the formula's answer.
    c, s = (cos[..., :half], sin[..., :half]) if layout == "half" else (cos[..., 0::2], sin[..., 0::2])
    dtype = x.dtype

    # Block size. With several threads every op of a block must stay under _SERIAL_NUMEL elements (the widest op is
    # the full-width multiply, or the complex one over half as many complex numbers, or the pass-through copy); if a
    # single row is already wider, the blocks run on this thread alone and each op uses torch's threads.
    threads = torch.get_num_threads()
    complex_ok = layout == "interleaved" and _complex_rotation_is_exact(x_rot, out_rot)
    widest = max(half if complex_ok else rotary_dim, head_dim - rotary_dim)
    if threads > 1 and widest >= _SERIAL_NUMEL:
        threads, complex_ok = 1, False    # ops would be split across threads, and a split row loses exactness
    if threads > 1:
        rows_per_block = (_SERIAL_NUMEL - 1) // widest
    else:
        rows_per_block = max(1, (_COMPLEX_BLOCK_BYTES if complex_ok else _BLOCK_BYTES)
                             // (head_dim * x.element_size()))
    cut = _BlockCut(rows, rows_per_block)
    x_pass = out_pass = None                       # blocks of the pass-through part (partial RoPE)
    if rotary_dim < head_dim:
        x_pass, out_pass = cut.blocks(x[..., rotary_dim:]), cut.blocks(out[..., rotary_dim:])

    if complex_ok:
        x_c = cut.blocks(torch.view_as_complex(x_rot.unflatten(-1, (half, 2))))
        out_c = cut.blocks(torch.view_as_complex(out_rot.unflatten(-1, (half, 2))))
        table = cut.table_blocks(lambda c, s: torch.complex(c.to(dtype), s.to(dtype)), c, s)

        def rotate(i, scratch):
            torch.mul(x_c(i), table(i), out=out_c(i))
            if x_pass is not None:
                out_pass(i).copy_(x_pass(i))
    else:
        if layout == "half":     # full-width tables [c, c], [s, s]
            first, second = slice(None, half), slice(half, None)
            table = cut.table_blocks(lambda c, s: (torch.cat((c, c), dim=-1).to(dtype),
                                                   torch.cat((s, s), dim=-1).to(dtype)), c, s)
        else:                    # [c0, c0, c1, c1, ...]
            first, second = slice(0, None, 2), slice(1, None, 2)
            table = cut.table_blocks(lambda c, s: (c.repeat_interleave(2, dim=-1).to(dtype),
                                                   s.repeat_interleave(2, dim=-1).to(dtype)), c, s)
        x_b, out_b, out1_b, out2_b = (cut.blocks(t) for t in (x_rot, out_rot, out_rot[..., first], out_rot[..., second]))

        def rotate(i, scratch):
            xb = x_b(i)
            if xb.shape not in scratch:      # one buffer per block shape and thread (blocks come in one or two shapes)
                tmp = torch.empty(xb.shape, dtype=dtype, device=x.device)
                scratch[xb.shape] = tmp, tmp[..., first], tmp[..., second]
            tmp, tmp1, tmp2 = scratch[xb.shape]
            cos_full, sin_full = table(i)
            torch.mul(xb, cos_full, out=out_b(i))
            torch.mul(xb, sin_full, out=tmp)
            out1_b(i).sub_(tmp2)
            out2_b(i).add_(tmp1)
            if x_pass is not None:
                out_pass(i).copy_(x_pass(i))
    _run_blocks(len(cut), rotate, threads)
    return out


def _complex_rotation_is_exact(x_rot: torch.Tensor, out_rot: torch.Tensor) -> bool:
    """Whether rotating the interleaved ``x_rot`` into ``out_rot`` as one complex multiply per block gives the formula's
    bits.

    ATen's vectorised complex multiply on x86 (the AVX2 and AVX-512 kernels, and the generic one of the DEFAULT
    build) rounds like the formula: two products, then their difference / sum. Its scalar loop does not: compiled
    with FMA enabled, ``a * c - b * d`` becomes a fused multiply-add (in a test, 8-10% of float32 results changed).
    The scalar loop runs on what is left of a contiguous run after whole pairs of vectors (fewer than 16 complex
    numbers on x86); every run here is a whole number of rows of ``half`` complex numbers, so half % 16 == 0 leaves
    nothing to it, provided no thread split cuts a row: the caller keeps every op serial (one thread, or blocks under
    _SERIAL_NUMEL elements). Elsewhere (ARM, POWER, ...) vector widths and kernels differ and are untested here, and
    fp16/bf16 have no such kernel: they take the real-valued path. A one-off probe (:func:`_complex_mul_matches`)
    checks the kernel's rounding itself, in case a PyTorch release changes it.
    """
    half = x_rot.shape[-1] // 2
    if x_rot.dtype not in (torch.float32, torch.float64) or half % 16:
        return False
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    # view_as_complex needs pairs that are adjacent (last stride 1) and complex-aligned (even strides and offset).
    for t in (x_rot, out_rot):
        if t.stride(-1) != 1 or t.storage_offset() % 2 or any(st % 2 for st in t.stride()[:-1]):
            return False
    return _complex_mul_matches(x_rot.dtype)


_COMPLEX_MUL_MATCHES: dict[torch.dtype, bool] = {}


def _complex_mul_matches(dtype: torch.dtype) -> bool:
    """Probe, once per dtype: does the complex multiply give exactly the formula's bits on rows of 16 complex numbers
    (strided, so each row is a run of its own) of random data? A multiply-add that rounds once would differ on a good
    fraction of these 1024 numbers."""
    if dtype not in _COMPLEX_MUL_MATCHES:
        g = torch.Generator().manual_seed(0)
        x = torch.randn(64, 32, 2, generator=g, dtype=dtype)[:, :16]
        t = torch.randn(64, 32, 2, generator=g, dtype=dtype)[:, 16:]
        with torch.no_grad():
            got = torch.view_as_real(torch.view_as_complex(x) * torch.view_as_complex(t))
        xe, xo, c, s = x[..., 0], x[..., 1], t[..., 0], t[..., 1]
        _COMPLEX_MUL_MATCHES[dtype] = (torch.equal(got[..., 0], xe * c - xo * s)
                                       and torch.equal(got[..., 1], xo * c + xe * s))
    return _COMPLEX_MUL_MATCHES[dtype]


class _BlockCut:
    """Cuts tensors with leading shape ``rows`` (``x.shape[:-1]``) into the same blocks of at most ``rows_per_block``
    rows (or a single row where one row is already larger), numbered 0, 1, ... in memory order for a contiguous x.

    Take the outermost dimension k whose slices ``x[i0, ..., ik]`` hold at most ``rows_per_block`` rows each; a block
    is up to ``step`` consecutive indices along k, for one index of every dimension before k (an "outer" index), with
    ``step`` chosen so the pieces along k come out about equal. E.g. rows = (8, 16, 2048) and 512 rows per block give
    512 blocks ``x[b, h, t:t + 512]``, four per head; rows = (8, 16, 1) gives one block, the whole tensor.

    :meth:`blocks` returns a function ``i -> view of block i``, so the views are made as the blocks are worked on and
    dropped after: building them all first would put thousands of new objects before Python's garbage collector,
    whose collections then scan everything the process holds (tens of milliseconds in a process that imported
    transformers). Indexing each outer view once and slicing that for each piece halves the Python cost of
    ``t[b, h, t0:t1]`` per block.
    """

    def __init__(self, rows: tuple[int, ...], rows_per_block: int):
        self.k = k = next(k for k in range(len(rows)) if math.prod(rows[k + 1:]) <= rows_per_block)
        step = max(1, rows_per_block // max(1, math.prod(rows[k + 1:])))
        step = -(-rows[k] // -(-rows[k] // step))      # as many pieces, of equal size but for the last
        self.outer = list(itertools.product(*(range(n) for n in rows[:k])))
        self.pieces = [slice(start, start + step) for start in range(0, rows[k], step)]
        self.ndim = len(rows)

    def __len__(self) -> int:
        return len(self.outer) * len(self.pieces)

    def blocks(self, t: torch.Tensor):
        outer, pieces, n = [t[index] for index in self.outer], self.pieces, len(self.pieces)
        return lambda i: outer[i // n][pieces[i % n]]

    def table_blocks(self, build, *sources: torch.Tensor):
        """Like :meth:`blocks`, for tables built by ``build`` from ``sources`` (cos and sin halves ``[..., T, width]``,
        whose leading dimensions are 1 or those of ``rows``): ``i -> build(*(the sources' slices for block i))``. A
        dimension of size 1 stays (or, under an outer index, drops) and broadcasts against x's block. Each table is
        built block by block, where every op is small enough to run serially (a whole-table op would be split across
        torch's threads, which stalls when the cores are busy), and only once for all blocks that read the same slice
        (e.g. every head: the same T-range of a [T, width] table)."""
        sources = [t.reshape((1,) * (self.ndim - t.dim() + 1) + t.shape) for t in sources]
        sizes, k, pieces, n = sources[0].shape[:-1], self.k, self.pieces, len(self.pieces)
        keys = [tuple(i if size > 1 else 0 for i, size in zip(index, sizes)) for index in self.outer]
        built: dict = {}

        def table(i):
            outer, piece = divmod(i, n)
            if sizes[k] == 1:
                piece = -1                   # the table broadcasts along k: every piece reads all of it
            key = keys[outer], piece
            if key not in built:             # two threads may both build it: same values, either one is kept
                index = keys[outer] + ((pieces[piece] if piece >= 0 else slice(None)),)
                built[key] = build(*(t[index] for t in sources))
            return built[key]

        return table


def _run_blocks(n_blocks: int, work, threads: int) -> None:
    """Call ``work(i, scratch)`` for i in range(n_blocks), on this thread and ``threads - 1`` helper threads.

    Torch ops release the GIL while they compute, so Python threads run blocks in parallel. Each op of a block stays
    under _SERIAL_NUMEL elements, so it runs on the thread that calls it: torch's own parallelism would instead split
    each small op across its threads and join them after it, thousands of times per call, which is slow and, on a
    machine whose cores are busy with other work, can stall for milliseconds per op (measured: seconds per call on a
    2-core machine with one core taken by another process). Threads take the next block when they finish one, so a
    thread that is descheduled holds up at most one block. ``scratch`` is a dict private to the thread. Helper
    threads run with the caller's grad and inference mode, which are thread-local.
    """
    if threads <= 1 or n_blocks < 2:
        scratch: dict = {}
        for i in range(n_blocks):
            work(i, scratch)
        return
    lock = threading.Lock()
    remaining = iter(range(n_blocks))

    def take():
        with lock:
            return next(remaining, None)

    grad, inference = torch.is_grad_enabled(), torch.is_inference_mode_enabled()

    def drain():
        scratch: dict = {}
        with torch.inference_mode(inference), torch.set_grad_enabled(grad):
            for i in iter(take, None):
                work(i, scratch)

    helpers = [_helper_pool().submit(drain) for _ in range(min(threads, n_blocks) - 1)]
    try:
        drain()
    finally:
        with lock:
            remaining = iter(())     # on an error here, helpers stop after their current block
        for future in helpers:
            if not future.cancel():  # a helper that never started is dropped; the others are waited for
                future.result()


_HELPERS: tuple[int, ThreadPoolExecutor] | None = None
_HELPERS_LOCK = threading.Lock()


def _helper_pool() -> ThreadPoolExecutor:
    """The helper threads of :func:`_run_blocks`, started on first use. A forked child process (e.g. a DataLoader
    worker) inherits the executor but not its threads, so each process gets its own."""
    global _HELPERS
    with _HELPERS_LOCK:
        if _HELPERS is None or _HELPERS[0] != os.getpid():
            _HELPERS = os.getpid(), ThreadPoolExecutor(thread_name_prefix="posbook-rope")
        return _HELPERS[1]


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

    A permutation: it moves entries of any dtype (``torch.arange(8)`` shows where each dimension goes) and any
    value, NaN and inf included, unchanged.
    """
    return _permute_layout(x, dim, head_dim, rotary_dim, to_half=True)


def half_to_interleaved(x: torch.Tensor, *, dim: int = -1, head_dim: int | None = None,
                        rotary_dim: int | None = None) -> torch.Tensor:
    """The inverse of :func:`interleaved_to_half`: the same arguments, and like it a permutation of entries of any
    dtype and value (NaN and inf included)."""
    return _permute_layout(x, dim, head_dim, rotary_dim, to_half=False)
