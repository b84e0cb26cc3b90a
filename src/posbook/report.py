"""What a model's config does to position and to the KV cache: one report, as data, as text or as a figure.

:func:`config_report` reads a config (a ``config.json`` loaded, its text, or a ``PretrainedConfig``) and gathers,
for each attention layer type, the rotary spectrum its layers use (rope type and parameters, wavelengths, how many
planes turn fully within the context and within the training length, the ramp of context extension, the factors
on the logits), then the KV cache at a context length, batch size and dtype, and warnings for settings that are
known to go wrong, each with its source. :func:`format_report` prints the report for a terminal,
:func:`plot_report` draws each layer type's spectrum. ``python -m posbook inspect CONFIG.json`` runs all three.

Every number comes from the module that defines its mechanism (:mod:`posbook.scaling`, :mod:`posbook.spectrum`,
:mod:`posbook.kvcache`); a config those modules refuse is refused here with their message.
"""

from __future__ import annotations

import math
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any, Mapping

import torch

from . import _checks, hf_config
from .bias import alibi_slopes
from .hf_config import NotModelledError, read_config, rope_dict
from .logit_scales import llama4_attention_scale
from .kvcache import (KV_LAYER_TYPES, STATE_LAYER_TYPES, WINDOW_KEYS, cache_kind, format_bytes,
                      indexer_values_per_layer, kv_cache_bytes, kv_cache_bytes_per_token, kv_cache_table, layer_kinds,
                      linear_state_bytes, without_indexer)
from .scaling import ROPE_TYPES, RopeSpec, rope_parameters, rope_spec, yarn_ramp_bounds, yarn_softmax_scale
from .spectrum import frequency_ratio, rope_turns, rope_wavelengths

KV_DTYPES = {"bf16": 2, "fp16": 2, "fp32": 4, "fp8": 1}
"""The cache dtypes a report accepts, name → bytes per cached number."""

_FORMAT = "posbook.config_report/2"
_STATE_BYTES = 4  # linear-attention state stays in fp32 whatever the cache dtype (Qwen3-Next: mamba_ssm_dtype)
_WIDTH = 88  # a terminal, and the column of the book page that shows the command
_LABEL = 19  # width of the label column in format_report
_SPAN = {"sliding_attention": "window", "chunked_attention": "chunk"}  # what a local layer keeps, in words

_SOURCES = {
    "dynamic": "https://github.com/huggingface/transformers/issues/25104",
    "static_yarn": "https://huggingface.co/Qwen/Qwen2.5-32B-Instruct#processing-long-texts",
    "implicit_factor": "https://github.com/huggingface/transformers/issues/38224",
    "original_twice": "https://github.com/huggingface/transformers/pull/42513",
    "longrope": "https://github.com/huggingface/transformers/pull/33129",
    "window_off": "https://github.com/huggingface/transformers/issues/38002",
    "beyond_training": "https://arxiv.org/abs/2306.15595",
    "bf16_angles": "https://github.com/huggingface/transformers/pull/29285",
    "past_the_table": "https://arxiv.org/abs/2108.12409",
    "misspelt_key": "https://huggingface.co/docs/transformers/main_classes/configuration",
}


def config_report(config: Any, *, context: int | None = None, batch: int = 1, dtype: str = "bf16") -> dict[str, Any]:
    """What a config does to position and to the KV cache, as a JSON-able dict.

    Args:
        config: a config dict, its JSON text, or a ``transformers.PretrainedConfig`` (see
            :func:`posbook.hf_config.read_config`).
        context: the context length N the report counts turns and cache bytes at; default
            ``max_position_embeddings``.
        batch: sequences in the cache.
        dtype: the cache dtype, ``"bf16"``, ``"fp16"``, ``"fp32"`` or ``"fp8"``.

    Returns:
        ``{"format", "model_type", "filled_from_class", "context", "batch", "dtype", "max_position_embeddings",
        "layers", "rope", "kv_cache", "logits", "warnings"}``. ``filled_from_class`` holds the keys the config
        leaves out and its config class fills in (:func:`posbook.hf_config.filled_from_class`). ``layers`` counts
        the layers of each ``layer_types`` kind. ``rope`` holds one entry per rope dict or position scheme: for
        configs with one rope dict per layer type (Gemma 3/4, DeepSeek-V4) one per key, otherwise one per attention
        layer type, merged where they are the same. Its ``encoding`` is ``"rope"``; ``"nope"`` (NoPE layers, a null
        rope dict); ``"alibi"`` (with ``slopes``, one per head, and the ``penalty_at_context`` of the steepest and
        flattest head); ``"learned"`` (with ``table_rows`` and ``positions_without_row`` at N); ``"sinusoidal"``;
        ``"t5"`` (``num_buckets``, ``max_distance``); ``"unknown"`` (a config without a model_type posbook knows
        and without rope keys); ``"refused"`` (posbook does not model that rope dict) or ``"invalid"`` (the rope
        dict is wrong: a misspelt key, a bad value); every entry but ``"rope"`` gives the ``reason``. A part of the
        cache posbook does not model is ``{"error": message}`` (``kv_cache`` itself, or its ``linear_state``): the
        rest of the report still stands. A ``"rope"`` entry gives the spectrum at N (``wavelengths``, null for an
        unrotated plane, and ``frequency_ratio`` θ'/θ per plane) and its summary; its counts of planes turning fully
        are of that spectrum, and ``turning_planes["original_unscaled"]`` of the spectrum pre-training ran, within
        ``original_max_position_embeddings`` (null where the config does not name that length).
        ``logits`` lists everything that scales, caps or adds to the attention logits as ``{"what", "value",
        "source"}``. ``warnings`` is a list of ``{"message", "source"}``, the source a URL.

    Raises:
        ValueError, TypeError: for a bad argument, or a config of which posbook can report nothing (the
            first refusal's message).
    """
    _checks.choice("dtype", dtype, tuple(KV_DTYPES))
    _checks.number("batch", batch, integer=True, positive=True)
    if context is not None:
        _checks.number("context", context, integer=True, positive=True)
    # The rope dicts are checked where each spectrum is computed, so that a bad one leaves the rest of the report.
    flat = read_config(config, check_rope=False)
    max_pos = flat.get("max_position_embeddings")
    if max_pos is not None:
        _checks.number("max_position_embeddings", max_pos, integer=True, positive=True)
    _refuse_missing(flat, context)
    context = max_pos if context is None else context
    # The cache does not depend on the rope dicts: it is read without them, so that a bad one leaves it standing.
    cache_flat = {k: v for k, v in flat.items() if k not in ("rope_scaling", "rope_parameters")}
    try:
        kinds, kinds_error = layer_kinds(cache_flat), None
    except (ValueError, TypeError) as error:  # layer kinds posbook cannot lay out: the rope dicts can still be read
        kinds, kinds_error = None, str(error)
    report = {
        "format": _FORMAT,
        "model_type": flat.get("model_type"),
        "filled_from_class": hf_config.filled_from_class(config),
        "context": context,
        "batch": batch,
        "dtype": dtype,
        "max_position_embeddings": max_pos,
        "layers": dict(Counter(kinds or [])),
        "rope": _rope_entries(flat, kinds, context),
        "kv_cache": {"error": kinds_error} if kinds is None else _refusal_or(
            lambda: _kv_cache(cache_flat, kinds, context, batch, KV_DTYPES[dtype]),
            lambda error: {"error": str(error)}),
    }
    refusals = [e["reason"] for e in report["rope"] if e["encoding"] in ("refused", "invalid")]
    if "error" in report["kv_cache"] and len(refusals) == len(report["rope"]):
        raise ValueError((refusals or [report["kv_cache"]["error"]])[0])  # nothing posbook can report
    report["logits"] = _logits(flat, report)
    report["warnings"] = _warnings(flat, report)
    return report


