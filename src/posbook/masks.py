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

from dataclasses import dataclass
from typing import Callable

import torch

from . import _checks

MaskMod = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class MaskKind:
    """One kind of mask: its rule on absolute positions, ``allowed(i, j, size)``, and the size it needs, if any."""

    rule: Callable[[torch.Tensor, torch.Tensor, int | None], torch.Tensor]
    size_name: str | None = None
    summary: str = ""


def _sliding(i, j, window):
    distance = i - j
    return (distance >= 0) & (distance < window)


MASK_KINDS: dict[str, MaskKind] = {
    "full": MaskKind(lambda i, j, size: (i >= 0) & (j >= 0), summary="bidirectional, nothing hidden"),
    "causal": MaskKind(lambda i, j, size: i >= j, summary="each query sees itself and the keys before it"),
    "sliding": MaskKind(_sliding, "window", "causal, the last `window` keys including the query's own"),
    "chunked": MaskKind(lambda i, j, size: (i >= j) & (i // size == j // size), "chunk_size",
                        "causal within fixed blocks of `chunk_size` positions (Llama 4's local layers)"),
}
"""The registry of masks, kind → :class:`MaskKind`. The sliding rule keeps keys with 0 ≤ i − j < window, as Hugging
Face's ``sliding_window`` does; the chunked rule keeps keys with j ≤ i in the same block ⌊i / chunk_size⌋.

:meta hide-value:
"""


def kind_size(kind: str, *, window: int | None = None, chunk_size: int | None = None) -> int | None:
    """The size a kind reads, by its ``size_name`` (``window`` for sliding, ``chunk_size`` for
    chunked), or None for a kind without one; unchecked (:func:`local_size` checks it)."""
    name = MASK_KINDS[kind].size_name
    return None if name is None else {"window": window, "chunk_size": chunk_size}[name]


def size_option(kind: str, size: int | None) -> dict[str, int]:
    """The keyword a mask of ``kind`` takes its size by: ``{"window": size}`` for sliding, ``{"chunk_size": size}``
    for chunked, ``{}`` for a kind without a size (for :func:`attention_mask`, :func:`block_mask`, :func:`mask_mod`);
    unchecked."""
    name = MASK_KINDS[kind].size_name
    return {} if name is None else {name: size}


def local_size(kind: str, *, window: int | None, chunk_size: int | None) -> int | None:
    """The size a kind needs (``window`` for sliding, ``chunk_size`` for chunked), checked; None otherwise.

    Each size belongs to one kind: giving it with another kind is an error, not silently ignored.
    """
    _checks.owned_options("kind", kind, MASK_KINDS, {"window": window, "chunk_size": chunk_size}, option="size_name")
    size = kind_size(kind, window=window, chunk_size=chunk_size)
    return None if size is None else _checks.size(MASK_KINDS[kind].size_name, size)


def mask_mod(kind: str, *, window: int | None = None, chunk_size: int | None = None, q_offset: int = 0) -> MaskMod:
    """The rule ``allowed(batch, head, q_idx, kv_idx) -> bool tensor`` in flex_attention's ``mask_mod`` form.

    ``q_offset`` is added to ``q_idx`` to get the query's absolute position (k_len − q_len when the queries are the
    last positions). The rules are those of :data:`MASK_KINDS`.
    """
    _checks.choice("kind", kind, MASK_KINDS)
    _checks.number("q_offset", q_offset, integer=True, min_value=0)
    size = local_size(kind, window=window, chunk_size=chunk_size)
    rule = MASK_KINDS[kind].rule

    def allowed(b, h, q_idx, kv_idx):
        return rule(q_idx + q_offset, kv_idx, size)

    return allowed


def attention_mask(kind: str, q_len: int, k_len: int | None = None, *, window: int | None = None,
                   chunk_size: int | None = None, device: torch.device | str | None = None) -> torch.Tensor:
    """Boolean mask [q_len, k_len], True where query i may attend to key j."""
    q_len, k_len = _checks.query_key_sizes(q_len, k_len)
    if device is not None:
        _checks.device("device", device)
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

    q_len, k_len = _checks.query_key_sizes(q_len, k_len)
    _checks.size("block_size", block_size)
    _checks.device("device", device)
    rule = mask_mod(kind, window=window, chunk_size=chunk_size, q_offset=k_len - q_len)
    return create_block_mask(rule, B=None, H=None, Q_LEN=q_len, KV_LEN=k_len, device=device, BLOCK_SIZE=block_size)
