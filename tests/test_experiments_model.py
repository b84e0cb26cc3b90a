"""posbook.experiments.model: every layer code, local layers against the reference, recorded attention, logit
scaling, and a compiled model with no graph break."""

from __future__ import annotations

import pytest
import torch

import posbook as pb
from posbook.experiments import GPT, LAYER_CODES, GPTConfig
from posbook.experiments import model as model_lib
from posbook.local import local_attention

TINY = dict(n_layer=2, n_embd=32, n_head=4, window=4, chunk_size=4, max_seq_len=48)


@pytest.mark.parametrize("code", sorted(LAYER_CODES))
@pytest.mark.parametrize("options", [{}, {"qk_norm": "all", "sinks": True}, {"softcap": 5.0, "n_kv_head": 2},
                                     {"absolute_positions": "sinusoidal", "logit_scaling": "llama4"}])
def test_every_layer_code_is_causal_and_trains(code, options):
    torch.manual_seed(0)
    if code == "D" and {"sinks", "softcap"} & set(options):
        with pytest.raises(ValueError, match="layer code D"):   # refused at construction, not mid-step
            GPTConfig(pattern=code + "N", **TINY, **options)
        return
    if code == "B" and "sinks" in options:
        with pytest.raises(ValueError, match=r"\['B'\] normalise with their own rule"):
            GPTConfig(pattern=code + "N", **TINY, **options)
        return
    model = GPT(GPTConfig(pattern=code + "N", **TINY, **options)).double()
    idx = torch.randint(0, 256, (2, 20))
    logits = model(idx)
    assert logits.shape == (2, 20, 256)
    # Causality: changing the last 5 tokens leaves the logits of the first 15 positions exactly as they were.
    changed = idx.clone()
    changed[:, 15:] = (changed[:, 15:] + 1) % 256
    torch.testing.assert_close(model(changed)[:, :15], logits[:, :15], rtol=0, atol=1e-12)
    logits.logsumexp(-1).mean().backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


def test_pattern_repeats_and_bad_patterns_are_named():
    assert GPTConfig(pattern="SSSN", n_layer=8).layer_codes == list("SSSNSSSN")
    with pytest.raises(ValueError, match="unknown layer code"):
        GPTConfig(pattern="RXZ")
    with pytest.raises(ValueError, match="n_kv_head"):
        GPTConfig(n_head=4, n_kv_head=3)
    with pytest.raises(ValueError, match="qk_norm"):
        GPTConfig(qk_norm="some")


@pytest.mark.parametrize("code", ["R", "S", "N"])
def test_attention_temperature_divides_every_logit(code):
    # Temperature τ divides q·k; without QK-Norm that is the same model with W_Q scaled by 1/τ.
    torch.manual_seed(0)
    model = GPT(GPTConfig(pattern=code, **TINY)).double()
    idx = torch.randint(0, 256, (2, 20))
    sharp = GPT(GPTConfig(pattern=code, **TINY, attn_temperature=0.25)).double()
    sharp.load_state_dict(model.state_dict())
    with torch.no_grad():
        for block in model.blocks:
            block.attn.q_proj.weight *= 4
    torch.testing.assert_close(sharp(idx), model(idx), rtol=1e-12, atol=1e-12)
    # Read at every forward: changing it on a built model takes effect at once.
    sharp.config.attn_temperature = 1.0
    assert not torch.allclose(sharp(idx), model(idx))
    with pytest.raises(ValueError, match="attn_temperature"):
        GPTConfig(attn_temperature=0.0)


