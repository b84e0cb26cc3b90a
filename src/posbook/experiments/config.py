"""What one training run is: :class:`TrainConfig`, the presets that fill in what a run leaves out, and the model a
run trains (:func:`gpt_config`).

A run names only what it changes; :meth:`TrainConfig.resolved` fills the rest from its preset (``cpu``, ``colab``,
``full``), whose ``tasks`` entry may override values for one algorithmic task. Every field says what it does in its
metadata (``help``) and where it belongs (``group``): the command line builds its ``train`` options from them.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import torch

from .. import _checks
from . import corpus as corpus_lib
from . import tasks as tasks_lib
from .model import GPTConfig

TASK_NAMES = ("text",) + tuple(tasks_lib.TASKS)

# The algorithmic tasks need many more (and larger) batches of short sequences than the text task, and a narrower
# model to afford them: a preset's "tasks" entry overrides its values (and its model fields) for one task.
# Addition is the exception among the tasks: trained on sums of 1..8 digits, this model's loss stays on a plateau
# for thousands of steps (the recorded addition-L8 runs, 1,500 steps: 0.09 exact match even on 1-digit sums; chapter
# 15 checks it), so the cpu preset trains it on 1- and 2-digit sums and tests it to 8 digits.
CPU_TASKS: dict[str, dict[str, Any]] = {
    task: dict(model=dict(n_layer=4, n_embd=64, n_head=4), steps=steps, batch_size=64, lr=3e-3, warmup=30,
               eval_every=steps, eval_batches=4, **extra)
    for task, steps, extra in [("copy", 600, {}), ("copy-distinct", 600, {}), ("reverse", 600, {}),
                               ("addition", 1000, {"train_max_size": 2}), ("passkey", 400, {}),
                               ("copy-coupled", 600, {}), ("reverse-coupled", 600, {}), ("copy-indexed", 600, {}),
                               ("reverse-indexed", 600, {}), ("flip-flop", 600, {"train_max_size": 16})]
}

PRESETS: dict[str, dict[str, Any]] = {
    # Each run of the cpu preset fits in a minute on 2 CPU cores (text: 150 steps × 2,048 tokens, about 55 s).
    "cpu": dict(model=dict(n_layer=4, n_embd=128, n_head=4), steps=150, batch_size=16, seq_len=128, lr=3e-3,
                warmup=15, eval_every=50, eval_batches=4, train_max_size=8, corpus_bytes=2_000_000,
                tasks=CPU_TASKS),
    # One T4/L4-class GPU, about 15 minutes.
    "colab": dict(model=dict(n_layer=8, n_embd=384, n_head=6), steps=3000, batch_size=32, seq_len=512, lr=1e-3,
                  warmup=200, eval_every=500, eval_batches=16, train_max_size=16, corpus_bytes=20_000_000),
    # Many GPUs under torchrun; batch_size is the global batch.
    "full": dict(model=dict(n_layer=12, n_embd=768, n_head=12), steps=10000, batch_size=256, seq_len=1024, lr=6e-4,
                 warmup=500, eval_every=1000, eval_batches=32, train_max_size=32, corpus_bytes=100_000_000),
}

# AdamW's betas for every run. Its first step moves a weight by lr / (1 - beta1), computed in float32.
BETAS = (0.9, 0.95)
MAX_LR = torch.finfo(torch.float32).max * (1 - BETAS[0])

FIELD_GROUPS = ("run", "model", "schedule", "evaluation", "output")
"""The groups a TrainConfig field belongs to (its ``group`` metadata), in the order the command line lists them."""


def _described(default: Any = None, *, help_text: str, group: str, factory: Any = None) -> Any:
    """A TrainConfig field that says what it does (``help_text``, plain words: the command line prints it) and which
    group of options it belongs to."""
    metadata = {"help": help_text, "group": group}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def choose_preset() -> str:
    """``POSBOOK_PRESET`` if set, else ``full`` under torchrun on GPUs, ``colab`` on one GPU, ``cpu`` otherwise."""
    preset = os.environ.get("POSBOOK_PRESET")
    if preset:
        return _checks.choice("POSBOOK_PRESET", preset, sorted(PRESETS))
    if torch.cuda.is_available():
        return "full" if int(os.environ.get("WORLD_SIZE", "1")) > 1 else "colab"
    return "cpu"


@dataclass
class TrainConfig:
    """One run. Fields left as None take the preset's value; each field's ``help`` metadata says what it does."""

    task: str = _described("text", group="run", help_text=(
        "text: next-byte prediction on the Python standard library's source; the others are algorithmic tasks "
        "scored by exact match"))
    preset: str | None = _described(group="run", help_text=(
        "model size and schedule (see the presets command); default: POSBOOK_PRESET, else cpu without a GPU, colab "
        "on one GPU, full under torchrun"))
    model: dict = _described(factory=dict, group="model", help_text=(
        "GPTConfig fields to override, e.g. {'pattern': 'SSSN'}"))
    steps: int | None = _described(group="schedule", help_text="training steps")
    batch_size: int | None = _described(group="schedule", help_text="sequences per step, summed over all processes")
    seq_len: int | None = _described(group="schedule", help_text="text: bytes per training sequence")
    eval_seq_lens: list[int] | None = _described(group="evaluation", help_text=(
        "text: lengths to report bits per byte at (default: the training length, twice and four times it)"))
    eval_position_bin: int | None = _described(group="evaluation", help_text=(
        "text: also report bits per byte by position, in bins of this many positions (default: not reported)"))
    eval_stride: int | None = _described(group="evaluation", help_text=(
        "text: also score by sliding windows this many bytes apart, each scoring its last this many bytes "
        "(default: not scored)"))
    train_max_size: int | None = _described(group="schedule", help_text="tasks: train on problem sizes 1 to this size")
    curriculum_steps: int | None = _described(group="schedule", help_text=(
        "tasks: grow the largest training size from 1 to the full size over this many steps (default: 0, no "
        "curriculum)"))
    eval_sizes: list[int] | None = _described(group="evaluation", help_text=(
        "tasks: problem sizes to report exact match at (default: 1 to twice the training size, then three and four "
        "times it)"))
    max_offset: int | None = _described(group="schedule", help_text=(
        "tasks that set their own position ids (copy-coupled, reverse-coupled): the ids of each training example "
        "start at a random offset from 0 to this; evaluation draws offsets that keep the ids of longer problems "
        "inside the range training reached (default: 0)"))
    random_positions: int | None = _described(group="schedule", help_text=(
        "tasks: give every sequence, in training and evaluation, position ids drawn as an ordered random subset of "
        "0 to this minus 1 (Ruoss et al. 2023), at least the longest sequence (default: 0, 1, 2, ...)"))
    lr: float | None = _described(group="schedule", help_text=(
        "peak learning rate, after warmup; it decays to a tenth along a cosine"))
    warmup: int | None = _described(group="schedule", help_text="steps of linear learning-rate warmup")
    weight_decay: float = _described(0.1, group="schedule", help_text="AdamW weight decay of the weight matrices")
    grad_clip: float = _described(1.0, group="schedule", help_text="clip the gradient norm of every step to this value")
    eval_every: int | None = _described(group="evaluation", help_text=(
        "evaluate every this many steps, and after the last"))
    eval_batches: int | None = _described(group="evaluation", help_text="batches per evaluation")
    corpus_bytes: int | None = _described(group="schedule", help_text="text: bytes of the corpus to read")
    checkpoint_every: int = _described(0, group="output", help_text=(
        "also write checkpoint.pt every this many steps, to resume from; 0: only after the last step"))
    seed: int = _described(0, group="run", help_text="seeds the initial weights and every batch")
    out_dir: str | None = _described(group="output", help_text=(
        "folder for checkpoint.pt and results.json; without it nothing is saved"))
    resume: bool = _described(False, group="output", help_text=(
        "continue from the checkpoint.pt in the output folder (the folder must exist; without a checkpoint the run "
        "says so and starts from step 0)"))
    progress: bool | None = _described(group="output", help_text=(
        "show a progress bar (default: only when standard error is a terminal)"))
    stop_after: int | None = _described(group="schedule", help_text=(
        "stop after this many steps of the schedule of all the steps (default: train every step)"))
    init_from: str | None = _described(group="run", help_text=(
        "start from the shipped weights of a recorded run, named grid:label, e.g. extrapolation:RoPE/0 (default: "
        "random weights)"))
    device: str | None = _described(group="run", help_text=(
        "where to train: cpu, cuda, cuda:N or mps (default: POSBOOK_DEVICE, else the best device found)"))

    def __post_init__(self):
        """Every field given is checked here (None: the preset's value, checked by :meth:`resolved`)."""
        _checks.choice("task", self.task, TASK_NAMES)
        if self.preset is not None:
            _checks.choice("preset", self.preset, sorted(PRESETS))
        _checks.mapping("model", self.model)
        known = {f.name for f in fields(GPTConfig) if f.init}
        unknown = sorted(set(self.model) - known)
        if unknown:
            raise ValueError(f"model has unknown GPTConfig field(s) {unknown}; known: {sorted(known)}")
        if self.init_from is not None:
            grid, sep, label = _checks.text("init_from", self.init_from).partition(":")
            if not (sep and grid and label):
                raise ValueError(f"init_from must be 'grid:label' (a recorded run with shipped weights, e.g. "
                                 f"'extrapolation:RoPE/0'), got {self.init_from!r}")
        # Sizes and loop counts. A run that starts from trained weights may train no step at all: an evaluation.
        zero_ok = ("warmup", "curriculum_steps", "checkpoint_every", "seed", "max_offset") + (
            ("steps",) if self.init_from is not None else ())
        for name in ("steps", "batch_size", "seq_len", "train_max_size", "curriculum_steps", "warmup", "eval_every",
                     "eval_batches", "corpus_bytes", "checkpoint_every", "seed", "eval_position_bin", "eval_stride",
                     "stop_after", "max_offset", "random_positions"):
            if getattr(self, name) is not None or name in ("checkpoint_every", "seed"):
                _checks.size(name, getattr(self, name), min_value=0 if name in zero_ok else 1)
        for name in ("eval_seq_lens", "eval_sizes"):
            if getattr(self, name) is not None:
                _checks.numbers(name, getattr(self, name), integer=True, min_value=1, max_value=_checks.MAX_SIZE)
        if self.lr is not None:
            _checks.number("lr", self.lr, positive=True, max_value=MAX_LR)
        _checks.number("weight_decay", self.weight_decay, min_value=0)
        _checks.number("grad_clip", self.grad_clip, positive=True)
        _checks.flag("resume", self.resume)
        if self.progress is not None:
            _checks.flag("progress", self.progress)
        if self.out_dir is not None:
            self.out_dir = str(_checks.path("out_dir", self.out_dir))     # a str: the run is written to JSON
        if self.resume and not self.out_dir:
            raise ValueError("resume=True needs out_dir (where the checkpoint is), got None")
        if self.device is not None:
            self.device = str(_checks.device("device", self.device))     # a str: the run is written to JSON

    def resolved(self) -> "TrainConfig":
        """A copy with the preset's values filled in and every field checked."""
        preset = self.preset or choose_preset()
        values = asdict(self)
        values["preset"] = preset
        base = {key: value for key, value in PRESETS[preset].items() if key != "tasks"}
        task_values = PRESETS[preset].get("tasks", {}).get(self.task, {})
        for key, value in {**base, **task_values, "model": {**base.get("model", {}), **task_values.get("model", {})}
                           }.items():
            if key == "model":
                values["model"] = {**value, **self.model}
            elif values.get(key) is None:
                values[key] = value
        if values["curriculum_steps"] is None:
            values["curriculum_steps"] = 0
        out = TrainConfig(**values)        # every field checked again, now filled in
        limit = tasks_lib.MAX_SIZE.get(out.task)            # None: a task with problems of every size
        if out.eval_sizes is None:
            out.eval_sizes = [size for size in (*range(1, 2 * out.train_max_size + 1), 3 * out.train_max_size,
                                                4 * out.train_max_size) if limit is None or size <= limit]
        for name, size in (("train_max_size", out.train_max_size), ("eval_sizes entry", max(out.eval_sizes))):
            if limit is not None and size > limit:
                raise ValueError(f"task {out.task!r} has problems of size at most {limit}: {name} must be <= "
                                 f"{limit}, got {size}")
        if out.random_positions is not None:
            if out.task == "text" or tasks_lib.TASKS[out.task].positions:
                raise ValueError(f"random_positions is for the algorithmic tasks that leave position ids to the model, "
                                 f"not task {out.task!r}")
            longest = tasks_lib.sequence_length(out.task, max([out.train_max_size, *out.eval_sizes]))
            if out.random_positions < longest:
                raise ValueError(f"random_positions must be at least the longest sequence ({longest} tokens) to draw "
                                 f"its ids from, got {out.random_positions}")
        if out.eval_seq_lens is None:
            out.eval_seq_lens = [out.seq_len, 2 * out.seq_len, 4 * out.seq_len]
        if out.eval_stride is not None and out.eval_stride > min(out.eval_seq_lens):
            raise ValueError(f"eval_stride={out.eval_stride} must be at most the shortest eval_seq_lens entry "
                             f"({min(out.eval_seq_lens)}): a window scores its last eval_stride bytes")
        return out


def vocab_size(task: str) -> int:
    """How many token ids the sequences of ``task`` use: the 256 byte values for text, the tasks' shared
    vocabulary for the algorithmic tasks."""
    _checks.choice("task", task, TASK_NAMES)
    return corpus_lib.VOCAB_SIZE if task == "text" else tasks_lib.TASKS[task].vocab_size


def gpt_config(run: TrainConfig) -> GPTConfig:
    """The GPTConfig for a run (resolved here): vocabulary and longest sequence follow from the task."""
    run = _checks.instance("run", run, TrainConfig).resolved()
    if run.task == "text":
        longest = max([run.seq_len, *run.eval_seq_lens])
    else:
        longest = tasks_lib.sequence_length(run.task, max([run.train_max_size, *run.eval_sizes]))
    # Learned absolute embeddings need a row for every position id: random ids reach random_positions − 1, a coupled
    # task's ids reach its offset + the largest size + 1.
    longest = max(longest, run.random_positions or 0)
    if run.task != "text" and tasks_lib.TASKS[run.task].positions:
        longest = max(longest, (run.max_offset or 0) + max([run.train_max_size, *run.eval_sizes]) + 2)
    return GPTConfig(**{"vocab_size": vocab_size(run.task), "max_seq_len": longest, **run.model})
