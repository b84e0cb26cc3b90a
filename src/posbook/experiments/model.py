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
====  =====================================================================================================

Absolute position embeddings (learned or sinusoidal) are added to the token embeddings when
``absolute_positions`` says so; with ``pattern="N"`` that is the original Transformer. Everything a layer does
to q, k and the logits comes from posbook (rope_parameters, apply_rope, QK-Norm, biases, masks, attention), so
the experiments run the mechanisms the chapters explain, not a second copy of them.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from .. import _checks
from ..attention import attention, llama4_attention_scale, local_attention, swan_log_scale
from ..bias import T5RelativeBias, alibi_bias, alibi_slopes
from ..masks import attention_mask
from ..norms import RMSNorm
from ..rope import apply_rope, rope_cos_sin
from ..scaling import rope_parameters

LAYER_CODES = {
    "R": "RoPE, global",
    "N": "NoPE, global",
    "S": "RoPE, sliding window",
    "C": "RoPE, chunked",
    "P": "p-RoPE (proportional), global",
    "H": "partial RoPE, global",
    "A": "ALiBi, global",
    "T": "T5 relative bias, global",
}
ROTARY_CODES = set("RSCPH")
ABSOLUTE_POSITIONS = ("none", "learned", "sinusoidal")
QK_NORM_MODES = ("none", "all", "rope")          # "rope": only in layers that rotate (Llama 4 drops it in NoPE layers)
LOGIT_SCALINGS = ("none", "swan", "llama4", "constant")   # applied to the queries of global NoPE layers


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
    layer_codes: list[str] = field(init=False)

    def __post_init__(self):
        for name in ("vocab_size", "n_layer", "n_head", "n_embd", "mlp_ratio", "max_seq_len", "window", "chunk_size",
                     "t5_num_buckets", "t5_max_distance"):
            _checks.number(name, getattr(self, name), integer=True, positive=True)
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd={self.n_embd} must be a multiple of n_head={self.n_head}")
        if (self.n_embd // self.n_head) % 2:
            raise ValueError(f"head_dim = n_embd/n_head = {self.n_embd // self.n_head} must be even for RoPE")
        kv = self.n_head if self.n_kv_head is None else self.n_kv_head
        _checks.number("n_kv_head", kv, integer=True, positive=True)
        if self.n_head % kv:
            raise ValueError(f"n_head={self.n_head} must be a multiple of n_kv_head={kv}")
        if not isinstance(self.pattern, str) or not self.pattern:
            raise ValueError(f"pattern must be a non-empty string of layer codes {sorted(LAYER_CODES)}, "
                             f"got {self.pattern!r}")
        unknown = sorted(set(self.pattern) - set(LAYER_CODES))
        if unknown:
            raise ValueError(f"pattern {self.pattern!r} has unknown layer code(s) {unknown}; known: "
                             + ", ".join(f"{c} = {d}" for c, d in LAYER_CODES.items()))
        _checks.choice("absolute_positions", self.absolute_positions, ABSOLUTE_POSITIONS)
        _checks.choice("qk_norm", self.qk_norm, QK_NORM_MODES)
        _checks.choice("logit_scaling", self.logit_scaling, LOGIT_SCALINGS)
        _checks.number("rope_theta", self.rope_theta, positive=True)
        _checks.number("rope_fraction", self.rope_fraction, positive=True)
        if self.rope_fraction > 1:
            raise ValueError(f"rope_fraction must be in (0, 1], got {self.rope_fraction}")
        if self.softcap is not None:
            _checks.number("softcap", self.softcap, positive=True)
        _checks.number("attn_temperature", self.attn_temperature, positive=True)
        _checks.number("constant_logit_scale", self.constant_logit_scale, positive=True)
        self.layer_codes = [self.pattern[i % len(self.pattern)] for i in range(self.n_layer)]

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    def to_dict(self) -> dict:
        out = asdict(self)
        out.pop("layer_codes")
        return out


def sinusoidal_positions(n_positions: int, dim: int) -> torch.Tensor:
    """The fixed absolute embeddings of Vaswani et al. (2017): sin and cos of position·10000^(−2i/dim)."""
    inv = 10_000.0 ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    angles = torch.arange(n_positions, dtype=torch.float64)[:, None] * inv[None, :]
    table = torch.zeros(n_positions, dim, dtype=torch.float64)
    table[:, 0::2], table[:, 1::2] = angles.sin(), angles.cos()
    return table.float()


class Attention(nn.Module):
    """One attention layer: projections → QK-Norm → position scheme → posbook.attention → output projection."""

    def __init__(self, config: GPTConfig, code: str):
        super().__init__()
        self.code, self.config = code, config
        h, kv, d = config.n_head, config.n_kv_head or config.n_head, config.head_dim
        self.n_head, self.n_kv_head, self.head_dim = h, kv, d
        self.q_proj = nn.Linear(config.n_embd, h * d, bias=False)
        self.k_proj = nn.Linear(config.n_embd, kv * d, bias=False)
        self.v_proj = nn.Linear(config.n_embd, kv * d, bias=False)
        self.o_proj = nn.Linear(h * d, config.n_embd, bias=False)
        rotary = code in ROTARY_CODES
        self.qk_norm = config.qk_norm == "all" or (config.qk_norm == "rope" and rotary)
        if self.qk_norm:
            self.q_norm, self.k_norm = RMSNorm(d), RMSNorm(d)
        if rotary:
            rope = {"rope_theta": config.rope_theta, "head_dim": d}
            if code == "P":
                rope["rope_parameters"] = {"rope_type": "proportional", "rope_theta": config.rope_theta,
                                           "partial_rotary_factor": config.rope_fraction}
                del rope["rope_theta"]
            elif code == "H":
                rope["partial_rotary_factor"] = config.rope_fraction
            inv_freq, attention_factor = rope_parameters(rope)
            cos, sin = rope_cos_sin(torch.arange(config.max_seq_len), inv_freq, attention_factor=attention_factor)
            self.register_buffer("cos", cos, persistent=False)
            self.register_buffer("sin", sin, persistent=False)
        if code == "A":
            self.register_buffer("slopes", alibi_slopes(h), persistent=False)
        if code == "T":
            self.t5 = T5RelativeBias(h, bidirectional=False, num_buckets=config.t5_num_buckets,
                                     max_distance=config.t5_max_distance)
        if config.sinks:
            self.sink = nn.Parameter(torch.zeros(h))
        self.recorder: list | None = None    # set by GPT.recording_attention

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, t, _ = x.shape
        config = self.config
        q = self.q_proj(x).view(batch, t, self.n_head, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(batch, t, self.n_kv_head, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(batch, t, self.n_kv_head, self.head_dim).transpose(1, 2)
        if self.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        if self.code in ROTARY_CODES:
            cos, sin = self.cos[:t], self.sin[:t]
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if config.attn_temperature != 1.0:
            # Dividing q divides every logit q·k (and every ALiBi/T5 bias is added after, unscaled, as in attention()).
            q = q / config.attn_temperature

        query_scale = None
        if self.code == "N" and config.logit_scaling != "none":
            positions = torch.arange(t, device=x.device)
            if config.logit_scaling == "swan":
                factors = swan_log_scale(positions, a=config.swan_a)
            elif config.logit_scaling == "llama4":
                factors = llama4_attention_scale(positions, floor_scale=config.llama4_floor_scale,
                                                 attn_scale=config.llama4_attn_scale)
            else:
                factors = torch.full((t,), config.constant_logit_scale, device=x.device)
            query_scale = factors.to(q.dtype)

        local = {"S": "sliding", "C": "chunked"}.get(self.code)
        if local and not config.sinks and config.softcap is None and self.recorder is None:
            # Blocked SDPA: a local layer does only the work its window needs (equal to the masked call below).
            y = local_attention(q, k, v, kind=local, window=config.window, chunk_size=config.chunk_size,
                                query_scale=query_scale)
        else:
            call = dict(causal=local is None, query_scale=query_scale, softcap=config.softcap,
                        normaliser="sink" if config.sinks else "softmax", sink=self.sink if config.sinks else None,
                        mask=None, bias=None)
            if local:
                size = {"window": config.window} if local == "sliding" else {"chunk_size": config.chunk_size}
                call["mask"] = attention_mask(local, t, device=x.device, **size)
            if self.code == "A":
                call["bias"] = alibi_bias(self.slopes, t).to(q.dtype)
            elif self.code == "T":
                call["bias"] = self.t5(t).to(q.dtype)
            if self.recorder is not None:
                self.recorder.append((q, k, v, call))
            y = attention(q, k, v, **call)
        return self.o_proj(y.transpose(1, 2).reshape(batch, t, -1))


class MLP(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.up = nn.Linear(config.n_embd, config.mlp_ratio * config.n_embd, bias=False)
        self.down = nn.Linear(config.mlp_ratio * config.n_embd, config.n_embd, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x)))


class Block(nn.Module):
    """Pre-norm residual block: x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, config: GPTConfig, code: str):
        super().__init__()
        self.attn_norm, self.mlp_norm = RMSNorm(config.n_embd), RMSNorm(config.n_embd)
        self.attn, self.mlp = Attention(config, code), MLP(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class GPT(nn.Module):
    """Token embedding (+ optional absolute positions) → blocks following the pattern → final norm → logits."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.n_embd)
        if config.absolute_positions == "learned":
            self.positions = nn.Embedding(config.max_seq_len, config.n_embd)
        elif config.absolute_positions == "sinusoidal":
            self.register_buffer("positions_table", sinusoidal_positions(config.max_seq_len, config.n_embd),
                                 persistent=False)
        self.blocks = nn.ModuleList(Block(config, code) for code in config.layer_codes)
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

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """idx: [batch, T] token ids → logits [batch, T, vocab_size] (float32)."""
        _checks.tensor("idx", idx, ndim=2)
        t = idx.shape[1]
        if t > self.config.max_seq_len:
            raise ValueError(f"sequence length {t} exceeds max_seq_len={self.config.max_seq_len}")
        x = self.embed(idx)
        if self.config.absolute_positions == "learned":
            x = x + self.positions(torch.arange(t, device=idx.device))
        elif self.config.absolute_positions == "sinusoidal":
            x = x + self.positions_table[:t].to(x.dtype)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x)).float()

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

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs per token: 6·(non-embedding parameters) + the attention scores (nanochat's estimate)."""
        n = sum(p.numel() for name, p in self.named_parameters() if "embed" not in name and "positions" not in name)
        c = self.config
        return 6 * n + 12 * c.n_layer * c.n_head * c.head_dim * seq_len
