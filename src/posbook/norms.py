r"""Normalisation of q and k before RoPE: RMSNorm, its zero-centred form, and per-head QK-Norm.

QK-Norm (Henry et al. 2020; ViT-22B, Dehghani et al. 2023) normalises q and k after the projections and before
the rotation. Qwen3 does it per head, over head_dim, which is what :class:`QKNorm` implements; OLMo 2 normalises
the whole projection (all heads at once) instead. Per head, each normalised vector has an RMS equal to its gain, so
with unit gains :math:`|q \cdot k| \le \|q\|\,\|k\| = d_\text{head}` and the logits cannot grow without
bound (chapter "QK-Norm, softcap, QK-Clip").
"""

from __future__ import annotations

import torch
from torch import nn

from . import _checks


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None = None, *, eps: float = 1e-6,
             zero_centred: bool = False) -> torch.Tensor:
    """x / RMS(x) over the last dimension, times a gain.

    The gain is ``weight`` (plain RMSNorm) or ``1 + weight`` when ``zero_centred`` (Gemma, Qwen3-Next: weights
    start at 0, so weight decay pulls the gain towards 1 instead of towards 0). The statistics are computed in
    float32 (or float64 for float64 input). The two families round differently in bf16, and each is followed:
    plain RMSNorm casts the normalised x back to x's dtype and then multiplies by the gain (Llama, Qwen3);
    zero-centred RMSNorm multiplies by 1 + weight in float32 and casts last (Gemma). It runs in every layer of a
    model at every step, so it reads no values on the host: NaN and ±inf entries of x or weight propagate to the
    output.
    """
    _checks.tensor("x", x, ndim_min=1, floating=True)
    _checks.number("eps", eps, positive=True)
    _checks.flag("zero_centred", zero_centred)
    if weight is not None:
        _checks.tensor("weight", weight, ndim=1, floating=True)
        if weight.shape[0] != x.shape[-1]:
            raise ValueError(f"weight must have x.shape[-1]={x.shape[-1]} entries, got {weight.shape[0]}")
    elif zero_centred:
        raise ValueError("zero_centred=True needs weight (the gain is 1 + weight), got weight=None")
    compute = torch.float64 if x.dtype == torch.float64 else torch.float32
    y = x.to(compute)
    y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + eps)
    if weight is None:
        return y.to(x.dtype)
    if zero_centred:
        return (y * (1 + weight.to(compute))).to(x.dtype)
    return weight.to(x.dtype) * y.to(x.dtype)


class RMSNorm(nn.Module):
    """RMSNorm with a learned gain over the last dimension; ``zero_centred`` stores the gain as 1 + weight."""

    def __init__(self, dim: int, *, eps: float = 1e-6, zero_centred: bool = False):
        super().__init__()
        _checks.size("dim", dim)
        _checks.number("eps", eps, positive=True)
        _checks.flag("zero_centred", zero_centred)
        self.eps, self.zero_centred = eps, zero_centred
        self.weight = nn.Parameter(torch.zeros(dim) if zero_centred else torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """:func:`rms_norm` of x [..., dim] with this gain; NaN and ±inf entries propagate to the output."""
        return rms_norm(x, self.weight, eps=self.eps, zero_centred=self.zero_centred)


class QKNorm(nn.Module):
    """Per-head RMSNorm of queries and keys, one gain vector of size head_dim each (shared by the heads).

    ``forward(q, k)`` takes [..., heads, T, head_dim] tensors and returns the normalised pair; apply it before
    RoPE. The gains have shape [head_dim], as ``self_attn.q_norm.weight`` in Qwen3.
    """

    def __init__(self, head_dim: int, *, eps: float = 1e-6, zero_centred: bool = False):
        super().__init__()
        _checks.size("head_dim", head_dim)
        self.q_norm = RMSNorm(head_dim, eps=eps, zero_centred=zero_centred)
        self.k_norm = RMSNorm(head_dim, eps=eps, zero_centred=zero_centred)

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """q and k [..., head_dim], each RMS-normalised with its gain; NaN and ±inf entries propagate to the output."""
        head_dim = self.q_norm.weight.shape[0]
        for name, x in (("q", q), ("k", k)):
            _checks.tensor(name, x, ndim_min=1, floating=True)
            if x.shape[-1] != head_dim:
                raise ValueError(f"{name}.shape[-1] must be head_dim={head_dim}, got {tuple(x.shape)}")
        return self.q_norm(q), self.k_norm(k)


def qk_norm_logit_bound(head_dim: int, *, q_gain: torch.Tensor | None = None, k_gain: torch.Tensor | None = None,
                        scale: float | None = None) -> float:
    r"""The largest attention logit a QK-normed head can produce: ``scale · max|g_q| · max|g_k| · head_dim``.

    After RMSNorm a head's vector has RMS 1, so its norm is √head_dim and, with unit gains,
    :math:`|q \cdot k| \le d_\text{head}`; the logit after the usual ``scale`` = 1/√head_dim is then at most
    √head_dim. A learned gain ``g`` (the effective one: ``weight``, or ``1 + weight`` for zero-centred RMSNorm)
    multiplies coordinate i by g_i, so the bound grows by max|g_q|·max|g_k|. It is attained: put all of q's and
    k's RMS on the coordinate where both gains peak (chapter "QK-Norm, softcap and QK-Clip").
    RoPE comes after the norm and keeps norms, so the bound also holds for the rotated vectors when the
    gains are 1; with non-uniform gains it bounds the unrotated logit (a rotation mixes coordinates of a plane).

    Args:
        head_dim: size of each head.
        q_gain, k_gain: effective gain vectors of shape [head_dim]; None means all ones.
        scale: logit scale; None means 1/√head_dim. Pass 1.0 for the raw dot product.
    """
    _checks.number("head_dim", head_dim, integer=True, positive=True)
    peaks = []
    for name, gain in (("q_gain", q_gain), ("k_gain", k_gain)):
        if gain is None:
            peaks.append(1.0)
            continue
        _checks.tensor(name, gain, ndim=1, floating=True)
        _checks.finite(name, gain)
        if gain.shape[0] != head_dim:
            raise ValueError(f"{name} must have head_dim={head_dim} entries, got {gain.shape[0]}")
        peaks.append(float(gain.detach().abs().max()))
    if scale is None:
        scale = head_dim ** -0.5
    _checks.number("scale", scale, positive=True)
    return float(scale) * peaks[0] * peaks[1] * head_dim
