"""Additive position biases: ALiBi and T5's relative-position buckets, and the two computed from content, FoX's
forget gates and CoPE's contextual positions.

ALiBi and T5 add a number that depends only on the distance j − i to the attention logit, after the 1/√d
scaling. They never touch q, k or v, so they stay out of the KV cache and commute with any projection of k and v
(chapter "ALiBi and T5 biases"). FoX (Lin et al. 2025) adds the sum of log forget gates between key and query,
a gate per token computed from its hidden state: a data-dependent ALiBi. CoPE (Golovneva et al. 2024) counts
positions with gates σ(q_i·k_j) and adds q_i·e[p_ij], a learned embedding of that count (chapter "Position from
content"). Each bias class says what it reads (``reads``): distances, the layer's hidden states, or q and k.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
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

    reads = "distances"

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

    reads = "distances"

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


def forget_gate_bias(log_forget: torch.Tensor, q_len: int | None = None) -> torch.Tensor:
    """FoX's bias (Lin et al. 2025): for a query at i and a key at j ≤ i, the sum of the log forget gates of the
    tokens after the key up to the query, :math:`D_{ij} = \\sum_{l=j+1}^{i} \\log f_l`.

    Computed as c_i − c_j with c the running sum of log f along the sequence. Every gate 1 (log f = 0) is no bias at
    all (NoPE); a constant gate f is ALiBi with slope −log f, since the sum then has i − j equal terms. Entries with
    j > i come out as −(the sum between them), for a causal mask to hide.

    Args:
        log_forget: [..., k_len] log forget gates (≤ 0, finite), one per token; per head, [batch, heads, k_len].
        q_len: the queries are the last ``q_len`` tokens (default all, k_len).

    Returns:
        The bias to add to the scaled logits, shape [..., q_len, k_len], in float32 (float64 for float64 input).
    """
    _checks.tensor("log_forget", log_forget, ndim_min=1, floating=True)
    if not log_forget.shape[-1]:
        raise ValueError(f"log_forget must hold at least one token's gate, got shape {tuple(log_forget.shape)}")
    _checks.finite("log_forget", log_forget)
    if bool((log_forget > 0).any()):
        raise ValueError(f"log_forget must be at most 0 (the log of a gate in (0, 1]), got a maximum of "
                         f"{log_forget.max().item():.4g}")
    q_len, _ = _checks.query_key_sizes(log_forget.shape[-1] if q_len is None else q_len, log_forget.shape[-1])
    return _forget_gate(log_forget, q_len)


def _forget_gate(log_forget: torch.Tensor, q_len: int) -> torch.Tensor:
    """:func:`forget_gate_bias` unchecked."""
    compute = torch.float64 if log_forget.dtype == torch.float64 else torch.float32
    running = torch.cumsum(log_forget.to(compute), dim=-1)
    return running[..., -q_len:, None] - running[..., None, :]


def contextual_positions(logits: torch.Tensor) -> torch.Tensor:
    """CoPE's positions (Golovneva et al. 2024): :math:`p_{ij} = \\sum_{l=j}^{i} \\sigma(z_{il})`, the gates σ of
    the logits z of one query row summed from the key up to the query.

    A gate near 1 counts a token, one near 0 skips it, so p counts whatever the gates pick (words, sentences, one
    symbol). With every gate 1 the sum has i − j + 1 terms: the paper's sum includes both ends, so the key next to
    the query is at position 2 and the query itself at 1. Hidden keys (logit −inf) have gate 0 and count nothing;
    keys after the query must be hidden.

    Args:
        logits: [..., q_len, k_len] scaled logits with −inf where the mask hides a key (the queries the last q_len
            keys); NaN and +inf are refused.

    Returns:
        The counts p, of the shape of ``logits``.
    """
    _checks.logits("logits", logits)
    _checks.tensor("logits", logits, ndim_min=2, floating=True)
    return _contextual_positions(logits)


def _contextual_positions(logits: torch.Tensor) -> torch.Tensor:
    return torch.sigmoid(logits).flip(-1).cumsum(-1).flip(-1)


def cope_bias(q: torch.Tensor, logits: torch.Tensor, embeddings: torch.Tensor) -> torch.Tensor:
    """CoPE's bias q_i·e[p_ij]: the learned embedding of each contextual position (:func:`contextual_positions`),
    read between the two integer positions around p by linear interpolation, and dotted with the query.

    Positions past the table's last row (n_positions − 1) are clamped to it, so one embedding serves every
    farther count. The bias is not divided by √d (the paper adds q·e to logits already scaled).

    Args:
        q: [..., q_len, d] queries.
        logits: [..., q_len, k_len] the scaled logits the gates are read from, −inf where a key is hidden.
        embeddings: [d, n_positions] the position embeddings e[0], e[1], … as columns.

    Returns:
        The bias to add to ``logits``, shape [..., q_len, k_len]. NaN and ±inf in q or the embeddings, and NaN or
        +inf in the logits, are refused.
    """
    _checks.tensor("q", q, ndim_min=2, floating=True)
    _checks.finite("q", q)
    _checks.tensor("logits", logits, ndim_min=2, floating=True)
    _checks.logits("logits", logits)
    _checks.tensor("embeddings", embeddings, ndim=2, floating=True)
    _checks.finite("embeddings", embeddings)
    if embeddings.shape[0] != q.shape[-1] or not embeddings.shape[1]:
        raise ValueError(f"embeddings must be [d={q.shape[-1]}, n_positions >= 1], got shape {tuple(embeddings.shape)}")
    if logits.shape[-2] != q.shape[-2]:
        raise ValueError(f"logits must have one row per query ({q.shape[-2]}), got shape {tuple(logits.shape)}")
    try:
        leading = torch.broadcast_shapes(q.shape[:-2], logits.shape[:-2])
    except RuntimeError:
        leading = None
    if leading != logits.shape[:-2]:
        raise ValueError(f"q's leading dimensions must broadcast to the logits' {tuple(logits.shape[:-2])}, got "
                         f"q of shape {tuple(q.shape)}")
    return _cope(q, logits, embeddings)


def _cope(q: torch.Tensor, logits: torch.Tensor, embeddings: torch.Tensor) -> torch.Tensor:
    """:func:`cope_bias` unchecked. A NaN logit (from NaN in q or k) counts as position 0, so no index leaves the
    table; the attention that reads the same q and k carries the NaN to the layer's output."""
    positions = _contextual_positions(logits).nan_to_num(nan=0.0).clamp(min=0, max=embeddings.shape[-1] - 1)
    per_position = q.to(logits.dtype) @ embeddings.to(logits.dtype)        # q·e[n] for every integer n
    below = positions.floor()
    weight = positions - below
    at = per_position.expand(*positions.shape[:-1], per_position.shape[-1])
    low = torch.gather(at, -1, below.long())
    high = torch.gather(at, -1, positions.ceil().long())
    return low + weight * (high - low)


