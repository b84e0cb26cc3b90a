"""Rotary frequencies: the inverse frequencies θ_i that RoPE turns each plane by, and their context-extension
rescalings.

:func:`rope_parameters` has Hugging Face's signature ``(config, seq_len) -> (inv_freq, attention_factor)`` and
accepts the same config dicts, in the legacy form (top-level ``rope_theta`` + ``rope_scaling``) or the
transformers-v5 form (``rope_parameters`` with ``rope_theta`` inside). The test suite holds every type that
transformers implements equal to ``transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS``.

Two teaching types have no Hugging Face counterpart: ``"ntk"`` (the fixed NTK-aware base change) and
``"ntk_by_parts"`` (YaRN's per-plane ramp without YaRN's attention scaling). Chapter "Context extension" shows
each spectrum next to the others. ``"longrope"`` (Phi-3, Phi-3.5, Phi-4-mini) switches between two spectra at the
original length; like ``"dynamic"``, it needs the current sequence length from the caller (see :func:`rope_parameters`).

Multimodal RoPE (Qwen2-VL, Qwen2.5-VL, Qwen3-VL) does not change the spectrum; it changes which of three position
rows (time, height, width) each plane reads. :func:`mrope_layout` reads that layout from a config for
:func:`posbook.rope.rope_cos_sin`.

Precision: every spectrum is computed in float64 and rounded once to the requested dtype. Hugging Face raises the
base to float32 exponents, so the two agree to a few float32 ulps, not bit for bit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import torch

from . import _checks
from . import hf_config
from .hf_config import NotModelledError, read_config, refuse_unmodelled
from .rope import mrope_plane_axes

def default_inv_freq(rotary_dim: int, rope_theta: float = 10000.0, *,
                     dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The RoFormer spectrum θ_i = rope_theta^(−2i/rotary_dim), i = 0 … rotary_dim/2 − 1.

    Computed in float64 and rounded once to ``dtype``, so every dtype sees the correctly rounded frequencies.
    Plane i has wavelength 2π/θ_i tokens: from 2π (i = 0) up to almost 2π·rope_theta.
    """
    _checks.size("rotary_dim", rotary_dim)
    if rotary_dim % 2:
        raise ValueError(f"rotary_dim must be even (RoPE turns pairs of dimensions), got {rotary_dim}")
    _check_theta(rope_theta, "rope_theta")
    _checks.dtype("dtype", dtype)
    return _spectrum(rotary_dim, float(rope_theta)).to(dtype)


def _check_theta(value: Any, name: str) -> float:
    _checks.number(name, value, positive=True)
    if value <= 1:
        raise ValueError(f"{name} must be > 1 so that frequencies decrease with the plane index, got {value!r}")
    return float(value)


def _spectrum(rotary_dim: int, base: float, n_planes: int | None = None) -> torch.Tensor:
    """float64 θ_i = base^(−2i/rotary_dim) for the first ``n_planes`` planes (all rotary_dim/2 by default)."""
    n = rotary_dim // 2 if n_planes is None else n_planes
    return base ** -(torch.arange(n, dtype=torch.float64) * 2 / rotary_dim)


@dataclass(frozen=True)
class RopeSpec:
    """A rope config dict, read and checked once: what every rope type's frequency rule needs.

    ``params`` holds the type-specific keys (``factor``, ``beta_fast``, ...) exactly as given; the other fields
    resolve where Hugging Face looks for them (head_dim from hidden_size/num_attention_heads, or
    qk_rope_head_dim for MLA models; the partial_rotary_factor inside the rope dict before the top-level one, ...).
    """

    rope_type: str
    rope_theta: float
    head_dim: int
    partial_rotary_factor: float
    rotary_dim: int
    max_position_embeddings: int | None = None
    params: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Checked here too, so that a spec built by hand is held to what rope_spec guarantees.
        _checks.choice("rope_type", self.rope_type, tuple(ROPE_TYPES))
        _check_theta(self.rope_theta, "rope_theta")
        _checks.size("head_dim", self.head_dim)
        _checks.number("partial_rotary_factor", self.partial_rotary_factor, positive=True, max_value=1)
        _checks.size("rotary_dim", self.rotary_dim)
        if self.rotary_dim != int(self.head_dim * self.partial_rotary_factor):
            raise ValueError(f"rotary_dim must be int(head_dim · partial_rotary_factor) = int({self.head_dim} · "
                             f"{self.partial_rotary_factor}) = {int(self.head_dim * self.partial_rotary_factor)}, "
                             f"got {self.rotary_dim}")
        if self.rope_type != "proportional" and self.rotary_dim % 2:
            raise ValueError(f"rotary_dim must be even (RoPE turns pairs of dimensions), got {self.rotary_dim}")
        if self.max_position_embeddings is not None:
            _checks.size("max_position_embeddings", self.max_position_embeddings)
        _checks.mapping("params", self.params)


