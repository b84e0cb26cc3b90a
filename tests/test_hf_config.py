"""posbook.hf_config.read_config: every config form read into the standard keys (tests/test_hf_oracle.py holds the
results equal to transformers' own modules; these pin each rewrite on its own, without transformers)."""

import json

import pytest

import posbook as pb
from posbook.hf_config import read_config

GEMMA3_HUB = {"model_type": "gemma3_text", "hidden_size": 2560, "num_attention_heads": 8, "num_key_value_heads": 4,
              "head_dim": 256, "num_hidden_layers": 6, "sliding_window": 1024, "rope_theta": 1e6,
              "rope_local_base_freq": 1e4, "rope_scaling": {"rope_type": "linear", "factor": 8.0},
              "layer_types": ["sliding_attention"] * 5 + ["full_attention"]}


def test_gemma3_sliding_layers_turn_at_their_own_base_without_the_global_scaling():
    sliding, _ = pb.rope_parameters(GEMMA3_HUB, layer_type="sliding_attention")
    full, _ = pb.rope_parameters(GEMMA3_HUB, layer_type="full_attention")
    assert sliding[0] == 1.0 and sliding[1] == pytest.approx(1e4 ** (-2 / 256))
    assert full[0] == 1 / 8 and full[1] == pytest.approx(1e6 ** (-2 / 256) / 8)
    with pytest.raises(ValueError, match="pass layer_type"):
        pb.rope_parameters(GEMMA3_HUB)


def test_falcon_multi_query_is_one_kv_head_and_the_new_architecture_reads_num_kv_heads():
    falcon7b = {"model_type": "falcon", "hidden_size": 4544, "n_head": 71, "n_layer": 32, "multi_query": True,
                "new_decoder_architecture": False}
    assert pb.kv_cache_bytes_per_token(falcon7b) == 32 * 1 * 2 * 64 * 2
    falcon40b = {"model_type": "falcon", "hidden_size": 8192, "num_attention_heads": 128, "num_kv_heads": 8,
                 "num_hidden_layers": 60, "new_decoder_architecture": True}
    assert pb.kv_cache_bytes_per_token(falcon40b) == 60 * 8 * 2 * 64 * 2
    rw = dict(falcon7b, multi_query=False)
    assert pb.kv_cache_bytes_per_token(rw) == 32 * 71 * 2 * 64 * 2
    with pytest.raises(TypeError, match=r"config\['multi_query'\] must be a bool"):
        read_config(dict(falcon7b, multi_query="yes"))


def test_old_key_names_are_renamed_and_contradictions_refused():
    gptj = {"model_type": "gptj", "n_embd": 4096, "n_head": 16, "n_layer": 28, "rotary_dim": 64, "n_positions": 2048}
    flat = read_config(gptj)
    assert (flat["hidden_size"], flat["num_attention_heads"], flat["num_hidden_layers"]) == (4096, 16, 28)
    assert flat["partial_rotary_factor"] == 0.25 and "n_embd" not in flat
    pythia = {"hidden_size": 2048, "num_attention_heads": 16, "num_hidden_layers": 24, "rotary_pct": 0.25,
              "rotary_emb_base": 10000}
    assert pb.rope_spec(pythia).rotary_dim == 32
    with pytest.raises(ValueError, match="n_layer=12"):
        read_config({"num_hidden_layers": 24, "n_layer": 12})


def test_layer_types_derived_as_transformers_does():
    base = {"num_hidden_layers": 4, "num_attention_heads": 4, "head_dim": 8}
    mistral = dict(base, model_type="mistral", sliding_window=16)
    assert read_config(mistral)["layer_types"] == ["sliding_attention"] * 4
    qwen2_off = dict(base, model_type="qwen2", sliding_window=16, max_window_layers=2)  # use_sliding_window: false
    assert read_config(qwen2_off)["layer_types"] == ["full_attention"] * 4
    qwen2_on = dict(qwen2_off, use_sliding_window=True)
    assert read_config(qwen2_on)["layer_types"] == ["full_attention"] * 2 + ["sliding_attention"] * 2
    qwen2_moe = dict(qwen2_on, model_type="qwen2_moe", max_window_layers=3)
    assert read_config(qwen2_moe)["layer_types"] == ["sliding_attention", "full_attention"] * 2
    gemma3 = dict(base, model_type="gemma3_text", num_hidden_layers=12, sliding_window=16)
    assert read_config(gemma3)["layer_types"] == (["sliding_attention"] * 5 + ["full_attention"]) * 2
    gemma2 = dict(base, model_type="gemma2", sliding_window=16)
    assert read_config(gemma2)["layer_types"] == ["sliding_attention", "full_attention"] * 2
    unknown = dict(base, sliding_window=16)  # whose layout? refused rather than guessed
    with pytest.raises(pb.NotModelledError, match="give layer_types"):
        pb.kv_cache_bytes(unknown, 100)
    with pytest.raises(TypeError, match=r"config\['use_sliding_window'\] must be a bool"):
        read_config(dict(qwen2_on, use_sliding_window="false"))
    jamba = dict(base, num_hidden_layers=8, attn_layer_period=8)  # attn_layer_offset: 4, Jamba's default
    assert pb.layer_kinds(jamba) == ["mamba"] * 4 + ["full_attention"] + ["mamba"] * 3


