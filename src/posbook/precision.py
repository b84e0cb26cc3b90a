"""What a score stored in low precision can no longer tell apart: position and token aliasing.

A logit rounded to bfloat16 keeps 8 significant bits. Two distances (or two keys) whose scores round to the same
number are indistinguishable to everything downstream (softmax sees one value). Chapter "The score is a sum of
cosines" counts how often that happens at long context.
"""

from __future__ import annotations

import torch

from . import _checks


def position_aliasing(scores: torch.Tensor, dtype: torch.dtype = torch.bfloat16) -> tuple[torch.Tensor, torch.Tensor]:
    """Position aliasing: distances whose score, rounded to ``dtype``, equals the rounded score at another distance.

    Two such distances are indistinguishable to everything downstream of a logit stored in ``dtype`` (softmax sees
    the same number). Exact: the rounded scores are sorted and equal runs counted, or, for long rows in a 16-bit
    dtype, every bit pattern is counted (a histogram of 65,536 bins per row).

    Args:
        scores: [..., L] scores at L distances (any float dtype; rounded once to ``dtype``).
        dtype: the floating-point dtype the logits are stored in (bfloat16 by default).
    Returns:
        A tuple of the fraction of the L distances that have at least one alias (float64) and the number of
        unordered aliasing pairs (int64), each of the batch shape.
    """
    scores = _checks.scores("scores", scores, 1)
    _checks.dtype("dtype", dtype)
    if dtype.itemsize == 2 and scores.shape[-1] >= 4096:      # long rows: a histogram beats a sort
        return _aliasing_by_histogram(scores, dtype)
    rounded = scores.to(dtype).to(torch.float64).sort(dim=-1).values
    same = rounded[..., 1:] == rounded[..., :-1]
    aliased = torch.zeros(rounded.shape, dtype=torch.bool, device=rounded.device)
    aliased[..., 1:] |= same
    aliased[..., :-1] |= same
    # In sorted order, element j has (j − first index of its run) equal elements before it; these sum to the
    # number of unordered equal pairs, Σ c(c − 1)/2 over runs of length c.
    index = torch.arange(rounded.shape[-1], device=rounded.device).expand(rounded.shape)
    new_run = torch.ones(rounded.shape, dtype=torch.bool, device=rounded.device)
    new_run[..., 1:] = ~same
    run_start = torch.where(new_run, index, torch.zeros_like(index)).cummax(dim=-1).values
    return aliased.to(torch.float64).mean(dim=-1), (index - run_start).sum(dim=-1)


def _aliasing_by_histogram(scores: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """position_aliasing for a 16-bit dtype: count each bit pattern per row instead of sorting."""
    lead, length = scores.shape[:-1], scores.shape[-1]
    bits = scores.to(dtype).view(torch.int16).to(torch.int64).reshape(-1, length) & 0xFFFF
    bits = torch.where(bits == 0x8000, torch.zeros_like(bits), bits)        # −0 equals +0 as a number
    rows = bits.shape[0]
    counts = torch.bincount((bits + (torch.arange(rows, device=bits.device)[:, None] << 16)).reshape(-1),
                            minlength=rows << 16).reshape(rows, 1 << 16)
    aliased = (counts * (counts >= 2)).sum(-1)
    pairs = (counts * (counts - 1)).sum(-1) // 2
    return (aliased.to(torch.float64) / length).reshape(lead), pairs.reshape(lead)


def token_aliasing_rate(scores_1: torch.Tensor, scores_2: torch.Tensor,
                        dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """Token aliasing: the fraction of distances at which two keys' scores round to the same ``dtype`` value.

    At those distances a query cannot tell the two keys apart, however different their content.

    Returns:
        float64 tensor of the batch shape.
    """
    scores_1 = _checks.scores("scores_1", scores_1, 1)
    scores_2 = _checks.scores("scores_2", scores_2, 1)
    if scores_1.shape != scores_2.shape:
        raise ValueError(f"scores_1 and scores_2 must have one shape, got {tuple(scores_1.shape)} and "
                         f"{tuple(scores_2.shape)}")
    _checks.dtype("dtype", dtype)
    return (scores_1.to(dtype) == scores_2.to(dtype)).to(torch.float64).mean(dim=-1)
