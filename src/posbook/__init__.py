"""posbook — position and numerics in transformer attention, the library behind the book's chapters.

One module per concern, in the order data flows through an attention layer:

0. reading a model's config — :mod:`posbook.hf_config` (``read_config``: a config.json, its text or a
   transformers ``PretrainedConfig``, in the one form the modules below read);
1. rotary frequencies — :mod:`posbook.scaling` (``rope_parameters``: the registry of rope types and context
   extension), :mod:`posbook.spectrum` (reading a spectrum: wavelengths, turns, ramps);
2. q and k before the logits — :mod:`posbook.norms` (RMSNorm, QK-Norm), :mod:`posbook.rope` (rotation, layouts;
   its CPU fast path in :mod:`posbook.rope_cpu`);
3. the logits — :mod:`posbook.bias` (ALiBi, T5), :mod:`posbook.logit_scales` (SWAN, Llama 4), :mod:`posbook.masks`;
4. weights and output — :mod:`posbook.normalisers` (softmax, softmax1, sink, sigmoid), :mod:`posbook.core` (the
   reference attention and its fast paths), :mod:`posbook.local` (blocked sliding/chunked attention),
   :mod:`posbook.diff_attention`;
5. the whole layer — :mod:`posbook.stability` (entropy, softcap, QK-Clip), :mod:`posbook.kvcache` (cache arithmetic),
   :mod:`posbook.model_configs` (the sourced configs of real models), :mod:`posbook.report` (what a config
   does to position and the cache; ``python -m posbook inspect CONFIG.json``);
6. measurements — :mod:`posbook.score` (the score as a sum of cosines), :mod:`posbook.precision` (aliasing),
   :mod:`posbook.divergence` (KL, Jensen–Shannon), :mod:`posbook.influence` (attention mass, G(d));
7. the book — :mod:`posbook.claims` (checked numbers), :mod:`posbook.oracle` (the installed ``transformers``, where
   a chapter compares with it), :mod:`posbook.viz`, :mod:`posbook.device`.

Beneath this checked API lies one unchecked layer, for callers that made or checked their inputs themselves (the
experiment model, :class:`~posbook.diff_attention.DiffAttention`, :mod:`posbook.theory`): it checks nothing and reads
no tensor values on the host, so a training step pays for no checks. Each function says "unchecked" in its docstring:

* :func:`posbook.core.attend` under :func:`~posbook.core.attention`, on the path :func:`posbook.core.resolved_impl`
  picked once, when the caller was configured;
* :func:`posbook.local.local_attend` under :func:`~posbook.local.local_attention`;
* :func:`posbook.normalisers.normalised` under :func:`~posbook.normalisers.normalise`;
* :func:`posbook.rope.rotate` under :func:`~posbook.rope.apply_rope`, always in float32 (float64 stays float64),
  rounded once to the input's dtype;
* :func:`posbook.stability.softcapped` under :func:`~posbook.stability.softcap`;
* and the pieces the paths share, each written once: :func:`posbook.logit_scales.scale_queries` (a query scale
  folded into q), :func:`posbook.normalisers.extra_logit_rescale` (softmax1's and a sink's share),
  :func:`posbook.rope.plane_slices` (the plane layouts), :func:`posbook.masks.kind_size` and
  :func:`posbook.masks.size_option` (a mask's size by its name).

Argument checks shared by modules live in ``posbook._checks``; no module uses another's private names.

``posbook.experiments`` (a small GPT, tasks, a trainer, recorded grids, probes of trained models) imports this
core; the core never imports it.
"""

from .scaling import (ROPE_TYPES, RopeSpec, RopeType, default_inv_freq, mrope_layout, rope_parameters, rope_spec,
                      yarn_get_mscale, yarn_ramp_bounds, yarn_softmax_scale)
from .spectrum import frequency_ratio, ramp_gamma, ramp_weights, rope_turns, rope_wavelengths
from .norms import QKNorm, RMSNorm, qk_norm_logit_bound, rms_norm
from .rope import LAYOUTS, apply_rope, half_to_interleaved, interleaved_to_half, mrope_plane_axes, rope_cos_sin
from .bias import (BIASES, ALiBiBias, ContextualPositionBias, ForgetGateBias, T5RelativeBias, alibi_bias, alibi_slopes,
                   contextual_positions, cope_bias, forget_gate_bias, relative_positions, t5_relative_buckets)
