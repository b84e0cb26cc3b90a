"""posbook.experiments.extension: every context-extension method is a rope config the experiment model takes."""

from __future__ import annotations

import math

import pytest
import torch

import posbook as pb
from posbook.experiments import GPT, GPTConfig
from posbook.experiments.extension import EXTENSION_METHODS, extension_rope

CONFIG = GPTConfig(n_layer=2, n_embd=32, n_head=4, pattern="RN", max_seq_len=64)


@pytest.mark.parametrize("method", sorted(EXTENSION_METHODS))
def test_every_method_stretches_a_trained_model(method):
    torch.manual_seed(0)
    model = GPT(CONFIG).double()
    rope = extension_rope(CONFIG, method, 4, trained_length=16)
    stretched = model.with_rope(rope).double()
    idx = torch.randint(0, 256, (1, 64))
    if method == "none":
        assert rope is None and torch.equal(stretched(idx), model(idx))
        return
    assert stretched.config.layer_ropes()[1] is None            # the NoPE layer is left alone
    assert not torch.allclose(stretched(idx), model(idx))
    inv_freq, attention_factor = pb.rope_parameters(rope, seq_len=64)
    base, _ = pb.rope_parameters({"rope_theta": CONFIG.rope_theta, "head_dim": CONFIG.head_dim})
    # Every method slows the slowest plane (it is the one that runs out of trained angles); PI slows all of them.
    assert inv_freq[-1] < base[-1]
    if method == "PI":
        torch.testing.assert_close(inv_freq, base / 4)
    expected = 0.1 * math.log(4) + 1 if method == "YaRN" else 1.0
    assert attention_factor == pytest.approx(expected)


def test_bad_extension_arguments_are_named():
    with pytest.raises(ValueError, match="method"):
        extension_rope(CONFIG, "ntk-aware", 4, 16)
    with pytest.raises(ValueError, match="factor must be >= 1"):
        extension_rope(CONFIG, "PI", 0.5, 16)
    with pytest.raises(ValueError, match="trained_length"):
        extension_rope(CONFIG, "YaRN", 4, 0)
