"""posbook.device: one place that chooses the device."""

from __future__ import annotations

import pytest
import torch

import posbook as pb


def test_device_override(monkeypatch):
    monkeypatch.setenv("POSBOOK_DEVICE", "cpu")
    assert pb.default_device() == torch.device("cpu")
    monkeypatch.setenv("POSBOOK_DEVICE", "not-a-device")
    with pytest.raises(ValueError, match="POSBOOK_DEVICE"):
        pb.default_device()
    monkeypatch.delenv("POSBOOK_DEVICE")
    assert pb.default_device().type in {"cpu", "cuda", "mps"}


def test_training_precision_on_the_cpu_is_float32_without_a_scaler():
    from posbook.device import training_precision
    precision = training_precision("cpu")
    assert precision.dtype == torch.float32 and not precision.scaled
    with precision.autocast(torch.device("cpu")):
        assert not torch.is_autocast_enabled("cpu")
    assert not precision.grad_scaler(torch.device("cpu")).is_enabled()
    with pytest.raises(TypeError, match="device"):
        training_precision(3)


@pytest.mark.parametrize("capability, dtype, scaled", [((9, 0), torch.bfloat16, False), ((8, 0), torch.bfloat16, False),
                                                       ((7, 5), torch.float16, True)])
def test_training_precision_on_a_gpu_follows_its_compute_capability(monkeypatch, capability, dtype, scaled):
    # an H100 or A100 trains in bfloat16; a T4 (7.5) has no bfloat16 tensor cores: float16 with a scaler
    from posbook.device import training_precision
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    precision = training_precision("cuda")
    assert (precision.dtype, precision.scaled) == (dtype, scaled)


def test_a_disabled_scaler_leaves_a_training_step_bit_identical():
    # the trainer always goes through the scaler; where it is disabled (cpu, bfloat16) nothing may change
    from posbook.device import training_precision
    cpu = torch.device("cpu")
    scaler = training_precision(cpu).grad_scaler(cpu)
    weights = []
    for use_scaler in (False, True):
        torch.manual_seed(0)
        model = torch.nn.Linear(8, 3)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        for _ in range(3):
            loss = model(torch.randn(4, 8)).square().mean()
            if use_scaler:
                scaler.scale(loss).backward()
                scaler.unscale_(opt)
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                scaler.step(opt)
                scaler.update()
            else:
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
            opt.zero_grad(set_to_none=True)
        weights.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    assert torch.equal(weights[0], weights[1])


def test_the_device_check_asks_torch_nothing_inside_a_compiled_graph():
    """Traced code takes its device from a tensor already on it: counting GPUs there (torch.cuda.device_count)
    breaks a fullgraph compile on a GPU machine, as the ALiBi and T5 layers' relative positions did. Here, with no
    GPU, the uncompiled check refuses 'cuda' while the traced one passes it through."""
    from posbook import _checks
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA device"):
            _checks.device("device", "cuda")

    @torch.compile(fullgraph=True, backend="eager")
    def traced(x):
        return x + float(_checks.device("device", "cuda").type == "cuda")

    assert traced(torch.zeros(2)).tolist() == [1.0, 1.0]
