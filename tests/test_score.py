"""posbook.score: the score as a sum of cosines, its exact window moments, the one-turn split, the normal
fit and the inversion rates, each checked against a brute-force computation; RoFormer's decay bound."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

import posbook as an
import posbook as pb

F64 = torch.float64


def _rotated_score(q, k, inv_freq, m, r, layout):
    """Brute force: rotate q to position m and k to m − r with the library's rope, then take the dot product."""
    cos, sin = pb.rope_cos_sin(torch.tensor([m, m - r], dtype=F64), inv_freq, layout=layout, dtype=F64)
    qr = pb.apply_rope(q[None], cos[:1], sin[:1], layout=layout)[0]
    kr = pb.apply_rope(k[None], cos[1:], sin[1:], layout=layout)[0]
    return float(qr @ kr)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_score_by_distance_equals_rotating_q_and_k(layout):
    g = torch.Generator().manual_seed(0)
    d = 16
    inv_freq = pb.default_inv_freq(d, 500.0, dtype=F64)
    q, k = torch.randn(d, dtype=F64, generator=g), torch.randn(d, dtype=F64, generator=g)
    distances = torch.tensor([0, 1, 2, 7, 50, 333])
    fast = an.rope_score_by_distance(q, k, inv_freq, distances, layout=layout)
    for m in (0, 5, 1000):
        brute = torch.tensor([_rotated_score(q, k, inv_freq, m, int(r), layout) for r in distances], dtype=F64)
        assert torch.allclose(fast, brute, rtol=0, atol=1e-11), (m, fast, brute)
    assert fast[0].item() == pytest.approx(float(q @ k), abs=1e-12)          # distance 0: the content alone


def test_plane_terms_match_the_two_by_two_expansion():
    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(3, 8, dtype=F64, generator=g), torch.randn(3, 8, dtype=F64, generator=g)
    amp, ph = an.rope_plane_terms(q, k, layout="interleaved")
    for b, n in itertools.product(range(3), range(4)):
        q1, q2, k1, k2 = q[b, 2 * n], q[b, 2 * n + 1], k[b, 2 * n], k[b, 2 * n + 1]
        z = complex(q1, -q2) * complex(k1, k2)
        assert amp[b, n].item() == pytest.approx(abs(z), rel=1e-14)
        assert ph[b, n].item() == pytest.approx(math.atan2(z.imag, z.real), abs=1e-14)


def test_cosine_sum_in_blocks_and_at_real_distances():
    g = torch.Generator().manual_seed(2)
    amp, ph = torch.rand(2, 64, dtype=F64, generator=g), torch.rand(2, 64, dtype=F64, generator=g) * 6 - 3
    inv_freq = pb.default_inv_freq(128, dtype=F64)
    r = torch.arange(70_000)                                              # more than one block of 65,536
    s = an.cosine_sum(amp, ph, inv_freq, r)
    for j in (0, 65_535, 65_536, 69_999):
        ref = (amp * torch.cos(j * inv_freq - ph)).sum(-1)
        assert torch.allclose(s[:, j], ref, atol=1e-11)
    run = torch.arange(-3000, 2500)                    # consecutive integers, negative start: the block path
    direct = an.cosine_sum(amp, ph, inv_freq, run.to(F64))   # real distances: one table per distance
    assert torch.allclose(an.cosine_sum(amp, ph, inv_freq, run), direct, rtol=0, atol=1e-11)
    real = torch.tensor([0.5, 3.25], dtype=F64)
    ref = (amp[:, None, :] * torch.cos(real[None, :, None] * inv_freq - ph[:, None, :])).sum(-1)
    assert torch.allclose(an.cosine_sum(amp, ph, inv_freq, real), ref, atol=1e-12)


@pytest.mark.parametrize("length, start", [(1, 0), (2, 0), (37, 0), (500, -120), (4096, 3)])
def test_term_moments_equal_enumeration(length, start):
    g = torch.Generator().manual_seed(length)
    inv_freq = torch.cat((torch.tensor([0.0, 2.5, 4.0, 2 * math.pi], dtype=F64),
                          pb.default_inv_freq(8, 1e4, dtype=F64)))   # include θ = 0, θ > π and θ = 2π
    h = inv_freq.shape[0]
    amp, ph = torch.rand(3, h, dtype=F64, generator=g) + 0.1, torch.rand(3, h, dtype=F64, generator=g) * 6 - 3
    r = torch.arange(start, start + length, dtype=F64)
    terms = amp[:, None, :] * torch.cos(r[None, :, None] * inv_freq - ph[:, None, :])     # [3, L, h]
    mean, cov = an.score_term_moments(amp, ph, inv_freq, length, start=start)
    assert torch.allclose(mean, terms.mean(1), atol=1e-12)
    centred = terms - terms.mean(1, keepdim=True)
    assert torch.allclose(cov, centred.transpose(1, 2) @ centred / length, atol=1e-11)
    mu, var = an.score_moments(amp, ph, inv_freq, length, start=start)
    s = terms.sum(-1)
    assert torch.allclose(mu, s.mean(1), atol=1e-11)
    assert torch.allclose(var, s.var(1, unbiased=False), atol=1e-10)


