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
bias/mask, ``impl="flex"`` (``flex_attention``) for softcap, sinks, softmax1 and block-sparse masks; each entry of
:data:`posbook.normalisers.NORMALISERS` says which of them implement it, and a path refuses the others by name.
The test suite holds both equal to ``impl="reference"``; ``impl="auto"`` picks SDPA when the options allow, flex
when a ``BlockMask`` is given, and the reference otherwise.

:func:`attention` checks its arguments; :func:`attend` is the same core unchecked, for callers that made their
inputs themselves (the unchecked layer: see :mod:`posbook`).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from . import _checks
from .logit_scales import scale_queries
from .masks import attention_mask
from .normalisers import NORMALISERS, extra_logit_rescale, normalised
from .rope import LAYOUTS, apply_rope
from .stability import softcapped


IMPLS = ("auto", "reference", "sdpa", "flex")


def _is_block_mask(mask: Any) -> bool:
    try:
        from torch.nn.attention.flex_attention import BlockMask
    except ImportError:  # pragma: no cover - flex_attention ships with every torch this package supports
        return False
    return isinstance(mask, BlockMask)


def _check_inputs(q, k, v, scale, temperature, query_scale, bias, softcap, mask, causal, normaliser, sink,
                  sigmoid_bias, gate, output_rope, layout, impl):
    _checks.qkv(q, k, v)
    batch, hq, tq, _ = q.shape
    tk = k.shape[2]
    if scale is not None:
        _checks.number("scale", scale, positive=True)
    _checks.number("temperature", temperature, positive=True)
    logits_shape = (batch, hq, tq, tk)
    _checks.query_scale(query_scale, q)
    if bias is not None:
        _checks.tensor("bias", bias, floating=True)
        _checks.broadcastable_to("bias", bias, logits_shape)
        _checks.logits("bias", bias)
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
        _checks.broadcastable_to("mask", mask, logits_shape)
    _checks.flag("causal", causal)
    _checks.owned_options("normaliser", normaliser, NORMALISERS, {"sink": sink, "sigmoid_bias": sigmoid_bias},
                          option="option", required="option_required")
    if NORMALISERS[normaliser].ordered and not causal:
        after = ~attention_mask("causal", tq, tk, device=q.device)
        if mask is None or _is_block_mask(mask) or bool((mask & after).any()):
            raise ValueError(f"normaliser={normaliser!r} reads each row's keys in order, the last the nearest: give "
                             "causal=True, or a bool mask that hides every key after its query")
    if sink is not None:
        _checks.tensor("sink", sink, ndim=1, floating=True)
        if sink.shape[0] != hq:
            raise ValueError(f"sink must hold one logit per query head ({hq}), got shape {tuple(sink.shape)}")
        _checks.finite("sink", sink)
    if sigmoid_bias is not None:
        _checks.number("sigmoid_bias", sigmoid_bias)
    if gate is not None:
        _checks.tensor("gate", gate, floating=True)
        _checks.broadcastable_to("gate", gate, (batch, hq, tq, v.shape[-1]))
    _checks.choice("layout", layout, LAYOUTS)
    if output_rope is not None:
        cos, _ = _checks.cos_sin("output_rope", output_rope)
        if cos.shape[-2] != tq or cos.shape[-1] > v.shape[-1]:
            raise ValueError(f"output_rope must be [{tq}, rotary_dim <= {v.shape[-1]}] (query positions), "
                             f"got {tuple(cos.shape)}")
    _checks.choice("impl", impl, IMPLS)


def _combined_mask(mask, causal: bool, tq: int, tk: int, device) -> torch.Tensor | None:
    if causal:
        causal_mask = attention_mask("causal", tq, tk, device=device)
        return causal_mask if mask is None else mask & causal_mask
    return mask


def _repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    return x if n_rep == 1 else x.repeat_interleave(n_rep, dim=1)


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
        logits = softcapped(logits, softcap)
    if mask is not None:
        logits = logits.masked_fill(~mask, float("-inf"))
    weights = normalised(logits, normaliser, None if sink is None else sink.to(compute)[:, None], sigmoid_bias)
    return weights @ v, weights


