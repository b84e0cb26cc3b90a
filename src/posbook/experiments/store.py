"""The store of recorded runs: run ids, records and shipped weights, and the functions that train a grid into a
record or check a record by retraining.

A figure of the experiment chapters can rest on fifty training runs: about an hour on two CPU cores, more than a
page can spend each time the book is built. So a grid (:mod:`posbook.experiments.grids`) is run once by the command
line (``python -m posbook.experiments sweep length_generalisation --jobs 2``), which writes the record
``posbook/experiments/records/<grid>.json`` (with ``--out DIR``, ``DIR/<grid>.json``): for every run its label, an
id that hashes the run's resolved configuration, the final metrics, a thinned history and the provenance (git
commit, torch version, device, seed, wall time). A chapter then calls :func:`run_grid` with the grid's name, which
takes each run from the record when the record holds the same configuration and trains it otherwise, and
:func:`reproduce_prefix`, which retrains the first steps of a recorded run on its own schedule and compares the
training loss there with the record, so that the page itself shows that the record is what this code computes; the
runs whose models a page probes ship as weights (``grids.GRID_WEIGHTS``, :func:`load_weights`).

Training on a CPU is deterministic for a fixed number of threads, but not across thread counts for every
layer: the additive-bias schemes (ALiBi, T5) go through kernels whose reductions split by thread, and 600 steps
turn a last-bit difference into a different model (measured: copy/ALiBi/0 retrained with two threads differs
from its one-thread record by 0.27 in exact match at one size). So every run here, recorded or reproduced,
trains with one thread; a retrained run then equals its record exactly on the machine that wrote the record,
and :func:`reproduce_prefix` reports the difference instead of assuming it zero, for another CPU may round
differently.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import tempfile
import time
from contextlib import contextmanager
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Iterator

import torch

from .. import _checks
from .._cli import sweep_command
from . import grids
from .checkpoints import MODEL_KEYS, load_model
from .config import TrainConfig
from .evaluation import evaluate, text_by_position
from .model import GPT
from .trainer import train

SHIPPED_RECORDS = Path(__file__).resolve().parent / "records"     # the records and weights posbook ships
# Where records and weights are read and written by default: the shipped ones (a test, or tools/gpu_check.py, may
# point it elsewhere; every function reads it when called).
RECORDS = SHIPPED_RECORDS
# Fields that do not change what a run computes: where it writes, whether it resumes, its progress bar.
_NOT_RESULTS = ("out_dir", "resume", "progress", "checkpoint_every", "stop_after", "device")
HISTORY_POINTS = 60          # training-loss points kept per run (every evaluation is kept as well)


def run_id(run: TrainConfig) -> str:
    """A short hash of everything in the resolved run that decides its results."""
    values = asdict(_checks.instance("run", run, TrainConfig).resolved())
    for name in _NOT_RESULTS:
        values.pop(name)
    # Options added after a grid was recorded default to None and leave the ids of the runs that do not use them.
    values = {name: value for name, value in values.items() if value is not None}
    if "init_from" in values:       # the weights a run starts from are part of what it computes
        values["init_from_id"] = run_id(_init_from(run)[2])
    text = json.dumps(values, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _init_from(run: TrainConfig) -> tuple[str, str, TrainConfig]:
    """The grid, the label and the current configuration of the recorded run that ``run.init_from`` names, refused
    unless the grid has that run."""
    grid, _, label = run.init_from.partition(":")
    _checks.choice("init_from grid", grid, sorted(grids.GRIDS))
    source = grids.runs(grid)
    if label not in source:
        raise ValueError(f"init_from label {label!r} is not a run of grid {grid!r}; known: {sorted(source)}")
    return grid, label, source[label]


def summarise(results: dict[str, Any]) -> dict[str, Any]:
    """What a record keeps of one run's results: everything but the full per-step history, which is thinned to
    about HISTORY_POINTS training-loss points plus every evaluation."""
    _checks.mapping("results", results)
    history = results.get("history")
    if not isinstance(history, list) or not history or not all(
            isinstance(h, dict) and isinstance(h.get("step"), int) for h in history):
        raise ValueError("results must be what train() returns: a dict whose 'history' is a non-empty list of "
                         f"per-step dicts, got keys {sorted(results)}")
    # A round stride (1, 2, 5, 10, 20, 50, ...), so that round steps such as 100 are kept (see reproduce_prefix).
    every = next(stride * scale for scale in (10 ** k for k in range(12)) for stride in (1, 2, 5)
                 if stride * scale * HISTORY_POINTS >= len(history))
    kept = [h for i, h in enumerate(history) if h["step"] % every == 0 or i == 0 or len(h) > 4
            or i == len(history) - 1]
    return {**{k: v for k, v in results.items() if k != "history"}, "history": kept}


@contextmanager
def _one_thread() -> Iterator[None]:
    """Train with one thread (see the module docstring: results depend on the thread count), then restore it."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _placed(run: TrainConfig) -> TrainConfig:
    """Where a grid's run trains: a run of the cpu preset on the CPU, also on a machine with a GPU (its record is a
    one-thread CPU run that a page reproduces on the CPU); a GPU-scale run where ``run.device`` says, by default on
    :func:`posbook.device.default_device`."""
    return replace(run, device="cpu") if run.resolved().preset == "cpu" else run


