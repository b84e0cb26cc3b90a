"""Probes of trained experiment models: every layer's attention rows and weights, needle-in-a-haystack attention
mass and the answer's gradient influence on passkey models.

The passkey task (:mod:`posbook.experiments.tasks`) lays out one example as::

    BOS  filler[:depth]  MARK d1 … d5 MARK  filler[depth:]  QUERY SEP  d1 … d5 EOS

:func:`passkey_probe_batch` builds a batch of such examples with the needle at one chosen depth, so that every row
shares the same token regions, and names those regions the way Yang et al. (2025) do for their
needle-in-a-haystack probe: Begin (the first tokens, where an attention sink sits), Needle (the marked passkey),
Context (the filler) and End (the query and the answer). :func:`niah_attention_mass` then measures, per layer, how
much attention the End queries put on each region (with :func:`posbook.influence.attention_mass`), and
:func:`answer_gradient_influence` the gradient influence G(d) of the first answer digit
(:func:`posbook.influence.gradient_influence`). Chapter "Long-context probes on trained models" uses them.

:func:`attention_rows` and :func:`attention_weights` run one recorded forward pass of a GPT
(:meth:`~posbook.experiments.model.GPT.recording_attention`) and recompute each layer's weights with the reference
attention path, so they are the weights of the real forward pass (chapters "Entropy collapse", "Length
generalisation").
"""

from __future__ import annotations

import math
from typing import Any

import torch

from .. import _checks
from ..core import attention as reference_attention
from ..influence import attention_mass, gradient_influence
from .model import GPT
from . import tasks


def attention_rows(model: torch.nn.Module, idx: torch.Tensor) -> dict[str, torch.Tensor]:
    r"""Entropy and centred logit norm of every attention row of a :class:`posbook.experiments.model.GPT`.

    Runs ``model(idx)`` once without gradients inside :meth:`~posbook.experiments.model.GPT.recording_attention`
    and recomputes each layer's weights with :func:`posbook.core.attention` (reference path), so the rows are
    those of the real forward pass, temperature included. For each row (layer, sequence, head, query) it returns
    the Shannon entropy of the weights (nats) and the centred 2-norm of the logits over the keys the query can
    see, :math:`\lVert z - \bar z\rVert_2`. For plain softmax layers (no bias, softcap, sinks or extra scales)
    the logits are recomputed from q and k in float64, so keys whose float32 weight underflowed still count;
    otherwise :math:`z_j = \log p_j + \text{const}` is used, which softmax's shift invariance makes exact, and a
    row with an underflowed weight gets NaN.

    Args:
        model: a posbook.experiments GPT.
        idx: [batch, T] token ids.
    Returns:
        A dict with "entropy" and "logit_norm", each float64 of shape [n_layer, batch, n_head, T].
    """
    entropies: list[torch.Tensor] = []
    norms: list[torch.Tensor] = []
    with torch.no_grad():
        for weights, (q, k, _, call) in _recorded_weights(model, idx):
            w = weights.to(torch.float64)
            logs = torch.where(w > 0, w.log(), torch.zeros_like(w))
            entropies.append(-(w * logs).sum(dim=-1))
            tq, tk = w.shape[-2], w.shape[-1]
            visible = torch.ones(tq, tk, dtype=torch.bool, device=w.device)
            if call["causal"]:
                visible = visible.tril(tk - tq)
            if call["mask"] is not None:
                visible = visible & call["mask"]
            count = visible.sum(dim=-1)
            plain = all(call[name] is None for name in ("query_scale", "bias", "softcap", "sink"))
            if plain:
                # Recompute the logits in float64 so that keys whose weight underflowed still count.
                qd, kd = q.to(torch.float64), k.to(torch.float64)
                kd = kd.repeat_interleave(qd.shape[1] // kd.shape[1], dim=1)
                z = qd @ kd.transpose(-2, -1) / math.sqrt(qd.shape[-1])
            else:
                z = logs
                visible = visible & (w > 0)
            z = torch.where(visible, z, torch.zeros_like(z))
            mean = z.sum(dim=-1, keepdim=True) / visible.sum(dim=-1, keepdim=True)
            centred = torch.where(visible, z - mean, torch.zeros_like(z))
            norm = centred.norm(dim=-1)
            if not plain:
                lost = visible.sum(dim=-1) < count
                norm = torch.where(lost, torch.full_like(norm, float("nan")), norm)
            norms.append(norm)
    return {"entropy": torch.stack(entropies), "logit_norm": torch.stack(norms)}


def attention_weights(model: torch.nn.Module, idx: torch.Tensor,
                      position_ids: torch.Tensor | None = None) -> torch.Tensor:
    r"""The attention weights of every layer of a :class:`posbook.experiments.model.GPT` on one batch.

    Runs ``model(idx, position_ids)`` once without gradients inside
    :meth:`~posbook.experiments.model.GPT.recording_attention` and recomputes each layer's weights with
    :func:`posbook.core.attention` (reference path), as :func:`attention_rows` does, so they are the weights
    of the real forward pass (biases, masks and temperature included). Rows that a causal mask hides are 0.

    Args:
        model: a posbook.experiments GPT.
        idx: [batch, T] token ids.
        position_ids: the ids the model reads positions from ([T] or [batch, T]; default 0 … T − 1), as in
            :meth:`~posbook.experiments.model.GPT.forward`.
    Returns:
        float64 tensor [n_layer, batch, n_head, T, T]; entry [l, b, h, t, s] is how much query t attends to key s.
    """
    return torch.stack([weights.to(torch.float64) for weights, _ in _recorded_weights(model, idx, position_ids)])


def _ids(name: str, value: Any, model: Any) -> torch.Tensor:
    """Token ids [batch, T] for ``model`` (a GPT): in its vocabulary, 1 ≤ T ≤ max_seq_len, at least one row."""
    _checks.instance("model", model, GPT)
    _checks.token_ids(name, value, model.config.vocab_size)
    if not value.shape[0] or not value.shape[1] or value.shape[1] > model.config.max_seq_len:
        raise ValueError(f"{name} must hold at least one sequence of 1 … max_seq_len={model.config.max_seq_len} "
                         f"tokens, got shape {tuple(value.shape)}")
    return value


def _recorded_weights(model: torch.nn.Module, idx: torch.Tensor,
                      position_ids: torch.Tensor | None = None) -> list[tuple[torch.Tensor, tuple]]:
    """One eval-mode forward of a GPT with its attention recorded: per layer, the weights recomputed by the
    reference attention path and the recorded ``(q, k, v, call)``."""

    _ids("idx", idx, model)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), model.recording_attention() as calls:
            model(idx, position_ids)
            return [(reference_attention(q, k, v, return_weights=True, impl="reference", **call)[1], (q, k, v, call))
                    for q, k, v, call in calls]
    finally:
        model.train(was_training)


