"""Additive position biases: ALiBi and T5's relative-position buckets.

Both add a number that depends only on the distance j − i to the attention logit, after the 1/√d scaling.
They never touch q, k or v, so they stay out of the KV cache and commute with any projection of k and v
(chapter "ALiBi and T5 biases").
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from . import _checks


def relative_positions(q_len: int, k_len: int | None = None, *, device: torch.device | str | None = None) -> torch.Tensor:
    """The [q_len, k_len] matrix of key position minus query position, j − i.

    Queries are the last ``q_len`` of the ``k_len`` positions (a decoding step with a KV cache has q_len = 1),
    so the diagonal of the last query block is 0 and past keys have negative entries.
    """
    q_len, k_len = _checks.query_key_sizes(q_len, k_len)
    if device is not None:
        _checks.device("device", device)
    q_pos = torch.arange(k_len - q_len, k_len, device=device)
    return torch.arange(k_len, device=device)[None, :] - q_pos[:, None]


def alibi_slopes(n_heads: int, *, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """ALiBi's per-head slopes m_h (Press et al. 2022), for any number of heads.

    For a power of two n the slopes are the geometric sequence r, r², …, rⁿ with r = 2^(−8/n). For other n the
    reference construction takes all slopes for the largest power of two p < n, then every other slope of the
    sequence for 2p until there are n: the extra heads get slopes that interleave with the first p.
    """
    _checks.size("n_heads", n_heads)
    _checks.dtype("dtype", dtype)

    def geometric(n: int) -> list[float]:
        ratio = 2.0 ** (-8.0 / n)
        return [ratio ** (h + 1) for h in range(n)]

    p = 2 ** int(math.floor(math.log2(n_heads)))
    slopes = geometric(p) + geometric(2 * p)[0::2][: n_heads - p]
    return torch.tensor(slopes, dtype=torch.float64).to(dtype)


def alibi_bias(slopes: torch.Tensor, q_len: int, k_len: int | None = None) -> torch.Tensor:
    """The ALiBi bias :math:`-m_h |j - i|`, shape [n_heads, q_len, k_len], to add to the already-scaled logits.

    It is not divided by √d: ALiBi adds it to q·kᵀ/√d. For causal attention only j ≤ i survives the mask, where
    :math:`-|j - i| = j - i`; the absolute value makes the same bias usable without a causal mask (a symmetric variant).
    """
    _checks.tensor("slopes", slopes, ndim=1, floating=True)
    _checks.finite("slopes", slopes)
    return _alibi(slopes, relative_positions(q_len, k_len, device=slopes.device))


def _alibi(slopes: torch.Tensor, relative: torch.Tensor) -> torch.Tensor:
    """−m_h |j − i| for relative positions [..., q_len, k_len] → [..., n_heads, q_len, k_len] (unchecked)."""
    return -slopes[:, None, None] * relative.abs().to(slopes.dtype)[..., None, :, :]


def t5_relative_buckets(relative_position: torch.Tensor, *, bidirectional: bool = True, num_buckets: int = 32,
                        max_distance: int = 128) -> torch.Tensor:
    """T5's bucket index for each relative position j − i (Raffel et al. 2020).

    Half of the buckets (of each direction, when ``bidirectional``) hold the exact distances 0, 1, …; the rest
    cover distances up to ``max_distance`` on a log scale, and every farther distance shares the last bucket.
    With ``bidirectional=False`` (a decoder) keys after the query (j > i) fall in bucket 0, as at distance 0;
    the causal mask removes them anyway.
    """
    _checks.tensor("relative_position", relative_position, integer=True)
    _checks.flag("bidirectional", bidirectional)
    _checks.size("num_buckets", num_buckets)
    _checks.number("max_distance", max_distance, integer=True, positive=True)
    per_direction = num_buckets // 2 if bidirectional else num_buckets
    exact = per_direction // 2
    if exact < 1:
        raise ValueError(f"num_buckets must leave at least 2 buckets per direction, got num_buckets={num_buckets}")
    if max_distance <= exact:
        raise ValueError(f"max_distance must exceed the exact range ({exact} buckets), got {max_distance}")

    if bidirectional:
        offset = (relative_position > 0).long() * per_direction
        distance = relative_position.abs()
    else:
        offset = torch.zeros_like(relative_position)
        distance = (-relative_position).clamp(min=0)
    # Distances from `exact` to max_distance map linearly in log(distance) onto the remaining buckets.
    log_ratio = torch.log(distance.clamp(min=1).float() / exact) / math.log(max_distance / exact)
    far = (exact + (log_ratio * (per_direction - exact)).long()).clamp(max=per_direction - 1)
    return offset + torch.where(distance < exact, distance, far)


def _check_distances(relative: Any, device: torch.device) -> None:
    _checks.tensor("relative", relative, ndim_min=2, integer=True)
    if relative.device != device:
        raise ValueError(f"relative must be on the bias's device {device}, got {relative.device}")


class T5RelativeBias(nn.Module):
    """T5's learned bias: one scalar per (bucket, head), looked up for every (query, key) pair.

    ``forward(q_len, k_len)`` returns [n_heads, q_len, k_len], to add to the logits. T5 itself does not scale
    logits by 1/√d, so with :func:`posbook.core.attention` pass it as ``bias`` and choose ``scale`` as the model does.
    """

    def __init__(self, n_heads: int, *, bidirectional: bool = True, num_buckets: int = 32, max_distance: int = 128):
        super().__init__()
        _checks.size("n_heads", n_heads)
        t5_relative_buckets(torch.zeros(1, dtype=torch.long), bidirectional=bidirectional, num_buckets=num_buckets,
                            max_distance=max_distance)  # validates the bucket arguments once, here
        self.bidirectional, self.num_buckets, self.max_distance = bidirectional, num_buckets, max_distance
        self.embedding = nn.Embedding(num_buckets, n_heads)

    def forward(self, q_len: int, k_len: int | None = None) -> torch.Tensor:
        return self.for_distances(relative_positions(q_len, k_len, device=self.embedding.weight.device))

    def for_distances(self, relative: torch.Tensor) -> torch.Tensor:
        """The bias for a matrix of relative positions j − i, [..., q_len, k_len] (integers on the module's device,
        e.g. from position ids: ``p[..., None, :] - p[..., :, None]``) → [..., n_heads, q_len, k_len]. Shapes, dtype
        and device are checked; no value is read on the host."""
        _check_distances(relative, self.embedding.weight.device)
        buckets = t5_relative_buckets(relative, bidirectional=self.bidirectional, num_buckets=self.num_buckets,
                                      max_distance=self.max_distance)
        return self.embedding(buckets).movedim(-1, -3)


class ALiBiBias(nn.Module):
    """ALiBi as a module: the slopes of :func:`alibi_slopes` for ``n_heads`` heads, fixed (a buffer, not learned).

    ``forward(q_len, k_len)`` returns :func:`alibi_bias`'s [n_heads, q_len, k_len], without re-checking the slopes
    it made itself, so a model calls it every step without reading tensor values on the host.
    """

    def __init__(self, n_heads: int):
        super().__init__()
        self.register_buffer("slopes", alibi_slopes(n_heads), persistent=False)

    def forward(self, q_len: int, k_len: int | None = None) -> torch.Tensor:
        return _alibi(self.slopes, relative_positions(q_len, k_len, device=self.slopes.device))

    def for_distances(self, relative: torch.Tensor) -> torch.Tensor:
        """The bias for a matrix of relative positions j − i, [..., q_len, k_len] (integers on the slopes' device,
        e.g. from position ids: ``p[..., None, :] - p[..., :, None]``) → [..., n_heads, q_len, k_len]. Shapes, dtype
        and device are checked; no value is read on the host."""
        _check_distances(relative, self.slopes.device)
        return _alibi(self.slopes, relative)


BIASES: dict[str, type[nn.Module]] = {"alibi": ALiBiBias, "t5": T5RelativeBias}
"""The registry of additive position biases, name → module class. Each is built as ``cls(n_heads, **options)``,
and its ``forward(q_len, k_len)`` returns the [n_heads, q_len, k_len] bias to add to the scaled logits;
``for_distances(relative)`` returns it for any matrix of relative positions j − i (position ids other than 0 … T − 1).

:meta hide-value:
"""
