"""Algorithmic tasks with controlled lengths, for length-generalisation experiments.

Each task turns a problem size n into one token sequence ``prompt + answer``; the loss and the exact-match
accuracy count only the answer tokens. Training draws n from [1, L]; evaluation goes to n = 2L and beyond,
where a position scheme either generalises or does not (Kazemnejad et al. 2023 ran this comparison).

=========  ==========================================================  ==============================
task       sequence                                                    answer
=========  ==========================================================  ==============================
copy       BOS x₁ … xₙ SEP                                             x₁ … xₙ EOS
copy-      the same, with n distinct symbols (n ≤ 16): every symbol     x₁ … xₙ EOS
distinct   names one place, so content alone can find the next one
reverse    BOS x₁ … xₙ SEP                                             xₙ … x₁ EOS
addition   BOS a₀ … aₙ₋₁ PLUS b₀ … bₙ₋₁ SEP (digits least significant  c₀ … cₙ EOS  (c = a + b)
           first, as is usual for length generalisation)
passkey    BOS filler … MARK d₁ … d₅ MARK … filler QUERY SEP           d₁ … d₅ EOS
           (n filler tokens, the needle at a uniformly random depth)
copy-      copy's tokens at position ids s+n+1, s+1 … s+n, s               x₁ … xₙ at ids s+1 … s+n
coupled    (s a random offset)                                         (Cho et al. 2024)
reverse-   reverse's tokens at position ids s, s+1 … s+n, s+n+1            xₙ … x₁ at ids s+n … s+1
coupled
copy-      BOS a₁ x₁ … aₙ xₙ SEP, labels a₁ < … < aₙ drawn from 64         a₁ x₁ … aₙ xₙ EOS (Zhou et al.
indexed                                                                2023's index hints)
flip-flop  BOS o₁ b₁ … oₙ bₙ READ: n instructions, each WRITE or       b EOS, b the bit of the last
           SKIP and a bit; o₁ is WRITE, each later one WRITE with      WRITE (Liu et al. 2023's flip-
           probability 1/10                                            flop, with one read at the end)
=========  ==========================================================  ==============================

A task that sets its own position ids (the coupled ones) hands them out with its batches, for
:meth:`posbook.experiments.model.GPT.forward`; the others leave them to the model (0, 1, 2, …).

Exact match under teacher forcing (every answer token is the argmax given the correct prefix) equals exact match
under greedy decoding: if every step's argmax is right, greedy decoding reproduces the answer, and if one is
wrong, greedy decoding diverges there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from .. import _checks

N_SYMBOLS = 16                     # content symbols 0..15; the digits are symbols 0..9
BOS, SEP, EOS, PAD, PLUS, QUERY, MARK = range(N_SYMBOLS, N_SYMBOLS + 7)
VOCAB_SIZE = 24                    # 23 tokens used, rounded up: every task but the indexed one
IGNORE = -100                      # target value that the loss and the accuracy skip
PASSKEY_DIGITS = 5
N_LABELS = 64                      # index labels of copy-indexed: up to 64 items, labels 23 … 86
LABEL = N_SYMBOLS + 7              # the first label token
WRITE, SKIP, READ = LABEL, LABEL + 1, LABEL + 2     # flip-flop's instructions (its own vocabulary: no labels)
FLIP_FLOP_WRITE_RATE = 0.1         # Liu et al.'s FFL(0.8): a write and a read each 10% of the instructions


@dataclass(frozen=True)
class Example:
    """One example: its tokens, where the answer starts, and each token's position id (None: 0, 1, 2, …)."""

    tokens: list[int]
    answer_start: int
    positions: list[int] | None = None

    def __post_init__(self):
        _checks.numbers("tokens", self.tokens, integer=True, min_len=2, min_value=0)
        _checks.number("answer_start", self.answer_start, integer=True, min_value=1,
                       max_value=len(self.tokens) - 1)
        if self.positions is not None:
            _checks.numbers("positions", self.positions, integer=True, min_value=0)
            if len(self.positions) != len(self.tokens):
                raise ValueError(f"positions must give one id per token ({len(self.tokens)}), got "
                                 f"{len(self.positions)}")


