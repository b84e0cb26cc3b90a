"""The grids of training runs behind the experiment chapters, by name: each grid is a function returning
``{label: TrainConfig}``, so that a chapter, the command line and the store build exactly the same runs.

A chapter reads its grid by name (:func:`runs`); :mod:`posbook.experiments.store` trains, records and reads the
runs of a grid by the same name. A grid at another scale than the CPU's is named ``<grid>.<preset>``
(:func:`grid_name`); ``GRID_WEIGHTS`` says which recorded runs ship their trained weights.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

from .. import _checks
from .config import TrainConfig, gpt_config
from .extension import EXTENSION_METHODS, extension_rope

GRID_PRESETS = ("cpu", "colab")   # the scales a grid can come in (see grid_name)

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
    """Chapter 16: six position schemes × copy, reverse, addition × three seeds, cpu preset, trained on sizes
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


# Chapter 16's positive controls: the published recipes that make a small transformer copy past its training
# length change the position ids (coupling: Cho et al. 2024; randomised ids: Ruoss et al. 2023) or the data format
# (index hints: Zhou et al. 2024), not the encoding function. Each is trained on copy and reverse with the grid's
# protocol (sizes drawn from 1..8, learning rate 3e-3 after 30 warm-up steps) in batches of 32, with a model and
# a number of steps of its own. Coupling is a one-layer model with one 64-wide head ("coupled, 4 heads" splits it
# into four 16-wide ones); random ids draw from 0..79, more than the longest test sequence (size 32: 67 tokens).
CONTROL_RANDOM_IDS = 80
LENGTH_CONTROLS: dict[str, dict[str, Any]] = {
    "coupled": dict(tasks=("copy-coupled", "reverse-coupled"), model=dict(pattern="R", n_layer=1, n_embd=64, n_head=1),
                    steps=1500, max_offset=16, eval_sizes=[8, 16, 32, 64, 128]),
    "coupled, 4 heads": dict(tasks=("copy-coupled", "reverse-coupled"),
                             model=dict(pattern="R", n_layer=1, n_embd=64, n_head=4),
                             steps=1500, max_offset=16, eval_sizes=[8, 16, 32, 64, 128]),
    "random ids": dict(tasks=("copy", "reverse"), model=dict(pattern="R", n_layer=4, n_embd=64, n_head=1),
                       steps=3000, random_positions=CONTROL_RANDOM_IDS, eval_sizes=[8, 16, 24, 32]),
    "index hints": dict(tasks=("copy-indexed", "reverse-indexed"), model=dict(pattern="R", n_layer=4, n_embd=64, n_head=4),
                        steps=3000, eval_sizes=[8, 16, 32, 64]),
}


# What limits the two controls that do not copy past L, one change at a time on copy, seed 0: the depth, the heads,
# the id range and the steps of random ids; the encoding, the heads, the depth and the steps of index hints.
CONTROL_ABLATIONS: dict[str, dict[str, dict[str, Any]]] = {
    "random ids": {"2 layers": dict(model=dict(n_layer=2)), "4 heads of 16": dict(model=dict(n_head=4)),
                   "ids to 160": dict(random_positions=2 * CONTROL_RANDOM_IDS), "6,000 steps": dict(steps=6000)},
    "index hints": {"NoPE": dict(model=dict(pattern="N")), "1 head of 64": dict(model=dict(n_head=1)),
                    "2 layers": dict(model=dict(n_layer=2)), "6,000 steps": dict(steps=6000)},
}


