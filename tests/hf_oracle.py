"""An oracle for posbook's config arithmetic: transformers' own modules, for every architecture it ships.

For each config class with a causal-LM model (and each image-text-to-text model whose text config is not one of
those), and for Hub-style ``config.json`` dicts of the families whose legacy keys matter:

* RoPE: ``posbook.rope_parameters`` (per layer type where the model has several) against the inverse frequencies
  and attention scaling of the model's own ``*RotaryEmbedding`` module, on the default config and on a tiny one,
  each in four forms (the config object, its ``to_dict()``, the legacy top-level ``rope_theta``/``rope_scaling``
  form, and the multimodal config with its ``text_config`` nested);
* KV cache: ``posbook.kv_cache_bytes_per_token`` against the key/value bytes a tiny float32 instance caches over a
  few tokens, and ``posbook.kv_cache_bytes`` past the window for models with sliding or chunked layers;
* the report of ``python -m posbook inspect`` (``posbook.report.config_report``): it runs on every config or refuses it
  with posbook's own error.

Each check ends as ``match``, ``refused`` (posbook raised ValueError/TypeError: it does not model something and
says so), ``mismatch`` (a silent wrong number: a failing test unless documented as a deviation), ``no_rope`` or
``unavailable`` (transformers cannot build or run the piece on CPU; the reason is kept). ``tests/test_hf_oracle.py``
holds the outcomes against ``src/posbook/data/hf_coverage.json``; ``python tests/hf_oracle.py --write`` rewrites
that file from a fresh run (review the diff: every new refusal or deviation needs its reason).
"""
from __future__ import annotations

import collections
import copy
import importlib
import inspect
import json
import math
import re
import signal
import warnings
from pathlib import Path

import torch

import posbook as pb
from posbook import kvcache
from posbook.hf_config import DEFAULTED_KEYS, KEY_ALIASES

import transformers
from transformers.models.auto.configuration_auto import CONFIG_MAPPING, CONFIG_MAPPING_NAMES
from transformers.models.auto.modeling_auto import (
    MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES, MODEL_MAPPING_NAMES)

COVERAGE_FILE = Path(__file__).resolve().parents[1] / "src" / "posbook" / "data" / "hf_coverage.json"
RTOL = 1e-5
SEQ = 5               # tokens run through a tiny model
CHECK_SECONDS = 30.0  # per phase of one architecture: generous, so that a loaded machine does not time out
# Architectures transformers takes tens of seconds to build even tiny on a CPU: their tiny model is not built, so
# the run takes the same path on every machine (their RoPE is still checked).
SLOW_TO_BUILD = {"blt": "byte-latent encoder, patcher and decoder", "phi4_multimodal": "audio and vision towers",
                 "pi0": "vision-language-action stack"}
KV_KINDS = set(kvcache.KV_LAYER_TYPES)
STATE_KINDS = set(kvcache.STATE_LAYER_TYPES) | {"mamba2", "conv", "linear", "mlp", "moe", "dummy", "ssm"}


class Timeout(Exception):
    pass


def _on_alarm(signum, frame):
    raise Timeout("timed out")


class limit:
    """A wall-clock limit on a block (SIGALRM; the main thread of a Linux process)."""

    def __init__(self, seconds):
        self.seconds = seconds

    def __enter__(self):
        self.previous = signal.signal(signal.SIGALRM, _on_alarm)
        signal.setitimer(signal.ITIMER_REAL, self.seconds)

    def __exit__(self, *exc):
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, self.previous)
        return False


def err(e: BaseException, n: int = 300) -> str:
    return re.sub(r"\s+", " ", f"{type(e).__name__}: {e}")[:n]


def class_name(v):
    return v[0] if isinstance(v, (list, tuple)) else v


def module_of_class(name):
    cls = getattr(transformers, name, None)
    return (None, None) if cls is None else (cls, importlib.import_module(cls.__module__))


def architectures() -> list[tuple[str, str]]:
    """(model_type, model class name): every causal LM, then the image-text-to-text models that are not one."""
    causal = sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
    vlm = sorted(set(MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES) - set(causal))
    return ([(t, class_name(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[t])) for t in causal]
            + [(t, class_name(MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES[t])) for t in vlm])


EXCLUDE_TOKENS = {"Vision", "Visual", "Audio", "Video", "Speech", "Image", "Vit", "Patch", "Depth", "Code2Wav",
                  "Talker", "Token2Wav", "Encoder", "Siglip", "Whisper", "Pixel", "Spatial", "2D", "3D", "Conformer"}


def _excluded(name):
    toks = set(re.findall(r"[A-Z][a-z]+", name)) | set(re.findall(r"[23]D", name)) | \
        ({"Vit"} if "ViT" in name else set())
    return bool(toks & EXCLUDE_TOKENS) and "Text" not in toks


def rotary_candidates(modules):
    seen, cands = set(), []
    for mod in modules:
        if mod is None:
            continue
        for name, obj in vars(mod).items():
            if not (isinstance(obj, type) and name.endswith("RotaryEmbedding")):
                continue
            if not issubclass(obj, torch.nn.Module) or _excluded(name) or obj in seen:
                continue
            seen.add(obj)
            cands.append((name, obj))
    # classes defined in the module itself first, Text-named before the others
    own = {m.__name__ for m in modules if m is not None}
    cands.sort(key=lambda nc: (nc[1].__module__ not in own, "Text" not in nc[0], nc[0]))
    return cands


def _read_rotary(m):
    """{layer_type or None: (inv_freq, attention_scaling)} from an instantiated rotary module."""
    out = {}
    default_scale = getattr(m, "attention_scaling", 1.0)
    for bname, buf in m.named_buffers():
        leaf = bname.split(".")[-1]
        prefix = ".".join(bname.split(".")[:-1])
        if leaf == "inv_freq":
            lt = prefix or None
            sub = m.get_submodule(prefix) if prefix else m
            out[lt] = (buf, getattr(sub, "attention_scaling", default_scale))
        elif leaf.endswith("_inv_freq") and not leaf.endswith("original_inv_freq"):
            lt = leaf[: -len("_inv_freq")]
            sub = m.get_submodule(prefix) if prefix else m
            out[lt] = (buf, getattr(sub, f"{lt}_attention_scaling", default_scale))
    for bname, buf in m.named_buffers():
        # GPT-J / CodeGen style: a [max_positions, rotary_dim] table cat(sin, cos); inv_freq = angle at position 1
        if bname.split(".")[-1] == "embed_positions" and buf.dim() == 2 and buf.shape[0] > 1 and None not in out:
            half = buf.shape[-1] // 2
            inv = torch.atan2(buf[1, :half].double(), buf[1, half:].double())
            out[None] = (inv, 1.0)
    if not out and torch.is_tensor(getattr(m, "inv_freq", None)):
        out[None] = (m.inv_freq, default_scale)
    if not out:
        # some modules keep dicts of tensors
        for aname, val in vars(m).items():
            if isinstance(val, dict) and "inv_freq" in aname:
                for lt, t in val.items():
                    if torch.is_tensor(t):
                        out[lt] = (t, default_scale)
    return out