def rope_spec(config: Mapping[str, Any], layer_type: str | None = None) -> RopeSpec:
    """Read a Hugging Face-style config dict into a :class:`RopeSpec`, rejecting anything ambiguous or unknown.

    Accepted forms::

        {"rope_theta": 5e5, "rope_scaling": {"rope_type": "llama3", "factor": 8.0, ...}, "head_dim": 128, ...}
        {"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0}, "hidden_size": 4096,
         "num_attention_heads": 32, "max_position_embeddings": 32768}

    ``rope_scaling: None`` (or no rope dict at all) means the default spectrum. The legacy key ``type`` is read as
    ``rope_type``, and the legacy type ``"mrope"`` of Qwen2-VL's config.json
    (``"rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}``) as ``"default"``, as Hugging Face's
    Qwen2-VL and Qwen2.5-VL configs do. Multimodal RoPE's ``mrope_section``/``mrope_interleaved`` are accepted with
    every rope type (Qwen3-VL's long-video recipe pairs them with ``"yarn"``) and checked against rotary_dim; they
    change which position each plane reads, not the spectrum (:func:`mrope_layout`).

    ``"longrope"`` reads ``short_factor`` and ``long_factor`` (one rescale factor per plane, rotary_dim/2 each),
    optional ``factor`` and ``attention_factor``, and original_max_position_embeddings from the rope dict or, Phi-3
    style, from the top level of config (falling back to max_position_embeddings, as Hugging Face does).

    Configs with one rope dict per layer type (Gemma 3/4: ``{"full_attention": {...}, "sliding_attention": {...}}``)
    need ``layer_type``; as in Hugging Face, that dict's rope_theta wins over the top-level one, and
    ``"full_attention"`` layers use ``global_head_dim`` when the config has it.

    MLA configs (DeepSeek, Kimi K2) rotate ``qk_rope_head_dim`` dimensions. If the config also gives
    ``partial_rotary_factor`` (DeepSeek-V4: head_dim 512 × 0.125), int(head_dim · factor) must equal it.
    """
    config = read_config(config)
    refuse_unmodelled(config, "rope")
    if config.get("alibi") is True:
        raise ValueError("config has alibi: true: this model adds ALiBi biases to its logits and has no RoPE")
    has_v5, has_legacy = "rope_parameters" in config, "rope_scaling" in config
    if has_v5 and has_legacy and config["rope_scaling"] is not None:
        raise ValueError("config must give rope_parameters (transformers v5) or rope_scaling (legacy), not both; "
                         f"got rope_parameters={config['rope_parameters']!r}, rope_scaling={config['rope_scaling']!r}")
    rope = config.get("rope_parameters") if has_v5 else config.get("rope_scaling")
    rope = {} if rope is None else rope
    if not isinstance(rope, Mapping):
        key = "rope_parameters" if has_v5 else "rope_scaling"
        raise TypeError(f"config[{key!r}] must be a dict or None, got {type(rope).__name__} {rope!r}")
    nested = any(isinstance(v, Mapping) for v in rope.values())
    if not nested and any(config.get(key) for key in ("o_groups", "compress_ratios")):
        raise NotModelledError("config has DeepSeek-V4 attention (o_groups or compress_ratios) with one flat rope "
                               "dict; "
                         "transformers splits it into a 'main' and a 'compress' RoPE at compress_rope_theta, which "
                         "this config does not give")
    if nested:
        if layer_type is None:
            raise ValueError(f"config holds one rope dict per layer type; pass layer_type, one of {sorted(rope)}")
        _checks.choice("layer_type", layer_type, sorted(rope))
        rope = rope[layer_type]
        if rope is None:
            raise ValueError(f"layer_type {layer_type!r} has no RoPE (its rope dict is null: the layer uses no "
                             "position encoding)")
    elif layer_type is not None:
        _checks.choice("layer_type", layer_type, ("full_attention", "sliding_attention", "chunked_attention"))

    rope_type = _rope_type(rope)
    theta_inside, theta_outside = rope.get("rope_theta"), config.get("rope_theta")
    if nested and theta_inside is not None:
        theta_outside = None  # the layer type's own value wins, as in Hugging Face
    if theta_inside is not None and theta_outside is not None and theta_inside != theta_outside:
        raise ValueError(f"rope_theta is given twice with different values: {theta_inside!r} inside the rope dict "
                         f"and {theta_outside!r} at the top level of config")
    rope_theta = theta_inside if theta_inside is not None else theta_outside
    if rope_theta is None:
        raise ValueError("config must give rope_theta (at the top level, or inside rope_parameters), got neither")
    rope_theta = _check_theta(rope_theta, "rope_theta")

    partial = rope.get("partial_rotary_factor", config.get("partial_rotary_factor"))
    given_partial = partial is not None
    partial = 1.0 if partial is None else partial
    _checks.number("partial_rotary_factor", partial, positive=True)
    if partial > 1:
        raise ValueError(f"partial_rotary_factor must be in (0, 1], got {partial!r}")
    head_dim = _head_dim(config, layer_type, mla_rope=not given_partial)
    # Hugging Face truncates head_dim·partial_rotary_factor to an int; an odd result cannot be split into planes.
    rotary_dim = int(head_dim * partial)
    mla_rope = config.get("qk_rope_head_dim")
    if given_partial and mla_rope is not None and rotary_dim != mla_rope:
        raise ValueError(f"int(head_dim · partial_rotary_factor) = int({head_dim} · {partial}) = {rotary_dim} "
                         f"disagrees with qk_rope_head_dim={mla_rope}")
    if rope_type != "proportional" and (rotary_dim < 2 or rotary_dim % 2):
        raise ValueError(f"rotary_dim = int(head_dim · partial_rotary_factor) = int({head_dim} · {partial}) = "
                         f"{rotary_dim} must be even and >= 2")
    if rope_type == "proportional" and head_dim % 2:
        raise ValueError(f"head_dim must be even for proportional RoPE, got {head_dim}")

    max_pos = config.get("max_position_embeddings")
    if max_pos is not None:
        _checks.number("max_position_embeddings", max_pos, integer=True, positive=True)

    keys = ROPE_TYPES[rope_type].keys | _MROPE_KEYS
    unknown = set(rope) - keys - {"rope_type", "type", "rope_theta", "partial_rotary_factor"}
    if unknown:
        hints = "".join(_checks.did_you_mean(key, keys) for key in sorted(unknown))
        raise ValueError(f"rope dict has key(s) {sorted(unknown)} that rope_type {rope_type!r} does not use; "
                         f"expected some of {sorted(keys)}{hints}")
    params = {k: v for k, v in rope.items() if k in keys}  # in the config's order, whatever the hash seed
    if "original_max_position_embeddings" in keys:
        params["original_max_position_embeddings"] = _original_max_positions(config, rope, max_pos)
    spec = RopeSpec(rope_type, rope_theta, head_dim, float(partial), rotary_dim, max_pos, params)
    _mrope_layout(spec)  # checked here, so that no config with a malformed layout passes silently
    return spec


