"""Position computed from content: FoX's forget gates and CoPE's contextual positions (posbook.bias) and
stick-breaking attention (posbook.normalisers), each against a float64 transcription of its paper's formula, the
identities that tie it to the schemes before it, and gradcheck."""

from __future__ import annotations

import math

import pytest
import torch

import posbook as pb
from posbook.bias import (ContextualPositionBias, ForgetGateBias, contextual_positions, cope_bias,
                          forget_gate_bias)
from posbook.experiments import GPT, GPTConfig

F64 = torch.float64


def _generator(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# --- FoX (Lin et al. 2025): D_ij = sum_{l=j+1}^{i} log f_l --------------------------------------------------------

def _fox_by_the_formula(log_f: torch.Tensor, q_len: int) -> torch.Tensor:
    """One sum per (i, j), term by term, for j ≤ i (the entries a causal mask keeps)."""
    k_len = log_f.shape[-1]
    out = torch.zeros(*log_f.shape[:-1], q_len, k_len, dtype=F64)
    for row, i in enumerate(range(k_len - q_len, k_len)):
        for j in range(i + 1):
            out[..., row, j] = sum((log_f[..., l] for l in range(j + 1, i + 1)), torch.zeros(log_f.shape[:-1], dtype=F64))
    return out


@pytest.mark.parametrize("q_len", [7, 3, 1])
def test_fox_bias_is_the_sum_of_log_gates_between_key_and_query(q_len):
    log_f = torch.nn.functional.logsigmoid(torch.randn(2, 3, 7, generator=_generator(), dtype=F64))
    bias = forget_gate_bias(log_f, q_len)
    expected = _fox_by_the_formula(log_f, q_len)
    kept = pb.attention_mask("causal", q_len, 7)
    assert bias.shape == (2, 3, q_len, 7) and bias.dtype == F64
    torch.testing.assert_close(bias[..., kept], expected[..., kept], rtol=0, atol=1e-14)
    assert bool((bias[..., kept] <= 0).all())           # a key further back never gains from the gates


def test_fox_with_every_gate_one_is_nope_and_with_a_constant_gate_is_alibi():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 9, 8, dtype=F64) for _ in range(3))
    zero = forget_gate_bias(torch.zeros(2, 4, 9, dtype=F64))
    assert not zero.any()
    torch.testing.assert_close(pb.attention(q, k, v, bias=zero, causal=True), pb.attention(q, k, v, causal=True),
                               rtol=0, atol=0)
    # A constant gate f per head: i − j equal terms, so the bias is ALiBi's −m|i − j| with slope m = −log f.
    gates = torch.tensor([0.5, 0.9, 0.99, 0.999], dtype=F64)
    log_f = gates.log()[None, :, None].expand(2, 4, 9)
    fox = forget_gate_bias(log_f)
    alibi = pb.alibi_bias(-gates.log(), 9)
    kept = pb.attention_mask("causal", 9)
    torch.testing.assert_close(fox[..., kept], alibi.expand(2, 4, 9, 9)[..., kept], rtol=0, atol=1e-13)
    torch.testing.assert_close(pb.attention(q, k, v, bias=fox, causal=True),
                               pb.attention(q, k, v, bias=alibi, causal=True), rtol=0, atol=1e-13)


def test_fox_bias_gradients_and_bad_input():
    log_f = torch.nn.functional.logsigmoid(torch.randn(1, 2, 6, generator=_generator(1), dtype=F64)).requires_grad_()
    assert torch.autograd.gradcheck(lambda x: forget_gate_bias(x).tril(), (log_f,))
    with pytest.raises(ValueError, match="log_forget must be at most 0"):
        forget_gate_bias(torch.tensor([0.0, 0.1]))
    with pytest.raises(ValueError, match="k_len must be >= q_len"):
        forget_gate_bias(torch.zeros(4), q_len=5)
    with pytest.raises(TypeError, match="log_forget must be a floating-point tensor"):
        forget_gate_bias(torch.zeros(4, dtype=torch.long))


