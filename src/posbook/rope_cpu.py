"""The CPU fast path of :func:`posbook.rope.apply_rope`: the same rotation, block by block across threads.

On a CPU the formula's temporaries (six products and sums, each half the size of x, then a concatenation) cost more
memory traffic than the arithmetic, and each fresh large allocation is mapped and zeroed page by page. For large
inputs outside autograd, :func:`rotate_blocked` allocates only the output and works through x block by block while
each block sits in cache, on ``torch.get_num_threads()`` threads, returning exactly the formula's bits (the test
suite checks it bit for bit). :func:`fast_path_applies` says when it may be used. On GPUs the formula, one kernel
per op, is already fast, so this module is CPU-only.
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

# Small inputs go to the formula: its temporaries stay in cache anyway, and the blocked path's fixed costs (tables,
# block views, waking helper threads) would dominate.
_MIN_FAST_BYTES = 2 << 20

# Elementwise ATen ops on fewer elements than this (at::internal::GRAIN_SIZE) run entirely on the calling thread;
# larger ones are split across torch's intra-op threads. The blocked path relies on it twice: its helper threads
# (see _run_blocks) must not each start an OpenMP team of their own, and the complex multiply below is exact only
# when no split cuts a row (see _complex_rotation_is_exact).
_SERIAL_NUMEL = 32768

# With one intra-op thread the blocks can be larger: about this many bytes of x each. A block's x, output, scratch and
# cos/sin slices (about 5x this) then stay in a core's 1 MiB L2 across the four passes made over it, so main memory sees x
# read once and the output written once, as in a copy; fewer, larger blocks save Python overhead (several µs per
# block). Measured with benchmarks/rope_apply.py (2-core AVX-512 machine, float32 [8, 16, 2048, 128]): 128-256 KiB
# within noise of each other, 384 KiB and more about 5% slower. The complex multiply makes a single pass, so its
# blocks only need to be large: 1 MiB to the whole tensor measured within 3%, smaller blocks slower.
_BLOCK_BYTES = 192 << 10
_COMPLEX_BLOCK_BYTES = 16 << 20


def fast_path_applies(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> bool:
    """Whether :func:`rotate_blocked` may rotate x by the tables cos, sin (as :func:`posbook.rope.apply_rope` checks
    them). It gives the same bits as the formula, but it writes into its output with ``out=`` and in-place ops,
    partly from helper threads, which nothing that records or transforms operations may see."""
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


def rotate_blocked(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str) -> torch.Tensor:
    """The rotation of :func:`posbook.rope.apply_rope`, unchecked, with the same arithmetic as its formula, rewritten
    for memory traffic; only where :func:`fast_path_applies`.

    The formula makes six products and sums, each a fresh tensor half the size of x, then concatenates them into
    the output: three times x's size in temporaries, each written to and read back from main memory. On a CPU a fresh
    large allocation costs more still: the operating system maps and zeroes it page by page (4 KiB) on first write,
    which alone takes most of the time of a plain ``x.clone()``. Here the only large allocation is the output, and the
    work goes block by block of rows while each block sits in cache, spread over torch's intra-op threads
    (``_run_blocks``). Each block is rotated in one of two ways, both bit-identical to the formula:

    * Interleaved layout, float32/float64, where ``_complex_rotation_is_exact`` allows: one complex multiply, a
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
    """The helper threads of ``_run_blocks``, started on first use. A forked child process (e.g. a DataLoader
    worker) inherits the executor but not its threads, so each process gets its own."""
    global _HELPERS
    with _HELPERS_LOCK:
        if _HELPERS is None or _HELPERS[0] != os.getpid():
            _HELPERS = os.getpid(), ThreadPoolExecutor(thread_name_prefix="posbook-rope")
        return _HELPERS[1]
