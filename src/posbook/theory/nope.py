"""NoPE's two theorems as exact weights (Kazemnejad et al. 2023), explained in chapter 6 (``ch06_nope``).

Theorem 1: with a causal mask and an anchor token (⟨bos⟩) at position 1, one attention head of the first layer
writes 1/t into a chosen hidden dimension at position t, and the layer's ReLU MLP can turn 1/t into t.
Theorem 2: once t sits in the residual stream, a later head's score is ⟨q_t, k_i⟩ = content + (i − t).

Conventions: a hidden state is ``[T, d_model]`` (one sequence, positions 1..T in the text, rows 0..T−1 in code);
head weights are ``[head_dim, d_model]`` (q = W_Q h), the output weight ``[d_model, head_dim]``. The first three
hidden dimensions (code indices 0, 1, 2) are the construction's: a constant 1, a ⟨bos⟩ flag, the position slot.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from .. import _checks
from ..core import attend

ONE, BOS_FLAG, POSITION = 0, 1, 2
"""The three hidden dimensions the constructions use (indices 0, 1, 2). Dimension ONE holds the constant 1,
BOS_FLAG marks the ⟨bos⟩ token, POSITION is the slot that comes to hold 1/t (then t)."""


def _dims(d_model: Any, head_dim: Any) -> None:
    _checks.size("d_model", d_model)
    _checks.size("head_dim", head_dim)
    if d_model < 3:
        raise ValueError(f"d_model must be >= 3 (the construction uses three hidden dimensions), got {d_model}")


def theorem1_weights(vocab_size: int, d_model: int, head_dim: int, *, bos_id: int = 0,
                     generator: torch.Generator | None = None, dtype: torch.dtype = torch.float64) -> dict[str, torch.Tensor]:
    """Weights of Theorem 1's first layer: embedding, W_Q, W_K, W_V, W_O of one causal NoPE head.

    * embedding ``[vocab_size, d_model]``: dimension 0 is 1 for every token, dimension 1 is 1 only for ``bos_id``,
      dimension 2 is 0; the other dimensions are random (content the construction never reads);
    * W_K ``[head_dim, d_model]`` reads only dimension 0, so every key is the all-ones vector;
    * W_Q is random: with equal keys it cannot matter;
    * W_V reads only dimension 1 into the value's first entry, so only ⟨bos⟩ has a non-zero value;
    * W_O ``[d_model, head_dim]`` writes the value's first entry into dimension 2.

    Run causally, position t (1-based) attends uniformly over t keys and dimension 2 of the output is 1/t.
    """
    _checks.size("vocab_size", vocab_size)
    _dims(d_model, head_dim)
    _checks.number("bos_id", bos_id, integer=True, min_value=0)
    if bos_id >= vocab_size:
        raise ValueError(f"bos_id must be < vocab_size={vocab_size}, got {bos_id}")
    _checks.generator("generator", generator)
    _checks.dtype("dtype", dtype)
    embedding = torch.randn(vocab_size, d_model, generator=generator, dtype=torch.float64)
    embedding[:, ONE] = 1.0
    embedding[:, BOS_FLAG] = 0.0
    embedding[bos_id, BOS_FLAG] = 1.0
    embedding[:, POSITION] = 0.0
    w_q = torch.randn(head_dim, d_model, generator=generator, dtype=torch.float64)
    w_k = torch.zeros(head_dim, d_model, dtype=torch.float64)
    w_k[:, ONE] = 1.0
    w_v = torch.zeros(head_dim, d_model, dtype=torch.float64)
    w_v[0, BOS_FLAG] = 1.0
    w_o = torch.zeros(d_model, head_dim, dtype=torch.float64)
    w_o[POSITION, 0] = 1.0
    out = {"embedding": embedding, "w_q": w_q, "w_k": w_k, "w_v": w_v, "w_o": w_o}
    return {name: w.to(dtype) for name, w in out.items()}


def _hidden(hidden: Any) -> None:
    _checks.tensor("hidden", hidden, ndim=2, floating=True)
    if hidden.shape[0] == 0:
        raise ValueError(f"hidden must hold at least one position, got {_checks._show(hidden)}")
    _checks.finite("hidden", hidden)


def _weight(name: str, w: Any, hidden: torch.Tensor, ndim: int = 2) -> None:
    """A finite weight in hidden's dtype: the constructions are exact, so nothing is cast silently."""
    _checks.tensor(name, w, ndim=ndim, floating=True)
    if w.dtype != hidden.dtype:
        raise TypeError(f"{name} must have hidden's dtype {hidden.dtype}, got {w.dtype}")
    _checks.finite(name, w)


