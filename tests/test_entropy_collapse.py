"""Helpers of chapter "Entropy collapse": sampled logit rows and per-row entropy / logit norm of a GPT."""

from __future__ import annotations

import math

import pytest
import torch

import posbook as pb
from posbook.experiments import GPT, GPTConfig, probes


def test_logit_rows_are_centred_with_the_requested_norm_and_respect_the_bound():
    rows = pb.logit_rows_with_norm(16, [0.0, 1.0, 7.5], 50, generator=torch.Generator().manual_seed(0))
    assert rows.shape == (3, 50, 16) and rows.dtype == torch.float64
    assert float(rows.mean(-1).abs().max()) < 1e-12
    torch.testing.assert_close(rows.norm(dim=-1), torch.tensor([0.0, 1.0, 7.5], dtype=torch.float64)[:, None]
                               .expand(3, 50), rtol=0, atol=1e-12, equal_nan=True)
    entropy = pb.attention_entropy(rows.softmax(-1))
    assert bool((entropy >= pb.entropy_lower_bound(torch.tensor([0.0, 1.0, 7.5]), 16)[:, None] - 1e-12).all())


def test_logit_rows_reject_bad_input():
    with pytest.raises(ValueError, match="n"):
        pb.logit_rows_with_norm(1, [1.0], 3)
    with pytest.raises(ValueError, match="norms"):
        pb.logit_rows_with_norm(4, [-1.0], 3)
    with pytest.raises(ValueError, match="norms"):
        pb.logit_rows_with_norm(4, [], 3)
    with pytest.raises(ValueError, match="count"):
        pb.logit_rows_with_norm(4, [1.0], 0)


def _model(**overrides):
    torch.manual_seed(0)
    return GPT(GPTConfig(n_layer=2, n_embd=32, n_head=2, vocab_size=24, max_seq_len=32, **overrides))


def test_attention_rows_match_a_direct_computation_and_follow_temperature():
    model = _model()
    idx = torch.randint(0, 24, (2, 12), generator=torch.Generator().manual_seed(1))
    rows = probes.attention_rows(model, idx)
    assert rows["entropy"].shape == rows["logit_norm"].shape == (2, 2, 2, 12)
    # The first query sees one key: zero entropy, zero centred norm. Query t's entropy is at most log(t + 1).
    assert float(rows["entropy"][..., 0].abs().max()) < 1e-6
    assert float(rows["logit_norm"][..., 0].abs().max()) < 1e-12
    assert bool((rows["entropy"] <= torch.log(torch.arange(1, 13, dtype=torch.float64)) + 1e-6).all())
    # Layer 0 by hand: its input is attn_norm(embedding).
    attn = model.blocks[0].attn
    x = model.blocks[0].attn_norm(model.embed(idx)).detach()
    q = attn.q_proj(x).view(2, 12, 2, 16).transpose(1, 2)
    k = attn.k_proj(x).view(2, 12, 2, 16).transpose(1, 2)
    q, k = pb.apply_rope(q, attn.cos[:12], attn.sin[:12]), pb.apply_rope(k, attn.cos[:12], attn.sin[:12])
    z = (q @ k.transpose(-2, -1) / 4).double().masked_fill(~torch.ones(12, 12, dtype=torch.bool).tril(), -math.inf)
    torch.testing.assert_close(rows["entropy"][0], pb.attention_entropy(z.softmax(-1)), rtol=0, atol=1e-5)
    last = z[..., -1, :]
    torch.testing.assert_close(rows["logit_norm"][0][..., -1], (last - last.mean(-1, keepdim=True)).norm(dim=-1),
                               rtol=1e-5, atol=1e-6)
    # Temperature 0.1 multiplies every logit, hence every centred norm, by 10.
    model.config.attn_temperature = 0.1
    sharp = probes.attention_rows(model, idx)
    torch.testing.assert_close(sharp["logit_norm"][0], 10 * rows["logit_norm"][0], rtol=1e-5, atol=1e-6)
    assert model.training  # mode restored


def test_attention_rows_reject_other_models_and_uncovered_layers():
    with pytest.raises(TypeError, match="model"):
        probes.attention_rows(torch.nn.Linear(2, 2), torch.zeros(1, 2, dtype=torch.long))


def test_attention_rows_of_sliding_layers_see_only_the_window():
    # A row over n visible keys has entropy in [0, log n]: the first query sees one key, later ones at most 4.
    model = _model(pattern="S", window=4)
    rows = probes.attention_rows(model, torch.randint(0, 24, (2, 12), generator=torch.Generator().manual_seed(1)))
    visible = torch.arange(12).add(1).clamp(max=4).double()
    assert rows["entropy"].shape[-1] == 12
    assert (rows["entropy"] >= -1e-12).all() and (rows["entropy"] <= visible.log() + 1e-9).all()
    assert rows["entropy"][..., 0].abs().max() < 1e-12 and rows["logit_norm"][..., 0].abs().max() < 1e-12
    assert rows["entropy"][..., 4:].min() > 0.5 * math.log(4)  # weights spread over the window, not beyond
