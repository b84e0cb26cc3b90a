"""One attention layer's core, stage by stage: the reference every other path is tested against::

    logits = q·kᵀ · scale / temperature · query_scale      (length scaling: SWAN, Llama-4 temperature tuning)
           + bias                                          (ALiBi, T5 buckets: posbook.bias)
           → softcap                                       (Gemma 2, Grok: cap·tanh(logits/cap))
           → mask                                          (causal, sliding, chunked: posbook.masks)
    weights = normaliser(logits)                           (softmax | softmax1 | learned sink | sigmoid + b)
    out = weights · v → output de-rotation → output gate   (DeepSeek-V4; gated attention)

Grouped-query attention: q has ``Hq`` heads, k and v have ``Hkv`` heads with Hq % Hkv == 0; query head h reads
key/value head h // (Hq / Hkv), as in Hugging Face's ``repeat_kv``. Hkv = 1 is multi-query attention.

Fast paths: ``impl="sdpa"`` (``torch.nn.functional.scaled_dot_product_attention``) for plain softmax with any
bias/mask, ``impl="flex"`` (``flex_attention``) for softcap, sinks, softmax1 and block-sparse masks. The test
suite holds both equal to ``impl="reference"``; ``impl="auto"`` picks SDPA when the options allow, flex when a
``BlockMask`` is given, and the reference otherwise.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from . import _checks
from .rope import LAYOUTS, apply_rope

NORMALISERS = ("softmax", "softmax1", "sink", "sigmoid")
"""The ways a row of logits becomes weights. ``softmax``; ``softmax1`` (Miller 2023: a 1 added to the denominator,
an implicit zero logit); ``sink`` (a learned logit per head in the denominator: GPT-OSS, DeepSeek-V4);
``sigmoid`` (each weight sigmoid(logit + b) on its own, Ramapuram et al. 2024)."""

IMPLS = ("auto", "reference", "sdpa", "flex")


def _check_positions(positions: torch.Tensor) -> None:
    _checks.tensor("positions", positions, ndim=1)
    if positions.dtype == torch.bool or positions.is_complex():
        raise TypeError(f"positions must hold integers or reals, got dtype {positions.dtype}")
    if positions.is_floating_point():
        _checks.finite("positions", positions)
    if bool((positions < 0).any()):
        raise ValueError("positions must be >= 0")


def llama4_attention_scale(positions: torch.Tensor, *, floor_scale: float = 8192.0,
                           attn_scale: float = 0.1) -> torch.Tensor:
    """Llama 4's temperature tuning for its NoPE layers: 1 + attn_scale·log(1 + ⌊(n + 1)/floor_scale⌋).

    The factor multiplies the queries at position n (Hugging Face ``Llama4TextAttention``, config keys
    ``floor_scale`` and ``attn_scale``), so it is 1 up to position floor_scale − 2 and then grows in steps of
    floor_scale positions, logarithmically. Pass it as ``query_scale``.
    """
    _check_positions(positions)
    _checks.number("floor_scale", floor_scale, positive=True)
    _checks.number("attn_scale", attn_scale, min_value=0)
    return torch.log1p(torch.floor((positions.double() + 1.0) / floor_scale)) * attn_scale + 1.0


def swan_log_scale(positions: torch.Tensor, *, a: float = 362.0) -> torch.Tensor:
    """SWAN-GPT's inference-time logit scale g(n) = log_a(a + n) for the query at position n (Puvvada et al. 2025).

    g(0) = 1 and the factor grows like ln(n)/ln(a); the paper fits a single a ≈ 362 offline and applies it mainly
    in the global NoPE layers. Pass it as ``query_scale``.
    """
    _check_positions(positions)
    _checks.number("a", a, positive=True)
    if a <= 1:
        raise ValueError(f"a must be > 1 (it is the logarithm's base), got {a!r}")
    return torch.log(a + positions.double()) / math.log(a)


def _is_block_mask(mask: Any) -> bool:
    try:
        from torch.nn.attention.flex_attention import BlockMask
    except ImportError:  # pragma: no cover - flex_attention ships with every torch this package supports
        return False
    return isinstance(mask, BlockMask)


def _broadcastable(name: str, value: torch.Tensor, shape: tuple[int, ...]) -> None:
    # It must broadcast *to* the shape, not with it: a mask for all 8 positions passed with 1 query would
    # otherwise silently turn the output into 8 rows.
    try:
        ok = torch.broadcast_shapes(value.shape, shape) == torch.Size(shape)
    except RuntimeError:
        ok = False
    if not ok:
        raise ValueError(f"{name} of shape {tuple(value.shape)} does not broadcast to {shape}")


def _check_inputs(q, k, v, scale, temperature, query_scale, bias, softcap, mask, causal, normaliser, sink,
                  sigmoid_bias, gate, output_rope, layout, impl):
    for name, x in (("q", q), ("k", k), ("v", v)):
        _checks.tensor(name, x, ndim=4, floating=True)
    batch, hq, tq, d = q.shape
    _, hkv, tk, dk = k.shape
    if k.shape[0] != batch or v.shape[0] != batch:
        raise ValueError(f"q, k and v must share the batch size, got {q.shape[0]}, {k.shape[0]}, {v.shape[0]}")
    if dk != d:
        raise ValueError(f"k.shape[-1] must equal q.shape[-1]={d} (the q·k dot product), got {dk}")
    if v.shape[1] != hkv or v.shape[2] != tk:
        raise ValueError(f"v must be [batch, {hkv}, {tk}, dv] like k, got {tuple(v.shape)}")
    if hq % hkv:
        raise ValueError(f"q has {hq} heads, which is not a multiple of k's {hkv} heads (grouped-query attention)")
    if tk < tq:
        raise ValueError(f"k must have at least as many positions as q (queries are the last ones), got {tk} < {tq}")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k and v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k and v must be on one device, got {q.device}, {k.device}, {v.device}")
    if scale is not None:
        _checks.number("scale", scale, positive=True)
    _checks.number("temperature", temperature, positive=True)
    logits_shape = (batch, hq, tq, tk)
    if query_scale is not None:
        _checks.tensor("query_scale", query_scale, floating=True)
        _broadcastable("query_scale", query_scale, logits_shape[:3])
        _checks.finite("query_scale", query_scale)
    if bias is not None:
        _checks.tensor("bias", bias, floating=True)
        _broadcastable("bias", bias, logits_shape)
        if bool(torch.isnan(bias).any()) or bool((bias == float("inf")).any()):
            raise ValueError("bias must not contain NaN or +inf (use mask to hide keys)")
        if softcap is not None and bool(torch.isinf(bias).any()):
            raise ValueError("bias holds -inf entries and softcap is set: softcap would turn them into -softcap, so "
                             "hidden keys would get weight; hide keys with mask instead")
    if softcap is not None:
        _checks.number("softcap", softcap, positive=True)
    if mask is not None and not _is_block_mask(mask):
        _checks.tensor("mask", mask)
        if mask.dtype != torch.bool:
            raise TypeError(f"mask must be a bool tensor (True = may attend) or a flex_attention BlockMask, "
                            f"got dtype {mask.dtype}")
        _broadcastable("mask", mask, logits_shape)
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__} {causal!r}")
    _checks.choice("normaliser", normaliser, NORMALISERS)
    if normaliser == "sink":
        if sink is None:
            raise ValueError("normaliser='sink' needs sink, one logit per query head, got None")
        _checks.tensor("sink", sink, ndim=1, floating=True)
        if sink.shape[0] != hq:
            raise ValueError(f"sink must hold one logit per query head ({hq}), got shape {tuple(sink.shape)}")
        _checks.finite("sink", sink)
    _check_normaliser_extras(normaliser, sink, sigmoid_bias)
    if gate is not None:
        _checks.tensor("gate", gate, floating=True)
        _broadcastable("gate", gate, (batch, hq, tq, v.shape[-1]))
    _checks.choice("layout", layout, LAYOUTS)
    if output_rope is not None:
        if not (isinstance(output_rope, tuple) and len(output_rope) == 2):
            raise TypeError("output_rope must be a (cos, sin) pair for the query positions, "
                            f"got {type(output_rope).__name__}")
        cos, _ = output_rope
        _checks.tensor("output_rope[0]", cos, ndim_min=2, floating=True)
        if cos.shape[-2] != tq or cos.shape[-1] > v.shape[-1]:
            raise ValueError(f"output_rope must be [{tq}, rotary_dim <= {v.shape[-1]}] (query positions), "
                             f"got {tuple(cos.shape)}")
    _checks.choice("impl", impl, IMPLS)


def _combined_mask(mask, causal: bool, tq: int, tk: int, device) -> torch.Tensor | None:
    if causal:
        from .masks import attention_mask
        causal_mask = attention_mask("causal", tq, tk, device=device)
        return causal_mask if mask is None else mask & causal_mask
    return mask


def _repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    return x if n_rep == 1 else x.repeat_interleave(n_rep, dim=1)


def _check_normaliser_extras(normaliser: str, sink: Any, sigmoid_bias: float | None) -> None:
    """sink and sigmoid_bias belong to one normaliser each (the caller checks the sink's value)."""
    if normaliser != "sink" and sink is not None:
        raise ValueError(f"sink only applies to normaliser='sink', got normaliser={normaliser!r}")
    if sigmoid_bias is not None:
        if normaliser != "sigmoid":
            raise ValueError(f"sigmoid_bias only applies to normaliser='sigmoid', got normaliser={normaliser!r}")
        _checks.number("sigmoid_bias", sigmoid_bias)


def _reference(q, k, v, scale, query_scale, bias, softcap, mask, normaliser, sink, sigmoid_bias):
    # Everything in float32 at least: the reference must not inherit bf16 rounding in the normaliser.
    compute = torch.float64 if q.dtype == torch.float64 else torch.float32
    n_rep = q.shape[1] // k.shape[1]
    q, k, v = q.to(compute), _repeat_kv(k, n_rep).to(compute), _repeat_kv(v, n_rep).to(compute)
    logits = (q @ k.transpose(-2, -1)) * scale
    if query_scale is not None:
        logits = logits * query_scale.to(compute).unsqueeze(-1)
    if bias is not None:
        logits = logits + bias.to(compute)
    if softcap is not None:
        logits = softcap * torch.tanh(logits / softcap)

    if mask is not None:
        logits = logits.masked_fill(~mask, float("-inf"))
    weights = _normalised(logits, normaliser, None if sink is None else sink.to(compute)[None, :, None], sigmoid_bias)
    return weights @ v, weights


def _sdpa_reason(query_scale, softcap, mask, normaliser, return_weights) -> str | None:
    if normaliser != "softmax":
        return f"normaliser={normaliser!r} (SDPA only has softmax)"
    if softcap is not None:
        return "softcap (SDPA has no score modification)"
    if return_weights:
        return "return_weights=True (SDPA does not return the weights)"
    if _is_block_mask(mask):
        return "a BlockMask (use impl='flex')"
    return None


def _flex_reason(normaliser, return_weights) -> str | None:
    if normaliser == "sigmoid":
        return "normaliser='sigmoid' (flex_attention normalises with softmax)"
    if return_weights:
        return "return_weights=True (flex_attention does not return the weights)"
    return None


def _sdpa(q, k, v, scale, query_scale, bias, mask, causal):
    tq, tk = q.shape[-2], k.shape[-2]
    if query_scale is not None:  # a per-row factor on the logits is the same factor on that query
        q = q * query_scale.to(q.dtype).unsqueeze(-1)
    is_causal = causal and bias is None and mask is None and tq == tk  # SDPA's is_causal is top-left aligned
    if causal and not is_causal:
        mask = _combined_mask(mask, True, tq, tk, q.device)
    attn_mask = mask
    if bias is not None:
        attn_mask = bias.to(q.dtype)
        if mask is not None:
            attn_mask = attn_mask.masked_fill(~mask, float("-inf"))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal, scale=scale,
                                          enable_gqa=q.shape[1] != k.shape[1])


