"""posbook inspect: the report's numbers against the library computed directly, on the model table and on hand-made
configs, and the command line's output and exit statuses (0 report, 1 refused by posbook, 2 bad input)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import posbook as pb
from posbook.__main__ import main

SRC = Path(__file__).resolve().parents[1] / "src"
MODELS = pb.models()
LLAMA = pb.model_config("Llama-3.1-8B")


def cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    """The command line in a fresh interpreter that imports this checkout."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "posbook", "inspect", *args], input=stdin, capture_output=True,
                          text=True, env=env, timeout=120)


def run(capsys, *args: str) -> tuple[int, str, list[str]]:
    """The command line in this process: (exit status, stdout, stderr lines)."""
    status = main(["inspect", *args])
    out, err = capsys.readouterr()
    return status, out, err.splitlines()


def write(tmp_path: Path, config, name: str = "config.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(config))
    return str(path)


def library_refusals(config: dict) -> set[str]:
    """Every message with which the library's own functions refuse this config."""
    messages = set()

    def attempt(call):
        try:
            call()
        except (ValueError, TypeError) as error:
            messages.add(str(error))

    attempt(lambda: pb.layer_kinds(config))
    attempt(lambda: pb.kv_cache_bytes_per_token(pb.without_indexer(config)))
    attempt(lambda: pb.linear_state_bytes(config))
    rope = pb.read_config(config).get("rope_parameters") or pb.read_config(config).get("rope_scaling") or {}
    nested = [key for key, value in rope.items() if isinstance(value, dict)]
    for layer_type in nested or ["full_attention", "sliding_attention", "chunked_attention"]:
        attempt(lambda layer_type=layer_type: pb.rope_parameters(config, layer_type=layer_type))
    return messages


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_table_model_is_reported_with_the_librarys_numbers_or_refused_with_its_message(name, tmp_path, capsys):
    config = MODELS[name]["config"]
    # A length to report at where the config gives none, so that the sweep reaches the rope and cache arithmetic.
    extra = [] if "max_position_embeddings" in config else ["--context", "32768"]
    status, out, err = run(capsys, write(tmp_path, config), *extra)
    if status == 0:
        assert err == [] and max(map(len, out.splitlines())) <= 88
        refused = library_refusals(config)
        try:
            per_token = pb.kv_cache_bytes_per_token(pb.without_indexer(config))
        except ValueError:  # the report says the cache is not modelled, and why
            assert "KV cache · not modelled: " in out and any(m[:40] in out.replace("\n  ", " ") for m in refused)
        else:
            assert f"({per_token:,.0f} B)" in out
        rope = pb.read_config(config).get("rope_parameters") or pb.read_config(config).get("rope_scaling")
        if pb.read_config(config).get("rope_theta") is None and not rope:
            assert "Position unknown" in out
        else:
            keys = [k for k, v in rope.items() if isinstance(v, dict)] if rope else []
            for layer_type in keys or sorted(set(pb.layer_kinds(config)) & set(pb.KV_LAYER_TYPES)):
                try:
                    rope_type = pb.rope_spec(config, layer_type).rope_type
                except ValueError:
                    assert f"RoPE not modelled · {layer_type}" in out
                else:  # its rotary spectrum, unless a key makes those layers NoPE (Kimi Linear's mla_use_nope)
                    assert f"rope_type        {rope_type}\n" in out or f"No position · {layer_type}" in out
    else:  # nothing could be reported: the library's own message, on one line
        assert status == 1 and out == "" and len(err) == 1
        message = err[0].removeprefix("posbook inspect: error: ")
        # every key the report needs and the config lacks, named at once; else the library's own message
        assert message.startswith("config gives no ") or message in library_refusals(config)


def test_the_table_holds_every_outcome():
    reported = partly = refused = 0
    for entry in MODELS.values():
        config = entry["config"]
        try:
            report = pb.config_report(config, context=config.get("max_position_embeddings", 32768))
        except ValueError:
            refused += 1
            continue
        whole = "error" not in report["kv_cache"] and all(e["encoding"] != "refused" for e in report["rope"])
        reported += whole
        partly += not whole
    assert reported >= 30 and partly >= 3 and refused >= 1


def test_llama31_llama3_ramp_and_turns_against_its_spectrum():
    report = pb.config_report(LLAMA)
    (entry,) = report["rope"]
    assert (entry["rope_type"], entry["params"]["factor"], entry["layers"]) == ("llama3", 8.0, 32)
    assert entry["ramp"] == {"kind": "wavelengths", "short": 8192 / 4, "long": 8192 / 1}
    inv_freq, _ = pb.rope_parameters(LLAMA, dtype=torch.float64)
    wavelengths = 2 * math.pi / inv_freq
    unscaled = 2 * math.pi / pb.rope_parameters(dict(LLAMA, rope_scaling=None), dtype=torch.float64)[0]
    assert entry["turning_planes"] == {"context": int((wavelengths <= 131_072).sum()),
                                       "original": int((wavelengths <= 8192).sum()),
                                       "original_unscaled": int((unscaled <= 8192).sum())}
    assert (entry["turning_planes"]["original"], entry["turning_planes"]["original_unscaled"]) == (32, 35)
    # the 64 - 35 planes that never turned in pre-training are exactly those llama3 divides by the full factor
    divided = sum(math.isclose(r, 1 / 8, rel_tol=1e-12) for r in entry["frequency_ratio"])
    assert entry["planes"] - entry["turning_planes"]["original_unscaled"] == divided == 29
    for plane in (10, 30, 50):  # a context just past a plane's wavelength: that plane has just turned once
        length = math.ceil(wavelengths[plane])
        counted = pb.config_report(LLAMA, context=length)["rope"][0]["turning_planes"]["context"]
        assert counted == int((wavelengths <= length).sum()) == plane + 1
    # Planes whose unscaled wavelength is below original/high_freq_factor keep their frequency.
    unscaled = 2 * math.pi / pb.default_inv_freq(128, 500_000.0, dtype=torch.float64)
    assert entry["unchanged_planes"] == int((unscaled < 2048).sum()) == 29
    assert entry["min_ratio"] == pytest.approx(1 / 8)
    assert (entry["rotary_dim"], entry["unrotated_dims"], entry["logit_factor"]) == (128, 0, 1.0)
    kv = report["kv_cache"]
    assert (kv["kind"], kv["bytes_per_token"], kv["total_bytes"]) == ("GQA", 131_072, 16 * 1024 ** 3)
    assert report["warnings"] == []


def test_deepseek_v3_yarn_bounds_and_softmax_scale():
    config = pb.model_config("DeepSeek-V3")
    (entry,) = pb.config_report(config)["rope"]
    low, high = pb.yarn_ramp_bounds(64, 10_000.0, 4096, beta_fast=32, beta_slow=1)
    assert entry["ramp"] == {"kind": "planes", "low": low, "high": high} and (low, high) == (10, 23)
    assert entry["unchanged_planes"] == low + 1
    assert entry["softmax_scale"] == pytest.approx(pb.yarn_softmax_scale(config))
    assert entry["logit_factor"] == pytest.approx((0.1 * math.log(40) + 1) ** 2)
    assert (entry["head_dim"], entry["rotary_dim"], entry["unrotated_dims"]) == (192, 64, 128)
    assert pb.config_report(config)["kv_cache"]["bytes_per_token"] == 70_272


def test_gemma3_reports_each_layer_types_rope_dict():
    config = pb.model_config("Gemma-3-27B")
    report = pb.config_report(config)
    full, sliding = report["rope"]
    assert (full["layer_types"], full["layers"], full["rope_type"]) == (["full_attention"], 10, "linear")
    assert full["rescaling"] == "uniform" and full["min_ratio"] == pytest.approx(1 / 8)
    assert (sliding["layers"], sliding["rope_type"], sliding["rope_theta"]) == (52, "default", 10_000.0)
    inv_freq, _ = pb.rope_parameters(config, layer_type="sliding_attention", dtype=torch.float64)
    assert sliding["windows"] == {"sliding_attention": {"tokens": 1024, "seen": 1024,
                                                        "turning_planes": int((2 * math.pi / inv_freq <= 1024).sum())}}
    assert report["kv_cache"]["bytes_per_token"] == 507_904
    assert report["kv_cache"]["total_bytes"] == pb.kv_cache_bytes(config, 131_072)


def test_batch_and_dtype_scale_the_total():
    report = pb.config_report(LLAMA, context=4096, batch=3, dtype="fp8")
    assert report["kv_cache"]["total_bytes"] == pb.kv_cache_bytes(LLAMA, 4096, dtype_bytes=1) * 3
    assert pb.config_report(LLAMA, dtype="fp32")["kv_cache"]["bytes_per_token"] == 2 * 131_072
    with pytest.raises(ValueError, match="dtype"):
        pb.config_report(LLAMA, dtype="int4")
    with pytest.raises(ValueError, match="batch"):
        pb.config_report(LLAMA, batch=0)


def test_indexer_and_linear_state_are_reported_next_to_the_cache():
    v32 = pb.model_config("DeepSeek-V3.2")
    kv = pb.config_report(v32, context=1000)["kv_cache"]
    row = pb.kv_cache_table(v32, seq_lens=[1000])[0]
    assert (kv["total_bytes"], kv["indexer"]["total_bytes"]) == (row["kv_bytes"], row["indexer_bytes"])
    qwen = pb.model_config("Qwen3.8-27B")
    state = pb.config_report(qwen, batch=2)["kv_cache"]["linear_state"]
    expected = pb.linear_state_bytes(qwen)
    assert state["total_bytes"] == 2 * (expected["recurrent"] + expected["conv"]) and state["layers"] == 48


def test_layers_without_rope_are_said_so_and_the_cache_still_counts():
    base = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, max_position_embeddings=512)
    null = dict(base, sliding_window=16, layer_types=["full_attention", "sliding_attention"],
                rope_parameters={"full_attention": None, "sliding_attention": {"rope_type": "default",
                                                                               "rope_theta": 1e4}})
    full, sliding = pb.config_report(null)["rope"]
    assert (full["encoding"], full["layers"], sliding["encoding"]) == ("nope", 1, "rope")
    alibi = pb.config_report(dict(base, alibi=True, rope_theta=1e4))
    assert alibi["rope"][0]["encoding"] == "alibi" and "ALiBi · full_attention" in pb.format_report(alibi)
    bare = pb.config_report(base)
    assert bare["rope"][0]["encoding"] == "unknown" and bare["kv_cache"]["bytes_per_token"] == 2 * 2 * 64 * 2
    scout = pb.config_report(pb.model_config("Llama-4-Scout"))
    assert [(e["layer_types"], e["encoding"], e["layers"]) for e in scout["rope"]] == [
        (["chunked_attention"], "rope", 36), (["full_attention"], "nope", 12)]


