"""KV-cache arithmetic on hand-made configs and on the sourced model table."""

from __future__ import annotations

import pytest

import posbook as pb

KIB, GIB = 1024, 1024 ** 3


def test_mha_mqa_gqa_for_one_layout():
    # 16 attention layers, 24 query heads of 256 (the seeds' anchor model), BF16.
    base = dict(num_hidden_layers=16, num_attention_heads=24, head_dim=256, hidden_size=5120)
    assert pb.kv_cache_bytes_per_token(base) == 384 * KIB                                   # MHA
    assert pb.kv_cache_bytes_per_token(dict(base, num_key_value_heads=1)) == 16 * KIB        # MQA
    assert pb.kv_cache_bytes_per_token(dict(base, num_key_value_heads=4)) == 64 * KIB        # GQA, 4 groups
    assert pb.kv_cache_bytes(dict(base, num_key_value_heads=4), 262_144) == 16 * GIB


def test_mla_is_latent_plus_shared_rope_key_whatever_the_heads():
    v3 = dict(num_hidden_layers=61, num_attention_heads=128, hidden_size=7168, kv_lora_rank=512, qk_rope_head_dim=64)
    assert pb.kv_values_per_layer(v3) == 576
    assert pb.kv_cache_bytes_per_token(v3) == 70_272
    assert pb.kv_cache_bytes_per_token(dict(v3, num_attention_heads=64)) == 70_272  # Kimi K2: half the heads


def test_hybrid_layers_without_kv_cost_nothing():
    config = dict(num_hidden_layers=8, num_attention_heads=8, num_key_value_heads=2, head_dim=64,
                  layer_types=["linear_attention"] * 3 + ["full_attention"] + ["linear_attention"] * 3 + ["full_attention"])
    assert pb.kv_cache_bytes_per_token(config) == 2 * 2 * 2 * 64 * 2
    assert pb.kv_cache_bytes_per_token(dict(config, layer_types=["mamba"] * 8)) == 0


def test_sliding_and_chunked_layers_keep_window_minus_one():
    config = dict(num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=1, head_dim=32, sliding_window=128,
                  attention_chunk_size=256,
                  layer_types=["sliding_attention", "chunked_attention", "full_attention", "sliding_attention"])
    per_layer = 2 * 32 * 2
    assert pb.kv_cache_bytes(config, 100) == 4 * 100 * per_layer
    # the next query attends to itself and window − 1 cached tokens, as transformers keeps them
    assert pb.kv_cache_bytes(config, 10_000) == (127 + 255 + 10_000 + 127) * per_layer
    assert pb.kv_cache_bytes_per_token(config) == 4 * per_layer


def test_global_layers_may_use_other_heads_and_share_k_and_v():
    config = dict(num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=4, head_dim=64,
                  num_global_key_value_heads=2, global_head_dim=128, attention_k_eq_v=True, sliding_window=16,
                  layer_types=["sliding_attention", "full_attention"])
    assert pb.kv_values_per_layer(config, "sliding_attention") == 4 * 128
    assert pb.kv_values_per_layer(config, "full_attention") == 2 * 128   # keys only: values are the keys
    assert pb.kv_cache_bytes_per_token(config) == (512 + 256) * 2


def test_fractional_bytes_for_quantised_caches():
    v2 = dict(num_hidden_layers=60, num_attention_heads=128, hidden_size=5120, kv_lora_rank=512, qk_rope_head_dim=64)
    assert pb.kv_cache_bytes_per_token(v2) == 69_120
    assert pb.kv_cache_bytes_per_token(v2, dtype_bytes=6 / 8) == pytest.approx(25_920)


def test_unmodelled_caches_are_refused_not_miscounted():
    shared = dict(num_hidden_layers=30, num_attention_heads=8, num_key_value_heads=1, head_dim=256)
    assert pb.kv_cache_bytes_per_token(dict(shared, num_kv_shared_layers=0)) == 30 * 512 * 2
    with pytest.raises(ValueError, match="num_kv_shared_layers"):
        pb.kv_cache_bytes_per_token(dict(shared, num_kv_shared_layers=20))
    v32 = dict(num_hidden_layers=61, num_attention_heads=128, kv_lora_rank=512, qk_rope_head_dim=64, index_topk=2048)
    with pytest.raises(ValueError, match="index_topk"):
        pb.kv_cache_bytes_per_token(v32)
    with pytest.raises(ValueError, match="layer_types entry"):
        pb.kv_cache_bytes_per_token(dict(num_hidden_layers=1, num_attention_heads=1, head_dim=8,
                                         layer_types=["compressed_sparse_attention"]))


