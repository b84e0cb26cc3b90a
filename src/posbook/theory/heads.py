"""Positional heads built by hand: a key that puts the score maximum at a chosen distance, and the attention
pattern such a head produces on a sequence of identical tokens.

Convention (as in :func:`posbook.score.rope_score_by_distance`): the query sits at position m, the key at
m − r, and the score is s(r) = ⟨R(m)q, R(m − r)k⟩ = ⟨R(r)q, k⟩. With k = R(δ)q the score is ‖q‖² at r = δ and, by
Cauchy–Schwarz and ‖R(r)q‖ = ‖q‖, no larger anywhere else (Barbero et al. 2024, "Round and Round We Go!").
"""

from __future__ import annotations

import torch

from .. import _checks
from ..core import attend
from ..rope import LAYOUTS, rope_cos_sin, rotate

__all__ = ["peak_key", "positional_head_weights"]


def _check_spectrum(q: torch.Tensor, inv_freq: torch.Tensor) -> None:
    _checks.tensor("q", q, ndim_min=1, floating=True)
    _checks.finite("q", q)
    _checks.tensor("inv_freq", inv_freq, ndim=1, floating=True)
    _checks.finite("inv_freq", inv_freq)
    if 2 * inv_freq.shape[0] > q.shape[-1]:
        raise ValueError(f"inv_freq holds {inv_freq.shape[0]} frequencies, so rotary_dim = {2 * inv_freq.shape[0]}; "
                         f"it must be <= q.shape[-1] (head_dim = {q.shape[-1]})")
    if inv_freq.shape[0] == 0:
        raise ValueError("inv_freq must hold at least one frequency, got an empty tensor")


def peak_key(q: torch.Tensor, inv_freq: torch.Tensor, delta: int, *, layout: str = "half") -> torch.Tensor:
    """The key k = R(δ)q whose RoPE score with q is largest at distance δ (query at m, key at m − δ).

    s(r) = ⟨R(r)q, R(δ)q⟩ = qᵀR(δ − r)q equals ‖q‖² at r = δ and is at most ‖q‖² for every r. Dimensions beyond
    rotary_dim = 2·len(inv_freq) pass through unchanged (partial RoPE), and planes with θ_i = 0 (the unrotated
    planes of p-RoPE) are not turned; both contribute the same ‖·‖² at every distance.

    Args:
        q: [..., head_dim] floating-point query.
        inv_freq: [rotary_dim/2] frequencies θ_i, rotary_dim ≤ head_dim.
        delta: the distance (an int, may be 0 or negative) at which the score should peak.
        layout: ``"half"`` or ``"interleaved"``, as in :func:`posbook.rope.apply_rope`.

    Returns:
        k with q's shape and dtype (the rotation is computed in float64).
    """
    _check_spectrum(q, inv_freq)
    _checks.number("delta", delta, integer=True)
    _checks.choice("layout", layout, LAYOUTS)
    cos, sin = rope_cos_sin(torch.tensor([delta], dtype=torch.float64), inv_freq.double(), layout=layout,
                           dtype=torch.float64)
    return rotate(q.double().unsqueeze(-2), cos, sin, layout=layout).squeeze(-2).to(q.dtype)


def positional_head_weights(q: torch.Tensor, inv_freq: torch.Tensor, delta: int, seq_len: int, *,
                            layout: str = "half") -> torch.Tensor:
    """Causal attention weights of a one-head layer on ``seq_len`` identical tokens, query q and key R(δ)q.

    Every position carries the same content, so the query is q and the key is :func:`peak_key` (q, δ) at every
    position; RoPE then turns them by their positions and a causal softmax (scale 1: put the sharpness in ‖q‖)
    gives the weights. δ = 0 builds a diagonal head (each token attends to itself), δ = 1 a previous-token head.
    With ``inv_freq`` all zero the head is NoPE: every score in a row is the same and each row is uniform over
    the visible keys, whatever q and δ — NoPE cannot tell identical tokens apart by position.

    Args:
        q: [head_dim] floating-point query (its norm sets the sharpness).
        inv_freq: [rotary_dim/2] frequencies (zeros allowed), rotary_dim ≤ head_dim.
        delta: the target distance, 0 ≤ δ < seq_len.
        seq_len: number of tokens T ≥ 1.
        layout: ``"half"`` or ``"interleaved"``.

    Returns:
        float64 weights [T, T]; row i is the distribution of query i over keys 0..i (zeros above the diagonal).
    """
    _check_spectrum(q, inv_freq)
    if q.ndim != 1:
        raise ValueError(f"q must be a single query of shape [head_dim], got {_checks._show(q)}")
    _checks.size("seq_len", seq_len)
    _checks.number("delta", delta, integer=True, min_value=0)
    if delta >= seq_len:
        raise ValueError(f"delta must be < seq_len = {seq_len}, got {delta}")
    _checks.choice("layout", layout, LAYOUTS)
    q64 = q.double()
    k64 = peak_key(q64, inv_freq, delta, layout=layout)
    cos, sin = rope_cos_sin(torch.arange(seq_len, dtype=torch.float64), inv_freq.double(), layout=layout,
                           dtype=torch.float64)
    qs = rotate(q64.expand(seq_len, -1), cos, sin, layout=layout)[None, None]
    ks = rotate(k64.expand(seq_len, -1), cos, sin, layout=layout)[None, None]
    v = torch.zeros(1, 1, seq_len, 1, dtype=torch.float64)
    _, weights = attend(qs, ks, v, scale=1.0, causal=True, impl="reference")
    return weights[0, 0]
