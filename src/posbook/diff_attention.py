"""Differential attention (Ye et al. 2024): the difference of two softmax maps, so common-mode noise cancels.

For each of h heads, queries and keys are split in two halves of size d, values have size 2d::

    DiffAttn = (softmax(Q₁K₁ᵀ/√d) − λ·softmax(Q₂K₂ᵀ/√d))·V
    λ = exp(λ_q1·λ_k1) − exp(λ_q2·λ_k2) + λ_init,  λ_init(l) = 0.8 − 0.6·exp(−0.3·(l − 1))
    head_i ← (1 − λ_init)·RMSNorm(head_i)

with h = d_model/(2d), half the heads of a Transformer with head size d, so that parameters and FLOPs match.
Each head caches K₁, K₂ (2d numbers) and V (2d): 4d·h = 2·d_model per token and layer, the same as that
Transformer's 2·(d_model/d)·d (chapter "Differential attention").
"""

from __future__ import annotations

import math

import torch
from torch import nn

from . import _checks
from .core import attend, resolved_impl
from .normalisers import normalised
from .norms import RMSNorm
from .rope import rotate


def lambda_init(layer: int) -> float:
    """λ_init(l) = 0.8 − 0.6·exp(−0.3·(l − 1)) for layer l = 1, 2, … (0.2 at the first layer, → 0.8 with depth).

    The paper counts layers from 1; the reference code (microsoft/unilm, ``lambda_init_fn(depth)``) writes
    0.8 − 0.6·exp(−0.3·depth) with a 0-based depth. Both give 0.2 for the first layer. Passing a 0-based index
    into the 1-based formula gives −0.0099 for the first layer instead, which is why layer 0 is rejected here.
    """
    _checks.number("layer", layer, integer=True, positive=True)
    return 0.8 - 0.6 * math.exp(-0.3 * (layer - 1))


