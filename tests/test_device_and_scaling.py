from __future__ import annotations

import math

import pytest
import torch

import posbook as pb


def test_default_inv_freq_formula_and_hf_default():
    inv = pb.default_inv_freq(128, 10_000.0, dtype=torch.float64)
    assert inv[0].item() == 1.0
    assert math.isclose(inv[-1].item(), 10_000.0 ** (-126 / 128), rel_tol=1e-15)
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    cfg = LlamaConfig(hidden_size=256, num_attention_heads=2, rope_theta=500_000.0)
    hf = LlamaRotaryEmbedding(cfg).inv_freq
    torch.testing.assert_close(pb.default_inv_freq(128, 500_000.0), hf, rtol=2e-7, atol=0)


def test_device_override(monkeypatch):
    monkeypatch.setenv("POSBOOK_DEVICE", "cpu")
    assert pb.default_device() == torch.device("cpu")
    monkeypatch.setenv("POSBOOK_DEVICE", "not-a-device")
    with pytest.raises(ValueError, match="POSBOOK_DEVICE"):
        pb.default_device()
    monkeypatch.delenv("POSBOOK_DEVICE")
    assert pb.default_device().type in {"cpu", "cuda", "mps"}
