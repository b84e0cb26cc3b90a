"""Training and evaluation: presets by hardware, AdamW with warmup + cosine, atomic checkpoints, exact resume,
DDP under torchrun, and a results JSON that says where its numbers came from.

Every batch is a pure function of (seed, step): a killed run resumed from its last checkpoint sees the same
batches, the same learning rates and the same optimizer state, so it ends with the same numbers as a run that
was never interrupted (the test suite kills one with SIGKILL to check). Under DDP every rank draws the same global
batch and trains on its share of the rows, so N processes follow the one-process loss curve.
"""

from __future__ import annotations

import json
import math
import os
import pickle
import subprocess
import sys
import time
import warnings
import zipfile
import zlib
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from .. import _checks
from ..device import default_device, training_precision
from . import corpus as corpus_lib
from . import tasks as tasks_lib
from .model import GPT, GPTConfig

TASK_NAMES = ("text",) + tasks_lib.TASKS

# The algorithmic tasks need many more (and larger) batches of short sequences than the text task, and a narrower
# model to afford them: a preset's "tasks" entry overrides its values (and its model fields) for one task.
# Addition is the exception among the tasks: trained on sums of 1..8 digits, this model's loss stays on a plateau
# for thousands of steps (the recorded addition-L8 runs, 1,500 steps: 0.09 exact match even on 1-digit sums; chapter
# 15 checks it), so the cpu preset trains it on 1- and 2-digit sums and tests it to 8 digits.
CPU_TASKS: dict[str, dict[str, Any]] = {
    task: dict(model=dict(n_layer=4, n_embd=64, n_head=4), steps=steps, batch_size=64, lr=3e-3, warmup=30,
               eval_every=steps, eval_batches=4, **extra)
    for task, steps, extra in [("copy", 600, {}), ("copy-distinct", 600, {}), ("reverse", 600, {}),
                               ("addition", 1000, {"train_max_size": 2}), ("passkey", 400, {})]
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

# Dense bf16 peak throughput in FLOP/s, for an MFU estimate; unknown devices report no MFU.
PEAK_FLOPS = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "A10G": 125e12, "L4": 121e12,
              "T4": 65e12, "V100": 125e12}


def _peak_flops(device: torch.device) -> float | None:
    """The dense bf16 peak of a CUDA device from PEAK_FLOPS by its name, None for an unknown GPU or not a GPU."""
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((value for key, value in PEAK_FLOPS.items() if key in name), None)


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
    """One run. Fields left as None take the preset's value."""

    task: str = "text"
    preset: str | None = None
    model: dict = field(default_factory=dict)      # GPTConfig overrides, e.g. {"pattern": "SSSN"}
    steps: int | None = None
    batch_size: int | None = None                  # global batch, in sequences
    seq_len: int | None = None                     # text task only
    eval_seq_lens: list[int] | None = None         # text task: lengths to report bits per byte at (default T, 2T, 4T)
    eval_position_bin: int | None = None           # text: also bits per byte by position, in bins of this many
    eval_stride: int | None = None                 # text: also the sliding-window protocol with this stride
    train_max_size: int | None = None              # algorithmic tasks: problem sizes 1..L during training
    curriculum_steps: int | None = None            # algorithmic tasks: the largest size grows 1 → L over these steps
    eval_sizes: list[int] | None = None            # algorithmic tasks: sizes to report (default 1..2L, 3L, 4L)
    lr: float | None = None
    warmup: int | None = None
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    eval_every: int | None = None
    eval_batches: int | None = None
    corpus_bytes: int | None = None
    checkpoint_every: int = 0                      # 0: only at the end
    seed: int = 0
    out_dir: str | None = None
    resume: bool = False
    progress: bool | None = None                   # tqdm bar; None: only when stderr is a terminal
    stop_after: int | None = None                  # stop after this many steps of the ``steps``-step schedule
    init_from: str | None = None                   # "grid:label": start from a recorded run's shipped weights
    device: str | None = None                      # where to train; None: posbook.device.default_device()

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
        zero_ok = ("warmup", "curriculum_steps", "checkpoint_every", "seed") + (
            ("steps",) if self.init_from is not None else ())
        for name in ("steps", "batch_size", "seq_len", "train_max_size", "curriculum_steps", "warmup", "eval_every",
                     "eval_batches", "corpus_bytes", "checkpoint_every", "seed", "eval_position_bin", "eval_stride",
                     "stop_after"):
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
        if out.eval_seq_lens is None:
            out.eval_seq_lens = [out.seq_len, 2 * out.seq_len, 4 * out.seq_len]
        if out.eval_stride is not None and out.eval_stride > min(out.eval_seq_lens):
            raise ValueError(f"eval_stride={out.eval_stride} must be at most the shortest eval_seq_lens entry "
                             f"({min(out.eval_seq_lens)}): a window scores its last eval_stride bytes")
        return out


