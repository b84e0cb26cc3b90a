"""The experiments command line, ``python -m posbook.experiments``, as a user meets it: the commands it suggests
are ones it accepts, every option says what it does in plain words, train has an option for every field of a run
and a bad value gets one line that names its option, a run that saves nothing says so, a sweep can record outside
the installed package, show's tables fit a terminal, a closed pipe ends quietly, and a damaged checkpoint gets one
line that says so."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shlex
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from posbook.experiments import TrainConfig, grids, load_model, store, train
from posbook.experiments.__main__ import OPTION_NAMES, TABLE_WIDTH, main, option_name, parser

TINY = dict(n_layer=2, n_embd=32, n_head=4, pattern="RN")
TINY_TRAIN = ["train", "--task", "copy", "--preset", "cpu", "--pattern", "RN", "--n-layer", "2", "--n-embd", "32",
              "--steps", "2", "--batch-size", "8", "--train-max-size", "4", "--eval-sizes", "4", "--eval-every", "2",
              "--eval-batches", "1", "--no-progress"]
PROGRAM = ["python", "-m", "posbook.experiments"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def tiny(**overrides) -> TrainConfig:
    fields = dict(task="copy", preset="cpu", model=dict(TINY), steps=4, batch_size=8, train_max_size=4,
                  eval_sizes=[2, 4], eval_every=4, eval_batches=1, warmup=1, progress=False)
    return TrainConfig(**{**fields, **overrides})


def _run(argv: list[str], capsys) -> tuple[int, str, list[str]]:
    """Exit status, standard output and the lines of standard error of one command line, run in this process."""
    try:
        status = main(argv)
    except SystemExit as exit_:
        status = exit_.code
    out, err = capsys.readouterr()
    return status, out, err.strip().splitlines()


def _suggested(message: str) -> list[str]:
    """The arguments of the command a message suggests in back-quotes (after ``python -m posbook.experiments``)."""
    commands = re.findall(r"`([^`]+)`", message)
    assert len(commands) == 1, message
    argv = shlex.split(commands[0])
    assert argv[:3] == PROGRAM, message
    return argv[3:]


# 1. Every command the command line suggests is one it accepts.

def test_show_suggests_the_sweep_that_records_a_grid_at_any_scale(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(store, "RECORDS", tmp_path)       # no grid recorded: show suggests a sweep for each
    for grid in grids.GRIDS:
        status, _, err = _run(["show", grid], capsys)
        assert status == 2 and len(err) == 1 and f"grid {grid!r} has no record" in err[0], err
        argv = _suggested(err[0])
        assert _run([*argv, "--list"], capsys)[0] == 0, argv       # --list: parsed and run, nothing trained
    status, _, err = _run(["show", "extrapolation.colab"], capsys)
    assert _suggested(err[0]) == ["sweep", "extrapolation", "--preset", "colab"]
    elsewhere = tmp_path / "my records"
    status, _, err = _run(["show", "context_extension.colab", "--records", str(elsewhere)], capsys)
    argv = _suggested(err[0])
    assert argv == ["sweep", "context_extension", "--preset", "colab", "--out", str(elsewhere)]
    assert _run([*argv, "--list"], capsys)[0] == 0


def test_the_library_suggests_sweeps_the_command_line_accepts(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(store, "RECORDS", tmp_path)
    with pytest.raises(ValueError, match="no weights at") as missing:
        store.load_weights("extrapolation.colab", "RoPE/0")
    with pytest.raises(ValueError, match="no record for its current configuration") as unrecorded:
        store.reproduce_prefix("extrapolation.colab", "RoPE/0", steps=1)
    for error in (missing, unrecorded):
        argv = _suggested(str(error.value))
        assert argv == ["sweep", "extrapolation", "--preset", "colab", "--out", str(tmp_path)]
        assert _run([*argv, "--list"], capsys)[0] == 0


# 2. Every option of every command says what it does, in plain words.

def _parsers() -> dict[str, argparse.ArgumentParser]:
    top = parser()
    commands = next(action for action in top._actions if isinstance(action, argparse._SubParsersAction))
    return {"": top, **commands.choices}


def test_every_option_of_every_command_has_plain_help(capsys):
    parsers = _parsers()
    assert set(parsers) == {"", "train", "evaluate", "sweep", "show", "presets", "patterns"}
    for command, command_parser in parsers.items():
        for action in command_parser._actions:
            assert action.help and action.help != argparse.SUPPRESS and action.help.strip(), (command, action.dest)
            for choice in getattr(action, "_choices_actions", []):      # each command in the overview
                assert choice.help and choice.help.strip(), (command, choice.dest)
        status, out, _ = _run(([command] if command else []) + ["--help"], capsys)
        assert status == 0 and out.startswith("usage: python -m posbook.experiments")
        assert "``" not in out and not re.search(r":(func|class|meth|mod|attr|data):", out), out


# 2b. train has an option for every field of a run, read by the field's type; a bad value names its option.

# The options train had before they were generated from TrainConfig: every one of them still works.
FORMER_TRAIN_OPTIONS = ["--task", "--preset", "--pattern", "--absolute-positions", "--qk-norm", "--logit-scaling",
                        "--sinks", "--n-layer", "--n-embd", "--n-head", "--n-kv-head", "--window", "--chunk-size",
                        "--rope-theta", "--rope-fraction", "--softcap", "--steps", "--batch-size", "--seq-len",
                        "--train-max-size", "--lr", "--warmup", "--eval-every", "--eval-batches", "--corpus-bytes",
                        "--curriculum-steps", "--checkpoint-every", "--seed", "--eval-sizes", "--eval-seq-lens",
                        "--out", "--resume", "--progress", "--no-progress"]


def _train_options() -> dict[str, argparse.Action]:
    return {flag: action for action in _parsers()["train"]._actions for flag in action.option_strings}


def test_train_has_an_option_for_every_field_of_a_run_and_keeps_its_former_ones():
    options = _train_options()
    for field in dataclasses.fields(TrainConfig):
        if field.name == "model":           # set through the GPTConfig options (--pattern, --n-layer, ...)
            continue
        action = options[option_name(field.name)]
        assert action.dest == field.name and field.metadata["help"].split(" (default")[0] in action.help
    assert option_name("out_dir") == "--out" == OPTION_NAMES["out_dir"][0] and options["--out-dir"] is options["--out"]
    assert set(FORMER_TRAIN_OPTIONS) <= set(options)


def test_every_field_given_on_the_command_line_reaches_the_run():
    from posbook.experiments.__main__ import _train_config
    argv = ["train", "--task", "text", "--preset", "cpu", "--seq-len", "16", "--eval-seq-lens", "16,32",
            "--eval-stride", "8", "--eval-position-bin", "4", "--init-from", "extrapolation:RoPE/0", "--device", "cpu",
            "--out-dir", "somewhere", "--stop-after", "3", "--weight-decay", "0.05", "--grad-clip", "0.5", "--seed",
            "0", "--no-progress", "--sinks", "--rope-theta", "500"]
    run = _train_config(parser().parse_args(argv))
    assert (run.eval_seq_lens, run.eval_stride, run.eval_position_bin, run.init_from, run.device, run.out_dir,
            run.stop_after, run.weight_decay, run.grad_clip, run.progress) == (
        [16, 32], 8, 4, "extrapolation:RoPE/0", "cpu", "somewhere", 3, 0.05, 0.5, False)
    assert run.model["sinks"] is True and run.model["rope_theta"] == 500.0
    # An option left out keeps the field's default: the preset's value, or the field's own.
    left_out = _train_config(parser().parse_args(["train"]))
    assert left_out == TrainConfig(model=dict(pattern="R", absolute_positions="none", qk_norm="none",
                                              logit_scaling="none"))


@pytest.mark.parametrize("options, words", [
    (["--steps", "x"], "argument --steps: expected an integer such as 100, got 'x'"),
    (["--lr", "fast"], "argument --lr: expected a number such as 0.001, got 'fast'"),
    (["--eval-seq-lens", "16,x"], "argument --eval-seq-lens: expected comma-separated integers"),
    (["--task", "sorting"], "argument --task: invalid choice: 'sorting'"),
    (["--steps", "0"], "argument --steps: steps must be >= 1, got 0"),
    (["--eval-stride", "0"], "argument --eval-stride: eval_stride must be >= 1, got 0"),
    (["--eval-stride", "512", "--task", "text"], "argument --eval-stride: eval_stride=512 must be at most"),
    (["--weight-decay", "-1"], "argument --weight-decay: weight_decay must be >= 0, got -1.0"),
    (["--grad-clip", "nan"], "argument --grad-clip: grad_clip must be finite, got nan"),
    (["--init-from", "RoPE/0"], "argument --init-from: init_from must be 'grid:label'"),
    (["--init-from", "nowhere:RoPE/0", "--steps", "0"], "argument --init-from: init_from grid must be one of"),
    # --out: this error comes as the model is built, after the note that a run without --out saves nothing.
    (["--init-from", "extrapolation:RoPE/0", "--steps", "0", "--out", "run"],
     "argument --init-from: init_from='extrapolation:RoPE/0': initial_weights do not fit"),
    (["--device", "tpu"], "argument --device: device must name a torch device"),
    (["--resume"], "argument --resume: resume=True needs out_dir"),
    (["--n-head", "3"], "argument --n-embd: n_embd=32 must be a multiple of n_head=3"),
])
def test_a_bad_train_option_is_one_line_that_names_it(options, words, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    status, out, err = _run(["train", "--task", "copy", "--preset", "cpu", "--pattern", "RN", "--n-layer", "2",
                             "--n-embd", "32", "--no-progress", *options], capsys)
    assert status == 2 and len(err) == 1 and words in err[0] and out == "", err


def test_train_from_a_recorded_run_s_weights_reads_them_from_the_store(tiny_grids, tmp_path, capsys):
    """``--init-from grid:label`` starts from the weights a sweep wrote: read without a step, they give the
    accuracies recorded for them."""
    assert _run(["sweep", "tiny"], capsys)[0] == 0          # into RECORDS (tmp_path / "default")
    record = store.load_record("tiny")["copy/RoPE"]["final"]
    argv = [*TINY_TRAIN, "--steps", "0", "--warmup", "0", "--eval-every", "1", "--eval-sizes", "2,4",
            "--init-from", "tiny:copy/RoPE", "--out", str(tmp_path / "read")]
    status, out, err = _run(argv, capsys)
    assert status == 0 and err == [], err
    assert json.loads(out)["final"]["accuracy_by_size"] == record["accuracy_by_size"]


# 3. A run that saves nothing says so before it trains.

def test_train_without_out_says_before_training_that_nothing_is_saved(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    status, out, err = _run(TINY_TRAIN, capsys)
    assert status == 0 and err == ["note: no --out given: the model and results are not saved"]
    assert set(json.loads(out)["final"]["accuracy_by_size"]) == {"4"}
    assert list(tmp_path.iterdir()) == []                     # nothing written where it ran
    status, out, err = _run([*TINY_TRAIN, "--out", str(tmp_path / "run")], capsys)
    assert status == 0 and err == []
    assert {path.name for path in (tmp_path / "run").iterdir()} == {"checkpoint.pt", "results.json"}
    # A command line that fails still fails in one line: the note comes only once the run is found sound.
    status, _, err = _run([*TINY_TRAIN, "--n-head", "3"], capsys)
    assert status == 2 and len(err) == 1 and "n_head" in err[0], err


# 4. A sweep records outside the installed package with --out DIR.

@pytest.fixture
def tiny_grids(tmp_path, monkeypatch):
    """A two-run grid whose first run keeps its weights, and a grid that starts from those weights; RECORDS is
    pointed at an empty folder, which must stay empty when the sweeps write elsewhere."""
    runs = {"copy/RoPE": tiny(), "copy/NoPE": tiny(model=dict(TINY, pattern="N"))}
    stretched = {"copy/RoPE/read": tiny(steps=0, warmup=0, eval_every=1, init_from="tiny:copy/RoPE")}
    monkeypatch.setattr(store, "RECORDS", tmp_path / "default")
    monkeypatch.setitem(grids.GRIDS, "tiny", lambda: runs)
    monkeypatch.setitem(grids.GRIDS, "tiny_from", lambda: stretched)
    monkeypatch.setitem(grids.GRID_WEIGHTS, "tiny", {"copy/RoPE"})
    return runs


def test_sweep_out_writes_the_record_and_weights_into_a_folder_of_ones_own(tiny_grids, tmp_path, capsys):
    mine = tmp_path / "mine"
    status, out, err = _run(["sweep", "tiny", "--out", str(mine)], capsys)
    assert status == 0 and err == ["tiny: training 2 of 2 runs with 1 job(s)"]
    assert out.strip() == str(mine / "tiny.json")
    record = json.loads((mine / "tiny.json").read_text())["runs"]
    assert list(record) == list(tiny_grids) and all(record[label]["id"] == store.run_id(run)
                                                    for label, run in tiny_grids.items())
    assert (mine / "weights" / "tiny" / "copy__RoPE.pt").is_file()
    assert not (tmp_path / "default").exists() and not (store.SHIPPED_RECORDS / "tiny.json").exists()
    # What is recorded there is not trained again, and show reads it from there.
    status, out, _ = _run(["sweep", "tiny", "--out", str(mine), "--list"], capsys)
    assert status == 0 and [line.split()[-1] for line in out.splitlines()] == ["recorded", "recorded"]
    status, out, _ = _run(["show", "tiny", "--records", str(mine)], capsys)
    assert status == 0 and out.splitlines()[:3] == [
        "label      train_loss", f"copy/RoPE  {record['copy/RoPE']['final']['train_loss']:>10.4f}",
        f"copy/NoPE  {record['copy/NoPE']['final']['train_loss']:>10.4f}"]
    # A grid that starts from a recorded run's weights finds them in that folder: evaluated without a step, the
    # weights give the accuracies recorded for them.
    assert _run(["sweep", "tiny_from", "--out", str(mine)], capsys)[0] == 0
    read = json.loads((mine / "tiny_from.json").read_text())["runs"]["copy/RoPE/read"]["final"]
    assert read["accuracy_by_size"] == record["copy/RoPE"]["final"]["accuracy_by_size"]


def test_sweep_out_refuses_a_file_and_says_where_records_go_by_default(tiny_grids, tmp_path, capsys):
    (tmp_path / "file").write_text("")
    status, _, err = _run(["sweep", "tiny", "--out", str(tmp_path / "file")], capsys)
    assert status == 2 and len(err) == 1 and "argument --out: expected a folder, got the file" in err[0], err
    status, out, _ = _run(["sweep", "--help"], capsys)
    assert status == 0 and str(store.SHIPPED_RECORDS) in " ".join(out.split()).replace("- ", "-")
    with pytest.raises(ValueError, match="records .* is a file"):
        store.run_grid("tiny", save=True, records=tmp_path / "file")


# 5. show's tables fit in TABLE_WIDTH columns, sizes in numeric order, and hold the record's numbers.

def _read_tables(lines: list[str], labels: list[str]) -> tuple[dict, dict]:
    """show's tables read back by position: family ("" for the plain metrics) -> label -> column -> value, and
    family -> its columns in the order printed. The label column is as wide as the longest label; after it come
    columns of one width, two spaces apart, values right-aligned, a missing value blank."""
    first = max(len("label"), *map(len, labels))
    tables: dict[str, dict[str, dict[str, float]]] = {}
    order: dict[str, list[str]] = {}
    family, columns, width = "", [], 0
    for line in filter(None, lines):
        if line.endswith(":"):
            family = line.removesuffix(":").removesuffix(" (continued)")
        elif line.startswith("label "):
            columns = line.split()[1:]
            width, rest = divmod(len(line) - first, len(columns))
            width -= 2
            assert rest == 0 and all(line[first + i * (width + 2):][:2] == "  " for i in range(len(columns))), line
            order.setdefault(family, []).extend(columns)
        else:
            cells = [line[first + 2 + i * (width + 2):][:width].strip() for i in range(len(columns))]
            row = tables.setdefault(family, {}).setdefault(line[:first].rstrip(), {})
            row.update({column: float(text) for column, text in zip(columns, cells) if text})
    return tables, order


def _check_tables(out: str, record: dict) -> None:
    """Every line fits TABLE_WIDTH; the plain metrics come first, then a table per family of metrics by size, its
    columns in numeric order; and the tables hold the record's final metrics, every label in its order."""
    lines = out.splitlines()
    assert max(map(len, lines)) <= TABLE_WIDTH, max(lines, key=len)
    assert lines[0].split()[0] == "label"
    tables, order = _read_tables(lines, list(record))
    flat = {label: store.flat_metrics(entry["final"]) for label, entry in record.items()}
    families = list(dict.fromkeys(["", *(key.rpartition("/")[0] for metrics in flat.values() for key in metrics)]))
    assert list(order) == [family for family in families if family or family in order]
    for family, columns in order.items():
        if family:
            assert columns == sorted(columns, key=int), (family, columns)        # sizes in numeric order
        assert list(tables[family]) == list(record)
        for label, metrics in flat.items():
            expected = {key.rpartition("/")[2]: value for key, value in metrics.items()
                        if key.rpartition("/")[0] == family}
            assert set(columns) >= set(expected) and tables[family][label] == pytest.approx(expected, abs=5.1e-5)