class DiffAttention(nn.Module):
    """Causal multi-head differential attention over [batch, T, d_model] inputs.

    Args:
        d_model: model width.
        n_heads: number of differential heads h; each has two query/key halves of size head_dim = d_model/(2h)
            and a value of size 2·head_dim.
        layer: 1-based layer index l, for λ_init(l).
        head_norm: keep the per-head RMSNorm (the paper's GroupNorm, default); ``False`` drops it, as in the
            paper's ablation, and keeps the fixed (1 − λ_init) multiplier.
    """

    def __init__(self, d_model: int, n_heads: int, *, layer: int, head_norm: bool = True):
        super().__init__()
        _checks.size("d_model", d_model)
        _checks.size("n_heads", n_heads)
        _checks.flag("head_norm", head_norm)
        if d_model % (2 * n_heads):
            raise ValueError(f"d_model must be a multiple of 2·n_heads = {2 * n_heads}, got {d_model}")
        self.d_model, self.n_heads, self.head_dim = d_model, n_heads, d_model // (2 * n_heads)
        self.lambda_init = lambda_init(layer)
        self.q_proj = nn.Linear(d_model, d_model, bias=False)   # h heads × 2 halves × head_dim
        self.k_proj = nn.Linear(d_model, d_model, bias=False)
        self.v_proj = nn.Linear(d_model, d_model, bias=False)   # h heads × 2·head_dim
        self.out_proj = nn.Linear(d_model, d_model, bias=False)
        self.lambda_q1, self.lambda_k1, self.lambda_q2, self.lambda_k2 = (
            nn.Parameter(torch.randn(self.head_dim) * 0.1) for _ in range(4))
        self.head_norm = RMSNorm(2 * self.head_dim, eps=1e-5) if head_norm else nn.Identity()

    def lam(self) -> torch.Tensor:
        """λ, shared by all heads of the layer; any real value, reached through two exponentials."""
        return (torch.exp(torch.dot(self.lambda_q1, self.lambda_k1)) - torch.exp(torch.dot(self.lambda_q2, self.lambda_k2))
                + self.lambda_init)

    def kv_cache_values_per_token(self) -> int:
        """Numbers cached per token: K₁ and K₂ (from k_proj) plus V (from v_proj), read off the projections."""
        return self.k_proj.out_features + self.v_proj.out_features

    def _check(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None, *, finite: bool = False) -> None:
        """The checks of :meth:`forward` and :meth:`head_rms`: x a floating [batch, T, d_model] on the layer's device
        and dtype, rope a (cos, sin) pair of [T, rotary_dim]; ``finite``: refuse NaN and ±inf in x (a host read)."""
        _checks.tensor("x", x, ndim=3, floating=True)
        if x.shape[-1] != self.d_model:
            raise ValueError(f"x.shape[-1] must be d_model={self.d_model}, got {x.shape[-1]}")
        weight = self.q_proj.weight
        if x.device != weight.device:
            raise ValueError(f"x must be on the layer's device {weight.device}, got {_checks._show(x)}")
        if x.dtype != weight.dtype and not torch.is_autocast_enabled(x.device.type):
            raise TypeError(f"x must have the layer's dtype {weight.dtype} (or run under torch.autocast; convert the "
                            f"layer with .to(dtype)), got {_checks._show(x)}")
        if finite:
            _checks.finite("x", x)
        if rope is not None:
            cos, sin = _checks.cos_sin("rope", rope)
            rotary_dim = cos.shape[-1]
            if cos.shape[-2] != x.shape[1] or not 0 < rotary_dim <= self.head_dim or rotary_dim % 2:
                raise ValueError(f"rope must be (cos, sin) of [T={x.shape[1]}, rotary_dim], rotary_dim even and at "
                                 f"most head_dim={self.head_dim}, got {tuple(cos.shape)}")
            if cos.device != x.device or sin.device != x.device:
                raise ValueError(f"rope must be on x's device {x.device}, got {cos.device} and {sin.device}")

    def _projections(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None):
        """q and k as [batch, h, 2, T, d] (each head's two halves side by side), v as [batch, h, T, 2d]."""
        batch, t, _ = x.shape
        h, d = self.n_heads, self.head_dim
        q = self.q_proj(x).view(batch, t, h, 2, d).permute(0, 2, 3, 1, 4)
        k = self.k_proj(x).view(batch, t, h, 2, d).permute(0, 2, 3, 1, 4)
        v = self.v_proj(x).view(batch, t, h, 2 * d).transpose(1, 2)
        if rope is not None:
            q, k = rotate(q, *rope), rotate(k, *rope)
        return q, k, v

    def _halves(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, return_maps: bool):
        """A₁V, A₂V and, with ``return_maps``, A₁ and A₂: two causal softmax attentions through the unchecked core.

        Without the maps both run as one call over 2h heads (each head's two halves side by side, both reading that
        head's values), one kernel launch instead of two."""
        options = dict(scale=1.0 / math.sqrt(self.head_dim), query_scale=None, bias=None, softcap=None, mask=None,
                       causal=True, normaliser="softmax", sink=None, sigmoid_bias=None,
                       impl=resolved_impl("auto", return_weights=return_maps))
        if return_maps:
            (out1, a1), (out2, a2) = (attend(q[:, :, i], k[:, :, i], v, **options) for i in range(2))
            return out1, out2, a1, a2
        batch, h, _, t, d = q.shape
        v2 = v[:, :, None].expand(batch, h, 2, t, 2 * d).reshape(batch, 2 * h, t, 2 * d)
        out, _ = attend(q.reshape(batch, 2 * h, t, d), k.reshape(batch, 2 * h, t, d), v2, **options)
        out = out.view(batch, h, 2, t, 2 * d)
        return out[:, :, 0], out[:, :, 1], None, None

    def head_rms(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """Root mean square of each head's output (A₁ − λA₂)V before the per-head norm, over batch and positions: [h].

        These are the "head statistics" the per-head norm equalises (chapter "Differential attention").
        """
        self._check(x, rope, finite=True)
        q, k, v = self._projections(x, rope)
        out1, out2, _, _ = self._halves(q, k, v, return_maps=False)
        heads = out1 - self.lam() * out2
        return heads.square().mean(dim=(0, 2, 3)).sqrt()

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None = None,
                return_maps: bool = False):
        """x: [batch, T, d_model]; ``rope``: optional (cos, sin) [T, head_dim] applied to every query/key half.

        Returns the output [batch, T, d_model], and with ``return_maps`` also the differential map A₁ − λA₂
        [batch, h, T, T]. Checks x and rope, but reads no values on the host: NaN and ±inf entries of x propagate to
        the output.
        """
        _checks.flag("return_maps", return_maps)
        self._check(x, rope)
        return self.attend(x, rope, return_maps=return_maps)

    def attend(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None = None, *,
               return_maps: bool = False):
        """:meth:`forward` unchecked, for a caller that made x and rope itself (the experiment model, every step)."""
        q, k, v = self._projections(x, rope)
        batch, t, _ = x.shape
        # (A₁ − λA₂)V = A₁V − λ·A₂V: two ordinary causal attentions over the same values.
        lam = self.lam()
        out1, out2, a1, a2 = self._halves(q, k, v, return_maps)
        heads = self.head_norm(out1 - lam * out2) * (1 - self.lambda_init)
        out = self.out_proj(heads.transpose(1, 2).reshape(batch, t, self.d_model))
        return (out, (a1 - lam * a2).to(q.dtype)) if return_maps else out


