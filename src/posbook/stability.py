r"""Keeping logits sane: attention entropy and its lower bound, softcap, and the QK-Clip weight update.

The entropy bound
-----------------
Softmax is shift-invariant, so what matters about a row of logits z ∈ ℝⁿ is its centred norm
R = ‖z − mean(z)‖₂. Among all rows with a given R, the entropy of softmax(z) is smallest when one logit stands
out by β and the other n − 1 are equal (posbook checks this numerically: no random or optimised row goes below).
Centring that row gives ‖z − z̄‖² = β²(n − 1)/n, so β = R·√(n/(n − 1)), and

.. math::

    H_{\min}(R) = \log\bigl(1 + (n-1)e^{-\beta}\bigr) + \frac{\beta\,(n-1)e^{-\beta}}{1 + (n-1)e^{-\beta}}.

It falls exponentially in β once (n − 1)e^(−β) ≪ 1: H ≈ (n − 1)(1 + β)e^(−β). This is the shape of the bound
that Zhai et al. (2023) prove in terms of the spectral norm σ of W_K·W_Qᵀ; with logits z_j = x_iᵀ W_Q W_Kᵀ x_j · s,
R ≤ ‖z‖ ≤ s·σ·‖x_i‖·‖X‖₂, so a larger σ permits lower entropy (chapter "Entropy collapse").
"""

from __future__ import annotations

import math

import torch

from . import _checks


def attention_entropy(weights: torch.Tensor, *, dim: int = -1) -> torch.Tensor:
    """Shannon entropy (nats) of attention rows along ``dim``, with 0·log 0 = 0. Rows should sum to 1; weights must
    be finite and >= 0."""
    _checks.tensor("weights", weights, ndim_min=1, floating=True)
    _checks.axis("dim", dim, weights.ndim)
    _checks.finite("weights", weights)
    if bool((weights < 0).any()):
        raise ValueError("weights must be >= 0 (probabilities)")
    logs = torch.where(weights > 0, weights.log(), torch.zeros_like(weights))
    return -(weights * logs).sum(dim=dim)


def entropy_lower_bound(logit_norm: float | torch.Tensor, n: int) -> torch.Tensor:
    """The least entropy (nats) that softmax can reach over ``n`` keys when the logits' centred 2-norm is at most
    ``logit_norm`` (see the module docstring for the derivation). Equals log n at 0 and tends to 0 as the norm grows.

    ``logit_norm`` is a number or a floating tensor of norms (finite, >= 0); the result is float64 of its shape.
    """
    norm = _checks.real_or_tensor("logit_norm", logit_norm, min_value=0)
    _checks.number("n", n, integer=True, min_value=2)
    beta = norm * math.sqrt(n / (n - 1))
    tail = (n - 1) * torch.exp(-beta)
    return torch.log1p(tail) + beta * tail / (1 + tail)