@pytest.mark.parametrize("grid", sorted(grids.GRIDS))
def test_show_fits_every_grid_in_100_columns_with_sizes_in_numeric_order(grid, tmp_path, capsys):
    records = None
    if not store.record_path(grid).exists():     # a GPU-scale record that does not ship: its CPU twin's numbers
        records = tmp_path
        twin = json.loads(store.record_path(grid.partition(".")[0]).read_text())
        (tmp_path / f"{grid}.json").write_text(json.dumps({**twin, "grid": grid}))
    record = store.load_record(grid, records)
    status, out, _ = _run(["show", grid, *(["--records", str(records)] if records else [])], capsys)
    assert status == 0
    _check_tables(out, record)


def test_show_pages_a_wide_grid_with_long_labels(tmp_path, monkeypatch, capsys):
    sizes = [str(size) for size in (64, 3, 1000, 8, 17, 2, *range(20, 60))]     # given out of order
    record = {f"a label of some forty characters, seed {seed}": {"final": {
        "train_loss": 12.5 + seed, "accuracy_by_size": {size: int(size) / 1000 for size in sizes}}}
        for seed in range(3)}
    record["only a loss/0"] = {"final": {"train_loss": 0.25}}
    monkeypatch.setitem(grids.GRIDS, "wide", dict)
    (tmp_path / "wide.json").write_text(json.dumps({"grid": "wide", "runs": record}))
    status, out, _ = _run(["show", "wide", "--records", str(tmp_path)], capsys)
    assert status == 0 and "accuracy_by_size (continued):" in out
    _check_tables(out, record)