def attention_block(hidden: torch.Tensor, w_q: torch.Tensor, w_k: torch.Tensor, w_v: torch.Tensor,
                    w_o: torch.Tensor, *, causal: bool = True, return_weights: bool = False):
    """One NoPE attention head on one sequence: W_O · attention(W_Q h, W_K h, W_V h), no position anywhere.

    ``hidden`` is ``[T, d_model]`` (T ≥ 1); the result (the head's contribution to the residual stream) is too.
    Scores are scaled by 1/√head_dim as usual and normalised by softmax (the reference path of
    :func:`posbook.core.attend`). With ``return_weights`` the ``[T, T]`` attention weights come back as well. Hidden states and weights
    must be finite and share one dtype.
    """
    _hidden(hidden)
    d_model = hidden.shape[1]
    for name, w in (("w_q", w_q), ("w_k", w_k), ("w_v", w_v)):
        _weight(name, w, hidden)
        if w.shape[1] != d_model:
            raise ValueError(f"{name} must be [head_dim, d_model={d_model}], got {tuple(w.shape)}")
    if w_q.shape != w_k.shape:
        raise ValueError(f"w_q and w_k must have one shape, got {tuple(w_q.shape)} and {tuple(w_k.shape)}")
    _weight("w_o", w_o, hidden)
    if w_o.shape != (d_model, w_v.shape[0]):
        raise ValueError(f"w_o must be [d_model={d_model}, head_dim={w_v.shape[0]}], got {tuple(w_o.shape)}")
    _checks.flag("causal", causal)
    _checks.flag("return_weights", return_weights)
    q, k, v = (hidden @ w.T for w in (w_q, w_k, w_v))
    out, weights = attend(q[None, None], k[None, None], v[None, None], scale=1 / math.sqrt(q.shape[-1]),
                          causal=causal, impl="reference")
    out = out[0, 0] @ w_o.T
    return (out, weights[0, 0].to(hidden.dtype)) if return_weights else out


def reciprocal_mlp(positions: torch.Tensor, *, d_model: int, read: int = POSITION, write: int = POSITION,
                   keep_input: bool = False, dtype: torch.dtype = torch.float64) -> dict[str, torch.Tensor]:
    """A one-hidden-layer ReLU MLP that maps x = 1/t to t exactly at the given positions (Theorem 1's last step).

    The MLP reads hidden dimension ``read`` and adds its output to dimension ``write``:
    ``mlp(h) = W_2 · relu(W_1 h + b_1) + b_2``. Its output is the piecewise-linear interpolant of 1/x through the
    knots (1/t, t), one ReLU per segment (len(positions) − 1 units, plus one when ``keep_input`` is False). With
    ``keep_input=False`` (default) it writes t − 1/t, so that the residual stream, which already holds 1/t in that
    dimension, ends up holding t; with ``keep_input=True`` it writes t itself (use it when ``write != read``).
    Below the smallest knot 1/T the output stays T: the counter saturates past the positions it was built for.

    ``positions``: strictly increasing integers ≥ 1 (1-D tensor), at least two of them.
    Returns a dict with ``w1 [units, d_model]``, ``b1 [units]``, ``w2 [d_model, units]``, ``b2 [d_model]``.
    """
    _checks.positions("positions", positions, ndim=1, integer=True)
    if positions.numel() < 2:
        raise ValueError(f"positions must hold at least two positions, got {positions.tolist()}")
    if bool((positions < 1).any()) or bool((positions[1:] <= positions[:-1]).any()):
        raise ValueError(f"positions must be strictly increasing integers >= 1, got {positions.tolist()[:8]}...")
    _checks.size("d_model", d_model)
    for name, idx in (("read", read), ("write", write)):
        _checks.number(name, idx, integer=True, min_value=0)
        if idx >= d_model:
            raise ValueError(f"{name} must be < d_model={d_model}, got {idx}")
    _checks.flag("keep_input", keep_input)
    _checks.dtype("dtype", dtype)
    t = positions.double().flip(0)                     # decreasing t: knots x = 1/t increasing
    x, y = 1.0 / t, t
    slopes = (y[1:] - y[:-1]) / (x[1:] - x[:-1])       # slope of each segment, −t(t+1) between neighbours
    gains = torch.cat([slopes[:1], slopes[1:] - slopes[:-1]])  # each ReLU adds its change of slope
    units = gains.numel() + (0 if keep_input else 1)
    w1 = torch.zeros(units, d_model, dtype=torch.float64)
    b1 = torch.zeros(units, dtype=torch.float64)
    w2 = torch.zeros(d_model, units, dtype=torch.float64)
    b2 = torch.zeros(d_model, dtype=torch.float64)
    w1[: gains.numel(), read] = 1.0
    b1[: gains.numel()] = -x[:-1]
    w2[write, : gains.numel()] = gains
    b2[write] = y[0]
    if not keep_input:
        # x > 0, so relu(x) = x: one more unit subtracts the 1/t already in the residual stream.
        w1[-1, read] = 1.0
        w2[write, -1] = -1.0
    out = {"w1": w1, "b1": b1, "w2": w2, "b2": b2}
    return {name: w.to(dtype) for name, w in out.items()}


