"""Reading a rotary spectrum: wavelengths, turns over a length, the NTK-by-parts ramp, and what a config's
rescaling did to each plane.

Chapter "Context extension: PI, NTK, YaRN and llama3" uses these to compare methods and real models' configs.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import torch

from . import _checks
from .scaling import ROPE_TYPES, default_inv_freq, rope_parameters, rope_spec


def _spectrum_tensor(name: str, inv_freq: Any) -> torch.Tensor:
    _checks.tensor(name, inv_freq, ndim=1, floating=True)
    _checks.finite(name, inv_freq)
    if bool((inv_freq < 0).any()):
        raise ValueError(f"{name} must hold frequencies >= 0, got {_checks._show(inv_freq)} with negative entries")
    return inv_freq


def rope_wavelengths(inv_freq: torch.Tensor) -> torch.Tensor:
    """Wavelength 2π/θ_i of every plane, in tokens: after that many positions plane i has turned once.

    Planes with θ_i = 0 (the unrotated planes of ``"proportional"`` RoPE) get an infinite wavelength. The result
    has the dtype of ``inv_freq``; pass a float64 spectrum for exact counts near a threshold.
    """
    inv_freq = _spectrum_tensor("inv_freq", inv_freq)
    return torch.where(inv_freq > 0, 2 * math.pi / inv_freq, torch.full_like(inv_freq, math.inf))


def rope_turns(inv_freq: torch.Tensor, length: float) -> torch.Tensor:
    """How many full turns each plane completes over ``length`` tokens: r_i = length·θ_i/(2π) = length/λ_i.

    This is YaRN's r(d) = L/λ_d (Peng et al. 2023) with L the original context. A plane with r_i < 1 never
    completes a turn within ``length``: the angles it reaches beyond that length are ones it has never seen.
    """
    inv_freq = _spectrum_tensor("inv_freq", inv_freq)
    _checks.number("length", length, positive=True)
    return inv_freq * (float(length) / (2 * math.pi))


def ramp_gamma(turns: torch.Tensor, alpha: float = 1.0, beta: float = 32.0) -> torch.Tensor:
    """The NTK-by-parts ramp of the YaRN paper, linear in the number of turns r: γ = 0 below α, 1 above β.

    γ(r) = clamp((r − α)/(β − α), 0, 1). A plane keeps its frequency where γ = 1 and is interpolated by the
    factor s where γ = 0: θ' = θ·(γ + (1 − γ)/s). With α = β the ramp is a step, γ = 1 exactly where r > β
    (Llama 4's equal ``low_freq_factor`` and ``high_freq_factor``; Kimi K2's ``beta_fast == beta_slow``).

    ``"llama3"`` scaling is this ramp with α = ``low_freq_factor``, β = ``high_freq_factor`` and r counted over
    ``original_max_position_embeddings``. ``"yarn"`` as implemented (reference code, Hugging Face, posbook) blends
    linearly in the plane index between the planes where r = β and r = α instead; :func:`ramp_weights` returns
    the γ a config actually uses.

    ``turns`` must be >= 0 and not NaN; +inf (a plane that turns infinitely often) gets γ = 1, the limit.
    """
    _checks.tensor("turns", turns, floating=True)
    _checks.number("alpha", alpha, min_value=0.0)
    _checks.number("beta", beta, min_value=0.0)
    if beta < alpha:
        raise ValueError(f"beta must be >= alpha (turns), got alpha={alpha!r}, beta={beta!r}")
    if not bool(torch.isfinite(turns).all()) or bool((turns < 0).any()):
        raise ValueError(f"turns must be finite and >= 0, got {_checks._show(turns)}")
    if alpha == beta:
        return (turns > beta).to(turns.dtype)
    return ((turns - alpha) / (beta - alpha)).clamp(0, 1)


def frequency_ratio(config: Mapping[str, Any], seq_len: int | None = None, *,
                    layer_type: str | None = None) -> torch.Tensor:
    """θ'_i/θ_i in float64: what a config's rescaling does to each plane's frequency.

    θ_i is the unscaled RoFormer spectrum of the same ``rope_theta`` (over rotary_dim, or over head_dim for
    ``"proportional"``, whose unrotated planes give 0). 1 means the plane is untouched, 1/factor means it is
    interpolated like position interpolation. ``seq_len`` (``"dynamic"``) and ``layer_type`` (configs with one rope
    dict per layer type) are passed on to :func:`posbook.scaling.rope_parameters`.
    """
    spec = rope_spec(config, layer_type)
    scaled, _ = rope_parameters(config, seq_len, layer_type=layer_type, dtype=torch.float64)
    reference = default_inv_freq(2 * scaled.numel(), spec.rope_theta, dtype=torch.float64)
    return scaled / reference


def ramp_weights(config: Mapping[str, Any], *, layer_type: str | None = None) -> torch.Tensor:
    """Per-plane weight γ_i with θ'_i = θ_i·(γ_i + (1 − γ_i)/s), recovered from the config's own spectrum.

    s is the config's ``factor`` (for ``"yarn"`` without one, max_position_embeddings /
    original_max_position_embeddings). γ = 1: the plane keeps its frequency (extrapolation); γ = 0: it is divided
    by s (interpolation). Position interpolation gives γ = 0 everywhere, the NTK-aware base change a smooth
    geometric curve, YaRN a ramp linear in the plane index, llama3 a ramp linear in turns (:func:`ramp_gamma`).
    Defined for rope types whose rule is such a blend: ``"linear"``, ``"ntk"``, ``"ntk_by_parts"``, ``"yarn"``,
    ``"llama3"``; the factor must be > 1. ``layer_type`` selects the rope dict of configs that have one per layer type.
    """
    spec = rope_spec(config, layer_type)
    blends = tuple(name for name, t in ROPE_TYPES.items() if t.extension_factor is not None)
    extension_factor = ROPE_TYPES[spec.rope_type].extension_factor
    if extension_factor is None:
        raise ValueError(f"ramp_weights needs a rope_type that blends θ and θ/factor, one of {blends}; got "
                         f"{spec.rope_type!r} (use frequency_ratio for any type)")
    factor = extension_factor(spec)
    if factor == 1:
        raise ValueError("factor must be > 1 to tell interpolation from extrapolation, got 1")
    ratio = frequency_ratio(config, layer_type=layer_type)
    return (ratio * factor - 1) / (factor - 1)