# 6. A closed pipe ends quietly.

@pytest.mark.parametrize("argv", [["show", "extrapolation"], ["show", "context_extension", "--json"]])
def test_a_pipe_closed_early_ends_the_command_quietly(argv):
    """As ``python -m posbook.experiments show extrapolation | head -1``: the reader takes the beginning and
    leaves while the command still has output to write."""
    read_end, write_end = os.pipe()
    try:        # Linux: the smallest pipe there is, a page, which show's 6 kB table outgrows
        import fcntl
        fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 4096)
    except (ImportError, AttributeError):
        if argv == ["show", "extrapolation"]:
            pytest.skip("a 6 kB output may fit in a pipe whose size cannot be set here")
    proc = subprocess.Popen([sys.executable, "-m", "posbook.experiments", *argv], stdout=write_end,
                            stderr=subprocess.PIPE, env=ENV)
    os.close(write_end)
    with os.fdopen(read_end, "rb", buffering=0) as reader:
        first = reader.read(64)
    _, err = proc.communicate(timeout=120)
    assert first and err.decode() == "", err.decode()
    assert proc.returncode == 1          # the pipe did close on it (a command that finished returns 0)


# 7. A checkpoint damaged anywhere gets posbook's one line, through load_model and through a resumed run.

@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> bytes:
    folder = tmp_path_factory.mktemp("whole")
    train(tiny(out_dir=str(folder)))
    return (folder / "checkpoint.pt").read_bytes()


