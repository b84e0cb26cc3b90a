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


def local_size(kind: str, *, window: int | None, chunk_size: int | None) -> int | None:
    """The size a local kind needs (``window`` for sliding, ``chunk_size`` for chunked), checked; None otherwise.

    Each size belongs to one kind: giving it with another kind is an error, not silently ignored.
    """
    for name, value, owner in (("window", window, "sliding"), ("chunk_size", chunk_size, "chunked")):
        if kind == owner:
            if value is None:
                raise ValueError(f"kind={owner!r} needs {name}, got None")
            _checks.number(name, value, integer=True, positive=True)
        elif value is not None:
            raise ValueError(f"{name} only applies to kind={owner!r}, got {name}={value!r} with kind={kind!r}")
    return window if kind == "sliding" else chunk_size if kind == "chunked" else None


def mask_mod(kind: str, *, window: int | None = None, chunk_size: int | None = None, q_offset: int = 0) -> MaskMod:
    """The rule ``allowed(batch, head, q_idx, kv_idx) -> bool tensor`` in flex_attention's ``mask_mod`` form.

    ``q_offset`` is added to ``q_idx`` to get the query's absolute position (k_len − q_len when the queries are the
    last positions). The sliding rule keeps keys with 0 ≤ i − j < window, as Hugging Face's ``sliding_window``
    does; the chunked rule keeps keys with j ≤ i in the same block ⌊i / chunk_size⌋.
    """
    _checks.choice("kind", kind, MASK_KINDS)
    _checks.number("q_offset", q_offset, integer=True, min_value=0)
    local_size(kind, window=window, chunk_size=chunk_size)

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


def attention_mask(kind: str, q_len: int, k_len: int | None = None, *, window: int | None = None,
                   chunk_size: int | None = None, device: torch.device | str | None = None) -> torch.Tensor:
    """Boolean mask [q_len, k_len], True where query i may attend to key j."""
    q_len, k_len = _checks.query_key_lengths(q_len, k_len)
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

    q_len, k_len = _checks.query_key_lengths(q_len, k_len)
    _checks.number("block_size", block_size, integer=True, positive=True)
    rule = mask_mod(kind, window=window, chunk_size=chunk_size, q_offset=k_len - q_len)
    return create_block_mask(rule, B=None, H=None, Q_LEN=q_len, KV_LEN=k_len, device=device, BLOCK_SIZE=block_size)
