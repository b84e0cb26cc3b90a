"""posbook.experiments.evaluation: bits per byte beyond the training length, loss by position over non-overlapping
windows, the sliding-window protocol, and stopping a run early on its own schedule."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

from posbook.experiments import GPT, GPTConfig, TrainConfig, train
from posbook.experiments.corpus import load_corpus
from posbook.experiments.evaluation import position_losses, sliding_window_bpb, text_by_position

TINY = dict(n_layer=2, n_embd=32, n_head=4, max_seq_len=64)


@pytest.fixture(scope="module")
def model_and_text():
    torch.manual_seed(0)
    model = GPT(GPTConfig(pattern="RA", **TINY)).double().eval()
    text = torch.randint(0, 256, (2_000,), dtype=torch.uint8, generator=torch.Generator().manual_seed(1))
    return model, text


def test_position_losses_are_the_losses_of_shorter_windows_at_the_same_starts(model_and_text):
    model, text = model_and_text
    with torch.no_grad():
        rows = position_losses(model, text, 32, windows=5, device=torch.device("cpu"), rows_per_forward=2)
        assert rows.shape == (5, 32)
        # The model is causal: the first 12 positions of a 32-byte window score as a 12-byte window does.
        starts = torch.arange(5) * 32
        x = torch.stack([text[s: s + 12] for s in starts]).long()
        y = torch.stack([text[s + 1: s + 13] for s in starts]).long()
        short = F.cross_entropy(model(x).transpose(1, 2), y, reduction="none")
    torch.testing.assert_close(rows[:, :12], short, rtol=0, atol=1e-5)   # the logits come back as float32
    with pytest.raises(ValueError, match="windows=70 windows of 32 bytes, 32 apart, need 2241 bytes"):
        position_losses(model, text, 32, windows=70, device=torch.device("cpu"))
    with pytest.raises(ValueError, match="spacing=16 must be at least length=32"):
        position_losses(model, text, 32, windows=2, device=torch.device("cpu"), spacing=16)


def test_sliding_window_with_stride_equal_to_length_is_the_non_overlapping_mean(model_and_text):
    model, text = model_and_text
    cpu = torch.device("cpu")
    with torch.no_grad():
        sliding = sliding_window_bpb(model, text, 16, 16, windows=6, first_target=16, device=cpu)
        rows = position_losses(model, text[:1 + 7 * 16], 16, windows=7, device=cpu)
    # Windows of 16 starting at bytes 0, 16, ..., 80 score all their bytes: the first six non-overlapping windows.
    assert sliding == pytest.approx(rows[:6].mean().item() / math.log(2), abs=1e-6)


def test_sliding_window_scores_the_same_bytes_at_every_length(model_and_text):
    model, text = model_and_text
    cpu = torch.device("cpu")
    with torch.no_grad():
        # At stride 8 and length 8 every scored byte sees 0..7 bytes before it; at length 40 it sees 32..39.
        short = sliding_window_bpb(model, text, 8, 8, windows=20, first_target=40, device=cpu)
        long = sliding_window_bpb(model, text, 40, 8, windows=20, first_target=40, device=cpu)
    assert short != long
    with pytest.raises(ValueError, match="stride=9 must be at most length=8"):
        sliding_window_bpb(model, text, 8, 9, windows=2, first_target=8, device=cpu)
    with pytest.raises(ValueError, match="first_target=8 must be at least length=16"):
        sliding_window_bpb(model, text, 16, 8, windows=2, first_target=8, device=cpu)
    with pytest.raises(ValueError, match="need 3009 bytes"):
        sliding_window_bpb(model, text, 16, 8, windows=371, first_target=40, device=cpu)


def tiny_text_run(**overrides):
    fields = dict(task="text", preset="cpu", model=dict(TINY, pattern="R"), steps=6, batch_size=4, seq_len=16,
                  warmup=1, eval_every=6, eval_batches=1, corpus_bytes=2_000_000, eval_seq_lens=[16, 32, 64],
                  eval_position_bin=8, eval_stride=8)
    fields.update(overrides)
    return TrainConfig(**fields)


def test_text_run_reports_both_protocols_and_bins_by_position():
    final = train(tiny_text_run())["final"]
    by_position = final["val_bpb_by_position"]
    assert len(by_position) == 64 // 8
    # The non-overlapping means are the prefix means of the positions (bins of equal width).
    assert final["val_bpb_by_len"]["32"] == pytest.approx(sum(by_position[:4]) / 4, rel=1e-5)
    assert final["val_bpb_by_len"]["16"] == pytest.approx(final["val_bpb"], rel=1e-6)
    assert set(final["val_bpb_sliding_by_len"]) == {"16", "32", "64"}
    with pytest.raises(ValueError, match="eval_stride=32 must be at most the shortest eval_seq_lens entry"):
        tiny_text_run(eval_stride=32).resolved()


def test_stop_after_trains_a_prefix_of_the_same_schedule():
    full = train(tiny_text_run(eval_every=3))["history"]
    prefix = train(tiny_text_run(eval_every=3, stop_after=3))["history"]
    assert [h["step"] for h in prefix] == [1, 2, 3]
    assert [h["train_loss"] for h in prefix] == [h["train_loss"] for h in full[:3]]
    assert [h["lr"] for h in prefix] == [h["lr"] for h in full[:3]]   # the 6-step schedule, not a 3-step one


def test_dynamic_ntk_is_scored_at_each_length_not_as_a_prefix():
    torch.manual_seed(0)
    dynamic = {"rope_theta": 1e4, "head_dim": 8, "max_position_embeddings": 16,
               "rope_scaling": {"rope_type": "dynamic", "factor": 4.0}}
    model = GPT(GPTConfig(pattern="R", **TINY, rope=dynamic)).eval()
    run = tiny_text_run().resolved()
    val = load_corpus(run.corpus_bytes).val
    with torch.no_grad():
        out = text_by_position(model, run, val, torch.device("cpu"))
        at_32 = position_losses(model, val, 32, run.eval_batches * run.batch_size, torch.device("cpu"), spacing=64)
        at_64 = position_losses(model, val, 64, run.eval_batches * run.batch_size, torch.device("cpu"))
    # Windows of 32 at the starts of the 64-byte windows: the same bytes, each window rotated for its own length.
    assert out["val_bpb_by_len"]["32"] == pytest.approx(at_32.mean().item() / math.log(2), rel=1e-6)
    # Up to max_position_embeddings = 16 dynamic NTK is the rotation the model was built with.
    with torch.no_grad():
        windows = dict(windows=run.eval_batches * run.batch_size, device=torch.device("cpu"), spacing=64)
        torch.testing.assert_close(position_losses(model, val, 16, **windows),
                                   position_losses(model.with_rope(None).eval(), val, 16, **windows), rtol=0, atol=0)
    # A 64-byte window rotates with another spectrum than a 32-byte one: its first 32 positions score differently.
    assert (at_64[:, :32] - at_32).abs().max() > 1e-5


def test_text_runs_report_bits_per_byte_at_longer_lengths():
    run = TrainConfig(task="text", preset="cpu", model=dict(TINY, pattern="RN"), steps=2, batch_size=2, seq_len=16,
                      eval_every=2, eval_batches=1, corpus_bytes=200_000, eval_seq_lens=[16, 64])
    final = train(run)["final"]
    assert set(final["val_bpb_by_len"]) == {"16", "64"}
    assert final["val_bpb_by_len"]["16"] == final["val_bpb"]
    with pytest.raises(ValueError, match="eval_seq_lens"):
        replace(run, eval_seq_lens=[0]).resolved()