def test_forget_gate_module_reads_each_tokens_hidden_state():
    torch.manual_seed(0)
    module = ForgetGateBias(3, n_embd=8).double()
    assert module.reads == "hidden" and not module.gate.bias.any()       # f = σ(w·x) starts near 1/2
    x = torch.randn(2, 5, 8, dtype=F64)
    log_f = module.log_forget(x)
    torch.testing.assert_close(log_f, torch.log(torch.sigmoid(x @ module.gate.weight.T)).transpose(1, 2))
    torch.testing.assert_close(module(x), forget_gate_bias(log_f))
    # The gate is the token's own: changing one token changes the bias only where the sum runs over it.
    changed = x.clone()
    changed[:, 2] += 1.0
    differs = (module(changed) - module(x)).abs() > 1e-12
    kept = pb.attention_mask("causal", 5)
    expected = kept & (torch.arange(5)[:, None] >= 2) & (torch.arange(5)[None, :] < 2)
    assert torch.equal(differs.any(0).any(0) & kept, expected)


# --- stick-breaking (Tan et al. 2024): A_ij = σ(z_ij) Π_{j<l≤i} (1 − σ(z_il)) ------------------------------------

def _stick_breaking_by_the_formula(z: torch.Tensor) -> torch.Tensor:
    beta = torch.sigmoid(z)
    out = torch.zeros_like(z)
    n = z.shape[-1]
    for j in range(n):
        out[..., j] = beta[..., j] * math.prod((1 - beta[..., l] for l in range(j + 1, n)), start=torch.ones(()))
    return out


def test_stick_breaking_is_the_papers_product_and_keeps_at_most_the_whole_stick():
    z = torch.randn(3, 4, 11, generator=_generator(2), dtype=F64) * 3
    weights = pb.normalise(z, "stick_breaking")
    torch.testing.assert_close(weights, _stick_breaking_by_the_formula(z), rtol=1e-12, atol=1e-15)
    kept = weights.sum(-1)
    torch.testing.assert_close(kept, 1 - torch.prod(1 - torch.sigmoid(z), dim=-1), rtol=1e-12, atol=1e-15)
    assert bool((kept <= 1).all())


def test_stick_breaking_hides_keys_and_leaves_an_empty_row_empty():
    z = torch.randn(2, 6, generator=_generator(3), dtype=F64)
    hidden = z.clone()
    hidden[:, [1, 4]] = -math.inf
    weights = pb.normalise(hidden, "stick_breaking")
    assert not weights[:, [1, 4]].any()
    # A hidden key neither takes nor passes anything: the row is the rule on the visible keys alone.
    visible = pb.normalise(z[:, [0, 2, 3, 5]], "stick_breaking")
    torch.testing.assert_close(weights[:, [0, 2, 3, 5]], visible, rtol=0, atol=0)
    assert not pb.normalise(torch.full((1, 4), -math.inf), "stick_breaking").any()


def test_stick_breaking_in_log_space_is_stable_at_long_rows():
    # 16,384 keys whose shares each leave 0.9 of the stick: the product of the factors past the first few thousand
    # keys underflows float32, a log-space sum does not, and float32 then agrees with float64.
    z = torch.full((1, 16_384), math.log(0.1 / 0.9), dtype=F64)       # σ(z) = 0.1
    z[0, 100] = 5.0
    exact = pb.normalise(z, "stick_breaking")
    fast = pb.normalise(z.float(), "stick_breaking")
    assert bool(torch.isfinite(fast).all())
    torch.testing.assert_close(fast.double(), exact, rtol=1e-3, atol=1e-30)
    assert exact[0, -1] == pytest.approx(0.1) and exact[0, -2] == pytest.approx(0.09)