def _class_entry(flat: Mapping[str, Any]) -> dict[str, Any] | None:
    """What transformers' config class of the config's model_type fills in, or None (no or unknown model_type)."""
    model_type = flat.get("model_type")
    return hf_config.class_defaults(model_type) if isinstance(model_type, str) else None


def _refuse_missing(flat: Mapping[str, Any], context: int | None) -> None:
    """Every key the report needs and neither the config nor its class's defaults give, named at once."""
    missing = []
    if flat.get("num_hidden_layers") is None:
        missing.append("num_hidden_layers")
    if flat.get("num_attention_heads") is None and flat.get("kv_lora_rank") is None:
        missing.append("num_attention_heads")
    if flat.get("head_dim") is None and flat.get("hidden_size") is None and flat.get("qk_rope_head_dim") is None:
        missing.append("hidden_size (or head_dim)")
    if context is None and flat.get("max_position_embeddings") is None:
        missing.append("max_position_embeddings (or the context length to report at: --context N on the command "
                       "line, context=N in Python)")
    if missing:
        known = _class_entry(flat) is not None
        filled = (f"; the config class of model_type {flat['model_type']!r} has no default for "
                  f"{'them' if len(missing) > 1 else 'it'} either") if known else ""
        raise ValueError(f"config gives no {', no '.join(missing)}{filled}")


def _refusal_or(compute: Any, refused: Any) -> Any:
    """compute(), or refused(error) where posbook does not model that part of the config or finds it wrong (a
    misspelt key, a contradiction): the rest is still reported, and the message says what is wrong."""
    try:
        return compute()
    except (ValueError, TypeError) as error:
        return refused(error)


def _failed(layer_types: list[str], layers: int | None, error: Exception) -> dict[str, Any]:
    """The entry of a rope dict posbook cannot read: ``refused`` where it does not model it, ``invalid`` where the
    dict is wrong."""
    return _no_rope(layer_types, layers, "refused" if isinstance(error, NotModelledError) else "invalid",
                    str(error))


# ---- position -------------------------------------------------------------------------------------------------------

def _nope_layers(flat: Mapping[str, Any], n_layers: int) -> dict[int, str]:
    """Layers whose attention skips RoPE by a config key, index → the key that says so."""
    nope: dict[int, str] = {}
    flags = flat.get("no_rope_layers")  # Llama 4 and SmolLM3: 1 = the layer uses RoPE, 0 = NoPE
    if flags is not None:
        if not isinstance(flags, (list, tuple)) or len(flags) < n_layers:
            raise ValueError(f"no_rope_layers must be a list of 0/1 with num_hidden_layers={n_layers} entries, got "
                             f"{flags!r}")
        nope.update({i: "no_rope_layers marks them NoPE" for i in range(n_layers) if flags[i] == 0})
    if flat.get("mla_use_nope") is True:  # Kimi Linear: MLA layers without rotary embedding
        nope.update({i: "mla_use_nope: true" for i in range(n_layers)})
    return nope


def _nested(rope: Any) -> bool:
    return isinstance(rope, Mapping) and any(isinstance(v, Mapping) for v in rope.values())


def position_scheme(config: Any) -> tuple[str, str]:
    """How a config puts position into attention, and the key or code that says so:
    ``("rope" | "alibi" | "learned" | "sinusoidal" | "t5" | "forget_gate" | "stick_breaking" | "nope" | "unknown",
    source)``. FoX's forget gates (``fgate_type``, Lin et al. 2025) and stick-breaking attention (its model_type) are
    the two ways of computing position from content that ship in configs.

    ``config`` is any form :func:`~posbook.hf_config.read_config` reads. The config's own keys decide first
    (``alibi: true``, a rope base or rope dict); otherwise the architecture's modeling code, as recorded from
    transformers for its ``model_type``. ``"unknown"`` only for a config without a model_type transformers ships
    and without position keys."""
    flat = read_config(config, check_rope=False)
    if flat.get("alibi") is True:
        return "alibi", "alibi: true"
    if flat.get("fgate_type") not in (None, "none"):
        return "forget_gate", f"fgate_type: {flat['fgate_type']!r}"
    if "stickbreaking" in str(flat.get("model_type", "")).replace("_", "").replace("-", "").lower():
        return "stick_breaking", f"model_type {flat['model_type']!r}"
    if flat.get("rope_theta") is not None or rope_dict(flat):
        return "rope", "rope_theta" if not rope_dict(flat) else "rope dict"
    model_type = flat.get("model_type")
    entry = _class_entry(flat)
    if entry is None:
        return "unknown", "no rope_theta, no rope dict, and no model_type that transformers ships"
    code = f"the modeling code of model_type {model_type!r}"
    if "position" not in entry:
        return "unknown", f"transformers has no modeling code for model_type {model_type!r} that posbook could read"
    schemes = [scheme for scheme in entry["position"] if scheme != "rope"]
    if "alibi" in schemes and flat.get("alibi") is not False:
        return "alibi", code
    if "t5" in schemes and flat.get("relative_attention_num_buckets"):
        return "t5", "relative_attention_num_buckets"
    absolute = flat.get("position_embedding_type", "absolute") == "absolute"
    if "learned" in schemes and absolute and flat.get("max_position_embeddings") is not None:
        return "learned", code
    if "sinusoidal" in schemes:
        return "sinusoidal", code
    if "learned" in schemes:
        return "learned", code
    return "nope", code + ", which adds no position to attention"


