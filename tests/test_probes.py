import pytest
import torch

from posbook.experiments import probes
from posbook.experiments import GPT, GPTConfig, tasks


def _batch(n=12, depth=5, batch=3, **kw):
    return probes.passkey_probe_batch(n, depth, batch, torch.Generator().manual_seed(0), **kw)


def test_layout_matches_the_task():
    inputs, targets, regions = _batch()
    n, k = 12, tasks.PASSKEY_DIGITS
    assert inputs.shape == (3, tasks.sequence_length("passkey", n) - 1)
    # Same answer layout as make_batch: targets set on the answer digits and EOS only.
    _, ref_targets = tasks.make_batch("passkey", [n] * 3, torch.Generator().manual_seed(0))
    assert torch.equal(targets != tasks.IGNORE, ref_targets != tasks.IGNORE)
    marks = (inputs[0] == tasks.MARK).nonzero().flatten().tolist()
    assert marks == [6, 12]
    key = inputs[:, 7:12]
    assert torch.equal(targets[:, inputs.shape[1] - k - 1: -1], key)       # SEP predicts d1, …
    assert torch.equal(inputs[:, -k:], key)
    assert bool((inputs[:, 1:6] >= 10).all()) and bool((key < 10).all())
    total = sum(r.long() for r in regions.values())
    assert bool((total == 1).all())                                        # a partition
    assert regions["needle"].nonzero().flatten().tolist() == list(range(6, 13))
    assert regions["begin"].nonzero().flatten().tolist() == [0, 1, 2]
    assert inputs[0, regions["end"]][:2].tolist() == [tasks.QUERY, tasks.SEP]


def test_bad_input():
    with pytest.raises(ValueError, match="depth"):
        _batch(depth=1)
    with pytest.raises(ValueError, match="depth"):
        _batch(depth=13)
    with pytest.raises(TypeError, match="generator"):
        probes.passkey_probe_batch(4, 2, 1, None)
    with pytest.raises(TypeError, match="model"):
        probes.niah_attention_mass(torch.nn.Linear(2, 2), torch.zeros(1, 3, dtype=torch.long), {"end": torch.ones(3, dtype=torch.bool)})


@pytest.mark.parametrize("pattern,kw", [("R", {}), ("SSSN", dict(window=4, qk_norm="rope")), ("A", {})])
def test_mass_sums_to_one_and_gradient_shape(pattern, kw):
    torch.manual_seed(0)
    model = GPT(GPTConfig(pattern=pattern, n_layer=4, n_embd=32, n_head=2, vocab_size=tasks.VOCAB_SIZE,
                          max_seq_len=64, **kw))
    inputs, targets, regions = _batch()
    mass = probes.niah_attention_mass(model, inputs, regions)
    assert set(mass) == set(regions) and mass["end"].shape == (4,)
    assert torch.allclose(sum(mass.values()), torch.ones(4, dtype=torch.float64), atol=1e-5)
    g = probes.answer_gradient_influence(model, inputs, targets)
    sep = int((inputs[0] == tasks.SEP).nonzero())
    assert g.shape == (sep + 1,) and bool((g > 0).all())
    if pattern == "SSSN":   # the last layer is global NoPE, so no local-window cut-off: G reaches BOS
        assert g[-1] > 0
