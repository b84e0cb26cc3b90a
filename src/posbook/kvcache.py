"""KV-cache arithmetic from a model's config: bytes per token for MHA, MQA, GQA, MLA and hybrids.

Per token and per attention layer a model caches

* MHA / GQA / MQA: a key and a value per KV head, ``num_key_value_heads·(head_dim + v_head_dim)`` numbers
  (MQA is num_key_value_heads = 1; MHA is num_key_value_heads = num_attention_heads);
* MLA (DeepSeek-V2/V3, Kimi K2): one latent of ``kv_lora_rank`` numbers plus the shared rotary key of
  ``qk_rope_head_dim`` numbers, whatever the number of heads.

Layers whose ``layer_types`` entry is a linear-attention or state-space layer keep a fixed-size state and no KV;
sliding-window and chunked layers keep at most their window. Caches this arithmetic does not model (compressed
or cross-layer-shared KV) raise an error rather than a wrong number. The configs of the models the book discusses
live in :mod:`posbook.model_configs`; every function here reads its config through
:func:`posbook.hf_config.read_config`, so a ``config.json``, its text or a ``PretrainedConfig`` all work.
"""

from __future__ import annotations

import copy
from typing import Any, Mapping

from . import _checks
from . import hf_config
from .hf_config import NONUNIFORM_MODEL_TYPES, NotModelledError, read_config, refuse_unmodelled

KV_LAYER_TYPES = ("full_attention", "sliding_attention", "chunked_attention")
"""``layer_types`` entries that keep keys and values."""

STATE_LAYER_TYPES = ("linear_attention", "mamba", "kda", "recurrent")
"""``layer_types`` entries that keep a fixed-size state instead (no KV)."""

WINDOW_KEYS = {"sliding_attention": "sliding_window", "chunked_attention": "attention_chunk_size"}
"""The config key that holds each local layer kind's window (a sliding window, or a chunk)."""


def _int_key(config: Mapping[str, Any], key: str, *, required: bool = True) -> int | None:
    value = config.get(key)
    if value is None:
        if required:
            raise ValueError(f"config must give {key!r}, got none (keys: {sorted(config)})")
        return None
    return int(_checks.number(key, value, integer=True, positive=True))


def kv_values_per_layer(config: Mapping[str, Any], kind: str = "full_attention") -> int:
    """Numbers cached per token by one attention layer of the given ``layer_types`` kind.

    Global layers may differ from local ones: ``global_head_dim`` and ``num_global_key_value_heads`` (Gemma 4)
    override head_dim and num_key_value_heads for ``"full_attention"`` layers, and ``attention_k_eq_v`` (keys
    reused as values in those layers) halves what they must keep.
    """
    config = read_config(config)
    _checks.choice("kind", kind, KV_LAYER_TYPES)
    refuse_unmodelled(config, "kv")
    if config.get("kv_lora_rank") is not None:
        return _int_key(config, "kv_lora_rank") + _int_key(config, "qk_rope_head_dim")
    heads = _int_key(config, "num_attention_heads")
    kv_heads = _int_key(config, "num_key_value_heads", required=False) or heads
    head_dim = hf_config.head_dim(config)
    v_head_dim = _int_key(config, "v_head_dim", required=False) or head_dim
    if kind == "full_attention":
        # transformers gives the global layers their own K/V heads only where K = V is shared (Gemma 4's
        # attention_k_eq_v); a config without that key is not gated.
        if config.get("attention_k_eq_v", True) is not False:
            kv_heads = _int_key(config, "num_global_key_value_heads", required=False) or kv_heads
        global_dim = _int_key(config, "global_head_dim", required=False)
        if global_dim is not None:
            head_dim = v_head_dim = global_dim
        k_eq_v = config.get("attention_k_eq_v", False)
        _checks.flag("attention_k_eq_v", k_eq_v)
        if k_eq_v:
            v_head_dim = 0  # the least a cache must keep; an implementation may still store a separate V copy
    if heads % kv_heads:
        raise ValueError(f"num_attention_heads={heads} must be a multiple of the {kv_heads} key/value heads")
    return kv_heads * (head_dim + v_head_dim)


