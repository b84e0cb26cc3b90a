"""posbook.experiments.tasks and .corpus: the algorithmic tasks' answers and the byte corpus."""

from __future__ import annotations

import json

import pytest
import torch

from posbook.experiments import corpus as corpus_lib
from posbook.experiments import tasks as tasks_lib
from posbook.experiments.config import TrainConfig

OLD_BATCHES = "9baa3758815a5610"     # the five recorded tasks' batches before the coupled and indexed tasks existed


def test_tasks_have_the_right_answers():
    gen = torch.Generator().manual_seed(0)
    for task in tasks_lib.TASKS:
        for n in (1, 5, 12):
            example = tasks_lib._example(task, n, gen)
            tokens, start = example.tokens, example.answer_start
            assert len(tokens) == tasks_lib.sequence_length(task, n)
            prompt, answer = tokens[:start], tokens[start:-1]
            if task in ("copy", "copy-distinct", "copy-coupled", "copy-indexed"):
                assert answer == prompt[1:-1]
                if task == "copy-distinct":
                    assert len(set(answer)) == n
            elif task in ("reverse", "reverse-coupled"):
                assert answer == prompt[1:-1][::-1]
            elif task == "reverse-indexed":       # (label, item) pairs, from the last label down
                pairs = list(zip(prompt[1:-1:2], prompt[2:-1:2]))
                assert answer == [token for pair in pairs[::-1] for token in pair]
            elif task == "addition":
                a, b = prompt[1:n + 1], prompt[n + 2:2 * n + 2]
                value = lambda digits: sum(d * 10 ** i for i, d in enumerate(digits))  # noqa: E731
                assert value(answer) == value(a) + value(b)
            elif task == "flip-flop":              # the bit after the last WRITE
                ops = prompt[1:-1:2]
                assert ops[0] == tasks_lib.WRITE and set(ops) <= {tasks_lib.WRITE, tasks_lib.SKIP}
                last = max(i for i, op in enumerate(ops) if op == tasks_lib.WRITE)
                assert answer == [prompt[2 + 2 * last]] and prompt[-1] == tasks_lib.READ
            else:
                i = prompt.index(tasks_lib.MARK)
                assert answer == prompt[i + 1:i + 1 + tasks_lib.PASSKEY_DIGITS]
    x, y = tasks_lib.make_batch("copy", [2, 5], gen)
    perfect = torch.nn.functional.one_hot(y.clamp(min=0), tasks_lib.VOCAB_SIZE).float()
    assert tasks_lib.exact_match(perfect, y).tolist() == [1.0, 1.0]
    perfect[1, -1] = perfect[1, -1].roll(1)          # one wrong answer token (the EOS of the longer example)
    assert tasks_lib.exact_match(perfect, y).tolist() == [1.0, 0.0]
    # the longer example has 6 answer tokens, 5 right; told the answer's length, it needs no EOS and is right
    assert tasks_lib.token_accuracy(perfect, y).tolist() == pytest.approx([1.0, 5 / 6])
    assert tasks_lib.exact_match_given_length(perfect, y).tolist() == [1.0, 1.0]
    perfect[1, -2] = perfect[1, -2].roll(1)          # and now its last item too
    assert tasks_lib.exact_match_given_length(perfect, y).tolist() == [1.0, 0.0]


@pytest.mark.parametrize("task, step", [("copy-coupled", 1), ("reverse-coupled", -1)])
def test_a_coupled_answer_is_always_one_id_away(task, step):
    """Every answer token (and EOS) is predicted at a position whose id is one step (copy +1, reverse −1) from the
    id of the prompt token that holds the answer (BOS for EOS), at every size and offset."""
    gen = torch.Generator().manual_seed(0)
    x, y, ids = tasks_lib.make_batch(task, [1, 3, 9, 30], gen, max_offset=50, with_positions=True)
    for row in range(4):
        answer_start = int((y[row] != tasks_lib.IGNORE).nonzero().min())
        prompt = {int(i): int(t) for i, t in zip(ids[row, :answer_start + 1], x[row, :answer_start + 1])
                  if t != tasks_lib.SEP}
        for t in range(answer_start, int((y[row] != tasks_lib.IGNORE).nonzero().max()) + 1):
            expected = tasks_lib.BOS if y[row, t] == tasks_lib.EOS else int(y[row, t])
            assert prompt[int(ids[row, t]) + step] == expected
    assert int(ids.min()) >= 0 and int(ids[:, 0].max()) <= 50 + 30 + 1
    padded = ids[0, tasks_lib.sequence_length(task, 1) - 1:]      # ids of the padding continue from the last one
    assert torch.equal(padded.diff(), torch.ones(len(padded) - 1, dtype=torch.long))
    with pytest.raises(ValueError, match=f"^task '{task}' sets its own position ids: pass with_positions=True"):
        tasks_lib.make_batch(task, [3], gen)


