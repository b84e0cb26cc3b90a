"""The public boundary rejects bad input with a ValueError/TypeError that names the argument: hand-written cases
cover each check once; hypothesis then corrupts valid configs, tensors and shapes field by field."""

from __future__ import annotations

import math
import re

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import posbook as pb

inv8 = pb.default_inv_freq(8)
cos8, sin8 = pb.rope_cos_sin(torch.arange(4), inv8)


@pytest.mark.parametrize("call, error, names", [
    (lambda: pb.default_inv_freq(7), ValueError, "rotary_dim"),
    (lambda: pb.default_inv_freq(0), ValueError, "rotary_dim"),
    (lambda: pb.default_inv_freq(8.0), TypeError, "rotary_dim"),
    (lambda: pb.default_inv_freq(8, -5.0), ValueError, "rope_theta"),
    (lambda: pb.default_inv_freq(8, 1.0), ValueError, "rope_theta"),
    (lambda: pb.default_inv_freq(8, float("nan")), ValueError, "rope_theta"),
    (lambda: pb.default_inv_freq(8, dtype=torch.int64), TypeError, "dtype"),
    (lambda: pb.rope_cos_sin([0, 1], inv8), TypeError, "positions"),
    (lambda: pb.rope_cos_sin(torch.zeros(2, 2), inv8), ValueError, "positions"),
    (lambda: pb.rope_cos_sin(torch.tensor([0.0, float("nan")]), inv8), ValueError, "positions"),
    (lambda: pb.rope_cos_sin(torch.tensor([True, False]), inv8), TypeError, "positions"),
    (lambda: pb.rope_cos_sin(torch.arange(3), torch.arange(4)), TypeError, "inv_freq"),
    (lambda: pb.rope_cos_sin(torch.arange(3), torch.empty(0)), ValueError, "inv_freq"),
    (lambda: pb.rope_cos_sin(torch.arange(3), inv8, layout="neox"), ValueError, "layout"),
    (lambda: pb.rope_cos_sin(torch.arange(3), inv8, attention_factor=0.0), ValueError, "attention_factor"),
    (lambda: pb.rope_cos_sin(torch.arange(3), inv8, dtype=torch.int32), TypeError, "dtype"),
    (lambda: pb.rope_cos_sin(torch.zeros(3, 5), inv8), ValueError, r"^positions must have 1 dimension \[T\]"),
    (lambda: pb.rope_cos_sin(torch.zeros(2, 5), inv8, mrope_section=[2, 1, 1]), ValueError,
     r"^positions must be \[T\], \[3, T\] or \[3, B, T\]"),
    (lambda: pb.rope_cos_sin(torch.zeros(3, 2, 2, 5), inv8, mrope_section=[2, 1, 1]), ValueError,
     r"^positions must be \[T\], \[3, T\] or \[3, B, T\]"),
    (lambda: pb.rope_cos_sin(torch.zeros(3, 5), inv8, mrope_section=[2, 1, 2]), ValueError,
     r"^mrope_section must sum to .* 4, got \[2, 1, 2\] \(sum 5\)"),
    (lambda: pb.rope_cos_sin(torch.zeros(3, 5), inv8, mrope_section="211"), TypeError,
     "^mrope_section must be a list of 3 ints"),
    (lambda: pb.rope_cos_sin(torch.zeros(3, 5), inv8, mrope_section=[2, 1.0, 1]), TypeError,
     r"^mrope_section \(height\) must be an int, got float 1.0"),
    (lambda: pb.rope_cos_sin(torch.zeros(3, 5), inv8, mrope_section=[2, 1, 1], mrope_interleaved=1), TypeError,
     "^mrope_interleaved must be a bool, got int 1"),
    (lambda: pb.rope_cos_sin(torch.arange(5), inv8, mrope_interleaved=True), ValueError,
     "^mrope_interleaved=True needs mrope_section"),
    (lambda: pb.mrope_plane_axes([0, 0, 0], 0), ValueError, "^n_planes must be > 0"),
    (lambda: pb.apply_rope(torch.randn(4, 6), cos8, sin8), ValueError, "head_dim"),
    (lambda: pb.apply_rope(torch.randn(5, 8), cos8, sin8), ValueError, "positions"),
    (lambda: pb.apply_rope(torch.randn(4, 8), cos8, sin8[:, :6]), ValueError, "cos and sin"),
    (lambda: pb.apply_rope(torch.randn(4, 8), cos8[:, :3], sin8[:, :3]), ValueError, "rotary_dim"),
    (lambda: pb.apply_rope(torch.arange(32).view(4, 8), cos8, sin8), TypeError, "x"),
    (lambda: pb.apply_rope(torch.randn(8), cos8, sin8), ValueError, "x"),
    (lambda: pb.apply_rope(torch.randn(4, 8), cos8, sin8, layout="gptj"), ValueError, "layout"),
    (lambda: pb.interleaved_to_half(torch.arange(6), head_dim=4), ValueError, "head_dim"),
    (lambda: pb.interleaved_to_half(torch.arange(8), rotary_dim=3), ValueError, "rotary_dim"),
    (lambda: pb.interleaved_to_half(torch.arange(8), dim=2), ValueError, "dim"),
    (lambda: pb.rope_decay_bound(torch.arange(3), torch.arange(3)), TypeError, "inv_freq"),
])
def test_rejected_with_named_argument(call, error, names):
    with pytest.raises(error, match=names):
        call()


