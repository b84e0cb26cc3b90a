"""config.json files as the Hub serves them (``tests/data/hub_configs``, where each comes from is in PROVENANCE.md):
posbook reads each as transformers' ``AutoConfig`` reads it, and ``posbook inspect`` reports each with every position
scheme named, the whole logit scaling, and only the warnings that apply."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import posbook as pb
from posbook.report import format_report

HUB = Path(__file__).resolve().parent / "data" / "hub_configs"
FILES = sorted(HUB.glob("*.json"))


def hub(name: str) -> dict:
    return json.loads((HUB / f"{name}.json").read_text())


def report(name: str, **kwargs) -> dict:
    return pb.config_report(hub(name), **kwargs)


def test_the_fixtures_are_there():
    assert len(FILES) >= 18 and (HUB / "PROVENANCE.md").is_file()


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_posbook_reads_the_file_as_transformers_reads_it(path):
    """The file as given against what transformers' config class makes of it (every key it leaves out filled by the
    class): the same layer kinds, KV bytes and report, part by part."""
    transformers = pytest.importorskip("transformers")
    import hf_oracle  # noqa: E402  (needs transformers)
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    raw = json.loads(path.read_text())
    config = hf_oracle._hf_config(raw["model_type"], raw)
    text = config.get_text_config(decoder=True)
    filled = text.to_dict()
    assert transformers.__version__ and raw["model_type"] in CONFIG_MAPPING
    want, got = hf_oracle._reading(filled), hf_oracle._reading(raw)
    assert got == want, {part: (want[part], got[part]) for part in want if want[part] != got[part]}


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_inspect_reports_every_file(path, capsys):
    from posbook.__main__ import main
    raw = json.loads(path.read_text())
    extra = [] if pb.read_config(raw).get("max_position_embeddings") else ["--context", "4096"]
    assert main(["inspect", str(path), *extra]) == 0
    out, err = capsys.readouterr()
    assert err == "" and "Position unknown" not in out and "not modelled" not in out


def test_sparse_text_config_is_completed_from_its_class():
    # Gemma-3-4b-it gives 7 text keys; heads, head width, bases and length come from Gemma3TextConfig's defaults.
    gemma = report("gemma-3-4b-it")
    assert gemma["model_type"] == "gemma3_text" and gemma["context"] == 131_072
    assert gemma["layers"] == {"sliding_attention": 29, "full_attention": 5}
    by_type = {e["layer_types"][0]: e for e in gemma["rope"]}
    assert (by_type["full_attention"]["rope_theta"], by_type["full_attention"]["rope_type"]) == (1e6, "linear")
    assert (by_type["sliding_attention"]["rope_theta"], by_type["sliding_attention"]["head_dim"]) == (1e4, 256)
    assert gemma["kv_cache"]["bytes_per_token"] == 34 * 4 * (256 + 256) * 2


def test_legacy_keys_and_missing_lengths_are_read_through_the_class():
    falcon = report("falcon-7b")  # no max_position_embeddings: FalconConfig's 2,048; multi_query: one K/V head
    assert falcon["context"] == 2048 and falcon["kv_cache"]["kind"] == "MQA"
    assert falcon["kv_cache"]["bytes_per_token"] == 32 * 1 * (64 + 64) * 2
    bamba = report("bamba-9b")  # attention only in attn_layer_indices, Mamba elsewhere
    assert bamba["layers"] == {"mamba": 29, "full_attention": 3}
    assert bamba["kv_cache"]["bytes_per_token"] == 3 * 8 * (128 + 128) * 2 == 12_288


def test_alibi_models_are_named_with_their_slopes():
    bloom = report("bloom-560m", context=4096)  # n_layer, num_attention_heads, n_embed; no length in the file
    entry = bloom["rope"][0]
    assert entry["encoding"] == "alibi" and entry["layers"] == 24
    assert entry["slopes"] == pb.alibi_slopes(16, dtype=torch.float64).tolist()
    assert entry["penalty_at_context"] == [entry["slopes"][0] * 4095, entry["slopes"][-1] * 4095]
    mpt = report("mpt-7b")  # attn_config.alibi, n_layers, d_model, n_heads, max_seq_len
    assert (mpt["rope"][0]["encoding"], len(mpt["rope"][0]["slopes"]), mpt["context"]) == ("alibi", 32, 2048)
    with pytest.raises(ValueError, match=r"--context N on the command line"):
        report("bloom-560m")  # ALiBi has no trained length in the file: the flag that supplies one is named


def test_learned_positions_say_where_the_table_ends():
    gpt2 = report("gpt2")
    assert (gpt2["rope"][0]["encoding"], gpt2["rope"][0]["table_rows"]) == ("learned", 1024)
    assert gpt2["warnings"] == []
    longer = report("gpt2", context=2048)
    assert longer["rope"][0]["positions_without_row"] == 1024
    assert [w["source"] for w in longer["warnings"]] == ["https://arxiv.org/abs/2108.12409"]
    assert "positions 1,024 to 2,047 have none" in format_report(longer).replace("\n", " ")
    assert report("opt-1.3b")["rope"][0]["table_rows"] == 2048
    t5 = report("t5-small")["rope"][0]
    assert (t5["encoding"], t5["num_buckets"], t5["max_distance"]) == ("t5", 32, 128)


def test_nope_layers_from_the_class_default():
    scout = report("llama-4-scout")  # "no_rope_layers": [] in the file: every 4th layer NoPE, as transformers
    assert [(e["layer_types"], e["encoding"], e["layers"]) for e in scout["rope"]] == [
        (["chunked_attention"], "rope", 36), (["full_attention"], "nope", 12)]
    tuning = [item for item in scout["logits"] if item["source"].startswith("attn_temperature_tuning")]
    position = scout["context"] - 1
    assert len(tuning) == 1 and math.isclose(tuning[0]["value"], 1 + 0.1 * math.log1p((position + 1) // 8192))
    assert report("smollm3-3b")["rope"][0]["nope_layers"] == 9


def test_the_logit_line_tells_the_whole_scaling():
    gemma2 = {item["source"]: item for item in report("gemma-2-27b")["logits"]}
    assert math.isclose(gemma2["query_pre_attn_scalar"]["value"], math.sqrt(128 / 144))
    assert gemma2["attn_logit_softcapping"]["value"] == 50 and gemma2["final_logit_softcapping"]["value"] == 30
    text = format_report(report("gemma-2-27b"))
    assert "query scale 1/√144 instead of 1/√128: logits × 0.9428" in text
    oss = report("gpt-oss-20b")["logits"]
    assert any("sink" in item["what"] for item in oss)
    assert any(item["source"] == "rope dict (yarn)" and math.isclose(item["value"], 1.3465735902799727 ** 2)
               for item in oss)
    v3 = {item["source"]: item for item in report("deepseek-v3")["logits"]}
    assert "qk_nope_head_dim + qk_rope_head_dim" in v3 and "1/√192" in v3["qk_nope_head_dim + qk_rope_head_dim"]["what"]


def test_warnings_apply_once_and_only_where_their_condition_holds():
    qwen = hub("qwen2.5-7b-instruct")
    # The model card's recipe: YaRN factor 4 on 32,768 serves 131,072, which is not "beyond" what it is set up for.
    card = dict(qwen, rope_scaling={"factor": 4.0, "original_max_position_embeddings": 32768, "type": "yarn"})
    sources = [w["source"] for w in pb.config_report(card, context=131_072)["warnings"]]
    assert "https://arxiv.org/abs/2306.15595" not in sources
    assert "https://huggingface.co/Qwen/Qwen2.5-32B-Instruct#processing-long-texts" in sources
    assert "https://arxiv.org/abs/2306.15595" in [w["source"] for w in pb.config_report(card, context=262_144)
                                                   ["warnings"]]
    for trained_with_yarn in ("deepseek-v3", "gpt-oss-20b"):  # Qwen's advice is for Qwen's families only
        assert not any("Qwen" in w["message"] for w in report(trained_with_yarn)["warnings"])
    vl = report("qwen2-vl-7b-instruct")  # use_sliding_window false: full attention in every section
    assert vl["layers"] == {"full_attention": 28} and "bytes_per_token" in vl["kv_cache"]
    assert sum("use_sliding_window is false" in w["message"] for w in vl["warnings"]) == 1
    bf16 = [w["message"] for w in report("llama-3.1-8b-instruct")["warnings"] if "bfloat16" in w["message"]]
    # positions up to 131,071 are stored with 8 significant bits: steps of 2^(16-7), rounding by up to 2^8
    assert len(bf16) == 1 and "round by up to 256" in bf16[0] and "up to 256 rad" in bf16[0]


def test_numbers_read_as_a_person_writes_them():
    v3 = format_report(report("deepseek-v3"))
    ramp = next(line for line in v3.splitlines() if line.strip().startswith("ramp"))
    assert re.search(r"planes 0 to \d+ keep θ", ramp) and not re.search(r"\d\.\d", ramp)
    gemma = " ".join(format_report(report("gemma-3-4b-it", context=512)).split())
    assert "the window of 1,024 is at least N: these layers see the whole context" in gemma
    assert "a query attends to itself and the 1,023 before it" in " ".join(format_report(
        report("gemma-3-4b-it")).split())
    # Every plane rescaled (llama3 bounds below the fastest wavelength): no "1 for 0 planes"
    llama = hub("llama-3.1-8b-instruct")
    every = dict(llama, rope_scaling={**llama["rope_scaling"], "high_freq_factor": 2000.0, "low_freq_factor": 1000.0})
    text = " ".join(format_report(pb.config_report(every)).split())
    assert "for 0 planes" not in text and "below 1 for every plane" in text
    # A YaRN ramp pushed outside the planes: no negative plane numbers, no ramp line for an unchanged spectrum
    outside = dict(llama, rope_scaling={"rope_type": "yarn", "factor": 4.0, "beta_fast": 1e9, "beta_slow": 1e8,
                                        "original_max_position_embeddings": 8192})
    text = " ".join(format_report(pb.config_report(outside)).split())
    assert "1 for every plane (no rescaling)" in text and "ramp" not in text and not re.search(r"planes -\d", text)


def test_misspelt_keys_get_a_guess():
    llama = hub("llama-3.1-8b-instruct")
    typo = dict(llama, rope_scaling={**llama["rope_scaling"], "low_freq_factr": 1.0})
    entry = pb.config_report(typo)["rope"][0]
    assert entry["encoding"] == "invalid" and "did you mean 'low_freq_factor'" in entry["reason"]
    lama = dict(llama, rope_scaling={**llama["rope_scaling"], "rope_type": "lama3"})
    assert "did you mean 'llama3'?" in pb.config_report(lama)["rope"][0]["reason"]
    scalling = {("rope_scalling" if k == "rope_scaling" else k): v for k, v in llama.items()}
    assert any("did you mean 'rope_scaling'?" in w["message"] for w in pb.config_report(scalling)["warnings"])
    with pytest.raises(ValueError, match="did you mean 'llama3'"):
        pb.rope_spec(lama)


def test_yarn_without_factor_is_refused_as_transformers_refuses_it():
    qwen = dict(hub("qwen2.5-7b-instruct"), rope_scaling={"type": "yarn"})
    with pytest.raises(ValueError, match="needs 'factor'"):
        pb.rope_parameters(qwen)
    assert pb.config_report(qwen)["rope"][0]["encoding"] == "invalid"


def test_every_missing_key_is_listed_at_once():
    with pytest.raises(ValueError) as raised:
        pb.config_report({"rope_theta": 1e4})
    message = str(raised.value)
    for key in ("num_hidden_layers", "num_attention_heads", "hidden_size (or head_dim)", "max_position_embeddings",
                "--context N"):
        assert key in message


def test_read_config_takes_a_path(tmp_path):
    path = HUB / "falcon-7b.json"
    assert pb.read_config(str(path)) == pb.read_config(path) == pb.read_config(hub("falcon-7b"))
    folder = tmp_path / "snapshot"
    folder.mkdir()
    (folder / "config.json").write_text(path.read_text())
    assert pb.read_config(folder) == pb.read_config(path)
    with pytest.raises(ValueError, match="neither"):
        pb.read_config(str(tmp_path / "missing.json"))
    with pytest.raises(ValueError, match="not a file"):
        pb.read_config(tmp_path / "missing.json")


def test_the_defaults_table_is_the_pinned_transformers_output():
    """tools/hf_defaults.py rebuilds src/posbook/data/hf_defaults.json byte for byte from the pinned version."""
    transformers = pytest.importorskip("transformers")
    pinned = re.search(r"^transformers==(\S+)$", (HUB.parents[2] / "requirements.txt").read_text(), re.M).group(1)
    if transformers.__version__ != pinned:
        pytest.skip(f"the table is for transformers {pinned}, this is {transformers.__version__}")
    assert pb.hf_config.defaults_version() == pinned
    done = subprocess.run([sys.executable, str(HUB.parents[2] / "tools" / "hf_defaults.py"), "--check"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("config, scheme", [
    ({"model_type": "xglm", "d_model": 64, "attention_heads": 4, "num_layers": 2}, "sinusoidal"),
    ({"model_type": "kimi_linear"}, "nope"),  # MLA layers without rotation, and no other position in its code
    ({"model_type": "gpt2"}, "learned"),
    ({"model_type": "bloom"}, "alibi"),
    ({"model_type": "falcon", "alibi": True}, "alibi"),
    ({"model_type": "falcon"}, "rope"),  # FalconConfig's default alibi is false; its rope_theta is filled
    ({"hidden_size": 64, "num_attention_heads": 4}, "unknown"),  # no model_type, no rope key: posbook cannot tell
])
def test_every_position_scheme_is_named(config, scheme):
    assert pb.position_scheme(config)[0] == scheme
