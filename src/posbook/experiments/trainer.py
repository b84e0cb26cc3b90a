"""The training loop: AdamW with warmup and a cosine decay, atomic checkpoints, exact resume, DDP under torchrun,
and a results dict (and JSON) that says where its numbers came from.

Every batch is a pure function of (seed, step): a killed run resumed from its last checkpoint sees the same
batches, the same learning rates and the same optimizer state, so it ends with the same numbers as a run that
was never interrupted (the test suite kills one with SIGKILL to check). Under DDP every rank draws the same global
batch and trains on its share of the rows, so N processes follow the one-process loss curve.

A run that starts from a recorded run's weights (``init_from``) is handed those weights by its caller
(:func:`posbook.experiments.store.initial_weights` reads them): the loop knows nothing of records and grids.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
import warnings
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from .. import _checks
from ..device import default_device, training_precision
from . import corpus as corpus_lib
from . import tasks as tasks_lib
from .checkpoints import RESUME_KEYS, read_checkpoint
from .config import BETAS, TrainConfig, gpt_config
from .evaluation import evaluate
from .model import GPT

# Dense bf16 peak throughput in FLOP/s, for an MFU estimate; unknown devices report no MFU.
PEAK_FLOPS = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "A10G": 125e12, "L4": 121e12,
              "T4": 65e12, "V100": 125e12}


def peak_flops(device: torch.device | str) -> float | None:
    """The dense bf16 peak of a CUDA device from PEAK_FLOPS by its name, None for an unknown GPU or not a GPU: the
    denominator of a run's MFU."""
    device = _checks.device("device", device)
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((value for key, value in PEAK_FLOPS.items() if key in name), None)


def learning_rate(run: TrainConfig, step: int) -> float:
    """Linear warmup to lr, then cosine decay to lr/10 at the last step (and lr/10 after it). ``run`` is resolved
    here; ``step`` counts from 0."""
    run = _checks.instance("run", run, TrainConfig).resolved()
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
    run = _checks.instance("run", run, TrainConfig).resolved()
    _checks.number("step", step, integer=True, min_value=0)
    return _largest_train_size(run, step)


def _largest_train_size(run: TrainConfig, step: int) -> int:
    if not run.curriculum_steps or step >= run.curriculum_steps:
        return run.train_max_size
    return 1 + (run.train_max_size - 1) * step // run.curriculum_steps


def _batch(run: TrainConfig, data: corpus_lib.Corpus | None, step: int):
    """The global batch of a training step, (inputs, targets, position ids or None for 0 … T − 1): a function of
    (seed, step) only."""
    gen = torch.Generator().manual_seed(run.seed * 1_000_003 + step)
    if run.task == "text":
        return (*corpus_lib.text_batch(data.train, run.batch_size, run.seq_len, gen), None)
    sizes = torch.randint(1, _largest_train_size(run, step) + 1, (run.batch_size,), generator=gen).tolist()
    if tasks_lib.TASKS[run.task].positions:
        return tasks_lib.make_batch(run.task, sizes, gen, max_offset=run.max_offset or 0, with_positions=True)
    x, y = tasks_lib.make_batch(run.task, sizes, gen)
    if run.random_positions is None:
        return x, y, None
    return x, y, tasks_lib.random_position_ids(len(x), x.shape[1], run.random_positions, gen)


def _loss(logits: torch.Tensor, targets: torch.Tensor, count: int) -> torch.Tensor:
    """Summed cross-entropy over the counted targets, divided by the global count (not the local one), so that
    the ranks' shares add up to the one-process mean."""
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=tasks_lib.IGNORE,
                           reduction="sum") / count


def git_sha() -> str:
    """The commit checked out where posbook is installed from (``unknown`` outside a git checkout): the provenance a
    record gives for the code that ran."""
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


def train(run: TrainConfig, initial_weights: Mapping[str, torch.Tensor] | None = None) -> dict[str, Any]:
    """Train one model; returns the results dict (also written to ``out_dir/results.json`` by rank 0).

    ``initial_weights``: the state dict to start from, for a run with ``init_from`` (and only for one, so that its
    results say where it started): the weights of that recorded run, which
    :func:`posbook.experiments.store.initial_weights` reads. The run's own rope config stays (the rotary tables are
    not weights), so a model trained with one rotation can be read or fine-tuned with another."""
    run = _checks.instance("run", run, TrainConfig).resolved()
    if initial_weights is not None:
        _checks.mapping("initial_weights", initial_weights)
        if run.init_from is None:
            raise ValueError("initial_weights given but run.init_from is None: name the recorded run they come from "
                             "(init_from='grid:label'), so that the results say where the run started")
    elif run.init_from is not None:
        raise ValueError(f"run.init_from={run.init_from!r} but initial_weights is None: pass that run's weights "
                         "(posbook.experiments.store.initial_weights(run) reads them), or train the run through "
                         "posbook.experiments.store (run_grid, train_many), which does")
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

    git_sha_now = git_sha()    # the commit checked out when the run starts (the code that runs)
    data = corpus_lib.load_corpus(run.corpus_bytes) if run.task == "text" else None
    config = gpt_config(run)
    torch.manual_seed(run.seed)
    model = GPT(config).to(device)
    if initial_weights is not None:
        try:
            model.load_state_dict(initial_weights)
        except RuntimeError as error:       # torch lists every missing, unexpected and misshapen tensor
            first = str(error).strip().splitlines()[0]
            raise ValueError(f"init_from={run.init_from!r}: initial_weights do not fit the model of this run "
                             f"({first[:300]}); they must be that run's weights, and this run must keep its model "
                             "config but for the rope") from None
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
        x, y, positions = _batch(run, data, step)
        count = int((y != tasks_lib.IGNORE).sum())
        x, y = x[rank::world].to(device), y[rank::world].to(device)
        inputs = (x,) if positions is None else (x, positions[rank::world].to(device))
        for group in optimizer.param_groups:
            group["lr"] = _learning_rate(run, step)
        with autocast:
            loss = _loss(ddp(*inputs), y, count) * world   # DDP averages gradients over ranks; × world undoes that
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
        peak = peak_flops(device)
        seq = run.seq_len if run.task == "text" else config.max_seq_len
        mfu = model.flops_per_token(seq) * tokens_per_s / (peak * world) if peak else None
    results = {
        "final": final, "history": history, "tokens_per_s": tokens_per_s, "mfu": mfu,
        "model": config.to_dict(), "run": asdict(run), "n_params": model.num_params(),
        "provenance": {"git_sha": git_sha_now, "torch": torch.__version__, "python": sys.version.split()[0],
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
