"""The library on the device under test (``POSBOOK_DEVICE``; the CPU in CI, the GPU under tools/gpu_check.py):
attention paths, RoPE, local attention, the experiment model and its training agree there with the CPU's float64
reference. The cases marked ``cuda`` check what only a GPU has: compiled flex_attention local layers inside a
compiled model, bfloat16 and float16 training."""

from __future__ import annotations

import math

import pytest
import torch

import posbook as pb
from posbook.device import TrainingPrecision, training_precision
from posbook.experiments import trainer
from posbook.experiments.model import GPT, GPTConfig
from posbook.experiments.config import TrainConfig
from posbook.experiments.trainer import train
from test_experiments_model import assert_compiled_equals_eager

# float32 on the device against float64 on the CPU: SDPA, flex_attention and cuBLAS sum in other orders.
FLOAT32 = dict(rtol=1e-4, atol=1e-5)


def qkv(device, t=40, hq=4, hkv=2, d=16, seed=0):
    gen = torch.Generator().manual_seed(seed)
    tensors = [torch.randn(2, h, t, d, generator=gen, dtype=torch.float64) for h in (hq, hkv, hkv)]
    return tensors, [x.to(device, torch.float32) for x in tensors]


@pytest.mark.parametrize("options", [
    dict(causal=True),
    dict(mask="sliding"),
    dict(bias="alibi", causal=True),
    dict(softcap=5.0, causal=True),
    dict(normaliser="sink", causal=True),
], ids=["causal", "sliding-mask", "alibi", "softcap", "sink"])
def test_attention_paths_on_the_device_agree_with_the_cpu_reference(device, options):
    cpu, here = qkv(device)
    t = cpu[0].shape[-2]

    def resolve(opts, where, dtype):
        opts = dict(opts)
        if opts.get("mask") == "sliding":
            opts["mask"] = pb.attention_mask("sliding", t, window=7, device=where)
        if opts.get("bias") == "alibi":
            opts["bias"] = pb.alibi_bias(pb.alibi_slopes(4, dtype=dtype), t).to(where)
        if opts.get("normaliser") == "sink":
            opts["sink"] = torch.linspace(-1, 1, 4, dtype=dtype, device=where)
        return opts

    reference = pb.attention(*cpu, impl="reference", **resolve(options, "cpu", torch.float64))
    impls = ["auto", "reference", "flex"] + ([] if {"softcap", "normaliser"} & set(options) else ["sdpa"])
    for impl in impls:
        out = pb.attention(*here, impl=impl, **resolve(options, device, torch.float32))
        assert out.device.type == device.type
        torch.testing.assert_close(out.cpu().double(), reference, **FLOAT32, msg=f"impl={impl!r}")


def test_rope_on_the_device_keeps_float32_tables_and_rotates_as_on_the_cpu(device):
    inv_freq, factor = pb.rope_parameters({"rope_theta": 10_000.0, "head_dim": 16})
    cos, sin = pb.rope_cos_sin(torch.arange(4096, device=device), inv_freq.to(device), attention_factor=factor)
    assert cos.dtype == sin.dtype == torch.float32 and cos.device.type == device.type
    ref_cos, ref_sin = pb.rope_cos_sin(torch.arange(4096), inv_freq, attention_factor=factor)
    torch.testing.assert_close(cos.cpu(), ref_cos, **FLOAT32)
    cpu, here = qkv(device, t=64)
    rotated = pb.apply_rope(here[0], cos[:64], sin[:64])
    expected = pb.apply_rope(cpu[0], ref_cos[:64].double(), ref_sin[:64].double())
    torch.testing.assert_close(rotated.cpu().double(), expected, **FLOAT32)


@pytest.mark.parametrize("kind, size", [("sliding", "window"), ("chunked", "chunk_size")])
def test_local_attention_kernels_on_the_device_agree_with_the_reference(device, kind, size):
    """blocked SDPA and flex_attention (compiled on CUDA, eager elsewhere), and whichever ``auto`` picks here."""
    cpu, here = qkv(device, t=300, d=16)
    reference = pb.attention(*cpu, mask=pb.attention_mask(kind, 300, **{size: 48}), impl="reference")
    for impl in ("auto", "blocked", "flex"):
        out = pb.local_attention(*here, kind=kind, impl=impl, **{size: 48})
        torch.testing.assert_close(out.cpu().double(), reference, **FLOAT32, msg=f"impl={impl!r}")


