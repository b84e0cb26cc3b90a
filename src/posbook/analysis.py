"""Measurements on scores and attention patterns that several chapters share."""

from __future__ import annotations

import math
from typing import Any

import torch

from . import _checks


def rope_decay_bound(distances: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    r"""RoFormer's long-term decay quantity (Su et al., Eq. 35–37): :math:`\frac{2}{d}\sum_{j=1}^{d/2} |S_j(r)|`.

    :math:`S_j(r) = \sum_{k<j} e^{i r \theta_k}` are the partial sums of the rotating phasors at relative distance
    r. By Abel summation, for any plane weights :math:`h_i` (with :math:`h_{d/2} = 0`),
    :math:`|\sum_i h_i e^{i r \theta_i}| \le \max_i |h_{i+1} - h_i| \sum_j |S_j(r)|`, so this mean is a bound per
    unit of :math:`\max_i |h_{i+1} - h_i|`. Computed in float64. Chapter "RoPE from first principles" plots it.

    Args:
        distances: 1-D tensor of relative distances r.
        inv_freq: 1-D tensor of the d/2 frequencies θ_i.
    Returns:
        float64 tensor, one value per distance.
    """
    _checks.tensor("distances", distances, ndim=1)
    _checks.tensor("inv_freq", inv_freq, ndim=1, floating=True)
    phase = distances.to(torch.float64)[:, None] * inv_freq.to(torch.float64)[None, :]
    partial_sums = torch.polar(torch.ones_like(phase), phase).cumsum(dim=-1)      # S_1 … S_{d/2}
    return partial_sums.abs().mean(dim=-1)


# ----------------------------------------------------------------------------------------------------------------
# The score as a sum of cosines (chapter "The score is a sum of cosines: RoPE at long context").
#
# For one query q and one key k the RoPE score is a function of the distance r alone,
#     s(r) = Σ_n C_n cos(r θ_n − φ_n),
# and the chapter treats r as a random variable: uniform on a window of L consecutive distances. Everything below
# is exact for that model (closed forms checked against enumeration in tests/test_analysis_long_context.py), so
# the chapter can hold the usual approximations — a hard split into "fast" and "slow" planes, independent terms,
# a normal distribution — against the exact numbers.
# ----------------------------------------------------------------------------------------------------------------

_PLANE_LAYOUTS = ("half", "interleaved")


def rope_plane_terms(q: torch.Tensor, k: torch.Tensor, *, layout: str = "half") -> tuple[torch.Tensor, torch.Tensor]:
    r"""Amplitude :math:`C_n` and phase :math:`\phi_n` of every plane's term in the RoPE score of q and k.

    With the query at position m and the key at position m − r (r tokens back), the score is
    :math:`s(r) = \sum_n C_n \cos(r\theta_n - \phi_n)`, where for plane n with query coordinates
    :math:`(q_1, q_2)` and key coordinates :math:`(k_1, k_2)`

    .. math::
        C_n e^{i\phi_n} = \overline{(q_1 + i q_2)}\,(k_1 + i k_2), \quad
        C_n = \sqrt{A_n^2 + D_n^2},\ \phi_n = \operatorname{atan2}(D_n, A_n),

    with :math:`A_n = q_1k_1 + q_2k_2` (the plane's content term) and :math:`D_n = q_1k_2 - q_2k_1`. Only the
    content enters; positions never do. Chapter "The score is a sum of cosines" derives it.

    Args:
        q, k: [..., head_dim] query and key (broadcastable against each other), before rotation.
        layout: which dimensions form plane n: ``"half"`` (n, n + head_dim/2) or ``"interleaved"`` (2n, 2n + 1),
            as in :func:`posbook.rope.apply_rope`.
    Returns:
        (amplitude, phase), float64 tensors [..., head_dim/2]; phase in (−π, π].
    """
    _checks.tensor("q", q, ndim_min=1, floating=True)
    _checks.tensor("k", k, ndim_min=1, floating=True)
    _checks.choice("layout", layout, _PLANE_LAYOUTS)
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must have the same last dimension (head_dim), got {tuple(q.shape)} and "
                         f"{tuple(k.shape)}")
    if q.shape[-1] % 2 or q.shape[-1] == 0:
        raise ValueError(f"q.shape[-1] (head_dim) must be even and > 0, got {q.shape[-1]}")
    q, k = q.to(torch.float64), k.to(torch.float64)
    h = q.shape[-1] // 2
    if layout == "half":
        q1, q2, k1, k2 = q[..., :h], q[..., h:], k[..., :h], k[..., h:]
    else:
        q1, q2, k1, k2 = q[..., 0::2], q[..., 1::2], k[..., 0::2], k[..., 1::2]
    a = q1 * k1 + q2 * k2
    d = q1 * k2 - q2 * k1
    return torch.hypot(a, d), torch.atan2(d, a)


