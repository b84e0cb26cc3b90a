"""Grids of training runs whose results are recorded once, shipped with posbook, and checked by retraining.

A figure of the experiment chapters can rest on fifty training runs: about an hour on two CPU cores, more than a
page can spend each time the book is built. So a grid is run once by the command line
(``python -m posbook.experiments sweep length_generalisation --jobs 2``), which writes the record
``posbook/experiments/records/<grid>.json``: for every run its label, an id that hashes the run's resolved
configuration, the final metrics, a thinned history and the provenance (git commit, torch version, device, seed,
wall time). A chapter then calls :func:`run_grid`, which takes each run from the record when the record holds
the same configuration and trains it otherwise, and :func:`reproduce`, which retrains chosen runs and compares
them with the record, so that the page itself shows that the record is what this code computes.

Training on a CPU is deterministic for a fixed number of threads, but not across thread counts for every
layer: the additive-bias schemes (ALiBi, T5) go through kernels whose reductions split by thread, and 600 steps
turn a last-bit difference into a different model (measured: copy/ALiBi/0 retrained with two threads differs
from its one-thread record by 0.27 in exact match at one size). So every run here, recorded or reproduced,
trains with one thread; a retrained run then equals its record exactly on the machine that wrote the record,
and :func:`reproduce` reports the differences instead of assuming them zero, for another CPU may round
differently.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import tempfile
from contextlib import contextmanager
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

from .. import _checks
from .trainer import TrainConfig, load_model, train

RECORDS = Path(__file__).resolve().parent / "records"
# Fields that do not change what a run computes: where it writes, whether it resumes, its progress bar.
_NOT_RESULTS = ("out_dir", "resume", "progress", "checkpoint_every")
HISTORY_POINTS = 60          # training-loss points kept per run (every evaluation is kept as well)


def run_id(run: TrainConfig) -> str:
    """A short hash of everything in the resolved run that decides its results."""
    values = asdict(run.resolved())
    for name in _NOT_RESULTS:
        values.pop(name)
    text = json.dumps(values, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def summarise(results: dict[str, Any]) -> dict[str, Any]:
    """What a record keeps of one run's results: everything but the full per-step history, which is thinned to
    about HISTORY_POINTS training-loss points plus every evaluation."""
    history = results["history"]
    every = max(1, len(history) // HISTORY_POINTS)
    kept = [h for i, h in enumerate(history) if i % every == 0 or len(h) > 4 or i == len(history) - 1]
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


def _train_quietly(run: TrainConfig) -> dict[str, Any]:
    with _one_thread():
        return summarise(train(replace(run, out_dir=None, progress=False)))


def train_many(runs: list[TrainConfig], jobs: int = 1) -> Iterator[dict[str, Any]]:
    """Train runs (one process per job, one thread each) and yield their summaries in order."""
    _checks.number("jobs", jobs, integer=True, positive=True)
    if jobs == 1 or len(runs) < 2:
        for run in runs:
            yield _train_quietly(run)
        return
    with multiprocessing.get_context("spawn").Pool(min(jobs, len(runs))) as pool:
        yield from pool.imap(_train_quietly, runs, chunksize=1)


def record_path(grid: str) -> Path:
    return RECORDS / f"{grid}.json"


def load_record(grid: str) -> dict[str, dict[str, Any]]:
    """The recorded runs of a grid, by label ({} when the grid has never been recorded)."""
    path = record_path(grid)
    return json.loads(path.read_text())["runs"] if path.exists() else {}


def stale_labels(grid: str, runs: dict[str, TrainConfig]) -> list[str]:
    """Labels of the grid whose record is missing or was made for another configuration."""
    record = load_record(grid)
    return [label for label, run in runs.items() if record.get(label, {}).get("id") != run_id(run)]


def run_grid(grid: str, runs: dict[str, TrainConfig], *, retrain: bool = False, jobs: int = 1,
             save: bool = False) -> dict[str, dict[str, Any]]:
    """Results of every run of a grid, by label: from the record when it matches, trained otherwise.

    ``retrain=True`` trains every run again. ``save=True`` writes the trained runs into the record (the command
    line does this; a chapter does not write into the installed package).
    """
    _checks.choice("grid", grid, sorted(GRIDS))
    _checks.number("jobs", jobs, integer=True, positive=True)
    if not isinstance(runs, dict) or not runs:
        raise ValueError(f"runs must be a non-empty dict of label -> TrainConfig, got {type(runs).__name__}")
    record = load_record(grid)
    todo = list(runs) if retrain else stale_labels(grid, runs)
    for label, summary in zip(todo, train_many([runs[label] for label in todo], jobs=jobs)):
        record[label] = {"id": run_id(runs[label]), **summary}
        if save:        # after every run, so that an interrupted sweep keeps what it has done
            _write_record(grid, record, order=list(runs))
    return {label: record[label] for label in runs}


def _write_record(grid: str, record: dict[str, dict[str, Any]], order: list[str]) -> None:
    RECORDS.mkdir(exist_ok=True)
    ordered = {label: record[label] for label in order if label in record}
    tmp = record_path(grid).with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"grid": grid, "runs": ordered}, indent=1) + "\n")
    tmp.replace(record_path(grid))


def reproduce(grid: str, runs: dict[str, TrainConfig], labels: list[str]) -> dict[str, dict[str, Any]]:
    """Retrain the chosen runs and compare each with its record.

    Returns, per label: the fresh summary (``results``), the trained ``model`` (in eval mode, for probes), the
    largest absolute difference of any final metric from the record (loss, bits per byte, or accuracy at any size:
    ``max_abs_diff``), whether every one of them equals the record to the last bit (``identical``), and how far
    each fresh metric lies outside the range the recorded seeds of the same run span (``beyond_seeds``: metric →
    distance, 0 inside; see :func:`seed_range`), and which of those metrics measure what the run trained on
    (``in_training``, see :func:`in_training_range`).

    On the CPU that wrote the record, a run retrained with the same thread count is bit-identical. On another CPU
    (other vector instructions, other matrix kernels) the first steps round differently and a few hundred steps
    make that another model, as far from the record as another seed: ``beyond_seeds`` is the comparison that
    holds on any CPU.
    """
    record = load_record(grid)
    for label in labels:
        if label not in runs:
            raise ValueError(f"labels entry {label!r} is not a run of the grid; known: {sorted(runs)}")
        if record.get(label, {}).get("id") != run_id(runs[label]):
            raise ValueError(f"run {label!r} has no record for its current configuration; run "
                             f"`python -m posbook.experiments sweep {grid}` first")
    out = {}
    for label in labels:
        with tempfile.TemporaryDirectory() as folder, _one_thread():
            fresh = summarise(train(replace(runs[label], out_dir=folder, progress=False)))
            model, _ = load_model(Path(folder) / "checkpoint.pt")
        old, new = flat_metrics(record[label]["final"]), flat_metrics(fresh["final"])
        diffs = [abs(old[key] - new[key]) for key in old]
        envelope = seed_range(record, label)
        beyond = {key: max(lo - new[key], new[key] - hi, 0.0) for key, (lo, hi) in envelope.items()}
        out[label] = {"results": fresh, "model": model.eval(), "max_abs_diff": max(diffs), "identical": old == new,
                      "beyond_seeds": beyond, "in_training": {key for key in beyond if in_training_range(runs[label], key)}}
    return out


def seed_range(record: dict[str, dict[str, Any]], label: str) -> dict[str, tuple[float, float]]:
    """(min, max) of every final metric over the recorded runs that differ from ``label`` only in the seed, its
    last part (``"copy/ALiBi/0"`` → every ``"copy/ALiBi/<seed>"`` in the record); a label without a seed part
    spans itself."""
    head, _, tail = label.rpartition("/")
    names = ([name for name in record if name.rpartition("/")[0] == head and name.rpartition("/")[2].isdigit()]
             if tail.isdigit() else [label] * (label in record))
    if not names:
        raise ValueError(f"the record has no run {head}/<seed>; labels look like {sorted(record)[:3]}")
    finals = [flat_metrics(record[name]["final"]) for name in names]
    return {key: (min(f[key] for f in finals), max(f[key] for f in finals)) for key in finals[0]}


def in_training_range(run: TrainConfig, metric: str) -> bool:
    """Whether a metric of :func:`flat_metrics` measures what the run trained on: the training and validation loss,
    accuracy at a size the run trained on (≤ ``train_max_size``), bits per byte at lengths up to ``seq_len``.
    The others measure extrapolation, where another CPU's model differs from the record as much as another seed."""
    resolved = run.resolved()
    name, _, size = metric.partition("/")
    if not size:
        return True
    limit = resolved.train_max_size if name == "accuracy_by_size" else resolved.seq_len
    return int(size) <= limit