def extremal_logits(logit_norm: float, n: int, *, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """The centred row with norm ``logit_norm`` whose softmax has the least entropy: one logit above the rest."""
    _checks.number("logit_norm", logit_norm, min_value=0)
    _checks.size("n", n, min_value=2)
    _checks.dtype("dtype", dtype)
    beta = logit_norm * math.sqrt(n / (n - 1))
    z = torch.full((n,), -beta / n, dtype=dtype)
    z[0] = beta * (n - 1) / n
    return z


def softcap(logits: torch.Tensor, cap: float) -> torch.Tensor:
    """cap·tanh(logits/cap): close to the identity for logits much smaller than cap in magnitude, never beyond
    ±cap (Gemma 2 uses 50). Element-wise: NaN entries stay NaN and ±inf map to ±cap."""
    _checks.tensor("logits", logits, floating=True)
    _checks.number("cap", cap, positive=True)
    return softcapped(logits, cap)


def softcapped(logits: torch.Tensor, cap: float) -> torch.Tensor:
    """:func:`softcap` unchecked: cap·tanh(logits/cap), the one formula every attention path of :mod:`posbook.core`
    applies to its logits (the reference on the logits, flex_attention in its score modification)."""
    return cap * torch.tanh(logits / cap)


def qk_clip_factors(max_logits: torch.Tensor, tau: float) -> torch.Tensor:
    """QK-Clip's per-head factor γ_h = min(1, τ / S_max^h) (Kimi K2, 2025).

    ``max_logits`` holds each head's largest logit S_max^h seen in the step (after the 1/√d scale).
    """
    _checks.tensor("max_logits", max_logits, ndim=1, floating=True)
    _checks.finite("max_logits", max_logits)
    _checks.number("tau", tau, positive=True)
    ratio = tau / max_logits.clamp(min=torch.finfo(max_logits.dtype).tiny)
    return torch.where(max_logits > tau, ratio, torch.ones_like(max_logits))


def _head_rows(name: str, weight: torch.Tensor, n_heads: int, per_head: int) -> torch.Tensor:
    """weight [n_heads·per_head, hidden] (checked by the caller) as [n_heads, per_head, hidden]."""
    if weight.shape[0] != n_heads * per_head:
        raise ValueError(f"{name} must have n_heads·{per_head} = {n_heads * per_head} rows, got {weight.shape[0]}")
    return weight.view(n_heads, per_head, weight.shape[1])


@torch.no_grad()
def qk_clip_(w_q: torch.Tensor, w_k: torch.Tensor, gamma: torch.Tensor, *, head_dim: int,
             alpha: float = 0.5) -> None:
    """QK-Clip for multi-head attention, in place: head h's W_q rows × γ_h^α, its W_k rows × γ_h^(1−α).

    Every logit of head h is then multiplied by exactly γ_h, so a head whose max logit was S > τ now peaks at τ;
    heads with γ_h = 1 are untouched. Weights are [n_heads·head_dim, hidden] (rows = output features, as in
    ``nn.Linear``). The update runs after the optimizer step, outside the graph. With shared key heads (GQA) a
    key head serves several query heads, so only ``alpha=1`` (all of γ on the queries) is allowed there.
    """
    _checks.tensor("gamma", gamma, ndim=1, floating=True)
    _checks.finite("gamma", gamma)
    _checks.tensor("w_q", w_q, ndim=2, floating=True)
    _checks.finite("w_q", w_q)
    _checks.tensor("w_k", w_k, ndim=2, floating=True)
    _checks.finite("w_k", w_k)
    _checks.size("head_dim", head_dim)
    _checks.number("alpha", alpha, min_value=0, max_value=1)
    if bool((gamma <= 0).any()) or bool((gamma > 1).any()):
        raise ValueError("gamma must be in (0, 1] (from qk_clip_factors)")
    n_heads = gamma.shape[0]
    q_rows = _head_rows("w_q", w_q, n_heads, head_dim)
    if w_k.shape[0] != w_q.shape[0]:
        if alpha != 1:
            raise ValueError(f"w_k has {w_k.shape[0]} rows but w_q has {w_q.shape[0]}: key heads are shared (GQA), "
                             f"so only alpha=1 is allowed, got alpha={alpha}")
        q_rows.mul_(gamma.to(w_q.dtype)[:, None, None])
        return
    k_rows = _head_rows("w_k", w_k, n_heads, head_dim)
    q_rows.mul_((gamma ** alpha).to(w_q.dtype)[:, None, None])
    k_rows.mul_((gamma ** (1 - alpha)).to(w_k.dtype)[:, None, None])


@torch.no_grad()
def qk_clip_mla_(w_q_nope: torch.Tensor, w_q_rope: torch.Tensor, w_k_nope: torch.Tensor, gamma: torch.Tensor, *,
                 qk_nope_head_dim: int, qk_rope_head_dim: int) -> None:
    """QK-Clip for multi-head latent attention (Kimi K2), in place.

    An MLA logit of head h is q^C_h·k^C_h + q^R_h·k^R: a content part from head-specific up-projections and a
    rotary part whose key k^R is shared by all heads. The update scales q^C_h and k^C_h by √γ_h and q^R_h by γ_h,
    so both parts, and the whole logit, scale by γ_h; k^R is left alone because scaling it would change every
    other head's logits too.

    Args:
        w_q_nope: [n_heads·qk_nope_head_dim, q_in] rows producing q^C.
        w_q_rope: [n_heads·qk_rope_head_dim, q_in] rows producing q^R.
        w_k_nope: [n_heads·qk_nope_head_dim, kv_lora_rank] rows of the key up-projection producing k^C.
        gamma: [n_heads] factors from :func:`qk_clip_factors`.
    """
    _checks.tensor("gamma", gamma, ndim=1, floating=True)
    _checks.finite("gamma", gamma)
    if bool((gamma <= 0).any()) or bool((gamma > 1).any()):
        raise ValueError("gamma must be in (0, 1] (from qk_clip_factors)")
    n_heads = gamma.shape[0]
    _checks.size("qk_nope_head_dim", qk_nope_head_dim)
    _checks.size("qk_rope_head_dim", qk_rope_head_dim)
    for name, weight in (("w_q_nope", w_q_nope), ("w_q_rope", w_q_rope), ("w_k_nope", w_k_nope)):
        _checks.tensor(name, weight, ndim=2, floating=True)
        _checks.finite(name, weight)
    q_c = _head_rows("w_q_nope", w_q_nope, n_heads, qk_nope_head_dim)
    q_r = _head_rows("w_q_rope", w_q_rope, n_heads, qk_rope_head_dim)
    k_c = _head_rows("w_k_nope", w_k_nope, n_heads, qk_nope_head_dim)
    q_c.mul_(gamma.sqrt().to(w_q_nope.dtype)[:, None, None])
    k_c.mul_(gamma.sqrt().to(w_k_nope.dtype)[:, None, None])
    q_r.mul_(gamma.to(w_q_rope.dtype)[:, None, None])


def max_logits_per_head(q: torch.Tensor, k: torch.Tensor, *, scale: float | None = None,
                        causal: bool = False) -> torch.Tensor:
    r"""Each head's largest attention logit over a batch, S_max^h = scale · max_{b,i,j} q_{b,h,i} · k_{b,h,j}.

    This is the signal QK-Clip (Kimi K2) feeds to :func:`qk_clip_factors`. ``q`` is [batch, heads, Tq, d] and ``k``
    is [batch, heads, Tk, d] (repeat shared key heads first); ``scale`` defaults to 1/√d. With ``causal`` (Tq = Tk)
    only the pairs j ≤ i count, as in a decoder. The max is signed: a very negative logit only sends weight to
    zero and is not what QK-Clip bounds. Computed without gradient, in the inputs' dtype (q and k share one).
    It runs every training step, so it does not check q and k for NaN or inf: they propagate to the maxima, which
    :func:`qk_clip_factors` then refuses.
    """
    _checks.tensor("q", q, ndim=4, floating=True)
    _checks.tensor("k", k, ndim=4, floating=True)
    if q.shape[:2] != k.shape[:2] or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must agree in batch, heads and head_dim, got q {tuple(q.shape)}, k {tuple(k.shape)}")
    if q.dtype != k.dtype:
        raise TypeError(f"q and k must have one dtype, got q {q.dtype}, k {k.dtype}")
    _checks.flag("causal", causal)
    if causal and q.shape[2] != k.shape[2]:
        raise ValueError(f"causal needs Tq == Tk, got Tq={q.shape[2]}, Tk={k.shape[2]}")
    if scale is None:
        scale = q.shape[-1] ** -0.5
    _checks.number("scale", scale, positive=True)
    with torch.no_grad():
        logits = (q @ k.transpose(-1, -2)) * scale
        if causal:
            t = q.shape[2]
            future = torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1)
            logits = logits.masked_fill(future, -math.inf)
        return logits.amax(dim=(0, 2, 3))


