"""Measurements on scores and attention patterns that several chapters share."""

from __future__ import annotations

import torch

from . import _checks


def rope_decay_bound(distances: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    r"""RoFormer's long-term decay quantity (Su et al., Eq. 35–37): :math:`\frac{2}{d}\sum_{j=1}^{d/2} |S_j(r)|`.

    :math:`S_j(r) = \sum_{k<j} e^{i r \theta_k}` are the partial sums of the rotating phasors at relative distance
    r. By Abel summation, for any plane weights :math:`h_i` (with :math:`h_{d/2} = 0`),
    :math:`|\sum_i h_i e^{i r \theta_i}| \le \max_i |h_{i+1} - h_i| \sum_j |S_j(r)|`, so this mean is a bound per
    unit of :math:`\max_i |h_{i+1} - h_i|`. Computed in float64. Chapter "RoPE from first principles" plots it.

    Args:
        distances: 1-D tensor of relative distances r.
        inv_freq: 1-D tensor of the d/2 frequencies θ_i.
    Returns:
        float64 tensor, one value per distance.
    """
    _checks.tensor("distances", distances, ndim=1)
    _checks.tensor("inv_freq", inv_freq, ndim=1, floating=True)
    phase = distances.to(torch.float64)[:, None] * inv_freq.to(torch.float64)[None, :]
    partial_sums = torch.polar(torch.ones_like(phase), phase).cumsum(dim=-1)      # S_1 … S_{d/2}
    return partial_sums.abs().mean(dim=-1)
