"""The experiment harness: model patterns, local attention, tasks, corpus, training, exact resume after SIGKILL,
two-process DDP, and the command line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

import posbook as pb
from posbook.local import local_attention
from posbook.experiments import GPT, GPTConfig, LAYER_CODES, TrainConfig, train
from posbook.experiments import corpus as corpus_lib
from posbook.experiments import tasks as tasks_lib
from posbook.experiments.train import PRESETS

TINY = dict(n_layer=2, n_embd=32, n_head=4, window=4, chunk_size=4, max_seq_len=48)
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}


@pytest.mark.parametrize("code", sorted(LAYER_CODES))
@pytest.mark.parametrize("options", [{}, {"qk_norm": "all", "sinks": True}, {"softcap": 5.0, "n_kv_head": 2},
                                     {"absolute_positions": "sinusoidal", "logit_scaling": "llama4"}])
def test_every_layer_code_is_causal_and_trains(code, options):
    torch.manual_seed(0)
    if code == "D" and {"sinks", "softcap"} & set(options):
        with pytest.raises(ValueError, match="layer code D"):   # refused at construction, not mid-step
            GPTConfig(pattern=code + "N", **TINY, **options)
        return
    model = GPT(GPTConfig(pattern=code + "N", **TINY, **options)).double()
    idx = torch.randint(0, 256, (2, 20))
    logits = model(idx)
    assert logits.shape == (2, 20, 256)
    # Causality: changing the last 5 tokens leaves the logits of the first 15 positions exactly as they were.
    changed = idx.clone()
    changed[:, 15:] = (changed[:, 15:] + 1) % 256
    torch.testing.assert_close(model(changed)[:, :15], logits[:, :15], rtol=0, atol=1e-12)
    logits.logsumexp(-1).mean().backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


def test_pattern_repeats_and_bad_patterns_are_named():
    assert GPTConfig(pattern="SSSN", n_layer=8).layer_codes == list("SSSNSSSN")
    with pytest.raises(ValueError, match="unknown layer code"):
        GPTConfig(pattern="RXZ")
    with pytest.raises(ValueError, match="n_kv_head"):
        GPTConfig(n_head=4, n_kv_head=3)
    with pytest.raises(ValueError, match="qk_norm"):
        GPTConfig(qk_norm="some")


@pytest.mark.parametrize("code", ["R", "S", "N"])
def test_attention_temperature_divides_every_logit(code):
    # Temperature τ divides q·k; without QK-Norm that is the same model with W_Q scaled by 1/τ.
    torch.manual_seed(0)
    model = GPT(GPTConfig(pattern=code, **TINY)).double()
    idx = torch.randint(0, 256, (2, 20))
    sharp = GPT(GPTConfig(pattern=code, **TINY, attn_temperature=0.25)).double()
    sharp.load_state_dict(model.state_dict())
    with torch.no_grad():
        for block in model.blocks:
            block.attn.q_proj.weight *= 4
    torch.testing.assert_close(sharp(idx), model(idx), rtol=1e-12, atol=1e-12)
    # Read at every forward: changing it on a built model takes effect at once.
    sharp.config.attn_temperature = 1.0
    assert not torch.allclose(sharp(idx), model(idx))
    with pytest.raises(ValueError, match="attn_temperature"):
        GPTConfig(attn_temperature=0.0)


@pytest.mark.parametrize("code", sorted(LAYER_CODES))
def test_recorded_attention_calls_reproduce_every_layer(code):
    torch.manual_seed(0)
    model = GPT(GPTConfig(pattern=code + "N", **TINY, logit_scaling="swan")).double()
    idx = torch.randint(0, 256, (2, 20))
    plain = model(idx)
    if code == "D":     # two attention maps: no single call to record, and the error says so
        with pytest.raises(ValueError, match="differential"), model.recording_attention():
            model(idx)
        return
    with model.recording_attention() as calls:
        recorded = model(idx)
    assert len(calls) == model.config.n_layer and all(b.attn.recorder is None for b in model.blocks)
    torch.testing.assert_close(recorded, plain, rtol=1e-12, atol=1e-12)   # local layers: masked form = blocked kernel
    q, k, v, call = calls[0]
    out, weights = pb.attention(q, k, v, return_weights=True, impl="reference", **call)
    torch.testing.assert_close(weights.sum(-1), torch.ones_like(weights[..., 0]))
    if code in "SC":
        assert not weights[..., 0, 1:].any() and weights[..., -1, :20 - model.config.window].abs().max() == 0
    # The recorded call is the first layer's attention: projecting its output gives the layer's output.
    block = model.blocks[0]
    x = block.attn_norm(model.embed(idx))
    torch.testing.assert_close(block.attn.o_proj(out.transpose(1, 2).reshape(2, 20, -1)), block.attn(x))


@pytest.mark.parametrize("code, kind, option", [("S", "sliding", "window"), ("C", "chunked", "chunk_size")])
def test_local_layers_equal_masked_reference_attention(code, kind, option):
    torch.manual_seed(0)
    layer = GPT(GPTConfig(pattern=code, **TINY)).double().blocks[0].attn
    x = torch.randn(2, 19, 32, dtype=torch.float64)
    q = layer.q_proj(x).view(2, 19, 4, 8).transpose(1, 2)
    k = layer.k_proj(x).view(2, 19, 4, 8).transpose(1, 2)
    v = layer.v_proj(x).view(2, 19, 4, 8).transpose(1, 2)
    q, k = pb.apply_rope(q, layer.cos[:19], layer.sin[:19]), pb.apply_rope(k, layer.cos[:19], layer.sin[:19])
    mask = pb.attention_mask(kind, 19, **{option: 4})
    expected = layer.o_proj(pb.attention(q, k, v, mask=mask, impl="reference").transpose(1, 2).reshape(2, 19, 32))
    torch.testing.assert_close(layer(x), expected)


@pytest.mark.parametrize("t, window, block", [(37, 8, None), (64, 16, 4), (10, 32, None), (50, 7, 3), (33, 1, None)])
def test_local_attention_equals_the_reference(t, window, block):
    gen = torch.Generator().manual_seed(t)
    q = torch.randn(2, 4, t, 8, generator=gen, dtype=torch.float64)
    k, v = (torch.randn(2, 2, t, 8, generator=gen, dtype=torch.float64) for _ in range(2))
    for kind, options in (("sliding", {"window": window}), ("chunked", {"chunk_size": window})):
        ref = pb.attention(q, k, v, mask=pb.attention_mask(kind, t, **options), impl="reference")
        out = local_attention(q, k, v, kind=kind, block_size=block, **options)
        torch.testing.assert_close(out, ref)


def test_tasks_have_the_right_answers():
    gen = torch.Generator().manual_seed(0)
    for task in tasks_lib.TASKS:
        for n in (1, 5, 12):
            tokens, start = tasks_lib._example(task, n, gen)
            assert len(tokens) == tasks_lib.sequence_length(task, n)
            prompt, answer = tokens[:start], tokens[start:-1]
            if task == "copy":
                assert answer == prompt[1:-1]
            elif task == "reverse":
                assert answer == prompt[1:-1][::-1]
            elif task == "addition":
                a, b = prompt[1:n + 1], prompt[n + 2:2 * n + 2]
                value = lambda digits: sum(d * 10 ** i for i, d in enumerate(digits))  # noqa: E731
                assert value(answer) == value(a) + value(b)
            else:
                i = prompt.index(tasks_lib.MARK)
                assert answer == prompt[i + 1:i + 1 + tasks_lib.PASSKEY_DIGITS]
    x, y = tasks_lib.make_batch("copy", [2, 5], gen)
    perfect = torch.nn.functional.one_hot(y.clamp(min=0), tasks_lib.VOCAB_SIZE).float()
    assert tasks_lib.exact_match(perfect, y).tolist() == [1.0, 1.0]
    perfect[1, -1] = perfect[1, -1].roll(1)          # one wrong answer token (the EOS of the longer example)
    assert tasks_lib.exact_match(perfect, y).tolist() == [1.0, 0.0]


def test_corpus_split_is_deterministic_and_hashed(tmp_path):
    for i in range(40):
        (tmp_path / f"m{i:02d}.py").write_text(f"x = {i}\n" * (i + 1))
    (tmp_path / "test").mkdir()
    (tmp_path / "test" / "t.py").write_text("excluded = True\n")
    a = corpus_lib.load_corpus(root=tmp_path, val_fraction=0.25)
    b = corpus_lib.load_corpus(root=tmp_path, val_fraction=0.25)
    assert a.sha256 == b.sha256 and torch.equal(a.train, b.train) and a.n_files == 40
    assert b"excluded" not in bytes(a.train.tolist()) + bytes(a.val.tolist())
    assert 0.05 < a.val.numel() / (a.train.numel() + a.val.numel()) < 0.6
    x, y = corpus_lib.text_batch(a.train, 3, 8, torch.Generator().manual_seed(0))
    assert torch.equal(x[:, 1:], y[:, :-1])


def test_stdlib_corpus_exists_here():
    corpus = corpus_lib.load_corpus(max_bytes=300_000)
    assert corpus.n_files > 10 and len(corpus.sha256) == 64


def tiny_run(tmp_path, **overrides):
    fields = dict(task="copy", preset="cpu", model=dict(TINY, pattern="RN"), steps=12, batch_size=8, train_max_size=4,
                  eval_sizes=[4, 8], eval_every=6, eval_batches=1, lr=3e-3, warmup=2, out_dir=str(tmp_path))
    fields.update(overrides)
    return TrainConfig(**fields)


def test_training_learns_and_records_provenance(tmp_path):
    results = train(tiny_run(tmp_path, steps=40))
    losses = [h["train_loss"] for h in results["history"]]
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 0.3  # nats; seeded, so the same numbers every run
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["final"] == results["final"] and set(saved["final"]["accuracy_by_size"]) == {"4", "8"}
    assert {"git_sha", "torch", "device", "preset", "seed", "wall_time_s"} <= set(saved["provenance"])
    state = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    assert state["step"] == 40


def cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "posbook.experiments", *args], capture_output=True, text=True,
                          env=ENV, cwd=cwd, timeout=300)


TRAIN_ARGS = ["train", "--task", "copy", "--preset", "cpu", "--pattern", "RN", "--n-layer", "2", "--n-embd", "32",
              "--steps", "30", "--batch-size", "8", "--train-max-size", "4", "--eval-sizes", "4,8", "--eval-every",
              "10", "--eval-batches", "1", "--checkpoint-every", "5", "--no-progress"]


def test_resume_after_sigkill_gives_identical_results(tmp_path):
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    assert cli(*TRAIN_ARGS, "--out", str(straight)).returncode == 0
    proc = subprocess.Popen([sys.executable, "-m", "posbook.experiments", *TRAIN_ARGS, "--out", str(killed)], env=ENV,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    checkpoint = killed / "checkpoint.pt"
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        if checkpoint.exists():
            try:
                step = torch.load(checkpoint, weights_only=True)["step"]
            except Exception:  # noqa: BLE001 - the file is replaced atomically, but it may appear between polls
                step = 0
            if 10 <= step < 30:
                break
        time.sleep(0.05)
    assert proc.poll() is None, "the run finished before it could be killed; make it longer"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    killed_at = torch.load(checkpoint, weights_only=True)["step"]
    assert killed_at < 30 and not (killed / "results.json").exists()
    assert cli(*TRAIN_ARGS, "--out", str(killed), "--resume").returncode == 0
    a = json.loads((straight / "results.json").read_text())
    b = json.loads((killed / "results.json").read_text())
    assert b["provenance"]["resumed_from_step"] == killed_at
    assert a["final"] == b["final"]
    assert [h["train_loss"] for h in a["history"]] == [h["train_loss"] for h in b["history"]]


def test_two_process_ddp_follows_the_one_process_curve(tmp_path):
    args = [*TRAIN_ARGS[:-1], "--steps", "8", "--checkpoint-every", "0"]
    one = cli(*args, "--out", str(tmp_path / "one"))
    assert one.returncode == 0, one.stderr
    two = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_port=29517",
                          "-m", "posbook.experiments", *args, "--out", str(tmp_path / "two")],
                         capture_output=True, text=True, env=ENV, timeout=300)
    assert two.returncode == 0, two.stderr[-2000:]
    a = json.loads((tmp_path / "one" / "results.json").read_text())
    b = json.loads((tmp_path / "two" / "results.json").read_text())
    assert b["provenance"]["world_size"] == 2
    torch.testing.assert_close(torch.tensor([h["train_loss"] for h in b["history"]]),
                               torch.tensor([h["train_loss"] for h in a["history"]]), rtol=1e-4, atol=1e-5)


def test_cli_help_lists_and_errors(tmp_path):
    assert "train" in cli("--help").stdout
    assert "p-RoPE" in cli("patterns").stdout
    assert json.loads(cli("presets").stdout)["cpu"]["steps"] > 0
    bad = cli("train", "--task", "copy", "--pattern", "RQ", "--out", str(tmp_path))
    assert bad.returncode == 2 and "unknown layer code" in bad.stderr
    bad = cli("train", "--task", "sorting")
    assert bad.returncode == 2 and "invalid choice" in bad.stderr
    bad = cli("train", "--task", "copy", "--eval-sizes", "4,x")
    assert bad.returncode == 2 and "comma-separated integers" in bad.stderr


def test_a_short_copy_run_learns_to_copy(tmp_path):
    # A CI-sized version of the cpu preset's recipe (many batches of short sequences, loss on the answer only):
    # a two-layer RoPE model learns to copy strings of up to 4 symbols in a few seconds. Seeded, so the
    # accuracies are the same numbers every run; the threshold leaves a wide margin below them.
    torch.manual_seed(0)
    run = TrainConfig(task="copy", preset="cpu", model=dict(pattern="R", n_layer=2, n_embd=64), steps=200,
                      batch_size=32, train_max_size=4, eval_sizes=[1, 2, 3, 4], eval_every=200, eval_batches=2,
                      lr=3e-3, warmup=20, out_dir=str(tmp_path), progress=False)
    accuracy = train(run)["final"]["accuracy_by_size"]
    assert min(accuracy.values()) >= 0.8, accuracy


def test_cpu_preset_sets_each_task_apart_from_text():
    text, copy = TrainConfig(task="text", preset="cpu").resolved(), TrainConfig(task="copy", preset="cpu").resolved()
    assert text.steps == PRESETS["cpu"]["steps"] and text.model["n_embd"] == 128
    assert copy.steps == PRESETS["cpu"]["tasks"]["copy"]["steps"]
    assert copy.eval_sizes[:2 * copy.train_max_size] == list(range(1, 2 * copy.train_max_size + 1))
    addition = TrainConfig(task="addition", preset="cpu").resolved()     # the task entry may set L as well
    assert addition.train_max_size == 2 and addition.eval_sizes == [1, 2, 3, 4, 6, 8]
    assert TrainConfig(task="addition", preset="cpu", train_max_size=8).resolved().train_max_size == 8
    mine = TrainConfig(task="copy", preset="cpu", steps=7, model=dict(n_embd=32)).resolved()
    assert mine.steps == 7 and mine.model["n_embd"] == 32 and mine.model["n_layer"] == copy.model["n_layer"]


def test_constant_logit_scaling_multiplies_only_nope_logits():
    """logit_scaling="constant" (the fixed factor 10 = temperature 0.1 of a nanochat variant) scales the NoPE layers'
    logits only: on an all-NoPE model it equals temperature 1/c, on RoPE layers it does nothing."""
    idx = torch.randint(0, 256, (2, 12), generator=torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    scaled = GPT(GPTConfig(pattern="N", **TINY, logit_scaling="constant", constant_logit_scale=4.0)).double()
    torch.manual_seed(0)
    cooled = GPT(GPTConfig(pattern="N", **TINY, attn_temperature=0.25)).double()
    torch.testing.assert_close(scaled(idx), cooled(idx), rtol=1e-12, atol=1e-12)
    torch.manual_seed(0)
    rope_scaled = GPT(GPTConfig(pattern="R", **TINY, logit_scaling="constant")).double()
    torch.manual_seed(0)
    rope_plain = GPT(GPTConfig(pattern="R", **TINY)).double()
    torch.testing.assert_close(rope_scaled(idx), rope_plain(idx), rtol=0, atol=0)
    with pytest.raises(ValueError, match="constant_logit_scale"):
        GPTConfig(constant_logit_scale=0.0)


def _every_code(**options) -> GPTConfig:
    pattern = options.pop("pattern", "".join(LAYER_CODES))
    return GPTConfig(pattern=pattern, n_layer=len(pattern), n_embd=32, n_head=4, window=4, chunk_size=4,
                     max_seq_len=32, **options)


def test_compiled_model_with_every_layer_code_has_no_graph_break_and_agrees_with_eager():
    # fullgraph=True fails on the first graph break: a host synchronisation (.item(), bool(tensor)) in any layer's
    # forward, or any Python the compiler cannot trace, would stop it here.
    torch.manual_seed(0)
    eager = GPT(_every_code(logit_scaling="swan"))
    compiled_model = GPT(_every_code(logit_scaling="swan"))
    compiled_model.load_state_dict(eager.state_dict())
    compiled = torch.compile(compiled_model, fullgraph=True)
    idx = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(1))
    out_eager, out_compiled = eager(idx), compiled(idx)
    torch.testing.assert_close(out_compiled, out_eager, rtol=1e-5, atol=1e-5)
    out_eager.logsumexp(-1).mean().backward()
    out_compiled.logsumexp(-1).mean().backward()
    for (name, p), q in zip(eager.named_parameters(), compiled_model.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.parametrize("options", [{"sinks": True, "pattern": "RNSCPHAT"}, {"softcap": 30.0, "pattern": "RNSCPHAT"},
                                     {"logit_scaling": "llama4", "qk_norm": "rope", "pattern": "RNSCPHAT"},
                                     {"logit_scaling": "constant", "absolute_positions": "learned"},
                                     {"absolute_positions": "sinusoidal", "n_kv_head": 2, "pattern": "RNSCPHAT"}])
def test_every_option_traces_as_one_graph(options):
    # The eager backend traces with dynamo and runs the captured graph as is: graph breaks fail, numbers are eager's.
    torch.manual_seed(0)
    model = GPT(_every_code(**options))
    idx = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(1))
    traced = torch.compile(model, backend="eager", fullgraph=True)
    torch.testing.assert_close(traced(idx), model(idx), rtol=0, atol=0)
