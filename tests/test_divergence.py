"""Kullback–Leibler and Jensen–Shannon divergences, and the head-pair distance between two models' layers."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import posbook as A


def test_known_values():
    p, q = torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0])
    assert A.js_divergence(p, q).item() == pytest.approx(math.log(2), abs=1e-15)     # disjoint: the maximum
    assert A.kl_divergence(p, q).item() == math.inf
    u, w = torch.tensor([0.5, 0.5]), torch.tensor([0.25, 0.75])
    assert A.kl_divergence(u, w).item() == pytest.approx(0.5 * math.log(2) + 0.5 * math.log(2 / 3), abs=1e-15)
    m = torch.tensor([0.375, 0.625])
    expected = 0.5 * (0.5 * math.log(0.5 / 0.375) + 0.5 * math.log(0.5 / 0.625)) + 0.5 * (
        0.25 * math.log(0.25 / 0.375) + 0.75 * math.log(0.75 / 0.625))
    assert A.js_divergence(u, w).item() == pytest.approx(expected, abs=1e-15)
    assert torch.equal(A.js_divergence(m, m), torch.tensor(0.0, dtype=torch.float64))


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 12), st.integers(0, 10_000))
def test_js_is_symmetric_bounded_and_zero_only_on_equal(n, seed):
    g = torch.Generator().manual_seed(seed)
    p = torch.rand(3, n, generator=g) ** 3
    q = torch.rand(3, n, generator=g) ** 3
    p, q = p / p.sum(-1, keepdim=True), q / q.sum(-1, keepdim=True)
    js = A.js_divergence(p, q)
    assert torch.allclose(js, A.js_divergence(q, p), rtol=0, atol=1e-15)
    assert (js >= 0).all() and (js <= math.log(2) + 1e-15).all()
    assert A.js_divergence(p, p).abs().max() < 1e-15


def test_head_pair_divergence_finds_the_matching_head():
    g = torch.Generator().manual_seed(0)
    a = torch.softmax(torch.randn(2, 3, 6, 6, generator=g).masked_fill(torch.ones(6, 6).triu(1).bool(), -math.inf), -1)
    b = a[:, [2, 0]]                           # model B's heads are model A's heads 2 and 0
    d = A.head_pair_divergence(a, b)
    assert d.shape == (3, 2) and d[2, 0] == 0 and d[0, 1] == 0
    assert (d[1] > 0).all() and d.min() == 0
    single = A.js_divergence(a[1, 1], b[1, 0]).mean()       # one sample, heads (1, 0): the rows' mean
    both = (A.js_divergence(a[0, 1], b[0, 0]).mean() + single) / 2
    assert d[1, 0].item() == pytest.approx(both.item(), abs=1e-15)


@pytest.mark.parametrize("p, q, match", [
    (torch.ones(3) / 3, torch.ones(4) / 4, "broadcastable"),
    (torch.tensor([1.5, -0.5]), torch.tensor([0.5, 0.5]), "no negative"),
    (torch.ones(2, dtype=torch.int64), torch.ones(2, dtype=torch.int64), "p"),
])
def test_bad_distributions_are_named(p, q, match):
    with pytest.raises((ValueError, TypeError), match=match):
        A.js_divergence(p, q)


def test_head_pair_divergence_bad_input():
    with pytest.raises(ValueError, match="weights_a"):
        A.head_pair_divergence(torch.ones(2, 6, 6) / 6, torch.ones(1, 2, 6, 6) / 6)
    with pytest.raises(ValueError, match="share batch"):
        A.head_pair_divergence(torch.ones(1, 2, 6, 6) / 6, torch.ones(1, 2, 5, 5) / 5)


def test_pattern_distance_is_the_min_over_head_pairs_in_both_forms():
    g = torch.Generator().manual_seed(3)
    a = torch.softmax(torch.randn(2, 3, 5, 5, generator=g), -1)
    b = torch.cat([torch.softmax(torch.randn(2, 2, 5, 5, generator=g), -1), a[:, 1:2]], dim=1)
    assert A.pattern_distance(a, b).item() == 0.0                       # b's last head is a's head 1
    assert A.pattern_distance(a, b, form="reversed").item() == 0.0
    # i < j leaves out (1, 2), the only matching pair, so the distance is the smallest of the others
    per_pair = A.head_pair_divergence(a, b)
    assert A.pattern_distance(a, b, pairs="i<j").item() == per_pair[torch.ones(3, 3, dtype=torch.bool).triu(1)].min()
    # the reversed form is ½[KL(m‖p) + KL(m‖q)], computed here from its definition
    p, q = a[:, :, None], b[:, None]
    m = (p.double() + q.double()) / 2
    reversed_pairs = ((A.kl_divergence(m, p) + A.kl_divergence(m, q)) / 2).mean(dim=(0, -1))
    torch.testing.assert_close(A.head_pair_divergence(a, b, form="reversed"), reversed_pairs, rtol=0, atol=0)
    # unlike the textbook form, the reversed one is not bounded by ln 2 for rows with disjoint support
    one_hot = torch.eye(4)[None, None]
    shifted = torch.eye(4).roll(1, 0)[None, None]
    assert A.pattern_distance(one_hot, shifted).item() == pytest.approx(math.log(2), abs=1e-15)
    assert A.pattern_distance(one_hot, shifted, form="reversed").item() == math.inf


def test_pattern_distance_bad_input():
    w = torch.ones(1, 1, 4, 4) / 4
    with pytest.raises(ValueError, match="form"):
        A.pattern_distance(w, w, form="jsd")
    with pytest.raises(ValueError, match="pairs"):
        A.pattern_distance(w, w, pairs="i>j")
    with pytest.raises(ValueError, match="two heads"):
        A.pattern_distance(w, w, pairs="i<j")


def test_divergences_refuse_non_finite_or_empty_weights_by_name():
    w = torch.ones(1, 2, 3, 3) / 3
    bad = w.clone()
    bad[0, 0, 0, 0] = math.nan
    with pytest.raises(ValueError, match="weights_b must be finite"):
        A.head_pair_divergence(w, bad)
    with pytest.raises(ValueError, match="q must be finite"):
        A.kl_divergence(w, bad)
    with pytest.raises(ValueError, match="weights_a must hold probabilities"):
        A.pattern_distance(-w, w)
    with pytest.raises(ValueError, match="at least one head"):
        A.pattern_distance(w[:, :0], w)
    with pytest.raises(ValueError, match="at least one row"):
        A.head_pair_divergence(w[:0], w[:0])