def test_model_table_every_value_has_a_source():
    table = pb.models()
    assert len(table) >= 30
    for name, entry in table.items():
        assert set(entry) >= {"config", "sources", "notes"}, name
        missing = set(entry["config"]) - set(entry["sources"])
        assert not missing, f"{name}: no source for {sorted(missing)}"
        for key, source in entry["sources"].items():
            assert isinstance(source, str) and len(source) > 10, (name, key)


@pytest.mark.parametrize("name, expected", [
    ("DeepSeek-LLM-67B", 389_120), ("DeepSeek-V2", 69_120), ("DeepSeek-V3", 70_272), ("Kimi-K2", 70_272),
    ("Qwen3.8-27B", 64 * KIB), ("Llama-3.1-8B", 128 * KIB),
])
def test_model_table_reproduces_the_quoted_figures(name, expected):
    assert pb.kv_cache_bytes_per_token(pb.model_config(name)) == expected


# Frequencies per model (rotary_dim / 2, or head_dim / 2 for p-RoPE), read off each model's head size and rotary
# fraction; models whose rope cannot be read from a flat dict are listed with the reason.
ROPE_PLANES = {"Llama-2-7B": 64, "Llama-3.1-8B": 64, "Llama-3.1-405B": 64, "Qwen3-8B": 64, "Qwen3.8-27B": 32,
               "Qwen3-Next-80B-A3B": 32, "DeepSeek-V2": 32, "DeepSeek-V3": 32, "Kimi-K2": 32,
               "GPT-NeoX-20B": 12, "gpt-oss-120b": 32, "Gemma-2-27B": 64}
NO_FLAT_ROPE = {"Gemma-4-31B": "one rope dict per layer type (pass layer_type)",
                "Gemma-3-27B": "rope_local_base_freq: sliding layers have their own base (pass layer_type)",
                "DeepSeek-V4-Flash": "compress_rope_theta: a 'main' and a 'compress' RoPE (pass layer_type)",
                "DeepSeek-V4.1-Flash": "compress_rope_theta, as DeepSeek-V4-Flash",
                "MiniMax-Text-01": "only head_dim and rotary_dim are recorded",
                "Grok-2": "xAI's own YaRN-style keys (rope_type 'original'), not a transformers config"}


@pytest.mark.parametrize("name", sorted(ROPE_PLANES))
def test_model_table_rope_configs_give_the_expected_spectrum(name):
    inv_freq, attention_factor = pb.rope_parameters(pb.model_config(name))
    assert inv_freq.shape == (ROPE_PLANES[name],) and attention_factor >= 1.0
    assert inv_freq[0] == 1.0 and bool((inv_freq.diff() <= 0).all())


def test_model_table_rope_configs_all_load_or_are_known_exceptions():
    failures = {}
    for name, entry in pb.models().items():
        config = entry["config"]
        if "rope_theta" not in config and "rope_parameters" not in config:
            continue
        try:
            pb.rope_parameters(config)
        except ValueError as error:
            failures[name] = str(error)
    assert set(failures) <= set(NO_FLAT_ROPE), failures


# ---- the calculator and its neighbours (chapter "Heads, head_dim and the KV cache") ----------------------------
import json

import posbook as kvc


def test_format_bytes_uses_binary_units():
    assert kvc.format_bytes(393_216) == "384 KiB"
    assert kvc.format_bytes(87.75 * GIB) == "87.75 GiB"
    assert kvc.format_bytes(1000) == "1,000 B"
    with pytest.raises(ValueError, match="nbytes"):
        kvc.format_bytes(-1)