class ForgetGateBias(nn.Module):
    """FoX's forget gates as a bias module: f_t = σ(w_h·x_t + b_h) per head from each token's hidden state x_t, and
    :func:`forget_gate_bias` of their logs. The gate's weights start at the model's initialisation and its bias
    at 0 (f = 1/2, as the reference code does), so a fresh layer already favours recent tokens.

    ``forward(x)``: x [batch, T, n_embd] → [batch, n_heads, T, T]; nothing is read on the host.
    """

    reads = "hidden"

    def __init__(self, n_heads: int, *, n_embd: int):
        super().__init__()
        _checks.size("n_heads", n_heads)
        _checks.size("n_embd", n_embd)
        self.n_embd = n_embd
        self.gate = nn.Linear(n_embd, n_heads, bias=True)
        nn.init.zeros_(self.gate.bias)

    def log_forget(self, x: torch.Tensor) -> torch.Tensor:
        """log f per head and token, x [..., T, n_embd] → [..., n_heads, T], in float32 at least (the reference
        computes it in float32). Shapes and dtype are checked; no value is read on the host, so NaN and ±inf in x
        pass through to the gates."""
        _checks.tensor("x", x, ndim_min=2, floating=True)
        if x.shape[-1] != self.n_embd or not x.shape[-2]:
            raise ValueError(f"x must be [..., T >= 1, n_embd={self.n_embd}], got shape {tuple(x.shape)}")
        if x.dtype != self.gate.weight.dtype and not torch.is_autocast_enabled(x.device.type):
            raise TypeError(f"x must have the gate's dtype {self.gate.weight.dtype} (or run under torch.autocast), "
                            f"got {x.dtype}")
        return self._log_forget(x)

    def _log_forget(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.gate(x)
        compute = torch.float64 if logits.dtype == torch.float64 else torch.float32
        return F.logsigmoid(logits.to(compute)).transpose(-1, -2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [..., T, n_embd] → [..., n_heads, T, T], checked as :meth:`log_forget` checks it (NaN and ±inf in x
        pass through)."""
        return _forget_gate(self.log_forget(x), x.shape[-2])

    def unchecked(self, x: torch.Tensor) -> torch.Tensor:
        """:meth:`forward` unchecked, for the experiment model's FoX layer at every training step: its hidden
        states come from token ids that ``GPT.forward`` checked once."""
        return _forget_gate(self._log_forget(x), x.shape[-2])


class ContextualPositionBias(nn.Module):
    """CoPE as a bias module: learned embeddings e[0 … n_positions − 1] of width ``head_dim``, shared by the heads
    (as in the paper's code) and initialised at 0, so a fresh layer has no position; each head counts with its own
    gates σ(q·k).

    ``forward(q, k, scale)``: q [batch, n_heads, T, d], k [batch, kv_heads, T, d] (rotated or not, as the layer
    attends with them) → the causal [batch, n_heads, T, T] bias of :func:`cope_bias`, from logits q·kᵀ·scale.
    """

    reads = "queries_keys"

    def __init__(self, n_heads: int, *, head_dim: int, n_positions: int):
        super().__init__()
        _checks.size("n_heads", n_heads)
        _checks.size("head_dim", head_dim)
        _checks.size("n_positions", n_positions, min_value=2)
        self.n_heads = n_heads
        self.embeddings = nn.Parameter(torch.zeros(head_dim, n_positions))

    def forward(self, q: torch.Tensor, k: torch.Tensor, scale: float) -> torch.Tensor:
        """Shapes, dtypes and ``scale`` are checked; no tensor value is read on the host, so NaN and ±inf in q and k
        pass through (a NaN logit counts as position 0)."""
        return _cope(q, self._logits(q, k, scale), self.embeddings)

    def unchecked(self, q: torch.Tensor, k: torch.Tensor, scale: float) -> torch.Tensor:
        """:meth:`forward` unchecked, for the experiment model's CoPE layer at every training step: it made q, k and
        scale itself from hidden states that ``GPT.forward`` checked once."""
        return _cope(q, self._masked_logits(q, k, scale), self.embeddings)

    def positions(self, q: torch.Tensor, k: torch.Tensor, scale: float) -> torch.Tensor:
        """The counts p the layer reads its embeddings at (:func:`contextual_positions` of its causal logits),
        [batch, n_heads, T, T], before the table's clamp; checked as :meth:`forward` checks its arguments (NaN and
        ±inf in q and k pass through)."""
        return _contextual_positions(self._logits(q, k, scale))

    def _logits(self, q: torch.Tensor, k: torch.Tensor, scale: float) -> torch.Tensor:
        """q·kᵀ·scale in float32 at least, keys after each query at −inf, after checking q, k and scale."""
        _checks.tensor("q", q, ndim=4, floating=True)
        _checks.tensor("k", k, ndim=4, floating=True)
        _checks.number("scale", scale, positive=True)
        batch, heads, t_q, width = q.shape
        if heads != self.n_heads or width != self.embeddings.shape[0] or not t_q:
            raise ValueError(f"q must be [batch, n_heads={self.n_heads}, T >= 1, head_dim={self.embeddings.shape[0]}], got "
                             f"shape {tuple(q.shape)}")
        if k.shape[0] != batch or k.shape[3] != width or not k.shape[1] or heads % k.shape[1] or k.shape[2] < q.shape[2]:
            raise ValueError(f"k must be [batch={batch}, heads dividing {heads}, T >= {q.shape[2]}, {width}], got shape "
                             f"{tuple(k.shape)}")
        return self._masked_logits(q, k, scale)

    @staticmethod
    def _masked_logits(q: torch.Tensor, k: torch.Tensor, scale: float) -> torch.Tensor:
        k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1) if k.shape[1] != q.shape[1] else k
        compute = torch.float64 if q.dtype == torch.float64 else torch.float32       # gates and counts in float32 at least
        logits = (q.to(compute) @ k.to(compute).transpose(-2, -1)) * scale
        t_q, t_k = logits.shape[-2:]
        return logits.masked_fill(relative_positions(t_q, t_k, device=q.device) > 0, float("-inf"))


BIASES: dict[str, type[nn.Module]] = {"alibi": ALiBiBias, "t5": T5RelativeBias, "forget": ForgetGateBias,
                                      "cope": ContextualPositionBias}
"""The registry of additive position biases, name → module class. Each is built as ``cls(n_heads, **options)``
and says what it reads in ``cls.reads``:

- ``"distances"`` (ALiBi, T5): ``forward(q_len, k_len)`` returns the [n_heads, q_len, k_len] bias to add to the
  scaled logits; ``for_distances(relative)`` returns it for any matrix of relative positions j − i (position ids
  other than 0 … T − 1).
- ``"hidden"`` (FoX's forget gates, ``n_embd=``): ``forward(x)`` from the layer's input [batch, T, n_embd] →
  [batch, n_heads, T, T].
- ``"queries_keys"`` (CoPE, ``head_dim=``, ``n_positions=``): ``forward(q, k, scale)`` → [batch, n_heads, T, T].

:meta hide-value:
"""