def layer_kinds(config: Mapping[str, Any]) -> list[str]:
    """One ``layer_types`` entry per layer; every layer is ``"full_attention"`` when the config has none."""
    config = read_config(config)
    n_layers = _int_key(config, "num_hidden_layers")
    kinds = config.get("layer_types")
    window = next((key for key in WINDOW_KEYS.values() if config.get(key)), None)
    if kinds is None and window is not None:
        raise NotModelledError(f"config gives {window}={config[window]!r} but no layer_types, and posbook does not "
                               f"know how model_type {config.get('model_type')!r} lays out its windowed and global "
                               "layers; give layer_types")
    if kinds is None and config.get("model_type") in NONUNIFORM_MODEL_TYPES:
        raise NotModelledError(f"config of model_type {config['model_type']!r} gives no layer_types: its layers are "
                               "not all alike, and transformers lays them out from keys posbook does not read; give "
                               "layer_types")
    if kinds is None:
        return ["full_attention"] * n_layers
    if not isinstance(kinds, (list, tuple)) or len(kinds) != n_layers:
        raise ValueError(f"layer_types must be a list with num_hidden_layers={n_layers} entries, got {kinds!r}")
    for kind in kinds:
        if kind not in KV_LAYER_TYPES + STATE_LAYER_TYPES:
            raise NotModelledError(f"layer_types entry must be one of {KV_LAYER_TYPES + STATE_LAYER_TYPES}, got "
                                   f"{kind!r}: a kind of layer posbook has no cache rule for")
    return list(kinds)


def _dtype_bytes(dtype_bytes: float) -> float:
    _checks.number("dtype_bytes", dtype_bytes, positive=True)
    return dtype_bytes


def kv_cache_bytes_per_token(config: Mapping[str, Any], dtype_bytes: float = 2) -> float:
    """Bytes of KV cache each new token adds, summed over the layers that keep KV (2 bytes: BF16/FP16).

    Sliding-window and chunked layers count too: this is the cost per token while the context is shorter than
    their window. :func:`kv_cache_bytes` gives the total for a given length, with the windows applied.
    """
    config = read_config(config)
    refuse_unmodelled(config, "kv")
    nbytes = _dtype_bytes(dtype_bytes)
    kinds = layer_kinds(config)
    values = {kind: kv_values_per_layer(config, kind) for kind in set(kinds) & set(KV_LAYER_TYPES)}
    return sum(values[kind] * nbytes for kind in kinds if kind in values)


def kv_cache_bytes(config: Mapping[str, Any], seq_len: int, dtype_bytes: float = 2) -> float:
    """KV-cache bytes one sequence holds after ``seq_len`` tokens, ready for the next token.

    Full-attention layers keep all ``seq_len`` keys and values. A sliding-window layer keeps the last
    ``sliding_window − 1``: the next query attends to itself and those (a window of W includes the query). A
    chunked layer keeps at most ``attention_chunk_size − 1``, the most its current chunk can hold before the query.
    These are the tokens transformers' sliding-window cache layer keeps for both kinds.
    """
    config = read_config(config)
    refuse_unmodelled(config, "kv")
    _checks.number("seq_len", seq_len, integer=True, min_value=0)
    nbytes = _dtype_bytes(dtype_bytes)
    def kept(kind: str) -> int:
        return seq_len if kind not in WINDOW_KEYS else min(seq_len, _int_key(config, WINDOW_KEYS[kind]) - 1)

    kinds = layer_kinds(config)
    tokens = {kind: kv_values_per_layer(config, kind) * kept(kind) for kind in set(kinds) & set(KV_LAYER_TYPES)}
    return sum(tokens[kind] * nbytes for kind in kinds if kind in tokens)


# ---- Chapter "Heads, head_dim and the KV cache": the calculator and the costs that sit next to the cache ----------

