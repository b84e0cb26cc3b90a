"""Where attention goes and how far back the loss still listens: attention mass per region of the keys, and the
gradient influence G(d) of the token d positions back.

Both work on any model: :func:`attention_mass` on a tensor of weights, :func:`gradient_influence` on any module
with an embedding inside. Chapter "iRoPE and hybrids" introduces them; :mod:`posbook.experiments.probes` applies
them to trained passkey models.
"""

from __future__ import annotations

import torch

from . import _checks


def attention_mass(weights: torch.Tensor, regions: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Attention mass per region of the keys, averaged over every leading dimension (batch, heads, queries).

    This is the bookkeeping of the needle-in-a-haystack probe of Yang et al. (2025): the keys are split into
    regions (e.g. "begin", "needle", "context", "end"), each query's weights are summed over each region, and the
    sums are averaged. Chapter "iRoPE and hybrids" uses it.

    Args:
        weights: [..., Tk] attention weights (each row a distribution over the Tk keys; finite).
        regions: name → bool tensor [Tk], True for the keys of that region. Regions may overlap or leave keys out.
    Returns:
        name → 0-d float64 tensor, the mean mass on that region.
    """
    _checks.tensor("weights", weights, ndim_min=1, floating=True)
    _checks.finite("weights", weights)
    _checks.mapping("regions", regions)
    if not regions:
        raise ValueError("regions must name at least one region (name -> bool tensor), got an empty dict")
    tk = weights.shape[-1]
    out = {}
    for name, region in regions.items():
        _checks.tensor(f"regions[{name!r}]", region, ndim=1)
        if region.dtype != torch.bool:
            raise TypeError(f"regions[{name!r}] must be a bool tensor, got dtype {region.dtype}")
        if region.shape[0] != tk:
            raise ValueError(f"regions[{name!r}] must have {tk} entries (one per key), got {region.shape[0]}")
        out[name] = (weights.to(torch.float64) * region.to(weights.device, torch.float64)).sum(dim=-1).mean()
    return out


def gradient_influence(model: torch.nn.Module, embedding: torch.nn.Module, idx: torch.Tensor,
                       targets: torch.Tensor, *, position: int = -1) -> torch.Tensor:
    r"""The gradient-influence profile :math:`G(d) = \mathbb{E}_x\,\lVert \partial s(x) / \partial e_{t-d} \rVert_2`.

    s(x) is the log-probability the model gives the true next token at position t (its loss, up to the sign, so
    the norm is the loss's), and :math:`e_{t-d}` the input embedding of the token d positions earlier; the
    expectation is the mean over the batch. G(d) says how strongly the prediction at t still depends on the token
    at distance d (Qiao et al. 2026 measure it on long documents). A forward hook on ``embedding`` captures its
    output, so the model needs no special entry point; sequences in a batch do not interact, so one backward pass
    gives every sequence's gradient. Chapter "iRoPE and hybrids" uses it.

    Args:
        model: maps idx [batch, T] to logits [batch, T, vocab].
        embedding: the module inside ``model`` whose output [batch, T, dim] is the input embedding; when it is an
            ``nn.Embedding``, idx must hold ids below its ``num_embeddings``.
        idx: [batch, T] integer token ids (passed to the model as int64).
        targets: [batch, T] integer next-token ids; only column t is used (it must hold ids in 0 … vocab − 1,
            the other columns may hold anything, e.g. an ignore index).
        position: t; negative values count from the end (default: the last position).
    Returns:
        float64 tensor [t + 1], entry d = G(d) for d = 0 … t.
    """
    _checks.module("model", model)
    _checks.module("embedding", embedding)
    _checks.tensor("idx", idx, ndim=2, integer=True)
    _checks.tensor("targets", targets, ndim=2, integer=True)
    # As int64 before the range checks: a uint8 tensor compared with 256 would wrap round.
    idx, targets = idx.long(), targets.long()
    if isinstance(embedding, torch.nn.Embedding):
        _checks.token_ids("idx", idx, embedding.num_embeddings)
    if targets.shape != idx.shape:
        raise ValueError(f"targets must have the shape of idx {tuple(idx.shape)}, got {tuple(targets.shape)}")
    _checks.number("position", position, integer=True)
    t_len = idx.shape[1]
    t = position + t_len if position < 0 else position
    if not 0 <= t < t_len:
        raise ValueError(f"position must be in [-{t_len}, {t_len - 1}] for sequences of length {t_len}, got {position}")
    captured: list[torch.Tensor] = []

    def hook(module, inputs, output):
        if not isinstance(output, torch.Tensor) or output.ndim != 3:
            raise ValueError(f"embedding must return a [batch, T, dim] tensor, got {_checks._show(output)}")
        output.retain_grad()
        captured.append(output)

    handle = embedding.register_forward_hook(hook)
    try:
        with torch.enable_grad():
            try:
                logits = model(idx)
            except (RuntimeError, IndexError, TypeError) as error:
                # The model is the caller's: name it rather than let its internals speak for it.
                raise ValueError(f"model(idx) failed ({type(error).__name__}: {error}); model must map token ids "
                                 f"[batch, T] to logits [batch, T, vocab]") from error
            if not captured:
                raise ValueError("embedding was not called by model(idx); pass the module that embeds the tokens")
            if not isinstance(logits, torch.Tensor) or logits.ndim != 3 or logits.shape[:2] != idx.shape:
                raise ValueError(f"model must map idx {tuple(idx.shape)} to logits [batch, T, vocab], got "
                                 f"{_checks._show(logits)}")
            _checks.token_ids("targets[:, position]", targets[:, t], logits.shape[-1], ndim=1)
            log_probs = torch.log_softmax(logits[:, t].float(), dim=-1)
            score = log_probs.gather(-1, targets[:, t, None]).sum()
            score.backward()
    finally:
        handle.remove()
    grad = captured[0].grad[:, : t + 1].to(torch.float64)          # [batch, t+1, dim]
    norms = grad.norm(dim=-1).mean(dim=0)                           # per source position j
    return norms.flip(0)                                            # index d = t − j
