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