def _resolved(run: Any) -> TrainConfig:
    """The ``run`` argument of the functions below: a TrainConfig, resolved here if it is not already."""
    return _checks.instance("run", run, TrainConfig).resolved()


def _vocabulary(run: TrainConfig) -> int:
    return corpus_lib.VOCAB_SIZE if run.task == "text" else tasks_lib.VOCAB_SIZE


def gpt_config(run: TrainConfig) -> GPTConfig:
    """The GPTConfig for a run (resolved here): vocabulary and longest sequence follow from the task."""
    run = _resolved(run)
    if run.task == "text":
        longest = max([run.seq_len, *run.eval_seq_lens])
    else:
        longest = tasks_lib.sequence_length(run.task, max([run.train_max_size, *run.eval_sizes]))
    return GPTConfig(**{"vocab_size": _vocabulary(run), "max_seq_len": longest, **run.model})


def learning_rate(run: TrainConfig, step: int) -> float:
    """Linear warmup to lr, then cosine decay to lr/10 at the last step (and lr/10 after it). ``run`` is resolved
    here; ``step`` counts from 0."""
    run = _resolved(run)
    _checks.number("step", step, integer=True, min_value=0)
    return _learning_rate(run, step)


def _learning_rate(run: TrainConfig, step: int) -> float:
    if step < run.warmup:
        return run.lr * (step + 1) / run.warmup
    progress = (step - run.warmup) / max(1, run.steps - run.warmup)
    return run.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def largest_train_size(run: TrainConfig, step: int) -> int:
    """The largest problem size drawn at a step: L, or with a curriculum 1 at step 0 growing linearly to L at
    step ``curriculum_steps``. Addition needs it: drawn from 1..8 from the start, a small model's loss sits on a
    plateau for thousands of steps; trained on short sums first, it learns the digit alignment and then extends it.
    ``run`` is resolved here; ``step`` counts from 0."""
    run = _resolved(run)
    _checks.number("step", step, integer=True, min_value=0)
    return _largest_train_size(run, step)


def _largest_train_size(run: TrainConfig, step: int) -> int:
    if not run.curriculum_steps or step >= run.curriculum_steps:
        return run.train_max_size
    return 1 + (run.train_max_size - 1) * step // run.curriculum_steps


def _batch(run: TrainConfig, data: corpus_lib.Corpus | None, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The global batch of a training step: a function of (seed, step) only."""
    gen = torch.Generator().manual_seed(run.seed * 1_000_003 + step)
    if run.task == "text":
        return corpus_lib.text_batch(data.train, run.batch_size, run.seq_len, gen)
    sizes = torch.randint(1, _largest_train_size(run, step) + 1, (run.batch_size,), generator=gen).tolist()
    return tasks_lib.make_batch(run.task, sizes, gen)


def _loss(logits: torch.Tensor, targets: torch.Tensor, count: int) -> torch.Tensor:
    """Summed cross-entropy over the counted targets, divided by the global count (not the local one), so that
    the ranks' shares add up to the one-process mean."""
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=tasks_lib.IGNORE,
                           reduction="sum") / count


