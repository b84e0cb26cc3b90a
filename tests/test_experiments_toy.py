"""posbook.experiments.toy.fit: the chapters' training loop, equal to the loop written out by hand."""

from __future__ import annotations

import pytest
import torch

from posbook.experiments import fit


def _problem(seed: int = 0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    gen = torch.Generator().manual_seed(1)
    batches = [(torch.randn(16, 4, generator=gen), torch.randn(16, 1, generator=gen)) for _ in range(12)]
    return model, batches


def test_fit_is_the_hand_written_loop_bit_for_bit():
    by_hand, batches = _problem()
    opt = torch.optim.AdamW(by_hand.parameters(), lr=0.05, betas=(0.9, 0.95), weight_decay=0.1)
    expected_losses, expected_norms = [], []
    for step, (x, y) in enumerate(batches):
        for group in opt.param_groups:
            group["lr"] = 0.05 * (step + 1) / len(batches)
        loss = torch.nn.functional.mse_loss(by_hand(x), y)
        opt.zero_grad()
        loss.backward()
        expected_norms.append(torch.nn.utils.clip_grad_norm_(by_hand.parameters(), 0.5))
        opt.step()
        expected_losses.append(loss.item())

    model, _ = _problem()
    norms = []
    losses = fit(model, lambda step: torch.nn.functional.mse_loss(model(batches[step][0]), batches[step][1]),
                 steps=len(batches), lr=0.05, betas=(0.9, 0.95), weight_decay=0.1,
                 lr_at=lambda step: 0.05 * (step + 1) / len(batches), grad_clip=0.5,
                 on_step=lambda step, loss, grad_norm: norms.append(grad_norm))
    assert losses == expected_losses
    assert all(torch.equal(a, b) for a, b in zip(norms, expected_norms))
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), by_hand.parameters()))


def test_fit_takes_tensors_and_adam():
    w = torch.tensor([3.0], requires_grad=True)
    seen = []
    fit([w], lambda step: (w - 1).square().sum(), steps=200, lr=0.1, optimizer="adam",
        on_step=lambda step, loss, grad_norm: seen.append((step, grad_norm)))
    assert abs(w.item() - 1) < 1e-2 and seen[0] == (0, None) and seen[-1][0] == 199


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(steps=0), ValueError, "steps"),
    (dict(steps=2.0), TypeError, "steps"),
    (dict(lr=-1.0), ValueError, "lr"),
    (dict(optimizer="sgd"), ValueError, "optimizer"),
    (dict(grad_clip=0.0), ValueError, "grad_clip"),
    (dict(lr_at=0.1), TypeError, "lr_at"),
])
def test_fit_bad_input_is_named(kwargs, error, match):
    w = torch.zeros(1, requires_grad=True)
    options = dict(steps=2, lr=0.1) | kwargs
    with pytest.raises(error, match=match):
        fit([w], lambda step: w.sum(), **options)
    with pytest.raises(TypeError, match="parameters"):
        fit([], lambda step: w.sum(), steps=1, lr=0.1)
    with pytest.raises(TypeError, match="loss"):
        fit([w], 3.0, steps=1, lr=0.1)