def _rope_entries(flat: Mapping[str, Any], kinds: list[str] | None, context: int) -> list[dict[str, Any]]:
    """One entry per rope dict (or per position scheme without one); ``kinds`` None when the layer kinds are
    unknown (then one for every layer)."""
    rope = rope_dict(flat)
    attention = [k for k in dict.fromkeys(kinds or []) if k in KV_LAYER_TYPES] if kinds is not None else ["every layer"]
    layers_of = {k: [i for i, kind in enumerate(kinds) if kind == k] for k in attention} if kinds is not None else {}
    n_attention = sum(map(len, layers_of.values())) if kinds is not None else None
    scheme, source = position_scheme(flat)
    if scheme != "rope":
        return [_other_position(flat, scheme, source, attention, n_attention, context)]
    if kinds is None and not _nested(rope):
        return [_refusal_or(lambda: _spectrum_entry(flat, None, None, {}, context),
                            lambda error: _failed(attention, None, error))]
    kinds = kinds or []
    nope = _nope_layers(flat, len(kinds))
    entries = []
    if _nested(rope):
        # One rope dict per key; a key that is not a layer type (DeepSeek-V4's "main", "compress") counts no layers.
        for key, sub in rope.items():
            layers = layers_of.get(key)
            if sub is None:
                n = None if layers is None else len(layers)
                entries.append(_no_rope([key], n, "nope", "its rope dict is null"))
            else:
                entries.append(_refusal_or(lambda: _spectrum_entry(flat, key, layers, nope, context),
                                           lambda error: _failed([key], None if layers is None else len(layers),
                                                                 error)))
        return entries
    for kind in attention:
        if all(i in nope for i in layers_of[kind]):
            reason = "; ".join(sorted({nope[i] for i in layers_of[kind]}))
            entry = _no_rope([kind], len(layers_of[kind]), "nope", reason)
        else:
            entry = _refusal_or(lambda: _spectrum_entry(flat, kind, layers_of[kind], nope, context),
                                lambda error: _failed([kind], len(layers_of[kind]), error))
        same = next((e for e in entries if _same(e, entry)), None)
        if same is None:
            entries.append(entry)
        else:
            same["layer_types"] += entry["layer_types"]
            same["layers"] += entry["layers"]
            if same["encoding"] == "rope":
                same["nope_layers"] += entry["nope_layers"]
                same["windows"].update(entry["windows"])
    return entries


def _other_position(flat: Mapping[str, Any], scheme: str, source: str, attention: list[str], layers: int | None,
                    context: int) -> dict[str, Any]:
    """The entry of a config whose layers put position in without rotation."""
    rows = flat.get("max_position_embeddings")
    if scheme == "alibi":
        heads = flat.get("num_attention_heads")
        slopes = alibi_slopes(int(heads), dtype=torch.float64).tolist() if isinstance(heads, int) else []
        entry = _no_rope(attention, layers, "alibi", f"a linear penalty on distance added to the logits, one slope "
                                                     f"per head ({source})")
        entry.update({"slopes": slopes, "penalty_at_context": [slope * (context - 1) for slope in slopes[:1]]
                      + [slope * (context - 1) for slope in slopes[-1:]]})
        return entry
    if scheme == "learned":
        entry = _no_rope(attention, layers, "learned", f"a table of {rows:,} trained position vectors added to the "
                                                       f"token embeddings ({source})"
                         if rows else f"trained position vectors added to the token embeddings ({source})")
        entry.update({"table_rows": rows, "positions_without_row": max(0, context - rows) if rows else None})
        return entry
    if scheme == "sinusoidal":
        return _no_rope(attention, layers, "sinusoidal", f"fixed sinusoids added to the token embeddings ({source})")
    if scheme == "t5":
        buckets, distance = flat.get("relative_attention_num_buckets"), flat.get("relative_attention_max_distance")
        entry = _no_rope(attention, layers, "t5", f"a learned bias per head for each of {buckets} buckets of "
                                                  f"distance, the same for every distance past {distance} ({source})")
        entry.update({"num_buckets": buckets, "max_distance": distance})
        return entry
    if scheme == "forget_gate":
        rope = " and RoPE besides (use_rope: true)" if flat.get("use_rope") is True else ", no RoPE"
        return _no_rope(attention, layers, "forget_gate", f"a forget gate per head and token, computed from content: "
                                                          f"each logit gets the sum of the log gates between key and "
                                                          f"query, a data-dependent ALiBi{rope} ({source}); the cache "
                                                          f"also holds one gate per token and head")
    if scheme == "stick_breaking":
        return _no_rope(attention, layers, "stick_breaking", f"no position encoding: stick-breaking attention weights "
                                                             f"each key by what the nearer keys left, an order of "
                                                             f"recency computed from content ({source})")
    if scheme == "nope":
        return _no_rope(attention, layers, "nope", f"no position encoding: {source}")
    return _no_rope(attention, layers, "unknown", f"posbook cannot tell how position enters: {source}")