def test_index_labels_rise_and_the_answer_repeats_them():
    gen = torch.Generator().manual_seed(0)
    tokens = tasks_lib._example("copy-indexed", 10, gen).tokens
    labels = tokens[1:21:2]
    assert labels == sorted(labels) and len(set(labels)) == 10
    assert all(tasks_lib.LABEL <= label < tasks_lib.TASKS["copy-indexed"].vocab_size for label in labels)
    assert tokens[22:42] == tokens[1:21]
    with pytest.raises(ValueError, match="sizes entries must be <= 64, got 65"):
        tasks_lib.make_batch("copy-indexed", [65], gen)
    reverse = tasks_lib._example("reverse-indexed", 10, gen).tokens
    assert reverse[22:42:2] == sorted(reverse[1:21:2], reverse=True) and reverse[22:24] == reverse[19:21]
    with pytest.raises(ValueError, match="task 'reverse-indexed' has problems of size at most 64: got 65"):
        tasks_lib._example("reverse-indexed", 65, gen)


def test_new_tasks_leave_the_old_tasks_batches_alone():
    """The batches of the recorded tasks are a function of the seed alone: the coupled tasks draw their offset
    after their symbols, and tasks without ids draw nothing more (hashes of batches the records trained on)."""
    import hashlib
    digest = hashlib.sha256()
    for task in ("copy", "copy-distinct", "reverse", "addition", "passkey"):
        for tensor in tasks_lib.make_batch(task, [1, 4, 7, 3], torch.Generator().manual_seed(1)):
            digest.update(tensor.numpy().tobytes())
    assert digest.hexdigest()[:16] == OLD_BATCHES


def test_copy_distinct_stops_at_the_alphabet():
    gen = torch.Generator().manual_seed(0)
    x, _ = tasks_lib.make_batch("copy-distinct", [tasks_lib.N_SYMBOLS], gen)
    assert sorted(x[0, 1:tasks_lib.N_SYMBOLS + 1].tolist()) == list(range(tasks_lib.N_SYMBOLS))   # a permutation
    with pytest.raises(ValueError, match="sizes entries must be <= 16, got 17"):
        tasks_lib.make_batch("copy-distinct", [3, 17], gen)
    with pytest.raises(ValueError, match="train_max_size must be <= 16, got 20"):
        TrainConfig(task="copy-distinct", preset="cpu", train_max_size=20, eval_sizes=[4]).resolved()
    with pytest.raises(ValueError, match="eval_sizes entry must be <= 16, got 32"):
        TrainConfig(task="copy-distinct", preset="cpu", eval_sizes=[4, 32]).resolved()
    assert max(TrainConfig(task="copy-distinct", preset="cpu").resolved().eval_sizes) == tasks_lib.N_SYMBOLS


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


def test_the_running_pythons_standard_library_is_a_corpus_too():
    corpus = corpus_lib.load_corpus(max_bytes=300_000, root=corpus_lib.stdlib_root())
    assert corpus.n_files > 10 and len(corpus.sha256) == 64 and corpus.root == str(corpus_lib.stdlib_root())


def test_the_shipped_corpus_is_the_one_every_text_record_was_trained_on():
    """Whatever Python runs the tests (Colab's 3.12 has another standard library), the shipped files give the
    bytes the records hold the hash of."""
    from posbook.experiments import store
    checked = 0
    for path in sorted(store.SHIPPED_RECORDS.glob("*.json")):
        for label, entry in json.loads(path.read_text())["runs"].items():
            sha = entry["provenance"].get("corpus_sha256")
            if entry["run"]["task"] == "text" and sha and entry["provenance"]["device"] == "cpu":
                assert corpus_lib.load_corpus(entry["run"]["corpus_bytes"]).sha256 == sha, (path.name, label)
                checked += 1
    assert checked > 100
    shipped = corpus_lib.load_corpus(400_000)
    assert shipped.root.endswith("(shipped)") and shipped.n_files > 10


