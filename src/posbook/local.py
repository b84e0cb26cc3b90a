"""Local attention that only computes what a window lets a query see: sliding-window and chunked causal attention
through one of two kernels, so a local layer does work proportional to its window.

* ``blocked``: SDPA on blocks of queries, each against the keys its block can see. It runs on any device without a
  compiler, and is what the CPU uses.
* ``flex``: ``flex_attention`` with a ``BlockMask`` that skips the key blocks the window hides, compiled on CUDA
  (eager elsewhere, where it is correct but slow and has no backward: the test suite runs it there to hold it
  equal to the reference).

``impl="auto"`` takes ``flex`` on a CUDA tensor whose head dimension the compiled kernel takes (a power of two,
at least 16) and ``blocked`` otherwise.
"""

from __future__ import annotations

import functools
import math
import warnings

import torch
import torch.nn.functional as F

from . import _checks
from .logit_scales import scale_queries
from .masks import block_mask, kind_size, local_size, mask_mod, size_option

LOCAL_IMPLS = ("auto", "blocked", "flex")
FLEX_BLOCK_SIZE = 128          # flex_attention's own default tile: 128 queries × 128 keys


def local_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, kind: str, window: int | None = None,
                    chunk_size: int | None = None, scale: float | None = None, block_size: int | None = None,
                    query_scale: torch.Tensor | None = None, impl: str = "auto") -> torch.Tensor:
    """Sliding-window or chunked causal self-attention that only computes the key blocks a query can see.

    Equal to ``attention(q, k, v, mask=attention_mask(kind, T, window=..., chunk_size=...))`` (the test suite
    checks it), but without the T×T score matrix, through SDPA on blocks, so it needs no compiler:

    * ``chunked``: the sequence is cut into chunks of ``chunk_size`` and each chunk is an ordinary causal
      attention, T·chunk_size/2 scores instead of T²/2.
    * ``sliding``: queries go in blocks of ``block_size`` (default window/2); a block's keys are the ``window``
      positions before it plus itself, W + B keys per query instead of T/2 on average.

    q, k, v: [batch, H(q or kv), T, d] with equal T (training or prefill; decoding against a cache uses
    :func:`posbook.core.attention` with a mask), checked as :func:`posbook.core.attention` checks them (one dtype,
    one device, no NaN or ±inf entries). ``query_scale``: optional per-query factor broadcastable to
    [batch, Hq, T], such as [T].
    """
    _checks.qkv(q, k, v)
    t = q.shape[-2]
    if k.shape[-2] != t:
        raise ValueError(f"local_attention needs q and k of one length (self-attention), got {t} and {k.shape[-2]}")
    _checks.choice("kind", kind, ("sliding", "chunked"))
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else _checks.number("scale", scale, positive=True)
    _checks.query_scale(query_scale, q)
    # A window, chunk or block longer than the sequence sees what one of its length sees; capping it at T spares
    # the kernel padding the keys to its length.
    size = min(local_size(kind, window=window, chunk_size=chunk_size), t)
    _checks.choice("impl", impl, LOCAL_IMPLS)
    if impl == "flex":
        _checks.flex_backward(q, k, v, query_scale, alternative="impl='blocked' (or 'auto')")
    if block_size is not None:
        _checks.size("block_size", block_size)
        # flex tiles stay as given (a tile past the end is cut by the kernel); SDPA blocks are capped at T.
        block_size = block_size if _local_impl(impl, q) == "flex" else min(block_size, t)
    return local_attend(q, k, v, kind=kind, **size_option(kind, size), scale=scale, block_size=block_size,
                        query_scale=query_scale, impl=impl)


def _local_impl(impl: str, q: torch.Tensor) -> str:
    """The kernel ``impl`` means for q: ``auto`` is ``flex`` on CUDA when the head dimension is one the compiled
    kernel takes (a power of two, at least 16), ``blocked`` otherwise."""
    if impl != "auto":
        return impl
    d = q.shape[-1]
    return "flex" if q.device.type == "cuda" and d >= 16 and d & (d - 1) == 0 else "blocked"