_BINARY_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
MAX_DIGITS = 20
"""The most decimals :func:`format_bytes` writes (a float holds about 16 significant digits)."""


def format_bytes(nbytes: float, digits: int = 2) -> str:
    """``nbytes`` in binary units (1 KiB = 1024 B): ``format_bytes(393216) == "384 KiB"``, trailing zeros dropped.

    Used by :func:`kv_cache_table`; see the chapter "Heads, head_dim and the KV cache".
    """
    _checks.number("nbytes", nbytes, min_value=0)
    _checks.number("digits", digits, integer=True, min_value=0, max_value=MAX_DIGITS)
    value, unit = float(nbytes), 0
    while value >= 1024 and unit < len(_BINARY_UNITS) - 1:
        value, unit = value / 1024, unit + 1
    text = f"{value:,.{digits}f}".rstrip("0").rstrip(".") if digits else f"{value:,.0f}"
    return f"{text} {_BINARY_UNITS[unit]}"


def indexer_values_per_layer(config: Mapping[str, Any]) -> int:
    """Numbers a DeepSeek-sparse-attention layer caches per token for its lightning indexer, 0 without one.

    The indexer scores each past token with one key of ``index_head_dim`` numbers, shared by all
    ``index_n_heads`` indexer heads (DeepSeek-V3.2, eq. 1), so this is ``index_head_dim`` when the config has an
    ``index_topk``. It is cached next to the MLA latent, which is why :func:`kv_values_per_layer` refuses such
    configs.
    """
    config = read_config(config)
    if config.get("index_topk") in (None, 0):
        return 0
    return _int_key(config, "index_head_dim")


