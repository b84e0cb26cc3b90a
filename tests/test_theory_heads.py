"""Tests for posbook.theory.heads: the peak-at-δ key and hand-built positional heads."""

import pytest
import torch

import posbook as pb
from posbook.theory import heads

F64 = torch.float64


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("delta", [0, 1, 7, 300])
def test_peak_key_puts_maximum_at_delta(layout, delta):
    g = torch.Generator().manual_seed(delta)
    inv = pb.default_inv_freq(64, 10000.0, dtype=F64)
    q = torch.randn(64, generator=g, dtype=F64)
    k = heads.peak_key(q, inv, delta, layout=layout)
    s = pb.rope_score_by_distance(q, k, inv, torch.arange(1024), layout=layout)
    assert torch.isclose(s[delta], q.dot(q), rtol=1e-12)
    assert bool((s <= q.dot(q) * (1 + 1e-12)).all())
    assert torch.isclose(k.norm(), q.norm(), rtol=1e-12)


def test_peak_key_partial_passes_tail_and_batches():
    inv = pb.default_inv_freq(16, 10000.0, dtype=F64)      # rotary_dim 16 of head_dim 64
    q = torch.randn(3, 5, 64, dtype=F64)
    k = heads.peak_key(q, inv, 4)
    assert k.shape == q.shape
    assert torch.equal(k[..., 16:], q[..., 16:])
    assert torch.allclose(heads.peak_key(q, inv, 0), q)


def test_peak_key_keeps_dtype_and_zero_frequencies_are_identity():
    inv = torch.zeros(8, dtype=F64)
    q = torch.randn(16, dtype=torch.float32)
    k = heads.peak_key(q, inv, 5)
    assert k.dtype == torch.float32 and torch.equal(k, q)


def test_positional_heads_with_rope_and_nope():
    inv = pb.default_inv_freq(64, 10000.0, dtype=F64)
    q = torch.zeros(64, dtype=F64)
    q[:4] = 6.0                                            # weight on the four fastest planes
    for delta in (0, 1, 3):
        w = heads.positional_head_weights(q, inv, delta, 32)
        assert w.shape == (32, 32)
        assert torch.allclose(w.sum(-1), torch.ones(32, dtype=F64))
        assert torch.equal(torch.triu(w, 1), torch.zeros_like(w))
        rows = torch.arange(delta, 32)
        assert bool((w[rows, rows - delta] > 0.9).all())
    nope = heads.positional_head_weights(q, torch.zeros(32, dtype=F64), 1, 32)
    expected = torch.tril(torch.ones(32, 32, dtype=F64)) / torch.arange(1, 33, dtype=F64)[:, None]
    assert torch.allclose(nope, expected)


def test_bad_input():
    inv = pb.default_inv_freq(8, dtype=F64)
    q = torch.randn(8, dtype=F64)
    with pytest.raises(TypeError, match="q"):
        heads.peak_key([1.0] * 8, inv, 1)
    with pytest.raises(TypeError, match="delta"):
        heads.peak_key(q, inv, 1.5)
    with pytest.raises(ValueError, match="rotary_dim"):
        heads.peak_key(q, pb.default_inv_freq(16, dtype=F64), 1)
    with pytest.raises(ValueError, match="inv_freq"):
        heads.peak_key(q, torch.zeros(0, dtype=F64), 1)
    with pytest.raises(ValueError, match="layout"):
        heads.peak_key(q, inv, 1, layout="neox")
    with pytest.raises(ValueError, match="delta"):
        heads.positional_head_weights(q, inv, 4, 4)
    with pytest.raises(ValueError, match="delta"):
        heads.positional_head_weights(q, inv, -1, 4)
    with pytest.raises(ValueError, match="seq_len"):
        heads.positional_head_weights(q, inv, 0, 0)
    with pytest.raises(ValueError, match="q"):
        heads.positional_head_weights(q[None], inv, 0, 4)