def test_calculator_reads_json_text_nested_text_config_and_interval_hybrids():
    text = json.dumps({"model_type": "vlm", "text_config": dict(num_hidden_layers=8, num_attention_heads=4,
                                                                num_key_value_heads=2, head_dim=64,
                                                                full_attention_interval=4)})
    rows = kvc.kv_cache_table(text, seq_lens=[10, 20])
    assert [r["kv_bytes"] for r in rows] == [2 * 2 * 2 * 64 * 2 * 10, 2 * 2 * 2 * 64 * 2 * 20]  # 2 of 8 layers
    assert all(r["indexer_bytes"] == 0 for r in rows)
    assert "| 10 |" in kvc.kv_cache_table(text, seq_lens=[10], markdown=True)
    with pytest.raises(ValueError, match="JSON"):
        kvc.kv_cache_table("{not json")
    with pytest.raises(TypeError, match="seq_lens"):
        kvc.kv_cache_table(text, seq_lens=4096)


def test_indexer_keys_are_counted_beside_the_mla_latent():
    glm = pb.model_config("GLM-5.3")
    assert kvc.indexer_values_per_layer(glm) == 128
    assert pb.kv_cache_bytes_per_token(kvc.without_indexer(glm)) == 89_856
    row = kvc.kv_cache_table(glm, seq_lens=[1 << 20])[0]
    assert row["kv_bytes"] == 87.75 * GIB and row["indexer_bytes"] == 78 * 128 * 2 * (1 << 20)
    assert kvc.cache_kind(glm) == "MLA + indexer"


def test_linear_state_of_the_anchor_is_144_mib():
    state = kvc.linear_state_bytes(pb.model_config("Qwen3.8-27B"))
    assert state["layers"] == 48 and state["recurrent"] == 144 * 1024 ** 2
    assert state["conv"] == 48 * (2 * 16 * 128 + 48 * 128) * 3 * 4
    assert kvc.linear_state_bytes(pb.model_config("Llama-3.1-8B"))["recurrent"] == 0


def test_attention_costs_scale_with_heads_but_mla_cache_does_not():
    k2, v3 = pb.model_config("Kimi-K2"), pb.model_config("DeepSeek-V3")
    a, b = kvc.attention_costs(k2, 1000), kvc.attention_costs(v3, 1000)
    assert b["core_flops"] == 2 * a["core_flops"] and b["head_params"] == 2 * a["head_params"]
    assert a["kv_values"] == b["kv_values"] == 576
    with pytest.raises(ValueError, match="context_len"):
        kvc.attention_costs(k2, -1)


def test_deepseek_v4_configs_without_compress_ratios_are_refused():
    with pytest.raises(ValueError, match="o_groups"):
        pb.kv_cache_bytes_per_token(kvc.without_indexer(pb.model_config("DeepSeek-V4-Pro")))


# ---- max_context_for_budget: the longest context a memory budget holds --------------------------------------------

import re

from hypothesis import given, settings, strategies as st

from posbook.kvcache import max_context_for_budget


def test_budget_for_llama_3_1_8b_by_hand():
    # 32 layers × 8 KV heads × (128 + 128) numbers × 2 B = 131,072 B per token, and no windows: N = budget // that.
    llama = pb.model_config("Llama-3.1-8B")
    assert pb.kv_cache_bytes_per_token(llama) == 131_072
    assert max_context_for_budget(llama, 80 * GIB) == 655_360
    assert max_context_for_budget(llama, 80 * GIB, batch=8) == 81_920
    assert max_context_for_budget(llama, 80 * GIB, batch=32, dtype_bytes=4) == 10_240
    assert max_context_for_budget(llama, 80 * GIB, batch=32, dtype_bytes=1) == 40_960
    assert max_context_for_budget(llama, 131_072 * 1_000) == 1_000       # exactly full
    assert max_context_for_budget(llama, 131_072 * 1_000 - 1) == 999    # one byte short
    assert max_context_for_budget(llama, 131_071) == 0                   # not one token
    assert max_context_for_budget(llama, 0) == 0