def without_indexer(config: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``config`` without the lightning-indexer keys, so that :func:`kv_values_per_layer` counts the
    attention cache (the MLA latent) alone; add :func:`indexer_values_per_layer` to count what the indexer keeps."""
    config = read_config(config)
    indexer_keys = ("index_topk", "index_n_heads", "index_head_dim")
    return {k: copy.deepcopy(v) for k, v in config.items() if k not in indexer_keys}


def linear_state_bytes(config: Mapping[str, Any], dtype_bytes: float = 4) -> dict[str, float]:
    """Fixed per-sequence state of the ``"linear_attention"`` (Gated DeltaNet) layers of a hybrid config.

    Each such layer keeps, per value head, a ``linear_key_head_dim × linear_value_head_dim`` matrix (the
    recurrent state) and, for its short causal convolution over q, k and v, the last ``linear_conv_kernel_dim − 1``
    inputs of ``2·linear_num_key_heads·linear_key_head_dim + linear_num_value_heads·linear_value_head_dim``
    channels (an implementation may keep one more). Returns ``{"layers", "recurrent", "conv"}`` (bytes, whatever
    the context length; default FP32).
    """
    config = read_config(config)
    nbytes = _dtype_bytes(dtype_bytes)
    layers = sum(kind == "linear_attention" for kind in layer_kinds(config))
    if layers == 0:
        return {"layers": 0, "recurrent": 0.0, "conv": 0.0}
    k_heads, v_heads = _int_key(config, "linear_num_key_heads"), _int_key(config, "linear_num_value_heads")
    dk, dv = _int_key(config, "linear_key_head_dim"), _int_key(config, "linear_value_head_dim")
    kernel = _int_key(config, "linear_conv_kernel_dim")
    recurrent = layers * v_heads * dk * dv * nbytes
    conv = layers * (2 * k_heads * dk + v_heads * dv) * (kernel - 1) * nbytes
    return {"layers": layers, "recurrent": recurrent, "conv": conv}


def cache_kind(config: Mapping[str, Any]) -> str:
    """``"MHA"``, ``"MQA"``, ``"GQA"`` or ``"MLA"``, with ``"+ local"`` (sliding/chunked layers) or
    ``"+ linear"`` (state layers) appended for hybrids and ``"+ indexer"`` for DeepSeek sparse attention."""
    config = read_config(config)
    if config.get("kv_lora_rank") is not None:
        kind = "MLA"
    else:
        heads = _int_key(config, "num_attention_heads")
        kv = _int_key(config, "num_key_value_heads", required=False) or heads
        kind = "MHA" if kv == heads else "MQA" if kv == 1 else "GQA"
    kinds = set(layer_kinds(config))
    if kinds & {"sliding_attention", "chunked_attention"}:
        kind += " + local"
    if kinds & set(STATE_LAYER_TYPES):
        kind += " + linear"
    if indexer_values_per_layer(config):
        kind += " + indexer"
    return kind


DEFAULT_SEQ_LENS = (4_096, 32_768, 131_072, 262_144, 1_048_576)
"""Context lengths :func:`kv_cache_table` reports by default (4Ki to 1Mi tokens)."""


def kv_cache_table(config: Mapping[str, Any] | str, seq_lens: Any = DEFAULT_SEQ_LENS, dtype_bytes: float = 2, *,
                   markdown: bool = False) -> list[dict[str, Any]] | str:
    """The KV-cache calculator: paste a Hugging Face config (dict or JSON text), get bytes per token and totals.

    Returns one row per length, ``{"seq_len", "kv_bytes", "indexer_bytes", "total_bytes"}`` (one sequence,
    ``dtype_bytes`` per number, local layers capped at their window), or with ``markdown=True`` a Markdown table
    in binary units headed by the bytes per token. Lightning-indexer keys (DeepSeek sparse attention) are counted
    separately at the same ``dtype_bytes``; caches this module does not model still raise ``ValueError``.
    See the chapter "Heads, head_dim and the KV cache".
    """
    flat = read_config(config)
    if isinstance(seq_lens, (int, float)) or not hasattr(seq_lens, "__iter__"):
        raise TypeError(f"seq_lens must be a sequence of token counts, got {type(seq_lens).__name__} {seq_lens!r}")
    seq_lens = [int(_checks.number("seq_lens entry", n, integer=True, min_value=0)) for n in seq_lens]
    if not seq_lens:
        raise ValueError("seq_lens must hold at least one length, got an empty sequence")
    _checks.flag("markdown", markdown)
    nbytes = _dtype_bytes(dtype_bytes)
    index_values = indexer_values_per_layer(flat)
    attn = without_indexer(flat) if index_values else flat
    index_layers = sum(kind in KV_LAYER_TYPES for kind in layer_kinds(attn))
    per_token = kv_cache_bytes_per_token(attn, nbytes)
    index_per_token = index_layers * index_values * nbytes
    rows = []
    for n in seq_lens:
        kv = kv_cache_bytes(attn, n, nbytes)
        idx = index_per_token * n
        rows.append({"seq_len": n, "kv_bytes": kv, "indexer_bytes": idx, "total_bytes": kv + idx})
    if not markdown:
        return rows
    head = (f"**{cache_kind(flat)}**: {format_bytes(per_token)} ({per_token:,.0f} B) of KV per token"
            + (f" + {format_bytes(index_per_token)} ({index_per_token:,.0f} B) of indexer keys" if index_values else "")
            + f", at {nbytes:g} B per number.")
    lines = [head, "", "| tokens | KV cache |" + (" indexer keys | total |" if index_values else ""),
             "|---:|---:|" + ("---:|---:|" if index_values else "")]
    for r in rows:
        extra = f" {format_bytes(r['indexer_bytes'])} | {format_bytes(r['total_bytes'])} |" if index_values else ""
        lines.append(f"| {r['seq_len']:,} | {format_bytes(r['kv_bytes'])} |" + extra)
    return "\n".join(lines)


def attention_costs(config: Mapping[str, Any], context_len: int) -> dict[str, float]:
    """What the number of query heads buys and costs per attention layer, under a simple count.

    ``head_params``: weights of the projections whose size is proportional to the number of heads — for MLA
    W^UQ (``q_lora_rank`` or ``hidden_size`` → heads × (qk_nope + qk_rope)), W^UK and W^UV (``kv_lora_rank`` →
    heads × (qk_nope + v_head_dim)) and W^O; for MHA/GQA/MQA W^Q and W^O. ``core_flops``: multiply-adds × 2 of
    one query token against ``context_len`` keys (scores q·k and the weighted sum of values), counted with the
    per-head sizes (the un-absorbed form). ``kv_values``: numbers cached per token (:func:`kv_values_per_layer`),
    which for MLA does not depend on the heads. Softmax, norms and the KV-side projections are left out.
    """
    config = read_config(config)
    _checks.number("context_len", context_len, integer=True, min_value=0)
    heads, hidden = _int_key(config, "num_attention_heads"), _int_key(config, "hidden_size")
    if config.get("kv_lora_rank") is not None:
        nope, rope = _int_key(config, "qk_nope_head_dim"), _int_key(config, "qk_rope_head_dim")
        dv, rank = _int_key(config, "v_head_dim"), _int_key(config, "kv_lora_rank")
        q_in = _int_key(config, "q_lora_rank", required=False) or hidden
        dqk = nope + rope
        params = q_in * heads * dqk + rank * heads * (nope + dv) + heads * dv * hidden
    else:
        dqk = hf_config.head_dim(config)
        dv = _int_key(config, "v_head_dim", required=False) or dqk
        params = hidden * heads * dqk + heads * dv * hidden
    core = 2 * heads * (dqk + dv) * context_len
    return {"head_params": float(params), "core_flops": float(core),
            "kv_values": float(kv_values_per_layer(without_indexer(config)))}


def max_context_for_budget(config: Mapping[str, Any], budget_bytes: float, batch: int = 1,
                           dtype_bytes: float = 2) -> int | None:
    """The longest context N whose cache for ``batch`` sequences fits in ``budget_bytes``: 0 when not one token fits.

    The cache counted is :func:`kv_cache_table`'s ``total_bytes``: :func:`kv_cache_bytes` (local layers capped at
    their window) plus a DeepSeek-sparse-attention indexer's keys, times ``batch``. Windows make it grow more slowly
    past them, so N is found by bisection over those exact bytes, not by dividing by the bytes per token. Returns
    ``None`` when every length fits: a config without full-attention layers stops growing once its windows are full,
    and that cache fits the budget. Fixed-size state (:func:`linear_state_bytes`) is not counted.
    """
    config = read_config(config)
    _checks.number("budget_bytes", budget_bytes, min_value=0)
    _checks.number("batch", batch, integer=True, positive=True)
    nbytes = _dtype_bytes(dtype_bytes)
    index_values = indexer_values_per_layer(config)
    attention = without_indexer(config) if index_values else config
    kinds = layer_kinds(attention)
    index_per_token = sum(kind in KV_LAYER_TYPES for kind in kinds) * index_values * nbytes

    def fits(n: int) -> bool:
        return (kv_cache_bytes(attention, n, nbytes) + index_per_token * n) * batch <= budget_bytes

    # What every further token adds once all windows are full: the full-attention layers and the indexer keys.
    growth = kinds.count("full_attention") * kv_values_per_layer(attention) * nbytes if "full_attention" in kinds else 0
    growth += index_per_token
    if growth == 0:
        longest = max((_int_key(attention, WINDOW_KEYS[k]) for k in set(kinds) & set(WINDOW_KEYS)), default=1)
        if fits(longest):
            return None
        too_long = longest
    else:
        # At least `growth` bytes per token: this length is past the budget (doubled while rounding says otherwise).
        too_long = int(budget_bytes / (growth * batch)) + 1
        while fits(too_long):
            too_long *= 2
    fitting = 0  # fits(fitting) and not fits(too_long) throughout
    while too_long - fitting > 1:
        middle = (fitting + too_long) // 2
        fitting, too_long = (middle, too_long) if fits(middle) else (fitting, middle)
    return fitting