@dataclass(frozen=True)
class Task:
    """One algorithmic task: how it writes a problem of size n (``example(n, generator, max_offset)``), how many
    tokens that takes, the largest size it has (None: every size) and its vocabulary. ``max_offset`` is the largest
    random start of a task that sets its own position ids (ignored by the others)."""

    summary: str
    example: Callable[[int, torch.Generator, int], Example]
    length: Callable[[int], int]
    max_size: int | None = None
    vocab_size: int = VOCAB_SIZE
    positions: bool = False          # the task sets its own position ids

    def __post_init__(self):
        _checks.text("summary", self.summary)
        _checks.function("example", self.example)
        _checks.function("length", self.length)
        if self.max_size is not None:
            _checks.size("max_size", self.max_size)
        _checks.size("vocab_size", self.vocab_size, min_value=VOCAB_SIZE)     # the shared tokens come first
        _checks.flag("positions", self.positions)


def _symbols(n: int, gen: torch.Generator, distinct: bool = False) -> list[int]:
    return (torch.randperm(N_SYMBOLS, generator=gen)[:n] if distinct else
            torch.randint(0, N_SYMBOLS, (n,), generator=gen)).tolist()


def _copy(n, gen, max_offset, *, distinct=False, reverse=False):
    x = _symbols(n, gen, distinct)
    prompt = [BOS, *x, SEP]
    return Example(prompt + (x[::-1] if reverse else x) + [EOS], len(prompt))


def _addition(n, gen, max_offset):
    a = torch.randint(0, 10, (n,), generator=gen).tolist()
    b = torch.randint(0, 10, (n,), generator=gen).tolist()
    answer, carry = [], 0
    for da, db in zip(a, b):          # least significant digit first
        carry, digit = divmod(da + db + carry, 10)
        answer.append(digit)
    answer.append(carry)
    prompt = [BOS, *a, PLUS, *b, SEP]
    return Example(prompt + answer + [EOS], len(prompt))


def _passkey(n, gen, max_offset):
    key = torch.randint(0, 10, (PASSKEY_DIGITS,), generator=gen).tolist()
    filler = torch.randint(10, N_SYMBOLS, (n,), generator=gen).tolist()  # filler never uses digits
    depth = int(torch.randint(0, n + 1, (1,), generator=gen))
    prompt = [BOS, *filler[:depth], MARK, *key, MARK, *filler[depth:], QUERY, SEP]
    return Example(prompt + key + [EOS], len(prompt))


def _coupled(n, gen, max_offset, *, reverse=False):
    """Position coupling (Cho et al. 2024): each answer token takes the position id of the input token it copies.
    The input holds ids s+1 … s+n (s a random offset in 0 … max_offset); BOS and SEP take the ids just outside it,
    s and s+n+1, one at each end: SEP, where the answer starts, gets the end the answer starts from (s+n+1 for
    reverse, s for copy) and BOS the other. Every prediction then reads the token one id further on (copy) or back
    (reverse), and the last one finds BOS there, the cue for EOS: one rule at every length."""
    x = _symbols(n, gen)
    s = int(torch.randint(0, max_offset + 1, (1,), generator=gen))
    inputs = list(range(s + 1, s + n + 1))
    start, end = (s + n + 1, s) if reverse else (s, s + n + 1)
    answer = x[::-1] if reverse else x
    return Example([BOS, *x, SEP, *answer, EOS], n + 2,
                   [end, *inputs, start, *(inputs[::-1] if reverse else inputs), end])


def _indexed(n, gen, max_offset, *, reverse=False):
    """Index hints (Zhou et al. 2023): every item carries a label, an ascending random draw from N_LABELS labels,
    and the answer repeats label and item (from the last label down, for reverse); finding the next item is then
    finding the next label's item, by content."""
    if n > N_LABELS:
        raise ValueError(f"task '{'reverse' if reverse else 'copy'}-indexed' has problems of size at most "
                         f"{N_LABELS}: got {n}")
    x = _symbols(n, gen)
    labels = (torch.randperm(N_LABELS, generator=gen)[:n].sort().values + LABEL).tolist()
    pairs = list(zip(labels, x))
    prompt = [BOS, *(token for pair in pairs for token in pair), SEP]
    answer = [token for pair in (pairs[::-1] if reverse else pairs) for token in pair]
    return Example(prompt + answer + [EOS], len(prompt))