def test_what_posbook_does_not_model_is_said_in_the_report_with_the_librarys_message():
    grok = pb.model_config("Grok-2")  # rope_type "original": no rule for its spectrum, but a plain GQA cache
    with pytest.raises(pb.NotModelledError) as library:
        pb.rope_spec(grok)
    report = pb.config_report(grok)
    assert report["rope"][0]["encoding"] == "refused" and report["rope"][0]["reason"] == str(library.value)
    assert report["kv_cache"]["bytes_per_token"] == pb.kv_cache_bytes_per_token(grok)
    shared = dict(LLAMA, kv_source_layer_ids=[0, 0])
    with pytest.raises(pb.NotModelledError) as library:
        pb.kv_cache_bytes_per_token(shared)
    assert pb.config_report(shared)["kv_cache"] == {"error": str(library.value)}
    # A misspelt rope key is an error in the config, not a gap: its entry says so (with a guess), the cache stands.
    misspelt = pb.config_report(dict(LLAMA, rope_scaling={**LLAMA["rope_scaling"], "factr": 8}))
    assert misspelt["rope"][0]["encoding"] == "invalid" and "did you mean 'factor'?" in misspelt["rope"][0]["reason"]
    assert misspelt["kv_cache"]["bytes_per_token"] == pb.kv_cache_bytes_per_token(LLAMA)
    assert "RoPE dict invalid · full_attention" in pb.format_report(misspelt)


