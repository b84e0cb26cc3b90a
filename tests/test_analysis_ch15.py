"""Tests for posbook.analysis.attention_weights (chapter "Length generalisation")."""

import pytest
import torch

from posbook.experiments import probes as analysis
from posbook.experiments.model import GPT, GPTConfig


def _model(pattern):
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=24, n_layer=2, n_head=2, n_embd=16, max_seq_len=32, pattern=pattern)).eval()


@pytest.mark.parametrize("pattern", ["N", "R", "A", "T"])
def test_attention_weights_are_causal_distributions(pattern):
    idx = torch.randint(0, 24, (3, 7), generator=torch.Generator().manual_seed(1))
    w = analysis.attention_weights(_model(pattern), idx)
    assert w.shape == (2, 3, 2, 7, 7) and w.dtype == torch.float64
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 3, 2, 7, dtype=torch.float64))
    assert (w.triu(1) == 0).all()


def test_attention_weights_match_attention_rows_entropy():
    idx = torch.randint(0, 24, (2, 9), generator=torch.Generator().manual_seed(2))
    model = _model("R")
    w = analysis.attention_weights(model, idx)
    logs = torch.where(w > 0, w.log(), torch.zeros_like(w))
    torch.testing.assert_close(-(w * logs).sum(-1), analysis.attention_rows(model, idx)["entropy"])


def test_attention_weights_keeps_training_mode():
    model = _model("N").train()
    analysis.attention_weights(model, torch.zeros(1, 4, dtype=torch.long))
    assert model.training


def test_attention_weights_bad_input():
    with pytest.raises(TypeError, match="model"):
        analysis.attention_weights(torch.nn.Linear(2, 2), torch.zeros(1, 4, dtype=torch.long))
    with pytest.raises((ValueError, TypeError), match="idx"):
        analysis.attention_weights(_model("N"), torch.zeros(4, dtype=torch.long))
