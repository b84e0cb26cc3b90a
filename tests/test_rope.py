"""posbook.rope: relative invariance, norms, layouts, partial RoPE, dtypes, Hugging Face parity, bad input."""

from __future__ import annotations

import math
import platform

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import posbook as pb

F64 = torch.float64


def rotate(x, positions, inv_freq, layout="half", dtype=F64):
    cos, sin = pb.rope_cos_sin(torch.as_tensor(positions), inv_freq, layout=layout, dtype=dtype)
    return pb.apply_rope(x, cos, sin, layout=layout)


@settings(max_examples=60, deadline=None)
@given(m=st.integers(0, 5000), shift=st.integers(0, 5000), delta=st.integers(-64, 64),
       half_dim=st.integers(1, 32), layout=st.sampled_from(pb.LAYOUTS), seed=st.integers(0, 2**16))
def test_score_depends_only_on_relative_position(m, shift, delta, half_dim, layout, seed):
    g = torch.Generator().manual_seed(seed)
    d = 2 * half_dim
    q, k = torch.randn(1, d, generator=g, dtype=F64), torch.randn(1, d, generator=g, dtype=F64)
    inv_freq = pb.default_inv_freq(d, 10_000.0, dtype=F64)
    n = m + delta
    if n < 0:
        n, m = 0, -delta
    s1 = (rotate(q, [m], inv_freq, layout) * rotate(k, [n], inv_freq, layout)).sum()
    s2 = (rotate(q, [m + shift], inv_freq, layout) * rotate(k, [n + shift], inv_freq, layout)).sum()
    scale = (q.abs().sum() * k.abs().sum()).item()
    # angle rounding grows with the absolute position (see the pilot chapter): allow 64 ulps of the largest angle.
    tol = 64 * math.ulp(float(max(m, n) + shift + 1)) * scale + 1e-13 * scale
    assert abs(s1 - s2).item() <= tol


@settings(max_examples=40, deadline=None)
@given(d_half=st.integers(1, 40), rot_half=st.integers(1, 40), layout=st.sampled_from(pb.LAYOUTS),
       seed=st.integers(0, 2**16))
def test_norm_preserved_and_tail_untouched(d_half, rot_half, layout, seed):
    rot_half = min(rot_half, d_half)
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(3, 7, 2 * d_half, generator=g, dtype=F64)
    inv_freq = pb.default_inv_freq(2 * rot_half, 500.0, dtype=F64)
    y = rotate(x, torch.arange(7) * 13, inv_freq, layout)
    torch.testing.assert_close(y.norm(dim=-1), x.norm(dim=-1), rtol=1e-13, atol=0)
    assert torch.equal(y[..., 2 * rot_half:], x[..., 2 * rot_half:])


def test_position_zero_is_identity():
    x = torch.randn(2, 1, 16, dtype=F64)
    for layout in pb.LAYOUTS:
        assert torch.equal(rotate(x, [0], pb.default_inv_freq(16, dtype=F64), layout), x)


def test_interleaved_matches_explicit_block_diagonal_matrix():
    d, pos = 10, 37
    inv_freq = pb.default_inv_freq(d, 100.0, dtype=F64)
    blocks = [torch.tensor([[math.cos(pos * t), -math.sin(pos * t)], [math.sin(pos * t), math.cos(pos * t)]],
                           dtype=F64) for t in inv_freq.tolist()]
    x = torch.randn(1, d, dtype=F64)
    torch.testing.assert_close(rotate(x, [pos], inv_freq, "interleaved")[0], torch.block_diag(*blocks) @ x[0],
                               rtol=0, atol=1e-14)


@settings(max_examples=40, deadline=None)
@given(n_heads=st.integers(1, 4), half_dim=st.integers(1, 12), rot_frac=st.sampled_from([0.25, 0.5, 1.0]),
       seed=st.integers(0, 2**16))
