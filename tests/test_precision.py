"""posbook.precision: position and token aliasing, each against a brute-force count."""

from __future__ import annotations

import pytest
import torch

import posbook as an

F64 = torch.float64


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_position_aliasing_against_all_pairs(dtype):
    g = torch.Generator().manual_seed(7)
    s = torch.randn(3, 400, dtype=F64, generator=g) * 30
    frac, pairs = an.position_aliasing(s, dtype)
    for b in range(3):
        v = s[b].to(dtype).tolist()
        equal = [(i, j) for i in range(len(v)) for j in range(i + 1, len(v)) if v[i] == v[j]]
        assert pairs[b].item() == len(equal)
        assert frac[b].item() == pytest.approx(len({i for p in equal for i in p}) / len(v), abs=1e-15)
    long = torch.randn(2, 5000, dtype=F64, generator=g) * 30          # long rows: the histogram path for 16 bits
    frac_l, pairs_l = an.position_aliasing(long, dtype)
    for b in range(2):
        _, counts = torch.unique(long[b].to(dtype).to(F64), return_counts=True)
        assert pairs_l[b].item() == int((counts * (counts - 1) // 2).sum())
        assert frac_l[b].item() == pytest.approx(int(counts[counts > 1].sum()) / 5000, abs=1e-15)
    frac64, pairs64 = an.position_aliasing(torch.arange(100, dtype=F64), torch.float64)
    assert frac64.item() == 0.0 and pairs64.item() == 0
    frac_c, pairs_c = an.position_aliasing(torch.ones(5, dtype=F64))
    assert frac_c.item() == 1.0 and pairs_c.item() == 10


def test_token_aliasing_against_brute_force():
    g = torch.Generator().manual_seed(8)
    s1 = torch.randn(500, dtype=F64, generator=g) * 3
    s2 = s1 + torch.randn(500, dtype=F64, generator=g) * 0.02
    rate = an.token_aliasing_rate(s1, s2)
    brute = sum(float(a) == float(b) for a, b in zip(s1.to(torch.bfloat16), s2.to(torch.bfloat16))) / 500
    assert 0 < brute < 1 and rate.item() == pytest.approx(brute, abs=1e-15)