def test_a_corpus_too_small_to_split_is_refused_by_name(tmp_path):
    (tmp_path / "only.py").write_text("x = 1\n")
    with pytest.raises(ValueError, match="leave the corpus of .* too small to split"):
        corpus_lib.load_corpus(root=tmp_path)


def test_unigram_bits_is_the_entropy_of_the_byte_frequencies():
    assert corpus_lib.unigram_bits(torch.tensor([7] * 10, dtype=torch.uint8)) == 0.0
    assert abs(corpus_lib.unigram_bits(torch.arange(256, dtype=torch.uint8)) - 8.0) < 1e-12
    assert abs(corpus_lib.unigram_bits(torch.tensor([0, 0, 1, 2], dtype=torch.uint8)) - 1.5) < 1e-12
    with pytest.raises(ValueError, match="data must be a non-empty 1-D tensor"):
        corpus_lib.unigram_bits(torch.zeros(2, 3, dtype=torch.uint8))


def test_random_position_ids_are_ordered_distinct_and_cover_the_range():
    gen = torch.Generator().manual_seed(0)
    ids = tasks_lib.random_position_ids(200, 6, 40, gen)
    assert ids.shape == (200, 6) and bool((ids.diff(dim=-1) > 0).all())
    assert int(ids.min()) >= 0 and int(ids.max()) <= 39
    assert len(set(ids.flatten().tolist())) == 40        # short sequences still meet every id of the range
    with pytest.raises(ValueError, match="^position_range must be at least t=6"):
        tasks_lib.random_position_ids(2, 6, 5, gen)


def test_random_positions_are_for_tasks_that_leave_ids_to_the_model():
    run = TrainConfig(task="copy", preset="cpu", train_max_size=4, eval_sizes=[4, 8], random_positions=64)
    from posbook.experiments.config import gpt_config
    assert gpt_config(run).max_seq_len == 64           # room for learned embeddings of every id
    with pytest.raises(ValueError, match=r"^random_positions must be at least the longest sequence \(19 tokens\)"):
        TrainConfig(task="copy", preset="cpu", train_max_size=4, eval_sizes=[4, 8], random_positions=18).resolved()
    for task in ("text", "copy-coupled"):
        with pytest.raises(ValueError, match=f"^random_positions is for the algorithmic tasks .* not task '{task}'"):
            TrainConfig(task=task, preset="cpu", random_positions=4096).resolved()


def test_a_coupled_run_has_an_embedding_row_for_every_id_it_draws():
    from posbook.experiments.config import gpt_config
    run = TrainConfig(task="copy-coupled", preset="cpu", train_max_size=4, eval_sizes=[4, 8], max_offset=100)
    assert gpt_config(run).max_seq_len == 100 + 8 + 2
    x, y, ids = tasks_lib.make_batch("copy-coupled", [8] * 50, torch.Generator().manual_seed(0), max_offset=100,
                                     with_positions=True)
    assert int(ids[:, :-1].max()) < 110      # the padding after the longest example is never read


def test_flip_flop_writes_at_its_rate_and_its_answer_can_lie_anywhere():
    gen = torch.Generator().manual_seed(1)
    examples = [tasks_lib.TASKS["flip-flop"].example(64, gen, 0) for _ in range(400)]
    ops = torch.tensor([e.tokens[1:-3:2] for e in examples])            # 64 instructions each
    rate = (ops[:, 1:] == tasks_lib.WRITE).float().mean().item()
    assert abs(rate - tasks_lib.FLIP_FLOP_WRITE_RATE) < 0.01              # 25,200 draws: 4.7 standard errors
    # how far back the last write is: from the last instruction to the very first one
    depth = [64 - 1 - max(i for i, op in enumerate(row) if op == tasks_lib.WRITE) for row in ops.tolist()]
    assert min(depth) == 0 and max(depth) >= 40
    assert {e.tokens[-2] for e in examples} == {0, 1}                    # both answers occur
