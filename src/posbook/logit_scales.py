"""Position-dependent logit scales: a factor per query position that sharpens attention as the context grows.

Both scales multiply the queries at position n (pass them as ``query_scale`` to :func:`posbook.core.attention`):
SWAN-GPT's log_a(a + n) and Llama 4's temperature tuning of its NoPE layers. Chapter "iRoPE and hybrids" shows
why a global layer without position needs one. :func:`scale_queries` is how the fast attention paths apply such a
factor: folded into the queries.
"""

from __future__ import annotations

import math

import torch

from . import _checks


def _check_positions(positions: torch.Tensor) -> None:
    _checks.positions("positions", positions, ndim=1)
    if bool((positions < 0).any()):
        raise ValueError("positions must be >= 0")


def llama4_attention_scale(positions: torch.Tensor, *, floor_scale: float = 8192.0,
                           attn_scale: float = 0.1) -> torch.Tensor:
    """Llama 4's temperature tuning for its NoPE layers: 1 + attn_scale·log(1 + ⌊(n + 1)/floor_scale⌋).

    The factor multiplies the queries at position n (Hugging Face ``Llama4TextAttention``, config keys
    ``floor_scale`` and ``attn_scale``), so it is 1 up to position floor_scale − 2 and then grows in steps of
    floor_scale positions, logarithmically. Pass it as ``query_scale``.
    """
    _check_positions(positions)
    _checks.number("floor_scale", floor_scale, positive=True)
    _checks.number("attn_scale", attn_scale, min_value=0)
    return torch.log1p(torch.floor((positions.double() + 1.0) / floor_scale)) * attn_scale + 1.0


def swan_log_scale(positions: torch.Tensor, *, a: float = 362.0) -> torch.Tensor:
    """SWAN-GPT's inference-time logit scale g(n) = log_a(a + n) for the query at position n (Puvvada et al. 2025).

    g(0) = 1 and the factor grows like ln(n)/ln(a); the paper fits a single a ≈ 362 offline and applies it mainly
    in the global NoPE layers. Pass it as ``query_scale``.
    """
    _check_positions(positions)
    _checks.number("a", a, positive=True)
    if a <= 1:
        raise ValueError(f"a must be > 1 (it is the logarithm's base), got {a!r}")
    return torch.log(a + positions.double()) / math.log(a)


LOGIT_SCALES = {"swan": swan_log_scale, "llama4": llama4_attention_scale}
"""The registry of position-dependent logit scales, name → ``f(positions, **options)`` returning the factor per
query position (float64).

:meta hide-value:
"""


def scale_queries(q: torch.Tensor, query_scale: torch.Tensor | None) -> torch.Tensor:
    """q [batch, Hq, Tq, d] with each query row multiplied by its factor (``query_scale`` broadcastable to
    [batch, Hq, Tq], or None for q itself); unchecked.

    A factor per row of the logits is the same factor on that row's query, so the fast attention paths (SDPA, the
    local kernels) take a query scale this way, folded into q in q's dtype.
    """
    return q if query_scale is None else q * query_scale.to(q.dtype).unsqueeze(-1)