def _normaliser_reason(path: str, normaliser: str) -> str | None:
    """Why ``path`` cannot run the normaliser (None if it can): the paths its NORMALISERS entry lists."""
    paths = NORMALISERS[normaliser].paths
    if path in paths:
        return None
    runs_on = "the reference path only" if not paths else "the reference and " + " and ".join(paths) + " paths"
    return f"normaliser={normaliser!r} (its NORMALISERS entry runs on {runs_on})"


def _sdpa_reason(query_scale, softcap, mask, normaliser, return_weights) -> str | None:
    reason = _normaliser_reason("sdpa", normaliser)
    if reason is not None:
        return reason
    if softcap is not None:
        return "softcap (SDPA has no score modification)"
    if return_weights:
        return "return_weights=True (SDPA does not return the weights)"
    if _is_block_mask(mask):
        return "a BlockMask (use impl='flex')"
    return None


def _flex_reason(normaliser, return_weights) -> str | None:
    reason = _normaliser_reason("flex", normaliser)
    if reason is not None:
        return reason
    if return_weights:
        return "return_weights=True (flex_attention does not return the weights)"
    return None


def _sdpa(q, k, v, scale, query_scale, bias, mask, causal):
    tq, tk = q.shape[-2], k.shape[-2]
    q = scale_queries(q, query_scale)
    # SDPA's is_causal is top-left aligned. Under a compile with dynamic shapes tq == tk is symbolic and SDPA takes
    # a Python bool: branching on it makes the compiler decide it, with a guard on shapes (not on values).
    same_length = True if tq == tk else False  # noqa: SIM210
    is_causal = causal and bias is None and mask is None and same_length
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
            score = softcapped(score, softcap)
        return score

    modifies = full_qs is not None or full_bias is not None or softcap is not None
    with warnings.catch_warnings():
        # Eager flex_attention warns that it is not fused; the result is the same, which is all this path promises.
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        out, aux = flex_attention(q, k, v, score_mod=score_mod if modifies else None, block_mask=block, scale=scale,
                                  enable_gqa=hq != k.shape[1], return_aux=AuxRequest(lse=True))
    extra_logit = NORMALISERS[normaliser].extra_logit
    if extra_logit is not None:
        # flex_attention's softmax has no extra logit; its logsumexp gives the share the extra logit would take.
        s = extra_logit(aux.lse, None if sink is None else sink[:, None])
        out = out * extra_logit_rescale(aux.lse, s).unsqueeze(-1).to(out.dtype)
    return out


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scale: float | None = None,
              temperature: float = 1.0, query_scale: torch.Tensor | None = None, bias: torch.Tensor | None = None,
              softcap: float | None = None, mask: Any = None, causal: bool = False, normaliser: str = "softmax",
              sink: torch.Tensor | None = None, sigmoid_bias: float | None = None, gate: torch.Tensor | None = None,
              output_rope: tuple[torch.Tensor, torch.Tensor] | None = None, layout: str = "half",
              return_weights: bool = False, impl: str = "auto"):
    """Attention with every stage of the book as an option.

    Finite q and k whose logits overflow the dtype follow one rule on every path: a row with a logit of +inf
    gives NaN outputs (with a softmax normaliser; softcap caps such a logit first), as SDPA and flex_attention do,
    and a row whose logits are all −inf, masked or overflowed, gives a zero row. A dot product that overflows
    both ways (+inf − inf) is a NaN logit, which SDPA's CPU kernel turns into a zero row where the other paths
    give NaN.

    Args:
        q: [batch, Hq, Tq, d]. Queries are the last Tq of the Tk key positions (Tq < Tk is a decoding step
            against a KV cache).
        k: [batch, Hkv, Tk, d], with Hq a multiple of Hkv (grouped-query attention).
        v: [batch, Hkv, Tk, dv].
        scale: multiplies q·kᵀ; default 1/√d.
        temperature: divides the logits (τ < 1 sharpens).
        query_scale: a factor per query row, broadcastable to [batch, Hq, Tq] (e.g. :func:`posbook.logit_scales.swan_log_scale`,
            :func:`posbook.logit_scales.llama4_attention_scale` of the query positions).
        bias: added after scaling, broadcastable to [batch, Hq, Tq, Tk] (ALiBi, T5; not divided by √d).
        softcap: logits → softcap·tanh(logits/softcap), before the mask.
        mask: bool tensor broadcastable to [batch, Hq, Tq, Tk] (True = may attend) or a flex_attention BlockMask.
        causal: also hide keys after each query (combined with ``mask``).
        normaliser: one of :data:`posbook.normalisers.NORMALISERS`.
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

    Raises:
        ValueError: NaN or ±inf in q, k, v, query_scale or sink; NaN or +inf in bias (−inf there hides a key);
            shapes that do not fit together.
        TypeError: q, k or v not floating-point tensors of one dtype; an argument of the wrong type.
    """
    _check_inputs(q, k, v, scale, temperature, query_scale, bias, softcap, mask, causal, normaliser, sink,
                  sigmoid_bias, gate, output_rope, layout, impl)
    _checks.flag("return_weights", return_weights)
    scale = (1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)) / temperature

    impl = resolved_impl(impl, query_scale=query_scale, softcap=softcap, mask=mask, normaliser=normaliser,
                         return_weights=return_weights)
    if impl == "flex":
        _checks.flex_backward(q, k, v, bias, sink, alternative="impl='reference'")
    out, weights = attend(q, k, v, scale=scale, query_scale=query_scale, bias=bias, softcap=softcap, mask=mask,
                          causal=causal, normaliser=normaliser, sink=sink, sigmoid_bias=sigmoid_bias, impl=impl)
    if output_rope is not None:
        cos, sin = output_rope
        out = apply_rope(out, cos, -sin, layout=layout)  # R(−iθ): same cos, opposite sin
    if gate is not None:
        out = out * torch.sigmoid(gate).to(out.dtype)
    if return_weights:
        return out, weights.to(q.dtype)
    return out