from .logit_scales import LOGIT_SCALES, llama4_attention_scale, swan_log_scale
from .masks import MASK_KINDS, attention_mask, block_mask, mask_mod
from .normalisers import NORMALISERS, normalise
from .core import IMPLS, attention
from .local import local_attention
from .diff_attention import DiffAttention, differential_weights, lambda_init, needle_to_distractor_ratio
from .stability import (attention_entropy, entropy_lower_bound, extremal_logits, logit_rows_with_norm,
                        max_logits_per_head, qk_clip_, qk_clip_factors, qk_clip_mla_, softcap)
from .kvcache import (KV_LAYER_TYPES, STATE_LAYER_TYPES, attention_costs, cache_kind, format_bytes,
                      indexer_values_per_layer, kv_cache_bytes, kv_cache_bytes_per_token, kv_cache_table,
                      kv_values_per_layer, layer_kinds, linear_state_bytes, max_context_for_budget, without_indexer)
from .hf_config import NotModelledError, class_defaults, read_config
from .model_configs import model_config, models
from .report import config_report, format_report, plot_report, position_scheme, report_figure
from .score import (cosine_sum, fast_planes, normal_ks_distance, position_inversion_rate, rope_decay_bound,
                    rope_plane_terms, rope_score_by_distance, score_moments, score_term_moments, split_moments,
                    token_inversion_rate)
from .precision import position_aliasing, token_aliasing_rate
from .divergence import (DIVERGENCE_FORMS, HEAD_PAIRS, head_pair_divergence, js_divergence, kl_divergence,
                         pattern_distance)
from .influence import attention_mass, gradient_influence
from .claims import ClaimError, Claims, ClaimWarning, chapter_seed, glue, join_names, sci
from .device import default_device

__version__ = "0.1.0"

__all__ = [
    # 1. rotary frequencies and context extension
    "ROPE_TYPES", "RopeSpec", "RopeType", "default_inv_freq", "mrope_layout", "rope_parameters", "rope_spec",
    "yarn_get_mscale", "yarn_ramp_bounds", "yarn_softmax_scale",
    "frequency_ratio", "ramp_gamma", "ramp_weights", "rope_turns", "rope_wavelengths",
    # 2. q and k: QK-Norm and rotation
    "QKNorm", "RMSNorm", "qk_norm_logit_bound", "rms_norm",
    "LAYOUTS", "apply_rope", "half_to_interleaved", "interleaved_to_half", "mrope_plane_axes", "rope_cos_sin",
    # 3. the logits: biases, position-dependent scales, masks
    "BIASES", "ALiBiBias", "T5RelativeBias", "alibi_bias", "alibi_slopes", "relative_positions", "t5_relative_buckets",
    "ForgetGateBias", "ContextualPositionBias", "forget_gate_bias", "contextual_positions", "cope_bias",
    "LOGIT_SCALES", "llama4_attention_scale", "swan_log_scale",
    "MASK_KINDS", "attention_mask", "block_mask", "mask_mod",
    # 4. weights and output
    "NORMALISERS", "normalise", "IMPLS", "attention", "local_attention",
    "DiffAttention", "differential_weights", "lambda_init", "needle_to_distractor_ratio",
    # 5. the whole layer: stability and the KV cache
    "attention_entropy", "entropy_lower_bound", "extremal_logits", "logit_rows_with_norm", "max_logits_per_head",
    "qk_clip_", "qk_clip_factors", "qk_clip_mla_", "softcap",
    "KV_LAYER_TYPES", "STATE_LAYER_TYPES", "attention_costs", "cache_kind", "format_bytes", "indexer_values_per_layer",
    "kv_cache_bytes", "kv_cache_bytes_per_token", "kv_cache_table", "kv_values_per_layer", "layer_kinds",
    "linear_state_bytes", "max_context_for_budget", "without_indexer", "NotModelledError", "class_defaults",
    "read_config", "model_config", "models", "config_report", "format_report", "plot_report", "report_figure", "position_scheme",
    # 6. measurements
    "cosine_sum", "fast_planes", "normal_ks_distance", "position_inversion_rate", "rope_decay_bound",
    "rope_plane_terms", "rope_score_by_distance", "score_moments", "score_term_moments", "split_moments",
    "token_inversion_rate", "position_aliasing", "token_aliasing_rate",
    "DIVERGENCE_FORMS", "HEAD_PAIRS", "head_pair_divergence", "js_divergence", "kl_divergence", "pattern_distance",
    "attention_mass", "gradient_influence",
    # 7. the book
    "ClaimError", "Claims", "ClaimWarning", "chapter_seed", "glue", "join_names", "sci", "default_device",
]