def _rope_type(rope: Mapping[str, Any]) -> str:
    # Qwen2-VL's config.json says "type": "mrope"; transformers' Qwen2-VL config classes read it as "default" (the
    # spectrum is the default one). So "mrope" next to "default" in the other key is no disagreement.
    new, old = ("default" if v == "mrope" else v for v in (rope.get("rope_type"), rope.get("type")))
    if new is not None and old is not None and new != old:
        raise ValueError(f"rope dict gives rope_type={new!r} and type={old!r}; give one")
    rope_type = new if new is not None else old if old is not None else "default"
    if rope_type not in ROPE_TYPES:
        raise NotModelledError(f"rope_type must be one of {tuple(ROPE_TYPES)}, got {rope_type!r}"
                               f"{_checks.did_you_mean(rope_type, ROPE_TYPES)}")
    return rope_type


def _head_dim(config: Mapping[str, Any], layer_type: str | None, mla_rope: bool) -> int:
    # MLA (DeepSeek-V2/V3, Kimi K2) rotates only the decoupled rotary part of each head, qk_rope_head_dim wide;
    # Hugging Face's DeepSeek configs set head_dim to it for the same reason.
    if mla_rope and config.get("qk_rope_head_dim") is not None:
        return int(_checks.number("qk_rope_head_dim", config["qk_rope_head_dim"], integer=True, positive=True))
    if layer_type == "full_attention" and config.get("global_head_dim") is not None:
        return int(_checks.number("global_head_dim", config["global_head_dim"], integer=True, positive=True))
    return hf_config.head_dim(config)


