"""Reading spectra: wavelengths, turns, the NTK-by-parts ramp, per-plane ratios and weights, DeepSeek's softmax
scale — checked against their definitions, against rope_parameters, and against Hugging Face where it has one."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers.models.deepseek_v3.modeling_deepseek_v3 import yarn_apply_mscale

import posbook as pb
import posbook as scaling

F64 = torch.float64
BASE = dict(hidden_size=1024, num_attention_heads=8, max_position_embeddings=4096)


def test_wavelengths_and_turns_are_reciprocal():
    inv_freq = pb.default_inv_freq(128, 1e4, dtype=F64)
    lam = scaling.rope_wavelengths(inv_freq)
    assert lam[0].item() == pytest.approx(2 * math.pi, rel=1e-15)
    assert bool((lam[1:] > lam[:-1]).all())
    turns = scaling.rope_turns(inv_freq, 4096)
    torch.testing.assert_close(turns * lam, torch.full_like(lam, 4096.0), rtol=1e-14, atol=0)


def test_unrotated_planes_have_infinite_wavelength():
    config = dict(BASE, head_dim=256, rope_parameters={"rope_type": "proportional", "rope_theta": 1e6,
                                                        "partial_rotary_factor": 0.25})
    inv_freq, _ = pb.rope_parameters(config, dtype=F64)
    lam = scaling.rope_wavelengths(inv_freq)
    assert bool(torch.isinf(lam[32:]).all()) and bool(torch.isfinite(lam[:32]).all())
    assert bool((scaling.rope_turns(inv_freq, 1e6)[32:] == 0).all())


def test_ramp_gamma_is_the_papers_piecewise_linear_ramp():
    r = torch.tensor([0.0, 0.5, 1.0, 2.0, 16.5, 32.0, 33.0, 1e6], dtype=F64)
    expected = torch.tensor([0, 0, 0, 1 / 31, 15.5 / 31, 1, 1, 1], dtype=F64)
    torch.testing.assert_close(scaling.ramp_gamma(r, 1.0, 32.0), expected, rtol=0, atol=1e-15)
    # Equal bounds: a step, 1 strictly above.
    torch.testing.assert_close(scaling.ramp_gamma(r, 1.0, 1.0), (r > 1).to(F64))


@pytest.mark.parametrize("name", ["Llama-3.1-8B", "Llama-3.1-405B", "Llama-4-Scout"])
def test_llama3_is_ntk_by_parts_with_the_papers_ramp_in_turns(name):
    config = pb.model_config(name)
    spec = pb.rope_spec(config)
    theta = pb.default_inv_freq(spec.rotary_dim, spec.rope_theta, dtype=F64)
    p = spec.params
    gamma = scaling.ramp_gamma(scaling.rope_turns(theta, p["original_max_position_embeddings"]),
                               p["low_freq_factor"], p["high_freq_factor"])
    inv_freq, _ = pb.rope_parameters(config, dtype=F64)
    torch.testing.assert_close(inv_freq, theta * (gamma + (1 - gamma) / p["factor"]), rtol=1e-15, atol=0)
    torch.testing.assert_close(scaling.ramp_weights(config), gamma, rtol=0, atol=1e-12)


def test_frequency_ratio_of_simple_rules():
    linear = dict(BASE, rope_theta=1e4, rope_scaling={"rope_type": "linear", "factor": 4.0})
    torch.testing.assert_close(scaling.frequency_ratio(linear), torch.full((64,), 0.25, dtype=F64))
    torch.testing.assert_close(scaling.frequency_ratio(dict(BASE, rope_theta=1e4)), torch.ones(64, dtype=F64))
    ntk = dict(BASE, rope_theta=1e4, rope_scaling={"rope_type": "ntk", "factor": 8.0})
    i = torch.arange(64, dtype=F64)
    torch.testing.assert_close(scaling.frequency_ratio(ntk), 8.0 ** (-2 * i / 126), rtol=1e-12, atol=0)
    # Dynamic: untouched up to max_position_embeddings, the NTK base change beyond.
    dynamic = dict(BASE, rope_theta=1e4, rope_scaling={"rope_type": "dynamic", "factor": 2.0})
    torch.testing.assert_close(scaling.frequency_ratio(dynamic, seq_len=4096), torch.ones(64, dtype=F64))
    assert scaling.frequency_ratio(dynamic, seq_len=8192)[-1].item() == pytest.approx(1 / 3, rel=1e-12)


def test_proportional_ratio_is_one_on_kept_planes_and_zero_elsewhere():
    config = dict(BASE, head_dim=128, rope_parameters={"rope_type": "proportional", "rope_theta": 1e4,
                                                        "partial_rotary_factor": 0.5})
    ratio = scaling.frequency_ratio(config)
    assert bool((ratio[:32] == 1).all()) and bool((ratio[32:] == 0).all())


def test_layer_type_selects_the_rope_dict_of_per_layer_configs():
    config = pb.model_config("Gemma-4-31B")          # one rope dict per layer type
    full = scaling.frequency_ratio(config, layer_type="full_attention")
    inv_freq, _ = pb.rope_parameters(config, layer_type="full_attention", dtype=F64)
    assert full.shape == inv_freq.shape and bool(((full == 1) | (full == 0)).all()) and int((full == 1).sum()) > 0
    torch.testing.assert_close(scaling.frequency_ratio(config, layer_type="sliding_attention"),
                               torch.ones_like(pb.rope_parameters(config, layer_type="sliding_attention",
                                                                  dtype=F64)[0]))
    assert scaling.yarn_softmax_scale(config, layer_type="full_attention") == 1.0
    with pytest.raises(ValueError, match="layer_type"):
        scaling.frequency_ratio(config)


@pytest.mark.parametrize("config", [
    dict(BASE, rope_theta=1e4, rope_scaling={"rope_type": "yarn", "factor": 16.0}),
    dict(BASE, rope_theta=5e5, rope_scaling={"rope_type": "ntk_by_parts", "factor": 4.0, "beta_fast": 16,
                                             "beta_slow": 2, "truncate": False}),
    pb.model_config("DeepSeek-V3"), pb.model_config("Kimi-K2"), pb.model_config("gpt-oss-120b"),
], ids=["yarn-paper", "by-parts-no-truncate", "deepseek-v3", "kimi-k2", "gpt-oss-120b"])
def test_yarn_weights_rebuild_the_spectrum_and_follow_the_index_ramp(config):
    spec = pb.rope_spec(config)
    gamma = scaling.ramp_weights(config)
    assert float(gamma.min()) >= -1e-12 and float(gamma.max()) <= 1 + 1e-12
    theta = pb.default_inv_freq(spec.rotary_dim, spec.rope_theta, dtype=F64)
    factor = spec.params["factor"]
    inv_freq, _ = pb.rope_parameters(config, dtype=F64)
    torch.testing.assert_close(theta * (gamma + (1 - gamma) / factor), inv_freq, rtol=1e-13, atol=0)
    # γ is linear in the plane index between the two bounds: 1 before the fast bound, 0 after the slow one.
    low, high = pb.yarn_ramp_bounds(spec.rotary_dim, spec.rope_theta, spec.params["original_max_position_embeddings"],
                                    beta_fast=spec.params.get("beta_fast") or 32.0,
                                    beta_slow=spec.params.get("beta_slow") or 1.0,
                                    truncate=spec.params.get("truncate", True))
    i = torch.arange(spec.rotary_dim // 2, dtype=F64)
    if high == low:
        high += 0.001
    torch.testing.assert_close(gamma, 1 - ((i - low) / (high - low)).clamp(0, 1), rtol=0, atol=1e-12)


def test_position_interpolation_has_zero_weight_and_ntk_a_geometric_one():
    linear = dict(BASE, rope_theta=1e4, rope_scaling={"rope_type": "linear", "factor": 4.0})
    torch.testing.assert_close(scaling.ramp_weights(linear), torch.zeros(64, dtype=F64), rtol=0, atol=1e-15)
    ntk = dict(BASE, rope_theta=1e4, rope_scaling={"rope_type": "ntk", "factor": 8.0})
    gamma = scaling.ramp_weights(ntk)
    assert gamma[0].item() == pytest.approx(1.0) and gamma[-1].item() == pytest.approx(0.0, abs=1e-12)
    assert bool((gamma[1:] < gamma[:-1]).all())


@pytest.mark.parametrize("name", ["DeepSeek-V2", "DeepSeek-V3", "Kimi-K2", "gpt-oss-120b", "Llama-3.1-8B",
                                  "Qwen3-8B"])
def test_softmax_scale_matches_hugging_faces_deepseek_rule(name):
    config = pb.model_config(name)
    rope = copy.deepcopy(config.get("rope_scaling") or {"rope_type": "default"})
    rope.setdefault("rope_type", rope.get("type", "default"))
    assert scaling.yarn_softmax_scale(config) == pytest.approx(yarn_apply_mscale(rope, 1.0), rel=1e-15)


def test_deepseek_v3_puts_the_whole_length_scaling_into_the_softmax():
    config = pb.model_config("DeepSeek-V3")
    _, attention_factor = pb.rope_parameters(config)
    assert attention_factor == 1.0
    assert scaling.yarn_softmax_scale(config) == pytest.approx((0.1 * math.log(40) + 1) ** 2, rel=1e-15)


@pytest.mark.parametrize("call, error, name", [
    (lambda: scaling.rope_wavelengths([1.0, 0.5]), TypeError, "inv_freq"),
    (lambda: scaling.rope_wavelengths(torch.arange(4)), TypeError, "inv_freq"),
    (lambda: scaling.rope_wavelengths(torch.tensor([1.0, -0.1])), ValueError, "inv_freq"),
    (lambda: scaling.rope_wavelengths(torch.tensor([1.0, float("nan")])), ValueError, "inv_freq"),
    (lambda: scaling.rope_wavelengths(torch.ones(2, 2)), ValueError, "inv_freq"),
    (lambda: scaling.rope_turns(torch.ones(4), 0), ValueError, "length"),
    (lambda: scaling.rope_turns(torch.ones(4), "4096"), TypeError, "length"),
    (lambda: scaling.ramp_gamma([1.0], 1.0, 32.0), TypeError, "turns"),
    (lambda: scaling.ramp_gamma(torch.ones(3), 32.0, 1.0), ValueError, "beta"),
    (lambda: scaling.ramp_gamma(torch.tensor([-1.0]), 1.0, 32.0), ValueError, "turns"),
    (lambda: scaling.ramp_gamma(torch.ones(3), -1.0, 32.0), ValueError, "alpha"),
    (lambda: scaling.ramp_weights(dict(BASE, rope_theta=1e4)), ValueError, "rope_type"),
    (lambda: scaling.ramp_weights(dict(BASE, rope_theta=1e4, rope_scaling={"rope_type": "linear", "factor": 1.0})),
     ValueError, "factor"),
    (lambda: scaling.ramp_weights(dict(BASE, rope_theta=1e4, rope_scaling={"rope_type": "dynamic",
                                                                            "factor": 2.0})), ValueError, "rope_type"),
    (lambda: scaling.frequency_ratio([1, 2]), TypeError, "config"),
    (lambda: scaling.yarn_softmax_scale(dict(BASE, rope_theta=1e4, rope_scaling={
        "rope_type": "yarn", "factor": 4.0, "mscale_all_dim": "1"})), TypeError, "mscale_all_dim"),
])
def test_bad_input_is_rejected_with_the_argument_named(call, error, name):
    with pytest.raises(error, match=name):
        call()


@settings(max_examples=60, deadline=None)
@given(log_theta=st.floats(2.0, 11.0), planes=st.integers(2, 96), length=st.integers(2, 2**22),
       alpha=st.floats(0.0, 8.0), width=st.floats(0.0, 64.0))
def test_ramp_properties(log_theta, planes, length, alpha, width):
    theta = pb.default_inv_freq(2 * planes, 10.0**log_theta, dtype=F64)
    turns = scaling.rope_turns(theta, length)
    gamma = scaling.ramp_gamma(turns, alpha, alpha + width)
    assert float(gamma.min()) >= 0 and float(gamma.max()) <= 1
    # Frequencies fall with the index, so turns fall and the ramp can only go down.
    assert bool((gamma[1:] <= gamma[:-1]).all())
    torch.testing.assert_close(turns * scaling.rope_wavelengths(theta), torch.full_like(turns, float(length)),
                               rtol=1e-13, atol=0)