def hf_rotary(modules, cfg, layer_types):
    """Returns (class name, {lt: (inv_freq, scale)}, notes)."""
    notes = []
    cands = rotary_candidates(modules)
    if not cands:
        return None, None, ["no *RotaryEmbedding class in " + ", ".join(m.__name__ for m in modules if m)]
    for name, cls in cands:
        try:
            params = inspect.signature(cls.__init__).parameters
        except (TypeError, ValueError):
            params = {}
        if "config" not in params:
            notes.append(f"{name}.__init__{inspect.signature(cls.__init__)} takes no config")
            continue
        try:
            with torch.device("cpu"):
                if "layer_type" in params and layer_types:
                    out = {}
                    for lt in layer_types:
                        m = cls(cfg, layer_type=lt)
                        r = _read_rotary(m)
                        if r:
                            out[lt] = r.get(lt, r.get(None, next(iter(r.values()))))
                else:
                    out = _read_rotary(cls(cfg))
            if not out:
                notes.append(f"{name}: no inv_freq buffer after construction")
                continue
            return name, out, notes
        except Timeout:
            raise
        except Exception as e:
            notes.append(f"{name}({type(cfg).__name__}): {err(e)}")
    return None, None, notes


def _tensor_bytes(t):
    return t.numel() * t.element_size() if torch.is_tensor(t) else 0


def _tensors(obj, path="", depth=0):
    """(path, tensor) for every tensor reachable from a cache object (lists, dicts, attributes; 5 levels)."""
    if depth > 5:
        return
    if torch.is_tensor(obj):
        yield path, obj
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from _tensors(v, f"{path}[{i}]", depth + 1)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _tensors(v, f"{path}.{k}", depth + 1)
    elif hasattr(obj, "__dict__") and not isinstance(obj, (torch.nn.Module, type)):
        for k, v in vars(obj).items():
            yield from _tensors(v, f"{path}.{k}", depth + 1)


def cache_bytes(pkv) -> int | None:
    """Bytes of the keys and values in a returned cache (recurrent or convolution state not counted)."""
    if pkv is None:
        return None
    if hasattr(pkv, "layers") and isinstance(pkv.layers, (list, tuple)):
        return sum(_tensor_bytes(getattr(layer, "keys", None)) + _tensor_bytes(getattr(layer, "values", None))
                   for layer in pkv.layers)
    # older cache classes: tuples of (key, value), or attributes named after them
    return sum(_tensor_bytes(t) for p, t in _tensors(pkv, "cache")
               if isinstance(pkv, (tuple, list)) or re.search(r"key|value|\bk\b|\bv\b", p.lower()))


def _name(cfg, key):
    """The attribute a config class stores a standard key under (its attribute_map)."""
    amap = getattr(type(cfg), "attribute_map", {}) or {}
    return amap.get(key, key)


def _has(cfg, key):
    try:
        return getattr(cfg, key, None) is not None
    except Exception:
        return False


def per_layer_lists(d, n):
    """The config's per-layer lists (layer_types and any list with one entry per layer)."""
    out = {}
    for k, v in d.items():
        if k in ("layer_types",) or (isinstance(v, (list, str)) and not isinstance(v, bool) and len(v) == n and n > 2
                                     and k not in ("architectures", "model_type", "torch_dtype", "dtype")):
            if isinstance(v, (list, str)) and len(v) == n:
                out[k] = v
    return out


def pick_layers(lists, n0, cap=12):
    """Smallest L whose prefix of every per-layer list covers all its distinct values."""
    if not lists:
        return min(n0, 2) if n0 else 2, True
    for L in [2, 3, 4, 5, 6, 8, 10, 12, 16, 24, 32, 48, 64]:
        if L > n0 or L > cap:
            break
        if all(set(map(str, v[:L])) == set(map(str, v)) for v in lists.values()):
            return L, True
    return min(n0, cap), False