def test_gemma4_per_layer_config_becomes_the_global_head_geometry():
    config = {"num_hidden_layers": 3, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
              "sliding_window": 512, "layer_types": ["sliding_attention", "sliding_attention", "full_attention"],
              "per_layer_config": {"02": {"head_dim": 512}}}
    assert pb.kv_values_per_layer(config, "full_attention") == 4 * 2 * 512
    uneven = dict(config, per_layer_config={"00": {"head_dim": 512}})
    with pytest.raises(ValueError, match="per_layer_config"):
        read_config(uneven)


def test_deepseek_v4_compress_rope_is_its_own_spectrum():
    v4 = pb.model_config("DeepSeek-V4-Flash")
    main, main_factor = pb.rope_parameters(v4, layer_type="main")
    compress, compress_factor = pb.rope_parameters(v4, layer_type="compress")
    assert main[1] == pytest.approx(1e4 ** (-2 / 64)) and main_factor == 1.0
    assert compress_factor == 1.0 and compress[-1] < main[-1] * 10000 ** (-2 / 64)  # base 160,000 and ×16 on the slow end


def test_config_objects_and_json_text_read_like_their_dict():
    class Config:  # what posbook reads of a transformers PretrainedConfig
        model_type = "llama"

        def to_dict(self):
            return {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2,
                    "rope_parameters": {"rope_type": "default", "rope_theta": 1e4}}

    as_dict = Config().to_dict()
    assert read_config(Config()) == read_config(as_dict) == read_config(json.dumps(as_dict))
    assert pb.kv_cache_bytes_per_token(Config()) == pb.kv_cache_bytes_per_token(as_dict)
    assert read_config(read_config(GEMMA3_HUB)) == read_config(GEMMA3_HUB)
    with pytest.raises(TypeError, match="PretrainedConfig"):
        read_config(42)
    with pytest.raises(ValueError, match="valid JSON"):
        read_config("{not json")


@pytest.mark.parametrize("key", ["attention_head_dim", "layers_block_type", "dim_head"])
def test_keys_posbook_does_not_model_are_refused_by_name(key):
    config = {"num_hidden_layers": 2, "num_attention_heads": 4, "head_dim": 8, "rope_theta": 1e4, key: 16}
    with pytest.raises(ValueError, match=key):
        pb.kv_cache_bytes_per_token(config)
    with pytest.raises(ValueError, match=key):
        pb.rope_parameters(config)


def test_alibi_models_have_no_rope():
    with pytest.raises(ValueError, match="ALiBi"):
        pb.rope_parameters({"hidden_size": 64, "num_attention_heads": 4, "rope_theta": 1e4, "alibi": True})


def test_architectures_whose_config_json_gives_no_base_get_the_one_transformers_uses():
    gptj = {"model_type": "gptj", "n_embd": 4096, "n_head": 16, "n_layer": 28, "rotary_dim": 64}
    inv_freq, _ = pb.rope_parameters(gptj)
    assert inv_freq.numel() == 32 and inv_freq[1] == pytest.approx(1e4 ** (-2 / 64))
    with pytest.raises(ValueError, match="rope_theta"):  # without model_type there is no default to take
        pb.rope_parameters({k: v for k, v in gptj.items() if k != "model_type"})


def test_num_kv_heads_outside_falcon_is_the_number_of_kv_heads():
    config = {"num_hidden_layers": 2, "num_attention_heads": 8, "num_kv_heads": 2, "head_dim": 64}
    assert pb.kv_values_per_layer(config) == 2 * 2 * 64
    with pytest.raises(ValueError, match="num_kv_heads=4"):
        read_config(dict(config, num_kv_heads=4, num_key_value_heads=2))


def test_falcon_defaults_to_multi_query_and_rotary_dim_survives_the_round_trip():
    falcon = {"model_type": "falcon", "hidden_size": 4544, "num_attention_heads": 71, "num_hidden_layers": 2,
              "new_decoder_architecture": False}
    assert pb.kv_values_per_layer(falcon) == 2 * 64  # FalconConfig's multi_query defaults to true
    gptj = {"model_type": "gptj", "n_embd": 176, "n_head": 4, "n_layer": 2, "rotary_dim": 30}
    assert pb.rope_spec(gptj).rotary_dim == 30  # 30/44 · 44 is 29.999... in floating point
    with pytest.raises(ValueError, match="layer indices"):
        read_config({"num_hidden_layers": 2, "layer_types": ["full_attention"] * 2, "per_layer_config": {"a": {}}})


