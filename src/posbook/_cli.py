"""Pieces the two command lines share (``python -m posbook``, ``python -m posbook.experiments``)."""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    """An argparse type: a positive integer written in decimal (``1e3`` and ``0`` are refused)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value
