"""Reading Hugging Face configs: every form a config arrives in, made into the one flat dict posbook reads.

A model's config reaches posbook as a ``config.json`` from the Hub (often in a legacy form), as its text, as the
dict ``transformers`` writes with ``to_dict()`` (v5: ``rope_parameters``, ``layer_types``, ``per_layer_config``),
or as a ``transformers.PretrainedConfig`` object. :func:`read_config` turns each into one flat dict with the
standard key names, so that :mod:`posbook.scaling` and :mod:`posbook.kvcache` read one vocabulary:

* a config object is read through its ``to_dict()`` (transformers is never imported here);
* a multimodal config's language part (``text_config``) is lifted to the top level;
* the key names older architectures use are renamed (``n_layer`` → ``num_hidden_layers``, ``rotary_pct`` →
  ``partial_rotary_factor``, ...) and the legacy keys whose meaning transformers spreads over several settings are
  rewritten into the standard ones (Falcon's ``multi_query``, Gemma 3's ``rope_local_base_freq``, Jamba's
  ``attn_layer_period``, DeepSeek-V4's ``compress_rope_theta``), each as transformers reads it;
* a config without ``layer_types`` gets the ones transformers derives, by the rule of ``LAYOUT_RULES`` the generated
  table names for its model type (Gemma 2/3, Cohere 2, gpt-oss, Mistral, Qwen2/3, Llama 4, ...); a windowed config
  of another architecture, or one
  of ``NONUNIFORM_MODEL_TYPES``, is refused by :func:`posbook.kvcache.layer_kinds` instead of being guessed;
* a key that changes the geometry in a way posbook does not model is refused by name (``UNMODELLED_KEYS``),
  rather than ignored: ignoring it would give a wrong number silently.

The test suite holds the results against transformers' own code for every architecture it ships
(``tests/test_hf_oracle.py``): the rotary frequencies of each layer type against the model's rotary module, the bytes
a tiny instance caches, the layer kinds derived without ``layer_types``, and for Hub-style config.json files that
every form of one config gives the same bytes.
"""

from __future__ import annotations

import copy
import functools
import json
import os
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Mapping

from . import _checks

class NotModelledError(ValueError):
    """A config holds something posbook does not model (a key, a rope type, a kind of layer): its arithmetic would
    be wrong, so it refuses. A ValueError, so callers that catch those keep working; :func:`posbook.report.config_report`
    reports the other parts of such a config."""


# Old names of standard keys: standard name -> the names older configs use for it (GPT-2, GPT-J, BLOOM, Falcon's
# RW era, GPT-NeoX, JetMoe, ...). A config that gives a standard key and one of its old names with a different
# value is refused.
KEY_ALIASES: dict[str, tuple[str, ...]] = {
    "num_hidden_layers": ("n_layer", "n_layers"),
    "num_attention_heads": ("n_head", "n_heads"),
    "num_key_value_heads": ("n_head_kv",),
    "hidden_size": ("n_embd", "n_embed", "d_model"),
    "max_position_embeddings": ("n_positions", "max_seq_len"),
    "partial_rotary_factor": ("rotary_pct",),
    "rope_theta": ("rotary_emb_base",),
    "head_dim": ("kv_channels",),
}

# Names that mean a standard key only in some architectures' configs, model_type -> {name: standard name}: the
# Forgetting Transformer's code names its attention heads num_heads, which Mamba-2 and xLSTM use for recurrent heads.
MODEL_KEY_ALIASES: dict[str, dict[str, str]] = {
    "forgetting_transformer": {"num_heads": "num_attention_heads"},
    "forgetting_transformer-project_fox": {"num_heads": "num_attention_heads"},
}

# Keys whose effect posbook does not model -> (what the key does, which arithmetic it breaks: "rope", "kv" or
# "both"). A config holding one (non-null, non-zero) is refused by the functions that would be wrong.
UNMODELLED_KEYS: dict[str, tuple[str, str]] = {
    "compress_ratios": ("compressed KV blocks (DeepSeek-V4)", "kv"),
    # DeepSeek-V4 configs may omit compress_ratios; the grouped output projection still marks that family.
    "o_groups": ("DeepSeek-V4 attention with compressed KV blocks (compress_ratios may be missing)", "kv"),
    "index_topk": ("lightning-indexer keys cached next to the latents (DeepSeek sparse attention)", "kv"),
    "kv_source_layer_ids": ("KV shared across layers", "kv"),
    "num_kv_shared_layers": ("KV shared across layers (Gemma 3n/4)", "kv"),
    "attention_head_dim": ("a head width that differs from hidden_size / num_attention_heads in shared attention "
                           "blocks (Zamba, Zamba2)", "both"),
    "layers_block_type": ("per-layer block kinds that are not layer_types (Zamba2, Nemotron-H)", "both"),
    "dim_head": ("CPM-Ant's attention, whose cache also holds virtual prompt positions", "both"),
}

# The base transformers uses when these architectures' config.json gives none: GPT-J and CodeGen fix it in their
# modeling code, GPT-NeoX (Pythia) and Falcon default to it. Applied only when the config names its model_type.
ROPE_THETA_WHEN_ABSENT: dict[str, float] = {"gptj": 10000.0, "codegen": 10000.0, "gpt_neox": 10000.0,
                                            "falcon": 10000.0}

