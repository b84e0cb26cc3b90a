"""posbook.core: the reference attention against first principles and Hugging Face, and the fast paths against it."""

from __future__ import annotations

import math
import types

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers.models.gpt_oss.modeling_gpt_oss import (
    eager_attention_forward as gpt_oss_eager,
)

import posbook as pb
from posbook.local import local_attend


def qkv(batch=2, hq=4, hkv=2, tq=12, tk=12, d=16, dv=16, dtype=torch.float64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, hq, tq, d, generator=gen, dtype=dtype)
    k = torch.randn(batch, hkv, tk, d, generator=gen, dtype=dtype)
    v = torch.randn(batch, hkv, tk, dv, generator=gen, dtype=dtype)
    return q, k, v


def test_reference_is_the_textbook_formula():
    q, k, v = qkv(hkv=4)
    out, w = pb.attention(q, k, v, causal=True, return_weights=True)
    logits = q @ k.transpose(-2, -1) / math.sqrt(16)
    logits = logits.masked_fill(~torch.ones(12, 12, dtype=torch.bool).tril(), float("-inf"))
    torch.testing.assert_close(w, logits.softmax(-1))
    torch.testing.assert_close(out, logits.softmax(-1) @ v)


def test_grouped_query_heads_read_their_group():
    q, k, v = qkv(hq=6, hkv=2)
    out = pb.attention(q, k, v, impl="reference")
    expanded = pb.attention(q, k.repeat_interleave(3, 1), v.repeat_interleave(3, 1), impl="reference")
    torch.testing.assert_close(out, expanded, rtol=0, atol=0)
    # Query head 4 belongs to key head 1 (heads 3, 4, 5 share it).
    alone = pb.attention(q[:, 4:5], k[:, 1:2], v[:, 1:2], impl="reference")
    torch.testing.assert_close(out[:, 4:5], alone, rtol=0, atol=0)


OPTION_SETS = {
    "plain": {},
    "causal": {"causal": True},
    "gqa-causal-decode": {"causal": True, "_tq": 3},
    "temperature": {"temperature": 0.5, "causal": True},
    "scale": {"scale": 0.3},
    "query-scale": {"query_scale": pb.swan_log_scale(torch.arange(12)), "causal": True},
    "alibi": {"bias": pb.alibi_bias(pb.alibi_slopes(4, dtype=torch.float64), 12), "causal": True},
    "bias-and-mask": {"bias": pb.alibi_bias(pb.alibi_slopes(4, dtype=torch.float64), 12),
                      "mask": pb.attention_mask("sliding", 12, window=4)},
    "sliding": {"mask": pb.attention_mask("sliding", 12, window=5)},
    "chunked": {"mask": pb.attention_mask("chunked", 12, chunk_size=4)},
}


