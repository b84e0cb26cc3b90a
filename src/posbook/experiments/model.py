"""A small decoder-only GPT whose layers follow a pattern of position schemes, built from posbook's pipeline.

One letter per layer; the pattern repeats to ``n_layer`` (``"SSSN"`` over 8 layers is SSSNSSSN):

====  =====================================================================================================
R     RoPE, global causal attention
N     NoPE: no position at all, global causal attention
S     RoPE, sliding-window attention over the last ``window`` tokens (a "short" layer)
C     RoPE, chunked attention within blocks of ``chunk_size`` tokens (Llama 4's local layers)
P     p-RoPE: only the fastest fraction ``rope_fraction`` of the frequencies turn (Gemma 4's "proportional")
H     partial RoPE: the first ``rope_fraction`` of each head's dimensions turn, over the whole spectrum
A     ALiBi bias, global
T     T5 relative-position buckets, global
D     differential attention (Ye et al. 2024) with RoPE, global: n_head/2 differential heads of head_dim
F     FoX: a forget gate per head and token, a data-dependent ALiBi (Lin et al. 2025), global, no RoPE
B     stick-breaking attention (Tan et al. 2024): the nearest key takes its share first, global, no RoPE
X     CoPE: positions counted by gates σ(q·k), learned embeddings of the counts (Golovneva et al. 2024), global
====  =====================================================================================================

Each code is one entry of ``LAYER_CODES``, a :class:`LayerKind` that says what the layer does to q, k, the
logits and the mask; a new kind of layer is one entry there.

Absolute position embeddings (learned or sinusoidal) are added to the token embeddings when
``absolute_positions`` says so; with ``pattern="N"`` that is the original Transformer. Everything a layer does
to q, k and the logits comes from posbook (rope_parameters, apply_rope, QK-Norm, biases, masks, attention), so
the experiments run the mechanisms the chapters explain, not a second copy of them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .. import _checks
from ..bias import BIASES
from ..core import attend, resolved_impl
from ..diff_attention import DiffAttention
from ..local import local_attend
from ..logit_scales import LOGIT_SCALES
from ..masks import MASK_KINDS, attention_mask, kind_size, size_option
from ..normalisers import NORMALISERS
from ..norms import RMSNorm
from ..rope import cos_sin_at, rope_cos_sin, rotate
from ..scaling import rope_parameters, rope_spec


LAYER_MASKS = ("causal", "sliding", "chunked")     # the mask kinds a layer of this model attends with


@dataclass(frozen=True)
class LayerKind:
    """What one layer code does.

    Attributes:
        summary: one line for ``python -m posbook.experiments patterns``.
        rope: the layer's rope config dict (Hugging Face form, for :func:`posbook.scaling.rope_parameters`) from the model
            config, or None for a layer that does not rotate q and k.
        mask: the kind of :data:`posbook.masks.MASK_KINDS` the layer attends with: "causal" (global),
            "sliding" (``window``) or "chunked" (``chunk_size``).
        bias: the :data:`posbook.bias.BIASES` module the layer adds to its logits, built from the model config; it
            reads what its class's ``reads`` says (distances, the layer's input, or q and k).
        normaliser: the :data:`posbook.normalisers.NORMALISERS` entry that turns the layer's logits into weights
            (a learned sink replaces "softmax" when the config has ``sinks``).
        score_passes: how many times the layer computes q·kᵀ (CoPE reads its gates from one pass, then attends):
            :meth:`GPT.flops_per_token` charges each.
        position_rows: the rows of a learned position table every query is dotted with (CoPE: ``cope_positions``),
            from the model config, or None.
        differential: the layer is :class:`posbook.diff_attention.DiffAttention` (two softmax maps, their difference).
        position_free: no position enters the layer at all (NoPE): ``logit_scaling`` applies to it.
    """

    summary: str
    rope: Callable[["GPTConfig"], dict] | None = None
    mask: str = "causal"
    bias: Callable[["GPTConfig"], nn.Module] | None = None
    normaliser: str = "softmax"
    score_passes: int = 1
    position_rows: Callable[["GPTConfig"], int] | None = None
    differential: bool = False
    position_free: bool = False

    def __post_init__(self):
        _checks.text("summary", self.summary)
        _checks.choice("mask", self.mask, LAYER_MASKS)
        _checks.choice("normaliser", self.normaliser, NORMALISERS)
        _checks.size("score_passes", self.score_passes)
        for name in ("rope", "bias", "position_rows"):
            if getattr(self, name) is not None:
                _checks.function(name, getattr(self, name))
        _checks.flag("differential", self.differential)
        _checks.flag("position_free", self.position_free)


def _rope(config: "GPTConfig") -> dict:
    return {"rope_theta": config.rope_theta, "head_dim": config.head_dim}


def _p_rope(config: "GPTConfig") -> dict:
    return {"head_dim": config.head_dim, "rope_parameters": {
        "rope_type": "proportional", "rope_theta": config.rope_theta, "partial_rotary_factor": config.rope_fraction}}


def _partial_rope(config: "GPTConfig") -> dict:
    return {**_rope(config), "partial_rotary_factor": config.rope_fraction}


LAYER_CODES: dict[str, LayerKind] = {
    "R": LayerKind("RoPE, global", rope=_rope),
    "N": LayerKind("NoPE, global", position_free=True),
    "S": LayerKind("RoPE, sliding window", rope=_rope, mask="sliding"),
    "C": LayerKind("RoPE, chunked", rope=_rope, mask="chunked"),
    "P": LayerKind("p-RoPE (proportional), global", rope=_p_rope),
    "H": LayerKind("partial RoPE, global", rope=_partial_rope),
    "A": LayerKind("ALiBi, global", bias=lambda c: BIASES["alibi"](c.n_head)),
    "T": LayerKind("T5 relative bias, global", bias=lambda c: BIASES["t5"](
        c.n_head, bidirectional=False, num_buckets=c.t5_num_buckets, max_distance=c.t5_max_distance)),
    "D": LayerKind("differential attention, RoPE, global", rope=_rope, differential=True),
    "F": LayerKind("FoX forget gates, global", bias=lambda c: BIASES["forget"](c.n_head, n_embd=c.n_embd)),
    "B": LayerKind("stick-breaking, global", normaliser="stick_breaking"),
    "X": LayerKind("CoPE contextual positions, global", score_passes=2, position_rows=lambda c: c.cope_positions,
                   bias=lambda c: BIASES["cope"](c.n_head, head_dim=c.head_dim, n_positions=c.cope_positions)),
}
"""The registry of layer codes, code → :class:`LayerKind`.