# Architectures whose modeling code changes the cache with no config key to read it from.
UNMODELLED_MODEL_TYPES: dict[str, str] = {
    "mimo_v2_flash": "its sliding-window layers keep twice num_key_value_heads (set in the modeling code, not the "
                     "config)",
}


# The keys posbook reads, each with the kind of value it takes. read_config checks every one a config gives (null
# stands for "not given"), before anything is computed from them, so that every function that reads a config refuses
# a wrongly typed or out-of-range value with the same message naming the key: config['num_attention_heads'] must be
# an int, got bool True. An int >= 0 (a count) is allowed where Hub configs write 0 for "none" (sliding_window: 0
# with use_sliding_window: false, head_dim: 0 in MLA configs); the functions that need one of them positive say so
# where they read it. Old key names (KEY_ALIASES) are checked under the name the config gives.
def _size(name: str, value: Any) -> None:
    _checks.number(name, value, integer=True, positive=True)


def _count(name: str, value: Any) -> None:
    _checks.number(name, value, integer=True, min_value=0)


def _positive(name: str, value: Any) -> None:
    _checks.number(name, value, positive=True)


def _nonnegative(name: str, value: Any) -> None:
    _checks.number(name, value, min_value=0)


def _name(name: str, value: Any) -> None:
    _checks.text(name, value)


def _names(name: str, value: Any) -> None:
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, (list, tuple)):
        raise TypeError(f"{name} must be a list of str, got {type(value).__name__} {value!r}")
    for i, item in enumerate(value):
        _checks.text(f"{name}[{i}]", item)


def _ints(name: str, value: Any) -> None:
    _checks.numbers(name, value, integer=True, min_len=0)


def _counts(name: str, value: Any) -> None:
    _checks.numbers(name, value, integer=True, min_len=0, min_value=0)


def _positives(name: str, value: Any) -> None:
    _checks.numbers(name, value, min_len=0, positive=True)


CONFIG_KEY_KINDS: dict[str, Callable[[str, Any], None]] = {
    **dict.fromkeys(["hidden_size", "n_embd", "num_attention_heads", "n_head", "num_key_value_heads", "n_head_kv",
                     "num_kv_heads", "num_hidden_layers", "n_layer", "max_position_embeddings", "n_positions",
                     "original_max_position_embeddings", "rotary_dim", "sliding_window_pattern",
                     "full_attention_interval", "attn_layer_period", "linear_num_key_heads", "linear_num_value_heads",
                     "no_rope_layer_interval",
                     "linear_key_head_dim", "linear_value_head_dim", "linear_conv_kernel_dim"], _size),
    **dict.fromkeys(["head_dim", "kv_channels", "sliding_window", "attention_chunk_size", "kv_lora_rank",
                     "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "global_head_dim",
                     "num_global_key_value_heads", "index_topk", "index_head_dim", "index_n_heads",
                     "attn_layer_offset", "max_window_layers", "relative_attention_num_buckets",
                     "relative_attention_max_distance"], _count),
    **dict.fromkeys(["rope_theta", "rotary_emb_base", "partial_rotary_factor", "rotary_pct", "rope_local_base_freq",
                     "compress_rope_theta"], _positive),
    **dict.fromkeys(["use_sliding_window", "alibi", "attention_k_eq_v", "mla_use_nope", "multi_query",
                     "new_decoder_architecture"], _checks.flag),
    "model_type": _name,
    "layer_types": _names,
    "no_rope_layers": _counts,
    "attn_layer_indices": _counts,
    **dict.fromkeys(["query_pre_attn_scalar", "attn_logit_softcapping", "final_logit_softcapping",
                     "softmax_scale", "alibi_bias_max"], _positive),
}
"""The top-level keys :func:`read_config` checks, key -> check(name, value); null values are not checked.

:meta hide-value:
"""

ROPE_KEY_KINDS: dict[str, Callable[[str, Any], None]] = {
    **dict.fromkeys(["rope_type", "type"], _name),
    **dict.fromkeys(["rope_theta", "factor", "partial_rotary_factor", "attention_factor", "low_freq_factor",
                     "high_freq_factor"], _positive),
    # 0 (or null) for beta_fast/beta_slow means the paper's default, as in Hugging Face; mscale 0 turns it off.
    **dict.fromkeys(["beta_fast", "beta_slow", "mscale", "mscale_all_dim"], _nonnegative),
    "original_max_position_embeddings": _size,
    **dict.fromkeys(["truncate", "mrope_interleaved"], _checks.flag),
    "mrope_section": _ints,  # each axis's count is checked with the axis named (posbook.rope.mrope_plane_axes)
    **dict.fromkeys(["short_factor", "long_factor"], _positives),
}
"""The keys of a rope dict (``rope_scaling``, ``rope_parameters`` or one layer type's dict in it) that
:func:`read_config` checks, key -> check(name, value).

:meta hide-value:
"""


