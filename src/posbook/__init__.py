"""posbook — position and numerics in transformer attention, the library behind the book's chapters.

Each mechanism lives in one module, in the order data flows through an attention layer:
:mod:`posbook.scaling` (rotary frequencies and context extension) → :mod:`posbook.norms` (QK-Norm) →
:mod:`posbook.rope` (rotation of q and k) → :mod:`posbook.bias` (ALiBi, T5) and :mod:`posbook.masks` →
:mod:`posbook.attention` (scores, normalisers, gates) → :mod:`posbook.diff_attention`;
:mod:`posbook.stability` (entropy, softcap, QK-Clip) and :mod:`posbook.kvcache` (cache arithmetic) look at the
whole layer. :mod:`posbook.claims` checks the numbers the chapters state.
"""

from .analysis import (attention_mass, cosine_sum, fast_planes, normal_ks_distance, position_aliasing, position_inversion_rate,
                       rope_decay_bound, rope_plane_terms, rope_score_by_distance, score_moments, score_term_moments,
                       split_moments, token_aliasing_rate, token_inversion_rate, gradient_influence,
                       attention_rows, logit_rows_with_norm, kl_divergence, js_divergence, head_pair_divergence,
                       attention_weights)
from .attention import (IMPLS, NORMALISERS, attention, llama4_attention_scale, local_attention, normalise,
                        swan_log_scale)
from .bias import T5RelativeBias, alibi_bias, alibi_slopes, relative_positions, t5_relative_buckets
from .claims import ClaimError, Claims, glue, sci
from .device import default_device
from .diff_attention import DiffAttention, differential_weights, lambda_init, needle_to_distractor_ratio
from .kvcache import (KV_LAYER_TYPES, STATE_LAYER_TYPES, attention_costs, cache_kind, format_bytes,
                      indexer_values_per_layer, kv_cache_bytes, kv_cache_bytes_per_token, kv_cache_table,
                      kv_values_per_layer, layer_kinds, linear_state_bytes, model_config, models, parse_config,
                      without_indexer)
from .masks import MASK_KINDS, attention_mask, block_mask, mask_mod
from .norms import QKNorm, RMSNorm, qk_norm_logit_bound, rms_norm
from .rope import LAYOUTS, apply_rope, half_to_interleaved, interleaved_to_half, rope_cos_sin
from .scaling import (ROPE_TYPES, RopeSpec, default_inv_freq, frequency_ratio, ramp_gamma, ramp_weights,
                      rope_parameters, rope_spec, rope_turns, rope_wavelengths, yarn_get_mscale, yarn_ramp_bounds,
                      yarn_softmax_scale)
from .stability import (attention_entropy, entropy_lower_bound, extremal_logits, max_logits_per_head, qk_clip_,
                        qk_clip_factors, qk_clip_mla_, softcap)

__version__ = "0.1.0"

__all__ = [
    "IMPLS", "KV_LAYER_TYPES", "LAYOUTS", "MASK_KINDS", "NORMALISERS", "ROPE_TYPES", "STATE_LAYER_TYPES",
    "ClaimError", "Claims", "DiffAttention", "QKNorm", "RMSNorm", "RopeSpec", "T5RelativeBias",
    "alibi_bias", "alibi_slopes", "apply_rope", "attention", "attention_entropy", "attention_mask", "block_mask",
    "default_device", "default_inv_freq", "entropy_lower_bound", "extremal_logits", "glue", "half_to_interleaved",
    "interleaved_to_half", "kv_cache_bytes", "kv_cache_bytes_per_token", "kv_values_per_layer", "lambda_init",
    "layer_kinds", "llama4_attention_scale", "local_attention", "mask_mod", "model_config", "models", "qk_clip_", "qk_clip_factors",
    "qk_clip_mla_", "relative_positions", "rms_norm", "rope_cos_sin", "rope_decay_bound", "rope_parameters",
    "attention_mass", "gradient_influence", "cosine_sum", "fast_planes", "normal_ks_distance", "position_aliasing", "position_inversion_rate",
    "rope_plane_terms", "rope_score_by_distance", "score_moments", "score_term_moments", "split_moments",
    "token_aliasing_rate", "token_inversion_rate",
    "sci", "rope_spec", "rope_turns", "rope_wavelengths", "ramp_gamma", "ramp_weights", "frequency_ratio",
    "yarn_softmax_scale", "softcap", "swan_log_scale", "t5_relative_buckets", "yarn_get_mscale", "yarn_ramp_bounds",
    "attention_rows", "logit_rows_with_norm", "kl_divergence", "js_divergence", "head_pair_divergence", "attention_weights",
    "normalise", "differential_weights", "needle_to_distractor_ratio",
    "attention_costs", "cache_kind", "format_bytes", "indexer_values_per_layer", "kv_cache_table",
    "linear_state_bytes", "parse_config", "without_indexer", "qk_norm_logit_bound", "max_logits_per_head",
]