def _flex(q, k, v, scale, query_scale, bias, softcap, mask, causal, normaliser, sink):
    import warnings

    from torch.nn.attention.flex_attention import AuxRequest, create_block_mask, flex_attention

    batch, hq, tq, _ = q.shape
    tk = k.shape[-2]
    block = mask if _is_block_mask(mask) else None
    if block is not None and causal:
        raise ValueError("causal=True cannot be combined with a BlockMask; build the BlockMask with the causal rule")
    if block is None:
        dense = _combined_mask(mask, causal, tq, tk, q.device)
        if dense is not None:
            dense = dense.expand(batch, hq, tq, tk)

            def mask_mod(b, h, q_idx, kv_idx):
                return dense[b, h, q_idx, kv_idx]

            block = create_block_mask(mask_mod, B=batch, H=hq, Q_LEN=tq, KV_LEN=tk, device=q.device)

    full_bias = None if bias is None else bias.to(q.dtype).expand(batch, hq, tq, tk)
    full_qs = None if query_scale is None else query_scale.to(q.dtype).expand(batch, hq, tq)

    def score_mod(score, b, h, q_idx, kv_idx):
        if full_qs is not None:
            score = score * full_qs[b, h, q_idx]
        if full_bias is not None:
            score = score + full_bias[b, h, q_idx, kv_idx]
        if softcap is not None:
            score = softcap * torch.tanh(score / softcap)
        return score

    modifies = full_qs is not None or full_bias is not None or softcap is not None
    with warnings.catch_warnings():
        # Eager flex_attention warns that it is not fused; the result is the same, which is all this path promises.
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        out, aux = flex_attention(q, k, v, score_mod=score_mod if modifies else None, block_mask=block, scale=scale,
                                  enable_gqa=hq != k.shape[1], return_aux=AuxRequest(lse=True))
    if normaliser in ("softmax1", "sink"):
        # An extra logit s in the denominator rescales every softmax weight by Σe/(Σe + e^s) = sigmoid(lse − s),
        # so the sink needs no extra column (the "non-materialising" form).
        s = torch.zeros(hq, dtype=aux.lse.dtype, device=q.device) if normaliser == "softmax1" else sink.to(aux.lse.dtype)
        out = out * torch.sigmoid(aux.lse - s[None, :, None]).unsqueeze(-1).to(out.dtype)
    return out


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scale: float | None = None,
              temperature: float = 1.0, query_scale: torch.Tensor | None = None, bias: torch.Tensor | None = None,
              softcap: float | None = None, mask: Any = None, causal: bool = False, normaliser: str = "softmax",
              sink: torch.Tensor | None = None, sigmoid_bias: float | None = None, gate: torch.Tensor | None = None,
              output_rope: tuple[torch.Tensor, torch.Tensor] | None = None, layout: str = "half",
              return_weights: bool = False, impl: str = "auto"):
    """Attention with every stage of the book as an option.

    Args:
        q: [batch, Hq, Tq, d]. Queries are the last Tq of the Tk key positions (Tq < Tk is a decoding step
            against a KV cache).
        k: [batch, Hkv, Tk, d], with Hq a multiple of Hkv (grouped-query attention).
        v: [batch, Hkv, Tk, dv].
        scale: multiplies q·kᵀ; default 1/√d.
        temperature: divides the logits (τ < 1 sharpens).
        query_scale: a factor per query row, broadcastable to [batch, Hq, Tq] (e.g. :func:`swan_log_scale`,
            :func:`llama4_attention_scale` of the query positions).
        bias: added after scaling, broadcastable to [batch, Hq, Tq, Tk] (ALiBi, T5; not divided by √d).
        softcap: logits → softcap·tanh(logits/softcap), before the mask.
        mask: bool tensor broadcastable to [batch, Hq, Tq, Tk] (True = may attend) or a flex_attention BlockMask.
        causal: also hide keys after each query (combined with ``mask``).
        normaliser: one of :data:`NORMALISERS`.
        sink: [Hq] sink logits for ``normaliser="sink"``.
        sigmoid_bias: b in sigmoid(logit + b) for ``normaliser="sigmoid"``; default −log(Tk).
        gate: output-gate logits broadcastable to [batch, Hq, Tq, dv]; the output is multiplied by sigmoid(gate)
            (elementwise gate after attention, Qiu et al. 2025).
        output_rope: (cos, sin) of the query positions: the output's first rotary_dim features are turned back by
            the query's own angle, R(−iθ) — DeepSeek-V4's fix when V carries rotated keys (DeepSeek-V4 rotates the
            last 64 features in the interleaved layout; permute the features to match, see
            :func:`posbook.rope.interleaved_to_half`).
        layout: RoPE layout of ``output_rope``.
        return_weights: also return the [batch, Hq, Tq, Tk] weights (reference path only).
        impl: ``"auto"``, ``"reference"``, ``"sdpa"`` or ``"flex"``.

    Returns:
        out [batch, Hq, Tq, dv] in q's dtype, or (out, weights) with ``return_weights``.
    """
    _check_inputs(q, k, v, scale, temperature, query_scale, bias, softcap, mask, causal, normaliser, sink,
                  sigmoid_bias, gate, output_rope, layout, impl)
    if not isinstance(return_weights, bool):
        raise TypeError(f"return_weights must be a bool, got {type(return_weights).__name__} {return_weights!r}")
    scale = (1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)) / temperature

    sdpa_reason = _sdpa_reason(query_scale, softcap, mask, normaliser, return_weights)
    flex_reason = _flex_reason(normaliser, return_weights)
    if impl == "auto":
        impl = "sdpa" if sdpa_reason is None else "flex" if _is_block_mask(mask) and flex_reason is None else "reference"
    if impl == "sdpa" and sdpa_reason is not None:
        raise ValueError(f"impl='sdpa' cannot run {sdpa_reason}; use impl='auto'")
    if impl == "flex" and flex_reason is not None:
        raise ValueError(f"impl='flex' cannot run {flex_reason}; use impl='auto'")
    if impl == "reference" and _is_block_mask(mask):
        raise ValueError("impl='reference' needs a bool mask tensor, got a BlockMask; use impl='flex'")

    weights = None
    if impl == "reference":
        dense = _combined_mask(mask, causal, q.shape[-2], k.shape[-2], q.device)
        out, weights = _reference(q, k, v, scale, query_scale, bias, softcap, dense, normaliser, sink, sigmoid_bias)
        out = out.to(q.dtype)
    elif impl == "sdpa":
        out = _sdpa(q, k, v, scale, query_scale, bias, mask, causal)
    else:
        out = _flex(q, k, v, scale, query_scale, bias, softcap, mask, causal, normaliser, sink)

    if output_rope is not None:
        cos, sin = output_rope
        out = apply_rope(out, cos, -sin, layout=layout)  # R(−iθ): same cos, opposite sin
    if gate is not None:
        out = out * torch.sigmoid(gate).to(out.dtype)
    if return_weights:
        return out, weights.to(q.dtype)
    return out