REGIONS = ("begin", "needle", "context", "end")


def passkey_probe_batch(n: int, depth: int, batch: int, generator: torch.Generator, *,
                        n_begin: int = 3) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """A batch of passkey examples with ``n`` filler tokens and the needle after ``depth`` of them.

    Tokens are drawn as in :func:`posbook.experiments.tasks.make_batch` (random digits for the key, random
    non-digit symbols for the filler), only the depth is fixed, so that the regions are the same in every row.

    Args:
        n: filler tokens (the haystack size of the task), ≥ 1.
        depth: filler tokens before the needle, in [n_begin − 1, n] so that Begin holds no needle token.
        batch: number of examples, ≥ 1.
        generator: a torch.Generator (the draws are reproducible).
        n_begin: tokens in the Begin region: BOS and the first n_begin − 1 filler tokens, ≥ 1.
    Returns:
        ``(inputs, targets, regions)``: inputs and targets [batch, T] with T = n + 2·5 + 5 (the input stops before
        EOS; targets are IGNORE except on the answer digits and EOS, as in make_batch), and regions, name → bool
        tensor [T] over the input positions, for "begin", "needle" (MARK, the five digits, MARK), "context" (the
        other filler tokens) and "end" (QUERY, SEP and the five answer digits). The four regions partition the
        positions.
    """

    _checks.size("n", n)
    _checks.size("batch", batch)
    _checks.size("n_begin", n_begin)
    _checks.number("depth", depth, integer=True)
    if not n_begin - 1 <= depth <= n:
        raise ValueError(f"depth must be in [n_begin - 1, n] = [{n_begin - 1}, {n}] so that Begin holds no needle "
                         f"token, got {depth}")
    _checks.generator("generator", generator, optional=False)
    k = tasks.PASSKEY_DIGITS
    key = torch.randint(0, 10, (batch, k), generator=generator)
    filler = torch.randint(10, tasks.N_SYMBOLS, (batch, n), generator=generator)

    def column(token: int) -> torch.Tensor:
        return torch.full((batch, 1), token, dtype=torch.long)

    tokens = torch.cat([column(tasks.BOS), filler[:, :depth], column(tasks.MARK), key, column(tasks.MARK),
                        filler[:, depth:], column(tasks.QUERY), column(tasks.SEP), key, column(tasks.EOS)], dim=1)
    inputs = tokens[:, :-1].contiguous()
    answer_start = n + k + 5                     # BOS + n filler + MARK + k digits + MARK + QUERY + SEP
    targets = torch.full_like(inputs, tasks.IGNORE)
    targets[:, answer_start - 1:] = tokens[:, answer_start:]
    t = inputs.shape[1]
    pos = torch.arange(t)
    needle = (pos >= depth + 1) & (pos <= depth + k + 2)
    end = pos >= answer_start - 2                # QUERY, SEP and the answer digits fed back in
    begin = pos < n_begin
    context = ~(needle | end | begin)
    return inputs, targets, {"begin": begin, "needle": needle, "context": context, "end": end}


