"""posbook.influence: attention_mass and gradient_influence, on hand-built weights and a tiny model."""

import math

import pytest
import torch

import posbook as A
from posbook.experiments import GPT, GPTConfig


def test_attention_mass_sums_and_values():
    w = torch.tensor([[0.5, 0.25, 0.25], [0.0, 1.0, 0.0]])
    regions = {"first": torch.tensor([True, False, False]), "rest": torch.tensor([False, True, True])}
    mass = A.attention_mass(w, regions)
    assert mass["first"].item() == pytest.approx(0.25)
    assert (mass["first"] + mass["rest"]).item() == pytest.approx(1.0)


@pytest.mark.parametrize("regions, exc", [({}, ValueError), ({"a": torch.tensor([1, 0, 0])}, TypeError),
                                          ({"a": torch.tensor([True, False])}, ValueError)])
def test_attention_mass_bad_input(regions, exc):
    with pytest.raises(exc):
        A.attention_mass(torch.full((2, 3), 1 / 3), regions)


def test_gradient_influence_receptive_field():
    torch.manual_seed(0)
    model = GPT(GPTConfig(pattern="S", n_layer=2, window=4, max_seq_len=32, n_embd=32, n_head=2)).eval()
    idx = torch.randint(0, 256, (3, 32))
    G = A.gradient_influence(model, model.embed, idx, idx.roll(-1, dims=1))
    assert G.shape == (32,) and G.dtype == torch.float64
    assert (G[2 * 3 + 1:] == 0).all() and G[2 * 3] > 0


def test_gradient_influence_matches_autograd_for_one_sequence():
    torch.manual_seed(1)
    model = GPT(GPTConfig(pattern="R", n_layer=1, max_seq_len=8, n_embd=16, n_head=2)).eval()
    idx = torch.randint(0, 256, (1, 8))
    tgt = torch.randint(0, 256, (1, 8))
    G = A.gradient_influence(model, model.embed, idx, tgt, position=5)
    e = model.embed(idx).detach().requires_grad_(True)
    x = e
    for block in model.blocks:
        x = block(x)
    lp = torch.log_softmax(model.head(model.norm(x))[0, 5], -1)[tgt[0, 5]]
    (grad,) = torch.autograd.grad(lp, e)
    expected = grad[0, :6].norm(dim=-1).flip(0).double()
    torch.testing.assert_close(G, expected, rtol=1e-5, atol=1e-8)


def test_gradient_influence_bad_input():
    model = GPT(GPTConfig(pattern="R", n_layer=1, max_seq_len=8, n_embd=16, n_head=2))
    idx = torch.zeros(1, 8, dtype=torch.long)
    with pytest.raises(ValueError, match="position"):
        A.gradient_influence(model, model.embed, idx, idx, position=8)
    with pytest.raises(ValueError, match="targets"):
        A.gradient_influence(model, model.embed, idx, idx[:, :4])
    with pytest.raises(TypeError, match="embedding"):
        A.gradient_influence(model, "embed", idx, idx)
    with pytest.raises(ValueError, match="embedding was not called"):
        A.gradient_influence(model, torch.nn.Linear(2, 2), idx, idx)


def test_bad_token_ids_and_foreign_models_are_named():
    model = GPT(GPTConfig(pattern="R", n_layer=1, max_seq_len=8, n_embd=16, n_head=2))
    idx = torch.zeros(1, 8, dtype=torch.long)
    G = A.gradient_influence(model, model.embed, idx.to(torch.uint8), idx)     # byte ids are ids too
    torch.testing.assert_close(G, A.gradient_influence(model, model.embed, idx, idx))
    with pytest.raises(ValueError, match="idx must hold token ids"):
        A.gradient_influence(model, model.embed, idx + 256, idx)
    with pytest.raises(ValueError, match=r"targets\[:, position\]"):
        A.gradient_influence(model, model.embed, idx, idx - 1)
    ignored = idx.clone()
    ignored[:, :-1] = -100                       # only column t is read
    A.gradient_influence(model, model.embed, idx, ignored)
    with pytest.raises(TypeError, match="targets"):
        A.gradient_influence(model, model.embed, idx, idx.float())
    with pytest.raises(ValueError, match="model"):
        A.gradient_influence(torch.nn.Linear(4, 4), model.embed, idx, idx)
    with pytest.raises(ValueError, match="weights must be finite"):
        A.attention_mass(torch.tensor([[math.nan, 1.0]]), {"a": torch.tensor([True, False])})
