"""Grids of training runs whose results are recorded once, shipped with posbook, and checked by retraining.

A figure of the experiment chapters can rest on fifty training runs: about an hour on two CPU cores, more than a
page can spend each time the book is built. So a grid is run once by the command line
(``python -m posbook.experiments sweep length_generalisation --jobs 2``), which writes the record
``posbook/experiments/records/<grid>.json`` (with ``--out DIR``, ``DIR/<grid>.json``): for every run its label, an
id that hashes the run's resolved configuration, the final metrics, a thinned history and the provenance (git
commit, torch version, device, seed, wall time). A chapter then calls :func:`run_grid`, which takes each run from
the record when the record holds the same configuration and trains it otherwise, and :func:`reproduce_prefix`,
which retrains the first steps of a recorded run on its own schedule and compares the training loss there with the
record, so that the page itself shows that the record is what this code computes; the runs whose models a page
probes ship as weights (``GRID_WEIGHTS``, :func:`load_weights`).

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
from typing import Any, Callable, Iterator

import torch

from .. import _checks
from .._cli import sweep_command
from .model import GPT
from .trainer import TrainConfig, evaluate, load_model, text_by_position, train

SHIPPED_RECORDS = Path(__file__).resolve().parent / "records"     # the records and weights posbook ships
# Where records and weights are read and written by default: the shipped ones (a test, or tools/gpu_check.py, may
# point it elsewhere; every function reads it when called).
RECORDS = SHIPPED_RECORDS
# Fields that do not change what a run computes: where it writes, whether it resumes, its progress bar.
_NOT_RESULTS = ("out_dir", "resume", "progress", "checkpoint_every", "stop_after", "device")
HISTORY_POINTS = 60          # training-loss points kept per run (every evaluation is kept as well)
GRID_PRESETS = ("cpu", "colab")   # the scales a grid can come in (see grid_name)


def run_id(run: TrainConfig) -> str:
    """A short hash of everything in the resolved run that decides its results."""
    values = asdict(_checks.instance("run", run, TrainConfig).resolved())
    for name in _NOT_RESULTS:
        values.pop(name)
    # Options added after a grid was recorded default to None and leave the ids of the runs that do not use them.
    values = {name: value for name, value in values.items() if value is not None}
    if "init_from" in values:       # the weights a run starts from are part of what it computes
        grid, _, label = values["init_from"].partition(":")
        _checks.choice("init_from grid", grid, sorted(GRIDS))
        source = GRIDS[grid]()
        if label not in source:
            raise ValueError(f"init_from label {label!r} is not a run of grid {grid!r}; known: {sorted(source)}")
        values["init_from_id"] = run_id(source[label])
    text = json.dumps(values, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


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


@contextmanager
def _records_at(folder: Path) -> Iterator[None]:
    """Point RECORDS at ``folder`` for the duration. train() finds the weights a run starts from (``init_from``)
    through :func:`load_weights`, which reads RECORDS: a job of a sweep into another folder, in this process or in
    a spawned one, must look there too."""
    global RECORDS
    previous, RECORDS = RECORDS, folder
    try:
        yield
    finally:
        RECORDS = previous


def _train_quietly(job: tuple[TrainConfig, Path | None, Path]) -> dict[str, Any]:
    """Train one run with one thread, reading ``init_from`` weights from the records folder of the job; with a
    path, also write the trained weights there (see :func:`weights_path`)."""
    run, weights, records = job
    with tempfile.TemporaryDirectory() as folder, _one_thread(), _records_at(records):
        results = summarise(train(replace(_placed(run), out_dir=folder if weights else None, progress=False)))
        if weights is not None:
            state = torch.load(Path(folder) / "checkpoint.pt", weights_only=True)
            weights.parent.mkdir(parents=True, exist_ok=True)
            tmp = weights.with_suffix(".pt.tmp")
            torch.save({key: state[key] for key in ("model", "config", "run")}, tmp)
            tmp.replace(weights)
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


def _out_option() -> list[str]:
    """The ``--out`` a suggested sweep command needs to reach RECORDS (none for the shipped records)."""
    return [] if RECORDS == SHIPPED_RECORDS else ["--out", str(RECORDS)]


def weights_path(grid: str, label: str, records: str | Path | None = None) -> Path:
    """Where the weights of a recorded run live: ``<records>/weights/<grid>/<label>.pt`` (``records`` default
    RECORDS), with the label's slashes as ``__`` (``"RoPE/0"`` → ``RoPE__0.pt``)."""
    _checks.choice("grid", grid, sorted(GRIDS))
    _checks.text("label", label)
    return _records_folder(records) / "weights" / grid / (label.replace("/", "__").replace(" ", "_") + ".pt")