def test_split_moments_and_fast_planes_by_hand():
    inv_freq = pb.default_inv_freq(64, 1e4, dtype=F64)
    for length in (6, 7, 100, 4096, 10**6):
        fast = an.fast_planes(length, inv_freq)
        assert fast.tolist() == [length * t >= 2 * math.pi for t in inv_freq.tolist()]
        h = 32
        if 2 * math.pi <= length < 2 * math.pi * 1e4 ** ((h - 1) / h):
            assert int(fast.sum()) == math.floor(h * math.log(length / (2 * math.pi)) / math.log(1e4)) + 1
    g = torch.Generator().manual_seed(3)
    amp, ph = torch.rand(32, dtype=F64, generator=g), torch.rand(32, dtype=F64, generator=g) * 6 - 3
    mu, s2 = an.split_moments(amp, ph, inv_freq, 4096)
    slow = [n for n in range(32) if 4096 * inv_freq[n] < 2 * math.pi]
    assert mu.item() == pytest.approx(sum(amp[n].item() * math.cos(ph[n].item()) for n in slow), abs=1e-13)
    assert s2.item() == pytest.approx(0.5 * sum(amp[n].item() ** 2 for n in range(32) if n not in slow), abs=1e-13)


def test_moments_approach_the_uniform_phase_limit_for_fast_planes():
    # A single fast plane over a long window: mean → 0 like 1/(Lθ), second moment → C²/2 (Dirichlet kernel).
    amp, ph, theta = torch.tensor([2.0], dtype=F64), torch.tensor([0.3], dtype=F64), torch.tensor([0.05], dtype=F64)
    for length in (10**3, 10**5):
        mean, cov = an.score_term_moments(amp, ph, theta, length)
        assert abs(mean.item()) <= 2.0 / (length * math.sin(0.025)) + 1e-15
        assert cov.item() == pytest.approx(2.0, abs=4.0 / (length * math.sin(0.05)) + 2.0 / (length * 0.025) ** 2)


def _ks_brute(x, mu, sd):
    xs = sorted(x)
    n = len(xs)
    worst = 0.0
    for i, v in enumerate(xs):
        cdf = 0.5 * (1 + math.erf((v - mu) / (sd * math.sqrt(2))))
        worst = max(worst, abs((i + 1) / n - cdf), abs(cdf - i / n))
    return worst


def test_ks_distance_against_brute_force():
    g = torch.Generator().manual_seed(4)
    x = torch.randn(2, 300, dtype=F64, generator=g) * 2 + 1
    ks = an.normal_ks_distance(x, torch.tensor([1.0, 0.0], dtype=F64), torch.tensor([2.0, 1.0], dtype=F64))
    assert ks[0].item() == pytest.approx(_ks_brute(x[0].tolist(), 1.0, 2.0), abs=1e-12)
    assert ks[1].item() == pytest.approx(_ks_brute(x[1].tolist(), 0.0, 1.0), abs=1e-12)
    assert an.normal_ks_distance(torch.zeros(1, dtype=F64), 0.0, 1.0).item() == 0.5


def test_position_inversion_rate_against_all_pairs():
    g = torch.Generator().manual_seed(5)
    s = torch.randint(0, 6, (4, 11), generator=g).to(F64)                 # ties on purpose; odd length
    rate = an.position_inversion_rate(s)
    for b in range(4):
        near, far = s[b, :5].tolist(), s[b, 5:].tolist()
        brute = sum((a < c) + 0.5 * (a == c) for a in near for c in far) / (len(near) * len(far))
        assert rate[b].item() == pytest.approx(brute, abs=1e-15)
    assert an.position_inversion_rate(torch.arange(10, 0, -1, dtype=F64)).item() == 0.0     # decaying: never
    assert an.position_inversion_rate(torch.ones(10, dtype=F64)).item() == 0.5              # flat: coin flip


def test_token_inversion_rate_against_brute_force():
    g = torch.Generator().manual_seed(6)
    s1 = torch.randint(0, 4, (5, 9), generator=g).to(F64)
    s2 = torch.randint(0, 4, (5, 9), generator=g).to(F64)
    s1[:, 0], s2[:, 0] = torch.tensor([3.0, 0.0, 2.0, 1.0, 2.0]), torch.tensor([1.0, 3.0, 2.0, 0.0, 0.0])
    rate = an.token_inversion_rate(s1, s2)
    for b in range(5):
        a0, b0 = s1[b, 0].item(), s2[b, 0].item()
        if a0 == b0:
            assert math.isnan(rate[b].item())
            continue
        flips = [(1.0 if (x - y) * (a0 - b0) < 0 else 0.5 if x == y else 0.0)
                 for x, y in zip(s1[b, 1:].tolist(), s2[b, 1:].tolist())]
        assert rate[b].item() == pytest.approx(sum(flips) / len(flips), abs=1e-15)


