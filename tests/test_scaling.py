"""rope_parameters against Hugging Face's ROPE_INIT_FUNCTIONS, config by config, plus the teaching types."""

from __future__ import annotations

import copy
import dataclasses
import math

import pytest
import torch
from transformers import LlamaConfig, Phi3Config
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXRotaryEmbedding

import posbook as pb

# HF raises the base to float32 exponents; posbook rounds a float64 spectrum once. A few float32 ulps apart.
RTOL = 2e-6
F64 = torch.float64


def hf(config: dict, seq_len=None):
    """Hugging Face's (inv_freq, attention_factor) for the same plain config dict."""
    rope = config.get("rope_parameters") or config.get("rope_scaling") or {}
    # Phi3Config is the config class that reads longrope's top-level original_max_position_embeddings.
    config_class = Phi3Config if "longrope" in (rope.get("rope_type"), rope.get("type")) else LlamaConfig
    cfg = config_class(**copy.deepcopy(config))
    rope_type = cfg.rope_parameters["rope_type"]
    if rope_type == "default":
        # Llama's default rule ignores partial_rotary_factor; GPT-NeoX's (the origin of partial RoPE) reads it.
        return GPTNeoXRotaryEmbedding.compute_default_rope_parameters(cfg, seq_len=seq_len)
    return ROPE_INIT_FUNCTIONS[rope_type](cfg, seq_len=seq_len)


BASE = dict(hidden_size=1024, num_attention_heads=8, max_position_embeddings=4096)


def longrope_factors(n_planes: int, top: float) -> tuple[list[float], list[float]]:
    """Made-up but Phi-3-shaped per-plane factors: short near 1, long rising from 1 on the fast planes to `top`."""
    grid = [i / (n_planes - 1) for i in range(n_planes)]
    return [round(1.0 + 0.05 * g ** 2, 6) for g in grid], [round(top ** (g ** 1.5), 6) for g in grid]


PHI3 = dict(hidden_size=3072, num_attention_heads=32, max_position_embeddings=131072,
            original_max_position_embeddings=4096)
SHORT48, LONG48 = longrope_factors(48, 25.0)
SHORT64, LONG64 = longrope_factors(64, 40.0)
LONGROPE = {
    # Phi-3-mini-128k-instruct's config.json form: legacy rope_scaling, the original length at the top level.
    "longrope-phi3-mini-128k": dict(PHI3, rope_theta=1e4, rope_scaling={
        "type": "longrope", "short_factor": SHORT48, "long_factor": LONG48}),
    # Phi-3.5-mini in the transformers-v5 form, everything inside rope_parameters.
    "longrope-phi3.5-mini-v5": dict(hidden_size=3072, num_attention_heads=32, max_position_embeddings=131072,
                                    rope_parameters={"rope_type": "longrope", "rope_theta": 1e4,
                                                     "short_factor": SHORT48, "long_factor": LONG48,
                                                     "original_max_position_embeddings": 4096}),
    # Phi-4-mini: 24 heads of 128, partial_rotary_factor 0.75, so 96 rotary dims and 48 factors per list.
    "longrope-phi4-mini": dict(PHI3, num_attention_heads=24, partial_rotary_factor=0.75, rope_theta=1e4,
                               rope_scaling={"type": "longrope", "short_factor": SHORT48, "long_factor": LONG48}),
    "longrope-phi4-mini-v5": dict(PHI3, num_attention_heads=24, rope_parameters={
        "rope_type": "longrope", "rope_theta": 1e4, "partial_rotary_factor": 0.75, "short_factor": SHORT48,
        "long_factor": LONG48, "original_max_position_embeddings": 4096}),
    # Phi-3-medium-128k: heads of 128, 64 factors per list.
    "longrope-phi3-medium-128k": dict(PHI3, hidden_size=5120, num_attention_heads=40, rope_theta=1e4, rope_scaling={
        "type": "longrope", "short_factor": SHORT64, "long_factor": LONG64}),
    "longrope-given-factor": dict(PHI3, rope_theta=1e4, rope_scaling={
        "type": "longrope", "short_factor": SHORT48, "long_factor": LONG48, "factor": 8.0}),
    "longrope-given-attention-factor": dict(PHI3, rope_theta=5e5, rope_scaling={
        "rope_type": "longrope", "short_factor": SHORT48, "long_factor": LONG48, "factor": 32.0,
        "attention_factor": 1.125}),
}