def initial_weights(run: TrainConfig, records: str | Path | None = None) -> dict[str, torch.Tensor] | None:
    """The weights ``run`` starts from, for :func:`posbook.experiments.trainer.train`: None for a run without
    ``init_from``, else the state dict (on the CPU) of the recorded run it names, read by :func:`load_weights` from
    the folder ``records`` (default RECORDS), else from the weights posbook ships."""
    _checks.instance("run", run, TrainConfig)
    if run.init_from is None:
        return None
    grid, label, _ = _init_from(run)
    return load_weights(grid, label, records=records)[0].state_dict()


def _train_quietly(job: tuple[TrainConfig, Path | None, Path]) -> dict[str, Any]:
    """Train one run with one thread, starting from the ``init_from`` weights in the records folder of the job; with
    a path, also write the trained weights there (see :func:`weights_path`)."""
    run, weights, records = job
    start = initial_weights(run, records)
    with tempfile.TemporaryDirectory() as folder, _one_thread():
        results = summarise(train(replace(_placed(run), out_dir=folder if weights else None, progress=False), start))
        if weights is not None:
            state = torch.load(Path(folder) / "checkpoint.pt", weights_only=True)
            weights.parent.mkdir(parents=True, exist_ok=True)
            tmp = weights.with_suffix(".pt.tmp")
            torch.save({key: state[key] for key in MODEL_KEYS}, tmp)
            tmp.replace(weights)        # a reader sees the old file or the new one, never half
    return results


def train_many(runs: list[TrainConfig], jobs: int = 1, weights: list[Path | None] | None = None,
               records: str | Path | None = None) -> Iterator[dict[str, Any]]:
    """Train runs (one process per job, one thread each) and yield their summaries in order; ``weights`` gives,
    per run, where to write its trained weights (None: nowhere); a run that starts from a recorded run's weights
    (``init_from``) looks for them in ``records`` (default RECORDS), then among those posbook ships."""
    _check_run_list(runs)
    folder = _records_folder(records)
    _checks.size("jobs", jobs)
    if weights is not None:
        if not isinstance(weights, (list, tuple)) or len(weights) != len(runs):
            raise ValueError(f"weights must be None or a list of {len(runs)} paths or None (one per run), got "
                             f"{weights!r}")
        weights = [None if path is None else _checks.path(f"weights[{i}]", path) for i, path in enumerate(weights)]
    job_list = [(run, path, folder) for run, path in zip(runs, weights or [None] * len(runs))]
    if jobs == 1 or len(runs) < 2:
        for job in job_list:
            yield _train_quietly(job)
        return
    with multiprocessing.get_context("spawn").Pool(min(jobs, len(runs))) as pool:
        yield from pool.imap(_train_quietly, job_list, chunksize=1)


def _records_folder(records: Any) -> Path:
    """The ``records`` argument: a folder of records and weights; None: RECORDS."""
    return RECORDS if records is None else _checks.path("records", records)


def _out_option(folder: Path) -> list[str]:
    """The ``--out`` a suggested sweep command needs to reach ``folder`` (none for the shipped records)."""
    return [] if folder == SHIPPED_RECORDS else ["--out", str(folder)]


def weights_path(grid: str, label: str, records: str | Path | None = None) -> Path:
    """Where the weights of a recorded run live: ``<records>/weights/<grid>/<label>.pt`` (``records`` default
    RECORDS), with the label's slashes as ``__`` (``"RoPE/0"`` → ``RoPE__0.pt``)."""
    _checks.choice("grid", grid, sorted(grids.GRIDS))
    _checks.text("label", label)
    return _records_folder(records) / "weights" / grid / (label.replace("/", "__").replace(" ", "_") + ".pt")