def resolved_impl(impl: str, *, query_scale: Any = None, softcap: float | None = None, mask: Any = None,
                  normaliser: str = "softmax", return_weights: bool = False) -> str:
    """The path ``impl`` ("auto" or a named one) takes for these options, or a ValueError if it cannot run them.

    "auto" picks SDPA when the options allow it, flex_attention when a BlockMask is given, and the reference
    otherwise. The experiment model resolves its path once, at construction, and then calls :func:`attend`.
    """
    _checks.choice("impl", impl, IMPLS)
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
    return impl


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scale: float,
           query_scale: torch.Tensor | None = None, bias: torch.Tensor | None = None, softcap: float | None = None,
           mask: Any = None, causal: bool = False, normaliser: str = "softmax", sink: torch.Tensor | None = None,
           sigmoid_bias: float | None = None, impl: str = "reference") -> tuple[torch.Tensor, torch.Tensor | None]:
    """The attention core unchecked: ``(out, weights)``, weights only from the reference path (else None).

    :func:`attention` checks its arguments and then calls this; so does every caller that made or validated its
    inputs itself: the experiment model (its configuration checked once, at construction),
    :class:`posbook.diff_attention.DiffAttention` and :mod:`posbook.theory`. It reads no tensor's values on the host
    (no ``.item()``, no ``bool(tensor)``), so a compiled model traces it without graph breaks. ``scale`` is the final
    factor on q·kᵀ (temperature already folded in) and ``impl`` a resolved path (:func:`resolved_impl`); the
    reference path, the default, runs every option. The weights come in the reference's compute dtype (float32, or
    float64 for float64 inputs), out in q's dtype. NaN and ±inf entries are not refused here: they propagate to the
    output as :func:`attention` describes for overflow.
    """
    if impl == "reference":
        dense = _combined_mask(mask, causal, q.shape[-2], k.shape[-2], q.device)
        out, weights = _reference(q, k, v, scale, query_scale, bias, softcap, dense, normaliser, sink, sigmoid_bias)
        return out.to(q.dtype), weights
    if impl == "sdpa":
        return _sdpa(q, k, v, scale, query_scale, bias, mask, causal), None
    return _flex(q, k, v, scale, query_scale, bias, softcap, mask, causal, normaliser, sink), None
