"""The RoPE score as a sum of cosines, and what its statistics say about distance.

For one query q and one key k the RoPE score is a function of the distance r alone,
``s(r) = Σ_n C_n cos(r θ_n − φ_n)``, and chapter "The score is a sum of cosines" treats r as a random variable:
uniform on a window of L consecutive distances. Everything here is exact for that model (closed forms checked
against enumeration in tests/test_score.py), so the chapter can hold the usual approximations — a hard split
into "fast" and "slow" planes, independent terms, a normal distribution — against the exact numbers. Inversion
rates ask how often the score orders distances or keys the wrong way round; :mod:`posbook.precision` asks the same
of the score once it is rounded to a low-precision dtype.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from . import _checks
from .rope import LAYOUTS, plane_slices


def rope_decay_bound(distances: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    r"""RoFormer's long-term decay quantity (Su et al., Eq. 35–37): :math:`\frac{2}{d}\sum_{j=1}^{d/2} |S_j(r)|`.

    :math:`S_j(r) = \sum_{k<j} e^{i r \theta_k}` are the partial sums of the rotating phasors at relative distance
    r. By Abel summation, for any plane weights :math:`h_i` (with :math:`h_{d/2} = 0`),
    :math:`|\sum_i h_i e^{i r \theta_i}| \le \max_i |h_{i+1} - h_i| \sum_j |S_j(r)|`, so this mean is a bound per
    unit of :math:`\max_i |h_{i+1} - h_i|`. Computed in float64. Chapter "RoPE from first principles" plots it.

    Args:
        distances: 1-D tensor of relative distances r (integers or finite reals).
        inv_freq: 1-D tensor of the d/2 frequencies θ_i.
    Returns:
        float64 tensor, one value per distance.
    """
    _checks.positions("distances", distances, ndim=1)
    _checks.tensor("inv_freq", inv_freq, ndim=1, floating=True)
    _checks.finite("inv_freq", inv_freq)
    phase = distances.to(torch.float64)[:, None] * inv_freq.to(torch.float64)[None, :]
    partial_sums = torch.polar(torch.ones_like(phase), phase).cumsum(dim=-1)      # S_1 … S_{d/2}
    return partial_sums.abs().mean(dim=-1)


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
        q, k: [..., head_dim] finite query and key (broadcastable against each other), before rotation.
        layout: which dimensions form plane n: ``"half"`` (n, n + head_dim/2) or ``"interleaved"`` (2n, 2n + 1),
            as in :func:`posbook.rope.apply_rope`.
    Returns:
        (amplitude, phase), float64 tensors [..., head_dim/2]; phase in (−π, π].
    """
    _checks.tensor("q", q, ndim_min=1, floating=True)
    _checks.finite("q", q)
    _checks.tensor("k", k, ndim_min=1, floating=True)
    _checks.finite("k", k)
    _checks.choice("layout", layout, LAYOUTS)
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must have the same last dimension (head_dim), got {tuple(q.shape)} and "
                         f"{tuple(k.shape)}")
    if q.shape[-1] % 2 or q.shape[-1] == 0:
        raise ValueError(f"q.shape[-1] (head_dim) must be even and > 0, got {q.shape[-1]}")
    q, k = q.to(torch.float64), k.to(torch.float64)
    first, second = plane_slices(layout, q.shape[-1])
    q1, q2, k1, k2 = q[..., first], q[..., second], k[..., first], k[..., second]
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
        distances: 1-D tensor of distances r (integers or finite reals).
    Returns:
        float64 tensor [..., len(distances)].
    """
    amplitude, phase, inv_freq = _check_terms(amplitude, phase, inv_freq)
    _checks.positions("distances", distances, ndim=1)
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
        start: first distance of the window (default 0); any integer (negative: keys after the query).
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
    start … start + L − 1 (start any integer, as in :func:`score_term_moments`).

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
        mean, std: finite numbers or floating tensors broadcastable to the batch shape [...]; std > 0.
        presorted: True if ``samples`` is already sorted along its last dimension (saves the sort when several
            normals are compared with one sample).
    Returns:
        float64 tensor of the batch shape.
    """
    _checks.tensor("samples", samples, ndim_min=1, floating=True)
    if samples.shape[-1] == 0:
        raise ValueError("samples must hold at least one value in its last dimension, got an empty one")
    _checks.finite("samples", samples)
    mean = _checks.real_or_tensor("mean", mean)
    std = _checks.real_or_tensor("std", std, positive=True)
    for name, value in (("mean", mean), ("std", std)):
        _checks.broadcastable_to(name, value, tuple(samples.shape[:-1]))
    _checks.flag("presorted", presorted)
    x = samples.to(torch.float64)
    x = x if presorted else x.sort(dim=-1).values
    n = x.shape[-1]
    cdf = torch.special.ndtr((x - mean[..., None]) / std[..., None])
    i = torch.arange(1, n + 1, dtype=torch.float64)
    return torch.maximum(i / n - cdf, cdf - (i - 1) / n).amax(dim=-1)


def position_inversion_rate(scores: torch.Tensor) -> torch.Tensor:
    r"""Position inversion: :math:`P[s(m_1) < s(m_2)]` for :math:`m_1` uniform on the near half of the distances
    and :math:`m_2` uniform on the far half, independently (ties count ½).

    ``scores[..., r]`` is the score at distance r = 0 … L − 1; the near half is r < L // 2. A score that decays with
    distance gives 0; a score that carries no information about distance gives ½. Exact over all pairs (sort and
    count, not sampling).

    Returns:
        float64 tensor of the batch shape.
    """
    scores = _checks.scores("scores", scores, 2).to(torch.float64)
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
    scores_1 = _checks.scores("scores_1", scores_1, 2).to(torch.float64)
    scores_2 = _checks.scores("scores_2", scores_2, 2).to(torch.float64)
    if scores_1.shape != scores_2.shape:
        raise ValueError(f"scores_1 and scores_2 must have one shape, got {tuple(scores_1.shape)} and "
                         f"{tuple(scores_2.shape)}")
    order_0 = torch.sign(scores_1[..., :1] - scores_2[..., :1])
    order = torch.sign(scores_1[..., 1:] - scores_2[..., 1:])
    rate = ((order == -order_0).to(torch.float64) + 0.5 * (order == 0)).mean(dim=-1)
    return torch.where(order_0[..., 0] == 0, torch.nan, rate)
