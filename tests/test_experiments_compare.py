import math

import pytest
import torch

from posbook.experiments import compare
from posbook.experiments.model import GPT, GPTConfig


def test_relative_change_and_bad_baseline():
    assert compare.relative_change(1.1, 1.0) == pytest.approx(10.0)
    assert compare.relative_change(1.3062e5, 1.3473e5) == pytest.approx(-3.05, abs=5e-3)
    with pytest.raises(ValueError, match="baseline"):
        compare.relative_change(1.0, 0.0)
    with pytest.raises(TypeError, match="value"):
        compare.relative_change("1", 1.0)


def test_split_label():
    assert compare.split_label("iRoPE, LSSS + scaling/2") == ("iRoPE, LSSS + scaling", 2)
    for bad in ("iRoPE", "iRoPE/x", "/1", 3):
        with pytest.raises(ValueError, match="label"):
            compare.split_label(bad)


def test_by_variant_summary_and_paired_changes():
    results = {"A/0": 2.0, "A/1": 4.0, "B/0": 2.2, "B/1": 4.0, "B/2": 9.0}
    table = compare.by_variant(results, float)
    assert list(table) == ["A", "B"] and table["B"] == {0: 2.2, 1: 4.0, 2: 9.0}
    s = compare.seed_summary(table["A"].values())
    assert s["mean"] == 3.0 and s["min"] == 2.0 and s["max"] == 4.0 and s["n"] == 2
    assert s["std"] == pytest.approx(math.sqrt(2))
    assert compare.seed_summary([5.0])["std"] == 0.0
    changes = compare.paired_changes(table, "A")
    assert changes["A"] == {0: 0.0, 1: 0.0}
    assert changes["B"] == {0: pytest.approx(10.0), 1: 0.0}          # seed 2 has no baseline: left out
    with pytest.raises(ValueError, match="baseline"):
        compare.paired_changes(table, "C")
    with pytest.raises(ValueError, match="values"):
        compare.seed_summary([])
    with pytest.raises(TypeError, match="results"):
        compare.by_variant([1, 2], float)


def test_ranges_overlap():
    assert compare.ranges_overlap([1, 2], [2, 3])
    assert not compare.ranges_overlap([1, 2], [2.5, 3])
    with pytest.raises(ValueError, match="non-empty"):
        compare.ranges_overlap([], [1])


def test_step_times_leaves_models_unchanged():
    torch.manual_seed(0)
    models = {p: GPT(GPTConfig(n_layer=2, n_embd=32, n_head=2, max_seq_len=16, pattern=p, window=4))
              for p in ("R", "SN")}
    before = {p: [t.clone() for t in m.parameters()] for p, m in models.items()}
    x = torch.randint(0, 256, (2, 16))
    times = compare.step_times(models, x, x.roll(-1, 1), warmup=1, repeats=3)
    assert list(times) == ["R", "SN"] and all(len(t) == 3 and min(t) > 0 for t in times.values())
    for p, m in models.items():
        assert all(torch.equal(a, b) for a, b in zip(before[p], m.parameters()))
        assert all(t.grad is None for t in m.parameters())
    with pytest.raises(ValueError, match="same shape"):
        compare.step_times(models, x, x[:, :8])
    with pytest.raises(ValueError, match="models"):
        compare.step_times({}, x, x)
