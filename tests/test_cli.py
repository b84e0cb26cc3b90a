"""Both command lines, fed what a user gets wrong: every failure is one line on standard error and a non-zero exit
status, never a traceback, and nothing is trained or written before the input is found wrong."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import posbook as pb
from posbook.__main__ import COMMANDS, memory_size
from posbook.__main__ import main as posbook_main
from posbook.report import config_report
from posbook.experiments.__main__ import main as experiments_main

TRAIN = ["train", "--task", "copy", "--preset", "cpu", "--steps", "1", "--no-progress"]


@pytest.fixture
def files(tmp_path):
    """Paths of each kind a user may point a command at."""
    (tmp_path / "empty.pt").write_bytes(b"")
    (tmp_path / "array.json").write_text("[1, 2]")
    (tmp_path / "notjson.json").write_text("hidden_size: 8")
    (tmp_path / "binary.json").write_bytes(bytes(range(256)))
    (tmp_path / "file").write_text("")
    (tmp_path / "folder").mkdir()
    config = pb.model_config("Llama-3.1-8B")
    (tmp_path / "llama.json").write_text(json.dumps(config))
    (tmp_path / "boolheads.json").write_text(json.dumps({**config, "num_attention_heads": True}))
    (tmp_path / "nothing.json").write_text("{}")
    torch.save({"weights": torch.zeros(2)}, tmp_path / "foreign.pt")
    # Hugging Face cache folders (models--org--name/snapshots/HASH) that cannot say which config to read.
    (tmp_path / "models--none--empty" / "snapshots").mkdir(parents=True)
    for snapshot in ("0a1b2c", "9f8e7d"):
        (tmp_path / "models--two--snapshots" / "snapshots" / snapshot).mkdir(parents=True)
    (tmp_path / "models--no--config" / "snapshots" / "0a1b2c").mkdir(parents=True)
    return tmp_path


def _run(main, argv, capsys) -> tuple[int, list[str]]:
    try:
        status = main(argv)
    except SystemExit as exit_:  # argparse exits; a status of 0 here would be a bug too
        status = exit_.code
    _, err = capsys.readouterr()
    return status, err.strip().splitlines()


POSBOOK_CASES = [
    (["frobnicate"], "invalid choice"),
    (["inspect"], "the following arguments are required: config"),
    (["inspect", "{d}/missing.json"], "no such file"),
    (["inspect", "{d}/folder"], "it is a directory without a config.json"),
    (["inspect", "{d}/models--none--empty"], "this Hugging Face cache folder holds no snapshot"),
    (["inspect", "{d}/models--two--snapshots"], "holds 2 snapshots (0a1b2c, 9f8e7d); pass the one to read"),
    (["inspect", "{d}/models--no--config"], "its snapshot 0a1b2c holds no config.json"),
    (["inspect", "lama-3.1-8b"], "not a model name in posbook's table; did you mean Llama-3.1-8B, "),
    (["inspect", "gemma3-27b"], "did you mean Gemma-3-27B"),
    (["inspect", "frobnicator-9000"], "not a model name in posbook's table (its names: posbook.models())"),
    (["inspect", "{d}/notjson.json"], "is not JSON"),
    (["inspect", "{d}/array.json"], "must hold a JSON object"),
    (["inspect", "{d}/binary.json"], "not UTF-8 text"),
    (["inspect", "{d}/llama.json", "--context", "0"], "expected a positive integer"),
    (["inspect", "{d}/llama.json", "--context", "1e3"], "expected a positive integer"),
    (["inspect", "{d}/llama.json", "--batch", "-1"], "expected a positive integer"),
    (["inspect", "{d}/llama.json", "--dtype", "fp64"], "invalid choice"),
    (["inspect", "{d}/llama.json", "--plot", "{d}/none/x.png"], "does not exist"),
    (["inspect", "{d}/llama.json", "--plot", "{d}/folder"], "it is a directory"),
    (["inspect", "{d}/llama.json", "--frobnicate"], "unrecognized arguments"),
    (["inspect", "{d}/boolheads.json"], "num_attention_heads"),
    (["inspect", "{d}/nothing.json"], "num_hidden_layers"),
    *((["inspect", "llama-3.1-8b", f"--memory={size}"],
       f"argument --memory: expected a positive size in bytes or with a unit (B, KB, KiB, MB, MiB, GB, GiB, TB, TiB), "
       f"such as 80GiB, 24GB or 512MiB; got {size!r}")
      for size in ["80gigs", "80PiB", "0", "0.5", "-1GiB", "nan", "1e9", "GiB", ""]),
]

EXPERIMENTS_CASES = [
    ([], "the following arguments are required"),
    (["frobnicate"], "invalid choice"),
    ([*TRAIN, "--steps", "x"], "argument --steps: expected an integer"),
    ([*TRAIN, "--steps", "0"], "steps must be >= 1"),
    ([*TRAIN, "--steps", "-1"], "steps must be >= 1"),
    ([*TRAIN, "--task", "nope"], "invalid choice"),
    ([*TRAIN, "--preset", "gpu9"], "invalid choice"),
    ([*TRAIN, "--pattern", "RXZ"], "pattern"),
    ([*TRAIN, "--window", "0"], "window"),
    ([*TRAIN, "--lr", "nan"], "lr"),
    ([*TRAIN, "--lr", "-1"], "lr"),
    ([*TRAIN, "--rope-theta", "inf"], "rope_theta"),
    ([*TRAIN, "--n-head", "3"], "n_head"),
    ([*TRAIN, "--n-kv-head", "3"], "n_kv_head"),
    ([*TRAIN, "--eval-sizes", "a,b"], "comma-separated integers"),
    ([*TRAIN, "--eval-sizes", "0"], "positive sizes"),
    ([*TRAIN, "--out", "{d}/file"], "is a file"),
    ([*TRAIN, "--out", "{d}/never", "--resume"], "nothing to resume"),
    (["evaluate", "{d}/missing.pt"], "does not exist"),
    (["evaluate", "{d}/folder"], "is a folder"),
    (["evaluate", "{d}/empty.pt"], "is empty"),
    (["evaluate", "{d}/array.json"], "not a readable torch checkpoint"),
    (["evaluate", "{d}/foreign.pt"], "not a posbook checkpoint"),
    (["sweep", "nope"], "invalid choice"),
    (["sweep", "extrapolation", "--jobs", "x"], "expected a positive integer"),
    (["sweep", "extrapolation", "--jobs", "0"], "expected a positive integer"),
    (["sweep", "long_context", "--preset", "colab"], "grid 'long_context' has no colab version"),
    (["sweep", "extrapolation", "--preset", "tpu"], "invalid choice"),
    (["show", "nope"], "invalid choice"),
]


@pytest.mark.parametrize("argv, words", POSBOOK_CASES, ids=[" ".join(a)[:60] for a, _ in POSBOOK_CASES])
def test_posbook_command_line_failures_are_one_line(argv, words, files, capsys):
    status, lines = _run(posbook_main, [a.format(d=files) for a in argv], capsys)
    assert status in (1, 2) and len(lines) == 1 and "Traceback" not in lines[0], lines
    assert words in lines[0], lines[0]


@pytest.mark.parametrize("argv, words", EXPERIMENTS_CASES, ids=[" ".join(a)[:60] for a, _ in EXPERIMENTS_CASES])
def test_experiments_command_line_failures_are_one_line(argv, words, files, capsys):
    status, lines = _run(experiments_main, [a.format(d=files) for a in argv], capsys)
    assert status == 2 and len(lines) == 1 and "Traceback" not in lines[0], lines
    assert words in lines[0], lines[0]
    assert not (files / "never").exists()


def test_an_unavailable_device_is_refused_by_name(files, capsys, monkeypatch):
    for device, words in [("cuda:7", "CUDA device(s)"), ("tpu", "POSBOOK_DEVICE must"), ("3", "POSBOOK_DEVICE")]:
        monkeypatch.setenv("POSBOOK_DEVICE", device)
        status, lines = _run(experiments_main, ["evaluate", str(files / "foreign.pt")], capsys)
        assert status == 2 and len(lines) == 1 and words in lines[0], lines


def test_sweep_lists_a_grid_at_gpu_scale(capsys):
    """``sweep GRID --preset colab`` reaches the GPU-scale grid: --list names its runs and whether each is recorded."""
    from posbook.experiments import grids
    status = experiments_main(["sweep", "extrapolation", "--preset", "colab", "--list"])
    lines = capsys.readouterr().out.strip().splitlines()
    runs = grids.runs("extrapolation.colab")
    assert status == 0 and [line.split()[0] for line in lines] == list(runs)
    assert all(line.split()[-1] in ("recorded", "train") for line in lines)


# ---- posbook: the installed command, its help, and what inspect reads ---------------------------------------------

ROOT = Path(__file__).resolve().parents[1]
LLAMA_MEMORY = {  # 131,072 B per token at bf16 (32 layers × 8 KV heads × 256 numbers × 2 B) into 80 GiB
    (1, "bf16/fp16"): 655_360, (1, "fp32"): 327_680, (1, "fp8"): 1_310_720,
    (4, "bf16/fp16"): 163_840, (4, "fp32"): 81_920, (4, "fp8"): 327_680,
    (8, "bf16/fp16"): 81_920, (8, "fp32"): 40_960, (8, "fp8"): 163_840,
    (32, "bf16/fp16"): 20_480, (32, "fp32"): 10_240, (32, "fp8"): 40_960,
}


def _out(argv, capsys) -> tuple[int, str, str]:
    try:
        status = posbook_main(argv)
    except SystemExit as exit_:  # --help
        status = exit_.code
    out, err = capsys.readouterr()
    return status, out, err


def _json(argv, capsys) -> dict:
    status, out, err = _out([*argv, "--json"], capsys)
    assert (status, err) == (0, ""), err
    return json.loads(out)


def test_the_console_script_is_declared_and_installed():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"posbook": "posbook.__main__:main"}
    script = Path(sys.executable).parent / "posbook"
    if not script.exists():
        pytest.skip(f"posbook is not installed beside {sys.executable} (pip install -e . puts it there)")
    done = subprocess.run([str(script), "inspect", "llama-3.1-8b", "--memory", "80GiB"], capture_output=True,
                          text=True, timeout=120)
    assert (done.returncode, done.stderr) == (0, "")
    assert "KV budget · 80 GiB" in done.stdout and "  8                81,920" in done.stdout
    done = subprocess.run([str(script), "inspect", "no-such-model"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.startswith("posbook inspect: error: cannot read no-such-model")


def test_no_command_prints_the_overview_with_status_2_and_help_with_status_0(capsys):
    status, overview, err = _out([], capsys)
    assert (status, err) == (2, "")
    for name, (summary, example) in COMMANDS.items():
        assert f"  {name}" in overview and summary in overview and f"e.g. {example}" in overview
    assert "exits with status 2" in overview and "python -m posbook" in overview
    assert _out(["--help"], capsys) == (0, overview, "")


@pytest.mark.parametrize("argv", [[], ["--help"], ["inspect", "--help"]])
def test_help_is_plain_words_within_a_terminal(argv, capsys):
    _, text, _ = _out(argv, capsys)
    assert "`" not in text and not re.search(r":(func|mod|class|meth|attr):", text)
    assert max(map(len, text.splitlines())) <= 80


def test_inspect_help_gives_examples_that_run(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where the example's plot goes
    _, text, _ = _out(["inspect", "--help"], capsys)
    examples = [line.split()[2:] for line in text.splitlines() if line.startswith("  posbook inspect ")]
    by_name = [argv for argv in examples if argv[0] in {name.lower() for name in pb.models()}]
    assert len(examples) >= 4 and len(by_name) >= 2  # the others read the reader's own files
    for argv in by_name:
        status, out, err = _out(["inspect", *argv], capsys)
        assert (status, err) == (0, "") and out
    assert (tmp_path / "spectrum.png").stat().st_size > 0


def test_a_model_name_in_any_case_or_its_hub_id_reads_the_table(capsys):
    expected = config_report(pb.model_config("Llama-3.1-8B"))
    for name in ("Llama-3.1-8B", "llama-3.1-8b", "LLAMA-3.1-8B", "meta-llama/llama-3.1-8b"):
        assert _json(["inspect", name], capsys) == expected, name


def test_a_missing_path_is_not_taken_for_a_misspelt_name(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for path in (f"{tmp_path}/llama-3.1-8b", "llama-3.1-8b/config.json", "llama.json"):
        assert _out(["inspect", path], capsys) == (2, "", f"posbook inspect: error: cannot read {path}: no such file\n")
    status, _, err = _out(["inspect", "downloads/llama-3.1-8b"], capsys)
    assert (status, err) == (2, "posbook inspect: error: cannot read downloads/llama-3.1-8b: no such file, not a model "
                                "name in posbook's table; did you mean Llama-3.1-8B or Llama-3.1-405B?\n")


def test_a_path_that_exists_wins_over_a_model_name(tmp_path, capsys, monkeypatch):
    qwen = pb.model_config("Qwen3-8B")
    (tmp_path / "llama-3.1-8b").mkdir()
    (tmp_path / "llama-3.1-8b" / "config.json").write_text(json.dumps(qwen))
    monkeypatch.chdir(tmp_path)
    assert _json(["inspect", "llama-3.1-8b"], capsys) == config_report(qwen)


def test_a_model_folder_a_snapshot_and_a_hub_cache_folder_are_read(tmp_path, capsys):
    qwen = pb.model_config("Qwen3-8B")
    expected = config_report(qwen)
    (tmp_path / "Qwen3-8B").mkdir()
    (tmp_path / "Qwen3-8B" / "config.json").write_text(json.dumps(qwen))
    # The Hub cache keeps files as blobs and links them from each snapshot.
    cache = tmp_path / "hub" / "models--Qwen--Qwen3-8B"
    (cache / "blobs").mkdir(parents=True)
    (cache / "blobs" / "4f2e").write_text(json.dumps(qwen))
    snapshot = cache / "snapshots" / "b968826d9c46dd6066d109eabc6255188de91218"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").symlink_to(cache / "blobs" / "4f2e")
    (cache / "refs").mkdir()
    for source in (tmp_path / "Qwen3-8B", snapshot, cache, snapshot / "config.json"):
        assert _json(["inspect", str(source)], capsys) == expected, source


@pytest.mark.parametrize("text, nbytes", [
    ("80GiB", 80 * 2**30), ("80GB", 80 * 10**9), ("512MiB", 512 * 2**20), ("512MB", 512 * 10**6),
    ("1TiB", 2**40), ("2TB", 2 * 10**12), ("4KiB", 4096), ("4KB", 4000), ("123456", 123_456), ("7B", 7),
    ("80gib", 80 * 2**30), ("80 GiB", 80 * 2**30), ("1.5GiB", 3 * 2**29), ("0.3GiB", 322_122_547),
])
def test_memory_sizes_in_bytes_and_units(text, nbytes):
    assert memory_size(text) == nbytes


def test_memory_answers_which_context_and_batch_fit(capsys):
    status, out, err = _out(["inspect", "llama-3.1-8b", "--memory", "80GiB", "--batch", "4"], capsys)
    assert (status, err) == (0, "")
    table = out[out.index("KV budget"):].splitlines()
    assert table[0] == "KV budget · 80 GiB (85,899,345,920 B): the longest context that fits"
    assert table[1].split() == ["sequences", "bf16/fp16", "fp32", "fp8"]
    assert [row.split()[0] for row in table[2:6]] == ["1", "4", "8", "32"]
    assert table[3].split() == ["4", "all", "131,072", "81,920", "all", "131,072"]  # capped at max_position_embeddings
    assert table[4].split() == ["8", "81,920", "40,960", "all", "131,072"]
    assert table[6] == "  all: the model's whole context, max_position_embeddings, fits"

    report = _json(["inspect", "llama-3.1-8b", "--memory", "80GiB", "--batch", "4"], capsys)
    memory = report.pop("memory")
    assert report == config_report(pb.model_config("Llama-3.1-8B"), batch=4)  # the report itself is unchanged
    assert report["format"] == "posbook.config_report/2"
    assert (memory["format"], memory["budget_bytes"], memory["max_position_embeddings"]) == (
        "posbook.inspect.memory/1", 80 * 2**30, 131_072)
    got = {(r["batch"], "/".join(r["dtypes"])): r["max_context"] for r in memory["rows"]}
    assert got == LLAMA_MEMORY
    assert all(r["fits_max_position_embeddings"] == (r["max_context"] >= 131_072) for r in memory["rows"])
    assert "memory" not in _json(["inspect", "llama-3.1-8b"], capsys)


def test_memory_past_a_sliding_window(capsys):
    # Gemma 3 27B at fp32 into 1 GiB: 52 sliding layers stop at 1,023 tokens, 10 global layers grow (16,384 B each).
    memory = _json(["inspect", "gemma-3-27b", "--memory", "1GiB"], capsys)["memory"]
    fp32 = {r["batch"]: r["max_context"] for r in memory["rows"] if r["dtypes"] == ["fp32"]}
    assert fp32[1] == (2**30 - 52 * 1023 * 16_384) // (10 * 16_384)


def test_memory_of_a_cache_posbook_does_not_model_is_said_in_the_report(tmp_path, capsys):
    config = dict(pb.model_config("Llama-3.1-8B"), layer_types=["compressed_sparse_attention"] * 32)
    (tmp_path / "config.json").write_text(json.dumps(config))
    memory = _json(["inspect", str(tmp_path), "--memory", "80GiB"], capsys)["memory"]
    assert set(memory) == {"format", "budget_bytes", "error"} and "compressed_sparse_attention" in memory["error"]
    status, out, _ = _out(["inspect", str(tmp_path), "--memory", "80GiB"], capsys)
    assert status == 0 and "KV budget · 80 GiB (85,899,345,920 B)\n  layer_types entry must be" in out