def _model(model: Any, vocabulary: int | None = None) -> GPT:
    """The ``model`` argument: a posbook.experiments GPT with room for ``vocabulary`` token ids."""
    _checks.instance("model", model, GPT)
    if vocabulary is not None and model.config.vocab_size < vocabulary:
        raise ValueError(f"model has vocab_size={model.config.vocab_size}, fewer than the {vocabulary} token ids "
                         "it is evaluated on")
    return model


@torch.no_grad()
def evaluate(model: GPT, run: TrainConfig, data: corpus_lib.Corpus | None, device: torch.device) -> dict[str, Any]:
    """Validation loss (and bits per byte for text), or exact-match accuracy by problem size for the tasks.

    ``run`` is resolved here; ``data`` is the corpus for a text run (the tasks draw their own problems: None)."""
    run = _resolved(run)
    _model(model, _vocabulary(run))
    device = _checks.device("device", device)
    if run.task == "text":
        _checks.instance("data", data, corpus_lib.Corpus)
    model.eval()
    gen = torch.Generator().manual_seed(run.seed * 1_000_003 + 999_999_937)
    out: dict[str, Any] = {}
    if run.task == "text":
        if run.eval_position_bin is not None:
            out.update(text_by_position(model, run, data.val, device))
        else:
            by_length = {}
            for length in dict.fromkeys([run.seq_len, *run.eval_seq_lens]):
                losses = []
                for _ in range(run.eval_batches):
                    x, y = corpus_lib.text_batch(data.val, run.batch_size, length, gen)
                    logits = model(x.to(device))
                    losses.append(F.cross_entropy(logits.flatten(0, 1), y.to(device).flatten()).item())
                by_length[length] = sum(losses) / len(losses)
            out["val_loss"] = by_length[run.seq_len]
            out["val_bpb"] = corpus_lib._bits_per_byte(out["val_loss"])
            # Beyond the training length: every position of the longer windows counts, so this is the mean over
            # positions 1..T' (the extrapolation curve by position is analysis's business).
            out["val_bpb_by_len"] = {str(length): corpus_lib._bits_per_byte(loss) for length, loss in by_length.items()
                                     if length in run.eval_seq_lens}
        if run.eval_stride is not None:
            out["val_bpb_sliding_by_len"] = {
                str(length): sliding_window_bpb(model, data.val, length, run.eval_stride,
                                                windows=run.eval_batches * run.batch_size,
                                                first_target=max(run.eval_seq_lens), device=device)
                for length in run.eval_seq_lens}
    else:
        accuracy = {}
        for size in run.eval_sizes:
            hits = []
            for _ in range(run.eval_batches):
                x, y = tasks_lib.make_batch(run.task, [size] * run.batch_size, gen)
                hits.append(tasks_lib.exact_match(model(x.to(device)), y.to(device)).mean().item())
            accuracy[str(size)] = sum(hits) / len(hits)
        out["accuracy_by_size"] = accuracy
    model.train()
    return out


