"""A byte-level text corpus that every machine already has: the Python standard library's own source files.

Real code, offline, on a laptop, a CI runner and Colab alike. Files are read in sorted order and each goes to
validation when a hash of its relative path says so (about ``val_fraction`` of them), so the split does not
depend on file order or sizes. The SHA-256 of the selected bytes is recorded with every result: two machines
with different Python versions get different corpora, and the hash says so.

Bits per byte (nanochat's ``val_bpb``) is the cross-entropy in nats divided by ln 2 per byte; with one token per
byte it is simply the mean loss / ln 2, comparable across vocabularies.
"""

from __future__ import annotations

import hashlib
import math
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import torch

from .. import _checks

VOCAB_SIZE = 256


@dataclass(frozen=True)
class Corpus:
    train: torch.Tensor      # uint8 bytes
    val: torch.Tensor
    sha256: str              # of train bytes followed by val bytes
    n_files: int
    root: str

    def __post_init__(self):
        for name in ("train", "val"):
            value = _checks.tensor(name, getattr(self, name), ndim=1)
            if value.dtype != torch.uint8:
                raise TypeError(f"{name} must be a 1-D uint8 tensor of bytes, got dtype {value.dtype}")
        _checks.text("sha256", self.sha256)
        _checks.size("n_files", self.n_files)
        _checks.text("root", self.root)


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def load_corpus(max_bytes: int = 8_000_000, val_fraction: float = 0.1, root: Path | str | None = None) -> Corpus:
    """Read up to ``max_bytes`` of .py source (test suites and site-packages excluded) into train/val tensors."""
    _checks.number("max_bytes", max_bytes, integer=True, positive=True)
    _checks.number("val_fraction", val_fraction, positive=True)
    if val_fraction >= 1:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
    root = stdlib_root() if root is None else _checks.path("root", root)
    if not root.is_dir():
        raise ValueError(f"root must be a directory of Python sources, got {str(root)!r}")
    train, val, total, n_files = bytearray(), bytearray(), 0, 0
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith(("site-packages/", "test/", "idlelib/idle_test/")) or "/tests/" in rel:
            continue
        data = path.read_bytes()
        if total + len(data) > max_bytes:
            break
        digest = hashlib.sha256(rel.encode()).digest()
        (val if digest[0] < 256 * val_fraction else train).extend(data + b"\n")
        total += len(data)
        n_files += 1
    if not train or not val:
        raise ValueError(f"max_bytes={max_bytes} and val_fraction={val_fraction} leave the corpus under {root} too "
                         f"small to split (train {len(train)} B, val {len(val)} B)")
    sha = hashlib.sha256(bytes(train) + bytes(val)).hexdigest()
    as_tensor = lambda b: torch.frombuffer(bytearray(b), dtype=torch.uint8).clone()  # noqa: E731
    return Corpus(as_tensor(train), as_tensor(val), sha, n_files, str(root))


def text_batch(data: torch.Tensor, batch_size: int, seq_len: int, generator: torch.Generator
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """Random windows of ``seq_len + 1`` bytes of ``data`` (a 1-D integer tensor, the corpus's uint8 bytes): inputs
    [batch, seq_len] and next-byte targets, int64."""
    _checks.tensor("data", data, ndim=1, integer=True)
    _checks.size("batch_size", batch_size)
    _checks.size("seq_len", seq_len)
    _checks.generator("generator", generator, optional=False)
    if data.numel() <= seq_len + 1:
        raise ValueError(f"data holds {data.numel()} bytes, too few for seq_len={seq_len}")
    starts = torch.randint(0, data.numel() - seq_len - 1, (batch_size,), generator=generator)
    windows = torch.stack([data[s: s + seq_len + 1] for s in starts.tolist()]).long()
    return windows[:, :-1], windows[:, 1:]


def unigram_bits(data: torch.Tensor) -> float:
    """Entropy of the byte frequencies of ``data`` in bits per byte: the best a model can do without context."""
    _checks.tensor("data", data, integer=True)
    if data.ndim != 1 or data.numel() == 0:
        raise ValueError(f"data must be a non-empty 1-D tensor of bytes, got shape {tuple(data.shape)}")
    _checks.token_ids("data", data, VOCAB_SIZE, ndim=1)
    freq = torch.bincount(data.long(), minlength=256).double()
    p = freq[freq > 0] / freq.sum()
    return float(-(p * p.log2()).sum())


def bits_per_byte(mean_loss_nats: float) -> float:
    """Mean next-byte cross-entropy in nats (finite, ≥ 0) → bits per byte."""
    _checks.number("mean_loss_nats", mean_loss_nats, min_value=0)
    return mean_loss_nats / math.log(2)