def local_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, kind: str, window: int | None = None,
                    chunk_size: int | None = None, scale: float | None = None, block_size: int | None = None,
                    query_scale: torch.Tensor | None = None) -> torch.Tensor:
    """Sliding-window or chunked causal self-attention that only computes the key blocks a query can see.

    Equal to ``attention(q, k, v, mask=attention_mask(kind, T, window=..., chunk_size=...))`` (the test suite
    checks it), but without the T×T score matrix, through SDPA on blocks, so it needs no compiler:

    * ``chunked``: the sequence is cut into chunks of ``chunk_size`` and each chunk is an ordinary causal
      attention, T·chunk_size/2 scores instead of T²/2.
    * ``sliding``: queries go in blocks of ``block_size`` (default window/2); a block's keys are the ``window``
      positions before it plus itself, W + B keys per query instead of T/2 on average.

    q, k, v: [batch, H(q or kv), T, d] with equal T (training or prefill; decoding against a cache uses
    :func:`attention` with a mask). ``query_scale``: optional per-query factor [T].
    """
    for name, x in (("q", q), ("k", k), ("v", v)):
        _checks.tensor(name, x, ndim=4, floating=True)
    _checks.choice("kind", kind, ("sliding", "chunked"))
    batch, hq, t, d = q.shape
    if k.shape[-2] != t or v.shape[-2] != t:
        raise ValueError(f"local_attention needs q, k, v of one length (self-attention), got {t}, {k.shape[-2]}, "
                         f"{v.shape[-2]}")
    if hq % k.shape[1]:
        raise ValueError(f"q has {hq} heads, which is not a multiple of k's {k.shape[1]} heads (grouped-query attention)")
    scale = 1.0 / math.sqrt(d) if scale is None else _checks.number("scale", scale, positive=True)
    gqa = hq != k.shape[1]
    if query_scale is not None:
        _checks.tensor("query_scale", query_scale, ndim=1, floating=True)
        if query_scale.shape[0] != t:
            raise ValueError(f"query_scale must have one factor per position ({t}), got {tuple(query_scale.shape)}")
        q = q * query_scale.to(q.dtype)[:, None]

    from .masks import local_size

    # The size the other kind would use is ignored here (the model passes both), so only this kind's is checked.
    local_size(kind, window=window if kind == "sliding" else None, chunk_size=chunk_size if kind == "chunked" else None)
    if kind == "chunked":
        n_chunks = -(-t // chunk_size)
        pad = n_chunks * chunk_size - t

        def chunks(x):
            x = F.pad(x, (0, 0, 0, pad))  # padding sits after the last real query: causal masking hides it
            return x.view(batch, x.shape[1], n_chunks, chunk_size, x.shape[-1]).transpose(1, 2).flatten(0, 1)

        out = F.scaled_dot_product_attention(chunks(q), chunks(k), chunks(v), is_causal=True, scale=scale,
                                             enable_gqa=gqa)
        out = out.view(batch, n_chunks, hq, chunk_size, v.shape[-1]).transpose(1, 2).flatten(2, 3)
        return out[:, :, :t]

    block = max(1, window // 2) if block_size is None else _checks.number("block_size", block_size, integer=True,
                                                                          positive=True)
    n_blocks = -(-t // block)
    pad = n_blocks * block - t
    span = window - 1 + block  # keys a query block can see: window − 1 before its first query, plus the block
    # Keys padded on the left by window − 1 (masked: they do not exist) and on the right up to whole blocks.
    k_pad = F.pad(k, (0, 0, window - 1, pad))
    v_pad = F.pad(v, (0, 0, window - 1, pad))
    k_blocks = k_pad.unfold(2, span, block).permute(0, 2, 1, 4, 3).flatten(0, 1)   # [batch·n_blocks, H, span, d]
    v_blocks = v_pad.unfold(2, span, block).permute(0, 2, 1, 4, 3).flatten(0, 1)
    q_blocks = F.pad(q, (0, 0, 0, pad)).view(batch, hq, n_blocks, block, d).transpose(1, 2).flatten(0, 1)
    # Query r of a block sits at key column window − 1 + r of its span; it sees columns r … window − 1 + r.
    r = torch.arange(block, device=q.device)[:, None]
    c = torch.arange(span, device=q.device)[None, :]
    allowed = (c >= r) & (c <= window - 1 + r)
    # Column c of block j holds position j·block + c − (window − 1); negative positions are the left padding.
    j = torch.arange(n_blocks, device=q.device)[:, None, None]
    mask = allowed & (j * block + c >= window - 1)                                # [n_blocks, block, span]
    mask = mask.expand(batch, n_blocks, block, span).flatten(0, 1)[:, None]
    out = F.scaled_dot_product_attention(q_blocks, k_blocks, v_blocks, attn_mask=mask, scale=scale, enable_gqa=gqa)
    out = out.view(batch, n_blocks, hq, block, v.shape[-1]).transpose(1, 2).flatten(2, 3)
    return out[:, :, :t]


def normalise(logits: torch.Tensor, normaliser: str = "softmax", *, sink: Any = None,
              sigmoid_bias: float | None = None) -> torch.Tensor:
    """Turn a row of logits into attention weights with one of :data:`NORMALISERS`, along the last dimension.

    The four answers to "may a head look nowhere?" (chapter "Letting attention look nowhere")::

        softmax    e^{s_i} / Σ_j e^{s_j}                  every row sums to exactly 1
        softmax1   e^{s_i} / (1 + Σ_j e^{s_j})            Miller's off-by-one: an extra logit 0 with value 0
        sink       e^{s_i} / (e^{sink} + Σ_j e^{s_j})     a learned logit per head (GPT-OSS, DeepSeek-V4)
        sigmoid    sigmoid(s_i + b), b = −log n by default each weight on its own (Ramapuram et al. 2024)

    ``sink`` is computed without materialising the extra column: softmax(s)·sigmoid(lse(s) − sink), since
    Σe/(Σe + e^sink) = sigmoid(lse − sink); this is stable for any sink and any logits. Entries of ``logits`` equal
    to −inf are hidden keys (weight 0); a row that hides every key gets weight 0 everywhere (no NaN).

    Args:
        logits: floating tensor [..., n].
        normaliser: one of :data:`NORMALISERS`.
        sink: for ``normaliser="sink"``: a real number or a tensor broadcastable to ``logits.shape[:-1]``.
        sigmoid_bias: b for ``normaliser="sigmoid"``; default −log n with n = ``logits.shape[-1]``.

    Returns:
        weights of the shape of ``logits``. Equal to ``attention(..., return_weights=True)``'s weights for the
        same logits (the test suite checks it).
    """
    _checks.tensor("logits", logits, ndim_min=1, floating=True)
    _checks.choice("normaliser", normaliser, NORMALISERS)
    if bool(torch.isnan(logits).any()) or bool((logits == float("inf")).any()):
        raise ValueError("logits must not contain NaN or +inf (−inf hides a key)")
    if normaliser == "sink":
        if sink is None:
            raise ValueError("normaliser='sink' needs sink (a number or a tensor of sink logits), got None")
        if isinstance(sink, torch.Tensor):
            _checks.tensor("sink", sink, floating=True)
            _checks.finite("sink", sink)
            _broadcastable("sink", sink, tuple(logits.shape[:-1]))
            sink = sink.to(logits.dtype)
        else:
            sink = torch.tensor(_checks.number("sink", sink), dtype=logits.dtype, device=logits.device)
    _check_normaliser_extras(normaliser, sink, sigmoid_bias)

    return _normalised(logits, normaliser, sink, sigmoid_bias)


def _normalised(logits: torch.Tensor, normaliser: str, sink: torch.Tensor | None,
                sigmoid_bias: float | None) -> torch.Tensor:
    """:func:`normalise` without the argument checks (the reference attention path calls it too)."""
    if normaliser == "sigmoid":
        b = -math.log(logits.shape[-1]) if sigmoid_bias is None else float(sigmoid_bias)
        return torch.sigmoid(logits + b)  # sigmoid(−inf) = 0: hidden keys drop out on their own
    # Shift by the row max, not by the logsumexp: exp(s − lse) would carry lse's rounding (an ulp of a large lse)
    # into every weight, so a softmax row would miss 1 by more than a few ulps.
    row_max = logits.amax(dim=-1, keepdim=True)
    empty = torch.isinf(row_max)  # every key hidden
    e = torch.exp(logits - torch.where(empty, 0.0, row_max))
    total = e.sum(dim=-1, keepdim=True)
    p = torch.where(empty, 0.0, e / torch.where(empty, 1.0, total))
    lse = row_max + torch.log(total)
    if normaliser == "softmax":
        return p
    extra = torch.zeros((), dtype=logits.dtype, device=logits.device) if normaliser == "softmax1" else sink
    if isinstance(extra, torch.Tensor) and extra.ndim:
        extra = extra.unsqueeze(-1)
    return p * torch.sigmoid(lse - extra)
