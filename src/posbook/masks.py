"""Which keys each query may see: causal, sliding-window and chunked masks.

Each mask is one rule ``allowed(q_idx, kv_idx)`` written once, with two renderings:

* :func:`attention_mask` — a boolean tensor [q_len, k_len] (True = may attend), for the reference attention
  and torch SDPA;
* :func:`block_mask` — a ``torch.nn.attention.flex_attention.BlockMask``, for ``flex_attention``, which then
  skips the key blocks a query block cannot see, so a local layer does work proportional to its window.

Queries are the last ``q_len`` of ``k_len`` positions (a decoding step with a KV cache), so query row r sits at
absolute position ``k_len − q_len + r``.
"""

from __future__ import annotations

from typing import Callable

import torch

from . import _checks

MASK_KINDS = ("full", "causal", "sliding", "chunked")
"""``full`` (bidirectional, nothing hidden), ``causal``, ``sliding`` (causal, the last ``window`` keys including
the query's own), ``chunked`` (causal within fixed blocks of ``chunk_size`` positions: Llama 4's local layers)."""

MaskMod = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def mask_mod(kind: str, *, window: int | None = None, chunk_size: int | None = None, q_offset: int = 0) -> MaskMod:
    """The rule ``allowed(batch, head, q_idx, kv_idx) -> bool tensor`` in flex_attention's ``mask_mod`` form.

    ``q_offset`` is added to ``q_idx`` to get the query's absolute position (k_len − q_len when the queries are the
    last positions). The sliding rule keeps keys with 0 ≤ i − j < window, as Hugging Face's ``sliding_window``
    does; the chunked rule keeps keys with j ≤ i in the same block ⌊i / chunk_size⌋.
    """
    _checks.choice("kind", kind, MASK_KINDS)
    _checks.number("q_offset", q_offset, integer=True, min_value=0)
    if kind == "sliding":
        if window is None:
            raise ValueError("kind='sliding' needs window (the number of keys a query sees), got None")
        _checks.number("window", window, integer=True, positive=True)
    elif window is not None:
        raise ValueError(f"window only applies to kind='sliding', got window={window!r} with kind={kind!r}")
    if kind == "chunked":
        if chunk_size is None:
            raise ValueError("kind='chunked' needs chunk_size, got None")
        _checks.number("chunk_size", chunk_size, integer=True, positive=True)
    elif chunk_size is not None:
        raise ValueError(f"chunk_size only applies to kind='chunked', got chunk_size={chunk_size!r} with kind={kind!r}")

    def full(b, h, q_idx, kv_idx):
        return (q_idx + q_offset) >= 0  # all True, shaped like q_idx

    def causal(b, h, q_idx, kv_idx):
        return (q_idx + q_offset) >= kv_idx

    def sliding(b, h, q_idx, kv_idx):
        distance = (q_idx + q_offset) - kv_idx
        return (distance >= 0) & (distance < window)

    def chunked(b, h, q_idx, kv_idx):
        i = q_idx + q_offset
        return (i >= kv_idx) & (i // chunk_size == kv_idx // chunk_size)

    return {"full": full, "causal": causal, "sliding": sliding, "chunked": chunked}[kind]


def _lengths(q_len: int, k_len: int | None) -> tuple[int, int]:
    k_len = q_len if k_len is None else k_len
    _checks.number("q_len", q_len, integer=True, positive=True)
    _checks.number("k_len", k_len, integer=True, positive=True)
    if k_len < q_len:
        raise ValueError(f"k_len must be >= q_len (queries are the last q_len positions), got k_len={k_len}, q_len={q_len}")
    return q_len, k_len


def attention_mask(kind: str, q_len: int, k_len: int | None = None, *, window: int | None = None,
                   chunk_size: int | None = None, device: torch.device | str | None = None) -> torch.Tensor:
    """Boolean mask [q_len, k_len], True where query i may attend to key j."""
    q_len, k_len = _lengths(q_len, k_len)
    rule = mask_mod(kind, window=window, chunk_size=chunk_size, q_offset=k_len - q_len)
    q_idx = torch.arange(q_len, device=device)[:, None]
    kv_idx = torch.arange(k_len, device=device)[None, :]
    return rule(None, None, q_idx, kv_idx).expand(q_len, k_len).contiguous()


def block_mask(kind: str, q_len: int, k_len: int | None = None, *, window: int | None = None,
               chunk_size: int | None = None, block_size: int = 128, device: torch.device | str = "cpu"):
    """The same mask as a flex_attention ``BlockMask`` (shared by every batch entry and head).

    Blocks of ``block_size`` queries × ``block_size`` keys that the rule hides entirely are never computed, which
    is what makes sliding and chunked layers cheaper than a global one.
    """
    from torch.nn.attention.flex_attention import create_block_mask

    q_len, k_len = _lengths(q_len, k_len)
    _checks.number("block_size", block_size, integer=True, positive=True)
    rule = mask_mod(kind, window=window, chunk_size=chunk_size, q_offset=k_len - q_len)
    return create_block_mask(rule, B=None, H=None, Q_LEN=q_len, KV_LEN=k_len, device=device, BLOCK_SIZE=block_size)
