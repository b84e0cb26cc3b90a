"""The evaluation protocols of a run: validation loss and bits per byte for text (over non-overlapping windows, by
position, and by sliding windows), exact match by problem size for the algorithmic tasks.

Each is a function of the model, the run's configuration and its seed: the same model evaluated twice gives the
same numbers, which is what lets a page check shipped weights against their record.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from .. import _checks
from . import corpus as corpus_lib
from . import tasks as tasks_lib
from .config import TrainConfig, vocab_size
from .model import GPT


def _bits_per_byte(mean_loss_nats: float) -> float:
    """Nats to bits, unchecked (unlike corpus.bits_per_byte): evaluated during training, a diverged run's NaN loss
    gives NaN bits rather than stopping the run."""
    return mean_loss_nats / math.log(2)


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
    run = _checks.instance("run", run, TrainConfig).resolved()
    _model(model, vocab_size(run.task))
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
            out["val_bpb"] = _bits_per_byte(out["val_loss"])
            # Beyond the training length: every position of the longer windows counts, so this is the mean over
            # positions 1..T' (the extrapolation curve by position is analysis's business).
            out["val_bpb_by_len"] = {str(length): _bits_per_byte(loss) for length, loss in by_length.items()
                                     if length in run.eval_seq_lens}
        if run.eval_stride is not None:
            out["val_bpb_sliding_by_len"] = {
                str(length): sliding_window_bpb(model, data.val, length, run.eval_stride,
                                                windows=run.eval_batches * run.batch_size,
                                                first_target=max(run.eval_seq_lens), device=device)
                for length in run.eval_seq_lens}
    else:
        # Three scores side by side, so that neither a failure nor a success hides: exact match, the share of answer
        # tokens right, and exact match when the decoder is told the answer's length (no EOS needed).
        metrics = {"accuracy_by_size": tasks_lib.exact_match, "token_accuracy_by_size": tasks_lib.token_accuracy,
                   "given_length_accuracy_by_size": tasks_lib.exact_match_given_length}
        scores = {name: {} for name in metrics}
        positioned = tasks_lib.TASKS[run.task].positions
        for size in run.eval_sizes:
            sums = dict.fromkeys(metrics, 0.0)
            # A coupled task's ids run from its offset to offset + size + 1: evaluation draws offsets that keep them
            # inside the range training reached (max_offset + train_max_size + 1), so a longer problem meets no id
            # an absolute embedding never trained.
            max_offset = max(0, (run.max_offset or 0) + run.train_max_size - size)
            for _ in range(run.eval_batches):
                batch = tasks_lib.make_batch(run.task, [size] * run.batch_size, gen, max_offset=max_offset,
                                             with_positions=positioned)
                ids = batch[2] if positioned else None
                if run.random_positions is not None:
                    ids = tasks_lib.random_position_ids(run.batch_size, batch[0].shape[1], run.random_positions, gen)
                logits = model(batch[0].to(device), None if ids is None else ids.to(device))
                for name, metric in metrics.items():
                    sums[name] += metric(logits, batch[1].to(device)).mean().item()
            for name in metrics:
                scores[name][str(size)] = sums[name] / run.eval_batches
        out.update(scores)
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
    return _bits_per_byte(total / count)


def text_by_position(model: GPT, run: TrainConfig, val: torch.Tensor, device: torch.device) -> dict[str, Any]:
    """The non-overlapping protocol of a run with ``eval_position_bin``, from one set of windows of the longest eval
    length: validation loss and bits per byte at ``seq_len``, bits per byte at every eval length, and by position
    (binned) — the numbers :func:`evaluate` records, without the sliding-window part. ``run`` is resolved here."""
    run = _checks.instance("run", run, TrainConfig).resolved()
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
    out["val_bpb"] = _bits_per_byte(out["val_loss"])
    out["val_bpb_by_len"] = {str(length): (at[length] / math.log(2)).mean().item() for length in run.eval_seq_lens}
    out["val_bpb_by_position"] = [bits[i:i + width].mean().item() for i in range(0, longest, width)]
    return out