LLAMA_HUB = {"model_type": "llama", "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
             "num_hidden_layers": 2, "max_position_embeddings": 4096, "rope_theta": 5e5,
             "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                              "original_max_position_embeddings": 1024}}


@pytest.mark.parametrize("config, error, message", [
    (dict(LLAMA_HUB, num_attention_heads=True), TypeError,
     "config['num_attention_heads'] must be an int, got bool True"),
    (dict(LLAMA_HUB, hidden_size="256"), TypeError, "config['hidden_size'] must be an int, got str '256'"),
    (dict(LLAMA_HUB, num_hidden_layers=2.5), TypeError, "config['num_hidden_layers'] must be an int, got float 2.5"),
    (dict(LLAMA_HUB, num_key_value_heads=-3), ValueError, "config['num_key_value_heads'] must be > 0, got -3"),
    (dict(LLAMA_HUB, n_layer=True), TypeError, "config['n_layer'] must be an int, got bool True"),  # old name
    (dict(LLAMA_HUB, sliding_window=float("nan")), TypeError, "config['sliding_window'] must be an int"),
    (dict(LLAMA_HUB, rope_theta=float("nan")), ValueError, "config['rope_theta'] must be finite, got nan"),
    (dict(LLAMA_HUB, model_type=7), TypeError, "config['model_type'] must be a str, got int 7"),
    (dict(LLAMA_HUB, layer_types=["full_attention", 7]), TypeError, "config['layer_types'][1] must be a str"),
    (dict(LLAMA_HUB, layer_types="full_attention"), TypeError, "config['layer_types'] must be a list of str"),
    (dict(LLAMA_HUB, use_sliding_window="false"), TypeError, "config['use_sliding_window'] must be a bool"),
    (dict(LLAMA_HUB, rope_scaling="llama3"), TypeError, "config['rope_scaling'] must be a dict or None"),
    (dict(LLAMA_HUB, rope_scaling=dict(LLAMA_HUB["rope_scaling"], factor=-8.0)), ValueError,
     "config['rope_scaling']['factor'] must be > 0, got -8.0"),
    (dict(LLAMA_HUB, rope_scaling=dict(LLAMA_HUB["rope_scaling"], rope_type=3)), TypeError,
     "config['rope_scaling']['rope_type'] must be a str, got int 3"),
    (dict(LLAMA_HUB, rope_scaling=None,
          rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": "1e4"}}),
     TypeError, "config['rope_parameters']['full_attention']['rope_theta'] must be a real number, got str '1e4'"),
])
def test_every_key_posbook_reads_is_checked_once_with_its_name(config, error, message):
    # The check is read_config's, so every function that reads a config refuses the value with the same message,
    # whether or not it would have used the key.
    for read in (read_config, pb.rope_spec, pb.kv_cache_bytes_per_token, pb.layer_kinds, pb.config_report):
        if read is pb.config_report and message.startswith(("config['rope_scaling']", "config['rope_parameters']")):
            # A report stands without its rope dict: the entry carries the same message, the cache is counted.
            report = pb.config_report(config)
            assert [e["encoding"] for e in report["rope"]] == ["invalid"], report["rope"]
            assert report["rope"][0]["reason"].startswith(message) and "bytes_per_token" in report["kv_cache"]
            continue
        with pytest.raises(error) as raised:
            read(config)
        assert str(raised.value).startswith(message), (read.__name__, str(raised.value))


def test_nulls_zeros_and_false_flags_of_hub_configs_still_read():
    # config.json files write null for "not given", 0 for a window that is off, false for flags.
    qwen2 = {"model_type": "qwen2", "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": None,
             "head_dim": None, "num_hidden_layers": 2, "sliding_window": 0, "use_sliding_window": False,
             "max_window_layers": 28, "rope_theta": 1e6, "rope_scaling": None, "max_position_embeddings": 4096,
             "attention_k_eq_v": False, "alibi": False}
    assert read_config(qwen2)["layer_types"] == ["full_attention"] * 2
    assert pb.kv_cache_bytes_per_token(qwen2) == 2 * 4 * 2 * 64 * 2
    assert pb.rope_spec(qwen2).rotary_dim == 64
    mla = dict(qwen2, kv_lora_rank=64, qk_rope_head_dim=0, head_dim=0, q_lora_rank=None)  # 0: not given
    assert read_config(mla)["head_dim"] == 0
    yarn = dict(qwen2, rope_scaling={"rope_type": "yarn", "factor": 4.0, "beta_fast": None, "beta_slow": 0,
                                     "mscale": 0, "original_max_position_embeddings": 1024})
    assert pb.rope_parameters(yarn)[0].numel() == 32
