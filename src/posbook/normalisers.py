"""How a row of logits becomes weights: softmax, softmax-off-by-one, a learned sink, or sigmoid.

:data:`NORMALISERS` is the registry: one entry per normaliser, its rule on a row of raw logits. The reference
attention path (:mod:`posbook.core`) and :func:`normalise` call the same rules, so each exists once.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from . import _checks


def normalise(logits: torch.Tensor, normaliser: str = "softmax", *, sink: Any = None,
              sigmoid_bias: float | None = None) -> torch.Tensor:
    """Turn a row of logits into attention weights with one of :data:`NORMALISERS`, along the last dimension.

    The four answers to "may a head look nowhere?" (chapter "Letting attention look nowhere")::

        softmax    e^{s_i} / Σ_j e^{s_j}                  every row sums to exactly 1
        softmax1   e^{s_i} / (1 + Σ_j e^{s_j})            Miller's off-by-one: an extra logit 0 with value 0
        sink       e^{s_i} / (e^{sink} + Σ_j e^{s_j})     a learned logit per head (GPT-OSS, DeepSeek-V4)
        sigmoid    sigmoid(s_i + b), b = −log n by default each weight on its own (Ramapuram et al. 2024)

    ``sink`` is computed without materialising the extra column: softmax(s)·sigmoid(lse(s) − sink), since
    Σe/(Σe + e^sink) = sigmoid(lse − sink); this is stable for any sink and any logits. Entries of ``logits`` equal
    to −inf are hidden keys (weight 0); a row that hides every key gets weight 0 everywhere (no NaN).

    Args:
        logits: floating tensor [..., n] with n ≥ 1; −inf hides a key, NaN and +inf are refused (ValueError).
        normaliser: one of :data:`NORMALISERS`.
        sink: for ``normaliser="sink"``: a real number or a tensor broadcastable to ``logits.shape[:-1]``.
        sigmoid_bias: b for ``normaliser="sigmoid"``; default −log n with n = ``logits.shape[-1]``.

    Returns:
        weights of the shape of ``logits``. Equal to ``attention(..., return_weights=True)``'s weights for the
        same logits (the test suite checks it).
    """
    _check_logits("logits", logits)
    _checks.choice("normaliser", normaliser, NORMALISERS)
    if normaliser == "sink":
        if sink is None:
            raise ValueError("normaliser='sink' needs sink (a number or a tensor of sink logits), got None")
        if isinstance(sink, torch.Tensor):
            _checks.tensor("sink", sink, floating=True)
            _checks.finite("sink", sink)
            _checks.broadcastable_to("sink", sink, tuple(logits.shape[:-1]))
            sink = sink.to(logits.dtype)
        else:
            sink = torch.tensor(_checks.number("sink", sink), dtype=logits.dtype, device=logits.device)
    _check_normaliser_extras(normaliser, sink, sigmoid_bias)

    return _normalised(logits, normaliser, sink, sigmoid_bias)


def _check_logits(name: str, logits: Any) -> None:
    """Rows of logits to normalise: at least one key each, −inf for a hidden key, no NaN or +inf."""
    _checks.tensor(name, logits, ndim_min=1, floating=True)
    if logits.shape[-1] == 0:
        raise ValueError(f"{name} must hold at least one key in its last dimension, got shape {tuple(logits.shape)}")
    _checks.logits(name, logits)


def _check_normaliser_extras(normaliser: str, sink: Any, sigmoid_bias: float | None) -> None:
    """sink and sigmoid_bias belong to one normaliser each (the caller checks the sink's value)."""
    if normaliser != "sink" and sink is not None:
        raise ValueError(f"sink only applies to normaliser='sink', got normaliser={normaliser!r}")
    if sigmoid_bias is not None:
        if normaliser != "sigmoid":
            raise ValueError(f"sigmoid_bias only applies to normaliser='sigmoid', got normaliser={normaliser!r}")
        _checks.number("sigmoid_bias", sigmoid_bias)


def _softmax_and_lse(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax of each row and its logsumexp; a row whose keys are all hidden (−inf) gets weight 0, not NaN."""
    # Shift by the row max, not by the logsumexp: exp(s − lse) would carry lse's rounding (an ulp of a large lse)
    # into every weight, so a softmax row would miss 1 by more than a few ulps.
    row_max = logits.amax(dim=-1, keepdim=True)
    # Only −inf means every key hidden: a +inf logit (an overflow) makes the row NaN, as in SDPA and flex_attention.
    empty = row_max == float("-inf")
    e = torch.exp(logits - torch.where(empty, 0.0, row_max))
    total = e.sum(dim=-1, keepdim=True)
    p = torch.where(empty, 0.0, e / torch.where(empty, 1.0, total))
    return p, row_max + torch.log(total)


def _softmax(logits: torch.Tensor, sink: torch.Tensor | None, sigmoid_bias: float | None) -> torch.Tensor:
    return _softmax_and_lse(logits)[0]


def _with_extra_logit(logits: torch.Tensor, extra: torch.Tensor) -> torch.Tensor:
    # An extra logit s in the denominator rescales every softmax weight by Σe/(Σe + e^s) = sigmoid(lse − s), so it
    # needs no extra column (the "non-materialising" form), and it is stable for any s.
    p, lse = _softmax_and_lse(logits)
    return p * torch.sigmoid(lse - (extra.unsqueeze(-1) if extra.ndim else extra))


def _softmax1(logits: torch.Tensor, sink: torch.Tensor | None, sigmoid_bias: float | None) -> torch.Tensor:
    return _with_extra_logit(logits, torch.zeros((), dtype=logits.dtype, device=logits.device))


def _sink(logits: torch.Tensor, sink: torch.Tensor | None, sigmoid_bias: float | None) -> torch.Tensor:
    return _with_extra_logit(logits, sink)


def _sigmoid(logits: torch.Tensor, sink: torch.Tensor | None, sigmoid_bias: float | None) -> torch.Tensor:
    b = -math.log(logits.shape[-1]) if sigmoid_bias is None else float(sigmoid_bias)
    return torch.sigmoid(logits + b)  # sigmoid(−inf) = 0: hidden keys drop out on their own


NORMALISERS = {"softmax": _softmax, "softmax1": _softmax1, "sink": _sink, "sigmoid": _sigmoid}
"""The registry of the ways a row of logits becomes weights, name → rule ``(logits, sink, sigmoid_bias) -> weights``:
``softmax``; ``softmax1`` (Miller 2023: a 1 added to the denominator, an implicit zero logit); ``sink`` (a learned
logit per head in the denominator: GPT-OSS, DeepSeek-V4); ``sigmoid`` (each weight sigmoid(logit + b) on its own,
Ramapuram et al. 2024). A new normaliser is one entry here.

:meta hide-value:
"""


def _normalised(logits: torch.Tensor, normaliser: str, sink: torch.Tensor | None,
                sigmoid_bias: float | None) -> torch.Tensor:
    """:func:`normalise` without the argument checks (the reference attention path calls it too)."""
    return NORMALISERS[normaliser](logits, sink, sigmoid_bias)