def _original_max_positions(config: Mapping[str, Any], rope: Mapping[str, Any], max_pos: int | None) -> int:
    # The pre-training length lives inside the rope dict in most configs and at the top level in Phi-3's;
    # when both exist and disagree, transformers now lets the top-level one overwrite the rope dict's
    # (huggingface/transformers#42513), which earlier versions did not; posbook refuses to guess.
    inside, outside = rope.get("original_max_position_embeddings"), config.get("original_max_position_embeddings")
    if inside is not None and outside is not None and inside != outside:
        raise ValueError(f"original_max_position_embeddings is given twice with different values: {inside!r} inside "
                         f"the rope dict and {outside!r} at the top level of config")
    value = inside if inside is not None else outside if outside is not None else max_pos
    if value is None:
        raise ValueError("config must give original_max_position_embeddings (or max_position_embeddings) for "
                         "this rope_type, got neither")
    return int(_checks.number("original_max_position_embeddings", value, integer=True, positive=True))


def _factor(spec: RopeSpec, *, required: bool = True, default: float | None = None) -> float:
    factor = spec.params.get("factor", default)
    if factor is None:
        if required:
            raise ValueError(f"rope_type {spec.rope_type!r} needs 'factor' in the rope dict, got none")
        return 1.0
    _checks.number("factor", factor, positive=True)
    if factor < 1:
        raise ValueError(f"factor must be >= 1 (it is the context-extension ratio), got {factor!r}")
    return float(factor)


# Each rule returns float64 inv_freq and the attention factor that multiplies cos and sin.
def _default(spec: RopeSpec, seq_len: int | None) -> tuple[torch.Tensor, float]:
    return _spectrum(spec.rotary_dim, spec.rope_theta), 1.0


def _linear(spec: RopeSpec, seq_len: int | None) -> tuple[torch.Tensor, float]:
    # Position interpolation (Chen et al. 2023): position m is read as m/factor; dividing θ_i is the same thing.
    return _spectrum(spec.rotary_dim, spec.rope_theta) / _factor(spec), 1.0


def _ntk_base(base: float, scale: float, rotary_dim: int) -> float:
    # NTK-aware base change (bloc97): choose b' so that the slowest plane, i = d/2 − 1, is interpolated by
    # exactly `scale` while the fastest is untouched: b'^(−(d−2)/d) = b^(−(d−2)/d) / scale.
    if rotary_dim <= 2:
        raise ValueError(f"the NTK base change needs rotary_dim > 2 (it divides by rotary_dim − 2), got {rotary_dim}")
    return base * scale ** (rotary_dim / (rotary_dim - 2))


def _ntk(spec: RopeSpec, seq_len: int | None) -> tuple[torch.Tensor, float]:
    base = _ntk_base(spec.rope_theta, _factor(spec), spec.rotary_dim)
    return _spectrum(spec.rotary_dim, base), 1.0


def _dynamic(spec: RopeSpec, seq_len: int | None) -> tuple[torch.Tensor, float]:
    # Dynamic NTK (emozilla): the NTK base change with a scale that grows with the current length, and none at
    # all up to max_position_embeddings. The spectrum depends on seq_len, so keys rotated at one length do not
    # match queries rotated at another (huggingface/transformers#25104).
    factor = _factor(spec)
    if spec.max_position_embeddings is None:
        raise ValueError("rope_type 'dynamic' needs max_position_embeddings in config, got none")
    max_pos = spec.max_position_embeddings
    length = max_pos if seq_len is None else max(seq_len, max_pos)
    scale = factor * length / max_pos - (factor - 1)
    return _spectrum(spec.rotary_dim, _ntk_base(spec.rope_theta, scale, spec.rotary_dim)), 1.0


