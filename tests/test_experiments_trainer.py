"""posbook.experiments.trainer and the command line: training, provenance, exact resume after SIGKILL, two-process
DDP, the curriculum, the weights a run starts from, and one-line errors for checkpoints, folders and devices it
cannot use."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from posbook.experiments import GPT, TrainConfig, train
from posbook.experiments.config import gpt_config
from posbook.experiments.trainer import largest_train_size

TINY = dict(n_layer=2, n_embd=32, n_head=4, window=4, chunk_size=4, max_seq_len=48)


ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}


def tiny_run(tmp_path, **overrides):
    fields = dict(task="copy", preset="cpu", model=dict(TINY, pattern="RN"), steps=12, batch_size=8, train_max_size=4,
                  eval_sizes=[4, 8], eval_every=6, eval_batches=1, lr=3e-3, warmup=2, out_dir=str(tmp_path))
    fields.update(overrides)
    return TrainConfig(**fields)


def test_training_learns_and_records_provenance(tmp_path):
    results = train(tiny_run(tmp_path, steps=40))
    losses = [h["train_loss"] for h in results["history"]]
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 0.3  # nats; seeded, so the same numbers every run
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["final"] == results["final"] and set(saved["final"]["accuracy_by_size"]) == {"4", "8"}
    assert {"git_sha", "torch", "device", "preset", "seed", "wall_time_s"} <= set(saved["provenance"])
    state = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    assert state["step"] == 40


def cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "posbook.experiments", *args], capture_output=True, text=True,
                          env=ENV, cwd=cwd, timeout=300)


TRAIN_ARGS = ["train", "--task", "copy", "--preset", "cpu", "--pattern", "RN", "--n-layer", "2", "--n-embd", "32",
              "--steps", "30", "--batch-size", "8", "--train-max-size", "4", "--eval-sizes", "4,8", "--eval-every",
              "10", "--eval-batches", "1", "--checkpoint-every", "5", "--no-progress"]


def test_resume_after_sigkill_gives_identical_results(tmp_path):
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    assert cli(*TRAIN_ARGS, "--out", str(straight)).returncode == 0
    proc = subprocess.Popen([sys.executable, "-m", "posbook.experiments", *TRAIN_ARGS, "--out", str(killed)], env=ENV,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    checkpoint = killed / "checkpoint.pt"
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        if checkpoint.exists():
            try:
                step = torch.load(checkpoint, weights_only=True)["step"]
            except Exception:  # noqa: BLE001 - the file is replaced atomically, but it may appear between polls
                step = 0
            if 10 <= step < 30:
                break
        time.sleep(0.05)
    assert proc.poll() is None, "the run finished before it could be killed; make it longer"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    killed_at = torch.load(checkpoint, weights_only=True)["step"]
    assert killed_at < 30 and not (killed / "results.json").exists()
    assert cli(*TRAIN_ARGS, "--out", str(killed), "--resume").returncode == 0
    a = json.loads((straight / "results.json").read_text())
    b = json.loads((killed / "results.json").read_text())
    assert b["provenance"]["resumed_from_step"] == killed_at
    assert a["final"] == b["final"]
    assert [h["train_loss"] for h in a["history"]] == [h["train_loss"] for h in b["history"]]


def test_two_process_ddp_follows_the_one_process_curve(tmp_path):
    args = [*TRAIN_ARGS[:-1], "--steps", "8", "--checkpoint-every", "0"]
    one = cli(*args, "--out", str(tmp_path / "one"))
    assert one.returncode == 0, one.stderr
    two = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_port=29517",
                          "-m", "posbook.experiments", *args, "--out", str(tmp_path / "two")],
                         capture_output=True, text=True, env=ENV, timeout=300)
    assert two.returncode == 0, two.stderr[-2000:]
    a = json.loads((tmp_path / "one" / "results.json").read_text())
    b = json.loads((tmp_path / "two" / "results.json").read_text())
    assert b["provenance"]["world_size"] == 2
    torch.testing.assert_close(torch.tensor([h["train_loss"] for h in b["history"]]),
                               torch.tensor([h["train_loss"] for h in a["history"]]), rtol=1e-4, atol=1e-5)


def test_cli_help_lists_and_errors(tmp_path):
    assert "train" in cli("--help").stdout
    patterns = cli("patterns").stdout
    assert "p-RoPE" in patterns and "D  differential attention" in patterns and "LayerKind(" not in patterns
    assert json.loads(cli("presets").stdout)["cpu"]["steps"] > 0
    bad = cli("train", "--task", "copy", "--pattern", "RQ", "--out", str(tmp_path))
    assert bad.returncode == 2 and "unknown layer code" in bad.stderr
    bad = cli("train", "--task", "sorting")
    assert bad.returncode == 2 and "invalid choice" in bad.stderr
    bad = cli("train", "--task", "copy", "--eval-sizes", "4,x")
    assert bad.returncode == 2 and "comma-separated integers" in bad.stderr


def test_a_short_copy_run_learns_to_copy(tmp_path):
    # A CI-sized version of the cpu preset's recipe (many batches of short sequences, loss on the answer only):
    # a two-layer RoPE model learns to copy strings of up to 4 symbols in a few seconds. Seeded, so the
    # accuracies are the same numbers every run; the threshold leaves a wide margin below them.
    torch.manual_seed(0)
    run = TrainConfig(task="copy", preset="cpu", model=dict(pattern="R", n_layer=2, n_embd=64), steps=200,
                      batch_size=32, train_max_size=4, eval_sizes=[1, 2, 3, 4], eval_every=200, eval_batches=2,
                      lr=3e-3, warmup=20, out_dir=str(tmp_path), progress=False)
    accuracy = train(run)["final"]["accuracy_by_size"]
    assert min(accuracy.values()) >= 0.8, accuracy


def test_curriculum_grows_the_largest_size_linearly():
    run = tiny_run(None, out_dir=None, train_max_size=8, curriculum_steps=70, steps=100).resolved()
    sizes = [largest_train_size(run, step) for step in range(100)]
    assert sizes[0] == 1 and sizes[69] == 7 and sizes[70:] == [8] * 30
    assert all(b - a in (0, 1) for a, b in zip(sizes, sizes[1:]))
    no_curriculum = tiny_run(None, out_dir=None, train_max_size=8).resolved()
    assert largest_train_size(no_curriculum, 0) == 8      # no curriculum: L from step 0
    with pytest.raises(ValueError, match="curriculum_steps"):
        tiny_run(None, out_dir=None, curriculum_steps=-1).resolved()


def test_a_run_from_recorded_weights_is_handed_them_and_says_where_they_came_from(tmp_path):
    """The loop reads no record: a run with init_from needs the weights given (the store reads them), and weights
    given to a run without init_from are refused, for its results would not say where it started."""
    run = tiny_run(tmp_path, steps=0, warmup=0, eval_every=1, init_from="extrapolation:RoPE/0")
    with pytest.raises(ValueError, match="run.init_from='extrapolation:RoPE/0' but initial_weights is None"):
        train(run)
    torch.manual_seed(0)
    weights = GPT(gpt_config(run)).state_dict()
    with pytest.raises(ValueError, match="initial_weights given but run.init_from is None"):
        train(tiny_run(tmp_path, steps=1), weights)
    with pytest.raises(ValueError, match="initial_weights do not fit the model of this run"):
        train(run, {"nothing": torch.zeros(1)})
    with pytest.raises(TypeError, match="initial_weights must be a dict"):
        train(run, [1])
    assert set(train(run, weights)["final"]["accuracy_by_size"]) == {"4", "8"}


def _one_line_failure(capsys, argv, words):
    from posbook.experiments.__main__ import main

    status = main(argv)
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert status == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert words in lines[0], lines[0]


def test_bad_checkpoints_are_one_line_errors_naming_what_is_wrong(tmp_path, capsys):
    (tmp_path / "empty.pt").write_bytes(b"")
    (tmp_path / "config.json").write_text('{"not": "a checkpoint"}')
    torch.save({"weights": torch.zeros(2)}, tmp_path / "foreign.pt")
    torch.save(object.__new__(TrainConfig), tmp_path / "pickled.pt")  # an arbitrary object: weights_only refuses
    torch.save({"config": {}, "model": {}, "run": {}}, tmp_path / "whole.pt")
    (tmp_path / "truncated.pt").write_bytes((tmp_path / "whole.pt").read_bytes()[:60])
    for name, words in [("missing.pt", "does not exist"), (".", "is a folder"), ("empty.pt", "is empty"),
                        ("config.json", "not a readable torch checkpoint"), ("truncated.pt", "not a readable torch"),
                        ("foreign.pt", "not a posbook checkpoint: it has no ['config', 'model', 'run']"),
                        ("pickled.pt", "not a readable torch checkpoint")]:
        _one_line_failure(capsys, ["evaluate", str(tmp_path / name)], words)


def test_resume_and_out_refuse_what_they_cannot_use(tmp_path, capsys, monkeypatch):
    args = ["train", "--task", "copy", "--preset", "cpu", "--steps", "1", "--no-progress"]
    _one_line_failure(capsys, [*args, "--out", str(tmp_path / "never"), "--resume"], "nothing to resume")
    (tmp_path / "file").write_text("")
    _one_line_failure(capsys, [*args, "--out", str(tmp_path / "file")], "is a file")
    for device, words in [("cuda:7", "CUDA device(s)"), ("tpu", "POSBOOK_DEVICE must"), ("mps", "no MPS")]:
        if device == "mps" and torch.backends.mps.is_available():
            continue
        monkeypatch.setenv("POSBOOK_DEVICE", device)
        _one_line_failure(capsys, ["evaluate", str(tmp_path / "file")], words)
    monkeypatch.delenv("POSBOOK_DEVICE")
    empty = tmp_path / "empty"
    empty.mkdir()
    run = tiny_run(empty, steps=2, eval_every=2, resume=True)
    with pytest.warns(UserWarning, match="holds no checkpoint.pt: this run starts from step 0"):
        results = train(run)
    assert results["provenance"]["resumed_from_step"] == 0


def test_a_coupled_task_hands_its_position_ids_to_the_model_in_training_and_evaluation(tmp_path, monkeypatch):
    """Every forward of a coupled run gets the task's ids (offsets up to max_offset), and evaluation reports exact
    match, token accuracy and exact match given the answer's length side by side."""
    seen = []
    forward = GPT.forward

    def recording(self, idx, position_ids=None):
        seen.append(position_ids)
        return forward(self, idx, position_ids)

    monkeypatch.setattr(GPT, "forward", recording)
    run = tiny_run(tmp_path, task="reverse-coupled", model=dict(TINY, pattern="R", max_seq_len=64), max_offset=9,
                   steps=4, eval_every=4, out_dir=None)
    final = train(run)["final"]
    assert seen and all(ids is not None for ids in seen)
    assert max(int(ids[:, 0].max()) for ids in seen) > 0       # reverse puts BOS at the offset: some are not 0
    assert set(final) >= {"accuracy_by_size", "token_accuracy_by_size", "given_length_accuracy_by_size"}
    for size in ("4", "8"):
        assert final["accuracy_by_size"][size] <= final["given_length_accuracy_by_size"][size]
        assert final["accuracy_by_size"][size] <= final["token_accuracy_by_size"][size]
