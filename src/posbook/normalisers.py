"""How a row of logits becomes weights: softmax, softmax-off-by-one, a learned sink, sigmoid, or stick-breaking.

:data:`NORMALISERS` is the registry: one :class:`Normaliser` per normaliser, its rule on a row of raw logits and
the fast attention paths that implement it. :func:`normalise` checks its arguments and calls :func:`normalised`,
the unchecked rule that the reference attention path (:mod:`posbook.core`) calls too, so each rule exists once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.nn.functional as F

from . import _checks


def normalise(logits: torch.Tensor, normaliser: str = "softmax", *, sink: Any = None,
              sigmoid_bias: float | None = None) -> torch.Tensor:
    """Turn a row of logits into attention weights with one of :data:`NORMALISERS`, along the last dimension.

    The answers to "may a head look nowhere?" (chapter "Letting attention look nowhere")::

        softmax         e^{s_i} / Σ_j e^{s_j}                  every row sums to exactly 1
        softmax1        e^{s_i} / (1 + Σ_j e^{s_j})            Miller's off-by-one: an extra logit 0 with value 0
        sink            e^{s_i} / (e^{sink} + Σ_j e^{s_j})     a learned logit per head (GPT-OSS, DeepSeek-V4)
        sigmoid         sigmoid(s_i + b), b = −log n by default each weight on its own (Ramapuram et al. 2024)
        stick_breaking  σ(s_i) Π_{l>i} (1 − σ(s_l))            the nearest key takes its share first (Tan et al.
                                                               2024); keys in order, the last the nearest

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
    _checks.logit_rows("logits", logits)
    _checks.owned_options("normaliser", normaliser, NORMALISERS, {"sink": sink, "sigmoid_bias": sigmoid_bias},
                          option="option", required="option_required")
    if sigmoid_bias is not None:
        _checks.number("sigmoid_bias", sigmoid_bias)
    if isinstance(sink, torch.Tensor):
        _checks.tensor("sink", sink, floating=True)
        _checks.finite("sink", sink)
        _checks.broadcastable_to("sink", sink, tuple(logits.shape[:-1]))
        sink = sink.to(logits.dtype)
    elif sink is not None:
        sink = torch.tensor(_checks.number("sink", sink), dtype=logits.dtype, device=logits.device)
    return normalised(logits, normaliser, sink, sigmoid_bias)


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


def extra_logit_rescale(lse: torch.Tensor, extra: torch.Tensor) -> torch.Tensor:
    """The factor Σe/(Σe + e^s) = sigmoid(lse − s) by which one more logit ``extra`` (s) in a softmax's denominator
    scales every weight of a row whose logsumexp is ``lse``; unchecked.

    So softmax1 and a sink need no extra column (the "non-materialising" form), and the factor is stable for any s:
    the reference rules below and the flex_attention path of :mod:`posbook.core` (which has only the lse) both use it.
    """
    return torch.sigmoid(lse - extra)


def _softmax(logits: torch.Tensor, sink: torch.Tensor | None, sigmoid_bias: float | None) -> torch.Tensor:
    return _softmax_and_lse(logits)[0]


def _zero_logit(rows: torch.Tensor, sink: torch.Tensor | None) -> torch.Tensor:
    return torch.zeros((), dtype=rows.dtype, device=rows.device)


def _sink_logit(rows: torch.Tensor, sink: torch.Tensor | None) -> torch.Tensor:
    return sink.to(rows.dtype)


def _softmax_with(extra_logit: Callable[[torch.Tensor, torch.Tensor | None], torch.Tensor]) -> Callable:
    """The rule of a softmax with one more logit, ``extra_logit(logits, sink)``, in each row's denominator."""

    def rule(logits: torch.Tensor, sink: torch.Tensor | None, sigmoid_bias: float | None) -> torch.Tensor:
        p, lse = _softmax_and_lse(logits)
        return p * extra_logit_rescale(lse, extra_logit(logits, sink)[..., None])

    return rule


def _sigmoid(logits: torch.Tensor, sink: torch.Tensor | None, sigmoid_bias: float | None) -> torch.Tensor:
    b = -math.log(logits.shape[-1]) if sigmoid_bias is None else float(sigmoid_bias)
    return torch.sigmoid(logits + b)  # sigmoid(−inf) = 0: hidden keys drop out on their own


