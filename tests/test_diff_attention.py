"""Tests for posbook.diff_attention beyond the layer checks in test_stability.py."""

import math

import pytest
import torch

import posbook as pb
from posbook import diff_attention as da


def test_lambda_init_matches_paper_and_reference_code_indexing():
    # paper: 0.8 − 0.6·exp(−0.3(l − 1)), l = 1…L; reference code: 0.8 − 0.6·exp(−0.3·depth), depth = 0…L−1
    for layer in range(1, 29):
        assert da.lambda_init(layer) == pytest.approx(0.8 - 0.6 * math.exp(-0.3 * (layer - 1)))
    assert da.lambda_init(1) == pytest.approx(0.2)
    with pytest.raises(ValueError, match="layer"):
        da.lambda_init(0)


def test_head_norm_off_keeps_shapes_and_changes_output():
    torch.manual_seed(0)
    on = da.DiffAttention(32, 2, layer=2).double()
    off = da.DiffAttention(32, 2, layer=2, head_norm=False).double()
    off.load_state_dict({k: v for k, v in on.state_dict().items() if "head_norm" not in k})
    x = torch.randn(2, 7, 32, dtype=torch.float64)
    assert off(x).shape == on(x).shape == (2, 7, 32)
    assert not torch.allclose(off(x), on(x))
    with pytest.raises(TypeError, match="head_norm"):
        da.DiffAttention(32, 2, layer=1, head_norm=1)


def test_head_rms_is_rms_of_prenorm_heads():
    torch.manual_seed(1)
    layer = da.DiffAttention(32, 2, layer=1, head_norm=False).double()
    x = torch.randn(3, 5, 32, dtype=torch.float64)
    rms = layer.head_rms(x)
    assert rms.shape == (2,)
    # without the norm the layer's heads are (1 − λ_init)·pre-norm heads; undo out_proj to compare
    heads = torch.linalg.solve(layer.out_proj.weight, layer(x).reshape(-1, 32).T).T / (1 - layer.lambda_init)
    heads = heads.view(3, 5, 2, 16)
    torch.testing.assert_close(rms, heads.square().mean(dim=(0, 1, 3)).sqrt())


def test_differential_weights_rows_sum_to_one_minus_lambda():
    s1, s2 = torch.randn(4, 9, dtype=torch.float64), torch.randn(4, 9, dtype=torch.float64)
    w = da.differential_weights(s1, s2, 0.3)
    torch.testing.assert_close(w.sum(-1), torch.full((4,), 0.7, dtype=torch.float64))
    torch.testing.assert_close(da.differential_weights(s1, s1, 1.0), torch.zeros_like(s1))
    with pytest.raises(ValueError, match="scores2"):
        da.differential_weights(s1, s2[:, :3], 0.5)
    with pytest.raises(TypeError, match="lam"):
        da.differential_weights(s1, s2, "0.5")


def test_needle_to_distractor_ratio():
    w = torch.tensor([0.1, -0.1, 0.6, 0.2], dtype=torch.float64)
    assert da.needle_to_distractor_ratio(w, 2).item() == pytest.approx(0.6 / (0.4 / 3))
    with pytest.raises(ValueError, match="needle"):
        da.needle_to_distractor_ratio(w, 4)
    with pytest.raises(TypeError, match="needle"):
        da.needle_to_distractor_ratio(w, True)


def test_diff_layer_matches_official_layout_kv_count():
    layer = pb.DiffAttention(1024, 8, layer=1)          # the reference example: 8 DIFF heads ~ 16 baseline heads
    assert layer.head_dim == 64 and layer.kv_cache_values_per_token() == 2 * 1024


def test_forward_is_two_causal_attentions():
    torch.manual_seed(2)
    layer = da.DiffAttention(32, 2, layer=3).double()
    x = torch.randn(2, 6, 32, dtype=torch.float64)
    q = layer.q_proj(x).view(2, 6, 2, 2, 8).permute(3, 0, 2, 1, 4)
    k = layer.k_proj(x).view(2, 6, 2, 2, 8).permute(3, 0, 2, 1, 4)
    v = layer.v_proj(x).view(2, 6, 2, 16).transpose(1, 2)
    (o1, a1), (o2, a2) = (pb.attention(q[i], k[i], v, causal=True, return_weights=True) for i in range(2))
    lam = layer.lam()
    heads = layer.head_norm(o1 - lam * o2) * (1 - layer.lambda_init)
    out, maps = layer(x, return_maps=True)
    torch.testing.assert_close(out, layer.out_proj(heads.transpose(1, 2).reshape(2, 6, 32)))
    torch.testing.assert_close(maps, a1 - lam * a2)
    torch.testing.assert_close(layer(x), out)


def test_layer_checks_its_input_by_name():
    layer = da.DiffAttention(32, 2, layer=1)
    x = torch.randn(1, 3, 32)
    cos, sin = pb.rope_cos_sin(torch.arange(3), pb.default_inv_freq(8))
    for call, error, match in [
        (lambda: layer(x.double()), TypeError, "^x must have the layer's dtype"),
        (lambda: layer(x, (cos,)), TypeError, r"^rope must be a \(cos, sin\) pair"),
        (lambda: layer(x, 3), TypeError, "^rope must be"),
        (lambda: layer(x, (cos[:2], sin[:2])), ValueError, "^rope must be"),
        (lambda: layer(x, (cos, sin[:, :4])), ValueError, "^rope must hold cos and sin of one shape"),
        (lambda: layer(x, return_maps=1), TypeError, "^return_maps"),
        (lambda: layer.head_rms(x.masked_fill(x > 1, float("nan"))), ValueError, "^x must be finite"),
        (lambda: da.DiffAttention(2**40, 2, layer=1), ValueError, "^d_model must be at most"),
    ]:
        with pytest.raises(error, match=match):
            call()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert layer(x.bfloat16()).shape == (1, 3, 32)


def test_differential_weights_hide_minus_inf_and_refuse_nan():
    s1 = torch.tensor([[0.0, float("-inf"), 1.0], [float("-inf")] * 3])
    w = da.differential_weights(s1, torch.zeros(2, 3), 0.5)
    assert w[0, 1] == -0.5 / 3 and torch.equal(w[1], torch.full((3,), -0.5 / 3))
    for scores, lam, error, match in [
        (torch.tensor([[0.0, float("nan"), 1.0]]), 0.5, ValueError, "^scores1 must not contain NaN"),
        (torch.tensor([[0.0, float("inf"), 1.0]]), 0.5, ValueError, r"^scores1 must not contain NaN or \+inf"),
        (torch.zeros(1, 3), torch.tensor([0.5, 0.5]), ValueError, "^lam of shape"),
        (torch.zeros(1, 3), torch.tensor(float("nan")), ValueError, "^lam must be finite"),
    ]:
        with pytest.raises(error, match=match):
            da.differential_weights(scores, torch.zeros_like(scores), lam)
    with pytest.raises(ValueError, match="^weights must be finite"):
        da.needle_to_distractor_ratio(torch.tensor([0.5, float("nan"), 0.1]), 0)