@settings(max_examples=150, deadline=None)
@given(rotary_dim=st.one_of(st.integers(-10, 0), st.integers(1, 99).filter(lambda v: v % 2),
                            st.floats(allow_nan=True), st.text(max_size=3), st.none()),
       theta=st.one_of(st.floats(max_value=1.0), st.just(float("inf")), st.just(float("nan")), st.booleans()))
def test_generated_bad_frequency_arguments(rotary_dim, theta):
    with pytest.raises((ValueError, TypeError)) as info:
        pb.default_inv_freq(rotary_dim, theta)
    assert "rotary_dim" in str(info.value) or "rope_theta" in str(info.value)


@settings(max_examples=120, deadline=None)
@given(head_dim=st.integers(1, 20), rotary_dim=st.integers(1, 24), t_x=st.integers(1, 5), t_c=st.integers(1, 5))
def test_generated_shape_mismatches(head_dim, rotary_dim, t_x, t_c):
    valid = rotary_dim % 2 == 0 and rotary_dim <= head_dim and t_x == t_c
    x = torch.randn(t_x, head_dim)
    cos = torch.ones(t_c, rotary_dim)
    if valid:
        assert pb.apply_rope(x, cos, cos).shape == x.shape
    else:
        with pytest.raises(ValueError, match="rotary_dim|positions|head_dim"):
            pb.apply_rope(x, cos, cos)


GOOD = dict(hidden_size=512, num_attention_heads=4, max_position_embeddings=2048, rope_theta=1e4)


q4 = torch.randn(1, 4, 6, 8)


k2 = torch.randn(1, 2, 6, 8)


def rope(**scaling):
    return dict(GOOD, rope_scaling=scaling)