def sources(config, **kwargs) -> list[str]:
    return [w["source"] for w in pb.config_report(config, **kwargs)["warnings"]]


def test_warnings_fire_on_their_setting_only_and_cite_their_source():
    gh = "https://github.com/huggingface/transformers/"
    assert sources(LLAMA) == []
    assert sources(LLAMA, context=200_000) == ["https://arxiv.org/abs/2306.15595"]
    assert sources(dict(LLAMA, torch_dtype="bfloat16")) == [gh + "pull/29285"]
    assert sources(dict(LLAMA, original_max_position_embeddings=8192)) == [gh + "pull/42513"]
    assert sources(pb.model_config("Qwen2.5-7B")) == [gh + "issues/38002"]
    dynamic = dict(pb.model_config("Llama-2-7B"), rope_scaling={"rope_type": "dynamic", "factor": 2.0})
    assert sources(dynamic) == [gh + "issues/25104"]
    qwen_yarn = dict(pb.model_config("Qwen3-8B"), model_type="qwen3", rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                                                "original_max_position_embeddings": 32768})
    assert sources(qwen_yarn) == ["https://huggingface.co/Qwen/Qwen2.5-32B-Instruct#processing-long-texts",
                                  gh + "issues/38224"]   # 4 × 32,768 is not max_position_embeddings 40,960
    assert all(w["source"].startswith("https://") for w in pb.config_report(qwen_yarn)["warnings"])


