"""Rotary frequencies: the inverse frequencies θ_i that RoPE turns each plane by.

Chapter "RoPE from first principles" derives the default spectrum; the context-extension chapter adds the
rescaled spectra (PI, NTK, YaRN, llama3, ...) behind the same signature.
"""

from __future__ import annotations

import torch

from . import _checks


def default_inv_freq(rotary_dim: int, rope_theta: float = 10000.0, *,
                     dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The RoFormer spectrum θ_i = rope_theta^(−2i/rotary_dim), i = 0 … rotary_dim/2 − 1.

    Computed in float64 and rounded once to ``dtype``, so every dtype sees the correctly rounded frequencies.
    Plane i has wavelength 2π/θ_i tokens: from 2π (i = 0) up to almost 2π·rope_theta.
    """
    _checks.number("rotary_dim", rotary_dim, integer=True, positive=True)
    if rotary_dim % 2:
        raise ValueError(f"rotary_dim must be even (RoPE turns pairs of dimensions), got {rotary_dim}")
    _checks.number("rope_theta", rope_theta, positive=True)
    if rope_theta <= 1:
        raise ValueError(f"rope_theta must be > 1 so that frequencies decrease with the plane index, got {rope_theta!r}")
    _checks.dtype("dtype", dtype)
    exponents = torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim
    return (float(rope_theta) ** -exponents).to(dtype)