def position_losses(model: GPT, val: torch.Tensor, length: int, windows: int, device: torch.device, *,
                    spacing: int | None = None, rows_per_forward: int = 16) -> torch.Tensor:
    """Next-byte loss (nats) at every position 0..length-1 of ``windows`` windows of ``val`` starting every
    ``spacing`` bytes (default ``length``: the first non-overlapping windows): [windows, length].

    The model is causal, so position t of a window of ``length`` is scored exactly as in a window of any length
    > t starting at the same byte: the mean over positions < L of these rows is the non-overlapping protocol at
    length L. (Not for dynamic NTK, whose rotation depends on the window's length: score windows of L with
    ``spacing`` set to the longest length, so that they cover the same bytes.)

    ``val`` is a 1-D tensor of token ids (the corpus's uint8 bytes)."""
    _checks.token_ids("val", val, _model(model).config.vocab_size, ndim=1)
    _checks.size("length", length)
    _checks.size("windows", windows)
    spacing = length if spacing is None else spacing
    _checks.size("spacing", spacing)
    _checks.size("rows_per_forward", rows_per_forward)
    device = _checks.device("device", device)
    if spacing < length:
        raise ValueError(f"spacing={spacing} must be at least length={length} (windows must not overlap)")
    needed = (windows - 1) * spacing + length + 1
    if needed > val.numel():
        raise ValueError(f"windows={windows} windows of {length} bytes, {spacing} apart, need {needed} bytes of "
                         f"validation text; val holds {val.numel()}")
    rows = []
    for first in range(0, windows, rows_per_forward):
        starts = range(first * spacing, min(windows, first + rows_per_forward) * spacing, spacing)
        chunk = torch.stack([val[s: s + length + 1] for s in starts]).long()
        logits = model(chunk[:, :-1].to(device))
        rows.append(F.cross_entropy(logits.transpose(1, 2), chunk[:, 1:].to(device), reduction="none").cpu())
    return torch.cat(rows)


def sliding_window_bpb(model: GPT, val: torch.Tensor, length: int, stride: int, *, windows: int,
                       first_target: int, device: torch.device, rows_per_forward: int = 16) -> float:
    """Bits per byte under the sliding-window protocol: windows of ``length`` bytes, ``stride`` apart, each scoring
    only its last ``stride`` bytes, so every scored byte sees between length - stride and length - 1 bytes before
    it. The scored bytes start at ``first_target`` (at least ``length``) and are the same for every length, so
    lengths differ only in how much context each byte gets. ``val`` is a 1-D tensor of token ids (the corpus's
    uint8 bytes)."""
    _checks.token_ids("val", val, _model(model).config.vocab_size, ndim=1)
    for name, value in (("length", length), ("stride", stride), ("windows", windows), ("first_target", first_target),
                        ("rows_per_forward", rows_per_forward)):
        _checks.size(name, value)
    device = _checks.device("device", device)
    if stride > length:
        raise ValueError(f"stride={stride} must be at most length={length}")
    if first_target < length:
        raise ValueError(f"first_target={first_target} must be at least length={length}")
    end = first_target + windows * stride
    if end >= val.numel():
        raise ValueError(f"{windows} windows of stride {stride} from byte {first_target} need {end + 1} bytes of "
                         f"validation text; val holds {val.numel()}")
    total, count = 0.0, 0
    starts = [first_target + j * stride - length for j in range(windows)]
    for i in range(0, windows, rows_per_forward):
        batch = torch.stack([val[s: s + length + 1] for s in starts[i:i + rows_per_forward]]).long()
        logits = model(batch[:, :-1].to(device))[:, -stride:]
        loss = F.cross_entropy(logits.transpose(1, 2), batch[:, 1:][:, -stride:].to(device), reduction="sum")
        total, count = total + loss.item(), count + stride * batch.shape[0]
    return corpus_lib._bits_per_byte(total / count)