def load_weights(grid: str, label: str, runs: dict[str, TrainConfig] | None = None,
                 device: torch.device | str = "cpu"):
    """The trained model of a recorded run (in eval mode) and its run config, loaded weights-only: from RECORDS,
    else from the weights posbook ships (a sweep into a folder of its own starts from those).

    With ``runs`` (the grid's current runs), the weights must have been trained for the run's current
    configuration; otherwise a stale file would be probed as if it were the recorded run."""
    _checks.choice("grid", grid, sorted(GRIDS))
    _checks.text("label", label)
    if runs is not None:
        _check_runs(runs)
    device = _checks.device("device", device)
    if label not in GRID_WEIGHTS.get(grid, ()):
        raise ValueError(f"label {label!r} of grid {grid!r} ships no weights; those that do: "
                         f"{sorted(GRID_WEIGHTS.get(grid, ()))}")
    places = list(dict.fromkeys([weights_path(grid, label), weights_path(grid, label, SHIPPED_RECORDS)]))
    path = next((place for place in places if place.exists()), None)
    if path is None:
        raise ValueError(f"no weights at {' nor at '.join(map(str, places))}; run "
                         f"`{sweep_command(grid, *_out_option())}` to write them")
    model, run = load_model(path, device)
    if runs is not None and run_id(run) != run_id(runs[label]):
        raise ValueError(f"the weights at {path} were trained for another configuration of {label!r}; "
                         f"run `{sweep_command(grid, *_out_option())}` to retrain it")
    return model.eval(), run


def record_path(grid: str, records: str | Path | None = None) -> Path:
    """Where a grid's record lives: ``<records>/<grid>.json`` (``records`` default RECORDS)."""
    _checks.choice("grid", grid, sorted(GRIDS))
    return _records_folder(records) / f"{grid}.json"


def load_record(grid: str, records: str | Path | None = None) -> dict[str, dict[str, Any]]:
    """The recorded runs of a grid in the folder ``records`` (default RECORDS), by label ({} when the grid has
    never been recorded there)."""
    path = record_path(grid, records)
    return json.loads(path.read_text())["runs"] if path.exists() else {}


def stale_labels(grid: str, runs: dict[str, TrainConfig], records: str | Path | None = None) -> list[str]:
    """Labels of the grid whose record in ``records`` (default RECORDS) is missing or was made for another
    configuration, or whose weights, for a run that keeps them, are not there."""
    record = load_record(grid, records)
    _check_runs(runs)
    shipped = GRID_WEIGHTS.get(grid, set())
    return [label for label, run in runs.items() if record.get(label, {}).get("id") != run_id(run)
            or (label in shipped and not weights_path(grid, label, records).exists())]


def run_grid(grid: str, runs: dict[str, TrainConfig], *, retrain: bool = False, jobs: int = 1,
             save: bool = False, deadline: float | None = None,
             records: str | Path | None = None) -> dict[str, dict[str, Any]]:
    """Results of every run of a grid, by label: from the record when it matches, trained otherwise.

    ``retrain=True`` trains every run again. ``save=True`` writes the trained runs into the record (the command
    line does this; a chapter does not write into the installed package). ``records``: the folder the record and
    weights are read from and written to (default RECORDS, the ones posbook ships). ``deadline``: a
    ``time.monotonic()`` value after which no further run starts (one under way finishes); the runs left untrained
    are left out of the result, so a time-boxed sweep (tools/gpu_check.py) returns what it managed.
    """
    _checks.choice("grid", grid, sorted(GRIDS))
    _check_runs(runs)
    _checks.flag("retrain", retrain)         # before any work: retrain=1 would otherwise train the whole grid
    _checks.size("jobs", jobs)
    _checks.flag("save", save)
    if deadline is not None:
        _checks.number("deadline", deadline)
    folder = _records_folder(records)
    if save and folder.exists() and not folder.is_dir():
        raise ValueError(f"records {folder} is a file; give a folder (the record and weights go there)")
    record = load_record(grid, folder)
    todo = list(runs) if retrain else stale_labels(grid, runs, folder)
    shipped = GRID_WEIGHTS.get(grid, set())
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