def _check_terms(amplitude: Any, phase: Any, inv_freq: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    _checks.tensor("amplitude", amplitude, ndim_min=1, floating=True)
    _checks.tensor("phase", phase, ndim_min=1, floating=True)
    _checks.tensor("inv_freq", inv_freq, ndim=1, floating=True)
    if amplitude.shape[-1] != inv_freq.shape[0] or phase.shape[-1] != inv_freq.shape[0]:
        raise ValueError(f"amplitude and phase must end in one entry per frequency ({inv_freq.shape[0]}), got "
                         f"amplitude {tuple(amplitude.shape)} and phase {tuple(phase.shape)}")
    for name, t in (("amplitude", amplitude), ("phase", phase), ("inv_freq", inv_freq)):
        _checks.finite(name, t)
    f64 = torch.float64
    return amplitude.to(f64), phase.to(f64), inv_freq.to(f64)


def cosine_sum(amplitude: torch.Tensor, phase: torch.Tensor, inv_freq: torch.Tensor,
               distances: torch.Tensor) -> torch.Tensor:
    r""":math:`s(r) = \sum_n C_n \cos(r\theta_n - \phi_n)` at every distance r, in float64.

    Computed as :math:`\sum_n A_n\cos(r\theta_n) + S_n\sin(r\theta_n)` (with :math:`A_n = C_n\cos\phi_n`,
    :math:`S_n = C_n\sin\phi_n`): matrix products against cos/sin tables shared by the whole batch. For a run of
    consecutive integer distances (a whole context) the tables cover one block of ``_COS_BLOCK`` offsets j, and
    each block start r₀ rotates the coefficients instead (:math:`\cos((r_0+j)\theta) = \cos r_0\theta\cos
    j\theta - \sin r_0\theta \sin j\theta`), so a context of L distances costs about L·h/``_COS_BLOCK``
    cosines rather than L·h. Both paths agree to rounding (tests/test_analysis_long_context.py).

    Args:
        amplitude, phase: [..., n_planes] from :func:`rope_plane_terms` (or any amplitudes and phases).
        inv_freq: [n_planes] frequencies θ_n.
        distances: 1-D tensor of distances r (integers or reals).
    Returns:
        float64 tensor [..., len(distances)].
    """
    amplitude, phase, inv_freq = _check_terms(amplitude, phase, inv_freq)
    _checks.tensor("distances", distances, ndim=1)
    if distances.is_floating_point():
        _checks.finite("distances", distances)
    elif distances.dtype == torch.bool or distances.is_complex():
        raise TypeError(f"distances must hold integers or reals, got dtype {distances.dtype}")
    amplitude, phase = torch.broadcast_tensors(amplitude, phase)
    h = inv_freq.shape[0]
    lead = amplitude.shape[:-1]
    cos_part = (amplitude * phase.cos()).reshape(-1, h)
    sin_part = (amplitude * phase.sin()).reshape(-1, h)
    n_dist = distances.shape[0]
    if _is_integer_run(distances) and n_dist > _COS_BLOCK:
        out = _cosine_sum_run(cos_part, sin_part, inv_freq, int(distances[0]), n_dist)
        return out.reshape(*lead, n_dist)
    r = distances.to(torch.float64)
    out = []
    block = max(1, (1 << 22) // max(1, h))     # about 32 MiB of float64 per table
    for start in range(0, n_dist, block):
        angle = r[start:start + block, None] * inv_freq[None, :]
        out.append(cos_part @ angle.cos().T + sin_part @ angle.sin().T)
    result = torch.cat(out, dim=-1) if out else cos_part.new_zeros(cos_part.shape[0], 0)
    return result.reshape(*lead, n_dist)


# Offsets per block in the consecutive-distance path of cosine_sum: the cos/sin tables are [_COS_BLOCK, h].
_COS_BLOCK = 1024


def _is_integer_run(distances: torch.Tensor) -> bool:
    """True for consecutive integers d, d + 1, …: an integer dtype with every step equal to 1."""
    if distances.is_floating_point() or distances.shape[0] < 2:
        return False
    return bool((distances[1:] - distances[:-1] == 1).all())


def _cosine_sum_run(cos_part: torch.Tensor, sin_part: torch.Tensor, inv_freq: torch.Tensor, first: int,
                    count: int) -> torch.Tensor:
    """cosine_sum at the distances first … first + count − 1, one block of _COS_BLOCK offsets at a time."""
    n_blocks = -(-count // _COS_BLOCK)
    offsets = torch.arange(_COS_BLOCK, dtype=torch.float64)[:, None] * inv_freq[None, :]      # j·θ_n
    cos_j, sin_j = offsets.cos(), offsets.sin()                                            # [b, h]
    starts = (first + _COS_BLOCK * torch.arange(n_blocks, dtype=torch.float64))[:, None] * inv_freq[None, :]
    cos_0, sin_0 = starts.cos(), starts.sin()                                              # [n_blocks, h]
    # A cos(r₀θ + jθ) + S sin(r₀θ + jθ) = (A cos r₀θ + S sin r₀θ) cos jθ + (S cos r₀θ − A sin r₀θ) sin jθ
    a, s_ = cos_part[:, None, :], sin_part[:, None, :]
    a_rot = (a * cos_0 + s_ * sin_0).reshape(-1, inv_freq.shape[0])
    s_rot = (s_ * cos_0 - a * sin_0).reshape(-1, inv_freq.shape[0])
    out = (a_rot @ cos_j.T + s_rot @ sin_j.T).reshape(cos_part.shape[0], n_blocks * _COS_BLOCK)
    return out[:, :count]


def rope_score_by_distance(q: torch.Tensor, k: torch.Tensor, inv_freq: torch.Tensor, distances: torch.Tensor, *,
                           layout: str = "half") -> torch.Tensor:
    """The RoPE score of q and k, query at position m and key at m − r, for every r in ``distances``, in float64.

    Equal to rotating q by m·θ and k by (m − r)·θ with :func:`posbook.rope.apply_rope` and taking the dot product
    (unscaled: no 1/√d), for any m; computed from :func:`rope_plane_terms` and :func:`cosine_sum` without
    rotating anything, so a whole context of distances costs two small matrix products.

    Args:
        q, k: [..., head_dim] query and key (broadcastable), before rotation.
        inv_freq: [head_dim/2] frequencies θ_n (e.g. :func:`posbook.scaling.default_inv_freq`).
        distances: 1-D tensor of distances r.
        layout: ``"half"`` or ``"interleaved"``, as in :func:`posbook.rope.apply_rope`.
    Returns:
        float64 tensor [..., len(distances)].
    """
    amplitude, phase = rope_plane_terms(q, k, layout=layout)
    _checks.tensor("inv_freq", inv_freq, ndim=1, floating=True)
    if inv_freq.shape[0] != amplitude.shape[-1]:
        raise ValueError(f"inv_freq must hold head_dim/2 = {amplitude.shape[-1]} frequencies, got "
                         f"{tuple(inv_freq.shape)}")
    return cosine_sum(amplitude, phase, inv_freq, distances)


def fast_planes(context_length: int, inv_freq: torch.Tensor) -> torch.Tensor:
    r"""The planes that complete at least one full turn within a context: :math:`L\,\theta_n \ge 2\pi`.

    Their number is the one-turn split :math:`\lambda(L)`; for the default spectrum it is close to
    :math:`h\log_B(L/2\pi)`, capped at h. Chapter "The score is a sum of cosines" compares the two.

    Args:
        context_length: L, the number of distances 0 … L − 1 (an int ≥ 1).
        inv_freq: [n_planes] frequencies θ_n.
    Returns:
        bool tensor [n_planes], True for the fast planes.
    """
    _checks.number("context_length", context_length, integer=True, positive=True)
    _checks.tensor("inv_freq", inv_freq, ndim=1, floating=True)
    _checks.finite("inv_freq", inv_freq)
    return context_length * inv_freq.to(torch.float64) >= 2 * math.pi


def split_moments(amplitude: torch.Tensor, phase: torch.Tensor, inv_freq: torch.Tensor,
                  context_length: int) -> tuple[torch.Tensor, torch.Tensor]:
    r"""The one-turn-split normal approximation of s(r) over r uniform on [0, L):

    .. math::
        \mu_L \approx \sum_{\text{slow } n} C_n\cos\phi_n, \qquad
        \sigma_L^2 \approx \tfrac12 \sum_{\text{fast } n} C_n^2,

    with the fast planes of :func:`fast_planes`: slow planes are frozen at r = 0, fast ones are independent
    uniform phases. This is the approximation a widely read explanation boxes; :func:`score_moments` gives the
    exact values to compare it with.

    Returns:
        (mu, sigma2), float64 tensors of the batch shape.
    """
    amplitude, phase, inv_freq = _check_terms(amplitude, phase, inv_freq)
    fast = fast_planes(context_length, inv_freq)
    mean = (amplitude * phase.cos() * ~fast).sum(-1)
    variance = 0.5 * (amplitude.square() * fast).sum(-1)
    return mean, variance


def _window_mean_exp(omega: torch.Tensor, context_length: int, start: int) -> torch.Tensor:
    """Mean of exp(i r ω) over the integers r = start … start + L − 1 (a Dirichlet kernel), complex128."""
    # exp(i r ω) only depends on ω mod 2π for integer r: reducing first keeps the kernel away from its
    # removable singularities at 2πk ≠ 0.
    omega = torch.remainder(omega + math.pi, 2 * math.pi) - math.pi
    half = omega / 2
    s = torch.sin(half)
    zero = s == 0
    kernel = torch.where(zero, torch.ones_like(s),
                         torch.sin(context_length * half) / (context_length * torch.where(zero, torch.ones_like(s), s)))
    centre = (start + (context_length - 1) / 2) * omega
    return torch.polar(torch.ones_like(kernel), centre) * kernel


def _window_kernels(inv_freq: torch.Tensor, context_length: int, start: int):
    """M(θ_n), M(θ_n − θ_p) and M(θ_n + θ_p) for the window start … start + L − 1."""
    return (_window_mean_exp(inv_freq, context_length, start),
            _window_mean_exp(inv_freq[:, None] - inv_freq[None, :], context_length, start),
            _window_mean_exp(inv_freq[:, None] + inv_freq[None, :], context_length, start))


def score_term_moments(amplitude: torch.Tensor, phase: torch.Tensor, inv_freq: torch.Tensor, context_length: int,
                       *, start: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Exact mean and covariance of the terms :math:`\Psi_n(r) = C_n\cos(r\theta_n - \phi_n)` when r is uniform
    on the integers start … start + L − 1.

    Closed forms (no sampling): with :math:`M(\omega)` the window mean of :math:`e^{ir\omega}` (a Dirichlet
    kernel, :math:`|M(\omega)| \le 1/(L|\sin(\omega/2)|)`) and :math:`w_n = C_n e^{-i\phi_n}`,

    .. math::
        \mathbb E[\Psi_n] = \operatorname{Re}\big[w_n M(\theta_n)\big], \quad
        \mathbb E[\Psi_n\Psi_p] = \tfrac12\operatorname{Re}\big[w_n\bar w_p M(\theta_n-\theta_p)
        + w_n w_p M(\theta_n+\theta_p)\big].

    The diagonal of the covariance is each term's variance; the rest is what "independent terms" neglects.

    Args:
        amplitude, phase: [..., n_planes].
        inv_freq: [n_planes].
        context_length: L ≥ 1.
        start: first distance of the window (default 0).
    Returns:
        (mean [..., n_planes], covariance [..., n_planes, n_planes]), float64.
    """
    amplitude, phase, inv_freq = _check_terms(amplitude, phase, inv_freq)
    _checks.number("context_length", context_length, integer=True, positive=True)
    _checks.number("start", start, integer=True)
    amplitude, phase = torch.broadcast_tensors(amplitude, phase)
    m_single, m_minus, m_plus = _window_kernels(inv_freq, context_length, start)
    w = torch.complex(amplitude * phase.cos(), -amplitude * phase.sin())         # C_n e^{-iφ_n}
    mean = (w * m_single).real
    w_n, w_p = w[..., :, None], w[..., None, :]
    second = 0.5 * (w_n * w_p.conj() * m_minus + w_n * w_p * m_plus).real
    return mean, second - mean[..., :, None] * mean[..., None, :]


def score_moments(amplitude: torch.Tensor, phase: torch.Tensor, inv_freq: torch.Tensor, context_length: int, *,
                  start: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Exact mean and variance of :math:`s(r) = \sum_n C_n\cos(r\theta_n - \phi_n)` for r uniform on the integers
    start … start + L − 1.

    Equal to summing :func:`score_term_moments` (variance = every entry of the covariance), computed as two
    quadratic forms in :math:`w_n = C_n e^{-i\phi_n}` without building the covariance matrix:
    :math:`\mathbb E[s^2] = \tfrac12\operatorname{Re}[w^\top M_- \bar w + w^\top M_+ w]`.

    Returns:
        (mean, variance), float64 tensors of the batch shape.
    """
    amplitude, phase, inv_freq = _check_terms(amplitude, phase, inv_freq)
    _checks.number("context_length", context_length, integer=True, positive=True)
    _checks.number("start", start, integer=True)
    amplitude, phase = torch.broadcast_tensors(amplitude, phase)
    m_single, m_minus, m_plus = _window_kernels(inv_freq, context_length, start)
    w = torch.complex(amplitude * phase.cos(), -amplitude * phase.sin())
    mean = (w * m_single).real.sum(-1)
    # Σ_{n,p} w_n M[n, p] v_p = Σ_p (w @ M)_p v_p, with v = w̄ for M_− and v = w for M_+.
    second = 0.5 * (((w @ m_minus) * w.conj()).sum(-1) + ((w @ m_plus) * w).sum(-1)).real
    return mean, (second - mean.square()).clamp_min(0.0)


def normal_ks_distance(samples: torch.Tensor, mean: torch.Tensor | float, std: torch.Tensor | float, *,
                       presorted: bool = False) -> torch.Tensor:
    r"""Kolmogorov–Smirnov distance :math:`\sup_x |F_n(x) - \Phi((x-\mu)/\sigma)|` between the empirical
    distribution of ``samples`` (last dimension) and a normal distribution, in float64.

    Args:
        samples: [..., n] values.
        mean, std: numbers or tensors broadcastable to the batch shape [...]; std > 0.
        presorted: True if ``samples`` is already sorted along its last dimension (saves the sort when several
            normals are compared with one sample).
    Returns:
        float64 tensor of the batch shape.
    """
    _checks.tensor("samples", samples, ndim_min=1, floating=True)
    if samples.shape[-1] == 0:
        raise ValueError("samples must hold at least one value in its last dimension, got an empty one")
    _checks.finite("samples", samples)
    mean = torch.as_tensor(mean, dtype=torch.float64)
    std = torch.as_tensor(std, dtype=torch.float64)
    if not bool((std > 0).all()) or not bool(torch.isfinite(std).all()):
        raise ValueError(f"std must be finite and > 0, got {std}")
    if not isinstance(presorted, bool):
        raise TypeError(f"presorted must be a bool, got {type(presorted).__name__} {presorted!r}")
    x = samples.to(torch.float64)
    x = x if presorted else x.sort(dim=-1).values
    n = x.shape[-1]
    cdf = torch.special.ndtr((x - mean[..., None]) / std[..., None])
    i = torch.arange(1, n + 1, dtype=torch.float64)
    return torch.maximum(i / n - cdf, cdf - (i - 1) / n).amax(dim=-1)


def _check_scores(name: str, scores: Any, min_len: int) -> torch.Tensor:
    _checks.tensor(name, scores, ndim_min=1, floating=True)
    if scores.shape[-1] < min_len:
        raise ValueError(f"{name} must hold at least {min_len} distances in its last dimension, got "
                         f"{tuple(scores.shape)}")
    _checks.finite(name, scores)
    return scores


def position_inversion_rate(scores: torch.Tensor) -> torch.Tensor:
    r"""Position inversion: :math:`P[s(m_1) < s(m_2)]` for :math:`m_1` uniform on the near half of the distances
    and :math:`m_2` uniform on the far half, independently (ties count ½).

    ``scores[..., r]`` is the score at distance r = 0 … L − 1; the near half is r < L // 2. A score that decays with
    distance gives 0; a score that carries no information about distance gives ½. Exact over all pairs (sort and
    count, not sampling).

    Returns:
        float64 tensor of the batch shape.
    """
    scores = _check_scores("scores", scores, 2).to(torch.float64)
    split = scores.shape[-1] // 2
    near = scores[..., :split].sort(dim=-1).values.contiguous()
    far = scores[..., split:].contiguous()
    below = torch.searchsorted(near, far, right=False)          # near scores strictly below each far score
    at_or_below = torch.searchsorted(near, far, right=True)
    wins = (below + at_or_below).to(torch.float64).sum(dim=-1) / 2
    return wins / (near.shape[-1] * far.shape[-1])


def token_inversion_rate(scores_1: torch.Tensor, scores_2: torch.Tensor) -> torch.Tensor:
    r"""Token inversion: the fraction of distances r ≥ 1 at which two keys' scores are in the opposite order to
    their order at r = 0 (ties count ½).

    ``scores_1[..., r]`` and ``scores_2[..., r]`` are the same query's scores with key 1 and key 2 at distance r.
    Rows whose two scores tie at r = 0 have no order to invert and give NaN.

    Returns:
        float64 tensor of the batch shape.
    """
    scores_1 = _check_scores("scores_1", scores_1, 2).to(torch.float64)
    scores_2 = _check_scores("scores_2", scores_2, 2).to(torch.float64)
    if scores_1.shape != scores_2.shape:
        raise ValueError(f"scores_1 and scores_2 must have one shape, got {tuple(scores_1.shape)} and "
                         f"{tuple(scores_2.shape)}")
    order_0 = torch.sign(scores_1[..., :1] - scores_2[..., :1])
    order = torch.sign(scores_1[..., 1:] - scores_2[..., 1:])
    rate = ((order == -order_0).to(torch.float64) + 0.5 * (order == 0)).mean(dim=-1)
    return torch.where(order_0[..., 0] == 0, torch.nan, rate)


def position_aliasing(scores: torch.Tensor, dtype: torch.dtype = torch.bfloat16) -> tuple[torch.Tensor, torch.Tensor]:
    """Position aliasing: distances whose score, rounded to ``dtype``, equals the rounded score at another distance.

    Two such distances are indistinguishable to everything downstream of a logit stored in ``dtype`` (softmax sees
    the same number). Exact: the rounded scores are sorted and equal runs counted, or, for long rows in a 16-bit
    dtype, every bit pattern is counted (a histogram of 65,536 bins per row).

    Args:
        scores: [..., L] scores at L distances (any float dtype; rounded once to ``dtype``).
        dtype: the floating-point dtype the logits are stored in (bfloat16 by default).
    Returns:
        A tuple of the fraction of the L distances that have at least one alias (float64) and the number of
        unordered aliasing pairs (int64), each of the batch shape.
    """
    scores = _check_scores("scores", scores, 1)
    _checks.dtype("dtype", dtype)
    if dtype.itemsize == 2 and scores.shape[-1] >= 4096:      # long rows: a histogram beats a sort
        return _aliasing_by_histogram(scores, dtype)
    rounded = scores.to(dtype).to(torch.float64).sort(dim=-1).values
    same = rounded[..., 1:] == rounded[..., :-1]
    aliased = torch.zeros(rounded.shape, dtype=torch.bool, device=rounded.device)
    aliased[..., 1:] |= same
    aliased[..., :-1] |= same
    # In sorted order, element j has (j − first index of its run) equal elements before it; these sum to the
    # number of unordered equal pairs, Σ c(c − 1)/2 over runs of length c.
    index = torch.arange(rounded.shape[-1], device=rounded.device).expand(rounded.shape)
    new_run = torch.ones(rounded.shape, dtype=torch.bool, device=rounded.device)
    new_run[..., 1:] = ~same
    run_start = torch.where(new_run, index, torch.zeros_like(index)).cummax(dim=-1).values
    return aliased.to(torch.float64).mean(dim=-1), (index - run_start).sum(dim=-1)


def _aliasing_by_histogram(scores: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """position_aliasing for a 16-bit dtype: count each bit pattern per row instead of sorting."""
    lead, length = scores.shape[:-1], scores.shape[-1]
    bits = scores.to(dtype).view(torch.int16).to(torch.int64).reshape(-1, length) & 0xFFFF
    bits = torch.where(bits == 0x8000, torch.zeros_like(bits), bits)        # −0 equals +0 as a number
    rows = bits.shape[0]
    counts = torch.bincount((bits + (torch.arange(rows, device=bits.device)[:, None] << 16)).reshape(-1),
                            minlength=rows << 16).reshape(rows, 1 << 16)
    aliased = (counts * (counts >= 2)).sum(-1)
    pairs = (counts * (counts - 1)).sum(-1) // 2
    return (aliased.to(torch.float64) / length).reshape(lead), pairs.reshape(lead)


def token_aliasing_rate(scores_1: torch.Tensor, scores_2: torch.Tensor,
                        dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """Token aliasing: the fraction of distances at which two keys' scores round to the same ``dtype`` value.

    At those distances a query cannot tell the two keys apart, however different their content.

    Returns:
        float64 tensor of the batch shape.
    """
    scores_1 = _check_scores("scores_1", scores_1, 1)
    scores_2 = _check_scores("scores_2", scores_2, 1)
    if scores_1.shape != scores_2.shape:
        raise ValueError(f"scores_1 and scores_2 must have one shape, got {tuple(scores_1.shape)} and "
                         f"{tuple(scores_2.shape)}")
    _checks.dtype("dtype", dtype)
    return (scores_1.to(dtype) == scores_2.to(dtype)).to(torch.float64).mean(dim=-1)


# ----------------------------------------------------------------------------------------------------------------
# Hybrid layouts (chapter "iRoPE and hybrids: local RoPE, global NoPE"): where attention goes, and how far back
# the loss still listens.
# ----------------------------------------------------------------------------------------------------------------


def attention_mass(weights: torch.Tensor, regions: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Attention mass per region of the keys, averaged over every leading dimension (batch, heads, queries).

    This is the bookkeeping of the needle-in-a-haystack probe of Yang et al. (2025): the keys are split into
    regions (e.g. "begin", "needle", "context", "end"), each query's weights are summed over each region, and the
    sums are averaged. Chapter "iRoPE and hybrids" uses it.

    Args:
        weights: [..., Tk] attention weights (each row a distribution over the Tk keys).
        regions: name → bool tensor [Tk], True for the keys of that region. Regions may overlap or leave keys out.
    Returns:
        name → 0-d float64 tensor, the mean mass on that region.
    """
    _checks.tensor("weights", weights, ndim_min=1, floating=True)
    if not isinstance(regions, dict) or not regions:
        raise TypeError(f"regions must be a non-empty dict of name -> bool tensor, got {type(regions).__name__}")
    tk = weights.shape[-1]
    out = {}
    for name, region in regions.items():
        _checks.tensor(f"regions[{name!r}]", region, ndim=1)
        if region.dtype != torch.bool:
            raise TypeError(f"regions[{name!r}] must be a bool tensor, got dtype {region.dtype}")
        if region.shape[0] != tk:
            raise ValueError(f"regions[{name!r}] must have {tk} entries (one per key), got {region.shape[0]}")
        out[name] = (weights.to(torch.float64) * region.to(weights.device, torch.float64)).sum(dim=-1).mean()
    return out


def gradient_influence(model: torch.nn.Module, embedding: torch.nn.Module, idx: torch.Tensor,
                       targets: torch.Tensor, *, position: int = -1) -> torch.Tensor:
    r"""The gradient-influence profile :math:`G(d) = \mathbb{E}_x\,\lVert \partial s(x) / \partial e_{t-d} \rVert_2`.

    s(x) is the log-probability the model gives the true next token at position t (its loss, up to the sign, so
    the norm is the loss's), and :math:`e_{t-d}` the input embedding of the token d positions earlier; the
    expectation is the mean over the batch. G(d) says how strongly the prediction at t still depends on the token
    at distance d (Qiao et al. 2026 measure it on long documents). A forward hook on ``embedding`` captures its
    output, so the model needs no special entry point; sequences in a batch do not interact, so one backward pass
    gives every sequence's gradient. Chapter "iRoPE and hybrids" uses it.

    Args:
        model: maps idx [batch, T] to logits [batch, T, vocab].
        embedding: the module inside ``model`` whose output [batch, T, dim] is the input embedding.
        idx: [batch, T] token ids.
        targets: [batch, T] next-token ids (only column t is used).
        position: t; negative values count from the end (default: the last position).
    Returns:
        float64 tensor [t + 1], entry d = G(d) for d = 0 … t.
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(embedding, torch.nn.Module):
        raise TypeError(f"embedding must be a torch.nn.Module, got {type(embedding).__name__}")
    _checks.tensor("idx", idx, ndim=2)
    _checks.tensor("targets", targets, ndim=2)
    if targets.shape != idx.shape:
        raise ValueError(f"targets must have the shape of idx {tuple(idx.shape)}, got {tuple(targets.shape)}")
    _checks.number("position", position, integer=True)
    t_len = idx.shape[1]
    t = position + t_len if position < 0 else position
    if not 0 <= t < t_len:
        raise ValueError(f"position must be in [-{t_len}, {t_len - 1}] for sequences of length {t_len}, got {position}")
    captured: list[torch.Tensor] = []

    def hook(module, inputs, output):
        if not isinstance(output, torch.Tensor) or output.ndim != 3:
            raise ValueError(f"embedding must return a [batch, T, dim] tensor, got {_checks._show(output)}")
        output.retain_grad()
        captured.append(output)

    handle = embedding.register_forward_hook(hook)
    try:
        with torch.enable_grad():
            logits = model(idx)
            if not captured:
                raise ValueError("embedding was not called by model(idx); pass the module that embeds the tokens")
            log_probs = torch.log_softmax(logits[:, t].float(), dim=-1)
            score = log_probs.gather(-1, targets[:, t, None]).sum()
            score.backward()
    finally:
        handle.remove()
    grad = captured[0].grad[:, : t + 1].to(torch.float64)          # [batch, t+1, dim]
    norms = grad.norm(dim=-1).mean(dim=0)                           # per source position j
    return norms.flip(0)                                            # index d = t − j


# ----------------------------------------------------------------------------------------------------------------
# Entropy collapse (chapter "Entropy collapse").
# ----------------------------------------------------------------------------------------------------------------


def logit_rows_with_norm(n: int, norms: torch.Tensor | list[float], count: int, *,
                         generator: torch.Generator | None = None) -> torch.Tensor:
    """Random rows of ``n`` logits in uniformly random directions, centred and scaled to each given norm.

    Softmax ignores a common shift, so only the centred part of a row matters; the rows returned have mean zero
    and centred 2-norm exactly ``norms[i]`` (float64). Used to hold sampled rows against
    :func:`posbook.stability.entropy_lower_bound`.

    Args:
        n: keys per row (at least 2).
        norms: 1-D sequence of non-negative norms R.
        count: rows drawn per norm.
        generator: optional torch.Generator for reproducibility.
    Returns:
        float64 tensor [len(norms), count, n].
    """
    _checks.number("n", n, integer=True, min_value=2)
    _checks.number("count", count, integer=True, positive=True)
    radii = torch.as_tensor(norms, dtype=torch.float64)
    if radii.ndim != 1 or radii.numel() == 0:
        raise ValueError(f"norms must be a non-empty 1-D sequence, got shape {tuple(radii.shape)}")
    if not bool(torch.isfinite(radii).all()) or bool((radii < 0).any()):
        raise ValueError(f"norms must be finite and >= 0, got {norms!r}")
    z = torch.randn(radii.numel(), count, n, generator=generator, dtype=torch.float64)
    z = z - z.mean(dim=-1, keepdim=True)
    z = z / z.norm(dim=-1, keepdim=True)
    return z * radii[:, None, None]


def attention_rows(model: torch.nn.Module, idx: torch.Tensor) -> dict[str, torch.Tensor]:
    r"""Entropy and centred logit norm of every attention row of a :class:`posbook.experiments.model.GPT`.

    Runs ``model(idx)`` once without gradients inside :meth:`~posbook.experiments.model.GPT.recording_attention`
    and recomputes each layer's weights with :func:`posbook.attention.attention` (reference path), so the rows are
    those of the real forward pass, temperature included. For each row (layer, sequence, head, query) it returns
    the Shannon entropy of the weights (nats) and the centred 2-norm of the logits over the keys the query can
    see, :math:`\lVert z - \bar z\rVert_2`. For plain softmax layers (no bias, softcap, sinks or extra scales)
    the logits are recomputed from q and k in float64, so keys whose float32 weight underflowed still count;
    otherwise :math:`z_j = \log p_j + \text{const}` is used, which softmax's shift invariance makes exact, and a
    row with an underflowed weight gets NaN.

    Args:
        model: a posbook.experiments GPT.
        idx: [batch, T] token ids.
    Returns:
        A dict with "entropy" and "logit_norm", each float64 of shape [n_layer, batch, n_head, T].
    """
    entropies: list[torch.Tensor] = []
    norms: list[torch.Tensor] = []
    with torch.no_grad():
        for weights, (q, k, _, call) in _recorded_weights(model, idx):
            w = weights.to(torch.float64)
            logs = torch.where(w > 0, w.log(), torch.zeros_like(w))
            entropies.append(-(w * logs).sum(dim=-1))
            tq, tk = w.shape[-2], w.shape[-1]
            visible = torch.ones(tq, tk, dtype=torch.bool, device=w.device)
            if call["causal"]:
                visible = visible.tril(tk - tq)
            if call["mask"] is not None:
                visible = visible & call["mask"]
            count = visible.sum(dim=-1)
            plain = all(call[name] is None for name in ("query_scale", "bias", "softcap", "sink"))
            if plain:
                # Recompute the logits in float64 so that keys whose weight underflowed still count.
                qd, kd = q.to(torch.float64), k.to(torch.float64)
                kd = kd.repeat_interleave(qd.shape[1] // kd.shape[1], dim=1)
                z = qd @ kd.transpose(-2, -1) / math.sqrt(qd.shape[-1])
            else:
                z = logs
                visible = visible & (w > 0)
            z = torch.where(visible, z, torch.zeros_like(z))
            mean = z.sum(dim=-1, keepdim=True) / visible.sum(dim=-1, keepdim=True)
            centred = torch.where(visible, z - mean, torch.zeros_like(z))
            norm = centred.norm(dim=-1)
            if not plain:
                lost = visible.sum(dim=-1) < count
                norm = torch.where(lost, torch.full_like(norm, float("nan")), norm)
            norms.append(norm)
    return {"entropy": torch.stack(entropies), "logit_norm": torch.stack(norms)}


# ----------------------------------------------------------------------------------------------------------------
# Comparing attention patterns across models (chapter "Length generalisation"): Kazemnejad et al. (2023) measure
# how alike two position schemes' heads attend with the Jensen–Shannon divergence.
# ----------------------------------------------------------------------------------------------------------------


def _check_distributions(p: Any, q: Any) -> tuple[torch.Tensor, torch.Tensor]:
    _checks.tensor("p", p, ndim_min=1, floating=True)
    _checks.tensor("q", q, ndim_min=1, floating=True)
    try:
        torch.broadcast_shapes(p.shape, q.shape)
    except RuntimeError:
        raise ValueError(f"p and q must have broadcastable shapes, got {tuple(p.shape)} and {tuple(q.shape)}") from None
    if (p < 0).any() or (q < 0).any():
        raise ValueError("p and q must be probability distributions (no negative entries)")
    return p.to(torch.float64), q.to(torch.float64)


def kl_divergence(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    r""":math:`\mathrm{KL}(p\,\|\,q) = \sum_i p_i \log(p_i / q_i)` in nats over the last dimension (0·log 0 = 0;
    infinite where q_i = 0 < p_i). p and q broadcast against each other. float64."""
    p, q = _check_distributions(p, q)
    return (torch.special.xlogy(p, p) - torch.special.xlogy(p, q)).sum(-1)


def js_divergence(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    r"""The Jensen–Shannon divergence :math:`\tfrac12\mathrm{KL}(p\|m) + \tfrac12\mathrm{KL}(q\|m)`,
    :math:`m = (p + q)/2`, in nats over the last dimension: symmetric, 0 only for p = q, at most ln 2 (for
    distributions with disjoint support), and finite whatever zeros p and q have. float64."""
    p, q = _check_distributions(p, q)
    m = (p + q) / 2
    return (kl_divergence(p, m) + kl_divergence(q, m)) / 2


def head_pair_divergence(weights_a: torch.Tensor, weights_b: torch.Tensor) -> torch.Tensor:
    r"""Mean Jensen–Shannon divergence between every head of one layer of model A and every head of the same
    layer of model B, on the same inputs: entry [i, j] is :math:`\frac1T\sum_t D_{JS}(P^{(i)}_t\,\|\,Q^{(j)}_t)`
    averaged over the batch as well. Kazemnejad et al. (2023, Eq. 2) take the minimum over all pairs as the
    layer's distance between the two models.

    Args:
        weights_a: [batch, Ha, T, T] attention weights of model A's layer (rows are distributions over keys).
        weights_b: [batch, Hb, T, T] model B's, same batch and T.
    Returns:
        [Ha, Hb] float64.
    """
    _checks.tensor("weights_a", weights_a, ndim=4, floating=True)
    _checks.tensor("weights_b", weights_b, ndim=4, floating=True)
    if weights_a.shape[0] != weights_b.shape[0] or weights_a.shape[2:] != weights_b.shape[2:]:
        raise ValueError(f"weights_a and weights_b must share batch and [T, T]; got {tuple(weights_a.shape)} and "
                         f"{tuple(weights_b.shape)}")
    return js_divergence(weights_a[:, :, None], weights_b[:, None, :]).mean(dim=(0, -1))


def attention_weights(model: torch.nn.Module, idx: torch.Tensor) -> torch.Tensor:
    r"""The attention weights of every layer of a :class:`posbook.experiments.model.GPT` on one batch.

    Runs ``model(idx)`` once without gradients inside
    :meth:`~posbook.experiments.model.GPT.recording_attention` and recomputes each layer's weights with
    :func:`posbook.attention.attention` (reference path), as :func:`attention_rows` does, so they are the weights
    of the real forward pass (biases, masks and temperature included). Rows that a causal mask hides are 0.

    Args:
        model: a posbook.experiments GPT.
        idx: [batch, T] token ids.
    Returns:
        float64 tensor [n_layer, batch, n_head, T, T]; entry [l, b, h, t, s] is how much query t attends to key s.
    """
    return torch.stack([weights.to(torch.float64) for weights, _ in _recorded_weights(model, idx)])


def _recorded_weights(model: torch.nn.Module, idx: torch.Tensor) -> list[tuple[torch.Tensor, tuple]]:
    """One eval-mode forward of a GPT with its attention recorded: per layer, the weights recomputed by the
    reference attention path and the recorded ``(q, k, v, call)``."""
    from .attention import attention as reference_attention
    from .experiments.model import GPT

    if not isinstance(model, GPT):
        raise TypeError(f"model must be a posbook.experiments GPT, got {type(model).__name__}")
    _checks.tensor("idx", idx, ndim=2)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), model.recording_attention() as calls:
            model(idx)
            return [(reference_attention(q, k, v, return_weights=True, impl="reference", **call)[1], (q, k, v, call))
                    for q, k, v, call in calls]
    finally:
        model.train(was_training)
