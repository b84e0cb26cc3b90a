"""KV-cache arithmetic from a model's config: bytes per token for MHA, MQA, GQA, MLA and hybrids.

Per token and per attention layer a model caches

* MHA / GQA / MQA: a key and a value per KV head, ``num_key_value_heads·(head_dim + v_head_dim)`` numbers
  (MQA is num_key_value_heads = 1; MHA is num_key_value_heads = num_attention_heads);
* MLA (DeepSeek-V2/V3, Kimi K2): one latent of ``kv_lora_rank`` numbers plus the shared rotary key of
  ``qk_rope_head_dim`` numbers, whatever the number of heads.

Layers whose ``layer_types`` entry is a linear-attention or state-space layer keep a fixed-size state and no KV;
sliding-window and chunked layers keep at most their window. Caches this arithmetic does not model (compressed
or cross-layer-shared KV) raise an error rather than a wrong number. :func:`models` holds the configs of the models the
book discusses, each value with its source (``src/posbook/data/models.json``).
"""

from __future__ import annotations

import copy
import functools
import json
from importlib import resources
from typing import Any, Mapping

from . import _checks

KV_LAYER_TYPES = ("full_attention", "sliding_attention", "chunked_attention")
"""``layer_types`` entries that keep keys and values."""

STATE_LAYER_TYPES = ("linear_attention", "mamba", "kda", "recurrent")
"""``layer_types`` entries that keep a fixed-size state instead (no KV)."""


def _int_key(config: Mapping[str, Any], key: str, *, required: bool = True) -> int | None:
    value = config.get(key)
    if value is None:
        if required:
            raise ValueError(f"config must give {key!r}, got none (keys: {sorted(config)})")
        return None
    return int(_checks.number(key, value, integer=True, positive=True))


# Config keys that describe caches posbook does not model; counting without them would be wrong, not approximate.
UNMODELLED_KEYS = {
    "compress_ratios": "compressed KV blocks (DeepSeek-V4)",
    "index_topk": "lightning-indexer keys cached next to the latents (DeepSeek sparse attention)",
    "kv_source_layer_ids": "KV shared across layers",
    "num_kv_shared_layers": "KV shared across layers (Gemma 3n/4)",
}


def kv_values_per_layer(config: Mapping[str, Any], kind: str = "full_attention") -> int:
    """Numbers cached per token by one attention layer of the given ``layer_types`` kind.

    Global layers may differ from local ones: ``global_head_dim`` and ``num_global_key_value_heads`` (Gemma 4)
    override head_dim and num_key_value_heads for ``"full_attention"`` layers, and ``attention_k_eq_v`` (keys
    reused as values in those layers) halves what they must keep.
    """
    if not isinstance(config, Mapping):
        raise TypeError(f"config must be a dict (Hugging Face config style), got {type(config).__name__}")
    _checks.choice("kind", kind, KV_LAYER_TYPES)
    for key, what in UNMODELLED_KEYS.items():
        if config.get(key) not in (None, 0):
            raise ValueError(f"config has {key!r}: {what}, which this arithmetic does not model. Remove the key "
                             "knowingly to count only the uncompressed part")
    if config.get("kv_lora_rank") is not None:
        return _int_key(config, "kv_lora_rank") + _int_key(config, "qk_rope_head_dim")
    heads = _int_key(config, "num_attention_heads")
    kv_heads = _int_key(config, "num_key_value_heads", required=False) or heads
    head_dim = _int_key(config, "head_dim", required=False)
    if head_dim is None:
        hidden = _int_key(config, "hidden_size")
        if hidden % heads:
            raise ValueError(f"hidden_size={hidden} is not a multiple of num_attention_heads={heads}; give head_dim")
        head_dim = hidden // heads
    v_head_dim = _int_key(config, "v_head_dim", required=False) or head_dim
    if kind == "full_attention":
        kv_heads = _int_key(config, "num_global_key_value_heads", required=False) or kv_heads
        global_dim = _int_key(config, "global_head_dim", required=False)
        if global_dim is not None:
            head_dim = v_head_dim = global_dim
        k_eq_v = config.get("attention_k_eq_v", False)
        if not isinstance(k_eq_v, bool):
            raise TypeError(f"attention_k_eq_v must be a bool, got {type(k_eq_v).__name__} {k_eq_v!r}")
        if k_eq_v:
            v_head_dim = 0  # the least a cache must keep; an implementation may still store a separate V copy
    if heads % kv_heads:
        raise ValueError(f"num_attention_heads={heads} must be a multiple of the {kv_heads} key/value heads")
    return kv_heads * (head_dim + v_head_dim)


def layer_kinds(config: Mapping[str, Any]) -> list[str]:
    """One ``layer_types`` entry per layer; every layer is ``"full_attention"`` when the config has none."""
    n_layers = _int_key(config, "num_hidden_layers")
    kinds = config.get("layer_types")
    if kinds is None:
        return ["full_attention"] * n_layers
    if not isinstance(kinds, (list, tuple)) or len(kinds) != n_layers:
        raise ValueError(f"layer_types must be a list with num_hidden_layers={n_layers} entries, got {kinds!r}")
    for kind in kinds:
        _checks.choice("layer_types entry", kind, KV_LAYER_TYPES + STATE_LAYER_TYPES)
    return list(kinds)


def _dtype_bytes(dtype_bytes: float) -> float:
    _checks.number("dtype_bytes", dtype_bytes, positive=True)
    return dtype_bytes


def kv_cache_bytes_per_token(config: Mapping[str, Any], dtype_bytes: float = 2) -> float:
    """Bytes of KV cache each new token adds, summed over the layers that keep KV (2 bytes: BF16/FP16).

    Sliding-window and chunked layers count too: this is the cost per token while the context is shorter than
    their window. :func:`kv_cache_bytes` gives the total for a given length, with the windows applied.
    """
    nbytes = _dtype_bytes(dtype_bytes)
    return sum(kv_values_per_layer(config, kind) * nbytes for kind in layer_kinds(config) if kind in KV_LAYER_TYPES)


def kv_cache_bytes(config: Mapping[str, Any], seq_len: int, dtype_bytes: float = 2) -> float:
    """Total KV-cache bytes for one sequence of ``seq_len`` tokens; local layers keep at most their window."""
    _checks.number("seq_len", seq_len, integer=True, min_value=0)
    nbytes = _dtype_bytes(dtype_bytes)
    kept = {"full_attention": lambda: seq_len,
            "sliding_attention": lambda: min(seq_len, _int_key(config, "sliding_window")),
            "chunked_attention": lambda: min(seq_len, _int_key(config, "attention_chunk_size"))}
    return sum(kv_values_per_layer(config, kind) * nbytes * kept[kind]()
               for kind in layer_kinds(config) if kind in KV_LAYER_TYPES)


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
    """The config of one model of :func:`models`, ready for :func:`kv_cache_bytes_per_token` and
    :func:`posbook.scaling.rope_parameters`."""
    _checks.choice("name", name, sorted(_models()))
    return copy.deepcopy(_models()[name]["config"])