def test_budget_past_a_sliding_window_grows_by_the_global_layers_only():
    gemma = pb.model_config("Gemma-3-27B")
    kinds = pb.layer_kinds(gemma)
    assert (kinds.count("sliding_attention"), kinds.count("full_attention"), gemma["sliding_window"]) == (52, 10, 1024)
    layer = 16 * (128 + 128) * 2                 # bytes per token per layer: 16 KV heads of 128, BF16
    assert max_context_for_budget(gemma, 62 * layer * 500) == 500    # inside the window every layer grows
    # Past it the 52 sliding layers hold 1,023 tokens each and only the 10 global layers grow:
    # 52·1023·8192 + 10·8192·N <= 2^30  →  N = 7,787, where dividing by the bytes per token would say 2,114.
    assert max_context_for_budget(gemma, GIB) == 7_787
    assert GIB // pb.kv_cache_bytes_per_token(gemma) == 2_114
    assert pb.kv_cache_bytes(gemma, 7_787) <= GIB < pb.kv_cache_bytes(gemma, 7_788)


def test_budget_counts_the_indexer_keys_as_the_calculator_does():
    v32 = pb.model_config("DeepSeek-V3.2")
    n = max_context_for_budget(v32, 10 * GIB, batch=2)
    at_n, past_n = pb.kv_cache_table(v32, [n, n + 1])
    assert at_n["indexer_bytes"] > 0
    assert 2 * at_n["total_bytes"] <= 10 * GIB < 2 * past_n["total_bytes"]
    assert n < max_context_for_budget(pb.without_indexer(v32), 10 * GIB, batch=2)


def test_a_cache_that_stops_growing_fits_any_length_or_stops_inside_its_window():
    local = dict(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1, head_dim=8, sliding_window=64,
                 layer_types=["sliding_attention", "sliding_attention"])
    per_token = pb.kv_cache_bytes_per_token(local)           # 2 layers × (8 + 8) × 2 B = 64 B
    assert per_token == 64
    assert max_context_for_budget(local, 63 * per_token) is None       # the most it keeps: 63 tokens
    assert max_context_for_budget(local, 63 * per_token - 1) == 62
    assert max_context_for_budget(local, 10 * per_token) == 10
    assert max_context_for_budget(dict(local, layer_types=["mamba", "mamba"]), 0) is None


@settings(max_examples=60, deadline=None)
@given(budget=st.integers(0, 2**44), batch=st.integers(1, 64), dtype_bytes=st.sampled_from([1, 2, 4, 0.75]))
def test_budget_is_the_last_length_that_fits(budget, batch, dtype_bytes):
    config = dict(num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=2, head_dim=64, sliding_window=512,
                  attention_chunk_size=2048,
                  layer_types=["sliding_attention", "chunked_attention", "full_attention", "sliding_attention"])
    n = max_context_for_budget(config, budget, batch, dtype_bytes)
    assert pb.kv_cache_bytes(config, n, dtype_bytes) * batch <= budget
    assert pb.kv_cache_bytes(config, n + 1, dtype_bytes) * batch > budget


@pytest.mark.parametrize("kwargs, error, words", [
    (dict(budget_bytes=-1), ValueError, "budget_bytes must be >= 0, got -1"),
    (dict(budget_bytes=float("nan")), ValueError, "budget_bytes must be finite"),
    (dict(budget_bytes="80GiB"), TypeError, "budget_bytes must be a real number, got str '80GiB'"),
    (dict(budget_bytes=GIB, batch=0), ValueError, "batch must be > 0, got 0"),
    (dict(budget_bytes=GIB, batch=1.5), TypeError, "batch must be an int, got float 1.5"),
    (dict(budget_bytes=GIB, dtype_bytes=0), ValueError, "dtype_bytes must be > 0, got 0"),
])
def test_budget_refuses_bad_arguments_by_name(kwargs, error, words):
    with pytest.raises(error, match=re.escape(words)):
        max_context_for_budget(pb.model_config("Llama-3.1-8B"), **kwargs)


def test_budget_refuses_a_cache_it_does_not_model():
    shared = dict(num_hidden_layers=30, num_attention_heads=8, num_key_value_heads=1, head_dim=256,
                  num_kv_shared_layers=20)
    with pytest.raises(ValueError, match="num_kv_shared_layers"):
        max_context_for_budget(shared, GIB)