def _same(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two entries report the same thing for different layer types (then they are shown once)."""
    summed = ("layer_types", "layers", "nope_layers", "windows")
    return {k: v for k, v in a.items() if k not in summed} == {k: v for k, v in b.items() if k not in summed}


def _no_rope(layer_types: list[str], layers: int | None, encoding: str, reason: str) -> dict[str, Any]:
    return {"layer_types": list(layer_types), "layers": layers, "encoding": encoding, "reason": reason}


def _window(flat: Mapping[str, Any], kind: str) -> int | None:
    return flat.get(WINDOW_KEYS[kind]) if kind in WINDOW_KEYS else None


def _spectrum_entry(flat: Mapping[str, Any], layer_type: str, layers: list[int] | None, nope: Mapping[int, str],
                    context: int) -> dict[str, Any]:
    spec = rope_spec(flat, layer_type)
    inv_freq, attention_factor = rope_parameters(flat, context, layer_type=layer_type, dtype=torch.float64)
    ratio = frequency_ratio(flat, context, layer_type=layer_type)
    rotated = inv_freq > 0
    n_rotated = int(rotated.sum())
    wavelengths = rope_wavelengths(inv_freq)
    # Only original_max_position_embeddings names the length pre-training ran at; a rescaling without it (Gemma 3's
    # linear factor) leaves that length unstated, and max_position_embeddings is then the length served.
    pretrained = spec.params.get("original_max_position_embeddings", flat.get("original_max_position_embeddings"))
    original = pretrained if pretrained is not None else spec.max_position_embeddings

    def turning(length: int | None) -> int | None:
        return None if length is None else int((rope_turns(inv_freq, length) >= 1).sum())

    # MLA (DeepSeek, Kimi K2) rotates only its decoupled qk_rope_head_dim part; the qk_nope_head_dim part of each
    # q·k product carries no position.
    mla = flat.get("kv_lora_rank") is not None and flat.get("qk_nope_head_dim") is not None \
        and spec.head_dim == flat.get("qk_rope_head_dim")
    head_dim = spec.head_dim + (flat["qk_nope_head_dim"] if mla else 0)
    window = _window(flat, layer_type)
    # A query attends to itself and the window - 1 tokens before it, never more than the context holds.
    windows = {} if not window else {layer_type: {"tokens": window, "seen": min(window, context),
                                                  "turning_planes": turning(min(window, context))}}
    kept = ratio[rotated]
    unchanged = int(torch.isclose(kept, torch.ones_like(kept), rtol=1e-12, atol=0).sum())
    if unchanged == n_rotated:
        rescaling = "none"
    elif bool(torch.isclose(kept, kept[:1], rtol=1e-12, atol=0).all()):
        rescaling = "uniform"
    else:
        rescaling = "per_plane"
    softmax_scale = yarn_softmax_scale(flat, layer_type=layer_type)
    return {
        "layer_types": [layer_type or "every layer"],
        "layers": None if layers is None else len(layers),
        "encoding": "rope",
        "rope_type": spec.rope_type,
        "params": dict(spec.params),
        "rope_theta": spec.rope_theta,
        "head_dim": head_dim,
        "rotary_dim": 2 * n_rotated,
        "unrotated_dims": head_dim - 2 * n_rotated,
        "planes": inv_freq.numel(),
        "rotated_planes": n_rotated,
        "wavelength_min": float(wavelengths[rotated].min()),
        "wavelength_max": float(wavelengths[rotated].max()),
        "original_length": original,
        # Pre-training ran the unscaled spectrum: its turns within the pre-training length are the ones the model
        # learned (None where the config does not state that length).
        "turning_planes": {"context": turning(context), "original": turning(original),
                           "original_unscaled": None if pretrained is None else int(
                               (rope_turns(torch.where(ratio > 0, inv_freq / ratio, inv_freq), original) >= 1).sum())},
        "windows": windows,
        "rescaling": rescaling,
        "unchanged_planes": unchanged,
        "min_ratio": float(kept.min()),
        "ramp": _ramp(spec),
        "attention_factor": attention_factor,
        "softmax_scale": softmax_scale,
        "logit_factor": attention_factor ** 2 * softmax_scale,
        "nope_layers": sum(i in nope for i in layers or ()),
        "wavelengths": [w if math.isfinite(w) else None for w in wavelengths.tolist()],
        "frequency_ratio": ratio.tolist(),
    }


def _ramp(spec: RopeSpec) -> dict[str, Any] | None:
    """Where the type blends kept and interpolated planes: YaRN's plane bounds, or llama3's wavelength bounds."""
    keys, params = ROPE_TYPES[spec.rope_type].keys, spec.params
    original = params.get("original_max_position_embeddings")
    if "beta_fast" in keys:
        # A null or 0 beta means the paper's default, as the spectrum itself reads it.
        given = {k: params[k] for k in ("beta_fast", "beta_slow") if params.get(k)}
        if params.get("truncate") is not None:
            given["truncate"] = params["truncate"]
        low, high = yarn_ramp_bounds(spec.rotary_dim, spec.rope_theta, original, **given)
        return {"kind": "planes", "low": low, "high": high}
    if "low_freq_factor" in keys:
        return {"kind": "wavelengths", "short": original / params["high_freq_factor"],
                "long": original / params["low_freq_factor"]}
    return None


# ---- the KV cache ---------------------------------------------------------------------------------------------------

def _kv_cache(flat: Mapping[str, Any], kinds: list[str], context: int, batch: int, nbytes: int) -> dict[str, Any]:
    index_values = indexer_values_per_layer(flat)
    attention = without_indexer(flat) if index_values else flat
    per_token = kv_cache_bytes_per_token(attention, nbytes)
    total = kv_cache_bytes(attention, context, nbytes) * batch
    windows = {kind: _window(flat, kind) for kind in WINDOW_KEYS if kind in kinds}
    cache = {
        "kind": cache_kind(flat),
        "bytes_per_number": nbytes,
        "bytes_per_token": per_token,
        "total_bytes": total,
        "windows": windows,
        "indexer": None,
        "linear_state": None,
        "state_layers": {kind: n for kind, n in Counter(kinds).items() if kind in STATE_LAYER_TYPES},
    }
    if index_values:
        # One token is kept by every layer, so the table's row for length 1 is the indexer's cost per token.
        one, full = kv_cache_table(flat, seq_lens=[1, context], dtype_bytes=nbytes)
        cache["indexer"] = {"values_per_layer": index_values, "bytes_per_token": one["indexer_bytes"],
                            "total_bytes": full["indexer_bytes"] * batch}
    if "linear_attention" in kinds:
        def state() -> dict[str, Any]:
            numbers = linear_state_bytes(flat, _STATE_BYTES)
            return {**numbers, "bytes_per_number": _STATE_BYTES,
                    "total_bytes": (numbers["recurrent"] + numbers["conv"]) * batch}
        # Linear-attention layers other than Gated DeltaNet (Kimi's KDA) name their sizes differently.
        cache["linear_state"] = _refusal_or(state, lambda error: {"error": str(error)})
    return cache


# ---- the logits -----------------------------------------------------------------------------------------------------

def _logits(flat: Mapping[str, Any], report: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Everything in the config that scales, caps or adds to the attention logits, each with the key (or the modeling
    code) it comes from: ``[{"what", "value", "source"}]``; value a number, or None where it is a switch."""
    found: list[dict[str, Any]] = []

    def add(what: str, value: float | None, source: str) -> None:
        found.append({"what": what, "value": value, "source": source})

    rope_heads = [e["head_dim"] for e in report["rope"] if e["encoding"] == "rope"]
    head = rope_heads[0] if rope_heads else _head_width(flat)
    if flat.get("query_pre_attn_scalar") is not None and head:
        scalar = flat["query_pre_attn_scalar"]
        add(f"query scale 1/√{_num(scalar)}, which equals the head width's" if scalar == head else
            f"query scale 1/√{_num(scalar)} instead of 1/√{head}: logits × {math.sqrt(head / scalar):.4g}",
            math.sqrt(head / scalar), "query_pre_attn_scalar")
    elif flat.get("softmax_scale") is not None and head:
        scale = flat["softmax_scale"]
        add(f"softmax scale {scale:.4g} instead of 1/√{head}: logits × {scale * math.sqrt(head):.4g}",
            scale * math.sqrt(head), "softmax_scale")
    elif head:
        mla = flat.get("kv_lora_rank") is not None and flat.get("qk_nope_head_dim") is not None
        source = ("qk_nope_head_dim + qk_rope_head_dim" if mla else "head_dim" if flat.get("head_dim")
                  else "hidden_size / num_attention_heads")
        add(f"query scale 1/√{head} (the head width)", 1.0, source)
    for entry in report["rope"]:
        if entry["encoding"] == "rope" and entry["logit_factor"] != 1:
            add(f"{'/'.join(entry['layer_types'])}: rope scaling multiplies cos/sin by "
                f"{entry['attention_factor']:.4g} and the softmax scale by {entry['softmax_scale']:.4g}: logits × "
                f"{entry['logit_factor']:.4g}", entry["logit_factor"], f"rope dict ({entry['rope_type']})")
    if flat.get("attn_logit_softcapping") is not None:
        cap = flat["attn_logit_softcapping"]
        add(f"attention logits capped smoothly at ±{_num(cap)} (cap · tanh(logit / cap))", cap,
            "attn_logit_softcapping")
    if flat.get("attn_temperature_tuning") is True and flat.get("no_rope_layers") is not None:
        floor, scale = flat.get("floor_scale", 8192), flat.get("attn_scale", 0.1)
        at_n = float(llama4_attention_scale(torch.tensor([report["context"] - 1]), floor_scale=floor,
                                            attn_scale=scale))
        add(f"NoPE layers: queries × 1 + {_num(scale)}·log(1 + ⌊(n + 1)/{_num(floor)}⌋), × {at_n:.4g} at position "
            f"{report['context'] - 1:,}", at_n, "attn_temperature_tuning, floor_scale, attn_scale")
    features = (_class_entry(flat) or {}).get("attention", [])
    if "sinks" in features:
        add("a learned sink logit per head joins every softmax row, so a row may give most of its weight to "
            "no token", None, f"the modeling code of model_type {flat['model_type']!r}")
    qk_norm = next(((key, flat[key]) for key in ("use_qk_norm", "qk_layernorm") if flat.get(key) is not None), None)
    if qk_norm is not None and qk_norm[1] is True:
        add("q and k normalised per head before their product", None, qk_norm[0])
    elif qk_norm is None and "qk_norm" in features:
        add("q and k normalised per head before their product", None,
            f"the modeling code of model_type {flat['model_type']!r}")
    if flat.get("final_logit_softcapping") is not None:
        add(f"not attention: the output logits are capped at ±{_num(flat['final_logit_softcapping'])}", 
            flat["final_logit_softcapping"], "final_logit_softcapping")
    return found


def _head_width(flat: Mapping[str, Any]) -> int | None:
    try:
        return hf_config.head_dim(flat)
    except (ValueError, TypeError):
        return None


# ---- warnings -------------------------------------------------------------------------------------------------------

_SCALED = ("linear", "dynamic", "yarn", "llama3", "longrope", "ntk", "ntk_by_parts")


def _trained_for(entry: Mapping[str, Any], max_pos: int | None) -> int | None:
    """The length a rope entry's scaling is for: factor × original for a scaled spectrum (Qwen's model cards add
    YaRN factor 4 to a 32,768-token config to serve 131,072), else max_position_embeddings."""
    params = entry["params"]
    if entry["rope_type"] in _SCALED and params.get("factor") and entry["original_length"]:
        return max(int(params["factor"] * entry["original_length"]), max_pos or 0)
    return max_pos


def _warnings(flat: Mapping[str, Any], report: Mapping[str, Any]) -> list[dict[str, str]]:
    found: list[dict[str, str]] = []

    def warn(message: str, source: str) -> None:
        found.append({"message": message, "source": _SOURCES[source]})

    spectra = [e for e in report["rope"] if e["encoding"] == "rope"]
    context, max_pos = report["context"], report["max_position_embeddings"]
    model_type = str(flat.get("model_type") or "")
    beyond = sorted({length for e in spectra if (length := _trained_for(e, max_pos)) and context > length})
    if beyond:
        warn(f"context {context:,} is beyond the {beyond[0]:,} tokens this config's RoPE is set up for: no layer "
             "was trained on positions that far, and extrapolated RoPE angles can give catastrophically large "
             "attention scores (Chen et al. 2023)", "beyond_training")
    for entry in report["rope"]:
        if entry["encoding"] == "learned" and entry["positions_without_row"]:
            warn(f"context {context:,} is past the position table's {entry['table_rows']:,} rows: the last "
                 f"{entry['positions_without_row']:,} tokens would have no position embedding at all (transformers "
                 "fails on them), and learned positions do not extrapolate", "past_the_table")
    for entry in spectra:
        name, params = "/".join(entry["layer_types"]), entry["params"]
        if entry["rope_type"] == "dynamic":
            warn(f"{name}: dynamic NTK recomputes the spectrum from the current length, so keys cached at one "
                 "length are rotated with another base than the queries that read them later", "dynamic")
        if entry["rope_type"] == "yarn" and model_type.startswith("qwen"):
            warn(f"{name}: YaRN is static: the rescaled spectrum and attention factor apply at every length, short "
                 "inputs included. Qwen's model cards advise adding it only when long contexts are needed",
                 "static_yarn")
        if entry["rope_type"] == "yarn":
            factor, original = params.get("factor"), params.get("original_max_position_embeddings")
            if factor is not None and max_pos is not None and factor * original != max_pos:
                warn(f"{name}: factor {factor:g} × original_max_position_embeddings {original:,} = "
                     f"{factor * original:,g} differs from max_position_embeddings {max_pos:,}; transformers "
                     f"versions before the fix took the factor as their ratio ({max_pos / original:g}) instead",
                     "implicit_factor")
        if "short_factor" in params and "long_factor" in params:
            warn(f"{name}: LongRoPE switches from short_factor to long_factor past "
                 f"{entry['original_length']:,} tokens, which invalidates every key cached before the switch",
                 "longrope")
    rope = rope_dict(flat)
    top = flat.get("original_max_position_embeddings")
    dicts = list(rope.values()) if _nested(rope) else [rope]
    if spectra and top is not None and any(isinstance(d, Mapping) and "original_max_position_embeddings" in d
                                           for d in dicts):
        warn("original_max_position_embeddings is given both inside the rope dict and at the top level: "
             "transformers overwrites the rope dict's value with the top-level one, so editing only the rope "
             "dict changes nothing there", "original_twice")
    windowed = any(kind in WINDOW_KEYS for kind in report["layers"])
    if flat.get("use_sliding_window") is False and flat.get("sliding_window") and not windowed:
        warn(f"sliding_window={flat['sliding_window']!r} is set but use_sliding_window is false: every layer is "
             "full attention here, as in transformers, while code that reads sliding_window alone applies the "
             "window anyway", "window_off")
    for key in sorted(map(str, flat)):
        # A key one letter off a key transformers and posbook read is almost surely a typo: both ignore it silently.
        close = _checks.close_matches(key, _KNOWN_KEYS, n=1, cutoff=0.9)
        if close and not key.startswith("_") and key not in _KNOWN_KEYS and key not in hf_config.transformers_keys():
            warn(f"config key {key!r} is not one transformers reads, so it changes nothing; did you mean "
                 f"{close[0]!r}?", "misspelt_key")
    if spectra and "bfloat16" in (flat.get("torch_dtype"), flat.get("dtype")):
        fastest = max(1 / (e["wavelength_min"] / (2 * math.pi)) for e in spectra)
        error = _bf16_position_error(context) * fastest
        warn(f"the config's dtype is bfloat16: compute the rotary angles position·θ in float32. bf16 holds "
             f"integers exactly only up to 256; at N = {context:,} positions round by up to "
             f"{_num(_bf16_position_error(context))}, which turns the fastest plane by up to {error:.3g} rad",
             "bf16_angles")
    return found


_KNOWN_KEYS = sorted(set(hf_config.DEFAULTED_KEYS) | set(hf_config.CONFIG_KEY_KINDS)
                     | {"rope_scaling", "rope_parameters", "rope_theta", "layer_types", "torch_dtype", "model_type"})


def _bf16_position_error(context: int) -> float:
    """The largest rounding of a position below ``context`` stored in bfloat16 (8 significant bits)."""
    largest = context - 1
    if largest < 256:
        return 0.0
    return 2.0 ** (math.floor(math.log2(largest)) - 8)


# ---- text -----------------------------------------------------------------------------------------------------------

def _num(x: float) -> str:
    if isinstance(x, int) or (float(x).is_integer() and abs(x) < 1e15):
        return f"{int(x):,}"
    return f"{x:.4g}"


def _length(x: float) -> str:
    return f"{x:.3g}" if x >= 1e6 or x < 100 else f"{x:,.0f}"


def _param(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        numbers = [v for v in value if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if numbers and len(numbers) == len(value):
            return f"[{len(value)} values, {min(numbers):g} to {max(numbers):g}]"
        return f"[{len(value)} values]"
    if isinstance(value, float) or (isinstance(value, int) and not isinstance(value, bool)):
        return _num(value)
    return repr(value)


def _row(label: str, text: str) -> list[str]:
    return textwrap.wrap(text, _WIDTH, initial_indent=f"  {label:<{_LABEL - 2}}",
                         subsequent_indent=" " * _LABEL, break_on_hyphens=False)


def _title(entry: Mapping[str, Any]) -> str:
    n = entry["layers"]
    return ", ".join(entry["layer_types"]) + ("" if n is None else f" ({n} layer{'s' * (n != 1)})")


def _spectrum_lines(e: Mapping[str, Any], context: int) -> list[str]:
    lines = [f"RoPE · {_title(e)}"]
    if e["nope_layers"]:
        lines += _row("NoPE", f"{e['nope_layers']} of these layers skip RoPE")
    lines += _row("rope_type", e["rope_type"])
    if e["params"]:
        lines += _row("parameters", ", ".join(f"{k}={_param(v)}" for k, v in sorted(e["params"].items())))
    lines += _row("rope_theta", _num(e["rope_theta"]))
    zeros = f" ({e['planes']} planes in the spectrum)" if e["planes"] != e["rotated_planes"] else ""
    lines += _row("head", f"{e['head_dim']} dims: {e['rotary_dim']} rotated in {e['rotated_planes']} planes, "
                          f"{e['unrotated_dims']} without position{zeros}")
    lines += _row("wavelengths", f"{_length(e['wavelength_min'])} to {_length(e['wavelength_max'])} tokens "
                                 "(2π/θ per plane)")
    turns = e["turning_planes"]
    within = [f"{turns['context']} of {e['rotated_planes']} planes within N = {context:,}"]
    if turns["original"] is not None and e["original_length"] != context:
        trained = turns["original_unscaled"]
        within.append(f"{turns['original']} within L = {e['original_length']:,}" + (
            f" ({trained} before the rescaling, as in pre-training)" if e["rescaling"] != "none"
            and trained is not None and trained != turns["original"] else ""))
    for kind, w in e["windows"].items():
        if w["tokens"] >= context:
            within.append(f"the {_SPAN[kind]} of {w['tokens']:,} is at least N: these layers see the whole context")
        else:
            within.append(f"{w['turning_planes']} within the {_SPAN[kind]} of {w['tokens']:,}")
    lines += _row("full turns", "; ".join(within))
    kept = e["unchanged_planes"]
    lines += _row("θ'/θ", {"none": "1 for every plane (no rescaling)",
                           "uniform": f"{e['min_ratio']:.4g} for every plane",
                           "per_plane": (f"1 for {kept} plane{'s' * (kept != 1)}, down to {e['min_ratio']:.4g}" if kept
                                         else f"below 1 for every plane, down to {e['min_ratio']:.4g}")}
                  [e["rescaling"]])
    ramp = e["ramp"]
    if ramp is not None and ramp["kind"] == "planes" and e["rescaling"] == "per_plane":
        # Read off the spectrum itself, in whole plane numbers: the bounds may fall outside the planes.
        ratios = [r for r, w in zip(e["frequency_ratio"], e["wavelengths"]) if w is not None]
        kept_planes = next((i for i, r in enumerate(ratios) if r != 1), len(ratios))
        first_scaled = next((i for i, r in enumerate(ratios) if math.isclose(r, e["min_ratio"], rel_tol=1e-9)),
                            len(ratios))
        kept_text = (f"planes 0 to {kept_planes - 1} keep θ (more than beta_fast turns in L)" if kept_planes
                     else "no plane keeps θ")
        lines += _row("ramp", f"{kept_text}, planes {first_scaled} and up get θ/factor (fewer than beta_slow "
                              "turns), blended between")
    elif ramp is not None and ramp["kind"] == "wavelengths" and ramp["short"] == ramp["long"]:
        lines += _row("ramp", f"a step at wavelength {_length(ramp['short'])}: shorter ones keep θ, longer ones "
                              "get θ/factor")
    elif ramp is not None and ramp["kind"] == "wavelengths":
        lines += _row("ramp", f"wavelengths below {_length(ramp['short'])} keep θ, above {_length(ramp['long'])} "
                              "get θ/factor, blended between")
    if e["logit_factor"] != 1:
        lines += _row("rope on logits", f"cos/sin × {e['attention_factor']:.4g}, softmax scale × "
                                        f"{e['softmax_scale']:.4g}: logits × {e['logit_factor']:.4g} (see Logits)")
    return lines


_POSITION_LABELS = {"nope": "No position", "alibi": "ALiBi", "learned": "Learned absolute positions",
                    "forget_gate": "FoX forget gates", "stick_breaking": "Stick-breaking attention",
                    "sinusoidal": "Sinusoidal absolute positions", "t5": "T5 relative buckets",
                    "unknown": "Position unknown", "refused": "RoPE not modelled", "invalid": "RoPE dict invalid"}


def _position_lines(entry: Mapping[str, Any], context: int) -> list[str]:
    lines = textwrap.wrap(f"{_POSITION_LABELS[entry['encoding']]} · {_title(entry)}: {entry['reason']}", _WIDTH,
                          subsequent_indent="  ")
    if entry["encoding"] == "alibi" and entry["slopes"]:
        slopes = entry["slopes"]
        lines += _row("slopes", f"{len(slopes)} heads, from {slopes[0]:.4g} down to {slopes[-1]:.4g}; at distance "
                                f"{context - 1:,} the logits lose {entry['penalty_at_context'][0]:,.4g} (steepest "
                                f"head) to {entry['penalty_at_context'][-1]:,.4g} (flattest)")
    if entry["encoding"] == "learned" and entry["table_rows"]:
        rows, past = entry["table_rows"], entry["positions_without_row"]
        lines += _row("table", f"{rows:,} rows: " + (f"positions {rows:,} to {context - 1:,} have none" if past
                                                      else f"every position below N = {context:,} has one"))
    return lines


def _kv_lines(kv: Mapping[str, Any], report: Mapping[str, Any]) -> list[str]:
    context, batch = report["context"], report["batch"]
    layers = ", ".join(f"{n} {kind}" + (f" ({_SPAN[kind]} {kv['windows'][kind]:,})" if kind in kv["windows"] else "")
                       for kind, n in report["layers"].items())
    lines = [f"KV cache · {kv['kind']} · {report['dtype']}, {kv['bytes_per_number']} B per number"]
    lines += _row("layers", layers)
    per_token = f"{format_bytes(kv['bytes_per_token'])} ({kv['bytes_per_token']:,.0f} B)"
    if kv["windows"]:
        per_token += " while the context fits every " + " and ".join(_SPAN[kind] for kind in kv["windows"])
    lines += _row("per token", per_token)
    if "sliding_attention" in kv["windows"]:
        window = kv["windows"]["sliding_attention"]
        lines += _row("window", f"a sliding layer keeps the last {min(window - 1, context):,} tokens: a query "
                                f"attends to itself and the {window - 1:,} before it (window {window:,})")
    sequences = f"{batch:,} sequence{'s' * (batch != 1)}"
    lines += _row("total", f"{format_bytes(kv['total_bytes'])} for {context:,} tokens × {sequences}")
    if kv["indexer"] is not None:
        idx = kv["indexer"]
        lines += _row("indexer keys", f"{format_bytes(idx['bytes_per_token'])} per token, "
                                      f"{format_bytes(idx['total_bytes'])} in all (DeepSeek sparse attention)")
    if kv["linear_state"] is not None and "error" in kv["linear_state"]:
        lines += _row("linear state", "not modelled: " + kv["linear_state"]["error"])
    elif kv["linear_state"] is not None:
        s = kv["linear_state"]
        lines += _row("linear state", f"{s['layers']} linear_attention layers keep {format_bytes(s['recurrent'])} "
                                      f"recurrent + {format_bytes(s['conv'])} conv state per sequence in fp32, "
                                      f"{format_bytes(s['total_bytes'])} for {sequences}, whatever the length")
    other = {k: n for k, n in kv["state_layers"].items() if k != "linear_attention"}
    if other:
        lines += _row("other state", ", ".join(f"{n} {k}" for k, n in other.items())
                      + ": fixed-size state, not counted")
    return lines


def _check_report(report: Any) -> Mapping[str, Any]:
    if not isinstance(report, Mapping):
        raise TypeError(f"report must be the dict config_report() returns, got {type(report).__name__} "
                        f"{_checks._show(report)}")
    if report.get("format") != _FORMAT:
        raise ValueError(f"report must be the dict config_report() returns (format {_FORMAT!r}), got a dict with "
                         f"format {report.get('format')!r} and keys {sorted(map(str, report))}")
    return report


def format_report(report: Mapping[str, Any]) -> str:
    """:func:`config_report`'s report as plain text for a terminal, at most 88 columns wide."""
    _check_report(report)
    context = report["context"]
    head = f"posbook inspect · {report['model_type'] or 'config'} · N = {context:,} tokens"
    if report["max_position_embeddings"] is not None:
        head += f" (max_position_embeddings {report['max_position_embeddings']:,})"
    blocks = [[head]]
    if report["filled_from_class"]:
        filled = ", ".join(f"{k}={_param(v) if not isinstance(v, Mapping) else '{...}'}"
                           for k, v in report["filled_from_class"].items())
        blocks[0] += textwrap.wrap(f"from the {report['model_type']} config class's defaults (the file leaves them "
                                   f"out): {filled}", _WIDTH, initial_indent="  ", subsequent_indent="  ")
    for entry in report["rope"]:
        if entry["encoding"] == "rope":
            blocks.append(_spectrum_lines(entry, context))
        else:
            blocks.append(_position_lines(entry, context))
    if not report["rope"]:
        blocks.append(["No attention layers."])
    if report["logits"]:
        lines = ["Logits"]
        for item in report["logits"]:
            lines += textwrap.wrap(f"{item['what']} [{item['source']}]", _WIDTH, initial_indent="  - ",
                                   subsequent_indent="    ")
        blocks.append(lines)
    if "error" in report["kv_cache"]:
        blocks.append(textwrap.wrap(f"KV cache · not modelled: {report['kv_cache']['error']}", _WIDTH,
                                    subsequent_indent="  "))
    else:
        blocks.append(_kv_lines(report["kv_cache"], report))
    if report["warnings"]:
        lines = ["Warnings"]
        for w in report["warnings"]:
            lines += textwrap.wrap(w["message"], _WIDTH, initial_indent="  - ", subsequent_indent="    ")
            lines.append(f"    source: {w['source']}")
        blocks.append(lines)
    return "\n\n".join("\n".join(block) for block in blocks)


# ---- figure ---------------------------------------------------------------------------------------------------------

def _check_png_path(path: Any) -> Path:
    """The file plot_report writes: a ``.png`` name, not a folder, in a folder that exists."""
    path = _checks.path("path", path)
    if path.is_dir():
        raise ValueError(f"path {str(path)!r} is a directory; name a .png file to write the plot to")
    if path.suffix.lower() != ".png":
        raise ValueError(f"path must name a .png file (the plot is a PNG), got {str(path)!r}")
    if not path.resolve().parent.is_dir():
        raise ValueError(f"path {str(path)!r}: folder {str(path.parent)!r} does not exist")
    return path


def plot_report(report: Any, path: str | Path) -> None:
    """Draw each rotary spectrum of a report (or of a config, reported with the defaults) into one PNG at ``path``:
    :func:`report_figure`, saved. Raises ValueError as it does, or if ``path`` does not name a ``.png`` file in an
    existing folder."""
    _check_png_path(path)
    report_figure(report).savefig(path)


def report_figure(report: Any) -> Any:
    """The figure of each rotary spectrum of a report (or of a config, reported with the defaults), a matplotlib
    ``Figure`` that no pyplot state holds (Jupyter shows it as the cell's value).

    One row per rope entry: the wavelength of every plane on a log axis, the config's spectrum next to the
    unscaled one, with lines at the context N and the training length L; where the rescaling differs between
    planes (a ramp), a second panel with θ'_i/θ_i per plane. Raises ValueError if no layer has RoPE.
    """
    if not (isinstance(report, Mapping) and report.get("format") == _FORMAT):
        try:
            report = config_report(report)
        except (TypeError, ValueError) as error:
            raise type(error)(f"report must be a config_report() result or a config to report: {error}") from None
    spectra = [e for e in report["rope"] if e["encoding"] == "rope"]
    if not spectra:
        raise ValueError("the config has no layer with RoPE, so there is no spectrum to plot")
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # matplotlib only when a figure is asked for
    from matplotlib.figure import Figure

    ramps = [e["rescaling"] == "per_plane" for e in spectra]
    columns = 2 if any(ramps) else 1
    fig = Figure(figsize=(7.5 if columns == 2 else 5, 3 * len(spectra)), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(spectra), columns, squeeze=False)
    for row, (entry, ramp) in zip(axes, zip(spectra, ramps)):
        planes = range(entry["planes"])
        scaled = [w if w is not None else math.nan for w in entry["wavelengths"]]
        # λ = 2π/θ, so the unscaled wavelength is the scaled one times θ'/θ.
        unscaled = [w * r if r else math.nan for w, r in zip(scaled, entry["frequency_ratio"])]
        ax = row[0]
        if entry["rescaling"] != "none":
            ax.semilogy(planes, unscaled, color="0.6", ls="--", label="unscaled θ")
        ax.semilogy(planes, scaled, color="C0", label=f"{entry['rope_type']} θ'")
        same_length = entry["original_length"] == report["context"]
        ax.axhline(report["context"], color="C3", lw=1, label=f"N = {report['context']:,}" + " = L" * same_length)
        if entry["original_length"] is not None and not same_length:
            ax.axhline(entry["original_length"], color="C2", lw=1, ls=":", label=f"L = {entry['original_length']:,}")
        for kind, window in entry["windows"].items():
            ax.axhline(window["tokens"], color="C4", lw=1, ls="-.", label=f"{_SPAN[kind]} {window['tokens']:,}")
        ax.set(title=f"{_title(entry)}\nwavelength 2π/θ_i", xlabel="plane i", ylabel="tokens")
        ax.legend(fontsize=7)
        if columns == 2:
            if ramp:
                row[1].plot(planes, entry["frequency_ratio"], color="C1")
                row[1].set(title="rescaling θ'_i/θ_i\n(1 = kept, 1/factor = interpolated)", xlabel="plane i",
                           ylim=(0, 1.05))
            else:
                row[1].axis("off")
    return fig