def test_layout_permutation_roundtrip_and_equivalence(n_heads, half_dim, rot_frac, seed):
    g = torch.Generator().manual_seed(seed)
    head_dim = 2 * half_dim
    rotary_dim = max(2, 2 * int(half_dim * rot_frac))
    w = torch.randn(n_heads * head_dim, 5, generator=g, dtype=F64)
    kw = {"dim": 0, "head_dim": head_dim, "rotary_dim": rotary_dim}
    assert torch.equal(pb.half_to_interleaved(pb.interleaved_to_half(w, **kw), **kw), w)
    assert torch.equal(pb.interleaved_to_half(pb.half_to_interleaved(w, **kw), **kw), w)
    # per head: RoPE_half(P x) == P RoPE_interleaved(x)
    x = torch.randn(n_heads, 6, head_dim, generator=g, dtype=F64)
    inv_freq = pb.default_inv_freq(rotary_dim, 1000.0, dtype=F64)
    lhs = rotate(pb.interleaved_to_half(x, rotary_dim=rotary_dim), torch.arange(6) * 5, inv_freq, "half")
    rhs = pb.interleaved_to_half(rotate(x, torch.arange(6) * 5, inv_freq, "interleaved"), rotary_dim=rotary_dim)
    assert torch.equal(lhs, rhs)


def test_interleaved_to_half_small_example():
    assert pb.interleaved_to_half(torch.arange(8)).tolist() == [0, 2, 4, 6, 1, 3, 5, 7]
    assert pb.interleaved_to_half(torch.arange(8), rotary_dim=4).tolist() == [0, 2, 1, 3, 4, 5, 6, 7]
    assert pb.interleaved_to_half(torch.arange(8), head_dim=4).tolist() == [0, 2, 1, 3, 4, 6, 5, 7]


def test_matches_hugging_face_apply_rotary_pos_emb():
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    torch.manual_seed(0)
    q, k = torch.randn(2, 4, 33, 64), torch.randn(2, 4, 33, 64)
    cos, sin = pb.rope_cos_sin(torch.arange(33), pb.default_inv_freq(64, 500_000.0))
    q_hf, k_hf = apply_rotary_pos_emb(q, k, cos[None], sin[None])
    torch.testing.assert_close(pb.apply_rope(q, cos, sin), q_hf, rtol=0, atol=1e-6)
    torch.testing.assert_close(pb.apply_rope(k, cos, sin), k_hf, rtol=0, atol=1e-6)


def test_attention_factor_scales_cos_and_sin():
    inv_freq = pb.default_inv_freq(8)
    c1, s1 = pb.rope_cos_sin(torch.arange(4), inv_freq)
    c2, s2 = pb.rope_cos_sin(torch.arange(4), inv_freq, attention_factor=1.5)
    torch.testing.assert_close(c2, 1.5 * c1)
    torch.testing.assert_close(s2, 1.5 * s1)


def test_angles_stay_float32_under_autocast():
    positions, inv_freq = torch.arange(5000), pb.default_inv_freq(64)
    plain = pb.rope_cos_sin(positions, inv_freq)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        under = pb.rope_cos_sin(positions, inv_freq)
    assert under[0].dtype == torch.float32
    assert torch.equal(under[0], plain[0]) and torch.equal(under[1], plain[1])


def test_bfloat16_angles_merge_neighbouring_positions():
    cos, sin = pb.rope_cos_sin(torch.arange(1024), pb.default_inv_freq(32), dtype=torch.bfloat16)
    distinct = torch.unique(torch.cat((cos, sin), -1).float(), dim=0).shape[0]
    assert distinct == 257 + 128 + 128       # exact up to 256, then every 2nd, then every 4th position


def test_result_has_input_dtype():
    cos, sin = pb.rope_cos_sin(torch.arange(3), pb.default_inv_freq(8))
    y = pb.apply_rope(torch.randn(3, 8, dtype=torch.bfloat16), cos, sin)
    assert y.dtype == torch.bfloat16


@pytest.mark.parametrize("layout", pb.LAYOUTS)
def test_rotate_computes_in_float32_and_rounds_once(layout):
    """rope.rotate, the unchecked rotation of the experiment model, DiffAttention and posbook.theory: float32 and
    float64 inputs get apply_rope's bits; bfloat16 and float16 inputs are rotated in float32 and rounded once."""
    from posbook.rope import rotate

    cos, sin = pb.rope_cos_sin(torch.arange(7) * 100, pb.default_inv_freq(8), layout=layout)
    x = torch.randn(2, 7, 12, generator=torch.Generator().manual_seed(0))
    for dtype in (torch.float32, torch.float64):
        want = pb.apply_rope(x.to(dtype), cos, sin, layout=layout)
        assert torch.equal(rotate(x.to(dtype), cos, sin, layout=layout), want)
    for dtype in (torch.bfloat16, torch.float16):
        low = x.to(dtype)
        got = rotate(low, cos, sin, layout=layout)
        assert got.dtype == dtype
        assert torch.equal(got, pb.apply_rope(low.float(), cos, sin, layout=layout).to(dtype))