:meta hide-value:
"""

ABSOLUTE_POSITIONS = ("none", "learned", "sinusoidal")
QK_NORM_MODES = ("none", "all", "rope")          # "rope": only in layers that rotate (Llama 4 drops it in NoPE layers)
# The factor per query position that logit_scaling puts on the queries of NoPE layers, from the model config.
LOGIT_SCALINGS: dict[str, Callable[[torch.Tensor, "GPTConfig"], torch.Tensor] | None] = {
    "none": None,
    "swan": lambda positions, c: LOGIT_SCALES["swan"](positions, a=c.swan_a),
    "llama4": lambda positions, c: LOGIT_SCALES["llama4"](positions, floor_scale=c.llama4_floor_scale,
                                                          attn_scale=c.llama4_attn_scale),
    "constant": lambda positions, c: torch.full(positions.shape, c.constant_logit_scale),
}


@dataclass
class GPTConfig:
    """Every knob of the model; ``pattern`` and the fields after it choose the position scheme per layer."""

    vocab_size: int = 256
    n_layer: int = 4
    n_head: int = 4
    n_kv_head: int | None = None         # None: as many as n_head (MHA); fewer: grouped-query attention
    n_embd: int = 128
    mlp_ratio: int = 4
    tie_embeddings: bool = True
    max_seq_len: int = 1024              # longest sequence the position tables are built for
    pattern: str = "R"
    absolute_positions: str = "none"
    rope_theta: float = 10_000.0
    rope_fraction: float = 0.25          # for P (fraction of frequencies) and H (fraction of dimensions)
    window: int = 64                     # for S
    chunk_size: int = 64                 # for C
    qk_norm: str = "none"
    logit_scaling: str = "none"
    swan_a: float = 362.0
    llama4_floor_scale: float = 8192.0
    llama4_attn_scale: float = 0.1
    constant_logit_scale: float = 10.0   # logit_scaling="constant": NoPE logits × this (10 = temperature 0.1)
    sinks: bool = False                  # a learned sink logit per head in every layer
    softcap: float | None = None
    attn_temperature: float = 1.0        # every layer's logits are divided by it (read at each forward, so it can change mid-run)
    t5_num_buckets: int = 32
    t5_max_distance: int = 128
    cope_positions: int = 64             # for X: CoPE's embeddings e[0 … cope_positions − 1]; farther counts share the last
    diff_head_norm: bool = True          # for D: the per-head RMSNorm of differential attention (False: the ablation)
    # Per layer, the rope config dict (the form posbook.rope_parameters reads) that replaces the layer kind's own,
    # or None to keep it; one dict instead of a list: every rotating layer. Context extension sets it.
    rope: dict | list | None = None
    layer_codes: list[str] = field(init=False)

    def __post_init__(self):
        # Sizes become tensor dimensions or loop counts (n_layer builds that many blocks): 2**40 is refused here.
        for name in ("vocab_size", "n_layer", "n_head", "n_embd", "mlp_ratio", "max_seq_len", "window", "chunk_size",
                     "t5_num_buckets", "t5_max_distance"):
            _checks.size(name, getattr(self, name))
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd={self.n_embd} must be a multiple of n_head={self.n_head}")
        if (self.n_embd // self.n_head) % 2:
            raise ValueError(f"head_dim = n_embd/n_head = {self.n_embd // self.n_head} must be even for RoPE")
        kv = self.n_head if self.n_kv_head is None else self.n_kv_head
        _checks.size("n_kv_head", kv)
        if self.n_head % kv:
            raise ValueError(f"n_head={self.n_head} must be a multiple of n_kv_head={kv}")
        _checks.text("pattern", self.pattern)
        unknown = sorted(set(self.pattern) - set(LAYER_CODES))
        if unknown:
            raise ValueError(f"pattern {self.pattern!r} has unknown layer code(s) {unknown}; known: "
                             + ", ".join(f"{c} = {kind.summary}" for c, kind in LAYER_CODES.items()))
        for name in ("tie_embeddings", "sinks", "diff_head_norm"):
            _checks.flag(name, getattr(self, name))
        _checks.choice("absolute_positions", self.absolute_positions, ABSOLUTE_POSITIONS)
        _checks.choice("qk_norm", self.qk_norm, QK_NORM_MODES)
        _checks.choice("logit_scaling", self.logit_scaling, LOGIT_SCALINGS)
        if self.softcap is not None:
            _checks.number("softcap", self.softcap, positive=True)
        if "D" in self.pattern:
            if self.n_head % 2:
                raise ValueError(f"layer code D splits the n_head={self.n_head} heads into n_head/2 differential "
                                 "heads; n_head must be even")
            if self.sinks or self.softcap is not None or self.qk_norm != "none" or self.n_kv_head not in (None, self.n_head):
                raise ValueError("layer code D (differential attention) has no sinks, softcap, QK-Norm or grouped-"
                                 f"query heads in this model; got sinks={self.sinks}, softcap={self.softcap}, "
                                 f"qk_norm={self.qk_norm!r}, n_kv_head={self.n_kv_head}")
        own_normaliser = sorted(code for code in set(self.pattern) if LAYER_CODES[code].normaliser != "softmax")
        if own_normaliser and self.sinks:
            raise ValueError(f"layer code(s) {own_normaliser} normalise with their own rule, not a softmax with a "
                             "sink; got sinks=True")
        _checks.size("cope_positions", self.cope_positions, min_value=2)     # CoPE interpolates between two rows
        scaling = LOGIT_SCALINGS[self.logit_scaling]
        if scaling is not None:
            scaling(torch.zeros(1), self)      # the scale's own checks of its options (swan_a, llama4_*), once, here
        _checks.number("rope_theta", self.rope_theta, positive=True)
        _checks.number("rope_fraction", self.rope_fraction, positive=True)
        if self.rope_fraction > 1:
            raise ValueError(f"rope_fraction must be in (0, 1], got {self.rope_fraction}")
        _checks.number("attn_temperature", self.attn_temperature, positive=True)
        _checks.number("constant_logit_scale", self.constant_logit_scale, positive=True)
        self.layer_codes = [self.pattern[i % len(self.pattern)] for i in range(self.n_layer)]
        self.layer_ropes()     # checks the rope field

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    def layer_ropes(self) -> list[dict | None]:
        """Per layer, the rope config dict it rotates q and k with (None: it does not rotate)."""
        rotating = [LAYER_CODES[code].rope is not None for code in self.layer_codes]
        if self.rope is None or isinstance(self.rope, dict):
            overrides = [self.rope if turns else None for turns in rotating]
        elif isinstance(self.rope, list):
            if len(self.rope) != self.n_layer:
                raise ValueError(f"rope must be a dict, None, or a list of n_layer={self.n_layer} entries (dict or "
                                 f"None), got a list of {len(self.rope)}")
            overrides = list(self.rope)
        else:
            raise TypeError(f"rope must be a dict, a list of per-layer dicts or None, got {type(self.rope).__name__}")
        out = []
        for layer, (code, turns, override) in enumerate(zip(self.layer_codes, rotating, overrides)):
            if override is None:
                out.append(LAYER_CODES[code].rope(self) if turns else None)
                continue
            name = "rope" if isinstance(self.rope, dict) else f"rope[{layer}]"
            if not isinstance(override, dict):
                raise TypeError(f"{name} must be a dict or None, got {type(override).__name__} {override!r}")
            if not turns:
                raise ValueError(f"{name} is given for layer {layer}, code {code!r} "
                                 f"({LAYER_CODES[code].summary}), which does not rotate q and k")
            out.append(_checked_rope(name, override, self.head_dim))
        return out

    def to_dict(self) -> dict:
        out = asdict(self)
        out.pop("layer_codes")
        return out


def _checked_rope(name: str, rope: Any, head_dim: int) -> dict:
    """A rope config dict for layers of ``head_dim``, checked here (every check of
    :func:`posbook.scaling.rope_parameters`, with ``name`` in the message) rather than at the first forward."""
    _checks.mapping(name, rope)
    try:
        spec = rope_spec(rope)
        rope_parameters(rope)
    except (ValueError, TypeError) as error:
        raise (ValueError if isinstance(error, ValueError) else TypeError)(f"{name}: {error}") from None
    if spec.head_dim != head_dim:
        raise ValueError(f"{name} is for head_dim={spec.head_dim}; this model's head_dim is {head_dim}")
    return rope


def _check_hidden(x: Any, layer: nn.Module, n_embd: int, max_seq_len: int | None = None) -> None:
    """x: [batch, T, n_embd] in the layer's dtype (any floating dtype under autocast), T in 1..max_seq_len.
    Shapes and dtypes only: nothing here reads a tensor value on the host."""
    _checks.tensor("x", x, ndim=3, floating=True)
    batch, t, width = x.shape
    if width != n_embd:
        raise ValueError(f"x must have n_embd={n_embd} features in its last dimension, got shape {tuple(x.shape)}")
    if not batch or not t:
        raise ValueError(f"x must hold at least one sequence of at least one position, got shape {tuple(x.shape)}")
    if max_seq_len is not None and t > max_seq_len:
        raise ValueError(f"x has {t} positions, more than max_seq_len={max_seq_len}")
    dtype = next(layer.parameters()).dtype
    if x.dtype != dtype and not torch.is_autocast_enabled(x.device.type):
        raise TypeError(f"x must have the layer's dtype {dtype} (or run under torch.autocast), got {x.dtype}")


def sinusoidal_positions(n_positions: int, dim: int) -> torch.Tensor:
    """The fixed absolute embeddings of Vaswani et al. (2017): sin and cos of position·10000^(−2i/dim).

    Args:
        n_positions: rows of the table, ≥ 1.
        dim: its width (the embedding width), even and ≥ 2: one sin and one cos column per frequency.
    """
    _checks.size("n_positions", n_positions)
    _checks.size("dim", dim, min_value=2)
    if dim % 2:
        raise ValueError(f"dim must be even (a sin and a cos column per frequency), got {dim}")
    return _sinusoids(torch.arange(n_positions), dim)


def _sinusoids(positions: torch.Tensor, dim: int) -> torch.Tensor:
    """The sinusoidal embeddings of integer positions of any shape [...] → [..., dim] (float32, computed in float64)."""
    inv = 10_000.0 ** (-torch.arange(0, dim, 2, dtype=torch.float64, device=positions.device) / dim)
    angles = positions.to(torch.float64)[..., None] * inv
    table = torch.zeros(*positions.shape, dim, dtype=torch.float64, device=positions.device)
    table[..., 0::2], table[..., 1::2] = angles.sin(), angles.cos()
    return table.float()


def _rope_tables(rope: dict, length: int, seq_len: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    inv_freq, attention_factor = rope_parameters(rope, seq_len)
    return rope_cos_sin(torch.arange(length), inv_freq, attention_factor=attention_factor)


class _RotaryAt(nn.Module):
    """A layer's rope spectrum (inv_freq as a buffer, so it moves with the model, and the attention factor), parsed
    once: (cos, sin) at any position ids, [..., T] → [..., T, rotary_dim] each, through the unchecked
    :func:`posbook.rope.cos_sin_at`. The layer's tables for 0 … max_seq_len − 1 come from it too, so ids
    0 … T − 1 give the tables' own values."""

    def __init__(self, rope: dict):
        super().__init__()
        inv_freq, self.attention_factor = rope_parameters(rope)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return cos_sin_at(positions, self.inv_freq, attention_factor=self.attention_factor)


