"""posbook.bias: ALiBi slopes and bias, and T5 buckets against Hugging Face's T5."""

from __future__ import annotations

import math

import pytest
import torch
from transformers.models.t5.modeling_t5 import T5Attention

import posbook as pb


@pytest.mark.parametrize("n", [1, 2, 4, 8, 16, 32, 64])
def test_alibi_slopes_power_of_two_are_the_geometric_sequence(n):
    ratio = 2 ** (-8 / n)
    expected = torch.tensor([ratio ** (h + 1) for h in range(n)], dtype=torch.float64)
    torch.testing.assert_close(pb.alibi_slopes(n, dtype=torch.float64), expected, rtol=1e-15, atol=0)


def test_alibi_slopes_eight_heads_are_the_papers():
    # Press et al.: for 8 heads the slopes are 1/2, 1/4, ..., 1/256.
    assert pb.alibi_slopes(8, dtype=torch.float64).tolist() == [2.0 ** -(h + 1) for h in range(8)]


@pytest.mark.parametrize("n", list(range(1, 70)))
def test_alibi_slopes_any_count_interleave_the_next_power(n):
    slopes = pb.alibi_slopes(n, dtype=torch.float64)
    assert slopes.shape == (n,) and bool((slopes > 0).all()) and bool((slopes < 1).all())
    p = 2 ** int(math.log2(n))
    assert torch.equal(slopes[:p], pb.alibi_slopes(p, dtype=torch.float64))
    if n > p:
        # The extra heads take the odd-indexed slopes (1st, 3rd, ...) of the 2p-head sequence: between the first p.
        torch.testing.assert_close(slopes[p:], pb.alibi_slopes(2 * p, dtype=torch.float64)[0::2][: n - p])
    assert len(set(slopes.tolist())) == n  # no two heads share a slope


def test_alibi_bias_is_linear_in_distance_and_not_scaled():
    slopes = pb.alibi_slopes(4)
    bias = pb.alibi_bias(slopes, 6)
    assert bias.shape == (4, 6, 6)
    i, j = torch.meshgrid(torch.arange(6), torch.arange(6), indexing="ij")
    for h in range(4):
        torch.testing.assert_close(bias[h], -slopes[h] * (i - j).abs().float())
    # A decoding step (1 query against 6 keys) sees the last row.
    torch.testing.assert_close(pb.alibi_bias(slopes, 1, 6), bias[:, -1:, :])


def test_alibi_in_attention_depends_only_on_distance():
    # The same content at every position: the weight pattern of the last query only shifts with distance.
    slopes = pb.alibi_slopes(2, dtype=torch.float64)
    q = torch.ones(1, 2, 5, 4, dtype=torch.float64)
    _, w = pb.attention(q, q, q, bias=pb.alibi_bias(slopes, 5), causal=True, return_weights=True)
    ratio = w[0, :, -1, 1:] / w[0, :, -1, :-1]
    torch.testing.assert_close(ratio, torch.exp(slopes)[:, None].expand(2, 4))


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("num_buckets, max_distance", [(32, 128), (16, 64), (8, 20), (64, 1000)])
def test_t5_buckets_match_hugging_face(bidirectional, num_buckets, max_distance):
    rel = torch.arange(-3000, 3000)
    ours = pb.t5_relative_buckets(rel, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance)
    theirs = T5Attention._relative_position_bucket(rel, bidirectional=bidirectional, num_buckets=num_buckets,
                                                   max_distance=max_distance)
    assert torch.equal(ours, theirs)


def test_t5_buckets_shape_exact_then_logarithmic():
    buckets = pb.t5_relative_buckets(-torch.arange(0, 200), bidirectional=False)
    assert buckets[:16].tolist() == list(range(16))           # exact distances 0..15
    # The last bucket begins where 16 + 16·log(n/16)/log(128/16) reaches 31, at n = ⌈16·8^(15/16)⌉ = 113, not at
    # max_distance: max_distance only says where the log scale would reach the bucket count.
    first_last = math.ceil(16 * 8 ** (15 / 16))
    assert first_last == 113 and buckets[first_last - 1].item() == 30 and bool(buckets[first_last:].eq(31).all())
    assert bool((buckets.diff() >= 0).all())


def test_t5_relative_bias_module_is_a_lookup():
    torch.manual_seed(0)
    module = pb.T5RelativeBias(3, bidirectional=False, num_buckets=8, max_distance=16)
    bias = module(5, 7)
    buckets = pb.t5_relative_buckets(pb.relative_positions(5, 7), bidirectional=False, num_buckets=8, max_distance=16)
    assert bias.shape == (3, 5, 7)
    torch.testing.assert_close(bias, module.embedding.weight[buckets].permute(2, 0, 1))


def test_sizes_and_devices_are_checked_before_any_work():
    for make, error, match in [
        (lambda: pb.alibi_slopes(2**40), ValueError, "^n_heads must be at most"),
        (lambda: pb.ALiBiBias(2**63), ValueError, "^n_heads must be at most"),
        (lambda: pb.T5RelativeBias(2**40), ValueError, "^n_heads must be at most"),
        (lambda: pb.relative_positions(3, 2**40), ValueError, "^k_len must be at most"),
        (lambda: pb.relative_positions(3, 5, device="tpu"), ValueError, "^device"),
        (lambda: pb.t5_relative_buckets(torch.zeros(3), num_buckets=8), TypeError, "^relative_position must be an "
                                                                                    "integer tensor"),
        (lambda: pb.t5_relative_buckets(torch.zeros(3, dtype=torch.long), bidirectional=0), TypeError,
         "^bidirectional"),
    ]:
        with pytest.raises(error, match=match):
            make()