CASES = [
    # rope_parameters / rope_spec
    (lambda: pb.rope_parameters([("rope_theta", 1e4)]), TypeError, "config"),
    (lambda: pb.rope_parameters(dict(GOOD, rope_theta=None)), ValueError, "rope_theta"),
    (lambda: pb.rope_parameters(dict(GOOD, rope_theta=0.5)), ValueError, "rope_theta"),
    (lambda: pb.rope_parameters(dict(GOOD, rope_theta="1e4")), TypeError, "rope_theta"),
    (lambda: pb.rope_parameters(rope(rope_type="su")), ValueError, "rope_type"),
    (lambda: pb.rope_parameters(rope(rope_type="longrope", short_factor=[1.0] * 63, long_factor=[2.0] * 64)),
     ValueError, r"^short_factor must have rotary_dim/2 = 64 entries.*got 63$"),
    (lambda: pb.rope_parameters(rope(rope_type="longrope", short_factor=[1.0] * 64)), ValueError,
     "needs 'long_factor'"),
    (lambda: pb.rope_parameters(rope(rope_type="longrope", short_factor="1.0", long_factor=[2.0] * 64)), TypeError,
     r"^config\['rope_scaling'\]\['short_factor'\] must be a list of numbers, got str '1.0'"),
    (lambda: pb.rope_parameters(rope(rope_type="longrope", short_factor=[1.0] * 64, long_factor=[2.0] * 63 + [0.0])),
     ValueError, r"^config\['rope_scaling'\]\['long_factor'\]\[63\] must be > 0, got 0.0"),
    (lambda: pb.rope_parameters(rope(rope_type="longrope", short_factor=[True] * 64, long_factor=[2.0] * 64)),
     TypeError, r"^config\['rope_scaling'\]\['short_factor'\]\[0\] must be a real number, got bool True"),
    (lambda: pb.rope_parameters(rope(rope_type="longrope", short_factor=[1.0] * 63 + [float("inf")],
                                     long_factor=[2.0] * 64)), ValueError,
     r"^config\['rope_scaling'\]\['short_factor'\]\[63\] must be finite"),
    (lambda: pb.rope_parameters(rope(rope_type="longrope", short_factor=[1.0] * 64, long_factor=[2.0] * 64,
                                     attention_factor=0.0)), ValueError,
     r"^config\['rope_scaling'\]\['attention_factor'\] must be > 0"),
    (lambda: pb.rope_parameters(rope(rope_type="longrope", short_factor=[1.0] * 64, long_factor=[2.0] * 64,
                                     attention_factor=1.2, factor=0.5)), ValueError, "^factor must be >= 1"),
    (lambda: pb.rope_parameters(dict(rope(rope_type="longrope", short_factor=[1.0] * 64, long_factor=[2.0] * 64),
                                     original_max_position_embeddings=4096)), ValueError,
     r"max_position_embeddings / original_max_position_embeddings = 0.5 must be >= 1"),
    (lambda: pb.rope_parameters(dict(rope(rope_type="longrope", short_factor=[1.0] * 64, long_factor=[2.0] * 64),
                                     max_position_embeddings=None, original_max_position_embeddings=2048)), ValueError,
     "rope_type 'longrope' needs factor, or max_position_embeddings"),
    (lambda: pb.rope_parameters(rope(rope_type="longrope", short_factor=[1.0] * 64, long_factor=[2.0] * 64,
                                     original_max_position_embeddings=1)), ValueError,
     "^original_max_position_embeddings must be >= 2"),
    (lambda: pb.rope_parameters(rope(type="mrope", mrope_section=[16, 24, 23])), ValueError,
     r"^mrope_section must sum to .* 64, got \[16, 24, 23\] \(sum 63\)"),
    (lambda: pb.rope_parameters(rope(type="mrope", rope_type="linear", factor=2.0)), ValueError,
     "rope_type='linear' and type='default'"),
    (lambda: pb.mrope_layout(rope(type="mrope", mrope_section=[32, 32])), ValueError, "^mrope_section must have 3"),
    (lambda: pb.mrope_layout(rope(type="mrope", mrope_section=[-8, 40, 32])), ValueError,
     r"^mrope_section \(time\) must be >= 0, got -8"),
    (lambda: pb.mrope_layout(rope(mrope_section=[16, 24, 24], mrope_interleaved="true")), TypeError,
     r"^config\['rope_scaling'\]\['mrope_interleaved'\] must be a bool, got str 'true'"),
    (lambda: pb.mrope_layout(rope(mrope_interleaved=True)), ValueError, "^mrope_interleaved=True needs mrope_section"),
    (lambda: pb.mrope_layout(dict(GOOD, head_dim=32, rope_scaling={"mrope_section": [4, 6, 6],
                                                                   "mrope_interleaved": True})), ValueError,
     r"^mrope_section \[4, 6, 6\] cannot be interleaved over 16 planes: it gives time, height, width \[6, 5, 5\]"),
    (lambda: pb.rope_parameters(rope(rope_type="linear", type="yarn", factor=2.0)), ValueError, "rope_type"),
    (lambda: pb.rope_parameters(rope(rope_type="linear")), ValueError, "factor"),
    (lambda: pb.rope_parameters(rope(rope_type="linear", factor=0.5)), ValueError, "factor"),
    (lambda: pb.rope_parameters(rope(rope_type="linear", factor=float("nan"))), ValueError, "factor"),
    (lambda: pb.rope_parameters(rope(rope_type="linear", factors=2.0)), ValueError, "factors"),
    (lambda: pb.rope_parameters(rope(rope_type="dynamic", factor=2.0), seq_len=-4), ValueError, "seq_len"),
    (lambda: pb.rope_parameters(dict(rope(rope_type="dynamic", factor=2.0), max_position_embeddings=None)),
     ValueError, "max_position_embeddings"),
    (lambda: pb.rope_parameters(rope(rope_type="yarn", factor=4.0, beta_fast=1, beta_slow=32)), ValueError, "beta_fast"),
    (lambda: pb.rope_parameters(rope(rope_type="yarn", factor=4.0, truncate="yes")), TypeError, "truncate"),
    (lambda: pb.rope_parameters(rope(rope_type="yarn", factor=4.0, attention_factor=-1.0)), ValueError,
     "attention_factor"),
    (lambda: pb.rope_parameters(dict(rope(rope_type="yarn", factor=4.0, original_max_position_embeddings=1024),
                                     original_max_position_embeddings=512)), ValueError,
     "original_max_position_embeddings"),
    (lambda: pb.rope_parameters(rope(rope_type="llama3", factor=8.0, low_freq_factor=1.0)), ValueError,
     "high_freq_factor"),
    (lambda: pb.rope_parameters(rope(rope_type="llama3", factor=8.0, low_freq_factor=4.0, high_freq_factor=1.0)),
     ValueError, "high_freq_factor"),
    (lambda: pb.rope_parameters(dict(GOOD, partial_rotary_factor=0.01)), ValueError, "rotary_dim"),
    (lambda: pb.rope_parameters(dict(GOOD, partial_rotary_factor=1.5)), ValueError, "partial_rotary_factor"),
    (lambda: pb.rope_parameters(dict(GOOD, head_dim=127)), ValueError, "rotary_dim"),
    (lambda: pb.rope_parameters(dict(GOOD, hidden_size=510)), ValueError, "head_dim"),
    (lambda: pb.rope_parameters(dict(GOOD, num_attention_heads=None)), ValueError, "head_dim"),
    (lambda: pb.rope_parameters(dict(GOOD, rope_scaling=4.0)), TypeError, "rope_scaling"),
    (lambda: pb.rope_parameters(dict(GOOD, rope_parameters={"rope_theta": 2e4})), ValueError, "rope_theta"),
    (lambda: pb.rope_parameters(dict(GOOD, rope_parameters={"full_attention": {"rope_theta": 1e4}})), ValueError,
     "layer type"),
    (lambda: pb.rope_parameters(GOOD, dtype=torch.int64), TypeError, "dtype"),
    (lambda: pb.yarn_get_mscale(0.0), ValueError, "scale"),
    # biases
    (lambda: pb.alibi_slopes(0), ValueError, "n_heads"),
    (lambda: pb.alibi_slopes(3.0), TypeError, "n_heads"),
    (lambda: pb.alibi_bias(torch.tensor([0.5, float("nan")]), 4), ValueError, "slopes"),
    (lambda: pb.alibi_bias(pb.alibi_slopes(2), 5, 3), ValueError, "k_len"),
    (lambda: pb.t5_relative_buckets(torch.arange(4.0)), TypeError, "relative_position"),
    (lambda: pb.t5_relative_buckets(torch.arange(4), num_buckets=2), ValueError, "num_buckets"),
    (lambda: pb.t5_relative_buckets(torch.arange(4), max_distance=4), ValueError, "max_distance"),
    (lambda: pb.t5_relative_buckets(torch.arange(4), bidirectional=1), TypeError, "bidirectional"),
    # masks
    (lambda: pb.attention_mask("local", 4), ValueError, "kind"),
    (lambda: pb.attention_mask("sliding", 4), ValueError, "window"),
    (lambda: pb.attention_mask("sliding", 4, window=0), ValueError, "window"),
    (lambda: pb.attention_mask("causal", 4, window=2), ValueError, "window"),
    (lambda: pb.attention_mask("chunked", 4), ValueError, "chunk_size"),
    (lambda: pb.attention_mask("causal", 0), ValueError, "q_len"),
    (lambda: pb.attention_mask("causal", 5, 4), ValueError, "k_len"),
    # attention
    (lambda: pb.attention(q4[0], k2[0], k2[0]), ValueError, "^q must have 4"),
    (lambda: pb.attention(q4, torch.randn(1, 3, 6, 8), torch.randn(1, 3, 6, 8)), ValueError, "heads"),
    (lambda: pb.attention(q4, k2, torch.randn(1, 2, 5, 8)), ValueError, "^v must be"),
    (lambda: pb.attention(q4, torch.randn(1, 2, 6, 7), k2), ValueError, r"k.shape\[-1\]"),
    (lambda: pb.attention(q4, k2[:, :, :3], k2[:, :, :3]), ValueError, "positions"),
    (lambda: pb.attention(q4.double(), k2, k2), TypeError, "dtype"),
    (lambda: pb.attention(q4, k2, k2, scale=0.0), ValueError, "scale"),
    (lambda: pb.attention(q4, k2, k2, temperature=-1.0), ValueError, "temperature"),
    (lambda: pb.attention(q4, k2, k2, mask=torch.ones(6, 6)), TypeError, "mask"),
    (lambda: pb.attention(q4, k2, k2, mask=torch.ones(5, 6, dtype=torch.bool)), ValueError, "mask"),
    (lambda: pb.attention(q4, k2, k2, bias=torch.full((6, 6), float("nan"))), ValueError, "bias"),
    (lambda: pb.attention(q4, k2, k2, bias=torch.zeros(3, 6, 6)), ValueError, "bias"),
    (lambda: pb.attention(q4, k2, k2, normaliser="softmax2"), ValueError, "normaliser"),
    (lambda: pb.attention(q4, k2, k2, normaliser="sink"), ValueError, "sink"),
    (lambda: pb.attention(q4, k2, k2, normaliser="sink", sink=torch.zeros(2)), ValueError, "sink"),
    (lambda: pb.attention(q4, k2, k2, sink=torch.zeros(4)), ValueError, "sink"),
    (lambda: pb.attention(q4, k2, k2, sigmoid_bias=-1.0), ValueError, "sigmoid_bias"),
    (lambda: pb.attention(q4, k2, k2, softcap=0.0), ValueError, "softcap"),
    (lambda: pb.attention(q4, k2, k2, causal=1), TypeError, "causal"),
    (lambda: pb.attention(q4, k2, k2, impl="flash"), ValueError, "impl"),
    (lambda: pb.attention(q4, k2, k2, gate=torch.zeros(1, 4, 6, 3)), ValueError, "gate"),
    (lambda: pb.attention(q4, k2, k2, output_rope=torch.ones(6, 8)), TypeError, "output_rope"),
    (lambda: pb.attention(q4, k2, k2, query_scale=torch.ones(5)), ValueError, "query_scale"),
    (lambda: pb.attention(q4, k2, k2, return_weights="yes"), TypeError, "return_weights"),
    (lambda: pb.attention(q4, k2, k2, normaliser="sigmoid", impl="flex"), ValueError, "sigmoid"),
    (lambda: pb.llama4_attention_scale(torch.tensor([-1, 2])), ValueError, "positions"),
    (lambda: pb.llama4_attention_scale(torch.tensor([-5.0, 2.0])), ValueError, "positions"),
    (lambda: pb.swan_log_scale(torch.tensor([float("nan"), 2.0])), ValueError, "positions"),
    (lambda: pb.swan_log_scale(torch.tensor([True, False])), TypeError, "positions"),
    (lambda: pb.attention(q4[:, :, :1], k2, k2, mask=pb.attention_mask("causal", 6)), ValueError, "^mask of shape"),
    (lambda: pb.attention(q4[:, :, :1], k2, k2, query_scale=torch.ones(6)), ValueError, "^query_scale"),
    (lambda: pb.attention(q4, k2, k2, bias=torch.zeros(3, 1, 6, 6)), ValueError, "^bias of shape"),
    (lambda: pb.attention(q4, k2, k2, bias=torch.full((6, 6), float("inf"))), ValueError, r"\+inf"),
    (lambda: pb.attention(q4, k2, k2, softcap=5.0, bias=torch.full((6, 6), float("-inf"))), ValueError, "softcap"),
    (lambda: pb.rope_parameters(rope(rope_type="yarn", factor=4.0, mscale=-5.0, mscale_all_dim=1.0)), ValueError,
     r"^config\['rope_scaling'\]\['mscale'\] must be >= 0"),
    (lambda: pb.rope_parameters(rope(rope_type="yarn", factor=4.0, mscale=1.0, mscale_all_dim=-1.0)), ValueError,
     r"^config\['rope_scaling'\]\['mscale_all_dim'\] must be >= 0"),
    (lambda: pb.qk_clip_(torch.ones(8, 4), torch.ones(8, 4), torch.tensor([float("nan"), 1.0]), head_dim=4),
     ValueError, "^gamma"),
    (lambda: pb.qk_clip_(torch.ones(8, 4), torch.ones(4, 4, dtype=torch.long), torch.tensor([0.5, 1.0]), head_dim=4),
     TypeError, "^w_k"),
    (lambda: pb.kv_cache_bytes_per_token(dict(num_hidden_layers=1, num_attention_heads=2, head_dim=8,
                                              attention_k_eq_v="false")), TypeError, "attention_k_eq_v"),
    (lambda: pb.swan_log_scale(torch.arange(3), a=1.0), ValueError, "^a must"),
    # norms, stability, differential attention
    (lambda: pb.rms_norm(torch.arange(4)), TypeError, "^x must"),
    (lambda: pb.rms_norm(torch.randn(2, 4), torch.ones(3)), ValueError, "weight"),
    (lambda: pb.rms_norm(torch.randn(2, 4), zero_centred=True), ValueError, "weight"),
    (lambda: pb.rms_norm(torch.randn(2, 4), eps=0.0), ValueError, "eps"),
    (lambda: pb.attention_entropy(torch.tensor([-0.1, 1.1])), ValueError, "weights"),
    (lambda: pb.entropy_lower_bound(-1.0, 8), ValueError, "logit_norm"),
    (lambda: pb.entropy_lower_bound(1.0, 1), ValueError, "^n must"),
    (lambda: pb.softcap(torch.ones(2), -5.0), ValueError, "cap"),
    (lambda: pb.qk_clip_factors(torch.tensor([1.0, float("inf")]), 10.0), ValueError, "max_logits"),
    (lambda: pb.qk_clip_factors(torch.tensor([1.0]), 0.0), ValueError, "tau"),
    (lambda: pb.qk_clip_(torch.ones(8, 4), torch.ones(8, 4), torch.tensor([0.5, 1.5]), head_dim=4), ValueError, "gamma"),
    (lambda: pb.qk_clip_(torch.ones(8, 4), torch.ones(8, 4), torch.tensor([0.5, 1.0]), head_dim=3), ValueError, "w_q"),
    (lambda: pb.qk_clip_(torch.ones(8, 4), torch.ones(4, 4), torch.tensor([0.5, 1.0]), head_dim=4), ValueError, "alpha"),
    (lambda: pb.qk_clip_mla_(torch.ones(8, 4), torch.ones(5, 4), torch.ones(8, 4), torch.tensor([0.5, 1.0]),
                             qk_nope_head_dim=4, qk_rope_head_dim=2), ValueError, "w_q_rope"),
    (lambda: pb.lambda_init(0), ValueError, "layer"),
    (lambda: pb.DiffAttention(60, 4, layer=1), ValueError, "d_model"),
    # KV cache
    (lambda: pb.kv_cache_bytes_per_token(dict(num_attention_heads=8, head_dim=64)), ValueError, "num_hidden_layers"),
    (lambda: pb.kv_cache_bytes_per_token(dict(num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=3,
                                              head_dim=64)), ValueError, "num_key_value_heads|key/value heads"),
    (lambda: pb.kv_cache_bytes_per_token(dict(num_hidden_layers=2, num_attention_heads=8, head_dim=64), dtype_bytes=0),
     ValueError, "dtype_bytes"),
    (lambda: pb.kv_cache_bytes_per_token(dict(num_hidden_layers=2, num_attention_heads=8, head_dim=64,
                                              layer_types=["full_attention"])), ValueError, "layer_types"),
    (lambda: pb.kv_cache_bytes(dict(num_hidden_layers=1, num_attention_heads=8, head_dim=64), -1), ValueError, "seq_len"),
    (lambda: pb.kv_cache_bytes(dict(num_hidden_layers=1, num_attention_heads=8, head_dim=64,
                                    layer_types=["sliding_attention"]), 10), ValueError, "sliding_window"),
    (lambda: pb.kv_cache_bytes_per_token(dict(num_hidden_layers=1, num_attention_heads=8, kv_lora_rank=512)),
     ValueError, "qk_rope_head_dim"),
    (lambda: pb.model_config("GPT-5"), ValueError, "name"),
]


