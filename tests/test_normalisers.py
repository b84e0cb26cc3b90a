"""posbook.normalisers: the four normalisers on raw logits, against attention() and first principles."""

from __future__ import annotations

import math
import types

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers.models.deepseek_v4.modeling_deepseek_v4 import (
    eager_attention_forward as deepseek_v4_eager,
)

import posbook as pb
from posbook.normalisers import NORMALISERS, normalise

F64 = torch.float64


def qkv(hq=4, t=9, d=8, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(2, hq, t, d, generator=gen, dtype=F64) for _ in range(3))


@pytest.mark.parametrize("normaliser", NORMALISERS)
def test_normalise_equals_attention_weights(normaliser):
    q, k, v = qkv()
    sink = torch.tensor([-2.0, 0.0, 1.5, 6.0], dtype=F64)
    extra = {"sink": sink} if normaliser == "sink" else {}
    _, w = pb.attention(q, k, v, causal=True, normaliser=normaliser, return_weights=True, **extra)
    logits = (q @ k.transpose(-2, -1) / math.sqrt(8)).masked_fill(~pb.attention_mask("causal", 9), float("-inf"))
    mine = normalise(logits, normaliser, **({"sink": sink[:, None]} if normaliser == "sink" else {}))
    if normaliser == "sigmoid":  # attention() uses b = −log(Tk) for every row
        mine = normalise(logits, normaliser, sigmoid_bias=-math.log(9))
    torch.testing.assert_close(mine, w, rtol=1e-12, atol=1e-15)


def test_sink_is_concat_softmax_drop():
    s = torch.randn(3, 5, 7, dtype=F64) * 4
    sink = torch.randn(3, 5, dtype=F64) * 3
    full = torch.cat([s, sink[..., None]], dim=-1).softmax(-1)[..., :-1]
    torch.testing.assert_close(normalise(s, "sink", sink=sink), full, rtol=1e-13, atol=1e-16)


def test_softmax1_is_a_zero_sink_and_survives_large_logits():
    s = torch.tensor([[1000.0, 999.0, -5.0], [-1000.0, -1000.0, -1000.0]], dtype=F64)
    one = normalise(s, "softmax1")
    torch.testing.assert_close(one, normalise(s, "sink", sink=0.0), rtol=0, atol=0)
    assert bool(torch.isfinite(one).all())
    torch.testing.assert_close(one[0], s[0].softmax(-1), rtol=1e-12, atol=0)  # the 1 is negligible here
    assert float(one[1].sum()) == 0.0 or float(one[1].sum()) < 1e-300  # … and everything here


def test_deepseek_v4_eager_sink_matches_and_zero_init_is_softmax1():
    q, k, v = qkv(hq=4)
    module = types.SimpleNamespace(num_key_value_groups=1, sinks=torch.zeros(4, dtype=F64), training=False)
    _, hf_w = deepseek_v4_eager(module, q, k, v, None, scaling=1 / math.sqrt(8))
    _, w = pb.attention(q, k, v, normaliser="softmax1", return_weights=True)
    torch.testing.assert_close(hf_w, w)
    module.sinks = torch.tensor([0.3, -1.0, 2.0, 4.0], dtype=F64)
    _, hf_w = deepseek_v4_eager(module, q, k, v, None, scaling=1 / math.sqrt(8))
    _, w = pb.attention(q, k, v, normaliser="sink", sink=module.sinks, return_weights=True)
    torch.testing.assert_close(hf_w, w)


@settings(max_examples=50, deadline=None)
@given(shift=st.floats(-300, 300), sink=st.floats(-50, 50), seed=st.integers(0, 2**16))
def test_row_mass_identities(shift, sink, seed):
    s = torch.randn(4, 6, generator=torch.Generator().manual_seed(seed), dtype=F64) + shift
    torch.testing.assert_close(normalise(s).sum(-1), torch.ones(4, dtype=F64))
    mass = normalise(s, "sink", sink=sink).sum(-1)
    torch.testing.assert_close(mass, torch.sigmoid(torch.logsumexp(s, -1) - sink), rtol=1e-12, atol=1e-300)
    # Below 1 exactly; summing six rounded weights can land an ulp or two above it when the sink share is tiny.
    assert bool((mass <= 1 + 4e-16).all()) and bool(torch.isfinite(mass).all())


def test_sigmoid_default_bias_is_minus_log_n():
    s = torch.zeros(1, 50, dtype=F64)
    w = normalise(s, "sigmoid")
    torch.testing.assert_close(w, torch.full_like(s, 1 / 51))


def test_fully_hidden_row_is_zero_not_nan():
    s = torch.full((2, 3), float("-inf"), dtype=F64)
    for normaliser in NORMALISERS:
        w = normalise(s, normaliser, **({"sink": 1.0} if normaliser == "sink" else {}))
        assert bool((w == 0).all())


@pytest.mark.parametrize("kwargs, error, match", [
    ({"logits": [1.0, 2.0]}, TypeError, "logits must be a torch.Tensor"),
    ({"logits": torch.tensor([1, 2])}, TypeError, "logits must be a floating-point"),
    ({"logits": torch.tensor([1.0, float("nan")])}, ValueError, "NaN"),
    ({"logits": torch.tensor([1.0, float("inf")])}, ValueError, r"^logits must not contain NaN or \+inf"),
    ({"logits": torch.zeros(2, 0)}, ValueError, "^logits must hold at least one key"),
    ({"logits": torch.zeros(3), "normaliser": "softmax2"}, ValueError, "normaliser"),
    ({"logits": torch.zeros(3), "normaliser": "sink"}, ValueError, "needs sink"),
    ({"logits": torch.zeros(3), "sink": 1.0}, ValueError, "sink only applies"),
    ({"logits": torch.zeros(2, 3), "normaliser": "sink", "sink": torch.zeros(5)}, ValueError, "sink of shape"),
    ({"logits": torch.zeros(3), "normaliser": "sink", "sink": "big"}, TypeError, "sink must be"),
    ({"logits": torch.zeros(3), "sigmoid_bias": 1.0}, ValueError, "sigmoid_bias only applies"),
])
def test_bad_input(kwargs, error, match):
    with pytest.raises(error, match=match):
        normalise(**kwargs)
