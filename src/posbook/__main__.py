"""Command line: ``python -m posbook inspect CONFIG.json [--context N] [--batch B] [--dtype bf16] [--plot FILE.png]
[--json]``.

Prints what a model's config does to position and to the KV cache (:func:`posbook.config_report.config_report`);
``-`` reads the config from standard input. A failure is one line on standard error. Exit status: 0 when the report
is printed (a part posbook does not model is said so in it), 1 when posbook can report nothing of the config (its
message), 2 for a bad command line or an input that is not a readable JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Sequence

from ._cli import positive_int
from .config_report import KV_DTYPES, config_report, format_report, plot_report

REFUSED, BAD_INPUT = 1, 2


class _Failure(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class _Parser(argparse.ArgumentParser):
    # argparse prints its usage before the error; here every failure is the one line main prints.
    def error(self, message: str) -> None:  # type: ignore[override]
        raise _Failure(BAD_INPUT, message)


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m posbook", description="posbook on the command line.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    i = sub.add_parser("inspect", help="what a model's config does to position and to the KV cache",
                       description=__doc__.split("\n\n")[1], epilog="exit status: 0 report printed, 1 nothing "
                       "of the config can be reported, 2 bad command line or unreadable input")
    i.add_argument("config", help="a config.json, or - for standard input")
    i.add_argument("--context", type=positive_int, help="context length N (default: max_position_embeddings)")
    i.add_argument("--batch", type=positive_int, default=1, help="sequences in the cache (default: 1)")
    i.add_argument("--dtype", choices=tuple(KV_DTYPES), default="bf16", help="cache dtype (default: bf16)")
    i.add_argument("--plot", type=Path, help="also draw the spectra into this PNG")
    i.add_argument("--json", action="store_true", help="print the report as JSON instead of text")
    return p


def _read(source: str) -> dict[str, Any]:
    name = "standard input" if source == "-" else source
    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise _Failure(BAD_INPUT, f"cannot read {source}: no such file") from None
    except IsADirectoryError:
        raise _Failure(BAD_INPUT, f"cannot read {source}: it is a directory") from None
    except PermissionError:
        raise _Failure(BAD_INPUT, f"cannot read {source}: permission denied") from None
    except UnicodeDecodeError:
        raise _Failure(BAD_INPUT, f"cannot read {name}: not UTF-8 text") from None
    except OSError as error:
        raise _Failure(BAD_INPUT, f"cannot read {source}: {error.strerror or error}") from None
    try:
        config = json.loads(text)
    except json.JSONDecodeError as error:
        raise _Failure(BAD_INPUT, f"{name} is not JSON ({error})") from None
    if not isinstance(config, dict):
        raise _Failure(BAD_INPUT, f"{name} must hold a JSON object (a model config), got a JSON "
                                  f"{type(config).__name__}")
    return config


def _inspect(args: argparse.Namespace) -> None:
    if args.plot is not None:
        if args.plot.is_dir():
            raise _Failure(BAD_INPUT, f"cannot write the plot to {args.plot}: it is a directory")
        if not args.plot.resolve().parent.is_dir():
            raise _Failure(BAD_INPUT, f"cannot write the plot to {args.plot}: folder {args.plot.parent} does not exist")
        if args.plot.suffix.lower() != ".png":
            raise _Failure(BAD_INPUT, f"cannot write the plot to {args.plot}: it must be a .png file")
    config = _read(args.config)
    try:
        report = config_report(config, context=args.context, batch=args.batch, dtype=args.dtype)
        if args.plot is not None:
            plot_report(report, args.plot)
    except (ValueError, TypeError) as error:
        raise _Failure(REFUSED, str(error)) from None
    except OSError as error:
        raise _Failure(BAD_INPUT, f"cannot write the plot to {args.plot}: {error.strerror or error}") from None
    print(json.dumps(report, indent=2, allow_nan=False) if args.json else format_report(report))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line on ``argv`` (default: ``sys.argv[1:]``) and return the exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    name = "posbook inspect" if argv[:1] == ["inspect"] else "posbook"
    try:
        _inspect(parser().parse_args(argv))
    except _Failure as failure:
        print(f"{name}: error: {str(failure).replace(chr(10), ' ')}", file=sys.stderr)
        return failure.status
    return 0


if __name__ == "__main__":
    sys.exit(main())