def test_gradients_flow():
    x = torch.randn(2, 5, 8, dtype=F64, requires_grad=True)
    cos, sin = pb.rope_cos_sin(torch.arange(5), pb.default_inv_freq(8, dtype=F64), dtype=F64)
    assert torch.autograd.gradcheck(lambda t: pb.apply_rope(t, cos, sin), (x,))


# --- the blocked CPU fast path (rope_cpu.rotate_blocked) must return the formula's bits ------------------------------

X86 = platform.machine().lower() in ("x86_64", "amd64")
INT_OF = {torch.float64: torch.int64, torch.float32: torch.int32, torch.bfloat16: torch.int16,
          torch.float16: torch.int16}


def assert_same_bits(got, want):
    """Bit for bit, signed zeros included (torch.equal calls -0.0 and 0.0 equal). NaNs must sit at the same places;
    their payload bits may differ (see rope_cpu.rotate_blocked)."""
    assert got.shape == want.shape and got.dtype == want.dtype
    nan = want.isnan()
    assert torch.equal(got.isnan(), nan)
    bits_got, bits_want = got.contiguous().view(INT_OF[got.dtype]), want.contiguous().view(INT_OF[want.dtype])
    assert torch.equal(bits_got[~nan], bits_want[~nan])


@pytest.fixture(params=[1, 2], ids=["1-thread", "2-threads"])
def threads(request):
    """Run under 1 and 2 torch threads: with more than one the blocks are shared out to helper threads."""
    before = torch.get_num_threads()
    torch.set_num_threads(request.param)
    yield request.param
    torch.set_num_threads(before)


def make_case(shape, head_dim, rotary_dim, layout, dtype, seed=0, specials=False):
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(*shape, head_dim, generator=gen) * 3).to(dtype)
    if specials:  # infinities, NaNs, signed zeros and huge values somewhere in the rotated part
        flat = x.view(-1)
        picks = torch.randint(0, flat.numel(), (6, 40), generator=gen)
        for idx, value in zip(picks, (math.inf, -math.inf, math.nan, -0.0, 0.0, torch.finfo(dtype).max)):
            flat[idx] = value
    t = shape[-1]
    cos, sin = pb.rope_cos_sin(torch.arange(t) * 7, pb.default_inv_freq(rotary_dim), layout=layout)
    return x, cos, sin