def _check_runs(runs: Any) -> dict[str, TrainConfig]:
    """The ``runs`` argument: a non-empty dict of label -> TrainConfig."""
    if not isinstance(runs, dict) or not runs:
        raise ValueError(f"runs must be a non-empty dict of label -> TrainConfig, got {type(runs).__name__}")
    for label, run in runs.items():
        _checks.text("runs label", label)
        _checks.instance(f"runs[{label!r}]", run, TrainConfig)
    return runs


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


def _check_recorded(grid: str, record: dict, runs: dict[str, TrainConfig], label: str) -> None:
    """A label to retrain must be a run of the grid whose record matches its current configuration."""
    if label not in runs:
        raise ValueError(f"label {label!r} is not a run of the grid; known: {sorted(runs)}")
    if record.get(label, {}).get("id") != run_id(runs[label]):
        raise ValueError(f"run {label!r} has no record for its current configuration; run "
                         f"`{sweep_command(grid, *_out_option())}` first")


def reproduce_prefix(grid: str, runs: dict[str, TrainConfig], label: str, steps: int) -> dict[str, Any]:
    """Retrain the first ``steps`` steps of a recorded run, on its own schedule, and compare the training loss at
    that step with the record's.

    Every batch and learning rate is a function of (seed, step) and the run's configuration, so a prefix of a run is
    the start of that very run: on the CPU that wrote the record the loss is bit-identical, on another it differs by
    rounding only (a few hundred steps later the models part ways, as two seeds do). Returns ``recorded``,
    ``fresh`` (training loss at ``steps``), ``abs_diff``, ``identical`` and the ``seconds`` it took.
    """
    record = load_record(grid)
    _check_runs(runs)
    _checks.text("label", label)
    _checks.size("steps", steps)
    _check_recorded(grid, record, runs, label)
    kept = {h["step"]: h for h in record[label]["history"]}
    if steps not in kept:
        raise ValueError(f"steps={steps} is not a step the record of {label!r} kept; kept steps include "
                         f"{sorted(kept)[:8]}...")
    start = time.perf_counter()
    with _one_thread():
        fresh = train(replace(_placed(runs[label]), out_dir=None, progress=False, stop_after=steps))["history"][-1]
    recorded = kept[steps]["train_loss"]
    return {"recorded": recorded, "fresh": fresh["train_loss"], "abs_diff": abs(fresh["train_loss"] - recorded),
            "identical": fresh["train_loss"] == recorded, "seconds": time.perf_counter() - start}