def tiny_overrides(cfg0):
    """kwargs making a tiny version of cfg0 (hidden 64, 4 heads) that keeps its attention/rope/kv structure."""
    d0 = cfg0.to_dict()
    o = {}

    def put(key, value):
        if _has(cfg0, key):
            o[_name(cfg0, key)] = value

    heads0 = getattr(cfg0, "num_attention_heads", None)
    hidden0 = getattr(cfg0, "hidden_size", None)
    put("hidden_size", 64)
    put("num_attention_heads", 4)
    for key in ("num_key_value_heads", "num_kv_heads"):
        if _has(cfg0, key) and isinstance(getattr(cfg0, key), int):
            kv0 = getattr(cfg0, key)
            o[_name(cfg0, key)] = 1 if kv0 == 1 else 4 if kv0 == heads0 else 2
    try:
        hd0 = d0.get("head_dim")
        if isinstance(hd0, int) and not isinstance(hd0, bool) and "kv_lora_rank" not in d0:
            natural = (hidden0 // heads0) if hidden0 and heads0 else None
            o["head_dim"] = 32 if hd0 != natural else 16
    except Exception:
        pass
    if "head_dim" in d0 and d0.get("head_dim") is None and "kv_lora_rank" not in d0 \
            and _has(cfg0, "num_attention_heads"):
        o["head_dim"] = 16
    if "num_key_value_heads" in d0 and d0.get("num_key_value_heads") is None and _has(cfg0, "num_attention_heads"):
        o["num_key_value_heads"] = 4
    if "num_experts_per_tok" in d0 and d0.get("num_experts_per_tok") is None and \
            any(isinstance(d0.get(k), int) for k in ("n_routed_experts", "num_experts", "num_local_experts")):
        o["num_experts_per_tok"] = 2
    for key, val in (("decoder_layers", None), ("encoder_layers", None), ("decoder_attention_heads", 4),
                     ("encoder_attention_heads", 4), ("decoder_ffn_dim", 128), ("encoder_ffn_dim", 128),
                     ("d_model", 64), ("hidden_size_per_layer_input", 16), ("vocab_size_per_layer_input", 512)):
        if isinstance(d0.get(key), int) and val is not None:
            o[key] = val
    for key, val in (("intermediate_size", 128), ("ffn_hidden_size", 128), ("moe_intermediate_size", 32),
                     ("shared_expert_intermediate_size", 32), ("expert_intermediate_size", 32),
                     ("num_experts", 4), ("num_local_experts", 4), ("n_routed_experts", 4), ("moe_num_experts", 4),
                     ("num_experts_per_tok", 2), ("moe_topk", 2), ("n_shared_experts", 1), ("num_shared_experts", 1),
                     ("n_group", 1), ("topk_group", 1), ("vocab_size", 512),
                     ("linear_num_key_heads", 2), ("linear_num_value_heads", 4), ("linear_key_head_dim", 16),
                     ("linear_value_head_dim", 16), ("mamba_d_state", 16), ("mamba_n_heads", 4), ("mamba_d_head", 16),
                     ("mamba_n_groups", 1), ("mamba_num_heads", 4), ("mamba_head_dim", 16), ("ssm_state_size", 16),
                     ("n_groups", 1), ("time_step_rank", 8)):
        if key in ("num_experts_per_tok", "moe_topk") and not _has(cfg0, key):
            continue
        if _has(cfg0, key) and isinstance(getattr(cfg0, key), int) and not isinstance(getattr(cfg0, key), bool):
            if getattr(cfg0, key) > val:
                o[_name(cfg0, key)] = val
    if isinstance(d0.get("mamba_expand"), int) and "mamba_n_heads" in d0:
        o["mamba_d_head"] = 16
        o["mamba_n_heads"] = d0["mamba_expand"] * 64 // 16
    if isinstance(d0.get("expand"), int) and isinstance(d0.get("num_heads"), int) and "head_dim" in d0:
        o["head_dim"] = 16
        o["num_heads"] = d0["expand"] * 64 // 16
    if _has(cfg0, "kv_lora_rank"):
        o["kv_lora_rank"] = 16
        if getattr(cfg0, "q_lora_rank", None):
            o["q_lora_rank"] = 32
        for key, val in (("qk_rope_head_dim", 8), ("qk_nope_head_dim", 16), ("v_head_dim", 16)):
            if _has(cfg0, key):
                o[key] = val
        if d0.get("head_dim") is not None and d0.get("head_dim") == d0.get("qk_rope_head_dim"):
            o["head_dim"] = 8
        if d0.get("qk_head_dim") is not None:
            o["qk_head_dim"] = 24
    if isinstance(d0.get("rotary_dim"), int) and heads0 and hidden0:
        hd_nat = d0.get("head_dim") or hidden0 // heads0
        frac = d0["rotary_dim"] / hd_nat
        hd_t = o.get("head_dim", 16)
        o["rotary_dim"] = max(2, int(round(hd_t * frac / 2)) * 2)
    rp = d0.get("rope_parameters")
    if isinstance(rp, dict):
        rp = copy.deepcopy(rp)
        hd_t = o.get("head_dim", 16)
        for sub in ([rp] + [v for v in rp.values() if isinstance(v, dict)]):
            sec = sub.get("mrope_section")
            if isinstance(sec, list) and sec and all(isinstance(x, int) for x in sec):
                planes = int(hd_t * (sub.get("partial_rotary_factor") or 1.0)) // 2
                new = [max(1, round(x * planes / sum(sec))) for x in sec]
                new[0] += planes - sum(new)
                sub["mrope_section"] = new
                o["rope_parameters"] = rp
    for key in ("sliding_window", "attention_chunk_size"):
        v = d0.get(key)
        if isinstance(v, int) and not isinstance(v, bool):
            o[key] = 8
    vocab = o.get(_name(cfg0, "vocab_size"), getattr(cfg0, "vocab_size", None))
    if isinstance(vocab, int):
        for key in ("bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "decoder_start_token_id",
                    "cls_token_id", "mask_token_id", "unk_token_id"):
            v = d0.get(key)
            if isinstance(v, int) and v >= vocab:
                o[key] = {"pad_token_id": 0, "bos_token_id": 1}.get(key, 2)
            elif isinstance(v, list) and any(isinstance(x, int) and x >= vocab for x in v):
                o[key] = [2]
    # per-layer lists
    n0 = d0.get("num_hidden_layers") or getattr(cfg0, "num_hidden_layers", None)
    lists = per_layer_lists(d0, n0) if isinstance(n0, int) else {}
    L, covered = pick_layers(lists, n0 or 2)
    if isinstance(n0, int):
        o[_name(cfg0, "num_hidden_layers")] = L
        for key in ("decoder_layers", "encoder_layers"):
            if isinstance(d0.get(key), int):
                o[key] = L
        shared0 = d0.get("num_kv_shared_layers")
        if isinstance(shared0, int) and shared0 > 0:
            o["num_kv_shared_layers"] = max(1, round(shared0 * L / n0))
    return o, lists, L, covered


def build_cfg(cfg_cls, o, lists, L):
    """Instantiate cfg_cls(**o); if a per-layer list did not follow the new layer count, pass its prefix."""
    try:
        cfg = cfg_cls(**o)
    except Exception:
        cfg = cfg_cls(**{**o, **{k: v[:L] for k, v in lists.items()}})
        return cfg
    d = cfg.to_dict()
    fix = {}
    for k, v in lists.items():
        now = d.get(k)
        if isinstance(now, (list, str)) and len(now) != L:
            fix[k] = v[:L]
    if fix:
        cfg = cfg_cls(**{**o, **fix})
    return cfg


def run_cache(model, vocab, seq, mode_meta=False):
    """The cache a model returns after ``seq`` tokens (random ids, or zeros on the meta device)."""
    device = "meta" if mode_meta else "cpu"
    hi = max(3, min(int(vocab) - 1, 100)) if vocab else 100
    ids = torch.randint(3, hi, (1, seq), device=device) if not mode_meta else torch.zeros(1, seq, dtype=torch.long,
                                                                                           device="meta")
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True)
    pkv = getattr(out, "past_key_values", None)
    if pkv is None:
        pkv = getattr(out, "cache", None)
    if pkv is None and isinstance(out, (tuple, list)) and len(out) > 1:
        pkv = out[1]
    return pkv


def make_kv_factory(model_type):
    """cfg, dtype -> a model of that type with a language-model head (or the bare model); None if neither."""
    from transformers import AutoModel, AutoModelForCausalLM
    if model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        def f(cfg, dtype):
            return AutoModelForCausalLM.from_config(cfg, dtype=dtype)
        return f
    if model_type in MODEL_MAPPING_NAMES:
        def g(cfg, dtype):
            return AutoModel.from_config(cfg, dtype=dtype)
        return g
    return None