@pytest.mark.parametrize("code", sorted(LAYER_CODES))
def test_recorded_attention_calls_reproduce_every_layer(code):
    torch.manual_seed(0)
    model = GPT(GPTConfig(pattern=code + "N", **TINY, logit_scaling="swan")).double()
    idx = torch.randint(0, 256, (2, 20))
    plain = model(idx)
    if code == "D":     # two attention maps: no single call to record, and the error says so
        with pytest.raises(ValueError, match="differential"), model.recording_attention():
            model(idx)
        return
    with model.recording_attention() as calls:
        recorded = model(idx)
    assert len(calls) == model.config.n_layer and all(b.attn.recorder is None for b in model.blocks)
    torch.testing.assert_close(recorded, plain, rtol=1e-12, atol=1e-12)   # local layers: masked form = blocked kernel
    q, k, v, call = calls[0]
    out, weights = pb.attention(q, k, v, return_weights=True, impl="reference", **call)
    if code == "B":     # stick-breaking: a row keeps 1 − Π(1 − σ(logit)) and may look nowhere
        logits = (q @ k.transpose(-2, -1)) / q.shape[-1] ** 0.5
        kept = 1 - torch.prod(1 - torch.sigmoid(logits).tril(), dim=-1)
        torch.testing.assert_close(weights.sum(-1), kept)
    else:
        torch.testing.assert_close(weights.sum(-1), torch.ones_like(weights[..., 0]))
    if code in "SC":
        assert not weights[..., 0, 1:].any() and weights[..., -1, :20 - model.config.window].abs().max() == 0
    # The recorded call is the first layer's attention: projecting its output gives the layer's output.
    block = model.blocks[0]
    x = block.attn_norm(model.embed(idx))
    torch.testing.assert_close(block.attn.o_proj(out.transpose(1, 2).reshape(2, 20, -1)), block.attn(x))


@pytest.mark.parametrize("code, kind, option", [("S", "sliding", "window"), ("C", "chunked", "chunk_size")])
def test_local_layers_equal_masked_reference_attention(code, kind, option):
    torch.manual_seed(0)
    layer = GPT(GPTConfig(pattern=code, **TINY)).double().blocks[0].attn
    x = torch.randn(2, 19, 32, dtype=torch.float64)
    q = layer.q_proj(x).view(2, 19, 4, 8).transpose(1, 2)
    k = layer.k_proj(x).view(2, 19, 4, 8).transpose(1, 2)
    v = layer.v_proj(x).view(2, 19, 4, 8).transpose(1, 2)
    q, k = pb.apply_rope(q, layer.cos[:19], layer.sin[:19]), pb.apply_rope(k, layer.cos[:19], layer.sin[:19])
    mask = pb.attention_mask(kind, 19, **{option: 4})
    expected = layer.o_proj(pb.attention(q, k, v, mask=mask, impl="reference").transpose(1, 2).reshape(2, 19, 32))
    torch.testing.assert_close(layer(x), expected)


@pytest.mark.parametrize("impl", ["blocked", "flex"])
@pytest.mark.parametrize("t, window, block", [(37, 8, None), (64, 16, 4), (10, 32, None), (50, 7, 3), (33, 1, None)])
def test_local_attention_equals_the_reference(t, window, block, impl):
    """Both kernels (flex runs eagerly here; compiled, on CUDA, in tests/test_on_device.py), with SDPA blocks or
    flex tiles of ``block`` (flex needs tiles of at least 16: 16 stands in for the smaller ones)."""
    gen = torch.Generator().manual_seed(t)
    q = torch.randn(2, 4, t, 8, generator=gen, dtype=torch.float64)
    k, v = (torch.randn(2, 2, t, 8, generator=gen, dtype=torch.float64) for _ in range(2))
    block = block if impl == "blocked" or block is None else 16
    for kind, options in (("sliding", {"window": window}), ("chunked", {"chunk_size": window})):
        ref = pb.attention(q, k, v, mask=pb.attention_mask(kind, t, **options), impl="reference")
        out = local_attention(q, k, v, kind=kind, block_size=block, impl=impl, **options)
        torch.testing.assert_close(out, ref)


