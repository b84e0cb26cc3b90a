"""Small helpers for comparing the variants of a recorded grid (the nanochat-style comparison chapter).

A grid's labels read ``"{variant}/{seed}"``. These functions group a grid's results by variant, summarise a
metric over seeds, express it relative to a baseline variant seed by seed, and time one training step of several
models in turn, so that a page can put its own numbers beside a published table without re-deriving them in the
notebook. See the chapter "A nanochat-style comparison: RoPE, NoPE, p-RoPE, iRoPE".
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable, Iterable, Mapping, Sequence

import torch
import torch.nn.functional as F

from .. import _checks
from .model import GPT
from .tasks import IGNORE


def relative_change(value: float, baseline: float) -> float:
    """``100 · (value − baseline) / baseline``: the relative change in percent, as published tables print it."""
    _checks.number("value", value)
    _checks.number("baseline", baseline)
    if baseline == 0:
        raise ValueError(f"baseline must be non-zero to take a relative change, got {baseline!r}")
    return 100.0 * (value - baseline) / baseline


def split_label(label: str) -> tuple[str, int]:
    """``"iRoPE, window 8/2"`` → ``("iRoPE, window 8", 2)``: the variant and the seed of a grid label."""
    if not isinstance(label, str) or "/" not in label:
        raise ValueError(f"label must read 'variant/seed', got {label!r}")
    variant, seed = label.rsplit("/", 1)
    if not seed.isdigit() or not variant:
        raise ValueError(f"label must read 'variant/seed' with an integer seed, got {label!r}")
    return variant, int(seed)


def by_variant(results: Mapping[str, Any], metric: Callable[[Any], float]) -> dict[str, dict[int, float]]:
    """``{variant: {seed: metric(result)}}`` from a grid's ``{label: result}``, variants in the grid's order."""
    if not isinstance(results, Mapping):
        raise TypeError(f"results must be a dict of label -> result, got {type(results).__name__}")
    if not callable(metric):
        raise TypeError(f"metric must be a function of one result, got {type(metric).__name__}")
    out: dict[str, dict[int, float]] = {}
    for label, result in results.items():
        variant, seed = split_label(label)
        out.setdefault(variant, {})[seed] = float(metric(result))
    return out


def _values(name: str, values: Any) -> list[float]:
    """Per-seed values: any iterable of real numbers (a list, a dict's ``.values()``), as floats."""
    if isinstance(values, Iterable) and not isinstance(values, (str, bytes, Mapping)):
        values = list(values)
    return [float(v) for v in _checks.numbers(name, values, min_len=0)]


def seed_summary(values: Sequence[float]) -> dict[str, float]:
    """Mean, sample standard deviation (0 for one value), min, max and count of a metric over seeds."""
    values = _values("values", values)
    if not values:
        raise ValueError("values must hold at least one number, got an empty sequence")
    return {"mean": statistics.fmean(values), "std": statistics.stdev(values) if len(values) > 1 else 0.0,
            "min": min(values), "max": max(values), "n": len(values)}


def paired_changes(table: Mapping[str, Mapping[int, float]], baseline: str) -> dict[str, dict[int, float]]:
    """Per seed, the relative change (%) of each variant from the baseline variant trained with the same seed
    (same batches, same initial draw of the shared weights). Seeds the baseline lacks are left out."""
    _checks.mapping("table", table)
    for variant, seeds in table.items():
        _checks.mapping(f"table[{variant!r}]", seeds)
    _checks.text("baseline", baseline)
    if baseline not in table:
        raise ValueError(f"baseline {baseline!r} is not a variant of the table; known: {list(table)}")
    base = table[baseline]
    return {variant: {seed: relative_change(v, base[seed]) for seed, v in seeds.items() if seed in base}
            for variant, seeds in table.items()}


def ranges_overlap(a: Sequence[float], b: Sequence[float]) -> bool:
    """Whether the min–max ranges of two sets of per-seed values overlap (a difference "within the seed spread")."""
    a, b = _values("a", a), _values("b", b)
    if not a or not b:
        raise ValueError(f"a and b must be non-empty, got {len(a)} and {len(b)} values")
    return max(a) >= min(b) and max(b) >= min(a)


def step_times(models: Mapping[str, torch.nn.Module], x: torch.Tensor, y: torch.Tensor, *, warmup: int = 2,
               repeats: int = 7) -> dict[str, list[float]]:
    """Seconds per forward + backward pass (next-token cross-entropy) of each model on the batch ``(x, y)``.

    The models are timed in turn, one step each per round, so that a slow spell of a shared machine hits every
    model alike; ``warmup`` rounds are discarded. Returns the ``repeats`` timings per model (take the median).
    Gradients are zeroed after each step; no optimizer step is taken, so the models do not change.

    ``x`` holds token ids [batch, T], ``y`` the next-token targets of the same shape (ids, or -100 for a position
    the loss skips); for a GPT both are checked against its vocabulary before any timing.
    """
    if not isinstance(models, Mapping) or not models:
        raise ValueError(f"models must be a non-empty dict of name -> module, got {models!r}")
    _checks.tensor("x", x, ndim=2, integer=True)
    _checks.tensor("y", y, ndim=2, integer=True)
    if x.shape != y.shape:
        raise ValueError(f"x and y must have the same shape, got {tuple(x.shape)} and {tuple(y.shape)}")
    for name, model in models.items():
        _checks.module(f"models[{name!r}]", model)
        if isinstance(model, GPT):
            vocab = model.config.vocab_size
            _checks.token_ids("x", x, vocab)
            counted = y[y != IGNORE]
            if counted.numel() and not (0 <= int(counted.min()) and int(counted.max()) < vocab):
                raise ValueError(f"y must hold token ids in 0 … {vocab - 1} of models[{name!r}] (or {IGNORE} to "
                                 f"skip a position), got values {int(counted.min())} … {int(counted.max())}")
    _checks.size("warmup", warmup, min_value=0)
    _checks.size("repeats", repeats)
    y = y.long()                 # cross_entropy takes int64 targets
    times: dict[str, list[float]] = {name: [] for name in models}
    for round_ in range(warmup + repeats):
        for name, model in models.items():
            t0 = time.perf_counter()
            logits = model(x)
            F.cross_entropy(logits.flatten(0, 1), y.flatten()).backward()
            dt = time.perf_counter() - t0
            model.zero_grad(set_to_none=True)
            if round_ >= warmup:
                times[name].append(dt)
    return times
