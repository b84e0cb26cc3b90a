import math

import pytest
import torch

import posbook as pb
from posbook.norms import qk_norm_logit_bound
from posbook.stability import max_logits_per_head


def test_bound_unit_gains_is_sqrt_head_dim_and_attained():
    d = 64
    assert qk_norm_logit_bound(d) == pytest.approx(math.sqrt(d))
    assert qk_norm_logit_bound(d, scale=1.0) == pytest.approx(d)
    x = torch.randn(d, dtype=torch.float64)
    q = pb.rms_norm(x, eps=1e-12)
    assert float(q @ q) / math.sqrt(d) == pytest.approx(math.sqrt(d), rel=1e-9)


def test_bound_with_gains_is_attained_on_one_coordinate():
    d = 16
    gq = torch.ones(d, dtype=torch.float64); gq[3] = 2.5
    gk = torch.ones(d, dtype=torch.float64); gk[3] = -1.5
    bound = qk_norm_logit_bound(d, q_gain=gq, k_gain=gk)
    one_hot = torch.zeros(d, dtype=torch.float64); one_hot[3] = 1.0
    q = pb.rms_norm(one_hot, gq, eps=1e-30)
    k = pb.rms_norm(-one_hot, gk, eps=1e-30)
    assert float(q @ k) / math.sqrt(d) == pytest.approx(bound, rel=1e-12)
    for _ in range(20):
        q = pb.rms_norm(torch.randn(d, dtype=torch.float64), gq)
        k = pb.rms_norm(torch.randn(d, dtype=torch.float64), gk)
        assert abs(float(q @ k)) / math.sqrt(d) <= bound


def test_bound_rejects_bad_input():
    with pytest.raises(ValueError, match="q_gain"):
        qk_norm_logit_bound(8, q_gain=torch.ones(7))
    with pytest.raises(TypeError, match="head_dim"):
        qk_norm_logit_bound(8.0)
    with pytest.raises(ValueError, match="scale"):
        qk_norm_logit_bound(8, scale=-1.0)


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