def _zeroed(data: bytes, start: int, length: int) -> bytes:
    assert any(data[start:start + length]), "the range to zero holds zeros already: it would damage nothing"
    return data[:start] + bytes(length) + data[start + length:]


def _largest_member_middle(data: bytes, path: Path) -> int:
    path.write_bytes(data)
    with zipfile.ZipFile(path) as archive:
        member = max(archive.infolist(), key=lambda info: info.file_size)
    start = member.header_offset + 30 + len(member.filename.encode()) + len(member.extra)   # the local header
    return start + member.file_size // 2


DAMAGE = {
    "cut at 50%": lambda data, path: data[:len(data) // 2],
    "cut at 10%": lambda data, path: data[:len(data) // 10],
    "last 10 bytes cut": lambda data, path: data[:-10],
    "1 kB zeroed in the middle": lambda data, path: _zeroed(data, len(data) // 2, 1024),
    "256 bytes of weights zeroed": lambda data, path: _zeroed(data, _largest_member_middle(data, path), 256),
    "first 8 bytes zeroed": lambda data, path: _zeroed(data, 0, 8),
}


def _is_posbook_damage_error(message: str, path: Path) -> None:
    assert message.startswith(f"checkpoint path {path} is not a readable torch checkpoint: it is damaged or "
                              "truncated ("), message
    assert "\n" not in message and "Errno" not in message and "PytorchStreamReader" not in message, message


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_checkpoint_is_one_line_through_load_model_and_resume(damage, checkpoint, tmp_path, capsys):
    assert load_model(_write(tmp_path / "whole.pt", checkpoint))[0] is not None     # the whole file loads
    path = _write(tmp_path / "damaged.pt", DAMAGE[damage](checkpoint, tmp_path / "scratch.pt"))
    with pytest.raises(ValueError) as error:
        load_model(path)
    _is_posbook_damage_error(str(error.value), path)
    folder = tmp_path / "run"
    resumed = _write(folder / "checkpoint.pt", path.read_bytes())
    with pytest.raises(ValueError) as error:
        train(tiny(out_dir=str(folder), resume=True))
    _is_posbook_damage_error(str(error.value), resumed)
    for argv in (["evaluate", str(path)], [*TINY_TRAIN, "--out", str(folder), "--resume"]):
        status, _, err = _run(argv, capsys)
        assert status == 2 and len(err) == 1, err
        _is_posbook_damage_error(err[0].removeprefix("error: "), Path(argv[1]) if argv[0] == "evaluate" else resumed)


def _write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def test_a_foreign_zip_or_a_torch_file_of_another_kind_is_not_called_damaged(tmp_path):
    with zipfile.ZipFile(tmp_path / "other.zip", "w") as archive:
        archive.writestr("notes.txt", "not a checkpoint")
    with pytest.raises(ValueError, match=r"is not a readable torch checkpoint \((?!.*damaged)"):
        load_model(tmp_path / "other.zip")
    torch.save({"weights": torch.zeros(2)}, tmp_path / "foreign.pt")
    with pytest.raises(ValueError, match="is not a posbook checkpoint"):
        load_model(tmp_path / "foreign.pt")