def text_by_position(model: GPT, run: TrainConfig, val: torch.Tensor, device: torch.device) -> dict[str, Any]:
    """The non-overlapping protocol of a run with ``eval_position_bin``, from one set of windows of the longest eval
    length: validation loss and bits per byte at ``seq_len``, bits per byte at every eval length, and by position
    (binned) — the numbers :func:`evaluate` records, without the sliding-window part. ``run`` is resolved here."""
    run = _resolved(run)
    if run.eval_position_bin is None:
        raise ValueError("run.eval_position_bin must be set (the width of the position bins), got None")
    longest, windows = max(run.eval_seq_lens), run.eval_batches * run.batch_size
    losses = position_losses(model, val, longest, windows, device).mean(0)
    bits = losses / math.log(2)
    width = run.eval_position_bin
    # Dynamic NTK rotates by a spectrum chosen from the length in hand: a window of L is scored at length L.
    dynamic = any(getattr(block.attn, "dynamic_rope", None) is not None for block in model.blocks)
    lengths = list(dict.fromkeys([run.seq_len, *run.eval_seq_lens]))
    at = {length: position_losses(model, val, length, windows, device, spacing=longest).mean(0) if dynamic
          else losses[:length] for length in lengths}
    out = {"val_loss": at[run.seq_len].mean().item()}
    out["val_bpb"] = corpus_lib._bits_per_byte(out["val_loss"])
    out["val_bpb_by_len"] = {str(length): (at[length] / math.log(2)).mean().item() for length in run.eval_seq_lens}
    out["val_bpb_by_position"] = [bits[i:i + width].mean().item() for i in range(0, longest, width)]
    return out


def _git_sha() -> str:
    try:
        root = Path(__file__).resolve().parents[3]
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                              timeout=5).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _save_atomically(obj: Any, path: Path) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)   # a reader (or a resume after SIGKILL) sees the old file or the new one, never half


