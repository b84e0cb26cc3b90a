"""posbook.masks: the three masks in both renderings, against their definition."""

from __future__ import annotations

import pytest
import torch

import posbook as pb


def brute_force(kind, tq, tk, window=None, chunk=None):
    out = torch.zeros(tq, tk, dtype=torch.bool)
    for r in range(tq):
        i = tk - tq + r
        for j in range(tk):
            if kind == "full":
                out[r, j] = True
            elif kind == "causal":
                out[r, j] = j <= i
            elif kind == "sliding":
                out[r, j] = j <= i and i - j < window
            else:
                out[r, j] = j <= i and i // chunk == j // chunk
    return out


@pytest.mark.parametrize("tq, tk", [(9, 9), (1, 9), (4, 13), (17, 17)])
@pytest.mark.parametrize("kind, options", [("full", {}), ("causal", {}), ("sliding", {"window": 3}),
                                           ("sliding", {"window": 1}), ("chunked", {"chunk_size": 4})])
def test_masks_match_their_definition(kind, options, tq, tk):
    mask = pb.attention_mask(kind, tq, tk, **options)
    expected = brute_force(kind, tq, tk, options.get("window"), options.get("chunk_size"))
    assert mask.dtype == torch.bool and torch.equal(mask, expected)


@pytest.mark.parametrize("kind, options", [("causal", {}), ("sliding", {"window": 40}), ("chunked", {"chunk_size": 64})])
def test_block_mask_is_the_same_rule_and_skips_blocks(kind, options):
    t = 256
    bm = pb.block_mask(kind, t, **options, block_size=32)
    dense = bm.to_dense()[0, 0].repeat_interleave(32, 0).repeat_interleave(32, 1).bool()
    rule = pb.attention_mask(kind, t, **options)
    assert bool((dense | ~rule).all())  # every allowed pair lies in a computed block
    if kind != "causal":
        assert bm.sparsity() > 60  # a local layer computes well under half of the causal blocks


def test_sliding_window_equal_to_length_is_causal():
    assert torch.equal(pb.attention_mask("sliding", 10, window=10), pb.attention_mask("causal", 10))
    assert torch.equal(pb.attention_mask("chunked", 10, chunk_size=10), pb.attention_mask("causal", 10))


def test_sizes_and_devices_are_checked_before_any_work():
    for make, error, match in [
        (lambda: pb.attention_mask("causal", 2**40), ValueError, "^q_len must be at most"),
        (lambda: pb.attention_mask("causal", 3, 2**63), ValueError, "^k_len must be at most"),
        (lambda: pb.attention_mask("sliding", 3, window=2**40), ValueError, "^window must be at most"),
        (lambda: pb.attention_mask("causal", 3, device="tpu"), ValueError, "^device"),
        (lambda: pb.block_mask("causal", 8, block_size=2**40), ValueError, "^block_size must be at most"),
        (lambda: pb.block_mask("causal", 8, device=None), TypeError, "^device"),
        (lambda: pb.mask_mod("chunked", chunk_size=2**63), ValueError, "^chunk_size must be at most"),
    ]:
        with pytest.raises(error, match=match):
            make()