def flat_metrics(final: dict[str, Any]) -> dict[str, float]:
    """A run's final metrics as one flat dict: nested ones (accuracy per size, bits per byte per length) become
    ``"accuracy_by_size/8"`` and the like."""
    flat = {}
    for key, value in final.items():
        if isinstance(value, dict):
            flat.update({f"{key}/{k}": float(v) for k, v in value.items()})
        else:
            flat[key] = float(value)
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
    """Chapter 16: the nine variants of seed 002's nanochat table on the byte corpus, cpu preset, three seeds,
    bits per byte at the training length and at 2× and 4× (labels like ``"iRoPE/0"``)."""
    return {f"{name}/{seed}": TrainConfig(task="text", preset="cpu", model=dict(model), seed=seed)
            for name, model in POSITION_VARIANTS.items() for seed in SEEDS}


# Chapter 17's retrieval models: passkey haystacks of up to 16 filler tokens in training, tested to 64. The
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
    """Chapter 17: passkey retrieval for five schemes × three seeds, trained on haystacks of 1..16 filler tokens
    for 600 steps, evaluated to 64 (labels like ``"iRoPE/0"``)."""
    return {f"{name}/{seed}": TrainConfig(task="passkey", preset="cpu", model=dict(model), seed=seed,
                                          train_max_size=16, steps=600, eval_every=600,
                                          eval_sizes=[4, 8, 12, 16, 20, 24, 32, 40, 48, 64])
            for name, model in PROBE_VARIANTS.items() for seed in SEEDS}


GRIDS: dict[str, Callable[[], dict[str, TrainConfig]]] = {
    "length_generalisation": length_generalisation,
    "position_comparison": position_comparison,
    "long_context": long_context,
}