def length_controls() -> dict[str, TrainConfig]:
    """Chapter 16's controls × copy and reverse × three seeds (labels like ``"copy/coupled/0"``): trained on sizes
    1..8 like the length_generalisation grid, each evaluated as far as its format allows; and the ablations of
    CONTROL_ABLATIONS on copy, seed 0 (``"copy/random ids (2 layers)/0"``)."""
    def control_run(spec: dict[str, Any], task: str, seed: int, change: dict[str, Any]) -> TrainConfig:
        fields = {key: value for key, value in spec.items() if key not in ("tasks", "model")}
        fields |= {key: value for key, value in change.items() if key != "model"}
        return TrainConfig(task=task, preset="cpu", model={**spec["model"], **change.get("model", {})}, seed=seed,
                           batch_size=32, eval_every=fields["steps"], **fields)

    runs = {f"{family}/{control}/{seed}": control_run(spec, task, seed, {})
            for control, spec in LENGTH_CONTROLS.items()
            for family, task in zip(("copy", "reverse"), spec["tasks"]) for seed in SEEDS}
    for control, changes in CONTROL_ABLATIONS.items():
        spec = LENGTH_CONTROLS[control]
        for name, change in changes.items():
            runs[f"copy/{control} ({name})/0"] = control_run(spec, spec["tasks"][0], 0, change)
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
    """Chapter 19: the nine variants of seed 002's nanochat table on the byte corpus, cpu preset at 128 bytes, three
    seeds, bits per byte at the training length and at 2× and 4× (labels like ``"iRoPE/0"``). 800 steps, as in the
    extrapolation grid: at the preset's 150 the models sit above 3 bits per byte and most variants inside the
    baseline's seed spread."""
    return {f"{name}/{seed}": TrainConfig(task="text", preset="cpu", model=dict(model), seed=seed, steps=800,
                                          warmup=40, eval_every=800, eval_batches=8, corpus_bytes=6_000_000)
            for name, model in POSITION_VARIANTS.items() for seed in SEEDS}


# Chapter 20's retrieval models: passkey haystacks of up to 16 filler tokens in training, tested to 64. The
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
    """Chapter 20: passkey retrieval for five schemes × three seeds, trained on haystacks of 1..16 filler tokens
    for 600 steps, evaluated to 64 (labels like ``"iRoPE/0"``)."""
    return {f"{name}/{seed}": TrainConfig(task="passkey", preset="cpu", model=dict(model), seed=seed,
                                          train_max_size=16, steps=600, eval_every=600,
                                          eval_sizes=[4, 8, 12, 16, 20, 24, 32, 40, 48, 64])
            for name, model in PROBE_VARIANTS.items() for seed in SEEDS}


# Chapter 17, "Train short, test long": byte models trained at T = 64 and read to 16T. 800 steps of 32 windows (one
# thread, about 4 minutes a run with the evaluation) take RoPE to about 2 bits per byte at T, far below the
# 4.5-bit unigram rate, where what happens past T is already visible. Local windows are T/4, the fraction of
# chapter 19's nanochat windows.
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
# times the CPU runs' 1.6 million). On one H200 its seven runs took 15-48 s each (benchmarks/README.md).
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


# Chapter "Position from content": the three schemes that compute position from content, FoX's forget gates (F),
# stick-breaking (B) and CoPE's counted positions (X), on chapter 17's protocol (the other schemes' runs are in its
# record), and on flip-flop beside RoPE, ALiBi and NoPE: trained on 1..16 instructions, tested to 128.
CONTENT_SCHEMES: dict[str, dict[str, Any]] = {"FoX": dict(pattern="F"), "Stick-breaking": dict(pattern="B"),
                                              "CoPE": dict(pattern="X")}
FLIP_FLOP_SCHEMES: dict[str, dict[str, Any]] = {"RoPE": dict(pattern="R"), "ALiBi": dict(pattern="A"),
                                                "NoPE": dict(pattern="N"), **CONTENT_SCHEMES}
FLIP_FLOP_SIZES = [4, 8, 16, 24, 32, 48, 64, 96, 128]


def content_positions() -> dict[str, TrainConfig]:
    """The text runs (labels like ``"FoX/0"``, :func:`extrapolation_run`'s protocol at the CPU scale) and the
    flip-flop runs (``"flip-flop/FoX/0"``) of the three content-position schemes, three seeds each."""
    runs = {f"flip-flop/{scheme}/{seed}": TrainConfig(task="flip-flop", preset="cpu", model=dict(model), seed=seed,
                                                      eval_sizes=list(FLIP_FLOP_SIZES))
            for scheme, model in FLIP_FLOP_SCHEMES.items() for seed in SEEDS}
    runs |= {f"{scheme}/{seed}": extrapolation_run(model, seed) for scheme, model in CONTENT_SCHEMES.items()
             for seed in SEEDS}
    return runs


# Chapter 18, "Stretching a trained model": the RoPE models of the extrapolation grid, their rotation replaced by each
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
    runs = {f"{name}/{seed}": run for seed in seeds
            for name, run in _stretched(source_grid, f"RoPE/{seed}", t, EXTENSION_FACTORS, finetunes).items()}
    if preset == "cpu":
        runs |= {f"DroPE/1/{steps}/{seed}": dropped(source_grid, f"RoPE/{seed}", steps) for seed in seeds
                 for steps in (0, *DROPE_STEPS)}
    return runs


