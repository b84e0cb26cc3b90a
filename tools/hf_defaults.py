"""Write ``src/posbook/data/hf_defaults.json``: what the pinned ``transformers`` fills in when a config.json leaves a
key out, for every model type it ships.

A config.json on the Hub is sparse: transformers' ``AutoConfig`` fills every key the file omits from the model
type's config class, reads older key names through the class's ``attribute_map``, and derives ``layer_types`` in
the class's ``__post_init__``. posbook never imports transformers at run time, so this tool reads those classes
once and writes, per model type:

* ``defaults``: the class's default of each key posbook reads (``posbook.hf_config.DEFAULTED_KEYS``), where that
  default is a constant (a default of None, or one ``__post_init__`` derives from other keys, is left to posbook's
  own derivation, which the oracle test holds against the class);
* ``attribute_map``: standard name -> the name the class stores (GPT-2's ``n_embd`` for ``hidden_size``);
* ``rope_theta``: the base a config without one gets (``default_theta``; per layer type for Gemma 3), and
  ``rope_parameters``: the rest of the rope dict a config without any gets, where it is more than the default
  spectrum (Apertus's llama3 scaling, Bamba's partial rotation);
* ``sub_configs``: the model type of a nested ``text_config``, and the defaults of nested attention configs (MPT's
  and DBRX's ``attn_config``);
* ``layout``: the name of the rule in ``posbook.hf_config.LAYOUT_RULES`` that gives the ``layer_types`` the class
  derives, found by building the class at several layer counts and windows and comparing;
* ``position``: how the architecture's modeling code puts position in, read from its source (``rope``,
  ``learned``, ``sinusoidal``, ``alibi``, ``t5``), for configs that name no position scheme themselves;
* ``attention``: what the modeling code adds to every attention row, read from its source: learned ``sinks``,
  ``qk_norm``;

and, for all model types at once, ``keys``: every key some config class of transformers takes (its fields and
attribute_map names), so that a key in none of them, one letter off a key posbook reads, is reported as a typo.

Run it after changing the pinned transformers: ``.venv/bin/python tools/hf_defaults.py`` (about a minute), and
review the diff. ``tests/test_hf_defaults.py`` checks that the file is this tool's output for the pinned version.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import logging
import math
import re
import sys
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "src" / "posbook" / "data" / "hf_defaults.json"
NESTED = ("attn_config",)  # nested attention configs whose keys posbook lifts (posbook.hf_config.NESTED_KEYS)


def _json_value(value: Any) -> bool:
    if value is None or isinstance(value, (str, bool, int)):
        return value is not None
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, (list, tuple)):
        return all(_json_value(v) for v in value)
    return False


def _constant_defaults(cls: type, keys: set[str]) -> dict[str, Any]:
    """The class's field defaults for ``keys``, where they are constants (a default_factory is called once)."""
    out = {}
    for field in dataclasses.fields(cls):
        if field.name not in keys:
            continue
        if field.default is not dataclasses.MISSING:
            value = field.default
        elif field.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            value = field.default_factory()  # type: ignore[misc]
        else:
            continue
        if _json_value(value):
            out[field.name] = list(value) if isinstance(value, tuple) else value
    return out