def yarn_get_mscale(scale: float, mscale: float = 1.0) -> float:
    """YaRN's attention temperature √(1/t) = 0.1·mscale·ln(scale) + 1 (Peng et al. 2023, Eq. 22), 1 for scale ≤ 1.

    :func:`rope_parameters` folds it into cos and sin, so every q·k logit is multiplied by its square. ``mscale``
    is >= 0: 0 gives 1 at every scale (no temperature), as in Hugging Face.
    """
    _checks.number("scale", scale, positive=True)
    _checks.number("mscale", mscale, min_value=0)
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def yarn_ramp_bounds(rotary_dim: int, rope_theta: float, original_max_position_embeddings: int, *,
                     beta_fast: float = 32.0, beta_slow: float = 1.0,
                     truncate: bool = True) -> tuple[float, float]:
    """The plane indices (low, high) between which YaRN's ramp blends interpolation and extrapolation.

    Plane d completes r_d = L / λ_d turns over the original length L (λ_d = 2π/θ_d). Planes with more than
    ``beta_fast`` turns keep their frequency, planes with fewer than ``beta_slow`` are interpolated by ``factor``
    (Peng et al. 2023, Eq. 18 with α = beta_slow, β = beta_fast). Solving r_d = β for d gives
    d = rotary_dim·ln(L/(2πβ)) / (2 ln rope_theta). With ``truncate`` the bounds are floored/ceiled to whole planes,
    as in the reference implementation; clamped to [0, rotary_dim − 1] as Hugging Face does.
    """
    _checks.size("rotary_dim", rotary_dim)
    _check_theta(rope_theta, "rope_theta")
    _checks.size("original_max_position_embeddings", original_max_position_embeddings)
    _checks.number("beta_fast", beta_fast, positive=True)
    _checks.number("beta_slow", beta_slow, positive=True)
    _checks.flag("truncate", truncate)

    def plane(turns: float) -> float:
        return rotary_dim * math.log(original_max_position_embeddings / (turns * 2 * math.pi)) / (2 * math.log(rope_theta))

    low, high = plane(beta_fast), plane(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    return max(low, 0), min(high, rotary_dim - 1)


def _ramp_blend(spec: RopeSpec, factor: float) -> torch.Tensor:
    beta_fast = spec.params.get("beta_fast") or 32.0   # `or`: a null or 0 in a config means the paper's default,
    beta_slow = spec.params.get("beta_slow") or 1.0    # as in Hugging Face
    _checks.number("beta_fast", beta_fast, positive=True)
    _checks.number("beta_slow", beta_slow, positive=True)
    if beta_fast < beta_slow:
        # Equal is allowed: Kimi K2 sets both to 1, which turns the ramp into a step at one turn.
        raise ValueError(f"beta_fast must be >= beta_slow (turns over the original length), got {beta_fast} < {beta_slow}")
    truncate = spec.params.get("truncate", True)
    _checks.flag("truncate", truncate)
    low, high = yarn_ramp_bounds(spec.rotary_dim, spec.rope_theta, spec.params["original_max_position_embeddings"],
                                 beta_fast=beta_fast, beta_slow=beta_slow, truncate=truncate)
    if low == high:
        high += 0.001  # the reference implementation's guard against a zero-width ramp
    ramp = ((torch.arange(spec.rotary_dim // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
    theta = _spectrum(spec.rotary_dim, spec.rope_theta)
    # ramp = 0: fast plane, keep θ (extrapolate); ramp = 1: slow plane, θ/factor (interpolate).
    return theta * (1 - ramp) + theta / factor * ramp


def _extension_factor(spec: RopeSpec) -> float:
    if spec.params.get("factor") is not None:
        return _factor(spec)
    # DeepSeek-style and Phi-3 configs may omit factor; it is then the extension ratio itself.
    if spec.max_position_embeddings is None:
        raise ValueError(f"rope_type {spec.rope_type!r} needs factor, or max_position_embeddings to derive it; "
                         "got neither")
    factor = spec.max_position_embeddings / spec.params["original_max_position_embeddings"]
    if factor < 1:
        raise ValueError(f"factor = max_position_embeddings / original_max_position_embeddings = {factor} must be >= 1")
    return factor


def _given_attention_factor(spec: RopeSpec) -> float | None:
    attention_factor = spec.params.get("attention_factor")
    if attention_factor is not None:
        _checks.number("attention_factor", attention_factor, positive=True)
    return attention_factor


def _yarn(spec: RopeSpec, seq_len: int | None) -> tuple[torch.Tensor, float]:
    # transformers refuses a yarn dict without the key factor (derived from the lengths it would silently be 1
    # wherever max_position_embeddings equals the original length); a null factor it derives from the lengths
    # (DeepSeek-style configs), as _extension_factor does.
    if "factor" not in spec.params:
        raise ValueError("rope_type 'yarn' needs 'factor' in the rope dict (the context-extension ratio, e.g. "
                         "\"factor\": 4.0), got none; transformers refuses it too")
    factor = _extension_factor(spec)
    attention_factor = _given_attention_factor(spec)
    if attention_factor is None:
        mscale, mscale_all_dim = spec.params.get("mscale"), spec.params.get("mscale_all_dim")
        for name, value in (("mscale", mscale), ("mscale_all_dim", mscale_all_dim)):
            if value is not None:
                _checks.number(name, value, min_value=0)
        if mscale and mscale_all_dim:
            # DeepSeek-V2/V3 form: the ratio is 1 when mscale == mscale_all_dim; those models put
            # yarn_get_mscale(factor, mscale_all_dim)² into the softmax scale instead (chapter "Context extension").
            attention_factor = yarn_get_mscale(factor, mscale) / yarn_get_mscale(factor, mscale_all_dim)
        else:
            attention_factor = yarn_get_mscale(factor)
    return _ramp_blend(spec, factor), float(attention_factor)


def _ntk_by_parts(spec: RopeSpec, seq_len: int | None) -> tuple[torch.Tensor, float]:
    return _ramp_blend(spec, _factor(spec)), 1.0


def _llama3(spec: RopeSpec, seq_len: int | None) -> tuple[torch.Tensor, float]:
    factor = _factor(spec)
    for key in ("low_freq_factor", "high_freq_factor"):
        if key not in spec.params:
            raise ValueError(f"rope_type 'llama3' needs {key!r} in the rope dict, got keys {sorted(spec.params)}")
        _checks.number(key, spec.params[key], positive=True)
    low, high = float(spec.params["low_freq_factor"]), float(spec.params["high_freq_factor"])
    if high < low:
        raise ValueError(f"high_freq_factor must be >= low_freq_factor, got {high} < {low}")
    original = spec.params["original_max_position_embeddings"]
    theta = _spectrum(spec.rotary_dim, spec.rope_theta)
    turns = original * theta / (2 * math.pi)  # turns of each plane over the original context, original/λ
    # Planes with more than `high` turns keep θ, planes with fewer than `low` get θ/factor, and in between the
    # blend weight is linear in the number of turns. Equal factors (Llama 4) make it a step.
    if high == low:
        smooth = (turns > high).to(theta.dtype)
    else:
        smooth = ((turns - low) / (high - low)).clamp(0, 1)
    return theta / factor * (1 - smooth) + theta * smooth, 1.0


def _plane_factors(spec: RopeSpec, key: str) -> torch.Tensor:
    n_planes = spec.rotary_dim // 2
    value = spec.params.get(key)
    if value is None:
        raise ValueError(f"rope_type 'longrope' needs {key!r} in the rope dict, got keys {sorted(spec.params)}")
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"{key} must be a list of {n_planes} numbers (one per plane), got {type(value).__name__} "
                        f"{value!r}")
    if len(value) != n_planes:
        raise ValueError(f"{key} must have rotary_dim/2 = {n_planes} entries (one per plane; rotary_dim = int(head_dim"
                         f" · partial_rotary_factor) = int({spec.head_dim} · {spec.partial_rotary_factor}) = "
                         f"{spec.rotary_dim}), got {len(value)}")
    for i, entry in enumerate(value):
        _checks.number(f"{key}[{i}]", entry, positive=True)
    return torch.tensor(value, dtype=torch.float64)


def _longrope(spec: RopeSpec, seq_len: int | None) -> tuple[torch.Tensor, float]:
    # LongRoPE (Ding et al. 2024): a searched rescale factor λ_i per plane, θ'_i = θ_i/λ_i. Phi-3 ships two sets:
    # short_factor for sequences up to the original length, long_factor beyond it. Both are checked whichever is
    # used, so a bad list cannot hide until the first long prompt.
    original = spec.params["original_max_position_embeddings"]
    short, long = _plane_factors(spec, "short_factor"), _plane_factors(spec, "long_factor")
    # No seq_len reads as "not past the original length", as in Hugging Face's rotary module at init.
    rescale = long if seq_len is not None and seq_len > original else short
    # factor only sets the attention factor: the paper's √(1 + ln s / ln L) with L the original length and s the
    # factor, or (Phi-3 configs omit it) max_position_embeddings / L. A given factor is checked even when unused.
    attention_factor = _given_attention_factor(spec)
    if attention_factor is None or spec.params.get("factor") is not None:
        factor = _extension_factor(spec)
    if attention_factor is None:
        if factor > 1 and original < 2:
            raise ValueError("original_max_position_embeddings must be >= 2 for longrope's attention factor "
                             f"√(1 + ln factor / ln original_max_position_embeddings), got {original}")
        attention_factor = math.sqrt(1 + math.log(factor) / math.log(original)) if factor > 1 else 1.0
    return _spectrum(spec.rotary_dim, spec.rope_theta) / rescale, float(attention_factor)


def _proportional(spec: RopeSpec, seq_len: int | None) -> tuple[torch.Tensor, float]:
    # p-RoPE (Barbero et al. 2024; Gemma 4's "proportional"): keep the fastest fraction p of the head_dim/2
    # frequencies of the full-head spectrum and set the slowest to zero (those planes are NoPE). Unlike partial
    # RoPE, the kept frequencies are not re-spread over a smaller rotary_dim.
    n_planes = spec.head_dim // 2
    kept = int(spec.partial_rotary_factor * spec.head_dim // 2)
    theta = torch.zeros(n_planes, dtype=torch.float64)
    theta[:kept] = _spectrum(spec.head_dim, spec.rope_theta, kept)
    return theta / _factor(spec, required=False, default=1.0), 1.0


@dataclass(frozen=True)
class RopeType:
    """One ``rope_type``: everything posbook knows about it, in one record.

    Attributes:
        name: the ``rope_type`` string of a config.
        rule: ``(spec, seq_len) -> (float64 inv_freq, attention_factor)``.
        keys: the keys it reads from the rope dict, beyond rope_type/type, rope_theta, partial_rotary_factor and
            M-RoPE's mrope_section/mrope_interleaved (accepted with every type). Anything else in the dict is an
            error: a misspelt key (``"factors"``) would otherwise be ignored.
        extension_factor: for a type whose spectrum blends θ and θ/s plane by plane (θ' = θ·(γ + (1 − γ)/s)),
            the function that reads s from the spec; None for the others. :func:`posbook.spectrum.ramp_weights` needs it.
        in_transformers: whether ``transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS`` has it (the test
            suite holds those equal to Hugging Face).
    """

    name: str
    rule: Callable[[RopeSpec, int | None], tuple[torch.Tensor, float]]
    keys: frozenset[str] = frozenset()
    extension_factor: Callable[[RopeSpec], float] | None = None
    in_transformers: bool = True

    def __post_init__(self) -> None:
        _checks.text("name", self.name)
        _checks.function("rule", self.rule)
        if not isinstance(self.keys, frozenset) or not all(isinstance(key, str) for key in self.keys):
            raise TypeError(f"keys must be a frozenset of str (rope dict keys), got {type(self.keys).__name__} "
                            f"{self.keys!r}")
        if self.extension_factor is not None:
            _checks.function("extension_factor", self.extension_factor)
        _checks.flag("in_transformers", self.in_transformers)


_RAMP_KEYS = frozenset({"factor", "beta_fast", "beta_slow", "truncate", "original_max_position_embeddings"})
_MROPE_KEYS = frozenset({"mrope_section", "mrope_interleaved"})

ROPE_TYPES: dict[str, RopeType] = {t.name: t for t in (
    RopeType("default", _default),
    RopeType("linear", _linear, frozenset({"factor"}), _factor),
    RopeType("dynamic", _dynamic, frozenset({"factor"})),
    RopeType("yarn", _yarn, _RAMP_KEYS | {"attention_factor", "mscale", "mscale_all_dim"}, _extension_factor),
    RopeType("llama3", _llama3, frozenset({"factor", "low_freq_factor", "high_freq_factor",
                                           "original_max_position_embeddings"}), _factor),
    RopeType("longrope", _longrope, frozenset({"short_factor", "long_factor", "factor", "attention_factor",
                                               "original_max_position_embeddings"})),
    RopeType("proportional", _proportional, frozenset({"factor"})),
    RopeType("ntk", _ntk, frozenset({"factor"}), _factor, in_transformers=False),
    RopeType("ntk_by_parts", _ntk_by_parts, _RAMP_KEYS, _factor, in_transformers=False),
)}
"""The registry of rope types, name → :class:`RopeType`: a new type is one entry here.

:meta hide-value:
"""


def rope_parameters(config: Mapping[str, Any], seq_len: int | None = None, *, layer_type: str | None = None,
                    dtype: torch.dtype = torch.float32,
                    device: torch.device | str | None = None) -> tuple[torch.Tensor, float]:
    """Inverse frequencies and attention factor for a Hugging Face-style config: ``(inv_freq, attention_factor)``.

    Args:
        config: a plain dict as in a model's config.json (see :func:`rope_spec` for the accepted forms and keys).
        seq_len: the current sequence length, read by ``"dynamic"`` (at most max_position_embeddings means no
            scaling) and ``"longrope"`` (see below); the other types ignore it.
        layer_type: which layer type's rope dict to use, for configs with one per layer type (Gemma 3/4).
        dtype: dtype of ``inv_freq`` (computed in float64, rounded once).
        device: device of ``inv_freq``.

    Returns:
        ``inv_freq`` of shape [rotary_dim/2] (``"proportional"``: [head_dim/2], zeros for the unrotated planes)
        and ``attention_factor``, the number that multiplies cos and sin (YaRN's attention scaling; 1.0 for the
        other types). Pass both to :func:`posbook.rope.rope_cos_sin`.

    ``"longrope"`` (Phi-3/3.5, Phi-4-mini) uses ``long_factor`` when ``seq_len`` > original_max_position_embeddings
    and ``short_factor`` otherwise, including when ``seq_len`` is None: called without it, this returns the short
    spectrum, which is what Hugging Face's rotary module holds after init. That module then switches at every
    forward (``dynamic_rope_update``): it takes seq_len = max(position_ids) + 1 over the whole batch and uses the long
    set for *all* positions once that exceeds the original length. To run such a model, call this with seq_len = the
    largest position + 1 at each step, and rotate the whole sequence again when it crosses the original length:
    keys cached under the short spectrum do not match queries rotated under the long one, which is why
    ``Phi3ForCausalLM.prepare_inputs_for_generation`` drops the KV cache at that point
    (huggingface/transformers#33129). The attention factor does not depend on seq_len: ``attention_factor`` if
    given, else √(1 + ln s / ln original_max_position_embeddings) with s = ``factor``, or
    max_position_embeddings / original_max_position_embeddings when the config has no factor (Phi-3's do not).
    """
    spec = rope_spec(config, layer_type)
    if seq_len is not None:
        _checks.number("seq_len", seq_len, integer=True, positive=True)
    _checks.dtype("dtype", dtype)
    if device is not None:
        device = _checks.device("device", device)
    inv_freq, attention_factor = ROPE_TYPES[spec.rope_type].rule(spec, seq_len)
    return inv_freq.to(dtype=dtype, device=device), float(attention_factor)


def _mrope_layout(spec: RopeSpec) -> tuple[tuple[int, int, int], bool] | None:
    section, interleaved = spec.params.get("mrope_section"), spec.params.get("mrope_interleaved")
    interleaved = False if interleaved is None else interleaved
    _checks.flag("mrope_interleaved", interleaved)
    if section is None:
        if interleaved:
            raise ValueError("mrope_interleaved=True needs mrope_section in the rope dict, got none")
        return None
    try:
        mrope_plane_axes(section, spec.rotary_dim // 2, interleaved=interleaved)  # checks the section
    except ValueError as error:  # say where the number of planes came from: the head's width
        raise ValueError(f"{error}; the planes are head_dim {spec.head_dim} (head_dim, or hidden_size / "
                         f"num_attention_heads) × partial_rotary_factor {spec.partial_rotary_factor:g} / 2") from None
    return tuple(section), interleaved


def mrope_layout(config: Mapping[str, Any], *,
                 layer_type: str | None = None) -> tuple[tuple[int, int, int], bool] | None:
    """Multimodal RoPE's layout from a config: ``(mrope_section, mrope_interleaved)``, or None for 1-D RoPE.

    Reads ``mrope_section`` (planes per position row: time, height, width) and ``mrope_interleaved`` (default
    False) from the rope dict, in any form :func:`rope_spec` accepts, checked against rotary_dim/2. Pass them on::

        section, interleaved = mrope_layout(config)
        cos, sin = rope_cos_sin(position_ids_thw, inv_freq, mrope_section=section, mrope_interleaved=interleaved)

    Hugging Face never reads ``mrope_interleaved``: the model class decides (Qwen2-VL and Qwen2.5-VL contiguous,
    Qwen3-VL interleaved), and the Hub configs of Qwen3-VL set the flag to say so. A Qwen3-VL config without it
    would read here as contiguous. :func:`posbook.rope.mrope_plane_axes` shows which row each plane reads.
    """
    return _mrope_layout(rope_spec(config, layer_type))


def yarn_softmax_scale(config: Mapping[str, Any], *, layer_type: str | None = None) -> float:
    """The multiplier DeepSeek-style attention puts on its softmax scale: yarn_get_mscale(factor, mscale_all_dim)².

    DeepSeek-V2/V3 and Kimi K2 configs give ``mscale`` and ``mscale_all_dim``. Their cos/sin factor is the ratio
    yarn_get_mscale(s, mscale)/yarn_get_mscale(s, mscale_all_dim), exactly 1 when the two are equal (see
    :func:`rope_parameters`); the length scaling then enters as this factor on the softmax scale, so it reaches
    all q·k dimensions, the unrotated ones included. Same rule as Hugging Face's ``yarn_apply_mscale`` in the
    DeepSeek modeling code; 1.0 for configs without a (non-zero) ``mscale_all_dim``. ``layer_type`` as in
    :func:`rope_parameters`.
    """
    spec = rope_spec(config, layer_type)
    mscale_all_dim = spec.params.get("mscale_all_dim")
    if spec.rope_type == "default" or not mscale_all_dim:
        return 1.0
    _checks.number("mscale_all_dim", mscale_all_dim)
    return yarn_get_mscale(_extension_factor(spec), mscale_all_dim) ** 2
