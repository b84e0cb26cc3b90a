"""The models the book discusses: their configs, each value with its source (``src/posbook/data/models.json``).

:func:`models` returns the whole table (name → hf_id, config, sources, provenance, notes); :func:`model_config` one
model's config, ready for :func:`posbook.scaling.rope_parameters` and :func:`posbook.kvcache.kv_cache_bytes_per_token`.
"""

from __future__ import annotations

import copy
import functools
import json
from importlib import resources
from typing import Any

from . import _checks


@functools.lru_cache(maxsize=1)
def _models() -> dict[str, Any]:
    text = resources.files("posbook").joinpath("data/models.json").read_text(encoding="utf-8")
    return json.loads(text)["models"]


def models() -> dict[str, Any]:
    """The models the book discusses: name → ``{"hf_id", "config", "sources", "provenance", "notes"}``.

    Every config value has an entry in ``sources`` (the model's config.json on the Hugging Face Hub, or the paper
    and section it comes from). Returns a fresh copy; edit it freely.
    """
    return copy.deepcopy(_models())


def model_config(name: str) -> dict[str, Any]:
    """The config of one model of :func:`models`, ready for :func:`posbook.kvcache.kv_cache_bytes_per_token` and
    :func:`posbook.scaling.rope_parameters`."""
    _checks.choice("name", name, sorted(_models()))
    return copy.deepcopy(_models()[name]["config"])