TABLE_TYPES = {
    "Qwen3.8-27B": "qwen3_5_text", "DeepSeek-LLM-67B": "llama", "DeepSeek-V2": "deepseek_v2",
    "DeepSeek-V3": "deepseek_v3", "DeepSeek-V3.2": "deepseek_v32", "DeepSeek-V4-Flash": "deepseek_v4",
    "DeepSeek-V4-Pro": "deepseek_v4", "DeepSeek-V4.1-Flash": "deepseek_v4", "Kimi-K2": "deepseek_v3",
    "Kimi-Linear-48B-A3B": "kimi_linear", "GLM-4.5": "glm4_moe", "GLM-4.6": "glm4_moe", "GLM-4.5-Air": "glm4_moe",
    "GLM-5.3": "glm_moe_dsa", "Qwen2.5-7B": "qwen2", "Qwen3-8B": "qwen3", "Qwen3-Next-80B-A3B": "qwen3_next",
    "Command-A": "cohere2", "MiniMax-M2": "minimax_m2", "MiniMax-Text-01": "minimax", "gpt-oss-120b": "gpt_oss",
    "gpt-oss-20b": "gpt_oss", "Llama-2-7B": "llama", "Llama-3-70B": "llama", "Llama-3.1-8B": "llama",
    "Llama-3.1-405B": "llama", "Llama-4-Scout": "llama4_text", "Llama-4-Maverick": "llama4_text",
    "Gemma-2-27B": "gemma2", "Gemma-3-27B": "gemma3_text", "Gemma-4-31B": "gemma4_text", "Gemma-7B": "gemma",
    "Falcon-H1-0.5B": "falcon_h1", "OLMo-2-1124-7B": "olmo2", "GPT-NeoX-20B": "gpt_neox", "Pythia-70M": "gpt_neox",
    "GPT-J-6B": "gptj", "Grok-2": "grok-2",
}


def _phi3_factors(n):
    return [round(1.0 + 0.1 * i, 3) for i in range(n)]