def _flip_flop(n, gen, max_offset):
    """Flip-flop (Liu et al. 2023) with one read, at the end: n instructions, each an op and a bit; the first writes,
    each later one writes with probability FLIP_FLOP_WRITE_RATE and is skipped otherwise. The answer is the bit of
    the last write: found by content (WRITE, not SKIP) and order (the latest of them), wherever it lies."""
    writes = (torch.rand(n, generator=gen) < FLIP_FLOP_WRITE_RATE).tolist()
    bits = torch.randint(0, 2, (n,), generator=gen).tolist()
    ops = [WRITE] + [WRITE if w else SKIP for w in writes[1:]]
    last = max(i for i, op in enumerate(ops) if op == WRITE)
    prompt = [BOS, *(token for pair in zip(ops, bits) for token in pair), READ]
    return Example(prompt + [bits[last], EOS], len(prompt))


TASKS: dict[str, Task] = {
    "copy": Task("copy n symbols", lambda n, g, o: _copy(n, g, o), lambda n: 2 * n + 3),
    "copy-distinct": Task("copy n distinct symbols: each names one place, so content alone finds the next",
                          lambda n, g, o: _copy(n, g, o, distinct=True), lambda n: 2 * n + 3, max_size=N_SYMBOLS),
    "reverse": Task("write n symbols backwards", lambda n, g, o: _copy(n, g, o, reverse=True), lambda n: 2 * n + 3),
    "addition": Task("add two n-digit numbers, least significant digit first", _addition, lambda n: 3 * n + 5),
    "passkey": Task("retrieve 5 digits hidden in n filler tokens", _passkey, lambda n: n + 2 * PASSKEY_DIGITS + 6),
    "copy-coupled": Task("copy, each answer token at its input token's position id", _coupled, lambda n: 2 * n + 3,
                         positions=True),
    "reverse-coupled": Task("reverse, each answer token at its input token's position id (mirrored)",
                            lambda n, g, o: _coupled(n, g, o, reverse=True), lambda n: 2 * n + 3, positions=True),
    "copy-indexed": Task("copy n labelled items: ascending random labels before each", _indexed, lambda n: 4 * n + 3,
                         max_size=N_LABELS, vocab_size=LABEL + N_LABELS + 1),
    "reverse-indexed": Task("reverse n labelled items: the answer runs from the last label down",
                            lambda n, g, o: _indexed(n, g, o, reverse=True), lambda n: 4 * n + 3,
                            max_size=N_LABELS, vocab_size=LABEL + N_LABELS + 1),
    "flip-flop": Task("the bit of the last of n write-or-skip instructions", _flip_flop, lambda n: 2 * n + 4,
                      vocab_size=READ + 1),
}
"""The registry of algorithmic tasks, name → :class:`Task`; a new task is one entry here.

:meta hide-value:
"""
MAX_SIZE = {name: task.max_size for name, task in TASKS.items() if task.max_size is not None}
"""The largest problem size of each task that has one."""


def sequence_length(task: str, n: int) -> int:
    """Tokens in one example of size n (prompt and answer)."""
    _checks.choice("task", task, TASKS)
    _checks.number("n", n, integer=True, positive=True)
    return TASKS[task].length(n)


def _example(task: str, n: int, gen: torch.Generator, max_offset: int = 0) -> Example:
    return TASKS[task].example(n, gen, max_offset)


