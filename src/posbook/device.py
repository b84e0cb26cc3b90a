"""Where computations run and in what precision, decided once: cuda, then mps, then cpu (``POSBOOK_DEVICE``
overrides); bfloat16 on GPUs that have it, float16 with a gradient scaler on those that do not, float32 elsewhere."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from . import _checks


def default_device() -> torch.device:
    """The device chapters and experiments use. ``POSBOOK_DEVICE=cpu`` forces the CPU even where a GPU exists."""
    wanted = os.environ.get("POSBOOK_DEVICE", "").strip()
    if wanted:
        return _checks.device("POSBOOK_DEVICE", wanted)
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


@dataclass(frozen=True)
class TrainingPrecision:
    """How a device trains: the autocast dtype, and whether the loss needs a gradient scaler.

    ``dtype`` is what matmuls run in under autocast (``torch.float32`` means autocast is off); ``scaled`` is True
    for float16, whose narrow exponent loses small gradients unless the loss is scaled (bfloat16 has float32's
    exponent and needs no scaler). RoPE's cos/sin stay float32 whatever this says
    (:func:`posbook.rope.rope_cos_sin`).
    """

    dtype: torch.dtype
    scaled: bool

    def autocast(self, device: torch.device):
        """The autocast context for ``device``: a no-op context where training runs in float32."""
        if self.dtype == torch.float32:
            return torch.autocast(device.type, enabled=False)
        return torch.autocast(device.type, dtype=self.dtype)

    def grad_scaler(self, device: torch.device) -> torch.amp.GradScaler:
        """A gradient scaler, enabled only for float16 (disabled, every call of it is a pass-through)."""
        return torch.amp.GradScaler(device.type, enabled=self.scaled)


def training_precision(device: torch.device | str) -> TrainingPrecision:
    """The precision training uses on ``device``, decided once here: bfloat16 on a CUDA GPU that supports it,
    float16 with a gradient scaler on one that does not (T4-class GPUs, compute capability < 8), float32 elsewhere
    (the CPU and MPS: bit-reproducible records are trained in float32)."""
    device = _checks.device("device", device)
    if device.type != "cuda":
        return TrainingPrecision(torch.float32, scaled=False)
    # bfloat16 tensor cores arrived with Ampere (compute capability 8.0); older GPUs only emulate it, slowly.
    major, _ = torch.cuda.get_device_capability(device)
    if major >= 8:
        return TrainingPrecision(torch.bfloat16, scaled=False)
    return TrainingPrecision(torch.float16, scaled=True)