def test_stick_breaking_in_attention_runs_on_the_reference_only():
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 7, 8, dtype=F64) for _ in range(3))
    out, weights = pb.attention(q, k, v, causal=True, normaliser="stick_breaking", return_weights=True)
    logits = (q @ k.transpose(-2, -1)) / math.sqrt(8)
    expected = torch.stack([torch.stack([torch.cat([_stick_breaking_by_the_formula(logits[0, h, i, : i + 1]),
                                                    torch.zeros(6 - i, dtype=F64)]) for i in range(7)])
                            for h in range(2)])[None]
    torch.testing.assert_close(weights, expected, rtol=1e-12, atol=1e-15)
    torch.testing.assert_close(out, weights @ v)
    for impl in ("sdpa", "flex"):
        with pytest.raises(ValueError, match="normaliser='stick_breaking' .*reference path only"):
            pb.attention(q, k, v, causal=True, normaliser="stick_breaking", impl=impl)
    # Its keys are read in order, so a key after the query has no place in a row: refused unless hidden.
    with pytest.raises(ValueError, match="reads each row's keys in order"):
        pb.attention(q, k, v, normaliser="stick_breaking")
    window = pb.attention_mask("sliding", 7, window=3)
    torch.testing.assert_close(pb.attention(q, k, v, mask=window, normaliser="stick_breaking"),
                               pb.attention(q, k, v, mask=window, causal=True, normaliser="stick_breaking"))


def test_stick_breaking_gradients():
    z = torch.randn(2, 5, generator=_generator(4), dtype=F64).requires_grad_()
    assert torch.autograd.gradcheck(lambda x: pb.normalise(x, "stick_breaking"), (z,))


# --- CoPE (Golovneva et al. 2024): p_ij = Σ_{l=j}^{i} σ(z_il); bias q_i·e[p_ij] interpolated -------------------------