def test_constant_logit_scaling_multiplies_only_nope_logits():
    """logit_scaling="constant" (the fixed factor 10 = temperature 0.1 of a nanochat variant) scales the NoPE layers'
    logits only: on an all-NoPE model it equals temperature 1/c, on RoPE layers it does nothing."""
    idx = torch.randint(0, 256, (2, 12), generator=torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    scaled = GPT(GPTConfig(pattern="N", **TINY, logit_scaling="constant", constant_logit_scale=4.0)).double()
    torch.manual_seed(0)
    cooled = GPT(GPTConfig(pattern="N", **TINY, attn_temperature=0.25)).double()
    torch.testing.assert_close(scaled(idx), cooled(idx), rtol=1e-12, atol=1e-12)
    torch.manual_seed(0)
    rope_scaled = GPT(GPTConfig(pattern="R", **TINY, logit_scaling="constant")).double()
    torch.manual_seed(0)
    rope_plain = GPT(GPTConfig(pattern="R", **TINY)).double()
    torch.testing.assert_close(rope_scaled(idx), rope_plain(idx), rtol=0, atol=0)
    with pytest.raises(ValueError, match="constant_logit_scale"):
        GPTConfig(constant_logit_scale=0.0)


def _every_code(**options) -> GPTConfig:
    pattern = options.pop("pattern", "".join(LAYER_CODES))
    return GPTConfig(pattern=pattern, n_layer=len(pattern), n_embd=32, n_head=4, window=4, chunk_size=4,
                     max_seq_len=32, **options)


def test_compiled_model_with_every_layer_code_has_no_graph_break_and_agrees_with_eager():
    # fullgraph=True fails on the first graph break: a host synchronisation (.item(), bool(tensor)) in any layer's
    # forward, or any Python the compiler cannot trace, would stop it here.
    idx = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(1))
    assert_compiled_equals_eager(_every_code(logit_scaling="swan"), idx, out=dict(rtol=1e-5, atol=1e-5),
                                 grad=dict(rtol=1e-4, atol=1e-6))


def assert_compiled_equals_eager(config: GPTConfig, idx: torch.Tensor, *, out: dict, grad: dict) -> None:
    """One model compiled with fullgraph=True and its eager twin (same weights) agree on idx: logits within
    ``out`` and every parameter's gradient within ``grad`` (assert_close tolerances). Also used on CUDA by
    tests/test_on_device.py."""
    torch.manual_seed(0)
    eager = GPT(config).to(idx.device)
    compiled_model = GPT(config).to(idx.device)
    compiled_model.load_state_dict(eager.state_dict())
    compiled = torch.compile(compiled_model, fullgraph=True)
    out_eager, out_compiled = eager(idx), compiled(idx)
    torch.testing.assert_close(out_compiled, out_eager, **out)
    out_eager.logsumexp(-1).mean().backward()
    out_compiled.logsumexp(-1).mean().backward()
    for (name, p), q in zip(eager.named_parameters(), compiled_model.parameters()):
        torch.testing.assert_close(q.grad, p.grad, **grad, msg=name)


@pytest.mark.parametrize("options", [{"sinks": True, "pattern": "RNSCPHAT"}, {"softcap": 30.0, "pattern": "RNSCPHAT"},
                                     {"logit_scaling": "llama4", "qk_norm": "rope", "pattern": "RNSCPHAT"},
                                     {"logit_scaling": "constant", "absolute_positions": "learned"},
                                     {"absolute_positions": "sinusoidal", "n_kv_head": 2, "pattern": "RNSCPHAT"}])
def test_every_option_traces_as_one_graph(options):
    # The eager backend traces with dynamo and runs the captured graph as is: graph breaks fail, numbers are eager's.
    # A second and third length make the shapes dynamic, as evaluating at several lengths does: every size the
    # layers check or build masks from is then symbolic, and still no graph breaks.
    torch.manual_seed(0)
    torch._dynamo.reset()
    model = GPT(_every_code(**options))
    traced = torch.compile(model, backend="eager", fullgraph=True)
    for t in (16, 12, 9):
        idx = torch.randint(0, 256, (2, t), generator=torch.Generator().manual_seed(t))
        torch.testing.assert_close(traced(idx), model(idx), rtol=0, atol=0)