def differential_weights(scores1: torch.Tensor, scores2: torch.Tensor, lam: float | torch.Tensor) -> torch.Tensor:
    """softmax(scores1) − λ·softmax(scores2) over the last dimension: the differential attention map.

    Each softmax row sums to 1, so each row of the result sums to 1 − λ. Common-mode parts of the two maps cancel
    to the extent that λ matches their ratio (chapter "Differential attention"). A score of −inf hides a key, as
    in :func:`posbook.normalisers.normalise`; NaN and +inf scores are refused.

    Args:
        scores1, scores2: floating tensors of one shape [..., n].
        lam: a real number, or a finite tensor broadcastable to the scores' shape (such as ``DiffAttention.lam()``).
    """
    _checks.logit_rows("scores1", scores1)
    _checks.logit_rows("scores2", scores2)
    if scores1.shape != scores2.shape:
        raise ValueError(f"scores2 must have the shape of scores1 {tuple(scores1.shape)}, got {tuple(scores2.shape)}")
    if isinstance(lam, torch.Tensor):
        _checks.tensor("lam", lam, floating=True)
        _checks.broadcastable_to("lam", lam, tuple(scores1.shape))
        _checks.finite("lam", lam)
    else:
        _checks.number("lam", lam)
    return normalised(scores1, "softmax") - lam * normalised(scores2, "softmax")


def needle_to_distractor_ratio(weights: torch.Tensor, needle: int) -> torch.Tensor:
    r"""How far the needle stands out of the rest: :math:`\lvert w_n\rvert / \operatorname{mean}_{j\ne n}\lvert w_j\rvert`
    along the last dimension (:math:`n` = ``needle``).

    Absolute values, because a differential map can put negative weight on distractors.
    """
    _checks.tensor("weights", weights, ndim_min=1, floating=True)
    _checks.finite("weights", weights)
    n = weights.shape[-1]
    _checks.number("needle", needle, integer=True)
    if not 0 <= needle < n:
        raise ValueError(f"needle must be an index in [0, {n}), got {needle!r}")
    if n < 2:
        raise ValueError(f"weights must have at least 2 keys along the last dimension, got {n}")
    mag = weights.abs()
    rest = torch.cat((mag[..., :needle], mag[..., needle + 1:]), dim=-1)
    return mag[..., needle] / rest.mean(dim=-1)