def load_weights(grid: str, label: str, device: torch.device | str = "cpu",
                 records: str | Path | None = None) -> tuple[GPT, TrainConfig]:
    """The trained model of a recorded run (in eval mode) and its run config, loaded weights-only: from the folder
    ``records`` (default RECORDS), else from the weights posbook ships (a sweep into a folder of its own starts
    from those).

    The weights must have been trained for the run's current configuration in the grid: a stale file would
    otherwise be probed, or stretched, as if it were the recorded run."""
    _checks.choice("grid", grid, sorted(grids.GRIDS))
    _checks.text("label", label)
    device = _checks.device("device", device)
    folder = _records_folder(records)
    shipped = grids.GRID_WEIGHTS.get(grid, set())
    if label not in shipped:
        raise ValueError(f"label {label!r} of grid {grid!r} ships no weights; those that do: {sorted(shipped)}")
    places = list(dict.fromkeys([weights_path(grid, label, folder), weights_path(grid, label, SHIPPED_RECORDS)]))
    path = next((place for place in places if place.exists()), None)
    if path is None:
        raise ValueError(f"no weights at {' nor at '.join(map(str, places))}; run "
                         f"`{sweep_command(grid, *_out_option(folder))}` to write them")
    model, run = load_model(path, device)
    current = grids.runs(grid).get(label)
    if current is None or run_id(run) != run_id(current):
        raise ValueError(f"the weights at {path} were trained for another configuration of {label!r}; "
                         f"run `{sweep_command(grid, *_out_option(folder))}` to retrain it")
    return model.eval(), run


def record_path(grid: str, records: str | Path | None = None) -> Path:
    """Where a grid's record lives: ``<records>/<grid>.json`` (``records`` default RECORDS)."""
    _checks.choice("grid", grid, sorted(grids.GRIDS))
    return _records_folder(records) / f"{grid}.json"


def load_record(grid: str, records: str | Path | None = None) -> dict[str, dict[str, Any]]:
    """The recorded runs of a grid in the folder ``records`` (default RECORDS), by label ({} when the grid has
    never been recorded there)."""
    path = record_path(grid, records)
    return json.loads(path.read_text())["runs"] if path.exists() else {}


def stale_labels(grid: str, records: str | Path | None = None) -> list[str]:
    """Labels of the grid whose record in ``records`` (default RECORDS) is missing or was made for another
    configuration than the run's current one, or whose weights, for a run that keeps them, are not there."""
    record = load_record(grid, records)
    shipped = grids.GRID_WEIGHTS.get(grid, set())
    return [label for label, run in grids.runs(grid).items() if record.get(label, {}).get("id") != run_id(run)
            or (label in shipped and not weights_path(grid, label, records).exists())]


def run_grid(grid: str, *, retrain: bool = False, jobs: int = 1, save: bool = False, deadline: float | None = None,
             records: str | Path | None = None) -> dict[str, dict[str, Any]]:
    """Results of every run of the grid named ``grid``, by label: from the record when it matches, trained
    otherwise.

    ``retrain=True`` trains every run again. ``save=True`` writes the trained runs into the record (the command
    line does this; a chapter does not write into the installed package). ``records``: the folder the record and
    weights are read from and written to (default RECORDS, the ones posbook ships). ``deadline``: a
    ``time.monotonic()`` value after which no further run starts (one under way finishes); the runs left untrained
    are left out of the result, so a time-boxed sweep (tools/gpu_check.py) returns what it managed.
    """
    _checks.choice("grid", grid, sorted(grids.GRIDS))
    _checks.flag("retrain", retrain)         # before any work: retrain=1 would otherwise train the whole grid
    _checks.size("jobs", jobs)
    _checks.flag("save", save)
    if deadline is not None:
        _checks.number("deadline", deadline)
    folder = _records_folder(records)
    if save and folder.exists() and not folder.is_dir():
        raise ValueError(f"records {folder} is a file; give a folder (the record and weights go there)")
    runs = grids.runs(grid)
    record = load_record(grid, folder)
    todo = list(runs) if retrain else stale_labels(grid, folder)
    shipped = grids.GRID_WEIGHTS.get(grid, set())
    weights = [weights_path(grid, label, folder) if save and label in shipped else None for label in todo]
    trained = train_many([runs[label] for label in todo], jobs=jobs, weights=weights, records=folder)
    for label in todo:
        if deadline is not None and time.monotonic() > deadline:
            trained.close()
            break
        record[label] = {"id": run_id(runs[label]), **next(trained)}
        if save:        # after every run, so that an interrupted sweep keeps what it has done
            _write_record(grid, record, order=list(runs), records=folder)
    return _current_runs(record, runs)


def _current_runs(record: dict[str, dict[str, Any]], runs: dict[str, TrainConfig]) -> dict[str, dict[str, Any]]:
    """The entries of ``record`` made for the current configuration of a run of ``runs``, in the runs' order."""
    return {label: record[label] for label in runs if record.get(label, {}).get("id") == run_id(runs[label])}


def _check_run_list(runs: Any) -> list[TrainConfig]:
    """The ``runs`` argument of train_many: a list of TrainConfig."""
    if not isinstance(runs, (list, tuple)):
        raise TypeError(f"runs must be a list of TrainConfig, got {type(runs).__name__} {runs!r}")
    for i, run in enumerate(runs):
        _checks.instance(f"runs[{i}]", run, TrainConfig)
    return list(runs)