def _global_layer_defaults(cls: type) -> dict[str, Any]:
    """Gemma 4's global layers: the class writes their head width (a keyword default, not a field) as one override
    per full-attention layer in per_layer_config; posbook reads it as global_head_dim."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            overrides = cls().to_dict().get("per_layer_config")
    except Exception:
        return {}
    values = list(overrides.values()) if isinstance(overrides, dict) else []
    if not values or any(v != values[0] for v in values) or not isinstance(values[0], dict):
        return {}
    width = values[0].get("head_dim")
    return {"global_head_dim": width} if isinstance(width, int) else {}


def _derived(cls: type, key: str, default: Any) -> bool:
    """Whether the class replaces the field default of ``key`` with a value derived from other keys: built with its
    defaults, and with sizes changed, the attribute is not the field default."""
    probes = [{}, {"hidden_size": 96, "num_attention_heads": 6, "num_hidden_layers": 5}]
    for kwargs in probes:
        kwargs = {k: v for k, v in kwargs.items() if k != key}  # the probe changes other keys, never this one
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                config = cls(**{k: v for k, v in kwargs.items() if k in {f.name for f in dataclasses.fields(cls)}})
        except Exception:
            continue
        # to_dict(), not the attribute: Gemma 4's per-layer head_dim cannot be read as one attribute.
        if config.to_dict().get(key, default) != default:
            return True
    return False


def _has_rope(cls: type) -> bool:
    names = {f.name for f in dataclasses.fields(cls)}
    return bool(names & {"rope_parameters", "rope_theta", "rope_scaling"})


def _rope_theta(cls: type) -> Any:
    # What a file without any rope key gets: the default instance's base where it builds one flat rope dict (some
    # classes build it in __post_init__ with a base of their own), else the class's default_theta.
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rope = cls().to_dict().get("rope_parameters")
    except Exception:
        rope = None
    if isinstance(rope, dict) and _json_value(rope.get("rope_theta")) and not isinstance(rope["rope_theta"], bool):
        return float(rope["rope_theta"])
    theta = getattr(cls, "default_theta", None)
    if isinstance(theta, dict):
        return {str(k): float(v) for k, v in theta.items()}
    return None if theta is None else float(theta)


def _default_rope(cls: type) -> dict[str, Any] | None:
    """The rope dict the class builds for a config.json that gives none, less its base (recorded apart), where it is
    more than the default spectrum: Apertus's llama3 scaling, Bamba's partial rotation; one dict per layer type is
    recorded whole, bases included (Gemma 4's proportional global layers, NoPE layers as null)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            rope = cls().to_dict().get("rope_parameters")
    except Exception:
        return None
    if not isinstance(rope, dict):
        return None
    if any(isinstance(v, dict) for v in rope.values()):  # one dict per layer type, each with its own base
        nested = {k: v for k, v in rope.items() if isinstance(v, dict) or v is None}
        ok = all(v is None or all(_json_value(x) for x in v.values() if x is not None) for v in nested.values())
        return {k: None if v is None else {x: y for x, y in sorted(v.items()) if y is not None}
                for k, v in sorted(nested.items())} if ok else None
    # the base is recorded apart; a factor of 1 rotates every dimension, as no factor does
    rope = {k: v for k, v in rope.items() if k != "rope_theta" and v is not None
            and not (k == "partial_rotary_factor" and v == 1)}
    if set(rope) <= {"rope_type"} and rope.get("rope_type", "default") == "default":
        return None
    return rope if all(_json_value(v) for v in rope.values()) else None


def _layout(cls: type, rules: dict[str, Any], source: str) -> str | None:
    """The rule of LAYOUT_RULES that gives every probe's layer_types, or None where the class writes none or all
    probes are one kind of layer (posbook's default). A class with a window but no layer_types (Mistral, Mixtral,
    Qwen3-MoE) leaves the layout to its modeling code, which applies the window to every layer, under
    use_sliding_window where the code reads that key."""
    fields = {f.name for f in dataclasses.fields(cls)}
    if "layer_types" not in fields:
        if "sliding_window" not in fields or not re.search(r"config\.sliding_window", source):
            return None
        if "use_sliding_window" in fields and _drops_window(cls):
            return "window_on_every_layer_if_use_sliding_window"
        return "window_on_every_layer"
    probes = []
    for n in (7, 12):
        for extra in ({}, {"sliding_window": 8}, {"sliding_window": 8, "use_sliding_window": True},
                      {"sliding_window": 8, "use_sliding_window": True, "max_window_layers": 3},
                      {"sliding_window": 8, "sliding_window_pattern": 3}, {"attention_chunk_size": 8}):
            kwargs = {"num_hidden_layers": n, **{k: v for k, v in extra.items()
                                                 if k in fields or k == "sliding_window_pattern"}}
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    written = cls(**kwargs).to_dict()
            except Exception:
                continue
            kinds = written.get("layer_types")
            if isinstance(kinds, list) and len(kinds) == n:
                given = {k: v for k, v in written.items() if k != "layer_types"}
                given.update({k: v for k, v in kwargs.items() if k == "sliding_window_pattern"})
                probes.append((given, n, [str(k) for k in kinds]))
    if not probes or all(set(kinds) == {"full_attention"} for *_, kinds in probes):
        return None
    for name, rule in rules.items():
        try:
            if all(rule(given, n) == kinds for given, n, kinds in probes):
                return name
        except Exception:
            continue
    return "unknown"


def _drops_window(cls: type) -> bool:
    """Whether the class clears sliding_window when use_sliding_window is false (Qwen3-MoE's __post_init__)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return cls(sliding_window=8, use_sliding_window=False).sliding_window is None
    except Exception:
        return False


_POSITION_PATTERNS = {
    "rope": r"RotaryEmbedding|apply_rotary_pos_emb",
    "alibi": r"alibi",
    "t5": r"relative_attention_num_buckets",
    "sinusoidal": r"Sinusoidal|sinusoidal|positional_encoding",
    "learned": r"LearnedPositionalEmbedding|PositionalEmbeddings?\(nn\.Embedding\)|nn\.Embedding\(\s*(config\.)?"
               r"(max_position_embeddings|n_positions|max_seq_len|self\.max_position_embeddings)|"
               r"position_embedding_type",
}


# What the modeling code does to every attention row whatever the config says: learned sink logits (gpt-oss), and
# q and k normalised per head (Qwen3, OLMo 2, Gemma 3, ...; where a config key switches it, the key decides).
_ATTENTION_PATTERNS = {
    "sinks": r"self\.sinks\s*=\s*nn\.Parameter",
    "qk_norm": r"self\.(q_norm|q_layernorm|query_norm|q_ln)\s*=",
}


def _modeling_source(model_type: str, names: dict[str, str]) -> str:
    """The text of the module that defines the model type's model class ('' where transformers has none): the
    class of its base model, else of its causal LM (GPT-SW3 runs GPT-2's code), else modeling_<type>."""
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, MODEL_MAPPING_NAMES

    for mapping in (MODEL_MAPPING_NAMES, MODEL_FOR_CAUSAL_LM_MAPPING_NAMES):
        name = mapping.get(model_type)
        name = name[0] if isinstance(name, (list, tuple)) else name
        try:
            cls = getattr(transformers, name) if name else None
        except Exception:  # a class that cannot be imported here
            cls = None
        if cls is not None:
            spec = importlib.util.find_spec(cls.__module__)
            if spec is not None and spec.origin is not None:
                return Path(spec.origin).read_text(encoding="utf-8")
    module = names.get(model_type, model_type.replace("-", "_"))
    try:
        spec = importlib.util.find_spec(f"transformers.models.{module}.modeling_{module.split('.')[-1]}")
    except (ImportError, ValueError):
        spec = None
    if spec is None or spec.origin is None:
        return ""
    return Path(spec.origin).read_text(encoding="utf-8")


def _position(source: str) -> list[str]:
    """The position schemes a modeling source mentions (in a fixed order)."""
    return [scheme for scheme, pattern in _POSITION_PATTERNS.items() if re.search(pattern, source)]


def build() -> dict[str, Any]:
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING, CONFIG_MAPPING_NAMES, \
        model_type_to_module_name

    from posbook.hf_config import DEFAULTED_KEYS, LAYOUT_RULES

    transformers.logging.set_verbosity_error()
    logging.disable(logging.WARNING)
    module_names = {t: model_type_to_module_name(t) for t in CONFIG_MAPPING_NAMES}
    keys = set(DEFAULTED_KEYS)
    entries: dict[str, Any] = {}
    all_keys: set[str] = set()
    for model_type in sorted(CONFIG_MAPPING_NAMES):
        cls = CONFIG_MAPPING[model_type]
        if not dataclasses.is_dataclass(cls):
            continue
        all_keys.update(f.name for f in dataclasses.fields(cls))
        all_keys.update(map(str, getattr(cls, "attribute_map", None) or {}))
        defaults = {k: v for k, v in _constant_defaults(cls, keys).items() if not _derived(cls, k, v)}
        defaults.update(_global_layer_defaults(cls))
        entry: dict[str, Any] = {"defaults": dict(sorted(defaults.items()))}
        amap = {str(k): str(v) for k, v in (getattr(cls, "attribute_map", None) or {}).items() if k != v}
        if amap:
            entry["attribute_map"] = dict(sorted(amap.items()))
        if _has_rope(cls):
            entry["rope_theta"] = _rope_theta(cls)
            rope = _default_rope(cls)
            if rope:
                entry["rope_parameters"] = rope
        subs = {}
        for name, sub in (getattr(cls, "sub_configs", None) or {}).items():
            sub_type = getattr(sub, "model_type", "")
            if name == "text_config" and sub_type in CONFIG_MAPPING_NAMES:
                subs[name] = sub_type
            elif name in NESTED and dataclasses.is_dataclass(sub):
                subs[name] = {f.name: v for f in dataclasses.fields(sub)
                              if f.default is not dataclasses.MISSING and _json_value(v := f.default)}
        if subs:
            entry["sub_configs"] = subs
        source = _modeling_source(model_type, module_names)
        layout = _layout(cls, LAYOUT_RULES, source)
        if layout is not None:
            entry["layout"] = layout
        attention = [name for name, pattern in _ATTENTION_PATTERNS.items() if re.search(pattern, source)]
        if attention:
            entry["attention"] = attention
        if source:  # [] where the code puts no position in; absent where transformers has no model code for it
            entry["position"] = _position(source)
        entries[model_type] = entry
    return {"transformers": transformers.__version__, "keys": sorted(all_keys), "model_types": entries}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="exit 1 if the file differs from a fresh build")
    args = p.parse_args(argv)
    text = json.dumps(build(), indent=1, sort_keys=False) + "\n"
    if args.check:
        same = OUT.exists() and OUT.read_text(encoding="utf-8") == text
        print("hf_defaults.json is up to date" if same else "hf_defaults.json differs from a fresh build")
        return 0 if same else 1
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT.relative_to(ROOT)}: {len(json.loads(text)['model_types'])} model types")
    return 0


if __name__ == "__main__":
    sys.exit(main())