def _cope_by_the_formula(q: torch.Tensor, z: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
    """One (query, key) pair at a time: the count, clamped to the table, and the interpolation of q·e between the
    two integers around it."""
    rows, cols = z.shape[-2:]
    out = torch.zeros_like(z)
    for i in range(rows):
        for j in range(cols):
            p = min(sum(torch.sigmoid(z[..., i, l]).item() for l in range(j, cols)), e.shape[1] - 1)
            low, frac = math.floor(p), p - math.floor(p)
            high = math.ceil(p)
            out[..., i, j] = (1 - frac) * (q[..., i, :] @ e[:, low]) + frac * (q[..., i, :] @ e[:, high])
    return out


def test_cope_positions_and_bias_are_the_papers():
    gen = _generator(5)
    q = torch.randn(6, 8, generator=gen, dtype=F64)
    k = torch.randn(6, 8, generator=gen, dtype=F64)
    z = ((q @ k.T) / math.sqrt(8)).masked_fill(~pb.attention_mask("causal", 6), -math.inf)
    e = torch.randn(8, 3, generator=gen, dtype=F64)
    positions = contextual_positions(z)
    torch.testing.assert_close(positions, torch.stack([torch.stack(
        [torch.sigmoid(z[i, j:]).sum() for j in range(6)]) for i in range(6)]), rtol=1e-14, atol=0)
    # With only 3 embeddings, counts past 2 share the last one.
    assert positions.max() > 2
    torch.testing.assert_close(cope_bias(q, z, e), _cope_by_the_formula(q, z, e), rtol=1e-12, atol=1e-14)


def test_cope_with_every_gate_one_counts_tokens_both_ends_included():
    # Logits of 40 give gates of 1 to float64 precision: the count from key j to query i is i − j + 1.
    z = torch.full((9, 9), 40.0, dtype=F64).masked_fill(~pb.attention_mask("causal", 9), -math.inf)
    i, j = torch.meshgrid(torch.arange(9), torch.arange(9), indexing="ij")
    kept = j <= i
    torch.testing.assert_close(contextual_positions(z)[kept], (i - j + 1)[kept].to(F64), rtol=0, atol=1e-12)
    assert not contextual_positions(z)[~kept].any()


def test_cope_gradients_and_bad_input():
    gen = _generator(6)
    q = torch.randn(4, 3, generator=gen, dtype=F64).requires_grad_()
    z = (torch.randn(4, 4, generator=gen, dtype=F64) * 2).requires_grad_()
    e = torch.randn(3, 6, generator=gen, dtype=F64).requires_grad_()
    assert torch.autograd.gradcheck(cope_bias, (q, z, e))
    with pytest.raises(ValueError, match=r"embeddings must be \[d=3, n_positions >= 1\]"):
        cope_bias(q, z, torch.zeros(4, 6, dtype=F64))
    with pytest.raises(ValueError, match="logits must not contain NaN"):
        contextual_positions(torch.tensor([[math.nan]]))
    with pytest.raises(ValueError, match="one row per query"):
        cope_bias(q, z[:2], e)


def test_cope_module_gates_with_the_layers_own_logits():
    torch.manual_seed(0)
    module = ContextualPositionBias(4, head_dim=8, n_positions=16).double()
    assert module.reads == "queries_keys" and not module.embeddings.any()    # starts as no position at all
    q = torch.randn(2, 4, 10, 8, dtype=F64)
    k = torch.randn(2, 2, 10, 8, dtype=F64)                                  # grouped keys: 2 heads for 4 queries
    with torch.no_grad():
        module.embeddings.normal_()
    z = (q @ k.repeat_interleave(2, dim=1).transpose(-2, -1)) * 0.3
    z = z.masked_fill(~pb.attention_mask("causal", 10), -math.inf)
    torch.testing.assert_close(module(q, k, 0.3), cope_bias(q, z, module.embeddings), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(module.positions(q, k, 0.3), contextual_positions(z), rtol=1e-12, atol=1e-12)


# --- in the experiment model ------------------------------------------------------------------------------------

@pytest.mark.parametrize("code", ["F", "B", "X"])
def test_content_position_layers_ignore_position_ids_and_count_tokens(code):
    # None of the three reads position ids: shifting every id by 5 changes nothing, as for NoPE.
    torch.manual_seed(0)
    model = GPT(GPTConfig(pattern=code, n_layer=2, n_embd=32, n_head=4, max_seq_len=48)).double()
    idx = torch.randint(0, 256, (2, 12))
    shifted = model(idx, torch.arange(5, 17))
    torch.testing.assert_close(shifted, model(idx), rtol=0, atol=0)


def test_fox_layer_with_open_gates_is_a_nope_layer():
    # A forget gate pinned at 1 (bias +40: log f ≈ −4e-18) leaves a FoX model the NoPE model with the same weights.
    torch.manual_seed(0)
    fox = GPT(GPTConfig(pattern="F", n_layer=2, n_embd=32, n_head=4)).double()
    nope = GPT(GPTConfig(pattern="N", n_layer=2, n_embd=32, n_head=4)).double()
    with torch.no_grad():
        for block in fox.blocks:
            block.attn.bias.gate.weight.zero_()
            block.attn.bias.gate.bias.fill_(40.0)
    nope.load_state_dict({name: p for name, p in fox.state_dict().items() if ".bias.gate." not in name})
    idx = torch.randint(0, 256, (2, 16))
    torch.testing.assert_close(fox(idx), nope(idx), rtol=0, atol=1e-12)


def test_the_unchecked_biases_give_the_checked_ones_bits():
    # The model's FoX and CoPE layers call .unchecked at every step: the same numbers as forward, no check.
    torch.manual_seed(0)
    fox = pb.ForgetGateBias(4, n_embd=16)
    nn_init = torch.nn.init
    nn_init.normal_(fox.gate.bias)
    x = torch.randn(2, 9, 16)
    assert torch.equal(fox.unchecked(x), fox(x))
    cope = pb.ContextualPositionBias(4, head_dim=8, n_positions=6)
    nn_init.normal_(cope.embeddings)
    q, k = torch.randn(2, 4, 9, 8), torch.randn(2, 2, 9, 8)
    assert torch.equal(cope.unchecked(q, k, 0.35), cope(q, k, 0.35))
