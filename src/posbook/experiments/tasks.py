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
=========  ==========================================================  ==============================

Exact match under teacher forcing (every answer token is the argmax given the correct prefix) equals exact match
under greedy decoding: if every step's argmax is right, greedy decoding reproduces the answer, and if one is
wrong, greedy decoding diverges there.
"""

from __future__ import annotations

import torch

from .. import _checks

N_SYMBOLS = 16                     # content symbols 0..15; the digits are symbols 0..9
BOS, SEP, EOS, PAD, PLUS, QUERY, MARK = range(N_SYMBOLS, N_SYMBOLS + 7)
VOCAB_SIZE = 24                    # 23 tokens used, rounded up
IGNORE = -100                      # target value that the loss and the accuracy skip
TASKS = ("copy", "copy-distinct", "reverse", "addition", "passkey")
PASSKEY_DIGITS = 5
MAX_SIZE = {"copy-distinct": N_SYMBOLS}      # the largest problem size of a task that has one (n distinct symbols)


def sequence_length(task: str, n: int) -> int:
    """Tokens in one example of size n (prompt and answer)."""
    _checks.choice("task", task, TASKS)
    _checks.number("n", n, integer=True, positive=True)
    return {"copy": 2 * n + 3, "copy-distinct": 2 * n + 3, "reverse": 2 * n + 3, "addition": 3 * n + 5,
            "passkey": n + 2 * PASSKEY_DIGITS + 6}[task]


def _example(task: str, n: int, gen: torch.Generator) -> tuple[list[int], int]:
    """One example as a token list and the index where the answer starts."""
    if task in ("copy", "copy-distinct", "reverse"):
        x = (torch.randperm(N_SYMBOLS, generator=gen)[:n] if task == "copy-distinct" else
             torch.randint(0, N_SYMBOLS, (n,), generator=gen)).tolist()
        answer = x[::-1] if task == "reverse" else x
        prompt = [BOS, *x, SEP]
    elif task == "addition":
        a = torch.randint(0, 10, (n,), generator=gen).tolist()
        b = torch.randint(0, 10, (n,), generator=gen).tolist()
        answer, carry = [], 0
        for da, db in zip(a, b):          # least significant digit first
            carry, digit = divmod(da + db + carry, 10)
            answer.append(digit)
        answer.append(carry)
        prompt = [BOS, *a, PLUS, *b, SEP]
    else:
        key = torch.randint(0, 10, (PASSKEY_DIGITS,), generator=gen).tolist()
        filler = torch.randint(10, N_SYMBOLS, (n,), generator=gen).tolist()  # filler never uses digits
        depth = int(torch.randint(0, n + 1, (1,), generator=gen))
        prompt = [BOS, *filler[:depth], MARK, *key, MARK, *filler[depth:], QUERY, SEP]
        answer = key
    return prompt + answer + [EOS], len(prompt)


def make_batch(task: str, sizes: list[int], generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and targets [batch, T] for examples of the given sizes, right-padded with PAD.

    ``targets[b, t]`` is the token the model must predict after reading ``inputs[b, :t + 1]``; it is ``IGNORE``
    except on the answer (including its EOS).
    """
    _checks.choice("task", task, TASKS)
    _checks.numbers("sizes", sizes, integer=True, min_value=1, max_value=_checks.MAX_SIZE)
    _checks.generator("generator", generator, optional=False)
    limit = MAX_SIZE.get(task)
    for n in sizes:
        if limit is not None and n > limit:
            raise ValueError(f"task {task!r} has problems of size at most {limit}: sizes entries must be <= {limit}, "
                             f"got {n}")
    examples = [_example(task, int(n), generator) for n in sizes]
    t = max(len(tokens) for tokens, _ in examples) - 1
    inputs = torch.full((len(sizes), t), PAD, dtype=torch.long)
    targets = torch.full((len(sizes), t), IGNORE, dtype=torch.long)
    for row, (tokens, answer_start) in enumerate(examples):
        seq = torch.tensor(tokens)
        inputs[row, : len(tokens) - 1] = seq[:-1]
        targets[row, answer_start - 1: len(tokens) - 1] = seq[answer_start:]
    return inputs, targets


def exact_match(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Per example: 1.0 if every answer token is the argmax, else 0.0.

    ``logits`` [batch, T, vocab] (floating), ``targets`` [batch, T] (integer, IGNORE off the answer). Evaluation
    calls this on a model that may have diverged, so NaN and ±inf logits are not refused: torch's argmax takes
    NaN for the largest score."""
    _checks.tensor("logits", logits, ndim=3, floating=True)
    _checks.tensor("targets", targets, ndim=2, integer=True)
    if logits.shape[:2] != targets.shape:
        raise ValueError(f"logits [batch, T, vocab] and targets [batch, T] must agree in batch and T, got "
                         f"{tuple(logits.shape)} and {tuple(targets.shape)}")
    if not logits.shape[-1]:
        raise ValueError(f"logits must score at least one token, got shape {tuple(logits.shape)}")
    answer = targets != IGNORE
    correct = (logits.argmax(-1) == targets) | ~answer
    return correct.all(dim=-1).float()