# DroPE (Gelberg et al. 2025): the RoPE models with their rotation removed (the same weights in NoPE layers), read
# as they are and after recalibrating at the training length: the fine-tunes' steps (and, for the byte models, four
# times as many) at their learning rate and warm-up share, with the pre-training's batches.
DROPE_STEPS = (FINETUNE_STEPS, 4 * FINETUNE_STEPS)


def dropped(grid: str, label: str, steps: int) -> TrainConfig:
    """DroPE on the recorded RoPE model ``grid:label``: its layers without rotation (code N), evaluated as they are
    (``steps=0``) or after ``steps`` steps on the source's own data (its training length) at a tenth of its peak
    learning rate, a tenth of them warm-up."""
    _checks.choice("grid", grid, sorted(GRIDS))
    sources = GRIDS[grid]()
    _checks.choice("label", label, sorted(sources))
    source = sources[label]
    if set(source.model.get("pattern", "R")) != {"R"}:
        raise ValueError(f"DroPE removes RoPE from an all-RoPE model; {grid}:{label} has pattern "
                         f"{source.model.get('pattern')!r}")
    _checks.number("steps", steps, integer=True, min_value=0)
    fields = dict(steps=0, warmup=0, eval_every=1) if steps == 0 else dict(
        steps=steps, warmup=max(1, steps // 10), eval_every=steps, lr=source.resolved().lr / 10)
    return replace(source, model=dict(source.model, pattern="N"), init_from=f"{grid}:{label}", **fields)


# Chapter 18's passkey section: chapter 20's RoPE retrieval models (haystacks of up to 16 filler tokens, 32 tokens
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
    runs = {f"{name}/{seed}": run for seed in SEEDS
            for name, run in _stretched("long_context", f"RoPE/{seed}", PASSKEY_TRAINED_LENGTH, PASSKEY_FACTORS,
                                        finetunes).items()}
    return runs | {f"DroPE/1/{steps}/{seed}": dropped("long_context", f"RoPE/{seed}", steps) for seed in SEEDS
                   for steps in (0, PASSKEY_FINETUNE_STEPS, 4 * PASSKEY_FINETUNE_STEPS)}


GRIDS: dict[str, Callable[[], dict[str, TrainConfig]]] = {
    "extrapolation": extrapolation,
    "context_extension": context_extension,
    "length_generalisation": length_generalisation,
    "length_controls": length_controls,
    "position_comparison": position_comparison,
    "long_context": long_context,
    "passkey_extension": passkey_extension,
    "content_positions": content_positions,
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


def runs(grid: str) -> dict[str, TrainConfig]:
    """The runs of the grid named ``grid`` (a key of ``GRIDS``), by label, built afresh: the runs its record and
    shipped weights must match."""
    _checks.choice("grid", grid, sorted(GRIDS))
    return GRIDS[grid]()


# The recorded runs whose trained weights ship with posbook, for the pages that probe or stretch trained models
# (3.3 MB for a text model, 0.8 MB for a copy or passkey model). The GPU-scale model (57 MB) ships none: a GPU sweep
# writes the weights context_extension.colab starts from where it runs.
GRID_WEIGHTS: dict[str, set[str]] = {
    "extrapolation": {"RoPE/0", "RoPE/1", "RoPE/2", "APE-learned/0"},
    "length_generalisation": {*(f"copy/{scheme}/0" for scheme in LENGTH_SCHEMES), "copy/NoPE/1"},
    "length_controls": {"copy/coupled/0", "reverse/coupled/0", "copy/coupled, 4 heads/0"},
    "long_context": {"RoPE/0", "RoPE/1", "RoPE/2", *(f"{variant}/0" for variant in PROBE_VARIANTS)},
    "extrapolation.colab": {"RoPE/0"},
    # Stick-breaking's flip-flop seed 0 never learned the task (exact match 0.5 at every size): seed 1 ships instead.
    "content_positions": {*(f"{scheme}/0" for scheme in CONTENT_SCHEMES), "flip-flop/FoX/0",
                          "flip-flop/Stick-breaking/1", "flip-flop/CoPE/0"},
}