def check_keys(flat: Mapping[str, Any], *, check_rope: bool = True) -> None:
    """Check every key of ``CONFIG_KEY_KINDS`` and (with ``check_rope``) of the rope dicts' ``ROPE_KEY_KINDS`` that
    ``flat`` gives (not null); raise TypeError or ValueError naming the first bad one
    (``config['rope_scaling']['factor']``)."""
    for key, check in CONFIG_KEY_KINDS.items():
        if flat.get(key) is not None:
            check(f"config[{key!r}]", flat[key])
    for key in ("rope_parameters", "rope_scaling") if check_rope else ():
        rope = flat.get(key)
        if rope is None:
            continue
        if not isinstance(rope, Mapping):
            raise TypeError(f"config[{key!r}] must be a dict or None, got {type(rope).__name__} {rope!r}")
        _check_rope_keys(f"config[{key!r}]", rope)
        for sub, inner in rope.items():
            if isinstance(inner, Mapping):  # one rope dict per layer type (Gemma 3/4) or per label (DeepSeek-V4)
                _check_rope_keys(f"config[{key!r}][{sub!r}]", inner)


def _check_rope_keys(name: str, rope: Mapping[str, Any]) -> None:
    for key, check in ROPE_KEY_KINDS.items():
        if rope.get(key) is not None:
            check(f"{name}[{key!r}]", rope[key])


def read_config(config: Any, *, check_rope: bool = True) -> dict[str, Any]:
    """A model config in any of the forms Hugging Face uses, as one flat dict with the standard key names, read as
    transformers' ``AutoConfig`` reads it.

    Args:
        config: a dict (a ``config.json`` loaded, or ``PretrainedConfig.to_dict()``), the JSON text of one, the path
            of a ``config.json`` (a :class:`pathlib.Path`, or a str naming an existing file), or a
            ``transformers.PretrainedConfig``.

    Returns:
        A new dict (the input is not changed). Reading it again gives the same dict.

    A config that names its ``model_type`` is completed as transformers completes it: a key the file leaves out
    takes the default of that model type's config class, an older key name is read through the class's
    ``attribute_map``, and a sparse ``text_config`` is completed from its own class (:func:`class_defaults`, from
    the table ``tools/hf_defaults.py`` generates from the pinned transformers).

    Every key posbook reads is checked here, once, for every function that reads a config
    (:data:`CONFIG_KEY_KINDS`, and :data:`ROPE_KEY_KINDS` in each rope dict): the error names the key, e.g.
    ``config['num_attention_heads'] must be an int, got bool True``. A null value is a key not given.

    ``check_rope=False`` leaves the rope dicts' keys unchecked here (they are checked where a spectrum is computed
    from them), so that a report can still show the parts of a config that do not depend on them.

    Raises:
        TypeError: for anything else, or a key of the wrong type.
        ValueError: for text that is not JSON, keys that contradict each other, or a key out of range.
    """
    return _read(config, check_rope)[0]


def filled_from_class(config: Any) -> dict[str, Any]:
    """The keys :func:`read_config` takes from the config class's defaults because ``config`` leaves them out (as
    transformers fills them), with their values: ``{"max_position_embeddings": 2048, "rope_theta": 10000.0}`` for
    Falcon-7B's config.json."""
    return _read(config, check_rope=False)[1]


