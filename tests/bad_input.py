"""Bad-input probes over every public callable: the harness behind tests/test_bad_input_generated.py.

Every public callable (``posbook.__all__``, the public functions and classes of ``posbook.experiments.*`` and
``posbook.theory.*``, and the public methods of those classes) is found by introspection. Each has one valid
call in ``SPECIMENS``; a new public name without one fails the coverage test. From the valid call the harness
derives, argument by argument, inputs of three sorts:

- **bad**: a value outside the argument's domain (a bool or a numeric string for a number, a float tensor for
  token ids, NaN for a scale, a missing file, a config key set to a bool, ...). It must get a ValueError or
  TypeError raised by posbook whose message names the argument (or the config key): *clear*. Returning is
  *silent-bad*, except NaN/inf inside a data tensor where the docstring documents that they pass through.
- **borderline**: inside the domain's type but possibly refused in combination (0 or 2**40 for a size, an empty
  dimension, mixed dtypes, another layout of the tensor). Returning or a clear error are both fine.
- **unusual**: valid and must keep working (non-contiguous tensors, requires_grad, float64).

Outcomes: ok, clear, vague (posbook's ValueError/TypeError that does not name the argument), cryptic (any other
exception, or an error raised from inside torch or Python rather than by posbook), silent-bad, hang (no answer
within ``HANG_SECONDS``), broken (an unusual input refused). Values are drawn with hypothesis (derandomized, no
database) on top of fixed edge cases, so a run is the same every time.

``python tests/bad_input.py`` prints the counts by outcome and the findings.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import importlib
import inspect
import json
import math
import pickle
import pkgutil
import re
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import posbook as pb
import posbook.experiments as ex
import posbook.theory as theory
from posbook.experiments import (checkpoints, compare, corpus, evaluation, extension, grids, model as model_lib, probes,
                                 store, tasks, toy, trainer)
from posbook.experiments import config as config_lib
from posbook.theory import heads, nope

SRC = Path(pb.__file__).resolve().parent
HANG_SECONDS = 10
BAD, BORDERLINE, UNUSUAL = "bad", "borderline", "unusual"
FAILING = ("cryptic", "silent-bad", "hang", "broken")
ALLOWED_ERRORS = (ValueError, TypeError, OSError, MemoryError)


# ----------------------------------------------------------------------------------------------------------------
# Discovery


def public_callables() -> dict[str, Callable]:
    """Qualified name -> callable, for everything a reader can reach by a documented public name."""
    found: dict[str, Callable] = {}
    for name in pb.__all__:
        obj = getattr(pb, name)
        if callable(obj) and not isinstance(obj, dict):
            found[f"posbook.{name}"] = obj
    for package in (ex, theory):
        for info in pkgutil.iter_modules(package.__path__):
            if info.name.startswith("_"):
                continue
            module = importlib.import_module(f"{package.__name__}.{info.name}")
            for name, obj in vars(module).items():
                if not name.startswith("_") and callable(obj) and getattr(obj, "__module__", None) == module.__name__:
                    found[f"{module.__name__}.{name}"] = obj
    for qualname, obj in list(found.items()):
        if inspect.isclass(obj) and not issubclass(obj, BaseException):
            for name, member in vars(obj).items():
                if not name.startswith("_") and inspect.isfunction(member):
                    found[f"{qualname}.{name}"] = member
    return found


# ----------------------------------------------------------------------------------------------------------------
# Valid specimens


def llama_config() -> dict[str, Any]:
    return {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
            "num_hidden_layers": 2, "max_position_embeddings": 128, "rope_theta": 10000.0,
            "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}}


def gemma_config() -> dict[str, Any]:
    return {"model_type": "gemma3_text", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
            "head_dim": 16, "num_hidden_layers": 2, "max_position_embeddings": 128, "sliding_window": 8,
            "layer_types": ["sliding_attention", "full_attention"],
            "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                "full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e6}}}


def mla_config() -> dict[str, Any]:
    return {"model_type": "deepseek_v3", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 4,
            "num_hidden_layers": 2, "kv_lora_rank": 16, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8,
            "v_head_dim": 16, "max_position_embeddings": 128, "rope_theta": 10000.0}


def rand(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def probs(*shape: int, seed: int = 0) -> torch.Tensor:
    return rand(*shape, seed=seed).softmax(-1)


def inv8() -> torch.Tensor:
    return pb.default_inv_freq(8)


def cos_sin8(t: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    return pb.rope_cos_sin(torch.arange(t), inv8())


TINY_GPT = dict(n_layer=2, n_embd=32, n_head=4, max_seq_len=32, window=4, chunk_size=4)


def tiny_gpt(pattern: str = "RN") -> model_lib.GPT:
    torch.manual_seed(0)
    return model_lib.GPT(model_lib.GPTConfig(pattern=pattern, **TINY_GPT)).eval()


def tiny_run(**fields: Any) -> config_lib.TrainConfig:
    values = dict(task="text", preset="cpu", model=dict(TINY_GPT, pattern="RN"), steps=2, batch_size=2, seq_len=8,
                  warmup=1, eval_every=2, eval_batches=1, corpus_bytes=200_000, eval_seq_lens=[8, 16])
    values.update(fields)
    return config_lib.TrainConfig(**values)


def tiny_task_run() -> config_lib.TrainConfig:
    return config_lib.TrainConfig(task="copy", preset="cpu", model=dict(TINY_GPT, pattern="RN"), steps=2,
                                  batch_size=2, warmup=1, eval_every=2, eval_batches=1, train_max_size=4, eval_sizes=[2, 4])


_VAL = None


def val_bytes() -> torch.Tensor:
    global _VAL
    if _VAL is None:
        _VAL = corpus.load_corpus(200_000).val
    return _VAL


def checkpoint_file() -> Path:
    """A real checkpoint of a tiny run, trained once per process."""
    path = WORK / "run" / "checkpoint.pt"
    if not path.exists():
        trainer.train(tiny_run(steps=1, eval_every=1, out_dir=str(path.parent)))
    return path


WORK = Path(tempfile.mkdtemp(prefix="posbook-bad-input-"))


def gen() -> torch.Generator:
    return torch.Generator().manual_seed(0)


# Domains of numeric arguments (see DOMAINS below).
POSITIVE_INT = "positive int"
NONNEGATIVE_INT = "non-negative int"
SIGNED_INT = "int"
POSITIVE_REAL = "positive real"
NONNEGATIVE_REAL = "non-negative real"
REAL = "real"
ANY_VALUE = "any value"       # the argument takes anything (a value to glue, a claim's shown text)
NULLABLE = "None allowed"     # not a number: None is a documented value though not the default (rope=None)


@dataclasses.dataclass
class Specimen:
    """A valid call: ``kwargs()`` builds fresh arguments (some callables change their inputs in place)."""

    kwargs: Callable[[], dict[str, Any]]
    fixed: tuple[str, ...] = ()            # arguments never mutated (the instance of a method, callbacks)
    domains: dict[str, str] = dataclasses.field(default_factory=dict)  # per-call overrides of DOMAINS
    positional: bool = False               # the callable takes its arguments positionally only


# Domains a specimen may give beyond the numeric ones of DOMAINS (below).
ANY_DTYPE = "any dtype"       # a tensor the callable only moves (a permutation): every dtype must work
ANY_NAME = "any name"         # config[key]: a name the callable passes on or reports, not one it must know


def S(kwargs: Callable[[], dict[str, Any]], *fixed: str, **domains: str) -> Specimen:
    return Specimen(kwargs, fixed, domains)


def method(instance: Callable[[], Any], kwargs: Callable[[], dict[str, Any]] = dict, **domains: str) -> Specimen:
    return Specimen(lambda: {"self": instance(), **kwargs()}, ("self",), domains)


def _claims() -> pb.Claims:
    return pb.Claims("Bad-input probes")


SPECIMENS: dict[str, Specimen] = {
    # rope, scaling
    "posbook.RopeSpec": S(lambda: dict(rope_type="default", rope_theta=10000.0, head_dim=8, partial_rotary_factor=1.0,
                                       rotary_dim=8, max_position_embeddings=64)),
    "posbook.RopeType": S(lambda: dict(name="probe", rule=lambda spec, n: (pb.default_inv_freq(spec.rotary_dim), 1.0)),
                          "rule"),
    "posbook.default_inv_freq": S(lambda: dict(rotary_dim=8, rope_theta=10000.0, dtype=torch.float32)),
    "posbook.mrope_layout": S(lambda: dict(config={**llama_config(), "rope_scaling": {
        "rope_type": "default", "mrope_section": [4, 2, 2]}}, layer_type=None)),
    "posbook.rope_parameters": S(lambda: dict(config=llama_config(), seq_len=100, dtype=torch.float32, device="cpu")),
    "posbook.rope_spec": S(lambda: dict(config=gemma_config(), layer_type="full_attention")),
    "posbook.yarn_get_mscale": S(lambda: dict(scale=4.0, mscale=1.0), mscale="non-negative real"),  # 0: no temperature
    "posbook.yarn_ramp_bounds": S(lambda: dict(rotary_dim=64, rope_theta=10000.0, original_max_position_embeddings=4096,
                                               beta_fast=32.0, beta_slow=1.0, truncate=True)),
    "posbook.yarn_softmax_scale": S(lambda: dict(config=llama_config())),
    "posbook.frequency_ratio": S(lambda: dict(config=llama_config(), seq_len=100)),
    # the ramp's ends are counts of turns, 0 allowed
    "posbook.ramp_gamma": S(lambda: dict(turns=torch.linspace(0, 40, 8), alpha=1.0, beta=32.0),
                            alpha=NONNEGATIVE_REAL, beta=NONNEGATIVE_REAL),
    "posbook.ramp_weights": S(lambda: dict(config=llama_config())),
    "posbook.rope_turns": S(lambda: dict(inv_freq=inv8(), length=64.0), length=POSITIVE_REAL),  # a real length
    "posbook.rope_wavelengths": S(lambda: dict(inv_freq=inv8())),
    "posbook.apply_rope": S(lambda: dict(x=rand(2, 4, 8), cos=cos_sin8()[0], sin=cos_sin8()[1], layout="half")),
    "posbook.half_to_interleaved": S(lambda: dict(x=rand(2, 8), dim=-1, head_dim=8, rotary_dim=8), x=ANY_DTYPE),
    "posbook.interleaved_to_half": S(lambda: dict(x=rand(2, 8), dim=-1, head_dim=8, rotary_dim=4), x=ANY_DTYPE),
    "posbook.mrope_plane_axes": S(lambda: dict(mrope_section=[2, 1, 1], n_planes=4, interleaved=False)),
    "posbook.rope_cos_sin": S(lambda: dict(positions=torch.arange(4), inv_freq=inv8(), attention_factor=1.0,
                                           layout="half", dtype=torch.float32)),
    # norms
    "posbook.QKNorm": S(lambda: dict(head_dim=8, eps=1e-6, zero_centred=False)),
    "posbook.QKNorm.forward": method(lambda: pb.QKNorm(8), lambda: dict(q=rand(1, 2, 3, 8), k=rand(1, 2, 3, 8))),
    "posbook.RMSNorm": S(lambda: dict(dim=8, eps=1e-6, zero_centred=True)),
    "posbook.RMSNorm.forward": method(lambda: pb.RMSNorm(8), lambda: dict(x=rand(3, 8))),
    "posbook.qk_norm_logit_bound": S(lambda: dict(head_dim=8, q_gain=torch.ones(8), k_gain=torch.ones(8), scale=0.5)),
    "posbook.rms_norm": S(lambda: dict(x=rand(3, 8), weight=torch.ones(8), eps=1e-6, zero_centred=False)),
    # biases, logit scales, masks
    "posbook.ALiBiBias": S(lambda: dict(n_heads=4)),
    "posbook.ALiBiBias.forward": method(lambda: pb.ALiBiBias(4), lambda: dict(q_len=3, k_len=5)),
    "posbook.ALiBiBias.for_distances": method(lambda: pb.ALiBiBias(4),
                                              lambda: dict(relative=pb.relative_positions(3, 5))),
    "posbook.T5RelativeBias.for_distances": method(lambda: pb.T5RelativeBias(4, num_buckets=8, max_distance=16),
                                                   lambda: dict(relative=pb.relative_positions(3, 5))),
    "posbook.T5RelativeBias": S(lambda: dict(n_heads=4, bidirectional=False, num_buckets=8, max_distance=16)),
    "posbook.T5RelativeBias.forward": method(lambda: pb.T5RelativeBias(4, num_buckets=8, max_distance=16),
                                             lambda: dict(q_len=3, k_len=5)),
    "posbook.alibi_bias": S(lambda: dict(slopes=pb.alibi_slopes(4), q_len=3, k_len=5)),
    "posbook.ForgetGateBias": S(lambda: dict(n_heads=4, n_embd=8)),
    "posbook.ForgetGateBias.forward": method(lambda: pb.ForgetGateBias(4, n_embd=8), lambda: dict(x=rand(2, 5, 8))),
    "posbook.ForgetGateBias.log_forget": method(lambda: pb.ForgetGateBias(4, n_embd=8), lambda: dict(x=rand(2, 5, 8))),
    "posbook.ContextualPositionBias": S(lambda: dict(n_heads=4, head_dim=8, n_positions=6)),
    "posbook.ContextualPositionBias.forward": method(lambda: pb.ContextualPositionBias(4, head_dim=8, n_positions=6),
                                                     lambda: dict(q=rand(1, 4, 5, 8), k=rand(1, 2, 5, 8), scale=0.3)),
    "posbook.ContextualPositionBias.positions": method(lambda: pb.ContextualPositionBias(4, head_dim=8, n_positions=6),
                                                       lambda: dict(q=rand(1, 4, 5, 8), k=rand(1, 2, 5, 8), scale=0.3)),
    "posbook.forget_gate_bias": S(lambda: dict(log_forget=-rand(2, 5).abs(), q_len=3)),
    "posbook.contextual_positions": S(lambda: dict(logits=rand(3, 5))),
    "posbook.cope_bias": S(lambda: dict(q=rand(3, 8), logits=rand(3, 5), embeddings=rand(8, 6))),
    "posbook.alibi_slopes": S(lambda: dict(n_heads=4, dtype=torch.float32)),
    "posbook.relative_positions": S(lambda: dict(q_len=3, k_len=5, device="cpu")),
    "posbook.t5_relative_buckets": S(lambda: dict(relative_position=pb.relative_positions(3, 5), bidirectional=True,
                                                  num_buckets=8, max_distance=16)),
    # attn_scale = 0 is valid: the factor is 1 at every position (no temperature tuning).
    "posbook.llama4_attention_scale": S(lambda: dict(positions=torch.arange(6), floor_scale=4.0, attn_scale=0.1),
                                        attn_scale="non-negative real"),
    "posbook.swan_log_scale": S(lambda: dict(positions=torch.arange(6), a=4.0)),
    "posbook.attention_mask": S(lambda: dict(kind="sliding", q_len=3, k_len=6, window=2, device="cpu")),
    "posbook.block_mask": S(lambda: dict(kind="chunked", q_len=8, k_len=8, chunk_size=4, block_size=4, device="cpu")),
    "posbook.mask_mod": S(lambda: dict(kind="sliding", window=3, q_offset=2)),
    # attention
    "posbook.normalise": S(lambda: dict(logits=rand(2, 3, 5), normaliser="sink", sink=torch.zeros(2, 3))),
    "posbook.attention": S(lambda: dict(q=rand(1, 4, 3, 8), k=rand(1, 2, 5, 8, seed=1), v=rand(1, 2, 5, 8, seed=2),
                                        scale=0.3, temperature=1.0, bias=torch.zeros(4, 3, 5), causal=True,
                                        normaliser="softmax")),
    "posbook.local_attention": S(lambda: dict(q=rand(1, 2, 8, 8), k=rand(1, 2, 8, 8, seed=1), v=rand(1, 2, 8, 8, seed=2),
                                              kind="sliding", window=3, scale=0.3, block_size=4)),
    "posbook.DiffAttention": S(lambda: dict(d_model=32, n_heads=2, layer=1, head_norm=True)),
    "posbook.DiffAttention.lam": method(lambda: pb.DiffAttention(32, 2, layer=1)),
    "posbook.DiffAttention.kv_cache_values_per_token": method(lambda: pb.DiffAttention(32, 2, layer=1)),
    "posbook.DiffAttention.head_rms": method(lambda: pb.DiffAttention(32, 2, layer=1),
                                             lambda: dict(x=rand(1, 3, 32), rope=cos_sin8(3))),
    "posbook.DiffAttention.forward": method(lambda: pb.DiffAttention(32, 2, layer=1),
                                            lambda: dict(x=rand(1, 3, 32), rope=cos_sin8(3), return_maps=False)),
    "posbook.differential_weights": S(lambda: dict(scores1=rand(2, 4), scores2=rand(2, 4, seed=1), lam=0.5)),
    "posbook.lambda_init": S(lambda: dict(layer=3)),
    "posbook.needle_to_distractor_ratio": S(lambda: dict(weights=probs(2, 6), needle=2)),
    # stability
    "posbook.attention_entropy": S(lambda: dict(weights=probs(2, 6), dim=-1)),
    # logit_norm takes a number or a tensor of norms (chapter "Entropy collapse" passes both): probed as a tensor,
    # since a number specimen would count "tensor for a real" as bad; 0 is valid (the bound is log n there).
    "posbook.entropy_lower_bound": S(lambda: dict(logit_norm=torch.tensor([0.0, 3.0], dtype=torch.float64), n=16)),
    # A zero norm is valid: the row of zeros.
    "posbook.extremal_logits": S(lambda: dict(logit_norm=3.0, n=16, dtype=torch.float64),
                                 logit_norm="non-negative real"),
    "posbook.logit_rows_with_norm": S(lambda: dict(n=8, norms=[1.0, 2.0], count=3, generator=gen())),
    "posbook.max_logits_per_head": S(lambda: dict(q=rand(1, 2, 3, 8), k=rand(1, 2, 3, 8, seed=1), scale=0.3,
                                                  causal=True)),
    # alpha in [0, 1]: 0 puts all of γ on the keys.
    "posbook.qk_clip_": S(lambda: dict(w_q=rand(16, 8), w_k=rand(16, 8, seed=1), gamma=torch.tensor([0.5, 1.0]),
                                       head_dim=8, alpha=0.5), alpha="non-negative real"),
    "posbook.qk_clip_factors": S(lambda: dict(max_logits=torch.tensor([50.0, 200.0]), tau=100.0)),
    "posbook.qk_clip_mla_": S(lambda: dict(w_q_nope=rand(8, 8), w_q_rope=rand(4, 8, seed=1), w_k_nope=rand(8, 8, seed=2),
                                           gamma=torch.tensor([0.5, 1.0]), qk_nope_head_dim=4, qk_rope_head_dim=2)),
    "posbook.softcap": S(lambda: dict(logits=rand(2, 5), cap=30.0)),
    # KV cache, configs
    "posbook.attention_costs": S(lambda: dict(config=gemma_config(), context_len=64),
                                 context_len="non-negative int"),  # 0: the parameters alone
    "posbook.cache_kind": S(lambda: dict(config=mla_config())),
    "posbook.format_bytes": S(lambda: dict(nbytes=3.5e9, digits=2)),
    "posbook.indexer_values_per_layer": S(lambda: dict(config=mla_config())),
    "posbook.kv_cache_bytes": S(lambda: dict(config=gemma_config(), seq_len=64, dtype_bytes=2),
                                seq_len="non-negative int"),  # 0 tokens: an empty cache
    "posbook.kv_cache_bytes_per_token": S(lambda: dict(config=mla_config(), dtype_bytes=2)),
    "posbook.kv_cache_table": S(lambda: dict(config=llama_config(), seq_lens=[64, 128], dtype_bytes=2, markdown=True)),
    "posbook.kv_values_per_layer": S(lambda: dict(config=gemma_config(), kind="sliding_attention")),
    "posbook.layer_kinds": S(lambda: dict(config=gemma_config())),
    "posbook.linear_state_bytes": S(lambda: dict(config={
        "model_type": "qwen3_next", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 16, "num_hidden_layers": 4, "full_attention_interval": 4, "linear_num_key_heads": 2,
        "linear_num_value_heads": 4, "linear_key_head_dim": 8, "linear_value_head_dim": 8,
        "linear_conv_kernel_dim": 4}, dtype_bytes=4)),
    "posbook.without_indexer": S(lambda: dict(config=mla_config())),
    "posbook.read_config": S(lambda: dict(config=llama_config()),  # normalises: passes rope_type on
                             **{"config[rope_type]": ANY_NAME}),
    "posbook.model_config": S(lambda: dict(name="Llama-3.1-8B")),
    "posbook.class_defaults": S(lambda: dict(model_type="gemma3_text")),
    "posbook.position_scheme": S(lambda: dict(config=gemma_config())),
    "posbook.max_context_for_budget": S(lambda: dict(config=gemma_config(), budget_bytes=2**20, batch=2,
                                                     dtype_bytes=2)),
    "posbook.models": S(dict),
    "posbook.config_report": S(lambda: dict(config=gemma_config(), context=64, batch=2, dtype="bf16"),
                               **{"config[rope_type]": ANY_NAME}),  # reports a rope type it lacks as refused
    "posbook.format_report": S(lambda: dict(report=pb.config_report(llama_config()))),
    "posbook.plot_report": S(lambda: dict(report=pb.config_report(llama_config()), path=str(WORK / "report.png"))),
    "posbook.report_figure": S(lambda: dict(report=pb.config_report(llama_config()))),
    # scores, spectra
    # distances are integers or reals; probed as integers (the whole-context path), since float distances would
    # count an int64 tensor as bad.
    "posbook.cosine_sum": S(lambda: dict(amplitude=torch.ones(4), phase=torch.zeros(4), inv_freq=inv8(),
                                         distances=torch.arange(6))),
    "posbook.fast_planes": S(lambda: dict(context_length=64, inv_freq=inv8())),
    "posbook.normal_ks_distance": S(lambda: dict(samples=rand(50), mean=0.0, std=1.0, presorted=False)),
    "posbook.position_inversion_rate": S(lambda: dict(scores=rand(3, 6))),
    "posbook.rope_decay_bound": S(lambda: dict(distances=torch.arange(6), inv_freq=inv8())),   # as cosine_sum
    "posbook.rope_plane_terms": S(lambda: dict(q=rand(8), k=rand(8, seed=1), layout="interleaved")),
    "posbook.rope_score_by_distance": S(lambda: dict(q=rand(8), k=rand(8, seed=1), inv_freq=inv8(),
                                                     distances=torch.arange(6), layout="half")),   # as cosine_sum
    # start is the window's first distance: any integer (negative: keys after the query).
    "posbook.score_moments": S(lambda: dict(amplitude=torch.ones(4), phase=torch.zeros(4), inv_freq=inv8(),
                                            context_length=32, start=1), start="int"),
    "posbook.score_term_moments": S(lambda: dict(amplitude=torch.ones(4), phase=torch.zeros(4), inv_freq=inv8(),
                                                 context_length=32, start=1), start="int"),
    "posbook.split_moments": S(lambda: dict(amplitude=torch.ones(4), phase=torch.zeros(4), inv_freq=inv8(),
                                            context_length=32)),
    "posbook.token_inversion_rate": S(lambda: dict(scores_1=rand(3, 6), scores_2=rand(3, 6, seed=1))),
    "posbook.position_aliasing": S(lambda: dict(scores=rand(3, 6), dtype=torch.bfloat16)),
    "posbook.token_aliasing_rate": S(lambda: dict(scores_1=rand(3, 6), scores_2=rand(3, 6, seed=1),
                                                  dtype=torch.float16)),
    # divergences, influence
    "posbook.head_pair_divergence": S(lambda: dict(weights_a=probs(1, 2, 3, 5), weights_b=probs(1, 2, 3, 5, seed=1),
                                                   form="textbook")),
    "posbook.js_divergence": S(lambda: dict(p=probs(3, 5), q=probs(3, 5, seed=1))),
    "posbook.kl_divergence": S(lambda: dict(p=probs(3, 5), q=probs(3, 5, seed=1))),
    "posbook.pattern_distance": S(lambda: dict(weights_a=probs(1, 2, 3, 5), weights_b=probs(1, 2, 3, 5, seed=1),
                                               form="reversed", pairs="all")),
    "posbook.attention_mass": S(lambda: dict(weights=probs(2, 3, 6), regions={
        "head": torch.tensor([True, True, False, False, False, False]), "rest": torch.arange(6) >= 2})),
    "posbook.gradient_influence": S(lambda: (lambda m: dict(model=m, embedding=m.embed,
                                                            idx=torch.randint(0, 256, (2, 6), generator=gen()),
                                                            targets=torch.randint(0, 256, (2, 6), generator=gen()),
                                                            position=-1))(tiny_gpt())),
    # claims, glue
    "posbook.Claims": S(lambda: dict(chapter="Probes")),
    "posbook.Claims.close": method(_claims, lambda: dict(key="probe.close", statement="x is 1", value=1.0,
                                                          expected=1.0, rtol=1e-6, atol=0.0, source="a paper")),
    "posbook.Claims.at_most": method(_claims, lambda: dict(key="probe.most", statement="x <= 2", value=1.0, bound=2.0)),
    "posbook.Claims.at_least": method(_claims, lambda: dict(key="probe.least", statement="x >= 0", value=1.0,
                                                             bound=0.0)),
    "posbook.Claims.between": method(_claims, lambda: dict(key="probe.between", statement="0 <= x <= 2", value=1.0,
                                                            low=0.0, high=2.0)),
    # shown is any value; a number, so that its "any value" domain applies (a string would be probed as text).
    "posbook.Claims.holds": method(_claims, lambda: dict(key="probe.holds", statement="it holds", condition=True,
                                                          shown=1.0)),
    "posbook.Claims.skip": method(_claims, lambda: dict(key="probe.skip", statement="an oracle agrees",
                                                         reason="the oracle is not installed here", source="a paper")),
    "posbook.Claims.table": method(lambda: (lambda c: (c.holds("probe.one", "one holds", True), c)[1])(_claims())),
    "posbook.glue": S(lambda: dict(name="probe", value=1.5, display=False), value="any value"),   # anything but None
    "posbook.sci": S(lambda: dict(x=3.8e7, digits=1)),
    "posbook.join_names": S(lambda: dict(names=["RoPE", "iRoPE, no QK-Norm in NoPE"], empty="none")),
    "posbook.default_device": S(dict),
    "posbook.chapter_seed": S(dict),
    # experiments: compare
    "posbook.experiments.compare.relative_change": S(lambda: dict(value=1.1, baseline=1.0)),
    "posbook.experiments.compare.split_label": S(lambda: dict(label="RoPE/1")),
    "posbook.experiments.compare.by_variant": S(lambda: dict(results={"A/0": 1.0, "A/1": 2.0, "B/0": 3.0},
                                                             metric=float), "metric"),
    "posbook.experiments.compare.seed_summary": S(lambda: dict(values=[1.0, 2.0, 4.0])),
    "posbook.experiments.compare.paired_changes": S(lambda: dict(table={"A": {0: 1.0, 1: 2.0}, "B": {0: 1.5, 1: 1.0}},
                                                                 baseline="A")),
    "posbook.experiments.compare.ranges_overlap": S(lambda: dict(a=[1.0, 2.0], b=[1.5, 3.0])),
    "posbook.experiments.compare.step_times": S(lambda: dict(models={"RN": tiny_gpt()},
                                                             x=torch.randint(0, 256, (2, 8), generator=gen()),
                                                             y=torch.randint(0, 256, (2, 8), generator=gen()),
                                                             warmup=0, repeats=1)),
    # experiments: corpus
    "posbook.experiments.corpus.Corpus": S(lambda: dict(train=torch.zeros(10, dtype=torch.uint8),
                                                        val=torch.zeros(4, dtype=torch.uint8), sha256="0" * 64,
                                                        n_files=1, root="/")),
    "posbook.experiments.corpus.stdlib_root": S(dict),
    "posbook.experiments.corpus.is_corpus_file": S(lambda: dict(rel="json/decoder.py")),
    "posbook.experiments.corpus.folder_sources": S(lambda: dict(root=str(corpus.stdlib_root() / "json"))),
    "posbook.experiments.corpus.shipped_sources": S(dict),
    "posbook.experiments.corpus.load_corpus": S(lambda: dict(max_bytes=100_000, val_fraction=0.1)),
    "posbook.experiments.corpus.text_batch": S(lambda: dict(data=val_bytes(), batch_size=2, seq_len=8,
                                                            generator=gen())),
    "posbook.experiments.corpus.unigram_bits": S(lambda: dict(data=val_bytes()[:1000])),
    "posbook.experiments.corpus.bits_per_byte": S(lambda: dict(mean_loss_nats=1.2)),
    # experiments: extension, model
    "posbook.experiments.extension.extension_rope": S(lambda: dict(
        config=model_lib.GPTConfig(pattern="RN", **TINY_GPT), method="YaRN", factor=4.0, trained_length=16)),
    "posbook.experiments.model.LayerKind": S(lambda: dict(summary="probe", mask="causal")),
    "posbook.experiments.model.GPTConfig": S(lambda: dict(TINY_GPT, pattern="RS", n_kv_head=2, rope_theta=500.0,
                                                          rope_fraction=0.5, qk_norm="all", attn_temperature=1.0)),
    "posbook.experiments.model.GPTConfig.layer_ropes": method(lambda: model_lib.GPTConfig(pattern="RN", **TINY_GPT)),
    "posbook.experiments.model.GPTConfig.to_dict": method(lambda: model_lib.GPTConfig(pattern="RN", **TINY_GPT)),
    # dim is the table's width here, not a dimension index
    "posbook.experiments.model.sinusoidal_positions": S(lambda: dict(n_positions=8, dim=6), dim="positive int"),
    "posbook.experiments.model.Attention": S(lambda: dict(config=model_lib.GPTConfig(pattern="R", **TINY_GPT),
                                                          code="R", rope={"rope_type": "default", "rope_theta": 100.0,
                                                                          "head_dim": 8})),
    "posbook.experiments.model.DifferentialLayer": S(lambda: dict(
        config=model_lib.GPTConfig(pattern="D", **TINY_GPT), layer=1,
        rope={"rope_type": "default", "rope_theta": 100.0, "head_dim": 8})),
    "posbook.experiments.model.DifferentialLayer.rope": method(lambda: tiny_gpt("DN").blocks[0].attn,
                                                               lambda: dict(t=5)),
    "posbook.experiments.model.DifferentialLayer.head_rms": method(lambda: tiny_gpt("DN").blocks[0].attn,
                                                                   lambda: dict(x=rand(2, 5, 32))),
    "posbook.experiments.model.attention_keys": S(lambda: dict(mask="sliding", seq_len=64, size=16, count="mask"),
                                                  size=POSITIVE_INT),
    "posbook.experiments.model.MLP": S(lambda: dict(config=model_lib.GPTConfig(**TINY_GPT))),
    "posbook.experiments.model.Block": S(lambda: dict(config=model_lib.GPTConfig(pattern="N", **TINY_GPT), code="N",
                                                      layer=1, rope=None)),
    "posbook.experiments.model.GPT": S(lambda: dict(config=model_lib.GPTConfig(pattern="RN", **TINY_GPT))),
    "posbook.experiments.model.GPT.forward": method(tiny_gpt, lambda: dict(
        idx=torch.randint(0, 256, (2, 6), generator=gen()), position_ids=torch.arange(6) + 3), position_ids=NULLABLE),
    "posbook.experiments.model.GPT.recording_attention": method(tiny_gpt),
    # rope=None gives each layer kind its own rotation back
    "posbook.experiments.model.GPT.with_rope": method(tiny_gpt, lambda: dict(rope={
        "rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0, "head_dim": 8}), rope=NULLABLE),
    "posbook.experiments.model.GPT.num_params": method(tiny_gpt),
    "posbook.experiments.model.GPT.flops_per_token": method(tiny_gpt, lambda: dict(seq_len=16)),
    # experiments: probes
    "posbook.experiments.probes.attention_rows": S(lambda: dict(model=tiny_gpt(), idx=torch.randint(
        0, 256, (2, 6), generator=gen()))),
    "posbook.experiments.probes.attention_weights": S(lambda: dict(model=tiny_gpt(), idx=torch.randint(
        0, 256, (2, 6), generator=gen()))),
    "posbook.experiments.probes.passkey_probe_batch": S(lambda: dict(n=24, depth=10, batch=2, generator=gen(),
                                                                     n_begin=3)),
    "posbook.experiments.probes.niah_attention_mass": S(lambda: (lambda x, r: dict(model=tiny_gpt(), inputs=x,
                                                                                   regions=r))(
        *probes.passkey_probe_batch(12, 5, 2, gen())[::2])),
    "posbook.experiments.probes.answer_gradient_influence": S(lambda: (lambda x, y: dict(
        model=tiny_gpt(), inputs=x, targets=y))(*probes.passkey_probe_batch(12, 5, 2, gen())[:2])),
    # experiments: store (record-reading helpers; the training entry points are probed with a one-step run)
    "posbook.experiments.store.run_id": S(lambda: dict(run=tiny_run())),
    "posbook.experiments.store.summarise": S(lambda: dict(results=trainer.train(tiny_task_run()))),
    "posbook.experiments.store.initial_weights": S(lambda: dict(run=grids.runs("passkey_extension")["NTK/4/0/0"])),
    "posbook.experiments.store.train_many": S(lambda: dict(runs=[tiny_run(steps=1, eval_every=1)], jobs=1)),
    "posbook.experiments.store.weights_path": S(lambda: dict(grid="extrapolation", label="RoPE/0")),
    "posbook.experiments.store.load_weights": S(lambda: dict(grid="extrapolation", label="RoPE/0", device="cpu")),
    "posbook.experiments.store.record_path": S(lambda: dict(grid="extrapolation")),
    "posbook.experiments.store.load_record": S(lambda: dict(grid="extrapolation")),
    "posbook.experiments.store.stale_labels": S(lambda: dict(grid="extrapolation")),
    "posbook.experiments.store.run_grid": S(lambda: dict(grid="extrapolation", retrain=False, jobs=1, save=False)),
    # long_context: its 1-step prefix (and final evaluation) takes about 4 s, extrapolation's about 45 s
    "posbook.experiments.store.reproduce_prefix": S(lambda: dict(grid="long_context", label="RoPE/0", steps=1)),
    "posbook.experiments.store.reevaluate": S(lambda: dict(model=tiny_gpt(), run=tiny_task_run(),
                                                           recorded=trainer.train(tiny_task_run())["final"])),
    "posbook.experiments.store.flat_metrics": S(lambda: dict(final=store.load_record("extrapolation")["RoPE/0"]["final"])),
    "posbook.experiments.store.gpu_records": S(lambda: dict(grid="extrapolation")),
    # experiments: grids
    "posbook.experiments.grids.length_generalisation": S(dict),
    "posbook.experiments.grids.length_controls": S(dict),
    "posbook.experiments.grids.position_comparison": S(dict),
    "posbook.experiments.grids.long_context": S(dict),
    "posbook.experiments.grids.content_positions": S(dict),
    "posbook.experiments.grids.extrapolation_run": S(lambda: dict(model={"pattern": "R"}, seed=1)),
    "posbook.experiments.grids.extrapolation": S(dict),
    "posbook.experiments.grids.context_extension": S(dict),
    "posbook.experiments.grids.passkey_extension": S(dict),
    "posbook.experiments.grids.grid_name": S(lambda: dict(grid="extrapolation", preset="colab")),
    "posbook.experiments.grids.runs": S(lambda: dict(grid="long_context")),
    "posbook.experiments.grids.dropped": S(lambda: dict(grid="extrapolation", label="RoPE/0", steps=40),
                                           steps=NONNEGATIVE_INT),
    # experiments: tasks, toy
    "posbook.experiments.tasks.sequence_length": S(lambda: dict(task="copy", n=5)),
    "posbook.experiments.tasks.make_batch": S(lambda: dict(task="copy-coupled", sizes=[2, 3], generator=gen(),
                                                           max_offset=4, with_positions=True)),
    "posbook.experiments.trainer.peak_flops": S(lambda: dict(device="cpu")),
    "posbook.experiments.trainer.git_sha": S(dict),
    "posbook.experiments.tasks.random_position_ids": S(lambda: dict(batch=2, t=5, position_range=12, generator=gen())),
    "posbook.experiments.tasks.Example": S(lambda: dict(tokens=[16, 3, 17, 3, 18], answer_start=3,
                                                        positions=[0, 1, 2, 1, 2]), positions=NULLABLE),
    "posbook.experiments.tasks.Task": S(lambda: dict(summary="copy", example=lambda n, g, o: None,
                                                     length=lambda n: 2 * n + 3, max_size=8, vocab_size=24,
                                                     positions=False), "example", "length", max_size=NULLABLE),
    "posbook.experiments.tasks.token_accuracy": S(lambda: dict(logits=rand(2, 5, 7), targets=torch.tensor(
        [[-100, -100, 3, 4, 6], [-100, 1, 2, 0, 6]]))),
    "posbook.experiments.tasks.exact_match_given_length": S(lambda: dict(logits=rand(2, 5, 7), targets=torch.tensor(
        [[-100, -100, 3, 4, 6], [-100, 1, 2, 0, 6]]))),
    "posbook.experiments.tasks.exact_match": S(lambda: dict(logits=rand(2, 5, 7), targets=torch.tensor(
        [[1, 2, -100, 3, -100], [-100, -100, 4, 5, 6]]))),
    "posbook.experiments.toy.fit": S(lambda: (lambda w: dict(parameters=[w], loss=lambda step: (w ** 2).sum(),
                                                             steps=3, lr=0.1, optimizer="adamw"))(
        torch.nn.Parameter(torch.ones(3))), "loss"),
    # experiments: config, trainer, evaluation, checkpoints
    "posbook.experiments.config.choose_preset": S(dict),
    "posbook.experiments.config.TrainConfig": S(lambda: dict(task="copy", preset="cpu", steps=10, batch_size=4,
                                                             lr=1e-3, seed=2)),
    "posbook.experiments.config.TrainConfig.resolved": method(tiny_run),
    "posbook.experiments.config.vocab_size": S(lambda: dict(task="copy")),
    "posbook.experiments.config.gpt_config": S(lambda: dict(run=tiny_run())),
    "posbook.experiments.trainer.learning_rate": S(lambda: dict(run=tiny_run(steps=10).resolved(), step=3)),
    "posbook.experiments.trainer.largest_train_size": S(lambda: dict(run=tiny_task_run().resolved(), step=1)),
    "posbook.experiments.trainer.train": S(lambda: dict(run=tiny_task_run())),
    "posbook.experiments.evaluation.evaluate": S(lambda: dict(model=tiny_gpt(), run=tiny_task_run(), data=None,
                                                              device=torch.device("cpu"))),
    "posbook.experiments.evaluation.position_losses": S(lambda: dict(model=tiny_gpt(), val=val_bytes(), length=8,
                                                                     windows=2, device=torch.device("cpu"),
                                                                     spacing=8, rows_per_forward=2)),
    "posbook.experiments.evaluation.sliding_window_bpb": S(lambda: dict(model=tiny_gpt(), val=val_bytes(), length=8,
                                                                        stride=4, windows=2, first_target=8,
                                                                        device=torch.device("cpu"),
                                                                        rows_per_forward=2)),
    "posbook.experiments.evaluation.text_by_position": S(lambda: dict(model=tiny_gpt(),
                                                                      run=tiny_run(eval_position_bin=4).resolved(),
                                                                      val=val_bytes(), device=torch.device("cpu"))),
    "posbook.experiments.checkpoints.read_checkpoint": S(lambda: dict(path=checkpoint_file(), device="cpu")),
    "posbook.experiments.checkpoints.load_model": S(lambda: dict(checkpoint=checkpoint_file(), device="cpu",
                                                                 rope="as trained"), rope=NULLABLE),
    # theory
    "posbook.theory.heads.peak_key": S(lambda: dict(q=rand(8), inv_freq=inv8(), delta=3, layout="half")),
    "posbook.theory.heads.positional_head_weights": S(lambda: dict(q=rand(8), inv_freq=inv8(), delta=3, seq_len=8)),
    "posbook.theory.nope.theorem1_weights": S(lambda: dict(vocab_size=8, d_model=12, head_dim=4, bos_id=0,
                                                           generator=gen())),
    "posbook.theory.nope.attention_block": S(lambda: dict(hidden=rand(5, 8, dtype=torch.float64),
                                                          w_q=rand(4, 8, dtype=torch.float64),
                                                          w_k=rand(4, 8, dtype=torch.float64, seed=1),
                                                          w_v=rand(4, 8, dtype=torch.float64, seed=2),
                                                          w_o=rand(8, 4, dtype=torch.float64, seed=3))),
    # read and write are hidden-dimension indices: 0 is the first dimension.
    "posbook.theory.nope.reciprocal_mlp": S(lambda: dict(positions=torch.arange(1, 6),
                                                         d_model=4, read=2, write=3),
                                            read="non-negative int", write="non-negative int"),
    "posbook.theory.nope.mlp_block": S(lambda: dict(hidden=torch.zeros(5, 4, dtype=torch.float64),
                                                    weights=nope.reciprocal_mlp(torch.arange(1, 6), d_model=4))),
    "posbook.theory.nope.theorem2_weights": S(lambda: dict(d_model=12, head_dim=4, generator=gen())),
}


# ----------------------------------------------------------------------------------------------------------------
# Domains: what each argument accepts, by name. One entry per name the public API uses; a specimen overrides a name
# whose meaning differs in one callable.


DOMAINS: dict[str, str] = {
    **dict.fromkeys(["rotary_dim", "head_dim", "n_heads", "q_len", "k_len", "window", "chunk_size", "block_size",
                     "n", "count", "seq_len", "context_len", "context_length", "d_model", "n_planes", "batch",
                     "num_buckets", "max_distance", "original_max_position_embeddings", "max_position_embeddings",
                     "layer", "batch_size", "vocab_size", "max_bytes", "steps", "repeats", "length", "windows",
                     "stride", "first_target", "rows_per_forward", "jobs", "n_files", "trained_length", "t",
                     "n_positions", "qk_nope_head_dim", "qk_rope_head_dim", "depth", "spacing", "context",
                     "read", "write", "n_layer", "n_head", "n_embd", "mlp_ratio", "max_seq_len", "n_kv_head",
                     "t5_num_buckets", "t5_max_distance", "answer_start", "max_size", "position_range"], POSITIVE_INT),
    **dict.fromkeys(["q_offset", "start", "digits", "bos_id", "seed", "warmup", "step", "n_begin", "needle",
                     "max_offset"],
                    NONNEGATIVE_INT),
    **dict.fromkeys(["delta", "position", "dim"], SIGNED_INT),
    **dict.fromkeys(["rope_theta", "scale", "eps", "cap", "tau", "temperature", "factor", "lr", "attention_factor",
                     "floor_scale", "attn_scale", "a", "beta_fast", "beta_slow", "alpha", "beta", "mscale",
                     "dtype_bytes", "std", "attn_temperature", "constant_logit_scale", "swan_a",
                     "llama4_floor_scale", "llama4_attn_scale", "softcap", "partial_rotary_factor", "rope_fraction",
                     "val_fraction", "logit_norm"], POSITIVE_REAL),
    **dict.fromkeys(["nbytes", "budget_bytes", "rtol", "atol", "weight_decay", "grad_clip"], NONNEGATIVE_REAL),
    **dict.fromkeys(["value", "baseline", "expected", "bound", "low", "high", "mean", "lam", "sigmoid_bias",
                     "mean_loss_nats", "x"], REAL),
    **dict.fromkeys(["shown"], ANY_VALUE),
}


@dataclasses.dataclass(frozen=True)
class Mutation:
    sort: str                 # BAD, BORDERLINE or UNUSUAL
    label: str                # what was done, e.g. "bool for a positive int"
    arg: str                  # the argument changed
    value: Any = None         # the value it gets (or a function of the valid kwargs, see ``make``)
    key: str | None = None    # for a changed config key or element: the name the error must give
    make: Callable[[dict], dict] | None = None  # builds the kwargs from the valid ones, when not a plain swap
    nan_data: bool = False    # NaN/inf inside a data tensor: allowed through when the docstring says so


def _number_mutations(arg: str, value: Any, domain: str) -> list[Mutation]:
    out = [Mutation(BAD, f"bool for a {domain}", arg, True), Mutation(BAD, f"numeric string for a {domain}", arg, str(value)),
           Mutation(BAD, f"list for a {domain}", arg, [value])]
    if domain == ANY_VALUE:
        return []
    integer = domain in (POSITIVE_INT, NONNEGATIVE_INT, SIGNED_INT)
    if integer:
        out += [Mutation(BAD, "float for an int", arg, float(value)), Mutation(BAD, "NaN for an int", arg, math.nan),
                Mutation(BORDERLINE, "2**40", arg, 2 ** 40), Mutation(BORDERLINE, "2**63", arg, 2 ** 63),
                Mutation(BORDERLINE, "1", arg, 1)]
        if domain == POSITIVE_INT:
            out += [Mutation(BAD, "0 for a positive int", arg, 0), Mutation(BAD, "-1 for a positive int", arg, -1)]
        elif domain == NONNEGATIVE_INT:
            out += [Mutation(BAD, "-1 for a non-negative int", arg, -1), Mutation(BORDERLINE, "0", arg, 0)]
        else:
            out += [Mutation(BORDERLINE, "-1", arg, -1), Mutation(BORDERLINE, "-(2**40)", arg, -(2 ** 40))]
        out.append(Mutation(UNUSUAL, "an int subclass", arg, _IntLike(value)))
    else:
        out += [Mutation(BAD, f"NaN for a {domain}", arg, math.nan), Mutation(BAD, f"inf for a {domain}", arg, math.inf),
                Mutation(BAD, f"-inf for a {domain}", arg, -math.inf), Mutation(BAD, f"tensor for a {domain}", arg,
                                                                                 torch.tensor([value, value])),
                Mutation(UNUSUAL, "an int where a real is expected", arg, int(value)) if float(value).is_integer()
                else Mutation(BORDERLINE, "1e300", arg, 1e300)]
        if domain == POSITIVE_REAL:
            out += [Mutation(BAD, "0.0 for a positive real", arg, 0.0), Mutation(BAD, "-1.0 for a positive real", arg, -1.0),
                    Mutation(BORDERLINE, "1e-300", arg, 1e-300), Mutation(BORDERLINE, "1e300", arg, 1e300)]
        elif domain == NONNEGATIVE_REAL:
            out += [Mutation(BAD, "-1.0 for a non-negative real", arg, -1.0), Mutation(BORDERLINE, "0.0", arg, 0.0)]
        else:
            out += [Mutation(BORDERLINE, "-1e300", arg, -1e300), Mutation(BORDERLINE, "0.0", arg, 0.0)]
    return out


class _IntLike(int):
    """An int subclass (like IntEnum members or numpy's int when converted): must be taken as the int it is."""


def _tensor_mutations(arg: str, value: torch.Tensor, doc_allows_nan: bool) -> list[Mutation]:
    out = [Mutation(BAD, "list for a tensor", arg, value.tolist()),
           Mutation(BORDERLINE, "one dimension fewer", arg, value[0] if value.ndim > 0 else None),
           Mutation(BORDERLINE, "one dimension more", arg, value.unsqueeze(0)),
           Mutation(UNUSUAL, "requires_grad", arg, value.detach().clone().requires_grad_(True)
                    if value.is_floating_point() else value),
           Mutation(UNUSUAL, "non-contiguous", arg, _non_contiguous(value))]
    for axis in range(value.ndim):
        out.append(Mutation(BORDERLINE, f"empty dimension {axis}", arg, value.narrow(axis, 0, 0)))
    if value.is_floating_point():
        out += [Mutation(BAD, "int64 tensor for a float one", arg, value.round().long()),
                Mutation(BAD, "bool tensor for a float one", arg, value > 0),
                Mutation(BORDERLINE, "float64", arg, value.double()), Mutation(BORDERLINE, "float16", arg, value.half()),
                Mutation(BORDERLINE, "bfloat16", arg, value.bfloat16()),
                Mutation(BORDERLINE, "complex", arg, value.to(torch.complex64))]
        if value.numel():
            for name, special in (("NaN", math.nan), ("inf", math.inf), ("-inf", -math.inf)):
                bad = value.detach().clone()
                bad.view(-1)[-1] = special
                out.append(Mutation(BORDERLINE if doc_allows_nan else BAD, f"{name} inside", arg, bad, nan_data=True))
            out.append(Mutation(BORDERLINE, "huge entries", arg, value * 1e30))
    elif value.dtype == torch.bool:
        out += [Mutation(BAD, "float tensor for a bool one", arg, value.float()),
                Mutation(BAD, "int tensor for a bool one", arg, value.long())]
    else:
        out += [Mutation(BORDERLINE if arg in REAL_VALUED_INDEX_TENSORS else BAD, "float tensor for an int one", arg,
                         value.float()),
                Mutation(BAD, "bool tensor for an int one", arg, value > 0),
                Mutation(BORDERLINE, "uint8", arg, value.clamp(0, 255).to(torch.uint8)),
                Mutation(BORDERLINE, "int32", arg, value.int()),
                Mutation(BORDERLINE, "negative entry", arg, _with_last(value, -5)),
                Mutation(BORDERLINE, "huge entry", arg, _with_last(value, 2 ** 40))]
    if value.ndim >= 1:
        out.append(Mutation(BORDERLINE, "last dimension + 1", arg, torch.cat([value, value.narrow(-1, 0, 1)], -1)
                            if value.shape[-1] else value))
    return out


# The dtype swaps of a floating tensor; for an ANY_DTYPE argument they must work.
DTYPE_SWAPS = ("int64 tensor for a float one", "bool tensor for a float one")

# Integer tensors that may also hold fractional values (positions between tokens, distances).
REAL_VALUED_INDEX_TENSORS = {"positions", "distances", "relative_position"}


def _with_last(value: torch.Tensor, entry: int) -> torch.Tensor:
    # widened to int64 where the entry does not fit (uint8 corpus bytes given -5 or 2**40)
    info = torch.iinfo(value.dtype)
    out = value.clone() if info.min <= entry <= info.max else value.long()
    if out.numel():
        out.view(-1)[-1] = entry
    return out


def _non_contiguous(value: torch.Tensor) -> torch.Tensor:
    if value.ndim == 0:
        return value
    wide = torch.stack([value, value], dim=-1)       # a view with stride 2 in the last dimension
    out = wide[..., 0]
    assert out.shape == value.shape and (value.numel() <= 1 or not out.is_contiguous() or value.shape[-1] == 1)
    return out


def _config_mutations(arg: str, config: dict, free_names: set[str] = frozenset()) -> list[Mutation]:
    """``free_names``: keys whose unknown name must be read like any other (model_type: an architecture posbook has
    no rule for), or that the callable passes on or reports rather than interprets."""
    out = [Mutation(BAD, "list for a config", arg, [config]), Mutation(BAD, "int for a config", arg, 3),
           Mutation(BAD, "JSON text that is not an object", arg, "[1, 2]"), Mutation(BAD, "text that is not JSON", arg,
                                                                                       "hidden_size: 8"),
           Mutation(UNUSUAL, "JSON text of the config", arg, json.dumps(config)),
           Mutation(UNUSUAL, "an object with to_dict()", arg, _ConfigObject(config))]
    for path, value in _config_leaves(config):
        key = path[-1]
        if isinstance(value, bool) or value is None:
            out.append(Mutation(BAD, "string for a bool key", arg, key=key, make=_set_key(arg, path, "yes")))
            continue
        if isinstance(value, (int, float)):
            out += [Mutation(BAD, "bool for a number key", arg, key=key, make=_set_key(arg, path, True)),
                    Mutation(BAD, "numeric string for a number key", arg, key=key, make=_set_key(arg, path, str(value))),
                    Mutation(BAD, "negative number key", arg, key=key, make=_set_key(arg, path, -abs(value) - 1)),
                    Mutation(BAD, "NaN number key", arg, key=key, make=_set_key(arg, path, math.nan))]
            if isinstance(value, int):
                out.append(Mutation(BAD, "float for an int key", arg, key=key, make=_set_key(arg, path, value + 0.5)))
        elif isinstance(value, str):
            out.append(Mutation(UNUSUAL if key in free_names else BAD, "unknown name", arg, key=key,
                                make=_set_key(arg, path, "no-such-kind")))
            out.append(Mutation(BAD, "int for a name key", arg, key=key, make=_set_key(arg, path, 7)))
        elif isinstance(value, list):
            out.append(Mutation(BAD, "string for a list key", arg, key=key, make=_set_key(arg, path, "x")))
            if value:
                out.append(Mutation(BAD, "list element of the wrong type", arg, key=key,
                                    make=_set_key(arg, path, [True] + value[1:] if isinstance(value[0], (int, float))
                                                  and not isinstance(value[0], bool) else [7] + value[1:])))
        out.append(Mutation(BORDERLINE, "key removed", arg, key=key, make=_drop_key(arg, path)))
    return out


class _ConfigObject:
    """Stands for a transformers PretrainedConfig: read through to_dict()."""

    def __init__(self, config: dict):
        self._config = config
        self.model_type = config.get("model_type", "")

    def to_dict(self) -> dict:
        return json.loads(json.dumps(self._config))


def _config_leaves(config: dict, prefix: tuple = ()) -> Iterator[tuple[tuple, Any]]:
    for key, value in config.items():
        if isinstance(value, dict):
            yield from _config_leaves(value, prefix + (key,))
        else:
            yield prefix + (key,), value


def _set_key(arg: str, path: tuple, value: Any) -> Callable[[dict], dict]:
    def make(kwargs: dict) -> dict:
        config = json.loads(json.dumps(kwargs[arg], allow_nan=True))
        node = config
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
        return {**kwargs, arg: config}
    return make


def _drop_key(arg: str, path: tuple) -> Callable[[dict], dict]:
    def make(kwargs: dict) -> dict:
        config = json.loads(json.dumps(kwargs[arg]))
        node = config
        for key in path[:-1]:
            node = node[key]
        del node[path[-1]]
        return {**kwargs, arg: config}
    return make


def _path_mutations(arg: str) -> list[Mutation]:
    folder = WORK / "paths"
    folder.mkdir(exist_ok=True)
    empty = folder / "empty.pt"
    empty.write_bytes(b"")
    text = folder / "config.json"
    text.write_text('{"a": 1}')
    real = checkpoint_file().read_bytes()
    truncated = folder / "truncated.pt"
    truncated.write_bytes(real[: len(real) // 2])
    foreign = folder / "foreign.pt"
    torch.save({"state_dict": {"w": torch.zeros(2)}}, foreign)
    pickled = folder / "object.pt"
    pickled.write_bytes(pickle.dumps(collections.OrderedDict(a=1)))
    return [Mutation(BAD, "missing file", arg, str(folder / "missing.pt")), Mutation(BAD, "a folder", arg, str(folder)),
            Mutation(BAD, "empty file", arg, str(empty)), Mutation(BAD, "JSON file", arg, str(text)),
            Mutation(BAD, "truncated file", arg, str(truncated)), Mutation(BAD, "foreign checkpoint", arg, str(foreign)),
            Mutation(BAD, "pickled object", arg, str(pickled)), Mutation(BAD, "int for a path", arg, 3)]


def _device_mutations(arg: str) -> list[Mutation]:
    return [Mutation(BAD, "unavailable CUDA device", arg, "cuda:7"), Mutation(BAD, "unknown device", arg, "tpu"),
            Mutation(BAD, "int for a device", arg, 3.5), Mutation(UNUSUAL, "torch.device", arg, torch.device("cpu"))]


def mutations(name: str, fn: Callable, spec: Specimen, kwargs: dict) -> list[Mutation]:
    """Every input derived from the valid call, argument by argument."""
    doc_allows_nan = bool(re.search(r"\bNaN\b|non-finite", inspect.getdoc(fn) or ""))
    try:
        parameters = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        parameters = {}
    out: list[Mutation] = []
    for arg, value in kwargs.items():
        if arg in spec.fixed:
            continue
        if arg in parameters and value is not None:
            optional = parameters[arg].default is None or spec.domains.get(arg) == NULLABLE
            # None is the default of an argument that one mode needs (window for kind="sliding"): borderline.
            out.append(Mutation(BORDERLINE if optional else BAD, "None" + (" (the default)" if optional else ""), arg,
                                None))
        domain = spec.domains.get(arg, DOMAINS.get(arg))
        if arg in ("device",):
            out += _device_mutations(arg)
        elif arg in ("path", "checkpoint") and isinstance(value, (str, Path)):
            out += _path_mutations(arg)
        elif isinstance(value, bool):
            out += [Mutation(BAD, "int for a bool", arg, int(not value)), Mutation(BAD, "string for a bool", arg, "True")]
        elif isinstance(value, (int, float)):
            if domain is None:
                raise KeyError(f"{name}: argument {arg!r} has no domain in DOMAINS; add one")
            out += _number_mutations(arg, value, domain)
        elif isinstance(value, torch.Tensor):
            moved = _tensor_mutations(arg, value, doc_allows_nan)
            if domain == ANY_DTYPE:
                moved = [dataclasses.replace(m, sort=UNUSUAL) if m.label in DTYPE_SWAPS else m for m in moved]
            out += moved
        elif isinstance(value, torch.dtype):
            out += [Mutation(BAD, "string for a dtype", arg, "float32"), Mutation(BORDERLINE, "int dtype", arg, torch.int64)]
        elif isinstance(value, str):
            out += [Mutation(BAD, "int for a string", arg, 7), Mutation(BORDERLINE, "unknown string", arg, "no-such-name"),
                    Mutation(BORDERLINE, "empty string", arg, "")]
        elif isinstance(value, dict) and arg == "config":
            out += _config_mutations(arg, value, free_names={"model_type"} | {
                key[len(arg) + 1:-1] for key, kind in spec.domains.items() if kind == ANY_NAME})
        elif isinstance(value, (list, tuple)) and value and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                                 for v in value):
            out += [Mutation(BAD, "string for a list", arg, "1,2"), Mutation(BORDERLINE, "empty list", arg, type(value)()),
                    Mutation(BAD, "bool element", arg, type(value)([True, *value[1:]]), key=arg),
                    Mutation(BAD, "string element", arg, type(value)([str(value[0]), *value[1:]]), key=arg),
                    Mutation(BORDERLINE, "negative element", arg, type(value)([-1, *value[1:]]), key=arg),
                    Mutation(BAD if isinstance(value[0], float) else BORDERLINE, "NaN element", arg,
                             type(value)([math.nan, *value[1:]]), key=arg)]
        elif isinstance(value, torch.Generator):
            out += [Mutation(BAD, "int for a generator", arg, 0)]
        elif isinstance(value, torch.nn.Module):
            out += [Mutation(BAD, "int for a module", arg, 3),
                    Mutation(BORDERLINE, "another module", arg, torch.nn.Linear(4, 4))]
        elif isinstance(value, config_lib.TrainConfig):
            out += [Mutation(BAD, "dict for a TrainConfig", arg, dataclasses.asdict(value)),
                    Mutation(BORDERLINE, "unresolved TrainConfig", arg, tiny_run() if value.task == "text"
                             else tiny_task_run())]
        elif isinstance(value, model_lib.GPTConfig):
            out += [Mutation(BAD, "dict for a GPTConfig", arg, dataclasses.asdict(value))]
        elif isinstance(value, dict):
            out += [Mutation(BAD, "list for a dict", arg, [value]), Mutation(BORDERLINE, "empty dict", arg, {}),
                    Mutation(BAD, "int for a dict", arg, 3)]
        elif isinstance(value, (list, tuple)):
            out += [Mutation(BAD, "int for a list", arg, 3), Mutation(BORDERLINE, "empty list", arg, type(value)())]
        elif callable(value):
            out += [Mutation(BAD, "int for a callable", arg, 3)]
        elif value is None:
            continue
        else:
            raise KeyError(f"{name}: argument {arg!r} holds a {type(value).__name__}, which has no mutations; add them")
    return out


# ----------------------------------------------------------------------------------------------------------------
# Running and classifying


class Hang(BaseException):
    pass


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    def on_alarm(signum, frame):
        raise Hang()
    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def call(fn: Callable, kwargs: dict) -> Any:
    out = fn(**kwargs)
    if inspect.isgenerator(out):
        out = list(out)
    elif hasattr(out, "__enter__") and hasattr(out, "__exit__") and not isinstance(out, torch.nn.Module):
        with out as entered:
            out = entered
    return out


def same(a: Any, b: Any) -> bool:
    """Equal results, NaN equal to NaN (a config key a callable ignores leaves its result unchanged)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape
                and a.dtype == b.dtype and torch.equal(torch.nan_to_num(a.detach()), torch.nan_to_num(b.detach()))
                and torch.equal(torch.isnan(a), torch.isnan(b)) if a.is_floating_point() else
                isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and torch.equal(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if dataclasses.is_dataclass(a) and dataclasses.is_dataclass(b) and not isinstance(a, type):
        return type(a) is type(b) and same(dataclasses.asdict(a), dataclasses.asdict(b))
    if isinstance(a, torch.nn.Module) or isinstance(b, torch.nn.Module):
        return type(a) is type(b)
    try:
        return bool(a == b)
    except Exception:
        return False


def _raised_by_posbook(error: BaseException) -> bool:
    frames = traceback.extract_tb(error.__traceback__)
    return bool(frames) and Path(frames[-1].filename).resolve().is_relative_to(SRC)


def _names(message: str, name: str) -> bool:
    return re.search(rf"(?<![\w]){re.escape(name)}(?![\w])", message) is not None


@dataclasses.dataclass
class Outcome:
    target: str
    mutation: Mutation
    outcome: str
    detail: str

    def line(self) -> str:
        m = self.mutation
        what = f"{m.arg}" + (f"[{m.key}]" if m.key and m.key != m.arg else "")
        return f"{self.outcome:10} {self.target}({what}: {m.label}) -> {self.detail[:160]}"


def classify(target: str, fn: Callable, kwargs: dict, mutation: Mutation, baseline: Any) -> Outcome:
    try:
        changed = mutation.make(kwargs) if mutation.make else {**kwargs, mutation.arg: mutation.value}
    except Exception as error:  # the mutation cannot be built for this value: nothing to probe
        return Outcome(target, mutation, "skipped", f"{type(error).__name__}: {error}")
    name = mutation.key or mutation.arg
    try:
        with time_limit(HANG_SECONDS):
            result = call(fn, changed)
    except Hang:
        return Outcome(target, mutation, "hang", f"no answer within {HANG_SECONDS} s")
    except pb.ClaimError as error:  # a value that refutes a claim: what Claims is for
        return Outcome(target, mutation, "clear" if mutation.sort != UNUSUAL else "broken", f"ClaimError: {error}")
    except ALLOWED_ERRORS as error:
        message = f"{type(error).__name__}: {error}"
        if mutation.sort == UNUSUAL:
            return Outcome(target, mutation, "broken", message)
        if not _raised_by_posbook(error):
            frame = traceback.extract_tb(error.__traceback__)[-1]
            return Outcome(target, mutation, "cryptic", f"{message} (raised in {Path(frame.filename).name}:{frame.lineno})")
        if _names(str(error), name) or (mutation.key and _names(str(error), mutation.arg)):
            return Outcome(target, mutation, "clear", message)
        # A value that is fine on its own may break a relation with another argument: naming that one is clear.
        if mutation.sort == BORDERLINE and any(_names(str(error), other) for other in kwargs):
            return Outcome(target, mutation, "clear", message)
        return Outcome(target, mutation, "vague", message)
    except Exception as error:
        frame = traceback.extract_tb(error.__traceback__)[-1]
        return Outcome(target, mutation, "cryptic" if mutation.sort != UNUSUAL else "broken",
                       f"{type(error).__name__}: {error} (raised in {Path(frame.filename).name}:{frame.lineno})")
    if mutation.sort == BAD:
        if mutation.key and mutation.key != mutation.arg and same(result, baseline):
            return Outcome(target, mutation, "ok", "the key is not read by this callable")
        if _reported(result, name):
            return Outcome(target, mutation, "clear", "reported in the result, which names the key")
        return Outcome(target, mutation, "silent-bad", f"returned {type(result).__name__}")
    return Outcome(target, mutation, "ok", "")


def _reported(result: Any, name: str) -> bool:
    """A report that carries the error of the bad value itself and goes on with the rest (config_report: a rope
    dict it cannot read is an "invalid" entry whose reason names the key)."""
    entries = result.get("rope") if isinstance(result, dict) else None
    return isinstance(entries, list) and any(
        isinstance(e, dict) and e.get("encoding") == "invalid" and _names(str(e.get("reason", "")), name)
        for e in entries)


def _hypothesis_values(domain: str) -> st.SearchStrategy:
    if domain == POSITIVE_INT:
        return st.integers(-(2 ** 70), 0)
    if domain == NONNEGATIVE_INT:
        return st.integers(-(2 ** 70), -1)
    if domain in (POSITIVE_REAL,):
        return st.floats(max_value=0.0) | st.sampled_from([math.nan, math.inf])
    if domain == NONNEGATIVE_REAL:
        return st.floats(max_value=-1e-300) | st.sampled_from([math.nan, math.inf])
    return st.sampled_from([math.nan, math.inf, -math.inf])


def generated_mutations(target: str, spec: Specimen, kwargs: dict, examples: int) -> list[Mutation]:
    """Out-of-domain numbers drawn by hypothesis (derandomized, no database) for every numeric argument."""
    out: list[Mutation] = []
    for arg, value in kwargs.items():
        domain = spec.domains.get(arg, DOMAINS.get(arg))
        if arg in spec.fixed or isinstance(value, bool) or not isinstance(value, (int, float)) or domain in (
                None, SIGNED_INT, ANY_VALUE):
            continue
        drawn: list[Any] = []

        @settings(max_examples=examples, derandomize=True, database=None, deadline=None,
                  suppress_health_check=list(HealthCheck))
        @given(st.one_of(_hypothesis_values(domain), st.booleans(), st.text(max_size=3)))
        def draw(v):
            drawn.append(v)

        draw()
        out += [Mutation(BAD, f"drawn {type(v).__name__} {v!r:.20}", arg, v) for v in drawn]
    return out


def probe(target: str, fn: Callable, spec: Specimen, *, examples: int = 4) -> list[Outcome]:
    kwargs = spec.kwargs()
    baseline = call(fn, kwargs)
    out = []
    for mutation in mutations(target, fn, spec, kwargs) + generated_mutations(target, spec, kwargs, examples):
        out.append(classify(target, fn, spec.kwargs(), mutation, baseline))
    return out


def probe_all(names: list[str] | None = None, examples: int = 4) -> list[Outcome]:
    found = probed_callables()
    out: list[Outcome] = []
    for target in names or list(found):
        out += probe(target, found[target], SPECIMENS[target], examples=examples)
    return out


# The public unchecked layer: callables that take what a checked caller made and check nothing themselves, because
# they run at every step of training (a check there costs every step, or reads tensors on the host). Each says so in
# its docstring (test_bad_input_generated.py holds it to that) and names the checked caller that stands before it.
UNCHECKED = {
    "posbook.experiments.model.Attention.forward": "GPT.forward checks the token ids once per step",
    "posbook.experiments.model.DifferentialLayer.forward": "GPT.forward checks the token ids once per step",
    "posbook.experiments.model.MLP.forward": "GPT.forward checks the token ids once per step",
    "posbook.experiments.model.Block.forward": "GPT.forward checks the token ids once per step",
    "posbook.DiffAttention.attend": "DiffAttention.forward checks x and rope (the model's layer makes both itself)",
    "posbook.ForgetGateBias.unchecked": "ForgetGateBias.forward checks x (the model's FoX layer makes it itself)",
    "posbook.ContextualPositionBias.unchecked": "ContextualPositionBias.forward checks q, k and scale (the model's "
                                                "CoPE layer makes them itself)",
}


def probed_callables() -> dict[str, Callable]:
    return {k: v for k, v in public_callables().items()
            if not (inspect.isclass(v) and issubclass(v, BaseException)) and k not in UNCHECKED}


if __name__ == "__main__":
    start = time.perf_counter()
    names = sys.argv[1:] or None
    results = probe_all([n for n in probed_callables() if any(n.startswith(p) for p in names)] if names else None)
    counts = collections.Counter(r.outcome for r in results)
    for r in results:
        if r.outcome in FAILING + ("vague",):
            print(r.line())
    print(dict(counts), f"{len(results)} inputs over {len({r.target for r in results})} callables in "
          f"{time.perf_counter() - start:.0f} s")