def niah_attention_mass(model: torch.nn.Module, inputs: torch.Tensor,
                        regions: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Attention mass of the End queries on each region, per layer (Yang et al. 2025's NIAH bookkeeping).

    Takes every layer's weights from :func:`attention_weights` (the real forward pass: local
    masks, biases and QK-Norm included), keeps the rows of the queries in ``regions["end"]`` and sums them per region
    with :func:`posbook.influence.attention_mass`, averaged over the batch, the heads and the End queries.

    Args:
        model: a posbook.experiments GPT.
        inputs: [batch, T] token ids.
        regions: name → bool tensor [T]; must contain "end" (the queries).
    Returns:
        name → float64 tensor [n_layer]; the mean over layers is the figure Yang et al. report.
    """

    _ids("inputs", inputs, model)
    if not isinstance(regions, dict) or "end" not in regions:
        raise ValueError(f"regions must be a dict of name -> bool tensor with an 'end' entry, got "
                         f"{sorted(regions) if isinstance(regions, dict) else type(regions).__name__}")
    end = regions["end"]
    _checks.tensor("regions['end']", end, ndim=1)
    if end.dtype != torch.bool or end.shape[0] != inputs.shape[1] or not bool(end.any()):
        raise ValueError(f"regions['end'] must be a non-empty bool tensor of {inputs.shape[1]} entries, got "
                         f"dtype {end.dtype}, {end.shape[0]} entries")
    layers = [attention_mass(weights[..., end, :], regions) for weights in attention_weights(model, inputs)]
    return {name: torch.stack([mass[name] for mass in layers]) for name in regions}


def answer_gradient_influence(model: torch.nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """G(d) of the first answer digit: :func:`posbook.influence.gradient_influence` at the SEP position.

    The prediction made at SEP is the first passkey digit; G(d) is the mean norm of the gradient of its
    log-probability with respect to the input embedding d tokens back (d = 0 is SEP itself).

    Args:
        model: a posbook.experiments GPT.
        inputs, targets: [batch, T] from :func:`passkey_probe_batch` (all rows of the same layout).
    Returns:
        float64 tensor [t + 1] with t the SEP position; entry d = G(d).
    """

    _ids("inputs", inputs, model)
    _checks.tensor("targets", targets, ndim=2, integer=True)
    if targets.shape != inputs.shape:
        raise ValueError(f"targets must have the shape of inputs {tuple(inputs.shape)}, got {tuple(targets.shape)}")
    sep = (inputs == tasks.SEP).nonzero()
    if sep.shape[0] != inputs.shape[0] or not bool((sep[:, 1] == sep[0, 1]).all()):
        raise ValueError("inputs must hold exactly one SEP per row, at the same position in every row "
                         "(use passkey_probe_batch)")
    position = int(sep[0, 1])
    _checks.token_ids("targets at the SEP position", targets[:, position], model.config.vocab_size, ndim=1)
    # int64 for the embedding lookup and the gather of the target's log-probability
    return gradient_influence(model, model.embed, inputs.long(), targets.long(), position=position)