def test_a_new_layer_kind_is_one_entry_of_the_table(monkeypatch):
    for code, kind in LAYER_CODES.items():
        assert kind.mask in pb.MASK_KINDS, code
        if kind.bias is not None:
            assert isinstance(kind.bias(GPTConfig()), tuple(pb.BIASES.values())), code
        if kind.rope is not None:
            pb.rope_parameters(kind.rope(GPTConfig()))
    # A layer that rotates with a base of 500 and attends within chunks: one entry, nothing else to change.
    monkeypatch.setitem(LAYER_CODES, "Z", model_lib.LayerKind(
        "RoPE with base 500, chunked", rope=lambda c: {"rope_theta": 500.0, "head_dim": c.head_dim}, mask="chunked"))
    torch.manual_seed(0)
    model = GPT(GPTConfig(pattern="ZN", **TINY))
    assert torch.equal(model.blocks[0].attn.cos, pb.rope_cos_sin(torch.arange(48), pb.default_inv_freq(8, 500.0))[0])
    idx = torch.randint(0, 256, (2, 12))
    model(idx).logsumexp(-1).mean().backward()
    assert model.blocks[0].attn.q_proj.weight.grad is not None


def _rope_dict(scaling=None, **extra):
    return {"rope_theta": 10_000.0, "head_dim": 8, **extra, **({"rope_scaling": scaling} if scaling else {})}


def test_a_layers_own_rope_dict_given_explicitly_changes_nothing():
    torch.manual_seed(0)
    model = GPT(GPTConfig(pattern="RN", **TINY)).double()
    idx = torch.randint(0, 256, (2, 40))
    same = model.with_rope(_rope_dict()).double()
    assert torch.equal(same(idx), model(idx))
    assert same.config.layer_ropes() == [_rope_dict(), None]


def test_position_interpolation_reads_position_m_as_m_over_the_factor():
    torch.manual_seed(0)
    model = GPT(GPTConfig(pattern="R", **TINY)).double()
    stretched = model.with_rope(_rope_dict({"rope_type": "linear", "factor": 2.0})).double()
    # Its tables at position 2m are the unscaled tables at position m.
    layer, plain = stretched.blocks[0].attn, model.blocks[0].attn
    torch.testing.assert_close(layer.cos[0:48:2], plain.cos[:24], rtol=0, atol=1e-6)
    idx = torch.randint(0, 256, (1, 40))
    assert not torch.allclose(stretched(idx), model(idx))


def test_per_layer_rope_dicts_and_dynamic_ntk():
    torch.manual_seed(0)
    model = GPT(GPTConfig(pattern="RR", **TINY)).double()
    dynamic = _rope_dict({"rope_type": "dynamic", "factor": 4.0}, max_position_embeddings=16)
    # Only the second layer is stretched; dynamic NTK leaves sequences up to max_position_embeddings unchanged.
    stretched = model.with_rope([None, dynamic]).double()
    short, long = torch.randint(0, 256, (1, 16)), torch.randint(0, 256, (1, 40))
    assert torch.equal(stretched(short), model(short))
    assert not torch.allclose(stretched(long), model(long))
    # At 40 tokens its spectrum is the NTK base change for the scale 4·40/16 − 3 = 7.
    ntk = model.with_rope([None, _rope_dict({"rope_type": "ntk", "factor": 7.0})]).double()
    torch.testing.assert_close(stretched(long), ntk(long), rtol=0, atol=1e-6)
    # The tables of a length are built once and reused: a second call at 40 tokens gives the same tensors.
    layer = stretched.blocks[1].attn
    assert layer._dynamic_tables(40, long.device)[0] is layer._dynamic_tables(40, long.device)[0]
    torch.testing.assert_close(stretched(long), ntk(long), rtol=0, atol=1e-6)


