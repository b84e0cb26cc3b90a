"""posbook.analysis.rope_decay_bound: RoFormer's Abel-summation bound."""

from __future__ import annotations

import torch

import posbook as pb

F64 = torch.float64


def test_bound_at_zero_distance():
    for d in (8, 64, 128):
        assert pb.rope_decay_bound(torch.tensor([0]), pb.default_inv_freq(d, dtype=F64)).item() == (d // 2 + 1) / 2


def test_abel_inequality_holds_for_random_plane_products():
    g = torch.Generator().manual_seed(1)
    inv_freq = pb.default_inv_freq(64, dtype=F64)
    r = torch.arange(0, 3000, 7)
    bound = pb.rope_decay_bound(r, inv_freq) * 32
    for _ in range(20):
        h = torch.complex(torch.randn(32, generator=g, dtype=F64), torch.randn(32, generator=g, dtype=F64))
        lhs = (h * torch.polar(torch.ones(len(r), 32, dtype=F64), r[:, None] * inv_freq)).sum(-1).abs()
        step = torch.cat((h, h.new_zeros(1))).diff().abs().max()
        assert bool((lhs <= step * bound * (1 + 1e-12)).all())


def test_bound_is_not_monotone_but_decays():
    b = pb.rope_decay_bound(torch.arange(2000), pb.default_inv_freq(128, dtype=F64))
    assert int((b[1:] > b[:-1]).sum()) > 50
    assert b[1000:].mean() < 0.25 * b[0]      # single distances can still climb to a third of the start