@pytest.mark.parametrize("call, error, names", CASES)
def test_core_pipeline_rejects_with_named_argument(call, error, names):
    with pytest.raises(error, match=names):
        call()


# Generated corruptions: a valid config with one field replaced by a bad value. Each bad value is paired with
# the word its error message must contain.
NOT_A_NUMBER = st.one_of(st.text(max_size=3), st.lists(st.integers(), max_size=2), st.booleans())


BAD_FIELDS = {
    "rope_theta": st.one_of(st.floats(max_value=1.0, allow_nan=False), st.just(float("nan")), st.just(float("inf")),
                            NOT_A_NUMBER),
    "factor": st.one_of(st.floats(max_value=0.999, allow_nan=False), st.just(float("nan")), NOT_A_NUMBER),
    "partial_rotary_factor": st.one_of(st.floats(min_value=1.001, max_value=1e6), st.floats(max_value=0.0),
                                       NOT_A_NUMBER),
    "head_dim": st.one_of(st.integers(max_value=0), st.integers(1, 400).filter(lambda v: v % 2), NOT_A_NUMBER,
                          st.floats(allow_nan=False)),
    "rope_type": st.text(min_size=1, max_size=12).filter(lambda s: s not in (*pb.ROPE_TYPES, "mrope")),
    "max_position_embeddings": st.one_of(st.integers(max_value=0), st.floats(allow_nan=False), NOT_A_NUMBER),
}