def test_flops_per_token_charges_each_layer_its_own_keys():
    """6·(non-embedding parameters) plus, per layer, 6·keys·(score width + value width), counted by hand."""
    config = dict(n_layer=4, n_embd=32, n_head=4, window=8, chunk_size=8, max_seq_len=64)
    width = 4 * 8
    for pattern, keys_nanochat, keys_mask in (
        ("RRRR", [64] * 4, [65 / 2] * 4),
        # sliding 8 at T = 64: queries 0..7 see 1..8 keys, the other 56 see 8
        ("SSSR", [8, 8, 8, 64], [(36 + 56 * 8) / 64] * 3 + [65 / 2]),
        # chunks of 8: each chunk's queries see 1..8 keys, 36 per chunk, 8 chunks
        ("CCCN", [8, 8, 8, 64], [36 * 8 / 64] * 3 + [65 / 2]),
        ("SCNR", [8, 8, 64, 64], [(36 + 56 * 8) / 64, 36 * 8 / 64, 65 / 2, 65 / 2]),
    ):
        model = GPT(GPTConfig(pattern=pattern, **config))
        dense = sum(p.numel() for name, p in model.named_parameters() if "embed" not in name)
        for count, keys in (("nanochat", keys_nanochat), ("mask", keys_mask)):
            expected = 6 * dense + sum(6 * k * 2 * width for k in keys)
            assert model.flops_per_token(64, count=count) == pytest.approx(expected, rel=1e-12), (pattern, count)
    # A differential layer's two maps of half the heads weigh values twice as wide: 6·keys·(width + 2·width).
    model = GPT(GPTConfig(pattern="DR", n_layer=2, n_embd=32, n_head=4, max_seq_len=64))
    dense = sum(p.numel() for name, p in model.named_parameters() if "embed" not in name)
    assert model.flops_per_token(64) == pytest.approx(6 * dense + 6 * 64 * 3 * width + 6 * 64 * 2 * width)
    # A window at least as long as the sequence costs what a global layer does.
    wide = GPT(GPTConfig(pattern="SR", n_layer=2, n_embd=32, n_head=4, window=64, max_seq_len=64))
    assert wide.flops_per_token(64, "mask") == pytest.approx(
        GPT(GPTConfig(pattern="RR", n_layer=2, n_embd=32, n_head=4, max_seq_len=64)).flops_per_token(64, "mask"))
    with pytest.raises(ValueError, match="count"):
        model.flops_per_token(64, count="causal")


def test_bad_rope_overrides_are_named():
    with pytest.raises(ValueError, match=r"rope\[1\] is given for layer 1, code 'N'"):
        GPTConfig(pattern="RN", **TINY, rope=[None, _rope_dict()])
    with pytest.raises(ValueError, match="a list of n_layer=2 entries"):
        GPTConfig(pattern="RN", **TINY, rope=[None])
    with pytest.raises(ValueError, match="head_dim=16; this model's head_dim is 8"):
        GPTConfig(pattern="RN", **TINY, rope={"rope_theta": 1e4, "head_dim": 16})
    with pytest.raises(ValueError, match="needs 'factor'"):
        GPTConfig(pattern="RN", **TINY, rope=_rope_dict({"rope_type": "linear"}))
    with pytest.raises(TypeError, match="rope must be a dict, a list of per-layer dicts or None"):
        GPTConfig(pattern="RN", **TINY, rope="yarn")


def test_a_checkpoint_reloads_with_another_rope(tmp_path):
    from posbook.experiments.checkpoints import load_model
    torch.manual_seed(0)
    model = GPT(GPTConfig(pattern="RN", **TINY))
    path = tmp_path / "weights.pt"
    torch.save({"model": model.state_dict(), "config": model.config.to_dict(),
                "run": {"task": "text", "seed": 0}}, path)
    yarn = _rope_dict({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 12})
    loaded, run = load_model(path, rope=yarn)
    idx = torch.randint(0, 256, (1, 40))
    assert torch.equal(loaded(idx), model.with_rope(yarn)(idx))
    assert run.task == "text" and loaded.config.rope == yarn
    as_trained, _ = load_model(path)
    assert torch.equal(as_trained(idx), model(idx))