@pytest.mark.parametrize("layout", pb.LAYOUTS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("head_dim, rotary_dim", [(16, 16), (24, 8), (10, 6), (7, 6), (64, 64), (96, 32), (128, 96)])
def test_blocked_cpu_path_gives_the_formulas_bits(monkeypatch, threads, layout, dtype, head_dim, rotary_dim):
    """Large CPU inputs outside autograd take rope_cpu.rotate_blocked; shrink its thresholds so small inputs do too,
    cut into many blocks (serially or across helper threads). Rotary dims that are multiples of 32 take the complex
    multiply in the interleaved layout (float32/float64 on x86), the others the real-valued passes."""
    from posbook import rope as rope_module
    from posbook import rope_cpu

    monkeypatch.setattr(rope_cpu, "_MIN_FAST_BYTES", 0)
    monkeypatch.setattr(rope_cpu, "_BLOCK_BYTES", 2048)
    monkeypatch.setattr(rope_cpu, "_SERIAL_NUMEL", 1024)
    x, cos, sin = make_case((3, 5, 37), head_dim, rotary_dim, layout, dtype, seed=rotary_dim, specials=True)
    for view in (x, x.transpose(0, 1), x[:, ::2], x[..., 1:].unflatten(0, (1, 3))[..., :head_dim - 1]):
        if view.shape[-1] < rotary_dim:
            continue
        assert rope_cpu.fast_path_applies(view, cos, sin)
        assert_same_bits(pb.apply_rope(view, cos, sin, layout=layout),
                         rope_module._apply_rope_reference(view, cos, sin, layout))
    if X86 and layout == "interleaved" and dtype in (torch.float32, torch.float64) and rotary_dim % 32 == 0:
        assert rope_cpu._complex_rotation_is_exact(x[..., :rotary_dim], torch.empty_like(x)[..., :rotary_dim])
    x.requires_grad_(dtype in (torch.float32, torch.float64))
    if x.requires_grad:  # autograd keeps the differentiable formula
        assert not rope_cpu.fast_path_applies(x, cos, sin)


@pytest.mark.parametrize("layout", pb.LAYOUTS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("table_shape", ["batch", "head", "both"])
def test_blocked_path_with_tables_per_batch_or_head(monkeypatch, threads, layout, dtype, table_shape):
    """cos/sin with leading dimensions (positions per sequence, as with left padding): each block must get the slice
    of the table for its own batch entry / head, while the views shared by many blocks are reused."""
    from posbook import rope as rope_module
    from posbook import rope_cpu

    monkeypatch.setattr(rope_cpu, "_MIN_FAST_BYTES", 0)
    monkeypatch.setattr(rope_cpu, "_BLOCK_BYTES", 4096)
    monkeypatch.setattr(rope_cpu, "_SERIAL_NUMEL", 2048)
    b, h, t, rotary_dim = 3, 4, 50, 64
    x, _, _ = make_case((b, h, t), 96, rotary_dim, layout, dtype)
    lead = {"batch": (b, 1), "head": (h,), "both": (b, h)}[table_shape]
    offsets = torch.arange(math.prod(lead)).reshape(*lead, 1) * 1000
    positions = offsets + torch.arange(t)                                    # [*lead, t]
    cos, sin = pb.rope_cos_sin(positions.reshape(-1), pb.default_inv_freq(rotary_dim), layout=layout)
    cos, sin = cos.reshape(*lead, t, rotary_dim), sin.reshape(*lead, t, rotary_dim)
    for view in (x, x.transpose(0, 1).contiguous().transpose(0, 1)):  # contiguous, and heads outermost in memory
        assert rope_cpu.fast_path_applies(view, cos, sin)
        assert_same_bits(pb.apply_rope(view, cos, sin, layout=layout),
                         rope_module._apply_rope_reference(view, cos, sin, layout))


@pytest.mark.parametrize("layout", pb.LAYOUTS)
@pytest.mark.parametrize("dtype, head_dim, rotary_dim", [(torch.float32, 128, 128), (torch.float32, 128, 64),
                                                         (torch.bfloat16, 128, 128), (torch.float64, 64, 64)])
def test_fast_path_at_default_settings_gives_the_formulas_bits(threads, layout, dtype, head_dim, rotary_dim):
    """The benchmark's case at a smaller size ([4, 8, 512, 128] is 8 MiB in float32, 4 in bf16: above the formula's
    threshold), with the real block sizes: full and partial rotation, bf16 and fp64, both layouts, 1 and 2 threads."""
    from posbook import rope as rope_module
    from posbook import rope_cpu

    x, cos, sin = make_case((4, 8, 512), head_dim, rotary_dim, layout, dtype)
    assert rope_cpu.fast_path_applies(x, cos, sin)
    assert_same_bits(pb.apply_rope(x, cos, sin, layout=layout), rope_module._apply_rope_reference(x, cos, sin, layout))


@pytest.mark.skipif(not X86, reason="the complex-multiply path is only used on x86")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_complex_multiply_rounds_like_the_formula(dtype):
    """The probe the interleaved fast path relies on (if a PyTorch release changes its complex multiply to a fused
    multiply-add, this fails and the fast path falls back to the real-valued passes by itself)."""
    from posbook import rope_cpu

    assert rope_cpu._complex_mul_matches(dtype)


def test_fast_path_keeps_the_callers_thread_local_modes(monkeypatch, threads):
    """Helper threads must run with the caller's grad and inference mode, and a torch dispatch mode (thread-local)
    must see the formula's ops rather than have helper threads bypass it."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from posbook import rope as rope_module
    from posbook import rope_cpu

    monkeypatch.setattr(rope_cpu, "_MIN_FAST_BYTES", 0)
    monkeypatch.setattr(rope_cpu, "_SERIAL_NUMEL", 1024)
    x, cos, sin = make_case((4, 64), 64, 64, "interleaved", torch.float32)
    want = rope_module._apply_rope_reference(x, cos, sin, "interleaved")
    with torch.no_grad():
        leaf = x.clone().requires_grad_()
        assert rope_cpu.fast_path_applies(leaf, cos, sin)
        got = pb.apply_rope(leaf, cos, sin, layout="interleaved")
    assert torch.equal(got, want) and not got.requires_grad
    with torch.inference_mode():
        got = pb.apply_rope(x, cos, sin, layout="interleaved")
    assert torch.equal(got, want) and got.is_inference()

    seen = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(func)
            return func(*args, **(kwargs or {}))

    with Record():
        assert not rope_cpu.fast_path_applies(x, cos, sin)
        got = pb.apply_rope(x, cos, sin, layout="interleaved")
    assert torch.equal(got, want) and seen


@pytest.mark.parametrize("mode", ["grad", "no_grad", "inference"])
def test_helper_threads_take_blocks_with_the_callers_modes(mode):
    """rope_cpu._run_blocks with 2 threads: both threads work (a barrier makes the first block of each wait for the
    other) and see the caller's grad / inference mode, which are thread-local; every block runs once."""
    import threading

    from posbook import rope_cpu

    barrier, seen, lock = threading.Barrier(2, timeout=30), [], threading.Lock()

    def work(i, scratch):
        if not scratch:
            scratch["first"] = True
            barrier.wait()
        with lock:
            seen.append((i, threading.get_ident(), torch.is_grad_enabled(), torch.is_inference_mode_enabled()))

    context = {"grad": torch.enable_grad, "no_grad": torch.no_grad, "inference": torch.inference_mode}[mode]
    with context():
        rope_cpu._run_blocks(20, work, 2)
    assert sorted(i for i, *_ in seen) == list(range(20))
    assert len({thread for _, thread, *_ in seen}) == 2
    assert {(grad, inference) for *_, grad, inference in seen} == {(mode == "grad", mode == "inference")}


# --- multimodal RoPE (Qwen2-VL, Qwen2.5-VL, Qwen3-VL) against Hugging Face's rotary modules --------------------------

def qwen_vl_rotary(family, head_dim, section, rope_theta=1e6):
    """Hugging Face's text rotary module for a tiny Qwen-VL config, and the same config as a plain dict."""
    if family == "qwen2_vl":
        from transformers import Qwen2VLTextConfig as Config
        from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLRotaryEmbedding as Rotary
        rope = {"type": "mrope", "mrope_section": list(section)}        # the Hub config.json's legacy form
    else:
        from transformers import Qwen3VLTextConfig as Config
        from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLTextRotaryEmbedding as Rotary
        rope = {"rope_type": "default", "mrope_section": list(section), "mrope_interleaved": True}
    config = dict(hidden_size=4 * head_dim, num_attention_heads=4, num_key_value_heads=2, head_dim=head_dim,
                  rope_theta=rope_theta, rope_scaling=rope)
    return Rotary(Config(**{**config, "rope_scaling": dict(rope)})), config


def thw_positions(batch, t, gen):
    """Random time/height/width position ids [3, B, T], as an image or video grid gives them (rows differ)."""
    return torch.randint(0, 2048, (3, batch, t), generator=gen)


@pytest.mark.parametrize("family, head_dim, section", [
    ("qwen2_vl", 32, (4, 6, 6)), ("qwen2_vl", 128, (16, 24, 24)),      # Qwen2-VL / Qwen2.5-VL: [16, 24, 24]
    ("qwen3_vl", 32, (6, 5, 5)), ("qwen3_vl", 128, (24, 20, 20)),      # Qwen3-VL: [24, 20, 20]
])
def test_mrope_matches_hugging_face(family, head_dim, section):
    hf_rotary, config = qwen_vl_rotary(family, head_dim, section)
    from transformers.models.qwen2_vl.modeling_qwen2_vl import apply_rotary_pos_emb

    layout = pb.mrope_layout(config)
    assert layout == (section, family == "qwen3_vl")
    inv_freq, attention_factor = pb.rope_parameters(config)
    torch.testing.assert_close(inv_freq, hf_rotary.inv_freq, rtol=2e-6, atol=0)
    gen = torch.Generator().manual_seed(head_dim)
    position_ids = thw_positions(2, 37, gen)
    q, k = torch.randn(2, 4, 37, head_dim, generator=gen), torch.randn(2, 2, 37, head_dim, generator=gen)
    hf_cos, hf_sin = hf_rotary(q, position_ids)
    q_hf, k_hf = apply_rotary_pos_emb(q, k, hf_cos, hf_sin)
    # Given Hugging Face's float32 spectrum (posbook's differs by ulps, which at position 2000 moves angles ~1e-4):
    # every plane must take its angle from the position row Hugging Face gives it.
    mrope = dict(mrope_section=layout[0], mrope_interleaved=layout[1], attention_factor=attention_factor)
    cos, sin = pb.rope_cos_sin(position_ids, hf_rotary.inv_freq, **mrope)
    assert cos.shape == (2, 37, head_dim)
    torch.testing.assert_close(cos, hf_cos, rtol=0, atol=1e-6)
    torch.testing.assert_close(sin, hf_sin, rtol=0, atol=1e-6)
    torch.testing.assert_close(pb.apply_rope(q, cos[:, None], sin[:, None]), q_hf, rtol=0, atol=1e-6)
    torch.testing.assert_close(pb.apply_rope(k, cos[:, None], sin[:, None]), k_hf, rtol=0, atol=1e-6)
    # One sequence [3, T] is the batch's row; the three rows really differ, so a wrong assignment cannot pass.
    cos0, _ = pb.rope_cos_sin(position_ids[:, 0], hf_rotary.inv_freq, **mrope)
    torch.testing.assert_close(cos0, hf_cos[0], rtol=0, atol=1e-6)
    plain, _ = pb.rope_cos_sin(position_ids[0, 0], hf_rotary.inv_freq, attention_factor=attention_factor)
    assert (plain - cos0).abs().max() > 0.5


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen3_vl"])
def test_mrope_with_text_positions_is_plain_rope(family):
    hf_rotary, config = qwen_vl_rotary(family, 64, (8, 12, 12) if family == "qwen2_vl" else (12, 10, 10))
    section, interleaved = pb.mrope_layout(config)
    positions = torch.arange(50)
    plain = pb.rope_cos_sin(positions, hf_rotary.inv_freq)
    for text in (positions, positions.expand(3, -1)):
        got = pb.rope_cos_sin(text, hf_rotary.inv_freq, mrope_section=section, mrope_interleaved=interleaved)
        assert torch.equal(got[0], plain[0]) and torch.equal(got[1], plain[1])
    hf_cos, _ = hf_rotary(torch.zeros(1), positions.expand(3, 1, -1))
    torch.testing.assert_close(plain[0], hf_cos[0], rtol=0, atol=1e-6)


@settings(max_examples=200, deadline=None)
@given(n_planes=st.integers(1, 48), cut=st.tuples(st.floats(0, 1), st.floats(0, 1)), interleaved=st.booleans())
def test_mrope_plane_axes_is_hugging_faces_assignment(n_planes, cut, interleaved):
    """Which row each plane reads, read off Hugging Face's recomposition (fed each row's index as its "angle"),
    for any section: equal where posbook accepts it, and the interleaved sections posbook refuses are exactly those
    where Hugging Face's rule gives an axis fewer planes than the section states."""
    hf_rotary, _ = qwen_vl_rotary("qwen3_vl" if interleaved else "qwen2_vl", 2 * n_planes, (n_planes, 0, 0))
    a, b = sorted(round(c * n_planes) for c in cut)
    section = [a, b - a, n_planes - b]
    hf_rotary.mrope_section = section
    rows = torch.arange(3.0)[:, None, None, None].expand(3, 1, 1, n_planes).clone()
    hf_axes = hf_rotary.recomposition_frequencies(rows)[0, 0, :n_planes].long()
    if interleaved and torch.bincount(hf_axes, minlength=3).tolist() != section:
        with pytest.raises(ValueError, match="cannot be interleaved"):
            pb.mrope_plane_axes(section, n_planes, interleaved=True)
    else:
        assert torch.equal(pb.mrope_plane_axes(section, n_planes, interleaved=interleaved), hf_axes)


def test_mrope_plane_axes_small_examples():
    assert pb.mrope_plane_axes([2, 3, 3], 8).tolist() == [0, 0, 1, 1, 1, 2, 2, 2]
    assert pb.mrope_plane_axes([4, 2, 2], 8, interleaved=True).tolist() == [0, 1, 2, 0, 1, 2, 0, 0]
    axes = pb.mrope_plane_axes([24, 20, 20], 64, interleaved=True)
    assert torch.bincount(axes).tolist() == [24, 20, 20] and axes[-4:].tolist() == [0, 0, 0, 0]


def test_mrope_layouts_agree_after_permutation():
    """The plane-to-row assignment is made before the memory layout, so the interleaved layout's tables are the
    half layout's, permuted (interleaved_to_half)."""
    gen = torch.Generator().manual_seed(1)
    positions, inv_freq = thw_positions(1, 9, gen)[:, 0], pb.default_inv_freq(16, dtype=F64)
    kw = dict(mrope_section=[4, 2, 2], mrope_interleaved=True, dtype=F64)
    half = pb.rope_cos_sin(positions, inv_freq, **kw)
    interleaved = pb.rope_cos_sin(positions, inv_freq, layout="interleaved", **kw)
    assert torch.equal(pb.interleaved_to_half(interleaved[0]), half[0])
    assert torch.equal(pb.interleaved_to_half(interleaved[1]), half[1])
