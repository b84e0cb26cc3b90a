"""How alike two attention patterns are: KL and Jensen–Shannon divergences, and the head-pair distance.

Kazemnejad et al. (2023) compare position schemes by the Jensen–Shannon divergence between their heads'
attention rows (chapter "Length generalisation"); chapter "NoPE" uses the same distance between exact
constructions.
"""

from __future__ import annotations

from typing import Any

import torch

from . import _checks


def _distribution(name: str, value: Any, **shape: int) -> torch.Tensor:
    """Probabilities: a floating tensor of finite entries >= 0, as float64."""
    _checks.tensor(name, value, floating=True, **shape)
    _checks.finite(name, value)
    if bool((value < 0).any()):
        raise ValueError(f"{name} must hold probabilities (no negative entries), got {_checks._show(value)}")
    return value.to(torch.float64)


def _check_distributions(p: Any, q: Any) -> tuple[torch.Tensor, torch.Tensor]:
    p, q = _distribution("p", p, ndim_min=1), _distribution("q", q, ndim_min=1)
    try:
        torch.broadcast_shapes(p.shape, q.shape)
    except RuntimeError:
        raise ValueError(f"p and q must have broadcastable shapes, got {tuple(p.shape)} and {tuple(q.shape)}") from None
    return p, q


def _kl(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    return (torch.special.xlogy(p, p) - torch.special.xlogy(p, q)).sum(-1)


def _js(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    m = (p + q) / 2
    return (_kl(p, m) + _kl(q, m)) / 2


def kl_divergence(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    r""":math:`\mathrm{KL}(p\,\|\,q) = \sum_i p_i \log(p_i / q_i)` in nats over the last dimension (0·log 0 = 0;
    infinite where q_i = 0 < p_i). p and q (finite, >= 0) broadcast against each other. float64."""
    return _kl(*_check_distributions(p, q))


def js_divergence(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    r"""The Jensen–Shannon divergence :math:`\tfrac12\mathrm{KL}(p\|m) + \tfrac12\mathrm{KL}(q\|m)`,
    :math:`m = (p + q)/2`, in nats over the last dimension: symmetric, 0 only for p = q, at most ln 2 (for
    distributions with disjoint support), and finite whatever zeros p and q have. float64."""
    return _js(*_check_distributions(p, q))


DIVERGENCE_FORMS = ("textbook", "reversed")
"""The ways two rows p and q are compared. ``"textbook"`` is the Jensen–Shannon divergence ½[KL(p‖m) + KL(q‖m)];
``"reversed"`` is ½[KL(m‖p) + KL(m‖q)], m = (p + q)/2, the form of the NoPE paper's code
(McGill-NLP/length-generalization, ``attention_kl_analyzer.py``): not bounded by ln 2, infinite where p or q has a
zero that m has not."""

HEAD_PAIRS = ("all", "i<j")
"""The head pairs the layer distance takes its minimum over. ``"all"`` is every (i, j); ``"i<j"`` only i < j, as the
NoPE paper's code does."""


def head_pair_divergence(weights_a: torch.Tensor, weights_b: torch.Tensor, *, form: str = "textbook") -> torch.Tensor:
    r"""Mean divergence between every head of one layer of model A and every head of the same layer of model B,
    on the same inputs: entry [i, j] is :math:`\frac1T\sum_t D(P^{(i)}_t\,\|\,Q^{(j)}_t)` averaged over the batch
    as well, with D the Jensen–Shannon divergence (``form="textbook"``) or the reference code's form (see
    :data:`DIVERGENCE_FORMS`). Kazemnejad et al. (2023, Eq. 2) take the minimum over all pairs as the layer's
    distance between the two models (:func:`pattern_distance`).

    Args:
        weights_a: [batch, Ha, T, T] attention weights of model A's layer (rows are distributions over keys;
            finite, >= 0; batch and T at least 1).
        weights_b: [batch, Hb, T, T] model B's, same batch and T.
        form: one of :data:`DIVERGENCE_FORMS`.
    Returns:
        [Ha, Hb] float64.
    """
    p = _distribution("weights_a", weights_a, ndim=4)
    q = _distribution("weights_b", weights_b, ndim=4)
    _checks.choice("form", form, DIVERGENCE_FORMS)
    if p.shape[0] != q.shape[0] or p.shape[2:] != q.shape[2:]:
        raise ValueError(f"weights_a and weights_b must share batch and [T, T]; got {tuple(p.shape)} and "
                         f"{tuple(q.shape)}")
    if p.shape[0] == 0 or p.shape[2] == 0:
        raise ValueError(f"weights_a and weights_b must hold at least one row to average over (batch and T >= 1), "
                         f"got {tuple(p.shape)}")
    p, q = p[:, :, None], q[:, None, :]
    if form == "textbook":
        return _js(p, q).mean(dim=(0, -1))
    m = (p + q) / 2
    return ((_kl(m, p) + _kl(m, q)) / 2).mean(dim=(0, -1))


def pattern_distance(weights_a: torch.Tensor, weights_b: torch.Tensor, *, form: str = "textbook",
                     pairs: str = "all") -> torch.Tensor:
    r"""The NoPE paper's distance between two layers' attention patterns: the minimum over head pairs of
    :func:`head_pair_divergence` (Kazemnejad et al. 2023, Eq. 2). 0 when some head of A equals some head of B.

    Args:
        weights_a, weights_b: [batch, H, T, T] attention weights of the two layers on the same inputs.
        form: one of :data:`DIVERGENCE_FORMS`.
        pairs: one of :data:`HEAD_PAIRS`; ``"i<j"`` needs at least two heads, ``"all"`` one.
    Returns:
        0-d float64 tensor.
    """
    _checks.choice("pairs", pairs, HEAD_PAIRS)
    per_pair = head_pair_divergence(weights_a, weights_b, form=form)
    if per_pair.numel() == 0:
        raise ValueError(f"weights_a and weights_b must hold at least one head each, got {tuple(per_pair.shape)} "
                         f"head pairs")
    if pairs == "i<j":
        if min(per_pair.shape) < 2:
            raise ValueError(f"pairs='i<j' needs at least two heads in each layer, got {tuple(per_pair.shape)}")
        per_pair = per_pair[torch.ones_like(per_pair, dtype=torch.bool).triu(1)]
    return per_pair.min()
