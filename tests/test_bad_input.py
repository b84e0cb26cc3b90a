"""Every public function of the foundation rejects bad input with an error naming the argument."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import posbook as pb

inv8 = pb.default_inv_freq(8)
cos8, sin8 = pb.rope_cos_sin(torch.arange(4), inv8)


@pytest.mark.parametrize("call, error, names", [
    (lambda: pb.default_inv_freq(7), ValueError, "rotary_dim"),
    (lambda: pb.default_inv_freq(0), ValueError, "rotary_dim"),
    (lambda: pb.default_inv_freq(8.0), TypeError, "rotary_dim"),
    (lambda: pb.default_inv_freq(8, -5.0), ValueError, "rope_theta"),
    (lambda: pb.default_inv_freq(8, 1.0), ValueError, "rope_theta"),
    (lambda: pb.default_inv_freq(8, float("nan")), ValueError, "rope_theta"),
    (lambda: pb.default_inv_freq(8, dtype=torch.int64), TypeError, "dtype"),
    (lambda: pb.rope_cos_sin([0, 1], inv8), TypeError, "positions"),
    (lambda: pb.rope_cos_sin(torch.zeros(2, 2), inv8), ValueError, "positions"),
    (lambda: pb.rope_cos_sin(torch.tensor([0.0, float("nan")]), inv8), ValueError, "positions"),
    (lambda: pb.rope_cos_sin(torch.tensor([True, False]), inv8), TypeError, "positions"),
    (lambda: pb.rope_cos_sin(torch.arange(3), torch.arange(4)), TypeError, "inv_freq"),
    (lambda: pb.rope_cos_sin(torch.arange(3), torch.empty(0)), ValueError, "inv_freq"),
    (lambda: pb.rope_cos_sin(torch.arange(3), inv8, layout="neox"), ValueError, "layout"),
    (lambda: pb.rope_cos_sin(torch.arange(3), inv8, attention_factor=0.0), ValueError, "attention_factor"),
    (lambda: pb.rope_cos_sin(torch.arange(3), inv8, dtype=torch.int32), TypeError, "dtype"),
    (lambda: pb.apply_rope(torch.randn(4, 6), cos8, sin8), ValueError, "head_dim"),
    (lambda: pb.apply_rope(torch.randn(5, 8), cos8, sin8), ValueError, "positions"),
    (lambda: pb.apply_rope(torch.randn(4, 8), cos8, sin8[:, :6]), ValueError, "cos and sin"),
    (lambda: pb.apply_rope(torch.randn(4, 8), cos8[:, :3], sin8[:, :3]), ValueError, "rotary_dim"),
    (lambda: pb.apply_rope(torch.arange(32).view(4, 8), cos8, sin8), TypeError, "x"),
    (lambda: pb.apply_rope(torch.randn(8), cos8, sin8), ValueError, "x"),
    (lambda: pb.apply_rope(torch.randn(4, 8), cos8, sin8, layout="gptj"), ValueError, "layout"),
    (lambda: pb.interleaved_to_half(torch.arange(6), head_dim=4), ValueError, "head_dim"),
    (lambda: pb.interleaved_to_half(torch.arange(8), rotary_dim=3), ValueError, "rotary_dim"),
    (lambda: pb.interleaved_to_half(torch.arange(8), dim=2), ValueError, "dim"),
    (lambda: pb.rope_decay_bound(torch.arange(3), torch.arange(3)), TypeError, "inv_freq"),
])
def test_rejected_with_named_argument(call, error, names):
    with pytest.raises(error, match=names):
        call()


@settings(max_examples=150, deadline=None)
@given(rotary_dim=st.one_of(st.integers(-10, 0), st.integers(1, 99).filter(lambda v: v % 2),
                            st.floats(allow_nan=True), st.text(max_size=3), st.none()),
       theta=st.one_of(st.floats(max_value=1.0), st.just(float("inf")), st.just(float("nan")), st.booleans()))
def test_generated_bad_frequency_arguments(rotary_dim, theta):
    with pytest.raises((ValueError, TypeError)) as info:
        pb.default_inv_freq(rotary_dim, theta)
    assert "rotary_dim" in str(info.value) or "rope_theta" in str(info.value)


@settings(max_examples=120, deadline=None)
@given(head_dim=st.integers(1, 20), rotary_dim=st.integers(1, 24), t_x=st.integers(1, 5), t_c=st.integers(1, 5))
def test_generated_shape_mismatches(head_dim, rotary_dim, t_x, t_c):
    valid = rotary_dim % 2 == 0 and rotary_dim <= head_dim and t_x == t_c
    x = torch.randn(t_x, head_dim)
    cos = torch.ones(t_c, rotary_dim)
    if valid:
        assert pb.apply_rope(x, cos, cos).shape == x.shape
    else:
        with pytest.raises(ValueError, match="rotary_dim|positions|head_dim"):
            pb.apply_rope(x, cos, cos)