def test_longrope_warns_that_switching_factors_invalidates_the_cache():
    phi3 = dict(num_hidden_layers=32, hidden_size=3072, num_attention_heads=32, rope_theta=10_000.0,
                max_position_embeddings=131_072, original_max_position_embeddings=4096,
                rope_scaling={"type": "longrope", "short_factor": [1.0] * 48, "long_factor": [4.0] * 48})
    assert "https://github.com/huggingface/transformers/pull/33129" in sources(phi3)
    assert "[48 values, 1 to 1]" in " ".join(pb.format_report(pb.config_report(phi3)).split())  # however it wraps


def test_plot_needs_a_rotary_spectrum(tmp_path):
    with pytest.raises(ValueError, match="no layer with RoPE"):
        pb.plot_report(dict(num_hidden_layers=1, hidden_size=8, num_attention_heads=2, max_position_embeddings=8),
                       tmp_path / "x.png")


def test_plot_and_format_name_what_is_wrong_with_their_arguments(tmp_path):
    report = pb.config_report(LLAMA)
    with pytest.raises(ValueError, match=r"path must name a \.png file"):
        pb.plot_report(report, tmp_path / "x.pdf")
    with pytest.raises(ValueError, match="is a directory"):
        pb.plot_report(report, tmp_path)
    with pytest.raises(ValueError, match="does not exist"):
        pb.plot_report(report, tmp_path / "no" / "x.png")
    with pytest.raises(TypeError, match="^report must be a config_report"):
        pb.plot_report([report], tmp_path / "x.png")
    with pytest.raises(TypeError, match="^report must be the dict config_report"):
        pb.format_report(None)
    with pytest.raises(ValueError, match="^report must be the dict config_report"):
        pb.format_report({"context": 8})


# ---- the command line in a fresh interpreter ------------------------------------------------------------------------

def test_cli_reads_a_file(tmp_path):
    done = cli(write(tmp_path, LLAMA))
    assert done.returncode == 0 and done.stderr == ""
    assert "rope_type        llama3" in done.stdout and "128 KiB (131,072 B)" in done.stdout


def test_cli_reads_stdin_and_prints_strict_json():
    done = cli("-", "--json", "--context", "4096", stdin=json.dumps(pb.model_config("DeepSeek-V3")))
    assert done.returncode == 0
    report = json.loads(done.stdout, parse_constant=lambda name: pytest.fail(f"{name} is not JSON"))
    assert report["kv_cache"]["bytes_per_token"] == 70_272 and report["context"] == 4096


def test_cli_plot_writes_a_png(tmp_path):
    png = tmp_path / "spectra.png"
    done = cli(write(tmp_path, pb.model_config("gpt-oss-20b")), "--plot", str(png))
    assert done.returncode == 0 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_failure_is_one_line_without_traceback(tmp_path):
    missing = tmp_path / "missing.json"
    done = cli(str(missing))
    assert done.returncode == 2 and done.stdout == "" and "Traceback" not in done.stderr
    assert done.stderr.splitlines() == [f"posbook inspect: error: cannot read {missing}: no such file"]


# ---- bad input, in this process -------------------------------------------------------------------------------------