def test_the_rotation_runs_in_float32_under_autocast():
    """Under bfloat16 autocast (the GPU's training precision; the CPU has it too) q and k come out of the
    projections in bfloat16; the layer rotates them in float32 with its float32 tables and rounds once after."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(pattern="R", **TINY)).eval()
    idx = torch.randint(0, 256, (2, 12))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16), model.recording_attention() as calls:
        model(idx)
    attn = model.blocks[0].attn
    assert attn.cos.dtype == torch.float32
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        x = model.blocks[0].attn_norm(model.embed(idx))
        q = attn.q_proj(x).view(2, 12, attn.n_head, attn.head_dim).transpose(1, 2)
    expected = pb.apply_rope(q.float(), attn.cos[:12], attn.sin[:12]).to(torch.bfloat16)
    q_recorded = calls[0][0]
    assert q.dtype == q_recorded.dtype == torch.bfloat16
    assert torch.equal(q_recorded, expected)


# --- position ids -----------------------------------------------------------------------------------------------------

def _position_model(code: str, **options) -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=64, n_layer=2, n_embd=32, n_head=4, max_seq_len=48, pattern=code, window=6,
                         chunk_size=5, **options))


POSITION_VARIANTS = [(code, {}) for code in LAYER_CODES] + [("N", dict(absolute_positions=kind))
                                                             for kind in ("learned", "sinusoidal")]


@pytest.mark.parametrize("code, options", POSITION_VARIANTS)
def test_position_ids_zero_to_t_are_the_default_bit_for_bit(code, options):
    model, idx = _position_model(code, **options), torch.randint(0, 64, (3, 20))
    default = model(idx)
    assert torch.equal(model(idx, torch.arange(20)), default)
    assert torch.equal(model(idx, torch.arange(20)[None]), default)


@pytest.mark.parametrize("code, options", POSITION_VARIANTS)
def test_only_absolute_embeddings_see_a_shift_of_every_position_id(code, options):
    """Rotations and biases read only differences of ids, so adding 7 to every id changes nothing but rounding;
    absolute embeddings read the ids themselves."""
    model, idx = _position_model(code, **options), torch.randint(0, 64, (3, 20))
    default, shifted = model(idx), model(idx, torch.arange(20) + 7)
    if options:
        assert (default - shifted).abs().max() > 0.01
    else:
        torch.testing.assert_close(shifted, default, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("code", list(LAYER_CODES) + ["N-learned"])
def test_each_sequence_reads_its_own_position_ids(code):
    model = _position_model("N", absolute_positions="learned") if code == "N-learned" else _position_model(code)
    idx = torch.randint(0, 64, (2, 12))
    ids = torch.stack([torch.arange(12) * 2, torch.sort(torch.randperm(40)[:12]).values])   # spread; random ordered
    together = model(idx, ids)
    for row in range(2):
        torch.testing.assert_close(together[row:row + 1], model(idx[row:row + 1], ids[row]), atol=1e-5, rtol=1e-5)
    together.sum().backward()       # every layer kind differentiates through id-dependent tables and biases


def test_a_coupled_copy_reads_the_same_rotation_at_the_input_and_its_copy():
    """Ids shared between an input token and its copy give every (copy, input) pair of a RoPE layer the relative
    angle 0, whatever the length: the rotation of the query and of its key are equal."""
    model = _position_model("R")
    ids = torch.cat([torch.arange(5), torch.arange(5)])
    cos, sin = model.blocks[0].attn.rotary_at(ids[None])
    assert torch.equal(cos[0, 7], cos[0, 2]) and torch.equal(sin[0, 7], sin[0, 2])


def test_position_ids_are_checked_by_name():
    model, idx = _position_model("R"), torch.randint(0, 64, (2, 6))
    with pytest.raises(TypeError, match="^position_ids must be an integer tensor"):
        model(idx, torch.arange(6.0))
    with pytest.raises(ValueError, match=r"^position_ids must be \[T=6\] or \[batch=2, T=6\]"):
        model(idx, torch.arange(7))
    with pytest.raises(ValueError, match="^position_ids must be at least 0, got a minimum of -1"):
        model(idx, torch.arange(6) - 1)
    learned = _position_model("N", absolute_positions="learned")
    with pytest.raises(ValueError, match="^position_ids must be below max_seq_len=48 with learned absolute"):
        learned(idx, torch.arange(6) + 43)
    assert learned(idx, torch.arange(6) + 42).shape == (2, 6, 64)
    dynamic = _position_model("R", rope=_rope_dict({"rope_type": "dynamic", "factor": 2.0}, max_position_embeddings=16))
    with pytest.raises(ValueError, match=r"^position_ids cannot be given to a model with the dynamic rope type"):
        dynamic(idx, torch.arange(6))
