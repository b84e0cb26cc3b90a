"""posbook.norms: the QK-Norm logit bound."""

import math

import pytest
import torch

import posbook as pb
from posbook.norms import qk_norm_logit_bound


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


def test_norm_modules_check_their_arguments_by_name():
    for make, error, match in [
        (lambda: pb.RMSNorm(2**40), ValueError, "^dim must be at most"),
        (lambda: pb.RMSNorm(8, eps=0.0), ValueError, "^eps"),
        (lambda: pb.RMSNorm(8, zero_centred=1), TypeError, "^zero_centred"),
        (lambda: pb.QKNorm(True), TypeError, "^head_dim"),
        (lambda: pb.QKNorm(8, eps="1e-6"), TypeError, "^eps"),
        (lambda: pb.QKNorm(8)(torch.randn(2, 3, 8), torch.randn(2, 3, 7)), ValueError, r"^k.shape\[-1\] must be"),
        (lambda: pb.QKNorm(8)([1.0], torch.randn(2, 3, 8)), TypeError, "^q must be"),
        (lambda: pb.rms_norm(torch.randn(2, 4), zero_centred="yes"), TypeError, "^zero_centred"),
    ]:
        with pytest.raises(error, match=match):
            make()


def test_rms_norm_passes_non_finite_entries_through():
    x = torch.tensor([[1.0, float("nan")], [1.0, 2.0]])
    y = pb.rms_norm(x)
    assert torch.isnan(y[0]).all() and torch.isfinite(y[1]).all()
