"""Both command lines, fed what a user gets wrong: every failure is one line on standard error and a non-zero exit
status, never a traceback, and nothing is trained or written before the input is found wrong."""

from __future__ import annotations

import json

import pytest
import torch

import posbook as pb
from posbook.__main__ import main as posbook_main
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
    return tmp_path


def _run(main, argv, capsys) -> tuple[int, list[str]]:
    try:
        status = main(argv)
    except SystemExit as exit_:  # argparse exits; a status of 0 here would be a bug too
        status = exit_.code
    _, err = capsys.readouterr()
    return status, err.strip().splitlines()


POSBOOK_CASES = [
    ([], "the following arguments are required"),
    (["frobnicate"], "invalid choice"),
    (["inspect"], "the following arguments are required: config"),
    (["inspect", "{d}/missing.json"], "no such file"),
    (["inspect", "{d}/folder"], "it is a directory"),
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
]

EXPERIMENTS_CASES = [
    ([], "the following arguments are required"),
    (["frobnicate"], "invalid choice"),
    ([*TRAIN, "--steps", "x"], "invalid int value"),
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
    from posbook.experiments import sweep
    status = experiments_main(["sweep", "extrapolation", "--preset", "colab", "--list"])
    lines = capsys.readouterr().out.strip().splitlines()
    runs = sweep.GRIDS["extrapolation.colab"]()
    assert status == 0 and [line.split()[0] for line in lines] == list(runs)
    assert all(line.split()[-1] in ("recorded", "train") for line in lines)