def logit_rows_with_norm(n: int, norms: torch.Tensor | list[float], count: int, *,
                         generator: torch.Generator | None = None) -> torch.Tensor:
    """Random rows of ``n`` logits in uniformly random directions, centred and scaled to each given norm.

    Softmax ignores a common shift, so only the centred part of a row matters; the rows returned have mean zero
    and centred 2-norm exactly ``norms[i]`` (float64). Used to hold sampled rows against
    :func:`posbook.stability.entropy_lower_bound`.

    Args:
        n: keys per row (at least 2).
        norms: non-negative norms R: a list of numbers or a 1-D floating tensor, not empty.
        count: rows drawn per norm.
        generator: optional torch.Generator for reproducibility.
    Returns:
        float64 tensor [len(norms), count, n].
    """
    _checks.size("n", n, min_value=2)
    _checks.size("count", count)
    if isinstance(norms, torch.Tensor):
        radii = _checks.real_or_tensor("norms", norms, min_value=0)
        if radii.ndim != 1 or radii.numel() == 0:
            raise ValueError(f"norms must be a non-empty 1-D tensor, got {_checks._show(norms)}")
    else:
        radii = torch.tensor(_checks.numbers("norms", norms, min_value=0), dtype=torch.float64)
    _checks.generator("generator", generator)
    z = torch.randn(radii.numel(), count, n, generator=generator, dtype=torch.float64)
    z = z - z.mean(dim=-1, keepdim=True)
    z = z / z.norm(dim=-1, keepdim=True)
    return z * radii[:, None, None]