def reevaluate(model, run: TrainConfig, recorded: dict[str, Any], val: torch.Tensor | None = None) -> float:
    """Score a model again under ``run``'s evaluation protocol, on the CPU, and return the largest absolute difference from
    ``recorded`` (a record's ``final`` metrics) over the metrics both hold: exact match at every size for the tasks;
    for text runs (which need ``val``), loss and bits per byte at every length over non-overlapping windows, the
    sliding-window protocol being left out as the costly part. Shipped weights re-evaluated give their record's
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


# ---------------------------------------------------------------------------------------------------------------
# The grids behind the experiment chapters. Each is a function returning {label: TrainConfig}, so that the chapter
# and the command line build exactly the same runs.

LENGTH_SCHEMES: dict[str, dict[str, Any]] = {
    # Kazemnejad et al. (2023) compare these five; p-RoPE (Barbero et al. 2025) is the sixth. Their APE is the
    # sinusoidal table; added at unit amplitude to embeddings initialised at std 0.02 it drowns the tokens and
    # the model does not learn to copy at all, so the grid's APE is GPT-2's learned table, and the sinusoidal one
    # is run on copy alone ("copy/APE (sinusoidal)/seed") to show that.
    "APE": dict(pattern="N", absolute_positions="learned"),
    "T5": dict(pattern="T"),
    "ALiBi": dict(pattern="A"),
    "RoPE": dict(pattern="R"),
    "NoPE": dict(pattern="N"),
    "p-RoPE": dict(pattern="P"),
}
LENGTH_TASKS = ("copy", "reverse", "addition")
COPY_VARIANT_SCHEMES = ("NoPE", "T5", "ALiBi", "RoPE")
COPY_VARIANTS: dict[str, dict[str, Any]] = {
    "copy-L16": dict(train_max_size=16),                        # train on sizes 1..16 (eval to 64)
    "copy-4x-steps": dict(steps=2400, eval_every=2400),         # 2,400 steps instead of 600
    "copy-wide": dict(model=dict(n_embd=128)),                  # 4 x 128 instead of 4 x 64
    "copy-distinct": dict(task="copy-distinct"),                # n distinct symbols of 16 (eval to 16)
}
SEEDS = (0, 1, 2)


def length_generalisation() -> dict[str, TrainConfig]:
    """Chapter 15: six position schemes × copy, reverse, addition × three seeds, cpu preset, trained on sizes
    1..8 and evaluated to 32 (labels like ``"copy/RoPE/0"``)."""
    runs = {}
    for task in LENGTH_TASKS:
        for scheme, model in LENGTH_SCHEMES.items():
            for seed in SEEDS:
                runs[f"{task}/{scheme}/{seed}"] = TrainConfig(task=task, preset="cpu", model=dict(model), seed=seed)
    for seed in SEEDS:
        runs[f"copy/APE (sinusoidal)/{seed}"] = TrainConfig(
            task="copy", preset="cpu", model=dict(pattern="N", absolute_positions="sinusoidal"), seed=seed)
    # What copy needs to generalise past L at this scale, one change at a time against copy/<scheme>/0 (seed 0):
    # a longer training range, four times the steps, a wider model, and a task format in which content alone
    # addresses the next symbol (distinct symbols, so an induction head copies at any length).
    for variant, change in COPY_VARIANTS.items():
        for scheme in COPY_VARIANT_SCHEMES:
            runs[f"{variant}/{scheme}/0"] = TrainConfig(**{"task": "copy", "preset": "cpu", "seed": 0, **change,
                                                           "model": {**LENGTH_SCHEMES[scheme], **change.get("model", {})}})
    # The paper's addition protocol (sums of up to L = 8 digits) at this model size: not learned even in-distribution.
    for scheme in ("RoPE", "NoPE"):
        runs[f"addition-L8/{scheme}/0"] = TrainConfig(task="addition", preset="cpu", model=dict(LENGTH_SCHEMES[scheme]),
                                                      train_max_size=8, steps=1500, eval_every=1500)
    return runs


# Seed 002's nanochat table trains at 2,048 tokens with local windows of 512 (a quarter of the context), then 256
# and 128; the cpu preset trains at 128 bytes, so the same fractions are windows of 32, 16 and 8. Every variant
# has QK-Norm in every layer, as nanochat does, unless its label says otherwise.
COMPARISON_WINDOW = 32
POSITION_VARIANTS: dict[str, dict[str, Any]] = {
    "RoPE (SSSL)": dict(pattern="SSSR", window=COMPARISON_WINDOW, qk_norm="all"),
    "NoPE, no window": dict(pattern="N", qk_norm="all"),
    "p-RoPE": dict(pattern="P", qk_norm="all"),
    "iRoPE": dict(pattern="SSSN", window=COMPARISON_WINDOW, qk_norm="all"),
    "iRoPE, no QK-Norm in NoPE": dict(pattern="SSSN", window=COMPARISON_WINDOW, qk_norm="rope"),
    "iRoPE, window 16": dict(pattern="SSSN", window=COMPARISON_WINDOW // 2, qk_norm="all"),
    "iRoPE, window 8": dict(pattern="SSSN", window=COMPARISON_WINDOW // 4, qk_norm="all"),
    "iRoPE, LSSS": dict(pattern="NSSS", window=COMPARISON_WINDOW, qk_norm="all"),
    "iRoPE, LSSS + scaling": dict(pattern="NSSS", window=COMPARISON_WINDOW, qk_norm="all", logit_scaling="constant"),
}


def position_comparison() -> dict[str, TrainConfig]:
    """Chapter 18: the nine variants of seed 002's nanochat table on the byte corpus, cpu preset at 128 bytes, three
    seeds, bits per byte at the training length and at 2× and 4× (labels like ``"iRoPE/0"``). 800 steps, as in the
    extrapolation grid: at the preset's 150 the models sit above 3 bits per byte and most variants inside the
    baseline's seed spread."""
    return {f"{name}/{seed}": TrainConfig(task="text", preset="cpu", model=dict(model), seed=seed, steps=800,
                                          warmup=40, eval_every=800, eval_batches=8, corpus_bytes=6_000_000)
            for name, model in POSITION_VARIANTS.items() for seed in SEEDS}