_QWEN2_VL = {"hidden_size": 3584, "num_attention_heads": 28, "num_key_value_heads": 4, "num_hidden_layers": 28,
             "max_position_embeddings": 32768, "rope_theta": 1000000.0,
             "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}, "vocab_size": 152064}
_PYTHIA = {"model_type": "gpt_neox", "hidden_size": 2048, "num_attention_heads": 16, "num_hidden_layers": 24,
           "rotary_pct": 0.25, "rotary_emb_base": 10000, "max_position_embeddings": 2048, "vocab_size": 50304}

# Legacy config.json-style dicts (keys as written on the Hub), for the known suspects.
EXTRA = {
    "Falcon-7B-style dict (multi_query, 71 heads)": ("falcon", {
        "model_type": "falcon", "hidden_size": 4544, "num_attention_heads": 71, "num_hidden_layers": 32,
        "multi_query": True, "new_decoder_architecture": False, "parallel_attn": True, "alibi": False,
        "bias": False, "vocab_size": 65024, "max_position_embeddings": 2048, "rope_theta": 10000.0}),
    "Falcon-40B-style dict (new_decoder_architecture, num_kv_heads 8)": ("falcon", {
        "model_type": "falcon", "hidden_size": 8192, "num_attention_heads": 128, "num_kv_heads": 8,
        "num_hidden_layers": 60, "new_decoder_architecture": True, "parallel_attn": True, "alibi": False,
        "bias": False, "vocab_size": 65024, "max_position_embeddings": 2048, "rope_theta": 10000.0}),
    "Falcon-7B with n_head/n_layer keys (RW-era names)": ("falcon", {
        "model_type": "falcon", "hidden_size": 4544, "n_head": 71, "n_layer": 32, "multi_query": True,
        "new_decoder_architecture": False, "parallel_attn": True, "alibi": False, "bias": False,
        "vocab_size": 65024, "max_position_embeddings": 2048}),
    "falcon-7b (HF to_dict form)": ("falcon", "to_dict", {
        "hidden_size": 4544, "num_attention_heads": 71, "num_hidden_layers": 32, "multi_query": True,
        "new_decoder_architecture": False}),
    "falcon-40b (HF to_dict form)": ("falcon", "to_dict", {
        "hidden_size": 8192, "num_attention_heads": 128, "num_kv_heads": 8, "num_hidden_layers": 60,
        "new_decoder_architecture": True}),
    "Phi-3-mini-128k (longrope)": ("phi3", {
        "model_type": "phi3", "hidden_size": 3072, "num_attention_heads": 32, "num_key_value_heads": 32,
        "num_hidden_layers": 32, "max_position_embeddings": 131072, "original_max_position_embeddings": 4096,
        "rope_theta": 10000.0, "rope_scaling": {"type": "longrope", "long_factor": _phi3_factors(48),
                                                 "short_factor": [1.0] * 48}, "vocab_size": 32064}),
    "Phi-3.5-mini / Phi-4-mini (longrope, partial_rotary_factor 0.75)": ("phi3", {
        "model_type": "phi3", "hidden_size": 3072, "num_attention_heads": 24, "num_key_value_heads": 8,
        "num_hidden_layers": 32, "max_position_embeddings": 131072, "original_max_position_embeddings": 4096,
        "partial_rotary_factor": 0.75, "rope_theta": 10000.0,
        "rope_scaling": {"type": "longrope", "long_factor": _phi3_factors(48), "short_factor": [1.0] * 48},
        "vocab_size": 200064}),
    "Qwen2-VL-7B text (rope_scaling type mrope)": ("qwen2_vl_text", dict(_QWEN2_VL, model_type="qwen2_vl_text")),
    "Qwen2-VL-7B full config.json (nested text, legacy)": ("qwen2_vl", dict(_QWEN2_VL, model_type="qwen2_vl")),
    "pythia-1.4b (config.json: rotary_pct, rotary_emb_base)": ("gpt_neox", _PYTHIA),
    "pythia-1.4b with rope_theta added (rotary_pct 0.25, no partial_rotary_factor)": ("gpt_neox",
                                                                                      dict(_PYTHIA, rope_theta=10000)),
    "gemma-4 Hub-style (global_head_dim 512, attention_k_eq_v) vs its HF to_dict": ("gemma4_text", "to_dict", {
        "hidden_size": 2560, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
        "global_head_dim": 512, "num_hidden_layers": 12, "sliding_window": 512}),
    "stablelm-3b-4e1t (partial_rotary_factor 0.25)": ("stablelm", {
        "model_type": "stablelm", "hidden_size": 2560, "num_attention_heads": 32, "num_key_value_heads": 32,
        "num_hidden_layers": 32, "partial_rotary_factor": 0.25, "rope_theta": 10000,
        "max_position_embeddings": 4096, "vocab_size": 50304}),
    "persimmon-8b (partial_rotary_factor 0.5)": ("persimmon", {
        "model_type": "persimmon", "hidden_size": 4096, "num_attention_heads": 64, "num_hidden_layers": 36,
        "partial_rotary_factor": 0.5, "rope_theta": 25000.0, "max_position_embeddings": 16384, "vocab_size": 262144}),
    "phi-2 (partial_rotary_factor 0.4)": ("phi", {
        "model_type": "phi", "hidden_size": 2560, "num_attention_heads": 32, "num_hidden_layers": 32,
        "partial_rotary_factor": 0.4, "rope_theta": 10000.0, "max_position_embeddings": 2048, "vocab_size": 51200}),
    "gpt-j-6b (config.json: rotary_dim, n_embd, n_head)": ("gptj", {
        "model_type": "gptj", "n_embd": 4096, "n_head": 16, "n_layer": 28, "rotary_dim": 64, "n_positions": 2048,
        "vocab_size": 50400}),
    "Mistral-7B-v0.1 (sliding_window 4096, no layer_types)": ("mistral", {
        "model_type": "mistral", "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
        "num_hidden_layers": 32, "sliding_window": 4096, "rope_theta": 10000.0, "max_position_embeddings": 32768,
        "vocab_size": 32000}),
    "gemma-2-9b (legacy: no layer_types)": ("gemma2", {
        "model_type": "gemma2", "hidden_size": 3584, "num_attention_heads": 16, "num_key_value_heads": 8,
        "head_dim": 256, "num_hidden_layers": 42, "sliding_window": 4096, "rope_theta": 10000.0,
        "max_position_embeddings": 8192, "vocab_size": 256000, "query_pre_attn_scalar": 256}),
    "gemma-3-4b text (legacy: rope_local_base_freq, rope_scaling linear 8)": ("gemma3_text", {
        "model_type": "gemma3_text", "hidden_size": 2560, "num_attention_heads": 8, "num_key_value_heads": 4,
        "head_dim": 256, "num_hidden_layers": 34, "sliding_window": 1024, "sliding_window_pattern": 6,
        "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
        "rope_scaling": {"rope_type": "linear", "factor": 8.0}, "max_position_embeddings": 131072,
        "vocab_size": 262208}),
    "gemma-3-1b (legacy: rope_local_base_freq, no scaling)": ("gemma3_text", {
        "model_type": "gemma3_text", "hidden_size": 1152, "num_attention_heads": 4, "num_key_value_heads": 1,
        "head_dim": 256, "num_hidden_layers": 26, "sliding_window": 512, "sliding_window_pattern": 6,
        "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0, "rope_scaling": None,
        "max_position_embeddings": 32768, "vocab_size": 262144}),
    "DeepSeek-V3 (config.json: yarn, mscale)": ("deepseek_v3", {
        "model_type": "deepseek_v3", "hidden_size": 7168, "num_attention_heads": 128, "num_key_value_heads": 128,
        "num_hidden_layers": 61, "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64, "v_head_dim": 128, "max_position_embeddings": 163840, "rope_theta": 10000,
        "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
                         "original_max_position_embeddings": 4096, "type": "yarn"}, "vocab_size": 129280}),
    "command-r (cohere)": ("cohere", {
        "model_type": "cohere", "hidden_size": 8192, "num_attention_heads": 64, "num_key_value_heads": 64,
        "num_hidden_layers": 40, "rope_theta": 8000000.0, "max_position_embeddings": 131072, "vocab_size": 256000}),
    "Llama-3.2-1B (llama3 scaling, head_dim 64)": ("llama", {
        "model_type": "llama", "hidden_size": 2048, "num_attention_heads": 32, "num_key_value_heads": 8,
        "head_dim": 64, "num_hidden_layers": 16, "rope_theta": 500000.0, "max_position_embeddings": 131072,
        "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                         "original_max_position_embeddings": 8192, "rope_type": "llama3"}, "vocab_size": 128256}),
    "Qwen3-0.6B (head_dim 128 != 1024/16)": ("qwen3", {
        "model_type": "qwen3", "hidden_size": 1024, "num_attention_heads": 16, "num_key_value_heads": 8,
        "head_dim": 128, "num_hidden_layers": 28, "rope_theta": 1000000, "max_position_embeddings": 40960,
        "vocab_size": 151936}),
}


# ------------------------------------------------------------------------------------------------ outcomes
def outcome(status: str, detail: str = "") -> dict:
    return {"status": status, "detail": detail}


def verdict(mismatches: list[str], refusals: list[str], matched: str) -> dict:
    """A silent wrong number first, then posbook's first refusal by name, else a match described by ``matched``."""
    if mismatches:
        return outcome("mismatch", "; ".join(mismatches)[:600])
    if refusals:
        return outcome("refused", refusals[0])
    return outcome("match", matched)


def attention_kinds(d: dict) -> list[str]:
    kinds = []
    for k in map(str, d.get("layer_types") or []):
        if k not in kinds and k not in STATE_KINDS:
            kinds.append(k)
    return kinds


def legacy_form(d: dict) -> dict | None:
    """``d`` rewritten as an older config.json: rope_theta and partial_rotary_factor at the top, rope_scaling."""
    rope = d.get("rope_parameters")
    if not isinstance(rope, dict) or any(isinstance(v, dict) for v in rope.values()):
        return None
    out = {k: v for k, v in d.items() if k != "rope_parameters"}
    rope = dict(rope)
    out["rope_theta"] = rope.pop("rope_theta", None)
    if "partial_rotary_factor" in rope:
        out["partial_rotary_factor"] = rope.pop("partial_rotary_factor")
    out["rope_scaling"] = None if set(rope) <= {"rope_type"} and rope.get("rope_type") == "default" else rope
    return out


def config_forms(cfg, text) -> dict:
    """The forms of one config that posbook must read alike: name -> input."""
    forms = {"object": text, "to_dict": text.to_dict()}
    legacy = legacy_form(forms["to_dict"])
    if legacy is not None:
        forms["legacy"] = legacy
    if cfg is not text:
        forms["nested"] = cfg.to_dict()
    return forms


def _relerr(a: torch.Tensor, b: torch.Tensor) -> float:
    both_zero = (a == 0) & (b == 0)
    rel = torch.where(both_zero, torch.zeros_like(a), (a - b).abs() / b.abs().clamp_min(1e-300))
    return float(rel.max()) if rel.numel() else 0.0


def rope_check(modules, text, forms: dict) -> dict:
    """One outcome for the RoPE of a config: every layer type, every form, against the HF rotary module."""
    kinds = attention_kinds(forms["to_dict"])
    name, hf, notes = hf_rotary(modules, text, kinds)
    if hf is None:
        no_rope = notes and notes[0].startswith("no *RotaryEmbedding")
        return outcome("no_rope" if no_rope else "unavailable", "; ".join(notes)[:300])
    d = forms["to_dict"]
    rope = d.get("rope_parameters") if "rope_parameters" in d else d.get("rope_scaling")
    nested = isinstance(rope, dict) and any(isinstance(v, dict) for v in rope.values())
    if set(hf) == {None}:
        labels = [k for k, v in rope.items() if isinstance(v, dict)] if nested else [None]
        pairs = [(lt, None) for lt in labels]
    else:
        pairs = [(k, k) for k in hf if k is not None]
    refusals, problems = [], []
    for layer_type, key in pairs:
        if key not in hf:
            return outcome("unavailable", f"{name} has no inv_freq for {layer_type!r}")
        hf_inv = hf[key][0].detach().double().flatten()
        hf_scale = float(hf[key][1])
        answers = {}
        for form, config in forms.items():
            try:
                inv, scale = pb.rope_parameters(config, layer_type=layer_type, dtype=torch.float64)
                answers[form] = (inv, scale)
            except (ValueError, TypeError) as e:
                answers[form] = err(e)
        refusals += [f"[{form}] {a}" for form, a in answers.items() if isinstance(a, str)]
        answers = {form: a for form, a in answers.items() if not isinstance(a, str)}
        for form, (inv, scale) in answers.items():
            if inv.numel() != hf_inv.numel():
                problems.append(f"{layer_type} [{form}]: {inv.numel()} planes, HF {hf_inv.numel()}")
            elif _relerr(inv, hf_inv) > RTOL:
                same_set = torch.allclose(inv.sort().values, hf_inv.sort().values, rtol=RTOL, atol=0)
                problems.append(f"{layer_type} [{form}]: " + ("the same frequencies in another order" if same_set
                                else f"inv_freq off by up to {_relerr(inv, hf_inv):.3g} (relative)"))
            elif not math.isclose(scale, hf_scale, rel_tol=RTOL):
                problems.append(f"{layer_type} [{form}]: attention factor {scale:.6g}, HF {hf_scale:.6g}")
    return verdict(problems, refusals, f"{name}, {len(pairs)} rope dict(s), forms {sorted(forms)}")


def kv_check(forms: dict, cached: int, seq: int, dtype_bytes: int, *, total: bool = False) -> dict:
    """posbook's bytes (per token, or in all after ``seq`` tokens) against ``cached`` bytes, for every form."""
    answers = {}
    for form, config in forms.items():
        try:
            answers[form] = (kvcache.kv_cache_bytes(config, seq, dtype_bytes) if total
                             else kvcache.kv_cache_bytes_per_token(config, dtype_bytes) * seq)
        except (ValueError, TypeError) as e:
            answers[form] = err(e)
    refused = [f"[{form}] {a}" for form, a in answers.items() if isinstance(a, str)]
    answers = {form: a for form, a in answers.items() if not isinstance(a, str)}
    wrong = {f: a for f, a in answers.items() if not math.isclose(a, cached, rel_tol=1e-9)}
    if wrong:
        return outcome("mismatch", f"posbook {wrong} bytes, HF caches {cached} after {seq} tokens")
    if refused:  # a form posbook cannot read must say so; the others must still be right
        return outcome("refused", refused[0])
    return outcome("match", f"{cached} bytes after {seq} tokens")


def layout_check(d: dict) -> dict:
    """The layer kinds posbook derives for a config.json without ``layer_types`` against those transformers derived
    (its ``to_dict()`` writes them): equal, or refused by name."""
    hf_kinds = d.get("layer_types")
    if not isinstance(hf_kinds, list) or len(hf_kinds) != d.get("num_hidden_layers"):
        return outcome("unavailable", "transformers writes no layer_types for this config")
    try:
        kinds = kvcache.layer_kinds({k: v for k, v in d.items() if k != "layer_types"})
    except (ValueError, TypeError) as e:
        return outcome("refused", err(e))
    if kinds != list(map(str, hf_kinds)):
        return outcome("mismatch", f"posbook lays out {dict(collections.Counter(kinds))}, transformers "
                                   f"{dict(collections.Counter(map(str, hf_kinds)))}")
    return outcome("match", "same layer kinds")


REMOVABLE = set(DEFAULTED_KEYS) | {"rope_parameters", "rope_scaling", "rope_theta", "layer_types"}


def _reading(config) -> dict:
    """What posbook reads from a config, for comparing two forms of it: the layer kinds, the KV bytes per token and
    the report's position and cache sections at 4,096 tokens (a refusal is its message)."""
    def messages_alike(value):  # two refusals of one thing name different keys; they are the same outcome
        if isinstance(value, dict):
            return {k: "refused" if k in ("error", "reason") else messages_alike(v) for k, v in value.items()}
        return [messages_alike(v) for v in value] if isinstance(value, list) else value

    def by_layer_type(report):  # entries merged or ordered differently report the same thing per layer type
        out = {k: v for k, v in report.items() if k in ("kv_cache", "layers", "max_position_embeddings")}
        grouped = ("layer_types", "layers", "nope_layers", "windows")
        out["rope"] = {kind: {k: v for k, v in entry.items() if k not in grouped}
                       for entry in report["rope"] for kind in entry["layer_types"]}
        out["windows"] = {k: v for entry in report["rope"] for k, v in (entry.get("windows") or {}).items()}
        out["nope_layers"] = sum(entry.get("nope_layers") or 0 for entry in report["rope"])
        return out

    out = {}
    for name, read in (("layers", lambda: kvcache.layer_kinds(config)),
                       ("kv", lambda: kvcache.kv_cache_bytes_per_token(config, 2)),
                       ("report", lambda: by_layer_type(pb.config_report(config, context=4096)))):
        try:
            out[name] = messages_alike(read())
        except (ValueError, TypeError) as e:
            out[name] = "refused: " + err(e, 200)
    return out


def _refusal(config) -> str:
    """The first thing posbook's report of ``config`` says it cannot read, as the report says it."""
    report = pb.config_report(config, context=4096)
    reasons = [e["reason"] for e in report["rope"] if e["encoding"] in ("refused", "invalid")]
    reasons += [report["kv_cache"]["error"]] if "error" in report["kv_cache"] else []
    state = report["kv_cache"].get("linear_state") or {}
    reasons += [state["error"]] if "error" in state else []
    return "report refused: " + (reasons[0][:200] if reasons else "a part of it")


def _refuses_more(want, got) -> bool:
    """Whether ``got`` refuses (a refusal, or a report part marked refused) where ``want`` gives a value."""
    text_want, text_got = json.dumps(want), json.dumps(got)
    return text_got.count('"refused') > text_want.count('"refused') or (
        isinstance(got, str) and got.startswith("refused"))


def removed_keys_check(config_class, d: dict) -> dict:
    """posbook's reading of ``d`` with each key it reads removed, against its reading of what transformers' class
    makes of the same dict (the class fills the key in): equal for every key, or refused by name. A key whose
    removal transformers itself refuses is skipped."""
    d = {k: v for k, v in d.items() if k != "text_config"}
    keys = sorted(k for k in d if k in REMOVABLE and d[k] is not None)
    silent, refused, checked = [], [], 0
    for key in keys:
        reduced = {k: v for k, v in d.items() if k != key}
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                filled = config_class.from_dict(copy.deepcopy(reduced)).to_dict()
        except Exception:
            continue
        checked += 1
        want, got = _reading(filled), _reading(reduced)
        differs = [part for part in want if want[part] != got[part]]
        refusing = [part for part in differs if _refuses_more(want[part], got[part])]
        if refusing:  # a part refused explains the others' differences: they are read from the same gap
            part = refusing[0]
            refused.append(f"without {key}: {got[part] if isinstance(got[part], str) else _refusal(reduced)}")
        elif differs:
            silent.append(f"without {key}: {', '.join(differs)} differ{'s' * (len(differs) == 1)}")
    return verdict(silent, refused, f"{checked} keys removed one at a time")


def report_check(config) -> dict:
    """``posbook inspect``'s report of a config: it runs, or posbook refuses it by name (any other exception fails
    the test)."""
    try:
        pb.config_report(config, context=4096)
    except (ValueError, TypeError) as e:
        return outcome("refused", err(e))
    return outcome("match", "reported")


def _tiny_model(text, factory):
    """A tiny float32 model of ``text``'s architecture and its config; None where transformers cannot build one."""
    o, lists, layers, _ = tiny_overrides(text)
    n0 = text.to_dict().get("num_hidden_layers") or layers
    variants, reasons = [(o, layers)], []
    while variants and len(reasons) < 4:
        o_try, layers_try = variants.pop(0)
        try:
            with limit(CHECK_SECONDS):
                tiny = build_cfg(type(text), o_try, lists, layers_try)
                torch.manual_seed(0)
                model = factory(tiny, torch.float32).eval()
                if run_cache(model, getattr(tiny, "vocab_size", 100), SEQ) is None and not o_try.get("is_decoder") \
                        and "is_decoder" in tiny.to_dict():
                    raise RuntimeError("no cache returned (is_decoder=False)")  # BERT-style models cache as decoders
                return tiny, model, None
        except Exception as e:
            msg = str(e)
            reasons.append(err(e, 200))
            if "split_with_sizes" in msg or "mrope" in msg:
                # the module's default mrope_section does not fit a tiny head: scale it
                rope = copy.deepcopy(tiny.to_dict().get("rope_parameters") or {})
                planes = pb.rope_spec(tiny.to_dict()).rotary_dim // 2
                section = [max(1, round(x * planes / 64)) for x in (16, 24, 24)]
                section[0] += planes - sum(section)
                variants.append(({**o_try, "rope_parameters": {**rope, "mrope_section": section}}, layers_try))
            elif "get_seq_length" in msg or "LinearAttention layers" in msg:
                more = next((n for n in (8, 16) if layers_try < n <= max(n0, 2)), None)
                if more:
                    variants.append(({**o_try, _name(text, "num_hidden_layers"): more}, more))
            elif "is_decoder" in msg:
                variants.append(({**o_try, "is_decoder": True}, layers_try))
    return None, None, " / ".join(reasons)


def check_architecture(model_type: str, model_class: str) -> dict:
    """{"rope", "report", "layout", "rope_tiny", "kv", "kv_window"} outcomes for one architecture (or
    {"covered_by": type} for a VLM whose text config is a causal-LM config checked on its own). For the
    architectures in SLOW_TO_BUILD only the default config's checks run."""
    with limit(4 * CHECK_SECONDS):
        cfg = CONFIG_MAPPING[model_type]()
        _, module = module_of_class(model_class)
    text = cfg.get_text_config(decoder=True)
    text_type = getattr(text, "model_type", None)
    if text is not cfg and text_type != model_type and text_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES \
            and CONFIG_MAPPING_NAMES.get(text_type) == type(text).__name__:
        return {"covered_by": text_type}
    modules = [module]
    if text is not cfg and text_type in MODEL_MAPPING_NAMES:
        modules.append(module_of_class(class_name(MODEL_MAPPING_NAMES[text_type]))[1])
    result = {}
    try:
        with limit(CHECK_SECONDS):
            result["rope"] = rope_check(modules, text, config_forms(cfg, text))
    except Timeout:
        result["rope"] = outcome("unavailable", "the rotary module took too long to build")
    result["report"] = report_check(text.to_dict())
    result["layout"] = layout_check(text.to_dict())
    result["removed_keys"] = removed_keys_check(type(text), text.to_dict())
    factory = make_kv_factory(text_type if text is not cfg else model_type)
    if model_type in SLOW_TO_BUILD:
        result["kv"] = outcome("unavailable", f"not built on CPU: {SLOW_TO_BUILD[model_type]}")
        return result
    if factory is None:
        result["kv"] = outcome("unavailable", f"no causal-LM or base model class for {text_type}")
        return result
    tiny, model, why = _tiny_model(text, factory)
    if tiny is None:
        result["kv"] = outcome("unavailable", "transformers cannot build or run a tiny instance: " + why)
        return result
    forms = {"object": tiny, "to_dict": tiny.to_dict()}
    result["rope_tiny"] = rope_check(modules, tiny, forms)
    with limit(CHECK_SECONDS):
        cached = cache_bytes(run_cache(model, getattr(tiny, "vocab_size", 100), SEQ))
    result["kv"] = kv_check(forms, cached, SEQ, 4) if cached is not None else outcome(
        "unavailable", "the model returns no cache")
    d = forms["to_dict"]
    window = d.get("sliding_window") or d.get("attention_chunk_size")
    kinds = set(map(str, d.get("layer_types") or []))
    if result["kv"]["status"] == "match" and isinstance(window, int) and (
            not kinds or kinds & {"sliding_attention", "chunked_attention"}):
        n = window + 5
        with limit(CHECK_SECONDS):
            cached = cache_bytes(run_cache(model, getattr(tiny, "vocab_size", 100), n))
        result["kv_window"] = kv_check(forms, cached, n, 4, total=True)
    return result


def _hf_config(model_type: str, raw: dict):
    """transformers' config object for a config.json dict (its strict typing wants bools where some Hub files
    have 0/1: coerced for transformers only)."""
    raw = copy.deepcopy(raw)
    for _ in range(5):
        try:
            return CONFIG_MAPPING[model_type].from_dict(copy.deepcopy(raw))
        except Exception as e:
            m = re.search(r"Field '(\w+)' expected bool, got int", str(e))
            if not m:
                raise
            raw[m.group(1)] = bool(raw[m.group(1)])
    raise RuntimeError(f"could not build a {model_type} config")


def _meta_model_cache(text, factory) -> tuple[int, int, object]:
    """(key/value bytes after SEQ tokens, bytes per number, its config) of a model of ``text``'s shapes built on
    the meta device (no memory): layers cut to the fewest that hold every layer kind, experts and vocabulary cut,
    which the cache per token does not depend on."""
    d = copy.deepcopy(text.to_dict())
    for key, val in (("num_experts", 4), ("num_local_experts", 4), ("n_routed_experts", 4), ("moe_num_experts", 4),
                     ("num_experts_per_tok", 2), ("n_group", 1), ("topk_group", 1), ("vocab_size", 512)):
        if isinstance(d.get(key), int) and d[key] > val:
            d[key] = val
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        if isinstance(d.get(key), int) and d[key] >= 512:
            d[key] = 2
        elif isinstance(d.get(key), list):
            d[key] = [2]
    for standard, old_names in KEY_ALIASES.items():  # transformers may write a key under both of its names
        if d.get(standard) is not None:
            for old in old_names:
                d.pop(old, None)
    n = d.get("num_hidden_layers")
    lists = per_layer_lists(d, n) if isinstance(n, int) else {}
    layers, _ = pick_layers(lists, n or 2, cap=8)
    if isinstance(d.get("per_layer_config"), dict):  # Gemma 4: overrides of the layers kept
        d["per_layer_config"] = {k: v for k, v in d["per_layer_config"].items() if int(k) < layers}
    overrides = {k: v for k, v in d.items() if k not in lists and k not in ("num_hidden_layers",)}
    if isinstance(n, int):
        overrides["num_hidden_layers"] = layers
    small = build_cfg(type(text), overrides, lists, layers) if isinstance(n, int) else type(text).from_dict(d)
    for dtype, nbytes in ((torch.float32, 4), (torch.bfloat16, 2)):  # grouped-mm experts on meta want bfloat16
        try:
            with torch.device("meta"):
                model = factory(small, dtype)
            return cache_bytes(run_cache(model, 512, SEQ, mode_meta=True)), nbytes, small
        except RuntimeError as e:
            if "BF16" not in str(e):
                raise
    raise RuntimeError("no dtype builds on the meta device")


def forms_agree(forms: dict) -> dict:
    """posbook's bytes per token, and in all past the longest window, must be the same for every form of one config
    (or refused by name): the object's to_dict() holds the layer kinds transformers derived, the config.json may
    leave them to be derived."""
    d = forms["to_dict"]
    length = 3 * max(d.get("sliding_window") or 0, d.get("attention_chunk_size") or 0) + 5
    answers = {}
    for form, config in forms.items():
        try:
            answers[form] = (kvcache.kv_cache_bytes_per_token(config, 4), kvcache.kv_cache_bytes(config, length, 4))
        except (ValueError, TypeError) as e:
            answers[form] = err(e)
    numbers = {f: a for f, a in answers.items() if not isinstance(a, str)}
    if len(set(numbers.values())) > 1:
        return outcome("mismatch", f"the forms of one config give different (bytes per token, bytes after {length} "
                                   f"tokens): {numbers}")
    refused = [f"[{form}] {a}" for form, a in answers.items() if isinstance(a, str)]
    return outcome("refused", refused[0]) if refused else outcome("match", f"{sorted(answers)} agree")


def check_hub_config(model_type: str, raw: dict) -> dict:
    """{"rope", "kv_forms", "report", "kv"} outcomes for one config.json dict, read by posbook as given and by
    transformers: the rope of every form against the rotary module, the bytes alike in every form, and per token
    equal to what a meta-device model of the same shapes caches."""
    try:
        with limit(4 * CHECK_SECONDS):
            cfg = _hf_config(model_type, raw)
            model_class = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(model_type) or MODEL_MAPPING_NAMES.get(model_type)
            module = module_of_class(class_name(model_class))[1] if model_class else None
    except Exception as e:
        return {"rope": outcome("unavailable", "transformers: " + err(e)), "kv": outcome("unavailable", err(e))}
    text = cfg.get_text_config(decoder=True)
    modules = [module]
    if text is not cfg and MODEL_MAPPING_NAMES.get(text.model_type):
        modules.append(module_of_class(class_name(MODEL_MAPPING_NAMES[text.model_type]))[1])
    forms = {"config.json": raw, "object": text, "to_dict": text.to_dict()}
    result = {}
    with limit(CHECK_SECONDS):
        result["rope"] = rope_check(modules, text, forms)
    result["kv_forms"] = forms_agree(forms)
    result["report"] = report_check(raw)
    # a config.json always names its model_type (the model table's configs leave it out)
    result["removed_keys"] = removed_keys_check(type(text), {"model_type": model_type, **raw} if text is cfg
                                                else text.to_dict())
    factory = make_kv_factory(text.model_type)
    try:
        with limit(3 * CHECK_SECONDS):
            cached, nbytes, small = _meta_model_cache(text, factory)
    except Exception as e:
        result["kv"] = outcome("unavailable", "meta-device model: " + err(e))
        return result
    result["kv"] = kv_check({"object": small, "to_dict": small.to_dict()}, cached, SEQ, nbytes)
    return result


def hub_configs() -> dict[str, tuple[str, dict]]:
    """label -> (model_type, config.json dict): the model table's configs, then the hand-written legacy forms."""
    out = {}
    for name, entry in sorted(pb.models().items()):
        if TABLE_TYPES.get(name) in CONFIG_MAPPING_NAMES:
            out[f"table: {name}"] = (TABLE_TYPES[name], entry["config"])
    for label, spec in EXTRA.items():
        if len(spec) == 3:  # a to_dict() form: instantiate with these arguments
            model_type, _, kwargs = spec
            out[label] = (model_type, CONFIG_MAPPING[model_type](**kwargs).to_dict())
        else:
            out[label] = spec
    return out


# ------------------------------------------------------------------------------------------------ the record
def summary(result: dict) -> dict:
    """What the record keeps of one result: the status of each check, with posbook's message when it refused and
    transformers' reason when a piece was unavailable (a match needs no detail)."""
    if "covered_by" in result or "error" in result:
        return result
    return {check: o["status"] if o["status"] in ("match", "no_rope") else o for check, o in result.items()}


def run_all() -> dict:
    warnings.filterwarnings("ignore")
    record = {"transformers": transformers.__version__, "architectures": {}, "hub_configs": {}}
    for model_type, model_class in architectures():
        try:
            record["architectures"][model_type] = summary(check_architecture(model_type, model_class))
        except Exception as e:
            record["architectures"][model_type] = {"error": err(e)}
    for label, (model_type, raw) in hub_configs().items():
        record["hub_configs"][label] = summary(check_hub_config(model_type, raw))
    return record


if __name__ == "__main__":
    import argparse
    import os
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--write", action="store_true", help=f"rewrite {COVERAGE_FILE.name} from this run")
    p.add_argument("--only", default="", help="comma-separated model types: print their results")
    args = p.parse_args()
    torch.set_num_threads(1)
    if args.only:
        for model_type, model_class in architectures():
            if model_type in args.only.split(","):
                print(model_type, json.dumps(check_architecture(model_type, model_class), indent=1))
    else:
        record = run_all()
        if args.write:  # the reviewed reasons for each deviation are kept
            record["deviations"] = json.loads(COVERAGE_FILE.read_text()).get("deviations", {}) \
                if COVERAGE_FILE.exists() else {}
            COVERAGE_FILE.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
        else:
            print(json.dumps(record, indent=1))