def mlp_block(hidden: torch.Tensor, weights: dict[str, torch.Tensor]) -> torch.Tensor:
    """``W_2 · relu(W_1 h + b_1) + b_2`` for each row of ``hidden [T, d_model]`` (the MLP's residual contribution).

    ``weights`` as from :func:`reciprocal_mlp`: finite, in hidden's dtype (T ≥ 1, hidden finite too).
    """
    _hidden(hidden)
    _checks.mapping("weights", weights)
    if set(weights) != {"w1", "b1", "w2", "b2"}:
        raise ValueError(f"weights must have the keys w1, b1, w2, b2 (see reciprocal_mlp), got {sorted(weights)}")
    for key, ndim in (("w1", 2), ("b1", 1), ("w2", 2), ("b2", 1)):
        _weight(f"weights[{key!r}]", weights[key], hidden, ndim)
    units, d_model = weights["w1"].shape[0], hidden.shape[1]
    for key, shape in (("w1", (units, d_model)), ("b1", (units,)), ("w2", (d_model, units)), ("b2", (d_model,))):
        if tuple(weights[key].shape) != shape:
            raise ValueError(f"weights[{key!r}] must have shape {shape} (units={units}, d_model={d_model}), got "
                             f"{tuple(weights[key].shape)}")
    return torch.relu(hidden @ weights["w1"].T + weights["b1"]) @ weights["w2"].T + weights["b2"]


def theorem2_weights(d_model: int, head_dim: int, *, generator: torch.Generator | None = None,
                     content_reads_position: bool = False,
                     dtype: torch.dtype = torch.float64) -> dict[str, torch.Tensor]:
    """W_Q, W_K of Theorem 2: with t in hidden dimension 2, ⟨q_t, k_i⟩ = content + (i − t).

    Rows 0 and 1: q = (1, −t, …) (W_Q reads dimension 0, and minus dimension 2), k = (i, 1, …) (W_K reads dimension
    2, then dimension 0), so the first two entries contribute i − t. The other head_dim − 2 rows are random and
    give the content term; they skip dimension 2 (and the other construction dimensions), because a row that read
    the position in both W_Q and W_K would add a term proportional to t·i, which is not relative. Set
    ``content_reads_position=True`` to let them read it and see the relative form break.
    """
    _dims(d_model, head_dim)
    if head_dim < 2:
        raise ValueError(f"head_dim must be >= 2 (two entries carry the relative term), got {head_dim}")
    _checks.generator("generator", generator)
    _checks.flag("content_reads_position", content_reads_position)
    _checks.dtype("dtype", dtype)
    w_q = torch.randn(head_dim, d_model, generator=generator, dtype=torch.float64)
    w_k = torch.randn(head_dim, d_model, generator=generator, dtype=torch.float64)
    if not content_reads_position:
        w_q[2:, :3] = 0.0
        w_k[2:, :3] = 0.0
    w_q[:2] = 0.0
    w_k[:2] = 0.0
    w_q[0, ONE], w_q[1, POSITION] = 1.0, -1.0
    w_k[0, POSITION], w_k[1, ONE] = 1.0, 1.0
    return {"w_q": w_q.to(dtype), "w_k": w_k.to(dtype)}


__all__ = ["ONE", "BOS_FLAG", "POSITION", "theorem1_weights", "attention_block", "reciprocal_mlp", "mlp_block",
           "theorem2_weights"]