def train(run: TrainConfig) -> dict[str, Any]:
    """Train one model; returns the results dict (also written to ``out_dir/results.json`` by rank 0)."""
    run = _resolved(run)
    world, rank = int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))
    distributed = world > 1
    if distributed:
        import torch.distributed as dist
        if not dist.is_initialized():
            dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
        if run.batch_size % world:
            raise ValueError(f"batch_size={run.batch_size} must be a multiple of the {world} processes")
    if distributed and torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    else:
        device = torch.device(run.device) if run.device is not None else default_device()
    out_dir = Path(run.out_dir) if run.out_dir else None
    checkpoint_path = out_dir / "checkpoint.pt" if out_dir else None
    if out_dir is not None and out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"out_dir {out_dir} is a file; give a folder (checkpoint.pt and results.json go there)")
    if run.resume and not out_dir.is_dir():
        raise ValueError(f"resume=True but out_dir {out_dir} does not exist: there is nothing to resume (leave resume "
                         "out to start a run there)")
    if run.resume and not checkpoint_path.exists() and rank == 0:
        warnings.warn(f"resume=True but {out_dir} holds no checkpoint.pt: this run starts from step 0", stacklevel=2)
    if out_dir is not None and rank == 0:
        out_dir.mkdir(parents=True, exist_ok=True)

    git_sha = _git_sha()        # the commit checked out when the run starts (the code that runs)
    data = corpus_lib.load_corpus(run.corpus_bytes) if run.task == "text" else None
    config = gpt_config(run)
    torch.manual_seed(run.seed)
    model = GPT(config).to(device)
    if run.init_from is not None:
        from .sweep import load_weights     # sweep builds on this module
        grid, _, label = run.init_from.partition(":")
        source, _ = load_weights(grid, label, device=device)
        model.load_state_dict(source.state_dict())   # the rope config (tables, not weights) stays this run's own
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": run.weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=run.lr, betas=BETAS)
    history: list[dict[str, Any]] = []
    start = 0
    if run.resume and checkpoint_path.exists():
        state = read_checkpoint(checkpoint_path, device, RESUME_KEYS)
        if state["config"] != config.to_dict():
            raise ValueError(f"checkpoint {checkpoint_path} was written for another model config")
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start, history = state["step"], state["history"]

    ddp = model
    if distributed:
        from torch.nn.parallel import DistributedDataParallel
        ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    precision = training_precision(device)
    autocast, scaler = precision.autocast(device), precision.grad_scaler(device)

    show = sys.stderr.isatty() if run.progress is None else run.progress
    bar = None
    if show and rank == 0:
        from tqdm.auto import tqdm
        bar = tqdm(total=run.steps, initial=start, desc=f"{run.task} {config.pattern}", unit="step")

    tokens_per_step = run.batch_size * (run.seq_len if run.task == "text" else 0)
    t_start, tokens_seen, train_time = time.time(), 0, 0.0
    last_step = run.steps if run.stop_after is None else min(run.steps, run.stop_after)
    for step in range(start, last_step):
        t0 = time.perf_counter()
        x, y = _batch(run, data, step)
        count = int((y != tasks_lib.IGNORE).sum())
        x, y = x[rank::world].to(device), y[rank::world].to(device)
        for group in optimizer.param_groups:
            group["lr"] = _learning_rate(run, step)
        with autocast:
            loss = _loss(ddp(x), y, count) * world   # DDP averages gradients over ranks; × world undoes that
        # The scaler is a pass-through except under float16 (posbook.device.training_precision).
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)                   # clip the true gradients, not the scaled ones
        torch.nn.utils.clip_grad_norm_(model.parameters(), run.grad_clip)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        loss_value = loss.item() / world
        if distributed:
            t = torch.tensor([loss_value], device=device)
            dist.all_reduce(t)
            loss_value = t.item()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        dt = time.perf_counter() - t0
        train_time += dt
        step_tokens = tokens_per_step or int(x.numel()) * world
        tokens_seen += step_tokens
        record: dict[str, Any] = {"step": step + 1, "train_loss": loss_value, "lr": _learning_rate(run, step),
                                  "tokens_per_s": step_tokens / dt}
        last = step + 1 == last_step
        if (step + 1) % run.eval_every == 0 or last:
            record.update(evaluate(model, run, data, device))
        history.append(record)
        if bar is not None:
            bar.set_postfix(loss=f"{loss_value:.3f}", tok_s=f"{step_tokens / dt:,.0f}")
            bar.update(1)
        due = run.checkpoint_every and (step + 1) % run.checkpoint_every == 0
        if checkpoint_path is not None and rank == 0 and (due or last):
            _save_atomically({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step + 1,
                              "config": config.to_dict(), "run": asdict(run), "history": history}, checkpoint_path)
    if bar is not None:
        bar.close()
    if run.steps == 0:          # an evaluation of the initial weights (init_from with another rope config)
        history.append({"step": 0, **evaluate(model, run, data, device)})

    final = {k: v for k, v in history[-1].items() if k not in ("step", "lr", "tokens_per_s")} if history else {}
    tokens_per_s = tokens_seen / train_time if train_time else None
    mfu = None
    if device.type == "cuda" and tokens_per_s:
        peak = _peak_flops(device)
        seq = run.seq_len if run.task == "text" else config.max_seq_len
        mfu = model.flops_per_token(seq) * tokens_per_s / (peak * world) if peak else None
    results = {
        "final": final, "history": history, "tokens_per_s": tokens_per_s, "mfu": mfu,
        "model": config.to_dict(), "run": asdict(run), "n_params": model.num_params(),
        "provenance": {"git_sha": git_sha, "torch": torch.__version__, "python": sys.version.split()[0],
                       "device": str(device) if device.type != "cuda" else torch.cuda.get_device_name(device),
                       "world_size": world, "preset": run.preset, "seed": run.seed,
                       "corpus_sha256": data.sha256 if data else None, "wall_time_s": time.time() - t_start,
                       "resumed_from_step": start},
    }
    if out_dir is not None and rank == 0:
        (out_dir / "results.json").write_text(json.dumps(results, indent=2))
    if distributed:
        dist.barrier()
    return results


MODEL_KEYS = ("config", "model", "run")
"""What every posbook checkpoint holds: the model config, the weights, the run config."""
RESUME_KEYS = MODEL_KEYS + ("optimizer", "step", "history")
"""What a checkpoint written during training holds besides, to resume exactly."""


_ZIP_SIGNATURE = b"PK\x03\x04"     # how a zip archive, and so every file torch.save writes, begins