def make_batch(task: str, sizes: list[int], generator: torch.Generator, *, max_offset: int = 0,
               with_positions: bool = False):
    """Inputs and targets [batch, T] for examples of the given sizes, right-padded with PAD; with
    ``with_positions``, also their position ids [batch, T]: the task's own (coupled tasks, whose start is drawn
    from 0 … ``max_offset``), else 0, 1, 2, … (padding continues the count).

    ``targets[b, t]`` is the token the model must predict after reading ``inputs[b, :t + 1]``; it is ``IGNORE``
    except on the answer (including its EOS).
    """
    _checks.choice("task", task, TASKS)
    _checks.numbers("sizes", sizes, integer=True, min_value=1, max_value=_checks.MAX_SIZE)
    _checks.generator("generator", generator, optional=False)
    _checks.size("max_offset", max_offset, min_value=0)
    _checks.flag("with_positions", with_positions)
    if TASKS[task].positions and not with_positions:
        raise ValueError(f"task {task!r} sets its own position ids: pass with_positions=True and give the ids to the "
                         f"model (GPT.forward's position_ids), or its answers cannot be read")
    limit = MAX_SIZE.get(task)
    for n in sizes:
        if limit is not None and n > limit:
            raise ValueError(f"task {task!r} has problems of size at most {limit}: sizes entries must be <= {limit}, "
                             f"got {n}")
    examples = [_example(task, int(n), generator, max_offset) for n in sizes]
    t = max(len(example.tokens) for example in examples) - 1
    inputs = torch.full((len(sizes), t), PAD, dtype=torch.long)
    targets = torch.full((len(sizes), t), IGNORE, dtype=torch.long)
    positions = torch.arange(t).repeat(len(sizes), 1)
    for row, example in enumerate(examples):
        seq = torch.tensor(example.tokens)
        inputs[row, : len(seq) - 1] = seq[:-1]
        targets[row, example.answer_start - 1: len(seq) - 1] = seq[example.answer_start:]
        if example.positions is not None:
            ids = torch.tensor(example.positions[:-1])
            positions[row, : len(ids)] = ids
            positions[row, len(ids):] = ids[-1] + 1 + torch.arange(t - len(ids))
    return (inputs, targets, positions) if with_positions else (inputs, targets)


def exact_match(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Per example: 1.0 if every answer token is the argmax, else 0.0.

    ``logits`` [batch, T, vocab] (floating), ``targets`` [batch, T] (integer, IGNORE off the answer). Evaluation
    calls this on a model that may have diverged, so NaN and ±inf logits are not refused: torch's argmax takes
    NaN for the largest score."""
    answer, correct = _answer_hits(logits, targets)
    return (correct | ~answer).all(dim=-1).float()


def random_position_ids(batch: int, t: int, position_range: int, generator: torch.Generator) -> torch.Tensor:
    """Randomised position ids (Ruoss et al. 2023): for each of ``batch`` sequences of ``t`` tokens, an ordered
    random subset of 0 … position_range − 1, [batch, t]. Trained on short sequences this way, a model has met every
    id a longer test sequence uses, and only the order of ids (not their gaps) carries the token order."""
    _checks.size("batch", batch)
    _checks.size("t", t)
    _checks.size("position_range", position_range)
    _checks.generator("generator", generator, optional=False)
    if position_range < t:
        raise ValueError(f"position_range must be at least t={t} (t distinct ids), got {position_range}")
    return torch.stack([torch.randperm(position_range, generator=generator)[:t].sort().values for _ in range(batch)])


def token_accuracy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Per example: the fraction of its answer tokens (EOS included) that are the argmax. Arguments as for
    :func:`exact_match` (NaN and ±inf logits are scored, not refused); an example without answer tokens scores 1."""
    answer, correct = _answer_hits(logits, targets)
    return ((correct & answer).sum(dim=-1) / answer.sum(dim=-1).clamp(min=1)).float().where(answer.any(dim=-1), 1.0)


def exact_match_given_length(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Per example: 1.0 if every answer token but the final EOS is the argmax. This is exact match when the
    decoder is told the answer's length (it stops there instead of waiting for EOS), so a model that writes the
    right answer and never ends it is not scored as a failure. Arguments as for :func:`exact_match` (NaN and ±inf
    logits are scored, not refused)."""
    answer, correct = _answer_hits(logits, targets)
    # The last answer position of each row is its EOS: drop it from the answer.
    last = answer.shape[-1] - 1 - answer.flip(-1).int().argmax(dim=-1)
    answer = answer & (torch.arange(answer.shape[-1], device=answer.device) != last[:, None])
    return (correct | ~answer).all(dim=-1).float()


def _answer_hits(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(answer positions, argmax == target) for :func:`exact_match`'s arguments, checked as it checks them."""
    _checks.tensor("logits", logits, ndim=3, floating=True)
    _checks.tensor("targets", targets, ndim=2, integer=True)
    if logits.shape[:2] != targets.shape:
        raise ValueError(f"logits [batch, T, vocab] and targets [batch, T] must agree in batch and T, got "
                         f"{tuple(logits.shape)} and {tuple(targets.shape)}")
    if not logits.shape[-1]:
        raise ValueError(f"logits must score at least one token, got shape {tuple(logits.shape)}")
    answer = targets != IGNORE
    return answer, logits.argmax(-1) == targets