def _relative(positions: torch.Tensor) -> torch.Tensor:
    """j − i for position ids [P, T]: [P, T, T], entry (i, j) the key's id minus the query's; [T, T] for P = 1, so that
    a bias shared by every sequence has the shape the default positions give it (SDPA's CPU kernel rounds a
    [1, H, T, T] mask differently from an [H, T, T] one)."""
    relative = positions[:, None, :] - positions[:, :, None]
    return relative[0] if relative.shape[0] == 1 else relative


def _is_dynamic(rope: dict) -> bool:
    return rope_spec(rope).rope_type == "dynamic"


class Attention(nn.Module):
    """One attention layer: projections → QK-Norm → position scheme → attention core → output projection.

    Everything the layer kind and the config decide is read once, here; ``forward`` runs the unchecked core
    (:func:`posbook.core.attend`, :func:`posbook.local.local_attend`) and reads no tensor values on the host.
    """

    def __init__(self, config: GPTConfig, code: str, rope: dict | None):
        super().__init__()
        _checks.instance("config", config, GPTConfig)
        _checks.choice("code", code, LAYER_CODES)
        kind = LAYER_CODES[code]
        if kind.differential:
            raise ValueError(f"code {code!r} ({kind.summary}) is a DifferentialLayer, not an Attention layer")
        if kind.rope is None and rope is not None:
            raise ValueError(f"rope must be None for code {code!r} ({kind.summary}), which does not rotate q and k, "
                             f"got {rope!r}")
        if kind.rope is not None:
            _checked_rope("rope", rope, config.head_dim)
        self.code, self.config = code, config
        h, kv, d = config.n_head, config.n_kv_head or config.n_head, config.head_dim
        self.n_head, self.n_kv_head, self.head_dim = h, kv, d
        self.q_proj = nn.Linear(config.n_embd, h * d, bias=False)
        self.k_proj = nn.Linear(config.n_embd, kv * d, bias=False)
        self.v_proj = nn.Linear(config.n_embd, kv * d, bias=False)
        self.o_proj = nn.Linear(h * d, config.n_embd, bias=False)
        self.rotary = kind.rope is not None
        self.qk_norm = config.qk_norm == "all" or (config.qk_norm == "rope" and self.rotary)
        if self.qk_norm:
            self.q_norm, self.k_norm = RMSNorm(d), RMSNorm(d)
        # Dynamic NTK's spectrum depends on the length of the sequence in hand: its tables are made on first use of
        # each length and kept, so that repeated evaluations at one length parse the rope dict once.
        self.dynamic_rope = rope if self.rotary and _is_dynamic(rope) else None
        self._dynamic_cache: dict[tuple[int, torch.device], tuple[torch.Tensor, torch.Tensor]] = {}
        if self.rotary and self.dynamic_rope is None:
            self.rotary_at = _RotaryAt(rope)
            cos, sin = self.rotary_at(torch.arange(config.max_seq_len))
            self.register_buffer("cos", cos, persistent=False)
            self.register_buffer("sin", sin, persistent=False)
        self.bias = None if kind.bias is None else kind.bias(config)
        if config.sinks:
            self.sink = nn.Parameter(torch.zeros(h))
        scaling = LOGIT_SCALINGS[config.logit_scaling] if kind.position_free else None
        self.scaled = scaling is not None
        if self.scaled:
            self.register_buffer("query_scale", scaling(torch.arange(config.max_seq_len), config).float(),
                                 persistent=False)
        self.mask_kind = kind.mask
        self.local = kind.mask != "causal"
        # Local layers run a local kernel (posbook.local: compiled flex_attention on CUDA, blocked SDPA elsewhere)
        # unless the core must see the full logits (sinks, softcap).
        self.blocked = self.local and not config.sinks and config.softcap is None
        self.normaliser = "sink" if config.sinks else kind.normaliser
        self.impl = resolved_impl("auto", query_scale=self.scaled or None, softcap=config.softcap,
                                  normaliser=self.normaliser)
        self.scale = 1.0 / math.sqrt(d)
        self.recorder: list | None = None    # set by GPT.recording_attention

    def _dynamic_tables(self, t: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """Dynamic NTK's (cos, sin) for a sequence of ``t`` positions on ``device``, built once per (t, device)."""
        key = (t, device)
        if key not in self._dynamic_cache:
            self._dynamic_cache[key] = tuple(table.to(device) for table in
                                             _rope_tables(self.dynamic_rope, t, seq_len=t))
        return self._dynamic_cache[key]

    def _bias(self, x: torch.Tensor, q: torch.Tensor, k: torch.Tensor, t: int,
              positions: torch.Tensor | None) -> torch.Tensor:
        """The layer's additive bias, from what its BIASES class reads: distances (from the position ids when given),
        the layer's input x (FoX), or its q and k (CoPE). The last two count tokens, not position ids."""
        if self.bias.reads == "distances":
            return self.bias(t) if positions is None else self.bias.for_distances(_relative(positions))
        # FoX's and CoPE's modules check their inputs when called; the layer made these itself (unchecked layer).
        if self.bias.reads == "hidden":
            return self.bias.unchecked(x)
        return self.bias.unchecked(q, k, self.scale)

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """x: [batch, T, n_embd] → [batch, T, n_embd], unchecked: :meth:`GPT.forward` checks the token ids (and the
        position ids ``positions``, [1 or batch, T], None for 0 … T − 1) once and every layer takes the hidden states
        it makes (NaN and ±inf entries propagate to the output)."""
        config = self.config
        batch, t, _ = x.shape
        q = self.q_proj(x).view(batch, t, self.n_head, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(batch, t, self.n_kv_head, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(batch, t, self.n_kv_head, self.head_dim).transpose(1, 2)
        if self.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        if self.rotary:
            if positions is not None:          # GPT.forward refuses position ids for a dynamic rope type
                cos, sin = (table[:, None] for table in self.rotary_at(positions))
            elif self.dynamic_rope is None:
                cos, sin = self.cos[:t], self.sin[:t]
            else:
                cos, sin = self._dynamic_tables(t, x.device)
            # rotate computes in float32 whatever autocast computes q and k in, and rounds once after.
            q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        if config.attn_temperature != 1.0:
            # Dividing q divides every logit q·k (and every ALiBi/T5 bias is added after, unscaled, as in attention()).
            q = q / config.attn_temperature
        query_scale = self.query_scale[:t].to(q.dtype) if self.scaled else None

        if self.blocked and self.recorder is None:
            # A local kernel does only the work the window needs (equal to the masked call below).
            y = local_attend(q, k, v, kind=self.mask_kind, window=config.window, chunk_size=config.chunk_size,
                             scale=self.scale, query_scale=query_scale)
        else:
            mask = None
            if self.local:
                size = kind_size(self.mask_kind, window=config.window, chunk_size=config.chunk_size)
                mask = attention_mask(self.mask_kind, t, device=x.device, **size_option(self.mask_kind, size))
            bias = None
            if self.bias is not None:
                bias = self._bias(x, q, k, t, positions).to(q.dtype)
            sink = self.sink if config.sinks else None
            if self.recorder is not None:
                self.recorder.append((q, k, v, dict(causal=not self.local, query_scale=query_scale,
                                                    softcap=config.softcap, normaliser=self.normaliser, sink=sink,
                                                    mask=mask, bias=bias)))
            y, _ = attend(q, k, v, scale=self.scale, query_scale=query_scale, bias=bias, softcap=config.softcap,
                          mask=mask, causal=not self.local, normaliser=self.normaliser, sink=sink,
                          sigmoid_bias=None, impl=self.impl)
        return self.o_proj(y.transpose(1, 2).reshape(batch, t, -1))


class DifferentialLayer(nn.Module):
    """Layer code D: :class:`posbook.diff_attention.DiffAttention` with n_head/2 differential heads, rotated by RoPE."""

    def __init__(self, config: GPTConfig, layer: int, rope: dict):
        super().__init__()
        _checks.instance("config", config, GPTConfig)
        if "D" not in config.pattern:
            # GPTConfig checks what code D needs (an even n_head; no sinks, softcap, QK-Norm or grouped queries).
            raise ValueError(f"config.pattern must hold layer code D for a DifferentialLayer, got {config.pattern!r}")
        _checks.size("layer", layer)
        _checked_rope("rope", rope, config.head_dim)
        if _is_dynamic(rope):
            raise ValueError("layer code D (differential attention) takes no dynamic rope type in this model")
        self.attn = DiffAttention(config.n_embd, config.n_head // 2, layer=layer, head_norm=config.diff_head_norm)
        self.rotary_at = _RotaryAt(rope)
        cos, sin = self.rotary_at(torch.arange(config.max_seq_len))
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        self.recorder: list | None = None
        self.n_embd, self.max_seq_len = config.n_embd, config.max_seq_len

    def rope(self, t: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The (cos, sin) tables of the first ``t`` positions, t in 1..max_seq_len."""
        _checks.size("t", t)
        if t > self.max_seq_len:
            raise ValueError(f"t must be at most max_seq_len={self.max_seq_len}, got {t}")
        return self.cos[:t], self.sin[:t]

    def head_rms(self, x: torch.Tensor) -> torch.Tensor:
        """Root mean square of each differential head's output before its norm: [n_head/2]. x: [batch, T, n_embd],
        finite (DiffAttention.head_rms refuses NaN and ±inf)."""
        _check_hidden(x, self, self.n_embd, self.max_seq_len)
        return self.attn.head_rms(x, self.rope(x.shape[1]))

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """x: [batch, T, n_embd] → [batch, T, n_embd], unchecked: :meth:`GPT.forward` checks the token ids (and the
        position ids ``positions``, [1 or batch, T], None for 0 … T − 1) once and every layer takes the hidden states
        it makes (NaN and ±inf entries propagate to the output)."""
        if self.recorder is not None:
            raise ValueError("a differential layer (code D) has two attention maps and no single attention call to "
                             "record; use posbook.DiffAttention(..., return_maps=True) on its input instead")
        t = x.shape[1]
        if positions is None:
            return self.attn.attend(x, (self.cos[:t], self.sin[:t]))
        # q and k are [batch, heads, 2, T, d]: the tables broadcast over heads and the two halves
        return self.attn.attend(x, tuple(table[:, None, None] for table in self.rotary_at(positions)))


class MLP(nn.Module):
    """The feed-forward half of a block: n_embd → mlp_ratio·n_embd → GELU → n_embd."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        _checks.instance("config", config, GPTConfig)
        self.n_embd = config.n_embd
        self.up = nn.Linear(config.n_embd, config.mlp_ratio * config.n_embd, bias=False)
        self.down = nn.Linear(config.mlp_ratio * config.n_embd, config.n_embd, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: [batch, T, n_embd] → [batch, T, n_embd], unchecked: :meth:`GPT.forward` checks the token ids once and
        every layer takes the hidden states it makes (NaN and ±inf entries propagate to the output)."""
        return self.down(F.gelu(self.up(x)))


class Block(nn.Module):
    """Pre-norm residual block: x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, config: GPTConfig, code: str, layer: int, rope: dict | None):
        super().__init__()
        _checks.instance("config", config, GPTConfig)
        _checks.choice("code", code, LAYER_CODES)
        _checks.size("layer", layer)
        self.n_embd, self.max_seq_len = config.n_embd, config.max_seq_len
        self.attn_norm, self.mlp_norm = RMSNorm(config.n_embd), RMSNorm(config.n_embd)
        differential = LAYER_CODES[code].differential
        self.attn = DifferentialLayer(config, layer, rope) if differential else Attention(config, code, rope)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """x: [batch, T, n_embd] → [batch, T, n_embd], unchecked: :meth:`GPT.forward` checks the token ids (and the
        position ids ``positions``, [1 or batch, T], None for 0 … T − 1) once and every layer takes the hidden states
        it makes (NaN and ±inf entries propagate to the output)."""
        x = x + self.attn(self.attn_norm(x), positions)
        return x + self.mlp(self.mlp_norm(x))


KEY_COUNTS = ("nanochat", "mask")


def attention_keys(mask: str, seq_len: int, size: int | None = None, *, count: str = "nanochat") -> float:
    """Keys one query of a ``seq_len``-token sequence is charged for under a mask kind (``"causal"``,
    ``"sliding"``, ``"chunked"``; ``size`` is the window or chunk size of a local kind).

    ``count="nanochat"``: the whole sequence for a causal layer and min(size, seq_len) for a local one, nanochat's
    estimate. ``count="mask"``: the mean number of keys the mask keeps per query, counted from
    :func:`posbook.masks.attention_mask` (a causal layer (seq_len + 1)/2).
    """
    _checks.size("seq_len", seq_len)
    _checks.choice("count", count, KEY_COUNTS)
    _checks.choice("mask", mask, tuple(MASK_KINDS))
    needed = MASK_KINDS[mask].size_name
    if (needed is None) != (size is None):
        raise ValueError(f"size must be {'the ' + needed if needed else 'None'} for mask {mask!r}, got {size!r}")
    if size is not None:
        _checks.size("size", size)
    if count == "nanochat":
        return float(seq_len if size is None else min(size, seq_len))
    sizes = {} if needed is None else {needed: size}
    return attention_mask(mask, seq_len, **sizes).sum().item() / seq_len


class GPT(nn.Module):
    """Token embedding (+ optional absolute positions) → blocks following the pattern → final norm → logits."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        _checks.instance("config", config, GPTConfig)
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.n_embd)
        if config.absolute_positions == "learned":
            self.positions = nn.Embedding(config.max_seq_len, config.n_embd)
        elif config.absolute_positions == "sinusoidal":
            self.register_buffer("positions_table", sinusoidal_positions(config.max_seq_len, config.n_embd),
                                 persistent=False)
        self.blocks = nn.ModuleList(Block(config, code, i + 1, rope)
                                    for i, (code, rope) in enumerate(zip(config.layer_codes, config.layer_ropes())))
        self.norm = RMSNorm(config.n_embd)
        self.head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        if config.tie_embeddings:
            self.head.weight = self.embed.weight
        self.apply(self._init)

    def _init(self, module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=0.02)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=0.02)

    def forward(self, idx: torch.Tensor, position_ids: torch.Tensor | None = None) -> torch.Tensor:
        """idx: [batch, T] token ids → logits [batch, T, vocab_size] (float32).

        ``idx`` is an integer tensor with 1 ≤ T ≤ max_seq_len; a narrower integer dtype than int32 (the corpus's
        uint8 bytes) is taken as int64. The ids must lie in 0 … vocab_size − 1. That is checked for ids on the CPU,
        where reading them costs no synchronisation, and not on an accelerator or inside a compiled graph, where it
        would stall every step (an id out of range there fails in the embedding lookup).

        ``position_ids``: the position of each token, an integer tensor [T] (every sequence alike) or [batch, T],
        on idx's device; None (the default) means 0 … T − 1. Absolute embeddings, rotations and position biases read
        them (a bias from the differences of the ids); masks and logit scaling keep counting tokens, so a window is
        still the last W tokens. Ids are at least 0, and below max_seq_len with learned absolute embeddings (checked
        on the CPU, as the token ids are). Randomised ids (Ruoss et al. 2023) and ids shared between an input and
        its copy (Cho et al. 2024) need nothing else. A layer with the dynamic rope type, whose spectrum follows the
        sequence length, takes no position ids."""
        _checks.tensor("idx", idx, ndim=2, integer=True)
        batch, t = idx.shape
        if not batch or not t:
            raise ValueError(f"idx must hold at least one sequence of at least one token, got shape {tuple(idx.shape)}")
        if t > self.config.max_seq_len:
            raise ValueError(f"idx has {t} positions, more than max_seq_len={self.config.max_seq_len}")
        if idx.device.type == "cpu" and not torch.compiler.is_compiling():
            _checks.token_ids("idx", idx, self.config.vocab_size)
        positions = None if position_ids is None else self._positions(position_ids, idx)
        if idx.dtype not in (torch.int64, torch.int32):
            idx = idx.long()         # nn.Embedding takes int64 and int32 ids only
        x = self.embed(idx)
        if self.config.absolute_positions == "learned":
            x = x + self.positions(torch.arange(t, device=idx.device) if positions is None else positions)
        elif self.config.absolute_positions == "sinusoidal":
            table = self.positions_table[:t] if positions is None else _sinusoids(positions, self.config.n_embd)
            x = x + table.to(x.dtype)
        for block in self.blocks:
            x = block(x, positions)
        return self.head(self.norm(x)).float()

    def _positions(self, position_ids: Any, idx: torch.Tensor) -> torch.Tensor:
        """position_ids checked against idx [batch, T], as int64 [1 or batch, T]."""
        _checks.tensor("position_ids", position_ids, integer=True)
        batch, t = idx.shape
        if position_ids.shape not in ((t,), (1, t), (batch, t)):
            raise ValueError(f"position_ids must be [T={t}] or [batch={batch}, T={t}] for idx of shape "
                             f"{tuple(idx.shape)}, got shape {tuple(position_ids.shape)}")
        if position_ids.device != idx.device:
            raise ValueError(f"position_ids must be on idx's device {idx.device}, got {position_ids.device}")
        dynamic = [i for i, block in enumerate(self.blocks) if getattr(block.attn, "dynamic_rope", None) is not None]
        if dynamic:
            raise ValueError(f"position_ids cannot be given to a model with the dynamic rope type (layers {dynamic}): "
                             f"its spectrum follows the sequence length, not the ids; pass position_ids=None")
        if position_ids.device.type == "cpu" and not torch.compiler.is_compiling():
            limit = self.config.max_seq_len if self.config.absolute_positions == "learned" else None
            low, high = int(position_ids.min()), int(position_ids.max())
            if low < 0:
                raise ValueError(f"position_ids must be at least 0, got a minimum of {low}")
            if limit is not None and high >= limit:
                raise ValueError(f"position_ids must be below max_seq_len={limit} with learned absolute embeddings "
                                 f"(one row per position), got a maximum of {high}")
        return position_ids.long().reshape(-1, t)

    @contextmanager
    def recording_attention(self) -> Iterator[list]:
        """Record what every layer's attention sees, for measurements on a trained model.

        Inside the ``with`` block each forward appends, per layer in order, ``(q, k, v, call)``: the tensors after
        QK-Norm, rotation and temperature, and the keyword arguments with which
        ``posbook.attention(q, k, v, **call)`` reproduces the layer's attention output (local layers take their
        masked form here instead of the blocked kernel, which they equal). Add ``return_weights=True`` to get the
        weights. Nothing is detached: use ``torch.no_grad()`` when only measuring.
        """
        records: list = []
        for block in self.blocks:
            block.attn.recorder = records
        try:
            yield records
        finally:
            for block in self.blocks:
                block.attn.recorder = None

    def with_rope(self, rope: dict | list | None) -> "GPT":
        """The same trained weights under other rope configs (a ``GPTConfig.rope`` value): a new model, for
        context extension at evaluation time. The rotary tables are not weights, so every weight carries over."""
        config = GPTConfig(**{**self.config.to_dict(), "rope": rope})     # checks rope
        model = GPT(config).to(self.embed.weight.device)
        model.load_state_dict(self.state_dict())
        return model.train(self.training)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def flops_per_token(self, seq_len: int, count: str = "nanochat") -> float:
        """Training FLOPs per token at sequence length ``seq_len``: 6·(non-embedding parameters), plus for each
        layer 6·(keys a query meets)·(width of its scores + width of its weighted values) for the two attention
        matmuls, forward and backward.

        Each layer is charged the keys its own mask lets a query see (:func:`attention_keys`), so a sliding or
        chunked layer costs its window, not the sequence: an MFU computed from this count is not inflated by
        local layers. ``count`` is ``"nanochat"`` (a global layer charges the whole sequence and a local one
        min(size, seq_len), as nanochat's estimate does) or ``"mask"`` (the mean number of keys the mask keeps, what
        a causal kernel computes). A differential layer (code D) computes two maps of n_head/2 heads over values of
        twice the head width: its scores cost an ordinary layer's, its weighted values twice as much. A layer that
        computes its scores twice (``score_passes``, CoPE) is charged twice for them, and a query dotted with a
        table of learned positions (``position_rows``, CoPE's embeddings) is charged as if they were that many more
        keys' scores. FoX's gates are a linear layer: its parameters count among the rest.
        """
        _checks.size("seq_len", seq_len)
        _checks.choice("count", count, KEY_COUNTS)
        n = sum(p.numel() for name, p in self.named_parameters() if "embed" not in name and "positions" not in name)
        c = self.config
        width = c.n_head * c.head_dim          # the queries' width: grouped K/V heads do not change the work
        attention = 0.0
        for code in c.layer_codes:
            kind = LAYER_CODES[code]
            size = c.window if kind.mask == "sliding" else c.chunk_size if kind.mask == "chunked" else None
            keys = attention_keys(kind.mask, seq_len, size, count=count)
            rows = 0 if kind.position_rows is None else kind.position_rows(c)
            attention += 6 * keys * (kind.score_passes * width + (2 * width if kind.differential else width))
            attention += 6 * rows * width
        return 6 * n + attention