def _archive_damage(path: Path) -> str | None:
    """What is wrong with the zip archive of a torch checkpoint, or None when it is whole or is no zip archive at
    all (torch.load then judges it). Asked first because torch.load does not tell: a file cut short fails inside
    torch with a zip or an OS error ("[Errno 22] Invalid argument") that does not say so, and a zeroed range loads
    as wrong weights, for torch does not check the CRC-32 that the archive keeps of every member."""
    try:
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile:
        with path.open("rb") as file:
            if file.read(len(_ZIP_SIGNATURE)) != _ZIP_SIGNATURE:
                return None
        return f"a zip archive of {path.stat().st_size} bytes whose closing directory is missing or unreadable"
    with archive:
        try:
            damaged = archive.testzip()
        except (zipfile.BadZipFile, EOFError, zlib.error) as error:
            return f"a member cannot be read: {error}"
    return None if damaged is None else f"its member {damaged} fails its CRC-32 or header check"


def read_checkpoint(path: str | Path, device: torch.device | str = "cpu",
                    keys: tuple[str, ...] = MODEL_KEYS) -> dict[str, Any]:
    """A posbook checkpoint's contents (``torch.load`` with ``weights_only=True``), or a ValueError that says what
    is wrong with the file: missing, a folder, empty, not a torch file, truncated or damaged anywhere (each member
    of the archive is checked against its CRC-32 first), or a checkpoint without ``keys``."""
    path = _checks.path("path", path)
    device = _checks.device("device", device)
    if not isinstance(keys, tuple) or not all(isinstance(key, str) for key in keys):
        raise TypeError(f"keys must be a tuple of str, got {keys!r}")
    # "checkpoint path": the argument is ``path`` here and ``checkpoint`` in load_model, which reads through here.
    if not path.exists():
        raise ValueError(f"checkpoint path {path} does not exist")
    if path.is_dir():
        raise ValueError(f"checkpoint path {path} is a folder, not a checkpoint file")
    if path.stat().st_size == 0:
        raise ValueError(f"checkpoint path {path} is empty")
    damage = _archive_damage(path)
    if damage is not None:
        raise ValueError(f"checkpoint path {path} is not a readable torch checkpoint: it is damaged or truncated "
                         f"({damage}); write it again or copy it whole")
    try:
        state = torch.load(path, weights_only=True, map_location=device)
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError, UnicodeDecodeError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ValueError(f"checkpoint path {path} is not a readable torch checkpoint ({first[:200]})") from None
    missing = [key for key in keys if not (isinstance(state, dict) and key in state)]
    if missing:
        raise ValueError(f"checkpoint path {path} is not a posbook checkpoint: it has no {missing} (it holds "
                         f"{sorted(state) if isinstance(state, dict) else type(state).__name__})")
    return state


def load_model(checkpoint: str | Path, device: torch.device | str = "cpu", *,
               rope: dict | list | None | str = "as trained") -> tuple[GPT, TrainConfig]:
    """A trained model and its run config from a checkpoint (loaded with weights_only=True).

    ``rope``: the rope configs to rotate with instead of the trained ones (a ``GPTConfig.rope`` value: one
    dict for every rotating layer, a list per layer, None for each layer kind's own), e.g. YaRN at factor 4 to
    read four times the training length; the default keeps those of the checkpoint."""
    _checks.path("checkpoint", checkpoint)
    if isinstance(rope, str) and rope != "as trained":
        raise ValueError(f"rope must be 'as trained', a rope dict, a list of per-layer dicts or None, got {rope!r}")
    state = read_checkpoint(checkpoint, device)
    config = dict(state["config"])
    if not isinstance(rope, str):
        config["rope"] = rope
    model = GPT(GPTConfig(**config)).to(device)
    model.load_state_dict(state["model"])
    # Where the run trained is not part of it: a checkpoint written on a GPU loads on a machine without one.
    return model, TrainConfig(**{**state["run"], "device": None})