@pytest.mark.parametrize("name", sorted(OPTION_SETS))
def test_sdpa_and_flex_equal_the_reference(name):
    options = dict(OPTION_SETS[name])
    tq = options.pop("_tq", 12)
    q, k, v = qkv(tq=tq)
    reference = pb.attention(q, k, v, impl="reference", **options)
    torch.testing.assert_close(pb.attention(q, k, v, impl="sdpa", **options), reference, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(pb.attention(q, k, v, impl="flex", **options), reference, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("normaliser, extra", [("softmax1", {}), ("sink", {"sink": torch.tensor([-1.0, 0.0, 2.0, 5.0],
                                                                                                 dtype=torch.float64)})])
@pytest.mark.parametrize("softcap", [None, 2.0])
def test_flex_runs_sinks_and_softcap_like_the_reference(normaliser, extra, softcap):
    q, k, v = qkv()
    options = dict(normaliser=normaliser, softcap=softcap, causal=True, **extra)
    torch.testing.assert_close(pb.attention(q, k, v, impl="flex", **options),
                               pb.attention(q, k, v, impl="reference", **options), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("normaliser", pb.NORMALISERS)
def test_each_normaliser_runs_on_the_paths_its_entry_lists_and_is_refused_by_the_others(normaliser):
    """The registry decides: a path its NORMALISERS entry lists gives the reference's answer, any other refuses
    the normaliser by name (and the path's)."""
    q, k, v = qkv()
    options = dict(normaliser=normaliser, causal=True)
    if pb.NORMALISERS[normaliser].option_required:
        options[pb.NORMALISERS[normaliser].option] = torch.tensor([-1.0, 0.0, 2.0, 5.0], dtype=torch.float64)
    reference = pb.attention(q, k, v, impl="reference", **options)
    for impl in ("sdpa", "flex"):
        if impl in pb.NORMALISERS[normaliser].paths:
            torch.testing.assert_close(pb.attention(q, k, v, impl=impl, **options), reference, rtol=1e-10, atol=1e-12)
        else:
            with pytest.raises(ValueError, match=f"^impl='{impl}' cannot run normaliser='{normaliser}'"):
                pb.attention(q, k, v, impl=impl, **options)


def test_block_mask_path_equals_dense_mask():
    q, k, v = qkv(tq=256, tk=256, hkv=4, dtype=torch.float32)
    bm = pb.block_mask("sliding", 256, window=48, block_size=64)
    dense = pb.attention_mask("sliding", 256, window=48)
    torch.testing.assert_close(pb.attention(q, k, v, mask=bm), pb.attention(q, k, v, mask=dense, impl="reference"),
                               rtol=1e-5, atol=1e-6)


def test_sink_matches_gpt_oss_eager_attention():
    q, k, v = qkv(hq=4, hkv=2)
    sinks = torch.tensor([0.5, -2.0, 3.0, 0.0], dtype=torch.float64)
    module = types.SimpleNamespace(num_key_value_groups=2, sinks=sinks, training=False)
    causal = torch.zeros(12, 12, dtype=torch.float64).masked_fill(~pb.attention_mask("causal", 12), float("-inf"))
    hf_out, hf_w = gpt_oss_eager(module, q, k, v, causal, scaling=0.25)
    out, w = pb.attention(q, k, v, scale=0.25, causal=True, normaliser="sink", sink=sinks, return_weights=True)
    torch.testing.assert_close(w, hf_w)
    torch.testing.assert_close(out, hf_out.transpose(1, 2))


def test_softmax1_is_a_zero_logit_sink_and_a_zero_key():
    q, k, v = qkv(hkv=4)
    one = pb.attention(q, k, v, normaliser="softmax1", causal=True)
    sink = pb.attention(q, k, v, normaliser="sink", sink=torch.zeros(4, dtype=torch.float64), causal=True)
    torch.testing.assert_close(one, sink, rtol=0, atol=0)
    # Miller's construction: prepend a key whose logit is 0 and whose value is 0; plain softmax then gives softmax1.
    k0 = torch.cat([torch.zeros_like(k[:, :, :1]), k], dim=2)
    v0 = torch.cat([torch.zeros_like(v[:, :, :1]), v], dim=2)
    mask = torch.cat([torch.ones(12, 1, dtype=torch.bool), pb.attention_mask("causal", 12)], dim=1)
    torch.testing.assert_close(pb.attention(q, k0, v0, mask=mask), one)


@settings(max_examples=60, deadline=None)
@given(sink=st.floats(-20, 20), shift=st.floats(-30, 30), seed=st.integers(0, 2**16))
def test_sink_rows_sum_below_one(sink, shift, seed):
    q, k, v = qkv(batch=1, hq=2, hkv=2, tq=5, tk=5, seed=seed)
    _, w = pb.attention(q, k, v, bias=torch.full((5, 5), shift, dtype=torch.float64), normaliser="sink",
                        sink=torch.full((2,), sink, dtype=torch.float64), causal=True, return_weights=True)
    rows = w.sum(-1)
    # What is missing from each row is exactly the sink's share: e^s / (e^s + Σ e^l).
    logits = q @ k.transpose(-2, -1) / 4 + shift
    logits = logits.masked_fill(~pb.attention_mask("causal", 5), float("-inf"))
    share = torch.sigmoid(sink - torch.logsumexp(logits, -1))
    torch.testing.assert_close(1 - rows, share, rtol=1e-9, atol=1e-12)
    # Below 1 in exact arithmetic; in float64 whenever the sink's share is above rounding (~1e-16). Where the
    # share is smaller than that, summing five rounded weights may land an ulp or two above 1.
    assert bool((rows <= 1 + 4e-16).all()) and bool((rows[share > 1e-12] < 1).all()) and bool((rows > 0).all())


@pytest.mark.parametrize("shift", [-10.0, -50.0, -200.0, -1000.0])
def test_softmax1_fades_to_zero_as_logits_fall(shift):
    q, k, v = qkv()
    _, w = pb.attention(q, k, v, bias=torch.full((12, 12), shift, dtype=torch.float64), normaliser="softmax1",
                        return_weights=True)
    _, w_plain = pb.attention(q, k, v, bias=torch.full((12, 12), shift, dtype=torch.float64), return_weights=True)
    assert bool(torch.isfinite(w).all())
    assert w.sum(-1).max() <= 12 * math.exp(shift + 6)  # total weight falls like e^shift (0 once it underflows)
    torch.testing.assert_close(w_plain.sum(-1), torch.ones(2, 4, 12, dtype=torch.float64))  # softmax cannot


def test_sigmoid_attention_weights_are_independent():
    q, k, v = qkv()
    _, w = pb.attention(q, k, v, normaliser="sigmoid", causal=True, return_weights=True)
    logits = q @ k.transpose(-2, -1).repeat_interleave(2, 1) / 4
    expected = torch.sigmoid(logits - math.log(12)).masked_fill(~pb.attention_mask("causal", 12), 0)
    torch.testing.assert_close(w, expected)
    _, w_b = pb.attention(q, k, v, normaliser="sigmoid", sigmoid_bias=0.0, return_weights=True)
    torch.testing.assert_close(w_b, torch.sigmoid(logits))


def test_softcap_bounds_the_logits():
    q, k, v = qkv()
    q = q * 100
    _, w = pb.attention(q, k, v, softcap=5.0, return_weights=True, scale=1.0)
    # With every logit in (−5, 5), no weight can exceed e^5 / (e^5 + 11·e^−5).
    assert w.max() < math.exp(5) / (math.exp(5) + 11 * math.exp(-5))


def test_output_gate_multiplies_by_sigmoid():
    q, k, v = qkv()
    gate = torch.randn(2, 4, 12, 16, dtype=torch.float64)
    plain = pb.attention(q, k, v)
    torch.testing.assert_close(pb.attention(q, k, v, gate=gate), plain * torch.sigmoid(gate))
    assert pb.attention(q, k, v, gate=torch.full((1,), -100.0, dtype=torch.float64)).abs().max() < 1e-40


def test_output_derotation_makes_rotated_values_relative():
    """DeepSeek-V4: V carries rotated keys; turning the output back by the query's angle leaves only distances."""
    torch.manual_seed(0)
    t, d = 10, 16
    x_q, x_k = torch.randn(1, 1, t, d, dtype=torch.float64), torch.randn(1, 1, t, d, dtype=torch.float64)
    inv_freq = pb.default_inv_freq(d, dtype=torch.float64)

    def run(offset, derotate):
        cos, sin = pb.rope_cos_sin(torch.arange(t) + offset, inv_freq, dtype=torch.float64)
        q, kv = pb.apply_rope(x_q, cos, sin), pb.apply_rope(x_k, cos, sin)  # one vector as key and value
        return pb.attention(q, kv, kv, causal=True, output_rope=(cos, sin) if derotate else None)

    torch.testing.assert_close(run(0, True), run(1000, True))       # invariant to a shift of the whole sequence
    assert (run(0, False) - run(1000, False)).abs().max() > 0.1      # without de-rotation, absolute position leaks


def test_length_scales():
    positions = torch.tensor([0, 1, 8190, 8191, 16383, 100_000])
    llama4 = pb.llama4_attention_scale(positions)
    expected = [1 + 0.1 * math.log1p(math.floor((p + 1) / 8192)) for p in positions.tolist()]
    torch.testing.assert_close(llama4, torch.tensor(expected, dtype=torch.float64))
    assert llama4[2] == 1.0 and llama4[3] > 1.0  # the first step is at position floor_scale − 1
    swan = pb.swan_log_scale(torch.tensor([0, 362, 10_000]))
    assert swan[0] == 1.0
    torch.testing.assert_close(swan[1:], torch.tensor([math.log(724) / math.log(362), math.log(10_362) / math.log(362)],
                                                      dtype=torch.float64))


def test_low_precision_inputs_use_float32_internally():
    q, k, v = qkv(dtype=torch.float32)
    out16 = pb.attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), causal=True, impl="reference")
    out32 = pb.attention(q.bfloat16().float(), k.bfloat16().float(), v.bfloat16().float(), causal=True,
                         impl="reference")
    assert out16.dtype == torch.bfloat16
    torch.testing.assert_close(out16, out32.bfloat16(), rtol=0, atol=0)


def test_auto_picks_a_path_that_can_run_the_options():
    q, k, v = qkv()
    for options in ({"normaliser": "sigmoid"}, {"softcap": 3.0}, {"normaliser": "sink", "sink": torch.zeros(4,
                                                                                       dtype=torch.float64)}):
        torch.testing.assert_close(pb.attention(q, k, v, **options), pb.attention(q, k, v, impl="reference", **options))
    with pytest.raises(ValueError, match="impl='sdpa' cannot run normaliser='sigmoid'"):
        pb.attention(q, k, v, normaliser="sigmoid", impl="sdpa")
    with pytest.raises(ValueError, match="impl='flex' cannot run"):
        pb.attention(q, k, v, return_weights=True, impl="flex")


def test_gradients_flow_through_every_normaliser():
    q, k, v = (t.requires_grad_() for t in qkv(batch=1, hq=2, hkv=1, tq=4, tk=4, d=4, dv=4))
    sink = torch.zeros(2, dtype=torch.float64, requires_grad=True)
    for options in ({}, {"normaliser": "softmax1"}, {"normaliser": "sink", "sink": sink}, {"normaliser": "sigmoid"}):
        assert torch.autograd.gradcheck(lambda a, b, c: pb.attention(a, b, c, causal=True, impl="reference", **options),
                                        (q, k, v))
    assert torch.autograd.gradcheck(lambda s: pb.attention(q, k, v, normaliser="sink", sink=s, impl="reference"), (sink,))


def _overflowing(case):
    """Finite float32 q, k, v whose logits overflow: every logit +inf, one +inf logit per row of query 1, or every
    logit −inf."""
    q, k, v = qkv(tq=6, tk=6, d=8, dtype=torch.float32)
    if case == "all +inf":
        q, k = torch.full_like(q, 1e20), torch.full_like(k, 1e20)
    elif case == "one +inf logit":
        q[:, :, 1], k[:, :, 0] = 1e20, 1e20
    else:
        q, k = torch.full_like(q, 1e20), torch.full_like(k, -1e20)
    return q, k, v


@pytest.mark.parametrize("case", ["all +inf", "one +inf logit", "all -inf"])
@pytest.mark.parametrize("options", [{}, {"causal": True}, {"normaliser": "softmax1", "causal": True},
                                     {"normaliser": "sink", "sink": torch.tensor([0.0, 1.0, -1.0, 2.0])}],
                         ids=["plain", "causal", "softmax1", "sink"])
def test_overflowing_logits_give_the_same_rows_on_every_path(case, options):
    q, k, v = _overflowing(case)
    reference = pb.attention(q, k, v, impl="reference", **options)
    impls = ("sdpa", "flex") if options.get("normaliser", "softmax") == "softmax" else ("flex",)
    for impl in impls:
        out = pb.attention(q, k, v, impl=impl, **options)
        assert torch.equal(torch.isnan(out), torch.isnan(reference)), impl
        torch.testing.assert_close(out, reference, equal_nan=True)
    nan_rows = torch.isnan(reference).all(-1)
    if case == "all +inf":
        assert nan_rows.all()
    elif case == "one +inf logit":  # only query 1 meets its +inf logit (key 0 is visible to every query)
        assert nan_rows[:, :, 1].all() and not torch.isnan(reference[:, :, [0, 2, 3, 4, 5]]).any()
    else:
        assert torch.equal(reference, torch.zeros_like(reference))  # every key hidden by −inf: a zero row


@pytest.mark.parametrize("name", ["q", "k", "v"])
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_non_finite_q_k_v_are_refused(name, value):
    tensors = dict(zip("qkv", qkv(dtype=torch.float32)))
    tensors[name][0, 1, 2, 3] = value
    with pytest.raises(ValueError, match=f"^{name} must be finite"):
        pb.attention(**tensors)
    with pytest.raises(ValueError, match=f"^{name} must be finite"):
        pb.local_attention(**tensors, kind="sliding", window=4)


def test_local_attention_checks_its_inputs_as_attention_does():
    q, k, v = qkv(dtype=torch.float32)
    cases = [
        (dict(q=q.half()), TypeError, "one dtype"),
        (dict(k=k.bfloat16()), TypeError, "one dtype"),
        (dict(v=v.double()), TypeError, "one dtype"),
        (dict(k=k[:1], v=v[:1]), ValueError, "batch size"),
        (dict(k=torch.randn(2, 3, 12, 16), v=torch.randn(2, 3, 12, 16)), ValueError, "heads"),
        (dict(k=k[..., :8]), ValueError, r"k.shape\[-1\]"),
        (dict(v=v[:, :, :6]), ValueError, "^v must be"),
        (dict(k=k[:, :, :6], v=v[:, :, :6], q=q[:, :, :3]), ValueError, "one length"),
        (dict(query_scale=torch.ones(5)), ValueError, "^query_scale"),
        (dict(query_scale=torch.full((12,), math.nan)), ValueError, "^query_scale must be finite"),
        (dict(kind="chunked"), ValueError, "window only applies"),
        (dict(window=2**40), ValueError, "^window must be at most"),
        (dict(block_size=2**40), ValueError, "^block_size must be at most"),
        (dict(block_size=True), TypeError, "^block_size"),
        (dict(kind="global"), ValueError, "^kind"),
    ]
    for change, error, message in cases:
        arguments = dict(q=q, k=k, v=v, kind="sliding", window=4) | change
        with pytest.raises(error, match=message):
            pb.local_attention(**arguments)


@pytest.mark.parametrize("kind, size", [("sliding", "window"), ("chunked", "chunk_size")])
def test_local_attention_with_sizes_beyond_the_sequence_is_causal_attention(kind, size):
    q, k, v = qkv()
    out = pb.local_attention(q, k, v, kind=kind, block_size=10**9, **{size: 10**9})
    torch.testing.assert_close(out, pb.attention(q, k, v, causal=True, impl="reference"))
    query_scale = pb.swan_log_scale(torch.arange(12))
    torch.testing.assert_close(pb.local_attention(q, k, v, kind=kind, query_scale=query_scale, **{size: 5}),
                               pb.attention(q, k, v, query_scale=query_scale, impl="reference",
                                            mask=pb.attention_mask(kind, 12, **{size: 5})))


def test_empty_sizes_are_refused_by_name():
    q, k, v = qkv()
    with pytest.raises(ValueError, match="head_dim > 0"):
        pb.attention(q[..., :0], k[..., :0], v)
    with pytest.raises(ValueError, match="^k must hold at least one key"):
        pb.attention(q[:, :, :0], k[:, :, :0], v[:, :, :0])
    with pytest.raises(ValueError, match="heads"):
        pb.attention(q, k[:, :0], v[:, :0])
    assert pb.attention(q[:0], k[:0], v[:0]).shape == (0, 4, 12, 16)


def test_flex_is_refused_by_name_where_it_would_need_a_backward_on_the_cpu():
    q, k, v = (x.float().requires_grad_() for x in qkv())
    with pytest.raises(ValueError, match="^impl='flex' has no backward on the CPU.*use impl='blocked'"):
        pb.local_attention(q, k, v, kind="sliding", window=4, impl="flex")
    with pytest.raises(ValueError, match="^impl='flex' has no backward on the CPU.*use impl='reference'"):
        pb.attention(q, k, v, causal=True, impl="flex")
    q, k, v = (x.detach() for x in (q, k, v))      # forward only: flex runs (eagerly) on the CPU
    torch.testing.assert_close(pb.local_attention(q, k, v, kind="sliding", window=4, impl="flex"),
                               pb.local_attention(q, k, v, kind="sliding", window=4, impl="blocked"))


@pytest.mark.parametrize("t, window, block_size, kv_heads", [(64, 16, None, 4), (77, 10, None, 2), (50, 7, 3, 4),
                                                             (9, 9, None, 4), (33, 1, None, 4), (40, 8, 5, 4)])
def test_the_sliding_kernel_gives_the_bits_of_unfolded_windows(t, window, block_size, kv_heads):
    """The blocked sliding kernel builds each query block's keys by concatenating whole blocks; the recorded runs
    trained with windows cut by ``unfold``. Same SDPA inputs, same bits: output and gradients are equal exactly."""
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(t)
    q = torch.randn(2, 4, t, 16, generator=g, requires_grad=True)
    k, v = (torch.randn(2, kv_heads, t, 16, generator=g, requires_grad=True) for _ in range(2))
    block = block_size or max(1, window // 2)
    n, span = -(-t // block), window - 1 + block
    pad = n * block - t

    def unfolded(x):    # [batch·n, H, span, d]: keys window − 1 before each block, through the block's end
        return F.pad(x, (0, 0, window - 1, pad)).unfold(2, span, block).permute(0, 2, 1, 4, 3).flatten(0, 1)

    r, c, j = torch.arange(block)[:, None], torch.arange(span)[None, :], torch.arange(n)[:, None, None]
    allowed = (c >= r) & (c <= window - 1 + r) & (j * block + c >= window - 1)
    q_blocks = F.pad(q, (0, 0, 0, pad)).view(2, 4, n, block, 16).transpose(1, 2).flatten(0, 1)
    expected = F.scaled_dot_product_attention(q_blocks, unfolded(k), unfolded(v), scale=0.3, enable_gqa=kv_heads != 4,
                                              attn_mask=allowed.expand(2, n, block, span).flatten(0, 1)[:, None])
    expected = expected.view(2, n, 4, block, 16).transpose(1, 2).flatten(2, 3)[:, :, :t]
    got = local_attend(q, k, v, kind="sliding", window=window, scale=0.3, block_size=block_size, impl="blocked")
    assert torch.equal(got, expected)
    weights = torch.randn(got.shape, generator=g)
    for a, b in zip(torch.autograd.grad((got * weights).sum(), (q, k, v)),
                    torch.autograd.grad((expected * weights).sum(), (q, k, v))):
        assert torch.equal(a, b)