def _write_record(grid: str, record: dict[str, dict[str, Any]], order: list[str],
                  records: str | Path | None = None) -> None:
    path = record_path(grid, records)
    path.parent.mkdir(parents=True, exist_ok=True)
    ordered = {label: record[label] for label in order if label in record}
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"grid": grid, "runs": ordered}, indent=1) + "\n")
    tmp.replace(path)


def reproduce_prefix(grid: str, label: str, steps: int) -> dict[str, Any]:
    """Retrain the first ``steps`` steps of the recorded run ``label`` of the grid named ``grid``, on its own
    schedule, and compare the training loss at that step with the record's.

    Every batch and learning rate is a function of (seed, step) and the run's configuration, so a prefix of a run is
    the start of that very run: on the CPU that wrote the record the loss is bit-identical, on another it differs by
    rounding only (a few hundred steps later the models part ways, as two seeds do). Returns ``recorded``,
    ``fresh`` (training loss at ``steps``), ``abs_diff``, ``identical`` and the ``seconds`` it took.
    """
    record = load_record(grid)
    _checks.text("label", label)
    _checks.size("steps", steps)
    runs = grids.runs(grid)
    if label not in runs:
        raise ValueError(f"label {label!r} is not a run of the grid; known: {sorted(runs)}")
    if record.get(label, {}).get("id") != run_id(runs[label]):
        raise ValueError(f"run {label!r} has no record for its current configuration; run "
                         f"`{sweep_command(grid, *_out_option(RECORDS))}` first")
    kept = {h["step"]: h for h in record[label]["history"]}
    if steps not in kept:
        raise ValueError(f"steps={steps} is not a step the record of {label!r} kept; kept steps include "
                         f"{sorted(kept)[:8]}...")
    start = time.perf_counter()
    run = replace(_placed(runs[label]), out_dir=None, progress=False, stop_after=steps)
    weights = initial_weights(run)
    with _one_thread():
        fresh = train(run, weights)["history"][-1]
    recorded = kept[steps]["train_loss"]
    return {"recorded": recorded, "fresh": fresh["train_loss"], "abs_diff": abs(fresh["train_loss"] - recorded),
            "identical": fresh["train_loss"] == recorded, "seconds": time.perf_counter() - start}


def reevaluate(model, run: TrainConfig, recorded: dict[str, Any], val: torch.Tensor | None = None) -> float:
    """Score a model again under ``run``'s evaluation protocol, on the CPU, and return the largest absolute difference
    from ``recorded`` (a record's ``final`` metrics) over the metrics both hold: exact match at every size for the
    tasks; for text runs (which need ``val``), loss and bits per byte at every length over non-overlapping windows,
    the sliding-window protocol being left out as the costly part. Shipped weights re-evaluated give their record's
    numbers: a check that the weights are the recorded run's."""
    _checks.instance("model", model, GPT)
    run = _checks.instance("run", run, TrainConfig).resolved()
    old = flat_metrics(_checks.mapping("recorded", recorded))
    cpu = torch.device("cpu")
    with torch.no_grad():
        if run.task == "text":
            if val is None:
                raise ValueError("val (the corpus's validation bytes) is needed to re-evaluate a text run, got None")
            again = text_by_position(model, run, val, cpu)
        else:
            again = evaluate(model, run, None, cpu)
    model.eval()                     # evaluate leaves a model in training mode
    fresh = flat_metrics(again)
    shared = [key for key in fresh if key in old]
    if not shared:
        raise ValueError(f"recorded holds none of the metrics {sorted(fresh)}; pass a record's 'final' dict")
    return max(abs(fresh[key] - old[key]) for key in shared)


def flat_metrics(final: dict[str, Any]) -> dict[str, float]:
    """A run's final metrics as one flat dict: nested ones (accuracy per size, bits per byte per length) become
    ``"accuracy_by_size/8"`` and the like. Curves (lists, such as bits per byte by position) are left out."""
    flat = {}
    for key, value in _checks.mapping("final", final).items():
        if isinstance(value, list):
            continue
        if isinstance(value, dict):
            flat.update({f"{key}/{k}": float(_checks.number(f"final[{key!r}][{k!r}]", v)) for k, v in value.items()})
        else:
            flat[key] = float(_checks.number(f"final[{key!r}]", value))
    return flat


def gpu_records(grid: str) -> dict[str, dict[str, Any]]:
    """The GPU-scale record of ``grid`` when one ships and matches the grid's current runs, else {}: what a page
    shows beside its CPU record (never needed: the CPU record is what the page checks)."""
    name = grids.grid_name(grid, "colab")
    return _current_runs(load_record(name), grids.runs(name))
