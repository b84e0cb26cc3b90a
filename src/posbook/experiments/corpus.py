"""A byte-level text corpus that every reader gets bit for bit: the Python standard library's own source files.

Real code, offline, the same on a laptop, a CI runner and Colab: posbook ships the source files of CPython 3.11.7's
standard library (the top-level test suite and every tests/ folder left out; about 2 MB as tar.xz, with the Python
Software Foundation's licence beside them), because another Python's standard library is another corpus (Colab's
Python 3.12 changes the bytes, so every batch and every recorded number). ``load_corpus(root=stdlib_root())`` reads
the running Python's own files instead. Files are read in order and each goes to validation when a hash of its
relative path says so (about ``val_fraction`` of them), so which files go to validation does not depend on their
order or sizes. The SHA-256 of the selected bytes is recorded with every result.

Bits per byte (nanochat's ``val_bpb``) is the cross-entropy in nats divided by ln 2 per byte; with one token per
byte it is simply the mean loss / ln 2, comparable across vocabularies.
"""

from __future__ import annotations

import functools
import hashlib
import math
import sysconfig
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

import torch

from .. import _checks

VOCAB_SIZE = 256
SHIPPED_CORPUS = Path(__file__).parent / "data" / "stdlib-3.11.7.tar.xz"
"""The source files the corpus is read from by default, in reading order (tools/build_corpus.py writes it)."""


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
    """The running Python's standard library folder (``load_corpus(root=stdlib_root())`` reads it)."""
    return Path(sysconfig.get_paths()["stdlib"])


def is_corpus_file(rel: str) -> bool:
    """Whether a .py file at ``rel`` (relative to the standard library, '/'-separated) belongs to the corpus: test
    suites and installed packages do not."""
    _checks.text("rel", rel)
    return not (rel.startswith(("site-packages/", "test/", "idlelib/idle_test/")) or "/tests/" in rel)


def folder_sources(root: Path | str) -> Iterator[tuple[str, bytes]]:
    """(relative path, bytes) of every corpus file under the folder ``root``, in sorted path order, read lazily."""
    root = _checks.path("root", root)
    if not root.is_dir():
        raise ValueError(f"root must be a directory of Python sources, got {str(root)!r}")

    def read() -> Iterator[tuple[str, bytes]]:
        for path in sorted(root.rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if is_corpus_file(rel):
                yield rel, path.read_bytes()
    return read()


@functools.cache
def shipped_sources() -> tuple[tuple[str, bytes], ...]:
    """(relative path, bytes) of the shipped standard-library files, in the archive's order (read once)."""
    with tarfile.open(SHIPPED_CORPUS, "r:xz") as archive:
        return tuple((member.name, archive.extractfile(member).read()) for member in archive.getmembers()
                     if member.isfile() and member.name.endswith(".py"))


def load_corpus(max_bytes: int = 8_000_000, val_fraction: float = 0.1, root: Path | str | None = None) -> Corpus:
    """Read up to ``max_bytes`` of .py source into train/val tensors: the files posbook ships (``root=None``), or
    those under ``root`` (test suites and site-packages excluded), whole files in order until the next would pass
    ``max_bytes``."""
    _checks.number("max_bytes", max_bytes, integer=True, positive=True)
    _checks.number("val_fraction", val_fraction, positive=True)
    if val_fraction >= 1:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
    if root is None:
        sources, where = shipped_sources(), f"{SHIPPED_CORPUS.name} (shipped)"
    else:
        root = _checks.path("root", root)
        sources, where = folder_sources(root), str(root)
    return _split(sources, max_bytes, val_fraction, where)


def _split(sources: Iterable[tuple[str, bytes]], max_bytes: int, val_fraction: float, where: str) -> Corpus:
    train, val, total, n_files = bytearray(), bytearray(), 0, 0
    for rel, data in sources:
        if total + len(data) > max_bytes:
            break
        digest = hashlib.sha256(rel.encode()).digest()
        (val if digest[0] < 256 * val_fraction else train).extend(data + b"\n")
        total += len(data)
        n_files += 1
    if not train or not val:
        raise ValueError(f"max_bytes={max_bytes} and val_fraction={val_fraction} leave the corpus of {where} too "
                         f"small to split (train {len(train)} B, val {len(val)} B)")
    sha = hashlib.sha256(bytes(train) + bytes(val)).hexdigest()
    as_tensor = lambda b: torch.frombuffer(bytearray(b), dtype=torch.uint8).clone()  # noqa: E731
    return Corpus(as_tensor(train), as_tensor(val), sha, n_files, where)


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