@pytest.mark.parametrize("kind, size", [("sliding", "window"), ("chunked", "chunk_size")])
def test_flex_local_attention_traces_into_one_graph(device, kind, size):
    """Inside a compiled model the block mask is built in the graph: fullgraph=True holds (dynamo's eager backend
    here, so that the check costs no code generation; on CUDA the model test below compiles for real)."""
    from posbook.local import local_attend
    cpu, here = qkv(device, t=300)
    options = {"window": None, "chunk_size": None, size: 48}
    reference = pb.attention(*cpu, mask=pb.attention_mask(kind, 300, **{size: 48}), scale=0.25, impl="reference")
    compiled = torch.compile(lambda q, k, v: local_attend(q, k, v, kind=kind, scale=0.25, impl="flex", **options),
                             backend="eager", fullgraph=True)
    torch.testing.assert_close(compiled(*here).cpu().double(), reference, **FLOAT32)


def test_the_model_with_flex_local_layers_traces_into_one_graph(device, monkeypatch):
    """The CUDA path of the experiment model's local layers (flex, as impl="auto" picks on a GPU), forced here on
    whatever device this is and traced with fullgraph=True: the model code around the kernel breaks no graph.
    Forward only: flex has no backward on the CPU."""
    import posbook.local
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=4, n_embd=64, n_head=4, pattern="SCSN", window=16, chunk_size=16,
                          max_seq_len=128)).to(device).eval()
    idx = torch.randint(0, 256, (2, 100), generator=torch.Generator().manual_seed(1)).to(device)
    with torch.no_grad():
        blocked = [model(idx), model(idx[:, :77])]
        monkeypatch.setattr(posbook.local, "_local_impl", lambda impl, q: "flex")
        # A second length makes the compiled shapes dynamic: T is then symbolic inside the graph.
        traced = torch.compile(model, backend="eager", fullgraph=True)
        outs = [traced(idx), traced(idx[:, :77])]
    for out, expected in zip(outs, blocked):
        torch.testing.assert_close(out, expected, **FLOAT32)


def test_the_experiment_model_on_the_device_computes_what_it_computes_on_the_cpu(device):
    """Every layer kind but D in one model (with local layers through posbook.local's kernels on the device)."""
    torch.manual_seed(0)
    config = GPTConfig(n_layer=8, n_embd=64, n_head=4, pattern="RNSCPHAT", window=16, chunk_size=16,
                       max_seq_len=128)
    model = GPT(config).eval()
    idx = torch.randint(0, 256, (2, 100), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = model.double()(idx)
        got = model.float().to(device)(idx.to(device))
    # the model returns float32 logits whatever its dtype
    torch.testing.assert_close(got.cpu(), expected, **FLOAT32)


def tiny_run(device, **fields) -> TrainConfig:
    return TrainConfig(task="copy", preset="cpu", model=dict(n_layer=2, n_embd=32, n_head=2, pattern="SN", window=8),
                       steps=40, warmup=4, eval_every=40, eval_batches=1, device=str(device), **fields)


def test_training_on_the_device_in_its_precision_lowers_the_loss(device):
    results = train(tiny_run(device))
    losses = [h["train_loss"] for h in results["history"]]
    assert all(math.isfinite(loss) for loss in losses)
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 0.3
    assert results["provenance"]["device"] in (str(device), torch.cuda.get_device_name(device)
                                               if device.type == "cuda" else str(device))


@pytest.mark.cuda
def test_this_gpu_trains_in_the_precision_its_compute_capability_allows():
    major, _ = torch.cuda.get_device_capability()
    precision = training_precision("cuda")
    assert precision.dtype == (torch.bfloat16 if major >= 8 else torch.float16)
    with precision.autocast(torch.device("cuda")):
        product = torch.randn(8, 8, device="cuda") @ torch.randn(8, 8, device="cuda")
    assert product.dtype == precision.dtype


@pytest.mark.cuda
def test_float16_with_a_gradient_scaler_trains_on_a_gpu(monkeypatch):
    """The T4 path (float16 and a GradScaler), forced on whatever GPU this is."""
    monkeypatch.setattr(trainer, "training_precision", lambda device: TrainingPrecision(torch.float16, scaled=True))
    results = train(tiny_run(torch.device("cuda")))
    losses = [h["train_loss"] for h in results["history"]]
    assert all(math.isfinite(loss) for loss in losses) and sum(losses[-5:]) < sum(losses[:5]) - 1.5


@pytest.mark.cuda
def test_a_compiled_model_with_flex_local_layers_equals_the_eager_model():
    """Every layer code, head_dim 16 (so the local layers take compiled flex_attention), one graph
    (fullgraph=True: the block masks are traced into it), forward and gradients as the eager model's."""
    config = GPTConfig(n_layer=9, n_embd=64, n_head=4, pattern="RNSCPHATD", window=64, chunk_size=64,
                       max_seq_len=512)
    idx = torch.randint(0, 256, (2, 512), device="cuda")
    assert_compiled_equals_eager(config, idx, out=dict(rtol=1e-3, atol=1e-3), grad=dict(rtol=1e-3, atol=1e-5))