@pytest.mark.parametrize("args, status, words", [
    (["{dir}"], 2, "is a directory"),
    (["{dir}/missing.json"], 2, "no such file"),
    (["{bad_json}"], 2, "is not JSON"),
    (["{list_json}"], 2, "must hold a JSON object"),
    (["{latin1}"], 2, "not UTF-8"),
    (["{llama}", "--context", "0"], 2, "--context: expected a positive integer"),
    (["{llama}", "--context", "many"], 2, "--context: expected a positive integer"),
    (["{llama}", "--batch", "-1"], 2, "--batch: expected a positive integer"),
    (["{llama}", "--dtype", "int4"], 2, "--dtype: invalid choice"),
    (["{llama}", "--plot", "{dir}/no/such/folder/x.png"], 2, "does not exist"),
    (["{llama}", "--plot", "{dir}"], 2, "is a directory"),
    (["{llama}", "--plot", "{dir}/spectra.svg"], 2, "must be a .png file"),
    (["{llama}", "--frobnicate"], 2, "unrecognized arguments"),
    ([], 2, "required: config"),
    (["{no_length}"], 1, "--context N on the command line"),
])
def test_bad_input_is_one_line_and_an_exit_status(args, status, words, tmp_path, capsys):
    (tmp_path / "bad.json").write_text("{\"num_hidden_layers\": 2,")
    (tmp_path / "latin1.json").write_bytes("{\"model_type\": \"caf\xe9\"}".encode("latin-1"))
    misspelt = dict(LLAMA, rope_scaling={"rope_type": "linear", "factors": 2})
    no_length = {k: v for k, v in LLAMA.items() if k != "max_position_embeddings"}
    files = dict(dir=str(tmp_path), bad_json=str(tmp_path / "bad.json"), latin1=str(tmp_path / "latin1.json"),
                 list_json=write(tmp_path, [1, 2], "list.json"), llama=write(tmp_path, LLAMA, "llama.json"),
                 unknown_key=write(tmp_path, misspelt, "k.json"), no_length=write(tmp_path, no_length, "n.json"))
    got, out, err = run(capsys, *[a.format(**files) for a in args])
    assert (got, out, len(err)) == (status, "", 1)
    assert err[0].startswith("posbook inspect: error: ") and words in err[0]


def test_unreadable_file_is_one_line(tmp_path, capsys, monkeypatch):
    path = write(tmp_path, LLAMA)

    def refuse(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(self))
    monkeypatch.setattr(Path, "read_text", refuse)
    assert run(capsys, path) == (2, "", [f"posbook inspect: error: cannot read {path}: permission denied"])


def test_no_command_lists_the_commands(capsys):
    assert main([]) == 2
    out, err = capsys.readouterr()
    assert err == "" and "inspect" in out


def test_a_rescaling_without_original_length_claims_no_pretraining_count():
    # Gemma 3 scales its global layers linearly by 8 but names no original_max_position_embeddings: the length it
    # was pre-trained at is not in the config, so the report counts no "as in pre-training" turns.
    gemma = pb.model_config("Gemma-3-27B")
    report = pb.config_report(gemma, context=32768)
    full = next(e for e in report["rope"] if "full_attention" in e["layer_types"])
    assert full["rescaling"] != "none" and full["original_length"] == gemma["max_position_embeddings"]
    assert full["turning_planes"]["original_unscaled"] is None
    assert "before the rescaling" not in pb.format_report(report)


def test_position_from_content_is_named():
    # FoX's configs (flash-linear-attention style: num_heads, fgate_type) and stick-breaking's model_type.
    fox = {"model_type": "forgetting_transformer-project_fox", "hidden_size": 1536, "num_hidden_layers": 24,
           "num_heads": 24, "max_position_embeddings": 16384, "use_rope": False, "fgate_type": "full"}
    assert pb.position_scheme(fox) == ("forget_gate", "fgate_type: 'full'")
    text = " ".join(pb.format_report(pb.config_report(fox)).split())      # the report wraps its lines
    assert "FoX forget gates" in text and "no RoPE" in text and "one gate per token and head" in text
    assert pb.position_scheme({**fox, "fgate_type": "none"})[0] == "unknown"     # FoX's ablation without gates
    assert "and RoPE besides" in " ".join(pb.format_report(pb.config_report({**fox, "use_rope": True})).split())
    sb = {"model_type": "stickbreaking", "hidden_size": 1024, "num_hidden_layers": 4, "num_attention_heads": 8,
          "max_position_embeddings": 4096}
    assert pb.position_scheme(sb) == ("stick_breaking", "model_type 'stickbreaking'")
    assert "Stick-breaking attention" in pb.format_report(pb.config_report(sb))
