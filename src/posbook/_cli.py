"""Pieces the two command lines share (``python -m posbook``, ``python -m posbook.experiments``)."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from typing import Callable


def positive_int(text: str) -> int:
    """An argparse type: a positive integer written in decimal (``1e3`` and ``0`` are refused)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def quiet_on_closed_pipe(main: Callable[[], int]) -> int:
    """Run a command line's ``main`` and return its exit status; when the reader of standard output goes away
    first (``... | head -1``), return 1 with nothing on standard error instead of a BrokenPipeError traceback."""
    try:
        status = main()
        sys.stdout.flush()      # what is still buffered would otherwise fail at exit, outside this try
        return status
    except BrokenPipeError:
        # Python's documented recipe (the signal module's note on SIGPIPE): standard output now goes nowhere, so
        # the interpreter's own flush at exit does not raise a second time.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1


def sweep_command(grid: str, *options: str) -> str:
    """The command that trains a grid of ``posbook.experiments.grids.GRIDS``, for a message to suggest: a grid at
    another scale than the CPU's is named ``<grid>.<preset>`` there but trained by ``sweep <grid> --preset
    <preset>`` (``sweep extrapolation.colab`` is refused)."""
    chapter, _, preset = grid.partition(".")
    scale = ["--preset", preset] if preset else []
    return shlex.join(["python", "-m", "posbook.experiments", "sweep", chapter, *scale, *options])
