"""Where computations run, decided once: cuda, then mps, then cpu; ``POSBOOK_DEVICE`` overrides."""

from __future__ import annotations

import os

import torch


def default_device() -> torch.device:
    """The device chapters and experiments use. ``POSBOOK_DEVICE=cpu`` forces the CPU even where a GPU exists."""
    wanted = os.environ.get("POSBOOK_DEVICE", "").strip()
    if wanted:
        try:
            device = torch.device(wanted)
        except RuntimeError:
            raise ValueError(f"POSBOOK_DEVICE must name a torch device such as 'cpu' or 'cuda', got {wanted!r}") from None
        if device.type == "cuda":
            count = torch.cuda.device_count() if torch.cuda.is_available() else 0
            if count == 0 or (device.index is not None and device.index >= count):
                raise ValueError(f"POSBOOK_DEVICE={wanted!r} but torch sees {count} CUDA device(s)")
        elif device.type == "mps":
            if getattr(torch.backends, "mps", None) is None or not torch.backends.mps.is_available():
                raise ValueError(f"POSBOOK_DEVICE={wanted!r} but torch has no MPS device here")
        elif device.type != "cpu":
            raise ValueError(f"POSBOOK_DEVICE must be 'cpu', 'cuda', 'cuda:N' or 'mps', got {wanted!r}")
        return device
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")