EXPECTED_WORD = {"head_dim": "head_dim|rotary_dim", "max_position_embeddings": "max_position_embeddings"}


@settings(max_examples=200, deadline=None)
@given(field=st.sampled_from(sorted(BAD_FIELDS)), rope_type=st.sampled_from(["linear", "dynamic", "yarn", "ntk"]),
       data=st.data())
def test_generated_bad_configs(field, rope_type, data):
    value = data.draw(BAD_FIELDS[field])
    scaling = {"rope_type": rope_type, "factor": 4.0}
    config = dict(GOOD, head_dim=64, rope_scaling=scaling)
    if field in ("factor", "rope_type"):
        scaling[field] = value
    else:
        config[field] = value
    if field == "max_position_embeddings" and rope_type in ("linear", "ntk"):
        config["rope_scaling"]["rope_type"] = "dynamic"  # a type that reads the field
    with pytest.raises((ValueError, TypeError)) as info:
        pb.rope_parameters(config)
    assert re.search(EXPECTED_WORD.get(field, field), str(info.value)), str(info.value)


@settings(max_examples=120, deadline=None)
@given(which=st.sampled_from(["q", "k", "v"]), ndim=st.integers(1, 6), dtype=st.sampled_from([torch.int64, torch.bool]),
       shape_or_dtype=st.booleans())
