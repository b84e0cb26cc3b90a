"""Tests for posbook.theory.nope: Theorem 1's counter, the reciprocal MLP, Theorem 2's relative term, JS distance."""


import pytest
import torch

from posbook.theory import nope


def _layer1(T, vocab=20, d=10, h=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    w = nope.theorem1_weights(vocab, d, h, generator=g)
    ids = torch.cat([torch.tensor([0]), torch.randint(1, vocab, (T - 1,), generator=g)])
    hidden = w["embedding"][ids]
    return w, hidden, hidden + nope.attention_block(hidden, w["w_q"], w["w_k"], w["w_v"], w["w_o"])


def test_theorem1_counter_is_exact():
    T = 200
    _, _, h1 = _layer1(T)
    t = torch.arange(1, T + 1, dtype=torch.float64)
    assert torch.equal(h1[:, nope.POSITION], 1.0 / t)


def test_without_causal_mask_every_position_reads_one_over_T():
    T = 17
    w, h0, _ = _layer1(T)
    out = nope.attention_block(h0, w["w_q"], w["w_k"], w["w_v"], w["w_o"], causal=False)
    assert torch.allclose(out[:, nope.POSITION], torch.full((T,), 1.0 / T, dtype=torch.float64), rtol=0, atol=1e-15)


def test_reciprocal_mlp_recovers_t_and_saturates():
    T = 64
    _, _, h1 = _layer1(T)
    mlp = nope.reciprocal_mlp(torch.arange(1, T + 1), d_model=h1.shape[1])
    h2 = h1 + nope.mlp_block(h1, mlp)
    t = torch.arange(1, T + 1, dtype=torch.float64)
    assert (h2[:, nope.POSITION] - t).abs().max() < 1e-9
    keep = nope.reciprocal_mlp(torch.arange(1, T + 1), d_model=h1.shape[1], write=3, keep_input=True)
    x = torch.zeros(3, h1.shape[1], dtype=torch.float64)
    x[:, nope.POSITION] = torch.tensor([1.0 / T, 1.0 / (2 * T), 1e-9])
    assert torch.allclose(nope.mlp_block(x, keep)[:, 3], torch.full((3,), float(T), dtype=torch.float64))


def test_theorem2_relative_term():
    T, d = 40, 10
    _, _, h1 = _layer1(T, d=d)
    h2 = h1 + nope.mlp_block(h1, nope.reciprocal_mlp(torch.arange(1, T + 1), d_model=d))
    w = nope.theorem2_weights(d, 6, generator=torch.Generator().manual_seed(1))
    q, k = h2 @ w["w_q"].T, h2 @ w["w_k"].T
    t = torch.arange(1, T + 1, dtype=torch.float64)
    rel = q @ k.T - q[:, 2:] @ k[:, 2:].T
    assert torch.allclose(rel, t[None, :] - t[:, None], atol=1e-9)


@pytest.mark.parametrize("call, match", [
    (lambda: nope.theorem1_weights(10, 2, 4), "d_model"),
    (lambda: nope.theorem1_weights(10, 8, 4, bos_id=10), "bos_id"),
    (lambda: nope.theorem1_weights(10, 8, 4.0), "head_dim"),
    (lambda: nope.reciprocal_mlp(torch.tensor([1, 1, 2]), d_model=4), "positions"),
    (lambda: nope.reciprocal_mlp(torch.tensor([1.0, 2.0]), d_model=4), "positions"),
    (lambda: nope.reciprocal_mlp(torch.tensor([1, 2]), d_model=4, read=4), "read"),
    (lambda: nope.theorem2_weights(8, 1), "head_dim"),
    (lambda: nope.attention_block(torch.rand(3, 5).double(), *[torch.rand(2, 4).double()] * 3,
                                  torch.rand(5, 2).double()), "w_q"),
])
def test_bad_input(call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call()


def test_blocks_refuse_mixed_dtypes_non_finite_and_empty_inputs():
    w = nope.theorem1_weights(8, 12, 4, generator=torch.Generator().manual_seed(0))
    h = w["embedding"][torch.tensor([0, 3, 5])]
    heads = (w["w_q"], w["w_k"], w["w_v"], w["w_o"])
    with pytest.raises(TypeError, match="w_q must have hidden's dtype"):
        nope.attention_block(h.float(), *heads)
    with pytest.raises(ValueError, match="hidden must hold at least one position"):
        nope.attention_block(h[:0], *heads)
    bad = h.clone()
    bad[0, 0] = float("nan")
    with pytest.raises(ValueError, match="hidden must be finite"):
        nope.attention_block(bad, *heads)
    mlp = nope.reciprocal_mlp(torch.arange(1, 4), d_model=12)
    with pytest.raises(TypeError, match=r"weights\['w1'\] must have hidden's dtype"):
        nope.mlp_block(h.half(), mlp)
    with pytest.raises(ValueError, match=r"weights\['b1'\] must have shape"):
        nope.mlp_block(h, {**mlp, "b1": mlp["b1"][:1]})
    with pytest.raises(ValueError, match="d_model must be at most"):
        nope.theorem2_weights(2**40, 4)
