"""Norms, entropy and its bound, softcap, QK-Clip (MHA and MLA), and differential attention."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm

import posbook as pb
from posbook.stability import max_logits_per_head


def test_rms_norm_matches_qwen3_and_bounds_logits():
    torch.manual_seed(0)
    x = torch.randn(2, 4, 8, 128) * 30
    hf = Qwen3RMSNorm(128, eps=1e-6)
    with torch.no_grad():
        hf.weight.copy_(torch.rand(128) + 0.5)
    torch.testing.assert_close(pb.rms_norm(x, hf.weight.detach(), eps=1e-6), hf(x).detach(), rtol=0, atol=0)
    # With unit gains every normalised head vector has norm √d, so |q·k| ≤ d whatever the input scale.
    q, k = pb.QKNorm(128)(x, x.flip(2) * 1000)
    assert (q @ k.transpose(-2, -1)).abs().max() <= 128 * (1 + 1e-5)
    torch.testing.assert_close(q.norm(dim=-1), torch.full((2, 4, 8), math.sqrt(128)), rtol=1e-5, atol=0)


def test_bf16_rounding_follows_each_family():
    from transformers.models.gemma3.modeling_gemma3 import Gemma3RMSNorm

    torch.manual_seed(1)
    x = (torch.randn(4, 64, 256) * 3).bfloat16()
    qwen = Qwen3RMSNorm(256, eps=1e-6).bfloat16()
    gemma = Gemma3RMSNorm(256, eps=1e-6)
    with torch.no_grad():
        qwen.weight.copy_(torch.rand(256) + 0.5)
        gemma.weight.copy_(torch.randn(256) * 0.3)
    assert torch.equal(pb.rms_norm(x, qwen.weight.detach(), eps=1e-6), qwen(x).detach())
    assert torch.equal(pb.rms_norm(x, gemma.weight.detach(), eps=1e-6, zero_centred=True), gemma(x).detach())


def test_zero_centred_gain_is_one_plus_weight():
    x = torch.randn(3, 16, dtype=torch.float64)
    w = torch.randn(16, dtype=torch.float64)
    torch.testing.assert_close(pb.rms_norm(x, w, zero_centred=True), pb.rms_norm(x, 1 + w))
    norm = pb.RMSNorm(16, zero_centred=True).double()
    assert bool((norm.weight == 0).all())  # starts at gain 1: weight decay pulls towards the identity
    torch.testing.assert_close(norm(x), pb.rms_norm(x))


def test_entropy_of_uniform_and_one_hot():
    assert pb.attention_entropy(torch.full((7,), 1 / 7)).item() == pytest.approx(math.log(7), rel=1e-6)
    assert pb.attention_entropy(torch.tensor([0.0, 1.0, 0.0])).item() == 0.0


@pytest.mark.parametrize("n", [2, 3, 16, 1024])
@pytest.mark.parametrize("norm", [0.0, 0.5, 3.0, 10.0, 40.0])
def test_entropy_bound_is_attained_by_the_extremal_row(n, norm):
    z = pb.extremal_logits(norm, n)
    assert (z - z.mean()).norm().item() == pytest.approx(norm, abs=1e-12)
    attained = pb.attention_entropy(z.softmax(-1)).item()
    # Far out the softmax itself rounds 1 − p to 0, so compare on the scale of log n, not relatively.
    assert attained == pytest.approx(pb.entropy_lower_bound(norm, n).item(), rel=1e-9, abs=1e-14)


@settings(max_examples=100, deadline=None)
@given(n=st.integers(2, 64), norm=st.floats(0.01, 30), seed=st.integers(0, 2**16))
def test_no_random_row_goes_below_the_bound(n, norm, seed):
    gen = torch.Generator().manual_seed(seed)
    z = torch.randn(64, n, generator=gen, dtype=torch.float64)
    z = z - z.mean(-1, keepdim=True)
    z = z / z.norm(dim=-1, keepdim=True) * norm
    entropy = pb.attention_entropy(z.softmax(-1))
    assert bool((entropy >= pb.entropy_lower_bound(norm, n) - 1e-12).all())


@pytest.mark.parametrize("n", [3, 8, 32])
def test_optimised_rows_do_not_beat_the_bound(n):
    """Gradient descent on the entropy over the sphere ‖z − z̄‖ = R finds the bound, not less."""
    torch.manual_seed(n)
    norm = 4.0
    z = torch.randn(16, n, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.Adam([z], lr=0.1)
    for _ in range(150):
        c = z - z.mean(-1, keepdim=True)
        w = (c / c.norm(dim=-1, keepdim=True) * norm).softmax(-1)
        loss = pb.attention_entropy(w).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        c = z - z.mean(-1, keepdim=True)
        found = pb.attention_entropy((c / c.norm(dim=-1, keepdim=True) * norm).softmax(-1))
    bound = pb.entropy_lower_bound(norm, n).item()
    assert bool((found >= bound - 1e-9).all()) and found.min().item() == pytest.approx(bound, rel=1e-3)


def test_entropy_bound_falls_exponentially():
    n = 4096
    norms = torch.tensor([20.0, 30.0, 40.0], dtype=torch.float64)
    bound = pb.entropy_lower_bound(norms, n)
    beta = norms * math.sqrt(n / (n - 1))
    torch.testing.assert_close(bound, (n - 1) * (1 + beta) * torch.exp(-beta), rtol=1e-3, atol=0)
    assert pb.entropy_lower_bound(0.0, n).item() == pytest.approx(math.log(n))


def test_spectral_norm_bounds_the_logit_norm_and_hence_the_entropy():
    torch.manual_seed(1)
    d, t = 32, 50
    x = torch.randn(t, d, dtype=torch.float64)
    w_q, w_k = torch.randn(d, d, dtype=torch.float64) * 0.5, torch.randn(d, d, dtype=torch.float64) * 0.5
    scale = 1 / math.sqrt(d)
    logits = (x @ w_q) @ (x @ w_k).T * scale
    sigma = torch.linalg.matrix_norm(w_q @ w_k.T, ord=2)
    radius = scale * sigma * x.norm(dim=-1) * torch.linalg.matrix_norm(x, ord=2)
    centred = (logits - logits.mean(-1, keepdim=True)).norm(dim=-1)
    assert bool((centred <= radius).all())
    entropy = pb.attention_entropy(logits.softmax(-1))
    assert bool((entropy >= pb.entropy_lower_bound(radius, t) - 1e-12).all())


def test_softcap():
    x = torch.tensor([-1e6, -3.0, 0.0, 0.01, 1e6], dtype=torch.float64)
    y = pb.softcap(x, 50.0)
    # tanh saturates to ±1 in floating point, so the cap is reached (never exceeded) by huge logits.
    assert y[0] == -50 and y[-1] == 50 and y[2] == 0 and bool((y.abs() <= 50).all())
    assert y[1].item() == pytest.approx(50 * math.tanh(-3 / 50), rel=1e-15)
    assert y[3].item() == pytest.approx(0.01, rel=1e-7)


def max_logit_per_head(x, w_q, w_k, n_heads, head_dim):
    q = (x @ w_q.T).view(-1, n_heads, head_dim).transpose(0, 1)
    k = (x @ w_k.T).view(-1, n_heads, head_dim).transpose(0, 1)
    return (q @ k.transpose(-2, -1) / math.sqrt(head_dim)).amax(dim=(-2, -1))


def test_qk_clip_mha_caps_exactly_the_offending_heads():
    torch.manual_seed(0)
    n_heads, head_dim, hidden = 4, 16, 64
    x = torch.randn(40, hidden, dtype=torch.float64)
    w_q, w_k = torch.randn(n_heads * head_dim, hidden, dtype=torch.float64), torch.randn(n_heads * head_dim, hidden,
                                                                                        dtype=torch.float64)
    w_q[:head_dim] *= 3  # head 0 runs hot
    before = max_logit_per_head(x, w_q, w_k, n_heads, head_dim)
    tau = float(before.sort().values[1])  # two heads above τ, two at or below
    gamma = pb.qk_clip_factors(before, tau)
    w_q_before, w_k_before = w_q.clone(), w_k.clone()
    pb.qk_clip_(w_q, w_k, gamma, head_dim=head_dim)
    after = max_logit_per_head(x, w_q, w_k, n_heads, head_dim)
    torch.testing.assert_close(after, torch.minimum(before, torch.tensor(tau, dtype=torch.float64)))
    hot = before > tau
    assert int(hot.sum()) == 2 and bool((gamma[~hot] == 1).all())
    for h in (~hot).nonzero().flatten().tolist():  # heads at or below τ keep their weights bit for bit
        rows = slice(h * head_dim, (h + 1) * head_dim)
        assert torch.equal(w_q[rows], w_q_before[rows]) and torch.equal(w_k[rows], w_k_before[rows])


def test_qk_clip_mla_scales_every_logit_by_gamma_and_leaves_the_shared_rope_key():
    torch.manual_seed(0)
    n_heads, nope, rope, q_in, rank, t = 3, 8, 4, 24, 12, 20
    x_q, latent = torch.randn(t, q_in, dtype=torch.float64), torch.randn(t, rank, dtype=torch.float64)
    k_rope = torch.randn(t, rope, dtype=torch.float64)  # shared by all heads
    w_qc, w_qr = torch.randn(n_heads * nope, q_in, dtype=torch.float64), torch.randn(n_heads * rope, q_in,
                                                                                     dtype=torch.float64)
    w_kc = torch.randn(n_heads * nope, rank, dtype=torch.float64)

    def logits():
        qc = (x_q @ w_qc.T).view(t, n_heads, nope).transpose(0, 1)
        qr = (x_q @ w_qr.T).view(t, n_heads, rope).transpose(0, 1)
        kc = (latent @ w_kc.T).view(t, n_heads, nope).transpose(0, 1)
        return qc @ kc.transpose(-2, -1) + qr @ k_rope.T

    before = logits()
    gamma = torch.tensor([1.0, 0.5, 0.1], dtype=torch.float64)
    k_rope_before = k_rope.clone()
    pb.qk_clip_mla_(w_qc, w_qr, w_kc, gamma, qk_nope_head_dim=nope, qk_rope_head_dim=rope)
    torch.testing.assert_close(logits(), before * gamma[:, None, None])
    assert torch.equal(k_rope, k_rope_before)


def test_lambda_init_schedule():
    assert pb.lambda_init(1) == pytest.approx(0.2)
    values = [pb.lambda_init(layer) for layer in range(1, 40)]
    assert all(a < b for a, b in zip(values, values[1:])) and values[-1] < 0.8
    assert pb.lambda_init(10) == pytest.approx(0.8 - 0.6 * math.exp(-2.7))


def test_diff_attention_maps_and_output():
    torch.manual_seed(0)
    layer = pb.DiffAttention(64, 4, layer=3).double()
    x = torch.randn(2, 10, 64, dtype=torch.float64)
    out, maps = layer(x, return_maps=True)
    torch.testing.assert_close(layer(x), out)
    assert maps.shape == (2, 4, 10, 10)
    lam = layer.lam()
    torch.testing.assert_close(maps.sum(-1), (1 - lam).expand(2, 4, 10))  # each map sums to 1, their difference to 1 − λ
    assert layer.lambda_init == pytest.approx(pb.lambda_init(3))


def test_diff_attention_kv_cache_equals_parameter_matched_mha():
    d_model = 256
    diff = pb.DiffAttention(d_model, 4, layer=1)                          # 4 heads, halves of 32, values of 64
    mha = torch.nn.MultiheadAttention(d_model, 8, bias=False)              # 8 heads of 32
    diff_params = sum(p.numel() for name, p in diff.named_parameters() if "proj" in name)
    assert diff_params == sum(p.numel() for p in mha.parameters())         # 4·d_model² both
    mha_kv = 2 * d_model                                                    # K and V, 8 heads × 32 each
    assert diff.kv_cache_values_per_token() == mha_kv == 2 * d_model
    config = dict(num_hidden_layers=1, num_attention_heads=8, hidden_size=d_model)
    assert pb.kv_values_per_layer(config) == diff.kv_cache_values_per_token()


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


def test_max_logits_per_head_matches_loop():
    q, k = torch.randn(3, 4, 5, 8), torch.randn(3, 4, 5, 8)
    got = max_logits_per_head(q, k)
    want = torch.stack([(q[:, h] @ k[:, h].transpose(-1, -2)).amax() / math.sqrt(8) for h in range(4)])
    torch.testing.assert_close(got, want)
    causal = max_logits_per_head(q, k, causal=True, scale=1.0)
    mask = torch.ones(5, 5, dtype=torch.bool).tril()
    want_c = torch.stack([(q[:, h] @ k[:, h].transpose(-1, -2))[:, mask].amax() for h in range(4)])
    torch.testing.assert_close(causal, want_c)


def test_max_logits_feed_qk_clip_to_tau():
    torch.manual_seed(0)
    heads, d, hidden = 3, 8, 12
    w_q = torch.randn(heads * d, hidden, dtype=torch.float64) * 3
    w_k = torch.randn(heads * d, hidden, dtype=torch.float64) * 3
    x = torch.randn(2, 6, hidden, dtype=torch.float64)

    def qk():
        return ((x @ w_q.T).view(2, 6, heads, d).transpose(1, 2), (x @ w_k.T).view(2, 6, heads, d).transpose(1, 2))

    before = max_logits_per_head(*qk())
    tau = float(before.min()) * 0.5
    pb.qk_clip_(w_q, w_k, pb.qk_clip_factors(before, tau), head_dim=d)
    torch.testing.assert_close(max_logits_per_head(*qk()), torch.full((heads,), tau, dtype=torch.float64))


def test_max_logits_rejects_bad_input():
    with pytest.raises(ValueError, match="q and k"):
        max_logits_per_head(torch.randn(1, 2, 3, 4), torch.randn(1, 3, 3, 4))
    with pytest.raises(ValueError, match="causal"):
        max_logits_per_head(torch.randn(1, 2, 3, 4), torch.randn(1, 2, 5, 4), causal=True)
    with pytest.raises(ValueError, match="q must have 4"):
        max_logits_per_head(torch.randn(2, 3, 4), torch.randn(2, 3, 4))


def test_entropy_lower_bound_takes_a_number_or_a_tensor_of_norms():
    norms = torch.tensor([0.0, 3.0], dtype=torch.float64)
    assert pb.entropy_lower_bound(norms, 16)[0].item() == pytest.approx(math.log(16))
    assert pb.entropy_lower_bound(3, 16).item() == pb.entropy_lower_bound(norms, 16)[1].item()
    for bad, exc in ((True, TypeError), ("3.0", TypeError), ([3.0], TypeError), (torch.tensor([3]), TypeError),
                     (math.nan, ValueError), (torch.tensor([-1.0]), ValueError)):
        with pytest.raises(exc, match="logit_norm"):
            pb.entropy_lower_bound(bad, 16)


def test_stability_bad_input_names_the_argument():
    with pytest.raises(ValueError, match="weights must be finite"):
        pb.attention_entropy(torch.tensor([0.5, math.nan]))
    with pytest.raises(ValueError, match="dim"):
        pb.attention_entropy(torch.ones(2, 3) / 3, dim=2)
    with pytest.raises(ValueError, match="n must be at most"):
        pb.extremal_logits(1.0, 2**40)
    with pytest.raises(TypeError, match=r"norms\[0\]"):
        pb.logit_rows_with_norm(4, [True, 1.0], 2)
    with pytest.raises(ValueError, match="w_q must be finite"):
        pb.qk_clip_(torch.full((4, 3), math.nan), torch.ones(4, 3), torch.ones(2), head_dim=2)
    with pytest.raises(TypeError, match="q and k must have one dtype"):
        max_logits_per_head(torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4, dtype=torch.float64))
    assert pb.logit_rows_with_norm(4, torch.tensor([0.0, 2.0]), 3).shape == (2, 3, 4)