def local_attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, kind: str, window: int | None = None,
                 chunk_size: int | None = None, scale: float, block_size: int | None = None,
                 query_scale: torch.Tensor | None = None, impl: str = "auto") -> torch.Tensor:
    """:func:`local_attention` unchecked, for callers that checked their configuration once (the experiment model);
    of ``window`` and ``chunk_size`` it reads the one ``kind`` needs. It reads no tensor values on the host, so NaN
    and ±inf entries propagate to the output."""
    batch, hq, t, d = q.shape
    gqa = hq != k.shape[1]
    q = scale_queries(q, query_scale)
    if _local_impl(impl, q) == "flex":
        return _flex_local(q, k, v, kind, kind_size(kind, window=window, chunk_size=chunk_size), scale,
                           block_size or FLEX_BLOCK_SIZE, gqa)
    if kind == "chunked":
        n_chunks = -(-t // chunk_size)
        pad = n_chunks * chunk_size - t

        def chunks(x):
            x = F.pad(x, (0, 0, 0, pad))  # padding sits after the last real query: causal masking hides it
            return x.view(batch, x.shape[1], n_chunks, chunk_size, x.shape[-1]).transpose(1, 2).flatten(0, 1)

        out = F.scaled_dot_product_attention(chunks(q), chunks(k), chunks(v), is_causal=True, scale=scale,
                                             enable_gqa=gqa)
        out = out.view(batch, n_chunks, hq, chunk_size, v.shape[-1]).transpose(1, 2).flatten(2, 3)
        return out[:, :, :t]

    block = max(1, window // 2) if block_size is None else block_size
    n_blocks = -(-t // block)
    pad = n_blocks * block - t
    span = window - 1 + block  # keys a query block can see: window − 1 before its first query, plus the block
    q_blocks = F.pad(q, (0, 0, 0, pad)).view(batch, hq, n_blocks, block, d).transpose(1, 2).flatten(0, 1)
    k_blocks, v_blocks = (_key_blocks(x, window, block, n_blocks, pad) for x in (k, v))
    mask = _sliding_block_mask(batch, n_blocks, block, window, q.dtype, q.device)
    out = F.scaled_dot_product_attention(q_blocks, k_blocks, v_blocks, attn_mask=mask, scale=scale, enable_gqa=gqa)
    out = out.view(batch, n_blocks, hq, block, v.shape[-1]).transpose(1, 2).flatten(2, 3)
    return out[:, :, :t]


def _key_blocks(x: torch.Tensor, window: int, block: int, n_blocks: int, pad: int) -> torch.Tensor:
    """The keys (or values) each query block of a sliding window sees, [batch·n_blocks, H, window − 1 + block, d]:
    block j holds positions j·block − (window − 1) … (j + 1)·block − 1, zeros where a position is negative (the mask
    hides them). Built as one concatenation of whole blocks (x padded on the left to a whole number of blocks), whose
    backward is a few slices, rather than by ``unfold``, whose backward is a slow scatter."""
    batch, h, _, d = x.shape
    before = -(-(window - 1) // block)          # whole blocks of left padding that cover the window − 1 positions
    extra = before * block - (window - 1)       # padding rows that no query block reads
    blocks = F.pad(x, (0, 0, before * block, pad)).view(batch, h, before + n_blocks, block, d).transpose(1, 2)
    spans = torch.cat([blocks[:, i:i + n_blocks] for i in range(before + 1)], dim=3)   # [batch, n, H, (before+1)·block, d]
    return spans[..., extra:, :].flatten(0, 1)


def _sliding_block_mask(batch: int, n_blocks: int, block: int, window: int, dtype: torch.dtype,
                        device: torch.device) -> torch.Tensor:
    """The additive mask (0 where a query sees a key, −inf elsewhere) of the sliding-window query blocks,
    [batch·n_blocks, 1, block, window − 1 + block]; built once per shape outside a compiled graph. SDPA would turn a
    boolean mask into this same float mask on every call."""
    if torch.compiler.is_compiling():
        return _build_sliding_block_mask(batch, n_blocks, block, window, dtype, device)
    return _cached_sliding_block_mask(batch, n_blocks, block, window, dtype, device)


def _build_sliding_block_mask(batch, n_blocks, block, window, dtype, device):
    span = window - 1 + block
    # Query r of a block sits at key column window − 1 + r of its span; it sees columns r … window − 1 + r.
    r = torch.arange(block, device=device)[:, None]
    c = torch.arange(span, device=device)[None, :]
    allowed = (c >= r) & (c <= window - 1 + r)
    # Column c of block j holds position j·block + c − (window − 1); negative positions are the left padding.
    j = torch.arange(n_blocks, device=device)[:, None, None]
    allowed = allowed & (j * block + c >= window - 1)                             # [n_blocks, block, span]
    mask = torch.zeros(allowed.shape, dtype=dtype, device=device).masked_fill_(~allowed, float("-inf"))
    return mask.expand(batch, n_blocks, block, span).flatten(0, 1)[:, None]


_cached_sliding_block_mask = functools.lru_cache(maxsize=64)(_build_sliding_block_mask)


def _flex_local(q, k, v, kind: str, size: int, scale: float, tile: int, gqa: bool) -> torch.Tensor:
    """flex_attention on the local layer's BlockMask: inside a compiled model the mask is traced into the graph and
    the enclosing compile fuses the kernel; eagerly the mask is cached per shape, and CUDA runs the kernel compiled
    on its own (anywhere else eagerly: the unfused reference, for tests)."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    if torch.compiler.is_compiling():
        # Traced into the graph: no cache lookup (it would break the graph) and no checks of T, which is symbolic
        # once a second length has made the compiled model's shapes dynamic.
        t = q.shape[-2]
        rule = mask_mod(kind, **size_option(kind, size))
        mask = create_block_mask(rule, B=None, H=None, Q_LEN=t, KV_LEN=t, device=q.device, BLOCK_SIZE=tile)
        return flex_attention(q, k, v, block_mask=mask, scale=scale, enable_gqa=gqa)
    mask = _local_block_mask(kind, size, q.shape[-2], q.device, tile)
    if q.device.type == "cuda":
        return _compiled_flex()(q, k, v, block_mask=mask, scale=scale, enable_gqa=gqa)
    with warnings.catch_warnings():
        # Eager flex_attention warns that it is not fused; off CUDA that is the point (a reference run).
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        return flex_attention(q, k, v, block_mask=mask, scale=scale, enable_gqa=gqa)


@functools.cache
def _compiled_flex():
    """flex_attention compiled once per process (eager flex_attention on CUDA is an unfused reference: slow and
    T×T in memory). Shapes are left to torch.compile's default: a second batch or length recompiles once with
    dynamic sizes, instead of once per shape an evaluation protocol goes through."""
    from torch.nn.attention.flex_attention import flex_attention
    return torch.compile(flex_attention)


@functools.lru_cache(maxsize=64)
def _local_block_mask(kind: str, size: int, t: int, device: torch.device, tile: int):
    """The BlockMask of a local layer at length t, shared by every batch entry and head: one per layer shape and
    length, since it holds nothing of the batch (eager calls only; a compiled model builds it in its graph)."""
    return block_mask(kind, t, **size_option(kind, size), block_size=tile, device=device)