# Chapter 19's retrieval models: passkey haystacks of up to 16 filler tokens in training, tested to 64. The
# iRoPE variants' local layers see 8 tokens, so a needle deeper than that is reachable only through the global
# NoPE layer.
PROBE_WINDOW = 8
PROBE_VARIANTS: dict[str, dict[str, Any]] = {
    "RoPE": dict(pattern="R"),
    "NoPE": dict(pattern="N"),
    "ALiBi": dict(pattern="A"),
    "iRoPE": dict(pattern="SSSN", window=PROBE_WINDOW, qk_norm="all"),
    "iRoPE, no QK-Norm in NoPE": dict(pattern="SSSN", window=PROBE_WINDOW, qk_norm="rope"),
}


def long_context() -> dict[str, TrainConfig]:
    """Chapter 19: passkey retrieval for five schemes × three seeds, trained on haystacks of 1..16 filler tokens
    for 600 steps, evaluated to 64 (labels like ``"iRoPE/0"``)."""
    return {f"{name}/{seed}": TrainConfig(task="passkey", preset="cpu", model=dict(model), seed=seed,
                                          train_max_size=16, steps=600, eval_every=600,
                                          eval_sizes=[4, 8, 12, 16, 20, 24, 32, 40, 48, 64])
            for name, model in PROBE_VARIANTS.items() for seed in SEEDS}


# Chapter 16, "Train short, test long": byte models trained at T = 64 and read to 16T. 800 steps of 32 windows (one
# thread, about 4 minutes a run with the evaluation) take RoPE to about 2 bits per byte at T, far below the
# 4.5-bit unigram rate, where what happens past T is already visible. Local windows are T/4, the fraction of
# chapter 18's nanochat windows.
EXTRAPOLATION_T = 64
EXTRAPOLATION_WINDOW = EXTRAPOLATION_T // 4
EXTRAPOLATION_SCHEMES: dict[str, dict[str, Any]] = {
    "APE-sinusoidal": dict(pattern="N", absolute_positions="sinusoidal"),
    "APE-learned": dict(pattern="N", absolute_positions="learned"),
    "RoPE": dict(pattern="R"),
    "NoPE": dict(pattern="N"),
    "T5": dict(pattern="T"),                          # T5's buckets: log-spaced up to distance 128 = 2T
    "T5-64": dict(pattern="T", t5_max_distance=EXTRAPOLATION_T),   # ... up to T: every bucket is trained
    "ALiBi": dict(pattern="A"),
    "p-RoPE": dict(pattern="P"),
    "partial-RoPE": dict(pattern="H"),
    "iRoPE": dict(pattern="SSSN", window=EXTRAPOLATION_WINDOW),
    "RoPE-window": dict(pattern="S", window=EXTRAPOLATION_WINDOW),
}


# The GPU-scale version (``sweep extrapolation --preset colab``): the colab preset's model (8 layers × 384) at
# T = 256 bytes, read to 16T = 4,096, one seed of seven schemes, 600 steps of 32 windows (4.9 million bytes, three
# times the CPU runs' 1.6 million), sized so that both GPU grids train in about two minutes on one H200.
COLAB_EXTRAPOLATION_T = 256
COLAB_EXTRAPOLATION_SCHEMES = ("APE-learned", "RoPE", "NoPE", "T5", "ALiBi", "p-RoPE", "iRoPE")
COLAB_SEEDS = (0,)


