"""The loop every small training in the chapters shares: a loss, an optimiser, a number of steps.

The chapters' toy trainings (a one-head previous-token model, a few GPT steps at a chosen temperature, QK-Clip on a
toy head, a query fitted to output nothing, a tiny differential-attention model) differ in what they train and
measure, not in the loop. :func:`fit` is that loop, written once; what a chapter measures during training goes in
``on_step``. Runs of :func:`posbook.experiments.trainer.train` (presets, schedules, checkpoints) are for the experiments of
Part V.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch

from .. import _checks

OPTIMIZERS = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW}


def fit(parameters: Iterable[torch.nn.Parameter] | torch.nn.Module, loss: Callable[[int], torch.Tensor], *,
        steps: int, lr: float, optimizer: str = "adamw", weight_decay: float = 0.0,
        betas: tuple[float, float] = (0.9, 0.999), lr_at: Callable[[int], float] | None = None,
        grad_clip: float | None = None,
        on_step: Callable[[int, torch.Tensor, torch.Tensor | None], None] | None = None) -> list[float]:
    """Minimise ``loss(step)`` for ``steps`` steps and return the loss of every step (floats).

    Each step: set the learning rate to ``lr_at(step)`` if given, compute ``loss(step)`` (the function draws its own
    batch), clear the gradients, backpropagate, clip the gradient norm to ``grad_clip`` if given, take one optimiser
    step, then call ``on_step(step, loss, grad_norm)`` (``grad_norm`` is the norm before clipping, or None).

    Args:
        parameters: a module (all its parameters) or an iterable of tensors to optimise.
        loss: step → scalar loss tensor.
        steps: number of steps (≥ 1).
        lr: learning rate (the initial one when ``lr_at`` is given); ``lr_at(step)`` returns one ≥ 0.
        optimizer: ``"adamw"`` or ``"adam"`` (torch's, with ``betas`` and ``weight_decay``).
        betas: Adam's (beta1, beta2), each in [0, 1).
    """
    is_module = isinstance(parameters, torch.nn.Module)
    if not is_module and (not isinstance(parameters, Iterable) or isinstance(parameters, (str, bytes))):
        raise TypeError(f"parameters must be a torch.nn.Module or a non-empty iterable of tensors, got "
                        f"{type(parameters).__name__}")
    params = list(parameters.parameters() if is_module else parameters)
    if not params or not all(isinstance(p, torch.Tensor) and p.is_floating_point() for p in params):
        raise TypeError("parameters must be a torch.nn.Module or a non-empty iterable of floating-point tensors")
    _checks.function("loss", loss)
    _checks.size("steps", steps)
    _checks.choice("optimizer", optimizer, OPTIMIZERS)
    _checks.numbers("betas", betas, min_value=0)
    if len(betas) != 2 or max(betas) >= 1:
        raise ValueError(f"betas must be two numbers in [0, 1), got {betas!r}")
    # Adam's first step moves a weight by lr / (1 - beta1), in the weights' dtype: a larger lr overflows in torch.
    largest = min(torch.finfo(p.dtype).max for p in params) * (1 - betas[0])
    _checks.number("lr", lr, positive=True, max_value=largest)
    _checks.number("weight_decay", weight_decay, min_value=0)
    if grad_clip is not None:
        _checks.number("grad_clip", grad_clip, positive=True)
    for name, fn in (("lr_at", lr_at), ("on_step", on_step)):
        if fn is not None:
            _checks.function(name, fn)
    opt = OPTIMIZERS[optimizer](params, lr=lr, betas=tuple(betas), weight_decay=weight_decay)
    losses = []
    for step in range(steps):
        if lr_at is not None:
            rate = _checks.number("lr_at(step)", lr_at(step), min_value=0, max_value=largest)
            for group in opt.param_groups:
                group["lr"] = rate
        value = loss(step)
        opt.zero_grad()
        value.backward()
        grad_norm = None if grad_clip is None else torch.nn.utils.clip_grad_norm_(params, grad_clip)
        opt.step()
        losses.append(value.item())
        if on_step is not None:
            on_step(step, value, grad_norm)
    return losses
