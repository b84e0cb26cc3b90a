"""Where computations run, decided once: cuda, then mps, then cpu; ``POSBOOK_DEVICE`` overrides."""

from __future__ import annotations

import os

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