def extrapolation_run(model: dict[str, Any], seed: int, preset: str = "cpu") -> TrainConfig:
    """One run of the extrapolation grid: the shared training and evaluation protocol with a model's fields, at the
    CPU scale (``preset="cpu"``: T = 64, 4 × 128 model, 800 steps) or the GPU scale (``"colab"``: T = 256, the colab
    preset's 8 × 384 model, 600 steps)."""
    _checks.mapping("model", model)
    _checks.choice("preset", preset, GRID_PRESETS)
    if preset == "cpu":
        t, steps, corpus_bytes = EXTRAPOLATION_T, 800, 6_000_000
    else:
        t, steps, corpus_bytes = COLAB_EXTRAPOLATION_T, 600, 20_000_000
        # Local windows stay a quarter of the training length.
        if "window" in model:
            model = dict(model, window=t // 4)
    return TrainConfig(task="text", preset=preset, model=dict(model), seed=seed, seq_len=t, batch_size=32,
                       steps=steps, warmup=40, eval_every=steps, eval_batches=8, corpus_bytes=corpus_bytes,
                       eval_seq_lens=[t, 2 * t, 4 * t, 8 * t, 16 * t], eval_position_bin=t // 4, eval_stride=t // 2)


def extrapolation(preset: str = "cpu") -> dict[str, TrainConfig]:
    """Train short, test long: at the CPU scale, eleven position schemes × three seeds trained at T = 64 bytes; at
    the GPU scale (``preset="colab"``), seven schemes × one seed at T = 256; both read to 16T by both evaluation
    protocols (labels like ``"RoPE/0"``)."""
    _checks.choice("preset", preset, GRID_PRESETS)
    schemes = EXTRAPOLATION_SCHEMES if preset == "cpu" else {
        name: EXTRAPOLATION_SCHEMES[name] for name in COLAB_EXTRAPOLATION_SCHEMES}
    seeds = SEEDS if preset == "cpu" else COLAB_SEEDS
    return {f"{scheme}/{seed}": extrapolation_run(model, seed, preset)
            for scheme, model in schemes.items() for seed in seeds}


# Chapter 17, "Stretching a trained model": the RoPE models of the extrapolation grid, their rotation replaced by each
# context-extension method at each factor, read without training (finetune_steps 0) and after a short fine-tune
# at factor × T: 40 steps, 5% of the pre-training steps, at a tenth of its peak learning rate, the same bytes per
# step (32·T/factor windows of factor·T).
EXTENSION_FACTORS = (2, 4, 8, 16)
FINETUNE_STEPS = 40
FINETUNED_METHODS = ("none", "PI", "NTK", "YaRN")
FINETUNE_FACTORS = (4, 16)


def _stretched(grid: str, label: str, trained_length: int, factors: tuple[int, ...],
               finetunes: dict[tuple[str, int], dict[str, Any]]) -> dict[str, TrainConfig]:
    """The runs that put every context-extension method on the shipped weights of ``grid:label``: evaluation only
    at each factor (``none`` once, at factor 1), labelled ``<method>/<factor>/0``, and the fine-tunes, labelled
    ``<method>/<factor>/<steps>``, with ``finetunes[(method, factor)]`` the fields they change (``steps`` included)."""
    from .extension import EXTENSION_METHODS, extension_rope
    from .trainer import gpt_config
    source = GRIDS[grid]()[label]
    config = gpt_config(source.resolved())

    def stretched(method: str, factor: int, **fields: Any) -> TrainConfig:
        model = dict(source.model, rope=extension_rope(config, method, factor, trained_length))
        return replace(source, model=model, init_from=f"{grid}:{label}", **fields)

    runs = {f"{method}/{factor}/0": stretched(method, factor, steps=0, warmup=0, eval_every=1)
            for method in EXTENSION_METHODS for factor in ((1,) if method == "none" else factors)}
    runs |= {f"{method}/{factor}/{fields['steps']}": stretched(method, factor, **fields)
             for (method, factor), fields in finetunes.items()}
    return runs


def context_extension(preset: str = "cpu") -> dict[str, TrainConfig]:
    """Labels ``<method>/<factor>/<finetune_steps>/<seed>`` (``"YaRN/4/0/1"``: YaRN at factor 4, no training,
    seed 1's RoPE model); ``none`` appears with factor 1 untrained, and as the fine-tuning control. At the GPU scale
    (``preset="colab"``) the same methods, factors and fine-tunes on the GPU-scale RoPE model (T = 256, one seed)."""
    _checks.choice("preset", preset, GRID_PRESETS)
    t, seeds = (EXTRAPOLATION_T, SEEDS) if preset == "cpu" else (COLAB_EXTRAPOLATION_T, COLAB_SEEDS)
    source_grid = grid_name("extrapolation", preset)
    source = GRIDS[source_grid]()["RoPE/0"].resolved()
    finetunes = {(method, factor): dict(steps=FINETUNE_STEPS, warmup=4, eval_every=FINETUNE_STEPS, lr=source.lr / 10,
                                        seq_len=factor * t, batch_size=source.batch_size // factor,
                                        eval_batches=source.eval_batches * factor)
                 for method in FINETUNED_METHODS for factor in FINETUNE_FACTORS}
    return {f"{name}/{seed}": run for seed in seeds
            for name, run in _stretched(source_grid, f"RoPE/{seed}", t, EXTENSION_FACTORS, finetunes).items()}


# Chapter 17's passkey section: chapter 19's RoPE retrieval models (haystacks of up to 16 filler tokens, 32 tokens
# in all) stretched to the haystacks of 64 they fail on, without training and after 30 steps (5% of their 600) on
# haystacks of 1..64 at a tenth of the peak learning rate, half the batch (about the same tokens per step).
PASSKEY_TRAINED_LENGTH = 32                 # tasks.sequence_length("passkey", 16)
PASSKEY_FACTORS = (2, 4)
PASSKEY_FINETUNE_STEPS = 30
PASSKEY_FINETUNE_FACTOR = 4


def passkey_extension() -> dict[str, TrainConfig]:
    """Labels ``<method>/<factor>/<finetune_steps>/<seed>`` as in :func:`context_extension`, on the RoPE models of
    :func:`long_context`."""
    source = long_context()["RoPE/0"].resolved()
    finetunes = {(method, PASSKEY_FINETUNE_FACTOR): dict(
        steps=PASSKEY_FINETUNE_STEPS, warmup=3, eval_every=PASSKEY_FINETUNE_STEPS, lr=source.lr / 10,
        train_max_size=max(source.eval_sizes), batch_size=source.batch_size // 2, eval_batches=2 * source.eval_batches)
        for method in FINETUNED_METHODS}
    return {f"{name}/{seed}": run for seed in SEEDS
            for name, run in _stretched("long_context", f"RoPE/{seed}", PASSKEY_TRAINED_LENGTH, PASSKEY_FACTORS,
                                        finetunes).items()}


GRIDS: dict[str, Callable[[], dict[str, TrainConfig]]] = {
    "extrapolation": extrapolation,
    "context_extension": context_extension,
    "length_generalisation": length_generalisation,
    "position_comparison": position_comparison,
    "long_context": long_context,
    "passkey_extension": passkey_extension,
    # GPU-scale versions, trained by `sweep GRID --preset colab` (tools/gpu_check.py trains them on one GPU). Their
    # records are optional: a page shows them beside the CPU records when they ship, and never needs them.
    "extrapolation.colab": lambda: extrapolation("colab"),
    "context_extension.colab": lambda: context_extension("colab"),
}
"""Every grid by name. A grid's name is its chapter's grid, with ``.<preset>`` appended for a scale other than
the CPU's (``"extrapolation.colab"``); the record and shipped weights follow the name.

:meta hide-value:
"""


def grid_name(grid: str, preset: str = "cpu") -> str:
    """The name of ``grid`` at the scale of ``preset``: ``grid`` itself for ``"cpu"``, ``"grid.preset"``
    otherwise (``grid_name("extrapolation", "colab") == "extrapolation.colab"``), refused when that grid has no
    version at that scale."""
    _checks.choice("grid", grid, sorted(name for name in GRIDS if "." not in name))
    _checks.choice("preset", preset, GRID_PRESETS)
    name = grid if preset == "cpu" else f"{grid}.{preset}"
    if name not in GRIDS:
        scaled = sorted(name.partition(".")[0] for name in GRIDS if name.endswith(f".{preset}"))
        raise ValueError(f"grid {grid!r} has no {preset} version; grids with one: {scaled}")
    return name


def gpu_records(grid: str) -> dict[str, dict[str, Any]]:
    """The GPU-scale record of ``grid`` when one ships and matches the grid's current runs, else {}: what a page
    shows beside its CPU record (never needed: the CPU record is what the page checks)."""
    name = grid_name(grid, "colab")
    record = load_record(name)
    return _current_runs(record, GRIDS[name]())


# The recorded runs whose trained weights ship with posbook, for the pages that probe or stretch trained models
# (3.3 MB for a text model, 0.8 MB for a copy or passkey model). The GPU-scale model (57 MB) ships none: a GPU sweep
# writes the weights context_extension.colab starts from where it runs.
GRID_WEIGHTS: dict[str, set[str]] = {
    "extrapolation": {"RoPE/0", "RoPE/1", "RoPE/2", "APE-learned/0"},
    "length_generalisation": {*(f"copy/{scheme}/0" for scheme in LENGTH_SCHEMES), "copy/NoPE/1"},
    "long_context": {"RoPE/0", "RoPE/1", "RoPE/2", *(f"{variant}/0" for variant in PROBE_VARIANTS)},
    "extrapolation.colab": {"RoPE/0"},
}
