"""posbook.experiments.probes: attention rows and weights of a trained GPT, and the passkey probes."""

from __future__ import annotations

import math

import pytest
import torch

import posbook as pb
from posbook.experiments import GPT, GPTConfig, probes, tasks


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


def _small_model(pattern):
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=24, n_layer=2, n_head=2, n_embd=16, max_seq_len=32, pattern=pattern)).eval()


@pytest.mark.parametrize("pattern", ["N", "R", "A", "T"])
def test_attention_weights_are_causal_distributions(pattern):
    idx = torch.randint(0, 24, (3, 7), generator=torch.Generator().manual_seed(1))
    w = probes.attention_weights(_small_model(pattern), idx)
    assert w.shape == (2, 3, 2, 7, 7) and w.dtype == torch.float64
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 3, 2, 7, dtype=torch.float64))
    assert (w.triu(1) == 0).all()


def test_attention_weights_match_attention_rows_entropy():
    idx = torch.randint(0, 24, (2, 9), generator=torch.Generator().manual_seed(2))
    model = _small_model("R")
    w = probes.attention_weights(model, idx)
    logs = torch.where(w > 0, w.log(), torch.zeros_like(w))
    torch.testing.assert_close(-(w * logs).sum(-1), probes.attention_rows(model, idx)["entropy"])


@pytest.mark.parametrize("pattern", ["R", "A"])
def test_attention_weights_read_the_position_ids_they_are_given(pattern):
    """Shifting every id by the same amount leaves a relative scheme's weights alone; ids in another order
    change them; the default is 0 … T − 1."""
    idx = torch.randint(0, 24, (2, 9), generator=torch.Generator().manual_seed(3))
    model = _small_model(pattern)
    base = probes.attention_weights(model, idx)
    torch.testing.assert_close(probes.attention_weights(model, idx, torch.arange(9)), base, rtol=0, atol=0)
    torch.testing.assert_close(probes.attention_weights(model, idx, torch.arange(9) + 11), base, rtol=0, atol=1e-6)
    shuffled = torch.tensor([0, 5, 1, 7, 2, 3, 8, 4, 6])
    assert (probes.attention_weights(model, idx, shuffled) - base).abs().max() > 1e-3


def test_attention_weights_keeps_training_mode():
    model = _small_model("N").train()
    probes.attention_weights(model, torch.zeros(1, 4, dtype=torch.long))
    assert model.training


def test_attention_weights_bad_input():
    with pytest.raises(TypeError, match="model"):
        probes.attention_weights(torch.nn.Linear(2, 2), torch.zeros(1, 4, dtype=torch.long))
    with pytest.raises((ValueError, TypeError), match="idx"):
        probes.attention_weights(_small_model("N"), torch.zeros(4, dtype=torch.long))


def _batch(n=12, depth=5, batch=3, **kw):
    return probes.passkey_probe_batch(n, depth, batch, torch.Generator().manual_seed(0), **kw)


def test_layout_matches_the_task():
    inputs, targets, regions = _batch()
    n, k = 12, tasks.PASSKEY_DIGITS
    assert inputs.shape == (3, tasks.sequence_length("passkey", n) - 1)
    # Same answer layout as make_batch: targets set on the answer digits and EOS only.
    _, ref_targets = tasks.make_batch("passkey", [n] * 3, torch.Generator().manual_seed(0))
    assert torch.equal(targets != tasks.IGNORE, ref_targets != tasks.IGNORE)
    marks = (inputs[0] == tasks.MARK).nonzero().flatten().tolist()
    assert marks == [6, 12]
    key = inputs[:, 7:12]
    assert torch.equal(targets[:, inputs.shape[1] - k - 1: -1], key)       # SEP predicts d1, …
    assert torch.equal(inputs[:, -k:], key)
    assert bool((inputs[:, 1:6] >= 10).all()) and bool((key < 10).all())
    total = sum(r.long() for r in regions.values())
    assert bool((total == 1).all())                                        # a partition
    assert regions["needle"].nonzero().flatten().tolist() == list(range(6, 13))
    assert regions["begin"].nonzero().flatten().tolist() == [0, 1, 2]
    assert inputs[0, regions["end"]][:2].tolist() == [tasks.QUERY, tasks.SEP]


def test_bad_input():
    with pytest.raises(ValueError, match="depth"):
        _batch(depth=1)
    with pytest.raises(ValueError, match="depth"):
        _batch(depth=13)
    with pytest.raises(TypeError, match="generator"):
        probes.passkey_probe_batch(4, 2, 1, None)
    with pytest.raises(TypeError, match="model"):
        probes.niah_attention_mass(torch.nn.Linear(2, 2), torch.zeros(1, 3, dtype=torch.long), {"end": torch.ones(3, dtype=torch.bool)})


@pytest.mark.parametrize("pattern,kw", [("R", {}), ("SSSN", dict(window=4, qk_norm="rope")), ("A", {})])
def test_mass_sums_to_one_and_gradient_shape(pattern, kw):
    torch.manual_seed(0)
    model = GPT(GPTConfig(pattern=pattern, n_layer=4, n_embd=32, n_head=2, vocab_size=tasks.VOCAB_SIZE,
                          max_seq_len=64, **kw))
    inputs, targets, regions = _batch()
    mass = probes.niah_attention_mass(model, inputs, regions)
    assert set(mass) == set(regions) and mass["end"].shape == (4,)
    assert torch.allclose(sum(mass.values()), torch.ones(4, dtype=torch.float64), atol=1e-5)
    g = probes.answer_gradient_influence(model, inputs, targets)
    sep = int((inputs[0] == tasks.SEP).nonzero())
    assert g.shape == (sep + 1,) and bool((g > 0).all())
    if pattern == "SSSN":   # the last layer is global NoPE, so no local-window cut-off: G reaches BOS
        assert g[-1] > 0