def test_failure_rates_on_rope_scores_move_toward_a_coin_flip():
    # Sanity on real scores: a key equal to the query decays at short range and loses it at long range.
    g = torch.Generator().manual_seed(9)
    q = torch.randn(32, 64, dtype=F64, generator=g)
    inv_freq = pb.default_inv_freq(64, 1e3, dtype=F64)
    short = an.position_inversion_rate(an.rope_score_by_distance(q, q, inv_freq, torch.arange(64))).mean()
    long = an.position_inversion_rate(an.rope_score_by_distance(q, q, inv_freq, torch.arange(32768))).mean()
    assert short < 0.1 and abs(long - 0.5) < 0.05


x4 = torch.randn(4, dtype=F64)


inv2 = pb.default_inv_freq(4, dtype=F64)


@pytest.mark.parametrize("call, error, name", [
    (lambda: an.rope_plane_terms([1.0, 2.0], x4), TypeError, "q"),
    (lambda: an.rope_plane_terms(x4, torch.arange(4)), TypeError, "k"),
    (lambda: an.rope_plane_terms(x4, torch.randn(6)), ValueError, "head_dim"),
    (lambda: an.rope_plane_terms(torch.randn(3), torch.randn(3)), ValueError, "head_dim"),
    (lambda: an.rope_plane_terms(x4, x4, layout="neox"), ValueError, "layout"),
    (lambda: an.rope_score_by_distance(x4, x4, pb.default_inv_freq(8), torch.arange(3)), ValueError, "inv_freq"),
    (lambda: an.cosine_sum(torch.ones(2), torch.ones(3), inv2, torch.arange(3)), ValueError, "amplitude"),
    (lambda: an.cosine_sum(torch.ones(2), torch.ones(2), inv2, torch.ones(2, 2)), ValueError, "distances"),
    (lambda: an.cosine_sum(torch.ones(2), torch.ones(2), inv2, torch.tensor([True])), TypeError, "distances"),
    (lambda: an.cosine_sum(torch.ones(2), torch.tensor([0.0, math.nan]), inv2, torch.arange(2)), ValueError, "phase"),
    (lambda: an.fast_planes(0, inv2), ValueError, "context_length"),
    (lambda: an.fast_planes(10.0, inv2), TypeError, "context_length"),
    (lambda: an.split_moments(torch.ones(2), torch.ones(2), torch.arange(2), 10), TypeError, "inv_freq"),
    (lambda: an.score_moments(torch.ones(2), torch.ones(2), inv2, -3), ValueError, "context_length"),
    (lambda: an.score_term_moments(torch.ones(2), torch.ones(2), inv2, 8, start=0.5), TypeError, "start"),
    (lambda: an.normal_ks_distance(torch.randn(5), 0.0, 0.0), ValueError, "std"),
    (lambda: an.normal_ks_distance(torch.empty(0), 0.0, 1.0), ValueError, "samples"),
    (lambda: an.position_inversion_rate(torch.ones(1)), ValueError, "scores"),
    (lambda: an.position_inversion_rate(torch.tensor([1.0, math.inf])), ValueError, "scores"),
    (lambda: an.token_inversion_rate(torch.ones(3), torch.ones(4)), ValueError, "scores_1 and scores_2"),
    (lambda: an.position_aliasing(torch.ones(3), torch.int8), TypeError, "dtype"),
    (lambda: an.token_aliasing_rate(torch.arange(3), torch.ones(3)), TypeError, "scores_1"),
])
def test_bad_input_names_the_argument(call, error, name):
    with pytest.raises(error, match=name):
        call()


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


def test_distances_are_integers_or_finite_reals():
    inv_freq = pb.default_inv_freq(8, dtype=F64)
    ones, zeros = torch.ones(4, dtype=F64), torch.zeros(4, dtype=F64)
    torch.testing.assert_close(pb.cosine_sum(ones, zeros, inv_freq, torch.arange(5)),
                               pb.cosine_sum(ones, zeros, inv_freq, torch.arange(5.0)))
    for call in (lambda d: pb.cosine_sum(ones, zeros, inv_freq, d), lambda d: pb.rope_decay_bound(d, inv_freq)):
        with pytest.raises(ValueError, match="distances must be finite"):
            call(torch.tensor([0.0, math.nan]))
        with pytest.raises(TypeError, match="distances"):
            call(torch.tensor([True, False]))
    with pytest.raises(ValueError, match="q must be finite"):
        pb.rope_score_by_distance(torch.tensor([1.0, math.inf]), torch.ones(2), inv_freq[:1], torch.arange(3))


def test_ks_distance_mean_and_std_are_numbers_or_batch_tensors():
    x = torch.randn(2, 50, dtype=F64)
    for bad, exc in ((True, TypeError), ("0", TypeError), (math.nan, ValueError), (torch.zeros(3), ValueError)):
        with pytest.raises(exc, match="mean"):
            pb.normal_ks_distance(x, bad, 1.0)
    with pytest.raises(ValueError, match="std"):
        pb.normal_ks_distance(x, 0.0, torch.tensor([1.0, -1.0]))
    assert pb.normal_ks_distance(x, torch.zeros(2), 1).shape == (2,)