def _stick_breaking(logits: torch.Tensor, sink: torch.Tensor | None, sigmoid_bias: float | None) -> torch.Tensor:
    # In log space, so that no product of many factors below 1 underflows: log σ(s_i) + Σ_{l>i} log(1 − σ(s_l)),
    # with log(1 − σ(s)) = log σ(−s). A hidden key (−inf) takes nothing and passes everything on (log σ(+inf) = 0).
    passed = F.logsigmoid(-logits).flip(-1).cumsum(-1).flip(-1)      # Σ_{l≥i}: shifted by one key below
    after = torch.cat([passed[..., 1:], torch.zeros_like(passed[..., :1])], dim=-1)
    return torch.exp(F.logsigmoid(logits) + after)


@dataclass(frozen=True)
class Normaliser:
    """One way a row of logits becomes weights: its rule, and what the fast paths of :mod:`posbook.core` need of it.

    Attributes:
        rule: ``(logits, sink, sigmoid_bias) -> weights`` on rows of raw logits (−inf hides a key; ``sink`` a tensor
            broadcastable to ``logits.shape[:-1]``): the reference, run by :func:`normalise`, :func:`normalised` and
            the reference attention path.
        paths: the fast paths of :func:`posbook.core.attention` that implement it besides the reference: ``"sdpa"``
            (a plain softmax) and ``"flex"`` (a softmax, rescaled by ``extra_logit``'s share). A path that is not
            listed refuses the normaliser by name.
        extra_logit: for a softmax with one more logit s in each row's denominator (softmax1: 0; sink: the learned
            one), ``(rows, sink) -> s`` broadcastable to ``rows.shape`` (dtype and device of ``rows``); the flex path
            rescales its softmax by :func:`extra_logit_rescale` of it. None for any other normaliser.
        option: the argument only this normaliser reads (``"sink"``, ``"sigmoid_bias"``), or None; given with
            another normaliser it is an error.
        option_required: the option has no default and must be given.
        ordered: the rule reads a row's keys in order, the last the nearest (stick-breaking): the weights carry
            position by themselves, and the row must hold no key after its query (a causal mask).
    """

    rule: Callable[[torch.Tensor, torch.Tensor | None, float | None], torch.Tensor]
    paths: tuple[str, ...] = ()
    extra_logit: Callable[[torch.Tensor, torch.Tensor | None], torch.Tensor] | None = None
    option: str | None = None
    option_required: bool = False
    ordered: bool = False

    def __post_init__(self) -> None:
        _checks.function("rule", self.rule)
        if not isinstance(self.paths, tuple) or not set(self.paths) <= {"sdpa", "flex"}:
            raise ValueError(f"paths must be a tuple of fast paths 'sdpa' and 'flex', got {self.paths!r}")
        if self.extra_logit is not None:
            _checks.function("extra_logit", self.extra_logit)
        if self.option is not None:
            _checks.text("option", self.option)
        _checks.flag("option_required", self.option_required)
        _checks.flag("ordered", self.ordered)


NORMALISERS: dict[str, Normaliser] = {
    "softmax": Normaliser(_softmax, paths=("sdpa", "flex")),
    "softmax1": Normaliser(_softmax_with(_zero_logit), paths=("flex",), extra_logit=_zero_logit),
    "sink": Normaliser(_softmax_with(_sink_logit), paths=("flex",), extra_logit=_sink_logit, option="sink",
                       option_required=True),
    "sigmoid": Normaliser(_sigmoid, option="sigmoid_bias"),
    "stick_breaking": Normaliser(_stick_breaking, ordered=True),
}
"""The registry of the ways a row of logits becomes weights, name → :class:`Normaliser`: ``softmax``; ``softmax1``
(Miller 2023: a 1 added to the denominator, an implicit zero logit); ``sink`` (a learned logit per head in the
denominator: GPT-OSS, DeepSeek-V4); ``sigmoid`` (each weight sigmoid(logit + b) on its own, Ramapuram et al. 2024);
``stick_breaking`` (Tan et al. 2024: from the nearest key back, each takes σ(logit) of what the nearer ones left, so
a row sums to 1 − Π(1 − σ); the last key of a row is the nearest, so it is for causal masks).
A new normaliser is one entry here: its rule, and the fast paths that implement it.

:meta hide-value:
"""


def normalised(logits: torch.Tensor, normaliser: str, sink: torch.Tensor | None = None,
               sigmoid_bias: float | None = None) -> torch.Tensor:
    """:func:`normalise` unchecked: the rule of ``NORMALISERS[normaliser]`` on rows of logits, ``sink`` (for
    ``"sink"``) a tensor broadcastable to ``logits.shape[:-1]``. The reference attention path and
    :func:`posbook.diff_attention.differential_weights` call it on logits they checked or made."""
    return NORMALISERS[normaliser].rule(logits, sink, sigmoid_bias)