CONFIGS = {
    "default-legacy": dict(BASE, rope_theta=10_000.0),
    "default-v5-head_dim": dict(BASE, head_dim=256, rope_parameters={"rope_type": "default", "rope_theta": 1e7}),
    "default-partial": dict(BASE, rope_theta=1e4, partial_rotary_factor=0.25),
    "linear": dict(BASE, rope_theta=1e4, rope_scaling={"type": "linear", "factor": 4.0}),
    "linear-v5-partial": dict(BASE, rope_parameters={"rope_type": "linear", "rope_theta": 5e5, "factor": 2.5,
                                                     "partial_rotary_factor": 0.5}),
    "dynamic": dict(BASE, rope_theta=1e4, rope_scaling={"rope_type": "dynamic", "factor": 2.0}),
    "dynamic-partial": dict(BASE, rope_theta=1e4, partial_rotary_factor=0.5,
                            rope_scaling={"rope_type": "dynamic", "factor": 8.0}),
    "yarn-paper-defaults": dict(BASE, rope_theta=1e4, rope_scaling={"rope_type": "yarn", "factor": 16.0}),
    "yarn-betas-no-truncate": dict(BASE, rope_theta=5e5, rope_parameters={
        "rope_type": "yarn", "rope_theta": 5e5, "factor": 4.0, "beta_fast": 16, "beta_slow": 2, "truncate": False}),
    "yarn-explicit-attention-factor": dict(BASE, rope_theta=1e6, rope_scaling={
        "rope_type": "yarn", "factor": 4.0, "attention_factor": 1.25, "original_max_position_embeddings": 1024}),
    "yarn-deepseek-mscale": dict(hidden_size=7168, num_attention_heads=128, head_dim=64, max_position_embeddings=163840,
                                 rope_theta=1e4, rope_scaling={
                                     "type": "yarn", "factor": 40, "beta_fast": 32, "beta_slow": 1, "mscale": 1.0,
                                     "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096}),
    "yarn-kimi-k2-equal-betas": dict(hidden_size=7168, num_attention_heads=64, head_dim=64, max_position_embeddings=131072,
                                     rope_theta=5e4, rope_scaling={
                                         "type": "yarn", "factor": 32.0, "beta_fast": 1.0, "beta_slow": 1.0,
                                         "mscale": 1.0, "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096}),
    "yarn-mscale-unequal": dict(BASE, rope_theta=1e4, rope_scaling={
        "type": "yarn", "factor": 40.0, "mscale": 0.707, "mscale_all_dim": 1.0,
        "original_max_position_embeddings": 4096}),
    "yarn-factor-from-lengths": dict(hidden_size=1024, num_attention_heads=8, max_position_embeddings=32768,
                                     rope_parameters={"rope_type": "yarn", "rope_theta": 1e4, "factor": None,
                                                      "original_max_position_embeddings": 4096}),
    "yarn-partial": dict(BASE, rope_theta=1e4, partial_rotary_factor=0.5,
                         rope_scaling={"rope_type": "yarn", "factor": 8.0}),
    "llama3-8b": dict(hidden_size=4096, num_attention_heads=32, max_position_embeddings=131072, rope_theta=5e5,
                      rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                    "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}),
    "llama3-3.2": dict(hidden_size=2048, num_attention_heads=32, max_position_embeddings=131072, rope_theta=5e5,
                       rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                     "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}),
    "llama4-scout-step": dict(hidden_size=5120, num_attention_heads=40, head_dim=128, max_position_embeddings=10485760,
                              rope_theta=5e5, rope_scaling={"rope_type": "llama3", "factor": 16.0, "low_freq_factor": 1.0,
                                                            "high_freq_factor": 1.0,
                                                            "original_max_position_embeddings": 8192}),
    **LONGROPE,
    "proportional-quarter": dict(BASE, head_dim=256, rope_parameters={
        "rope_type": "proportional", "rope_theta": 1e6, "partial_rotary_factor": 0.25}),
    "proportional-full-factor": dict(BASE, head_dim=128, rope_parameters={
        "rope_type": "proportional", "rope_theta": 1e4, "factor": 8.0}),
    "proportional-odd-planes": dict(BASE, head_dim=128, rope_parameters={
        "rope_type": "proportional", "rope_theta": 1e4, "partial_rotary_factor": 0.3}),
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_matches_hugging_face(name):
    config = CONFIGS[name]
    inv_freq, attention_factor = pb.rope_parameters(config)
    hf_inv_freq, hf_attention_factor = hf(config)
    assert inv_freq.dtype == torch.float32 and inv_freq.shape == hf_inv_freq.shape
    torch.testing.assert_close(inv_freq, hf_inv_freq, rtol=RTOL, atol=0)
    assert attention_factor == pytest.approx(hf_attention_factor, rel=1e-12)


@pytest.mark.parametrize("seq_len", [1, 100, 4096, 4097, 10_000, 65_536])
@pytest.mark.parametrize("name", ["dynamic", "dynamic-partial"])
def test_dynamic_matches_hugging_face_at_every_length(name, seq_len):
    config = CONFIGS[name]
    inv_freq, _ = pb.rope_parameters(config, seq_len=seq_len)
    torch.testing.assert_close(inv_freq, hf(config, seq_len)[0], rtol=RTOL, atol=0)


def test_the_config_is_not_modified():
    config = copy.deepcopy(CONFIGS["llama3-8b"])
    pb.rope_parameters(config)
    assert config == CONFIGS["llama3-8b"]


def test_yarn_attention_factor_is_the_papers_formula():
    _, af = pb.rope_parameters(CONFIGS["yarn-paper-defaults"])
    assert af == pytest.approx(0.1 * math.log(16.0) + 1.0, rel=1e-15)
    # DeepSeek-V3's mscale == mscale_all_dim makes the cos/sin factor exactly 1.
    assert pb.rope_parameters(CONFIGS["yarn-deepseek-mscale"])[1] == 1.0


def test_yarn_keeps_fast_planes_and_interpolates_slow_planes():
    config = CONFIGS["yarn-paper-defaults"]
    theta = pb.default_inv_freq(128, 1e4, dtype=torch.float64)
    inv_freq, _ = pb.rope_parameters(config, dtype=torch.float64)
    low, high = pb.yarn_ramp_bounds(128, 1e4, 4096)
    assert 0 < low < high < 63
    torch.testing.assert_close(inv_freq[:low + 1], theta[:low + 1], rtol=0, atol=0)
    torch.testing.assert_close(inv_freq[high:], theta[high:] / 16, rtol=1e-15, atol=0)
    turns = 4096 * theta / (2 * math.pi)
    assert bool((turns[:low] > 32).all()) and bool((turns[high + 1:] < 1).all())


def test_linear_is_position_interpolation():
    inv_freq, _ = pb.rope_parameters(CONFIGS["linear"], dtype=torch.float64)
    positions = torch.arange(0, 16_384, 7, dtype=torch.float64)
    theta = pb.default_inv_freq(128, dtype=torch.float64)
    torch.testing.assert_close(positions[:, None] * inv_freq, (positions / 4)[:, None] * theta)


def test_ntk_teaching_type_fixes_the_fastest_plane_and_interpolates_the_slowest():
    config = dict(BASE, rope_theta=1e4, rope_scaling={"rope_type": "ntk", "factor": 8.0})
    inv_freq, af = pb.rope_parameters(config, dtype=torch.float64)
    theta = pb.default_inv_freq(128, dtype=torch.float64)
    assert af == 1.0 and inv_freq[0] == theta[0] == 1.0
    assert inv_freq[-1].item() == pytest.approx(theta[-1].item() / 8, rel=1e-12)
    # At seq_len = max_position_embeddings·(1 + (s − 1)/factor)... dynamic NTK reaches a fixed-NTK scale s.
    dynamic = dict(BASE, rope_theta=1e4, rope_scaling={"rope_type": "dynamic", "factor": 2.0})
    seq_len = 4096 * 4 + 4096  # scale = 2·(20480/4096) − 1 = 9
    ntk9 = dict(BASE, rope_theta=1e4, rope_scaling={"rope_type": "ntk", "factor": 9.0})
    torch.testing.assert_close(pb.rope_parameters(dynamic, seq_len, dtype=torch.float64)[0],
                               pb.rope_parameters(ntk9, dtype=torch.float64)[0])


def test_ntk_by_parts_is_yarn_without_attention_scaling():
    yarn = pb.rope_parameters(CONFIGS["yarn-paper-defaults"])
    parts = pb.rope_parameters(dict(BASE, rope_theta=1e4, rope_scaling={"rope_type": "ntk_by_parts", "factor": 16.0}))
    assert torch.equal(parts[0], yarn[0]) and parts[1] == 1.0 and yarn[1] > 1.0


def test_proportional_keeps_the_fastest_frequencies_of_the_full_head():
    inv_freq, _ = pb.rope_parameters(CONFIGS["proportional-quarter"], dtype=torch.float64)
    full = pb.default_inv_freq(256, 1e6, dtype=torch.float64)
    assert inv_freq.shape == (128,)
    torch.testing.assert_close(inv_freq[:32], full[:32], rtol=0, atol=0)
    assert bool((inv_freq[32:] == 0).all())
    # Partial RoPE with the same fraction spreads 32 planes over the whole range instead.
    partial, _ = pb.rope_parameters(dict(BASE, head_dim=256, rope_theta=1e6, partial_rotary_factor=0.25),
                                    dtype=torch.float64)
    assert partial.shape == (32,) and partial[-1] < inv_freq[31] / 1e3


def test_mla_configs_rotate_qk_rope_head_dim():
    config = dict(hidden_size=7168, num_attention_heads=128, qk_rope_head_dim=64, kv_lora_rank=512, rope_theta=1e4)
    assert pb.rope_spec(config).rotary_dim == 64
    assert pb.rope_parameters(config)[0].shape == (32,)


def test_per_layer_type_rope_dicts_match_gemma4():
    from transformers import Gemma4TextConfig
    from transformers.models.gemma4.modeling_gemma4 import Gemma4TextRotaryEmbedding

    config = dict(hidden_size=1024, num_attention_heads=8, num_key_value_heads=4, head_dim=256, global_head_dim=512,
                  num_hidden_layers=2, layer_types=["sliding_attention", "full_attention"],
                  rope_parameters={"full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                                      "rope_theta": 1e6},
                                   "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}})
    hf = Gemma4TextRotaryEmbedding(Gemma4TextConfig(**copy.deepcopy(config)))
    for layer_type in ("full_attention", "sliding_attention"):
        ours, _ = pb.rope_parameters(config, layer_type=layer_type)
        torch.testing.assert_close(ours, getattr(hf, f"{layer_type}_inv_freq"), rtol=RTOL, atol=0)
    assert pb.rope_parameters(config, layer_type="full_attention")[0].count_nonzero() == 64
    with pytest.raises(ValueError, match="layer_type"):
        pb.rope_parameters(config)


def test_mla_partial_factor_must_agree_with_qk_rope_head_dim():
    v4 = dict(hidden_size=4096, num_attention_heads=64, head_dim=512, qk_rope_head_dim=64,
              partial_rotary_factor=0.125, rope_theta=1e4)
    assert pb.rope_parameters(v4)[0].shape == (32,)
    with pytest.raises(ValueError, match="qk_rope_head_dim"):
        pb.rope_parameters(dict(v4, partial_rotary_factor=0.25))


def test_rope_spec_reads_both_forms_alike():
    legacy = pb.rope_spec(dict(BASE, rope_theta=5e5, rope_scaling={"type": "linear", "factor": 2.0}))
    v5 = pb.rope_spec(dict(BASE, rope_parameters={"rope_type": "linear", "rope_theta": 5e5, "factor": 2.0}))
    assert legacy == v5
    assert (v5.rope_type, v5.head_dim, v5.rotary_dim, v5.params["factor"]) == ("linear", 128, 128, 2.0)


def test_dynamic_ntk_keys_must_be_cached_before_rotation():
    """With dynamic NTK the base depends on the current length, so a cache of *rotated* keys mixes two bases.

    Scores from keys rotated at length T1 and queries rotated at length T2 > max_position_embeddings are no
    longer a function of distance; caching keys before rotation and rotating them with the current spectrum
    restores exactly the scores of a full recomputation (huggingface/transformers#25104).
    """
    config = dict(hidden_size=64, num_attention_heads=1, max_position_embeddings=64,
                  rope_theta=1e4, rope_scaling={"rope_type": "dynamic", "factor": 4.0})
    gen = torch.Generator().manual_seed(0)
    q, k = torch.randn(256, 64, dtype=torch.float64, generator=gen), torch.randn(256, 64, dtype=torch.float64,
                                                                                    generator=gen)
    positions = torch.arange(256)

    def rotate(x, pos, seq_len):
        inv_freq, _ = pb.rope_parameters(config, seq_len, dtype=torch.float64)
        cos, sin = pb.rope_cos_sin(pos, inv_freq, dtype=torch.float64)
        return pb.apply_rope(x, cos, sin)

    def scores(offset, cache_raw):
        pos = positions + offset
        q_rot = rotate(q[-1:], pos[-1:], 256)
        if cache_raw:  # keys cached before rotation, rotated at use with the current spectrum
            keys = rotate(k, pos, 256)
        else:          # keys rotated when they arrived: 64 at once (no scaling yet), then one per step
            keys = torch.cat([rotate(k[:64], pos[:64], 64)] +
                             [rotate(k[t:t + 1], pos[t:t + 1], t + 1) for t in range(64, 256)])
        return q_rot @ keys.T

    # Cached raw keys give scores that depend only on distance: shifting every position changes nothing.
    torch.testing.assert_close(scores(0, True), scores(1000, True), rtol=1e-9, atol=1e-9)
    # Cached rotated keys mix spectra: the scores move with absolute position and differ from recomputation.
    assert (scores(0, False) - scores(0, True)).abs().max() > 1.0
    assert (scores(0, False) - scores(1000, False)).abs().max() > 1.0


def test_default_inv_freq_formula_and_hf_default():
    inv = pb.default_inv_freq(128, 10_000.0, dtype=torch.float64)
    assert inv[0].item() == 1.0
    assert math.isclose(inv[-1].item(), 10_000.0 ** (-126 / 128), rel_tol=1e-15)
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    cfg = LlamaConfig(hidden_size=256, num_attention_heads=2, rope_theta=500_000.0)
    hf = LlamaRotaryEmbedding(cfg).inv_freq
    torch.testing.assert_close(pb.default_inv_freq(128, 500_000.0), hf, rtol=2e-7, atol=0)


def test_a_new_rope_type_is_one_entry_of_the_registry(monkeypatch):
    # A type that halves every frequency, with one key of its own: registering it is all it takes.
    half = pb.RopeType("halved", lambda spec, seq_len: (pb.default_inv_freq(spec.rotary_dim, spec.rope_theta,
                                                                          dtype=torch.float64) / spec.params["by"], 1.0),
                       frozenset({"by"}))
    monkeypatch.setitem(pb.ROPE_TYPES, "halved", half)
    config = {"head_dim": 16, "rope_theta": 1e4, "rope_scaling": {"rope_type": "halved", "by": 2.0}}
    inv_freq, factor = pb.rope_parameters(config)
    torch.testing.assert_close(inv_freq, pb.default_inv_freq(16) / 2)
    assert factor == 1.0
    with pytest.raises(ValueError, match="does not use"):
        pb.rope_parameters({**config, "rope_scaling": {"rope_type": "halved", "by": 2.0, "factor": 4.0}})
    for name, rope_type in pb.ROPE_TYPES.items():
        assert rope_type.name == name and callable(rope_type.rule)


@pytest.mark.parametrize("seq_len", [1, 4095, 4096, 4097, 32_768, 131_072, 200_000])
@pytest.mark.parametrize("name", sorted(LONGROPE))
def test_longrope_matches_hugging_face_at_every_length(name, seq_len):
    config = LONGROPE[name]
    inv_freq, attention_factor = pb.rope_parameters(config, seq_len=seq_len)
    hf_inv_freq, hf_attention_factor = hf(config, seq_len)
    torch.testing.assert_close(inv_freq, hf_inv_freq, rtol=RTOL, atol=0)
    assert attention_factor == pytest.approx(hf_attention_factor, rel=1e-12)


def test_longrope_divides_by_short_factors_up_to_the_original_length_and_by_long_factors_beyond():
    config = LONGROPE["longrope-phi4-mini"]
    theta = pb.default_inv_freq(96, 1e4, dtype=torch.float64)
    short, long = torch.tensor(SHORT48, dtype=F64), torch.tensor(LONG48, dtype=F64)
    for seq_len in (None, 1, 4096):
        torch.testing.assert_close(pb.rope_parameters(config, seq_len, dtype=F64)[0], theta / short,
                                   rtol=1e-15, atol=0)
    for seq_len in (4097, 131_072, 10 ** 7):
        torch.testing.assert_close(pb.rope_parameters(config, seq_len, dtype=F64)[0], theta / long,
                                   rtol=1e-15, atol=0)
    # Long factors start at 1: the fastest plane is never rescaled, the slowest is divided by 25.
    ratio = pb.frequency_ratio(config, 4097)
    assert ratio[0].item() == 1.0 and ratio[-1].item() == pytest.approx(1 / 25, rel=1e-12)


def test_longrope_attention_factor_is_the_papers_formula():
    # Phi-3 configs have no factor: s = 131072 / 4096 = 32 = 2^5 and ln s / ln 4096 = 5/12.
    assert pb.rope_parameters(LONGROPE["longrope-phi3-mini-128k"])[1] == pytest.approx(math.sqrt(17 / 12), rel=1e-15)
    # A given factor wins over the length ratio: 8 = 2^3 gives 3/12.
    assert pb.rope_parameters(LONGROPE["longrope-given-factor"])[1] == pytest.approx(math.sqrt(1.25), rel=1e-15)
    # A given attention_factor wins over both, and the factor does not depend on seq_len.
    for seq_len in (None, 100, 100_000):
        assert pb.rope_parameters(LONGROPE["longrope-given-attention-factor"], seq_len)[1] == 1.125
    # No extension at all: max_position_embeddings == original_max_position_embeddings.
    short_only = dict(LONGROPE["longrope-phi3-mini-128k"], max_position_embeddings=4096)
    assert pb.rope_parameters(short_only)[1] == 1.0


def test_longrope_reads_both_forms_alike():
    legacy, v5 = pb.rope_spec(LONGROPE["longrope-phi4-mini"]), pb.rope_spec(LONGROPE["longrope-phi4-mini-v5"])
    assert legacy == v5
    assert (v5.rope_type, v5.head_dim, v5.rotary_dim, v5.params["original_max_position_embeddings"]) == (
        "longrope", 128, 96, 4096)
    # The v5 form without any original length falls back to max_position_embeddings, as Hugging Face does.
    no_original = dict(hidden_size=3072, num_attention_heads=32, max_position_embeddings=4096, rope_parameters={
        "rope_type": "longrope", "rope_theta": 1e4, "short_factor": SHORT48, "long_factor": LONG48})
    assert pb.rope_spec(no_original).params["original_max_position_embeddings"] == 4096


@pytest.mark.parametrize("name", ["longrope-phi3-mini-128k", "longrope-phi4-mini", "longrope-phi3-medium-128k"])
def test_longrope_matches_the_phi3_rotary_module_as_positions_grow(name):
    """Phi3RotaryEmbedding picks its factor set at every forward from max(position_ids) + 1 over the whole batch
    (transformers' dynamic_rope_update); rope_parameters gives the same spectrum when passed that seq_len."""
    from transformers.models.phi3.modeling_phi3 import Phi3RotaryEmbedding

    config = LONGROPE[name]
    module = Phi3RotaryEmbedding(Phi3Config(**copy.deepcopy(config)))
    short, attention_factor = pb.rope_parameters(config)
    long, _ = pb.rope_parameters(config, seq_len=8192)
    assert (long / short).min() < 0.1          # the two sets are far apart: picking the wrong one cannot pass
    x = torch.zeros(1, dtype=torch.float32)
    gen = torch.Generator().manual_seed(0)
    batches = [torch.arange(4096).expand(2, -1),                                        # exactly the original
               torch.stack([torch.arange(512), torch.randint(4000, 9000, (512,), generator=gen)]),  # one row long
               torch.arange(100, 612)[None]]                                            # back to short
    for position_ids in batches:
        seq_len = int(position_ids.max()) + 1
        cos, sin = module(x, position_ids)
        ours, _ = pb.rope_parameters(config, seq_len=seq_len)
        torch.testing.assert_close(module.inv_freq, ours, rtol=RTOL, atol=0)
        torch.testing.assert_close(ours, long if seq_len > 4096 else short, rtol=0, atol=0)
        # The layout and the attention factor, given the module's own float32 spectrum (at positions near 9000 a
        # few-ulp difference in θ_i moves an angle by ~1e-3, which says nothing about the rule).
        for row, ids in enumerate(position_ids):
            our_cos, our_sin = pb.rope_cos_sin(ids, module.inv_freq, attention_factor=attention_factor)
            torch.testing.assert_close(our_cos, cos[row], rtol=0, atol=1e-6)
            torch.testing.assert_close(our_sin, sin[row], rtol=0, atol=1e-6)


def test_mrope_layout_reads_qwen_vl_configs():
    qwen2_vl = dict(hidden_size=3584, num_attention_heads=28, rope_theta=1e6,
                    rope_scaling={"type": "mrope", "mrope_section": [16, 24, 24]})
    assert pb.mrope_layout(qwen2_vl) == ((16, 24, 24), False)
    assert pb.rope_spec(qwen2_vl).rope_type == "default"
    torch.testing.assert_close(pb.rope_parameters(qwen2_vl)[0], pb.default_inv_freq(128, 1e6), rtol=0, atol=0)
    # Re-saved by transformers, the same file carries both keys.
    resaved = dict(qwen2_vl, rope_scaling={"type": "mrope", "rope_type": "default", "mrope_section": [16, 24, 24]})
    assert pb.mrope_layout(resaved) == ((16, 24, 24), False)
    qwen3_vl = dict(hidden_size=4096, num_attention_heads=32, head_dim=128, rope_parameters={
        "rope_type": "default", "rope_theta": 5e6, "mrope_section": [24, 20, 20], "mrope_interleaved": True})
    assert pb.mrope_layout(qwen3_vl) == ((24, 20, 20), True)
    # Qwen3-VL's long-video recipe: YaRN's spectrum with the same layout.
    yarn = dict(qwen3_vl, rope_parameters={**qwen3_vl["rope_parameters"], "rope_type": "yarn", "factor": 3.0,
                                           "original_max_position_embeddings": 262144})
    assert pb.mrope_layout(yarn) == ((24, 20, 20), True) and pb.rope_spec(yarn).rope_type == "yarn"
    # Partial RoPE: the section covers rotary_dim/2 = 256 · 0.25 / 2 = 32 planes.
    assert pb.mrope_layout(pb.model_config("Qwen3.8-27B")) == ((11, 11, 10), True)
    assert pb.mrope_layout(CONFIGS["yarn-paper-defaults"]) is None


def test_legacy_mrope_type_is_read_as_hugging_face_reads_it():
    from transformers import Qwen2VLTextConfig

    rope_scaling = {"type": "mrope", "mrope_section": [4, 6, 6]}
    config = dict(hidden_size=128, num_attention_heads=4, num_key_value_heads=2, rope_theta=1e6,
                  rope_scaling=rope_scaling)
    hf_config = Qwen2VLTextConfig(**copy.deepcopy(config))
    assert hf_config.rope_parameters["rope_type"] == pb.rope_spec(config).rope_type == "default"
    assert tuple(hf_config.rope_parameters["mrope_section"]) == pb.mrope_layout(config)[0]


def test_a_rope_spec_built_by_hand_is_held_to_what_rope_spec_guarantees():
    spec = pb.rope_spec({"head_dim": 64, "rope_theta": 1e4, "partial_rotary_factor": 0.5})
    assert pb.RopeSpec("default", 1e4, 64, 0.5, 32) == dataclasses.replace(spec, params={})
    with pytest.raises(ValueError, match=r"rotary_dim must be int\(head_dim · partial_rotary_factor\)"):
        pb.RopeSpec("default", 1e4, 64, 0.5, 64)
    with pytest.raises(TypeError, match="head_dim must be an int"):
        pb.RopeSpec("default", 1e4, "64", 1.0, 64)
    with pytest.raises(ValueError, match="rope_type must be one of"):
        pb.RopeSpec("yarm", 1e4, 64, 1.0, 64)
    with pytest.raises(TypeError, match="keys must be a frozenset"):
        pb.RopeType("halved", lambda spec, seq_len: None, {"by"})
    with pytest.raises(ValueError, match="rope_theta must be > 1"):
        pb.yarn_ramp_bounds(64, 1.0, 4096)
    with pytest.raises(TypeError, match="truncate must be a bool"):
        pb.yarn_ramp_bounds(64, 1e4, 4096, truncate=1)
