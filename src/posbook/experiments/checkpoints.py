"""Reading posbook checkpoints: :func:`read_checkpoint` tells a damaged or foreign file apart before torch reads it,
and :func:`load_model` rebuilds the trained model and its run config (weights only: no pickled code runs).

The trainer writes checkpoints (:func:`posbook.experiments.trainer.train` with ``out_dir``); the store keeps the
weights of recorded runs in the same form (``MODEL_KEYS``).
"""

from __future__ import annotations

import pickle
import zipfile
import zlib
from pathlib import Path
from typing import Any

import torch

from .. import _checks
from .config import TrainConfig
from .model import GPT, GPTConfig

MODEL_KEYS = ("config", "model", "run")
"""What every posbook checkpoint holds: the model config, the weights, the run config."""
RESUME_KEYS = MODEL_KEYS + ("optimizer", "step", "history")
"""What a checkpoint written during training holds besides, to resume exactly."""


_ZIP_SIGNATURE = b"PK\x03\x04"     # how a zip archive, and so every file torch.save writes, begins


def _archive_damage(path: Path) -> str | None:
    """What is wrong with the zip archive of a torch checkpoint, or None when it is whole or is no zip archive at
    all (torch.load then judges it). Asked first because torch.load does not tell: a file cut short fails inside
    torch with a zip or an OS error ("[Errno 22] Invalid argument") that does not say so, and a zeroed range loads
    as wrong weights, for torch does not check the CRC-32 that the archive keeps of every member."""
    try:
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile:
        with path.open("rb") as file:
            if file.read(len(_ZIP_SIGNATURE)) != _ZIP_SIGNATURE:
                return None
        return f"a zip archive of {path.stat().st_size} bytes whose closing directory is missing or unreadable"
    with archive:
        try:
            damaged = archive.testzip()
        except (zipfile.BadZipFile, EOFError, zlib.error) as error:
            return f"a member cannot be read: {error}"
    return None if damaged is None else f"its member {damaged} fails its CRC-32 or header check"


def read_checkpoint(path: str | Path, device: torch.device | str = "cpu",
                    keys: tuple[str, ...] = MODEL_KEYS) -> dict[str, Any]:
    """A posbook checkpoint's contents (``torch.load`` with ``weights_only=True``), or a ValueError that says what
    is wrong with the file: missing, a folder, empty, not a torch file, truncated or damaged anywhere (each member
    of the archive is checked against its CRC-32 first), or a checkpoint without ``keys``."""
    path = _checks.path("path", path)
    device = _checks.device("device", device)
    if not isinstance(keys, tuple) or not all(isinstance(key, str) for key in keys):
        raise TypeError(f"keys must be a tuple of str, got {keys!r}")
    # "checkpoint path": the argument is ``path`` here and ``checkpoint`` in load_model, which reads through here.
    if not path.exists():
        raise ValueError(f"checkpoint path {path} does not exist")
    if path.is_dir():
        raise ValueError(f"checkpoint path {path} is a folder, not a checkpoint file")
    if path.stat().st_size == 0:
        raise ValueError(f"checkpoint path {path} is empty")
    damage = _archive_damage(path)
    if damage is not None:
        raise ValueError(f"checkpoint path {path} is not a readable torch checkpoint: it is damaged or truncated "
                         f"({damage}); write it again or copy it whole")
    try:
        state = torch.load(path, weights_only=True, map_location=device)
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError, UnicodeDecodeError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ValueError(f"checkpoint path {path} is not a readable torch checkpoint ({first[:200]})") from None
    missing = [key for key in keys if not (isinstance(state, dict) and key in state)]
    if missing:
        raise ValueError(f"checkpoint path {path} is not a posbook checkpoint: it has no {missing} (it holds "
                         f"{sorted(state) if isinstance(state, dict) else type(state).__name__})")
    return state


def load_model(checkpoint: str | Path, device: torch.device | str = "cpu", *,
               rope: dict | list | None | str = "as trained") -> tuple[GPT, TrainConfig]:
    """A trained model and its run config from a checkpoint (loaded with weights_only=True).

    ``rope``: the rope configs to rotate with instead of the trained ones (a ``GPTConfig.rope`` value: one
    dict for every rotating layer, a list per layer, None for each layer kind's own), e.g. YaRN at factor 4 to
    read four times the training length; the default keeps those of the checkpoint."""
    _checks.path("checkpoint", checkpoint)
    if isinstance(rope, str) and rope != "as trained":
        raise ValueError(f"rope must be 'as trained', a rope dict, a list of per-layer dicts or None, got {rope!r}")
    state = read_checkpoint(checkpoint, device)
    config = dict(state["config"])
    if not isinstance(rope, str):
        config["rope"] = rope
    model = GPT(GPTConfig(**config)).to(device)
    model.load_state_dict(state["model"])
    # Where the run trained is not part of it: a checkpoint written on a GPU loads on a machine without one.
    return model, TrainConfig(**{**state["run"], "device": None})