def _read(config: Any, check_rope: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    flat = _as_dict(config)
    parent_type = flat.get("model_type")
    text = flat.pop("text_config", None)
    if text is not None:
        text = _as_dict(text, name="text_config")
        # The language part's own model type, else the one its parent's class nests (Gemma 3's text_config).
        text_type = text.get("model_type") or _sub_config_type(parent_type)
        flat.update(text)
        if text_type is not None:
            flat["model_type"] = text_type
    elif _sub_config_type(parent_type) is not None and flat.get("num_hidden_layers") is not None:
        # An older multimodal config.json with its language keys at the top level (Qwen2-VL): transformers builds
        # the text config from them, so they are read with the text config class's defaults and layout.
        flat["model_type"] = _sub_config_type(parent_type)
    _lift_nested(flat)
    check_keys(flat, check_rope=check_rope)
    _class_names(flat)
    filled = _fill_class_defaults(flat)
    for standard, old_names in KEY_ALIASES.items():
        for old in old_names:
            if old in flat:
                _rename(flat, old, standard)
    for old, standard in MODEL_KEY_ALIASES.get(flat.get("model_type"), {}).items():
        if old in flat:
            _rename(flat, old, standard)
    _falcon_heads(flat)
    _rotary_dim(flat)
    _absent_rope_theta(flat)
    _local_base_freq(flat)
    _compress_rope(flat)
    _per_layer_config(flat)
    _layer_types(flat)
    return flat, filled


# ---- what transformers fills in: the generated table of config-class defaults ---------------------------------------

DEFAULTED_KEYS: tuple[str, ...] = (
    "hidden_size", "num_attention_heads", "num_key_value_heads", "num_hidden_layers", "head_dim",
    "max_position_embeddings", "sliding_window", "attention_chunk_size", "use_sliding_window", "max_window_layers",
    "sliding_window_pattern", "partial_rotary_factor", "rotary_dim", "kv_lora_rank", "q_lora_rank",
    "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "alibi", "multi_query", "new_decoder_architecture",
    "num_kv_heads", "full_attention_interval", "attn_layer_period", "attn_layer_offset", "attn_layer_indices",
    "global_head_dim", "num_global_key_value_heads", "attention_k_eq_v", "mla_use_nope", "no_rope_layers",
    "no_rope_layer_interval",
    "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
    "linear_conv_kernel_dim", "index_topk", "index_head_dim", "index_n_heads",
    "query_pre_attn_scalar", "attn_logit_softcapping", "final_logit_softcapping", "softmax_scale",
    "position_embedding_type", "relative_attention_num_buckets", "relative_attention_max_distance",
    "use_qk_norm", "qk_layernorm", "attn_temperature_tuning", "floor_scale", "attn_scale",
    "n_positions", "n_embd", "n_head", "n_layer", "n_heads", "n_layers", "d_model", "max_seq_len",
)
"""The keys whose config-class defaults posbook fills in when a config.json leaves them out (as transformers does),
under the names the classes store them (``tools/hf_defaults.py`` records a default only where it is a constant)."""

# Nested attention configs whose keys the modeling code reads as these (MPT, DBRX): lifted to the top level.
NESTED_KEYS: dict[str, dict[str, str]] = {
    "attn_config": {"kv_n_heads": "num_key_value_heads", "alibi": "alibi", "alibi_bias_max": "alibi_bias_max",
                    "softmax_scale": "softmax_scale", "rope_theta": "rope_theta", "clip_qkv": "clip_qkv",
                    "qk_ln": "qk_layernorm"},
}

DEFAULTS_FILE = "data/hf_defaults.json"
_STANDARD_KEYS = frozenset(CONFIG_KEY_KINDS) - {old for names in KEY_ALIASES.values() for old in names}


@functools.cache
def _defaults_table() -> dict[str, Any]:
    return json.loads(resources.files("posbook").joinpath(DEFAULTS_FILE).read_text(encoding="utf-8"))


def class_defaults(model_type: str) -> dict[str, Any] | None:
    """What transformers' config class of ``model_type`` fills in, as recorded from the pinned version:
    ``{"defaults", "attribute_map", "rope_theta", "rope_parameters", "sub_configs", "layout", "position",
    "attention"}`` (keys absent where the class has nothing to say), or None for a model type transformers does not
    ship."""
    _checks.text("model_type", model_type)
    return copy.deepcopy(_entry(model_type))


def _entry(model_type: Any) -> dict[str, Any] | None:
    """The table's entry of a config's model_type (which may be missing or None), not copied: read it only."""
    return _defaults_table()["model_types"].get(model_type) if isinstance(model_type, str) else None


def transformers_keys() -> frozenset[str]:
    """Every key some config class of the pinned transformers takes (fields and attribute_map names)."""
    return frozenset(_defaults_table()["keys"])


def defaults_version() -> str:
    """The transformers version the table of config-class defaults was generated from."""
    return _defaults_table()["transformers"]


def _sub_config_type(parent_type: Any) -> str | None:
    entry = _entry(parent_type) or {}
    sub = entry.get("sub_configs", {}).get("text_config")
    return sub if isinstance(sub, str) else None


def _lift_nested(flat: dict[str, Any]) -> None:
    # MPT and DBRX keep attention settings in attn_config; their modeling code reads them from there. A key the
    # nested dict leaves out takes the nested class's default.
    entry = _entry(flat.get("model_type")) or {}
    for name, names in NESTED_KEYS.items():
        if name not in flat and name not in entry.get("sub_configs", {}):
            continue
        nested = flat.pop(name, None) or {}
        if not isinstance(nested, Mapping):
            raise TypeError(f"config[{name!r}] must be a dict, got {type(nested).__name__} {nested!r}")
        given = {**(entry.get("sub_configs", {}).get(name) or {}), **nested}
        for key, standard in names.items():
            if given.get(key) is None:
                continue
            if flat.get(standard) is not None and flat[standard] != given[key]:
                raise ValueError(f"config gives {standard}={flat[standard]!r} and {name}.{key}={given[key]!r}; "
                                 "give one")
            flat[standard] = given[key]


def _class_renames(entry: Mapping[str, Any]) -> dict[str, str]:
    # attribute_map: standard name -> the name the class stores. A stored name that is itself a key posbook reads
    # keeps its own meaning (GLM-4-MoE-Lite maps head_dim to qk_rope_head_dim, which posbook reads as MLA's rotary
    # width).
    return {standard: stored for standard, stored in entry.get("attribute_map", {}).items()
            if standard in DEFAULTED_KEYS and stored not in _STANDARD_KEYS}


def _class_names(flat: dict[str, Any]) -> None:
    # The class's own names first, so that an old name in the file and a default under the standard name are never
    # both present.
    for standard, stored in _class_renames(_entry(flat.get("model_type")) or {}).items():
        if stored in flat:
            _rename(flat, stored, standard)


def _fill_class_defaults(flat: dict[str, Any]) -> dict[str, Any]:
    """Fill what the model type's config class fills; return the keys filled, with their values."""
    entry = _entry(flat.get("model_type"))
    if entry is None:
        return {}
    before = copy.deepcopy(flat)
    _fill_from(entry, flat)
    return {k: v for k, v in flat.items() if k not in before or before[k] != v}


def _fill_from(entry: Mapping[str, Any], flat: dict[str, Any]) -> None:
    stored_as = {stored: standard for standard, stored in _class_renames(entry).items()}
    rope = rope_dict(flat) or {}
    for key, value in entry["defaults"].items():
        key = stored_as.get(key, key)
        if key in flat or any(old in flat for old in KEY_ALIASES.get(key, ())):
            continue
        if key == "rotary_dim" and (flat.get("partial_rotary_factor") is not None
                                    or rope.get("partial_rotary_factor") is not None):
            continue  # the rotated width is given as a fraction instead (transformers 5 writes GPT-J's so)
        flat[key] = copy.deepcopy(value)
    default_rope = entry.get("rope_parameters")
    nested_default = isinstance(default_rope, Mapping) and any(
        isinstance(v, Mapping) or v is None for v in default_rope.values())
    if nested_default and rope_dict(flat) is None and not any(
            flat.get(k) is not None for k in ("rope_theta", "rope_local_base_freq", "alibi")):
        # One rope dict per layer type, bases included, for a file that gives no rope key at all (Gemma 4).
        flat.pop("rope_scaling", None)
        flat["rope_parameters"] = copy.deepcopy(default_rope)
    elif default_rope and not nested_default and rope_dict(flat) is None and flat.get("alibi") is not True:
        # The class's own rope dict for a file that gives none (a null rope_scaling counts as none, as there).
        rope = copy.deepcopy(default_rope)
        if flat.get("partial_rotary_factor") is not None:
            rope.pop("partial_rotary_factor", None)
        if rope not in ({}, {"rope_type": "default"}):  # what is left of it may be the default spectrum
            flat.pop("rope_scaling", None)
            flat["rope_parameters"] = rope
    interval = flat.get("no_rope_layer_interval")
    # An empty list counts as none there too (Llama-4-Scout's config.json writes "no_rope_layers": []).
    if not flat.get("no_rope_layers") and "no_rope_layer_interval" in entry["defaults"] and interval:
        # Llama 4, SmolLM3: without no_rope_layers, every interval-th layer is NoPE (0), the others use RoPE (1).
        every = int(_checks.number("no_rope_layer_interval", interval, integer=True, positive=True))
        flat["no_rope_layers"] = [int((i + 1) % every != 0) for i in range(_layers(flat.get("num_hidden_layers")))]
    theta = entry.get("rope_theta")
    rope = rope_dict(flat) or {}
    theta_given = flat.get("rope_theta") is not None or rope.get("rope_theta") is not None or any(
        isinstance(v, Mapping) and v.get("rope_theta") is not None for v in rope.values())
    if theta is None or theta_given or flat.get("alibi") is True or "rotary_emb_base" in flat:
        return
    if isinstance(theta, Mapping):  # Gemma 3: the global layers' base, and the sliding layers' own
        flat["rope_theta"] = theta.get("global", theta.get("full_attention"))
        if not any(isinstance(v, Mapping) for v in rope.values()):
            flat.setdefault("rope_local_base_freq", theta.get("local", theta.get("sliding_attention")))
    else:
        flat["rope_theta"] = theta


def head_dim(config: Mapping[str, Any]) -> int:
    """The width of one attention head: ``head_dim``, or ``hidden_size / num_attention_heads`` (which must divide;
    transformers would floor it, posbook asks for head_dim instead)."""
    given = config.get("head_dim")
    if given is not None:
        return int(_checks.number("head_dim", given, integer=True, positive=True))
    hidden, heads = config.get("hidden_size"), config.get("num_attention_heads")
    if hidden is None or heads is None:
        raise ValueError("config must give head_dim, or hidden_size and num_attention_heads to derive it; "
                         f"got head_dim=None, hidden_size={hidden!r}, num_attention_heads={heads!r}")
    _checks.number("hidden_size", hidden, integer=True, positive=True)
    _checks.number("num_attention_heads", heads, integer=True, positive=True)
    if hidden % heads:
        raise ValueError(f"hidden_size={hidden} is not a multiple of num_attention_heads={heads}; give head_dim")
    return hidden // heads


def refuse_unmodelled(config: Mapping[str, Any], affects: str) -> None:
    """Raise :class:`NotModelledError` if ``config`` holds a key (or is an architecture) whose effect on
    ``affects`` ("rope" or "kv") posbook does not model."""
    for key, (what, scope) in UNMODELLED_KEYS.items():
        if scope in (affects, "both") and config.get(key) not in (None, 0, False, [], {}):
            raise NotModelledError(f"config has {key!r}: {what}, which posbook does not model. Remove the key "
                                   "knowingly to count only the standard part")
    model_type = config.get("model_type")
    if affects == "kv" and model_type in UNMODELLED_MODEL_TYPES:
        raise NotModelledError(f"config has model_type {model_type!r}: {UNMODELLED_MODEL_TYPES[model_type]}, "
                               "which posbook does not model")


def _as_dict(config: Any, name: str = "config") -> dict[str, Any]:
    if isinstance(config, os.PathLike) or (isinstance(config, str) and not config.lstrip().startswith("{")
                                           and Path(config).is_file()):
        config = _read_file(name, Path(config))
    elif isinstance(config, str):
        try:
            config = json.loads(config)
        except json.JSONDecodeError as error:
            raise ValueError(f"{name} must be valid JSON text or the path of an existing config.json file, got a "
                             f"string that is neither ({error})") from None
    elif not isinstance(config, Mapping) and callable(getattr(config, "to_dict", None)) \
            and hasattr(config, "model_type"):
        config = config.to_dict()  # a transformers PretrainedConfig, read without importing transformers
    if not isinstance(config, Mapping):
        raise TypeError(f"{name} must be a dict, the JSON text of one, the path of a config.json, or a transformers "
                        f"PretrainedConfig; got {type(config).__name__}")
    return copy.deepcopy(dict(config))


def _read_file(name: str, path: Path) -> Any:
    if path.is_dir() and (path / "config.json").is_file():
        path = path / "config.json"
    if not path.is_file():
        raise ValueError(f"{name} names {str(path)!r}, which is not a file (nor a folder holding config.json)")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{name}: {str(path)!r} is not JSON text ({error})") from None


def _rename(flat: dict[str, Any], old: str, standard: str) -> None:
    value = flat.pop(old)
    if value is None:
        return
    if flat.get(standard) is not None and flat[standard] != value:
        raise ValueError(f"config gives {standard}={flat[standard]!r} and its older name {old}={value!r}; give one")
    flat[standard] = value


def _falcon_heads(flat: dict[str, Any]) -> None:
    # Falcon's keys: `multi_query: true` is one K/V head (Falcon-7B); the new decoder architecture (Falcon-40B/180B)
    # has `num_kv_heads` K/V groups; otherwise every head has its own K/V. GPT-BigCode's `multi_query` means one
    # K/V head too. Outside those architectures, `num_kv_heads` is another name for num_key_value_heads.
    if "multi_query" not in flat and "new_decoder_architecture" not in flat:
        if "num_kv_heads" in flat:
            _rename(flat, "num_kv_heads", "num_key_value_heads")
        return
    kv_heads, multi_query = flat.pop("num_kv_heads", None), flat.pop("multi_query", None)
    if multi_query is None and flat.get("model_type") == "falcon":
        multi_query = True  # FalconConfig's default
    if multi_query is not None:
        _checks.flag("multi_query", multi_query)
    if flat.get("num_key_value_heads") is not None:
        return
    if flat.get("new_decoder_architecture"):
        if kv_heads is not None:
            flat["num_key_value_heads"] = kv_heads
    elif multi_query:
        flat["num_key_value_heads"] = 1
    elif multi_query is False and flat.get("num_attention_heads") is not None:
        flat["num_key_value_heads"] = flat["num_attention_heads"]


def _rotary_dim(flat: dict[str, Any]) -> None:
    # GPT-J, CodeGen and MiniMax give the rotated width in dimensions, not as a fraction of the head.
    rotary_dim = flat.pop("rotary_dim", None)
    if rotary_dim is None:
        return
    _checks.number("rotary_dim", rotary_dim, integer=True, positive=True)
    width = head_dim(flat)
    # int(head_dim · partial) must give rotary_dim back, as transformers truncates; rotary_dim / head_dim alone
    # can fall an ulp short (30/44 · 44 = 29.999...), so aim half a dimension up.
    partial = rotary_dim / width if int(width * (rotary_dim / width)) == rotary_dim else (rotary_dim + 0.5) / width
    rope = flat.get("rope_parameters")
    given = flat.get("partial_rotary_factor", rope.get("partial_rotary_factor") if isinstance(rope, Mapping) else None)
    if given is not None and int(width * given) != rotary_dim:
        raise ValueError(f"config gives rotary_dim={rotary_dim} and partial_rotary_factor={given!r} (head_dim "
                         f"{width}), which disagree")
    if given is None:
        flat["partial_rotary_factor"] = partial


def _absent_rope_theta(flat: dict[str, Any]) -> None:
    default = ROPE_THETA_WHEN_ABSENT.get(flat.get("model_type"))
    rope = rope_dict(flat) or {}
    if default is None or flat.get("rope_theta") is not None or flat.get("alibi") is True:
        return
    if rope.get("rope_theta") is None and not any(isinstance(v, Mapping) for v in rope.values()):
        flat["rope_theta"] = default


def rope_dict(config: Mapping[str, Any]) -> dict[str, Any] | None:
    """The rope dict of a config read by :func:`read_config`: ``rope_parameters`` (transformers v5), else the legacy
    ``rope_scaling``; None if it has neither (or a null one)."""
    rope = config.get("rope_parameters") if config.get("rope_parameters") is not None else config.get("rope_scaling")
    return dict(rope) if isinstance(rope, Mapping) else None


def _local_base_freq(flat: dict[str, Any]) -> None:
    # Gemma 3's config.json: sliding layers turn at their own base, `rope_local_base_freq`, with no scaling; the
    # rope_theta and rope_scaling at the top level are the global layers' (transformers' Gemma 3 config writes
    # exactly this split into per-layer-type rope_parameters).
    local = flat.pop("rope_local_base_freq", None)
    if local is None:
        return
    rope = rope_dict(flat) or {}
    if any(isinstance(v, Mapping) for v in rope.values()):
        sliding = rope.get("sliding_attention") or {}
        if sliding.get("rope_theta") not in (None, local):
            raise ValueError(f"config gives rope_local_base_freq={local!r} and a sliding_attention rope_theta of "
                             f"{sliding['rope_theta']!r}; give one")
        return
    full = {**rope, "rope_theta": rope.get("rope_theta", flat.pop("rope_theta", None))}
    if full["rope_theta"] is None:
        raise ValueError("config gives rope_local_base_freq (the sliding layers' base) but no rope_theta for the "
                         "global layers")
    flat.pop("rope_theta", None)
    flat.pop("rope_scaling", None)
    flat["rope_parameters"] = {"full_attention": full,
                               "sliding_attention": {"rope_type": "default", "rope_theta": local}}


def _compress_rope(flat: dict[str, Any]) -> None:
    # DeepSeek-V4's config.json: one flat rope dict (yarn) and a second base, `compress_rope_theta`. transformers
    # splits them by RoPE label, not by layer type: "main" is plain RoPE at rope_theta, "compress" (the compressed
    # branches) is the yarn dict at compress_rope_theta with attention_factor 1 (V4 does not scale cos and sin).
    compress_theta = flat.pop("compress_rope_theta", None)
    if compress_theta is None:
        return
    rope = rope_dict(flat) or {}
    if isinstance(rope.get("main"), Mapping) and isinstance(rope.get("compress"), Mapping):
        return
    partial = flat.get("partial_rotary_factor", rope.get("partial_rotary_factor"))
    if partial is None and flat.get("qk_rope_head_dim") and flat.get("head_dim"):
        partial = flat["qk_rope_head_dim"] / flat["head_dim"]
    shared = {} if partial is None else {"partial_rotary_factor": partial}
    main = {"rope_type": "default", "rope_theta": rope.get("rope_theta", flat.get("rope_theta")), **shared}
    compress = {**rope, "rope_theta": compress_theta, **shared}
    compress.setdefault("rope_type", compress.pop("type", "default"))
    if compress["rope_type"] == "yarn":
        compress.setdefault("attention_factor", 1.0)
    for key in ("rope_theta", "rope_scaling", "partial_rotary_factor"):
        flat.pop(key, None)
    flat["rope_parameters"] = {"main": main, "compress": compress}


def _per_layer_config(flat: dict[str, Any]) -> None:
    # transformers 5 writes Gemma 4's global layers as per-layer overrides {"05": {"head_dim": 512}, ...}.
    # posbook models per-layer-type geometry, so the overrides must be those of every full-attention layer alike.
    overrides = flat.pop("per_layer_config", None)
    if not overrides:
        return
    if not isinstance(overrides, Mapping):
        raise TypeError(f"per_layer_config must be a dict of layer index -> overrides, got {overrides!r}")
    kinds = flat.get("layer_types") or []
    if not all(isinstance(i, int) or (isinstance(i, str) and i.isdigit()) for i in overrides):
        raise ValueError(f"per_layer_config keys must be layer indices, got {sorted(map(repr, overrides))}")
    layers = {int(i) for i in overrides}
    full = {i for i, kind in enumerate(kinds) if kind == "full_attention"}
    values = {json.dumps(v, sort_keys=True) for v in overrides.values()}
    names = {"head_dim": "global_head_dim", "num_key_value_heads": "num_global_key_value_heads"}
    if layers != full or len(values) != 1 or set(next(iter(overrides.values()))) - set(names):
        raise ValueError("config has per_layer_config overrides that are not one head_dim/num_key_value_heads "
                         f"shared by every full_attention layer, which posbook does not model; got {overrides!r}")
    index, first = next(iter(overrides.items()))
    for key, value in first.items():
        if value is not None:
            CONFIG_KEY_KINDS[names[key]](f"config['per_layer_config'][{index!r}][{key!r}]", value)
        if flat.get(names[key]) not in (None, value):
            raise ValueError(f"config gives {names[key]}={flat[names[key]]!r} and per_layer_config {key}={value!r}")
        flat[names[key]] = value


def _alternating(period_key: str | None, default: int) -> Callable[[Mapping[str, Any], int], list[str]]:
    # Every period-th layer global, the others sliding (Gemma 2/3, Cohere 2, gpt-oss, OLMo 3).
    def layout(flat: Mapping[str, Any], n: int) -> list[str]:
        period = flat.get(period_key, default) if period_key else default
        _checks.number(period_key or "period", period, integer=True, positive=True)
        return ["sliding_attention" if (i + 1) % period else "full_attention" for i in range(n)]
    return layout


def _every_layer_windowed(flat: Mapping[str, Any], n: int) -> list[str]:
    # Mistral, Mixtral, Starcoder2, Phi-3, Moshi: the one window (if any) on every layer.
    return ["sliding_attention" if flat.get("sliding_window") else "full_attention"] * n


def _qwen(alternate: bool) -> Callable[[Mapping[str, Any], int], list[str]]:
    # Qwen2/Qwen3: the window only if use_sliding_window (default false), from layer max_window_layers (default 28)
    # on; Qwen2-MoE: every other layer below max_window_layers.
    def layout(flat: Mapping[str, Any], n: int) -> list[str]:
        on = flat.get("use_sliding_window", False)
        _checks.flag("use_sliding_window", on)
        start = flat.get("max_window_layers", 28)
        _checks.number("max_window_layers", start, integer=True, min_value=0)
        on = on and bool(flat.get("sliding_window"))
        if alternate:
            return ["sliding_attention" if on and (i + 1) % 2 and i < start else "full_attention" for i in range(n)]
        return ["sliding_attention" if on and i >= start else "full_attention" for i in range(n)]
    return layout


def _qwen3_moe(flat: Mapping[str, Any], n: int) -> list[str]:
    on = flat.get("use_sliding_window", False)
    return ["sliding_attention" if on is True and flat.get("sliding_window") else "full_attention"] * n


def _llama4(flat: Mapping[str, Any], n: int) -> list[str]:
    # RoPE layers attend within chunks, NoPE layers (no_rope_layers[i] == 0) globally.
    flags = flat.get("no_rope_layers")
    if not isinstance(flags, (list, tuple)) or len(flags) != n:
        raise NotModelledError("a Llama 4 config without layer_types needs no_rope_layers (one 0/1 per layer) to "
                               f"lay out its chunked and global layers, got {flags!r}")
    chunked = flat.get("attention_chunk_size") is not None
    return ["chunked_attention" if flag and chunked else "full_attention" for flag in flags]


def _all_full(flat: Mapping[str, Any], n: int) -> list[str]:
    return ["full_attention"] * n


# The rules transformers' config classes use to derive layer_types when a config.json gives none (each class's
# __post_init__), by name. Which model type uses which is not typed here: tools/hf_defaults.py finds, for every config
# class of the pinned transformers, the rule that reproduces the layer_types it derives, and records its name
# ("layout" in the table). A windowed config of a model type with no rule must give layer_types.
LAYOUT_RULES: dict[str, Callable[[Mapping[str, Any], int], list[str]]] = {
    "every_2nd_full": _alternating(None, 2),
    "every_4th_full": _alternating(None, 4),
    "sliding_window_pattern_6": _alternating("sliding_window_pattern", 6),
    "sliding_window_pattern_4": _alternating("sliding_window_pattern", 4),
    "window_on_every_layer": _every_layer_windowed,
    "qwen_window_from_max_window_layers": _qwen(alternate=False),
    "qwen_moe_window_alternating_below": _qwen(alternate=True),
    "window_on_every_layer_if_use_sliding_window": _qwen3_moe,
    "llama4_chunked_rope_layers": _llama4,
    "all_full": _all_full,
}


def layout_rule(model_type: Any) -> Callable[[Mapping[str, Any], int], list[str]] | None:
    """The rule that lays out ``model_type``'s layers when its config gives no layer_types, or None."""
    name = (_entry(model_type) or {}).get("layout")
    return LAYOUT_RULES.get(name) if name else None


# Architectures whose layers are not all alike (linear-attention or state layers, DeepSeek sparse attention, ...) and
# whose layout transformers derives from keys posbook does not read: a config of one of these without layer_types
# (or the full_attention_interval posbook reads) is refused rather than counted as all full attention.
NONUNIFORM_MODEL_TYPES = frozenset({
    "axk2", "bailing_hybrid", "deepseek_v32", "glm5_next_text", "glm_moe_dsa", "granitemoehybrid", "hy_v4",
    "hy_v4_vl_text", "inkling2_loop_text", "inkling2_text", "inkling_text", "kimi_linear", "minimax",
    "mistral_large4_text", "olmo_hybrid", "qwen3_5_moe_text", "qwen3_5_text", "qwen3_next", "qwen4_exp_text", "zaya",
})


def _layer_types(flat: dict[str, Any]) -> None:
    # Configs that describe their layers without `layer_types`, rewritten as transformers derives it. A windowed
    # config whose layout is not known stays without layer_types; posbook.kvcache.layer_kinds refuses it.
    if flat.get("layer_types") is not None:
        return
    n = flat.get("num_hidden_layers")
    interval, period = flat.get("full_attention_interval"), flat.get("attn_layer_period")
    layout = layout_rule(flat.get("model_type"))
    indices = flat.get("attn_layer_indices")
    if indices is not None:  # Bamba: attention in the listed layers, Mamba in the others
        every = set(_checks.numbers("attn_layer_indices", indices, integer=True, min_len=0, min_value=0))
        kinds = ["full_attention" if i in every else "mamba" for i in range(_layers(n))]
    elif interval is not None:  # Qwen3-Next / Qwen3.5: every n-th layer full attention, the rest linear attention
        every = int(_checks.number("full_attention_interval", interval, integer=True, positive=True))
        kinds = ["full_attention" if (i + 1) % every == 0 else "linear_attention" for i in range(_layers(n))]
    elif period is not None:  # Jamba: attention in layer i when i % period == offset (default 4), Mamba elsewhere
        _checks.number("attn_layer_period", period, integer=True, positive=True)
        offset = _checks.number("attn_layer_offset", flat.get("attn_layer_offset", 4), integer=True, min_value=0)
        kinds = ["full_attention" if i % period == offset else "mamba" for i in range(_layers(n))]
    elif layout is not None and n is not None:
        kinds = layout(flat, _layers(n))
    else:
        return
    flat["layer_types"] = kinds


def _layers(n: Any) -> int:
    if n is None:
        raise ValueError("config must give num_hidden_layers to lay out its layer kinds, got none")
    return int(_checks.number("num_hidden_layers", n, integer=True, positive=True))