def test_generated_bad_attention_tensors(which, ndim, dtype, shape_or_dtype):
    tensors = {"q": torch.randn(1, 4, 6, 8), "k": torch.randn(1, 2, 6, 8), "v": torch.randn(1, 2, 6, 8)}
    if shape_or_dtype:
        if ndim == 4:
            ndim = 5
        tensors[which] = torch.randn(*([2] * ndim))
        expected = (ValueError, f"{which} must have 4 dimension")
    else:
        tensors[which] = tensors[which].to(dtype)
        expected = (TypeError, f"{which} must be a floating-point")
    with pytest.raises(expected[0], match=expected[1]):
        pb.attention(**tensors)


@settings(max_examples=100, deadline=None)
@given(n_heads=st.one_of(st.integers(max_value=0), st.floats(allow_nan=True), st.text(max_size=2), st.none()))
def test_generated_bad_head_counts(n_heads):
    with pytest.raises((ValueError, TypeError), match="n_heads"):
        pb.alibi_slopes(n_heads)


def test_good_configs_still_pass():
    """The corruptions above fail because of the corrupted field, not because the base config was bad."""
    for rope_type in ("linear", "dynamic", "yarn", "ntk"):
        inv_freq, factor = pb.rope_parameters(dict(GOOD, head_dim=64, rope_scaling={"rope_type": rope_type, "factor": 4.0}))
        assert inv_freq.shape == (32,) and math.isfinite(factor)
    assert pb.attention(torch.randn(1, 4, 6, 8), torch.randn(1, 2, 6, 8), torch.randn(1, 2, 6, 8)).shape == (1, 4, 6, 8)
