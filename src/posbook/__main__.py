"""Command line: ``posbook inspect CONFIG [--context N] [--batch B] [--dtype bf16] [--memory 80GiB] [--plot FILE.png]
[--json]`` (``python -m posbook`` is the same command).

Prints what a model's config does to position and to the KV cache (:func:`posbook.report.config_report`).
CONFIG is a ``config.json``, a folder holding one (a downloaded model, a Hugging Face cache snapshot, or a cache
``models--org--name`` folder with a single snapshot), a name from :func:`posbook.models` (any case), or ``-`` for
standard input; a path that exists wins over a name. ``--memory`` adds the longest context that fits a KV-cache
budget at each dtype and a few batch sizes (:func:`posbook.kvcache.max_context_for_budget`).

A failure is one line on standard error. Exit status: 0 when the report is printed (a part posbook does not model
is said so in it), 1 when posbook can report nothing of the config (its message), 2 for a bad command line or an
input that is not a readable JSON object. Without a command the overview of the commands is printed on standard
output and the status is 2; ``--help`` prints it with status 0.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import textwrap
from fractions import Fraction
from pathlib import Path
from typing import Any, Sequence

from . import _checks
from ._cli import positive_int, quiet_on_closed_pipe
from .report import KV_DTYPES, config_report, format_report, plot_report
from .kvcache import format_bytes, max_context_for_budget
from .model_configs import model_config, models

REFUSED, BAD_INPUT = 1, 2

# The help texts are written for a terminal, apart from the docstrings: plain words, no reST markup, and raw text
# kept within 79 columns, a terminal's width, to which argparse also wraps the options.
COMMANDS = {
    "inspect": ("what a model's config does to position and to the KV cache",
                "posbook inspect llama-3.1-8b --memory 80GiB"),
}
"""Each command: its one-line description and an example, as the overview lists them."""

_OVERVIEW = """\
posbook: how position enters a transformer's attention, and what it costs
in the KV cache."""
_EPILOG = """\
Run posbook COMMAND --help for a command's options and examples;
python -m posbook is the same program. Without a command, posbook prints
this overview and exits with status 2; with --help, status 0."""
_EXIT = """\
exit status: 0 done, 1 posbook can report nothing of the config, 2 bad
command line or unreadable input"""
_INSPECT = """\
For each kind of attention layer in a model's config: its rotary spectrum
(rope type and parameters, wavelengths, how many planes turn fully within the
context, context extension, the factors on the logits); then the KV cache at a
context length, batch size and dtype; and warnings for settings known to go
wrong, each with its source.

The config is a config.json, a folder holding one (a downloaded model, a
Hugging Face cache snapshot, or a cache folder models--org--name with a single
snapshot), a model name from posbook's table in any case (llama-3.1-8b,
deepseek-v3; the list is posbook.models() in Python), or - for standard input.
A path that exists wins over a name."""
_INSPECT_EXAMPLES = """\
examples:
  posbook inspect config.json
  posbook inspect ~/.cache/huggingface/hub/models--Qwen--Qwen3-8B
  posbook inspect llama-3.1-8b --context 32768 --batch 8 --plot spectrum.png
  posbook inspect gemma-3-27b --memory 80GiB --json
  curl -sL https://huggingface.co/Qwen/Qwen3-8B/resolve/main/config.json \\
    | posbook inspect -

"""

_MEMORY_UNITS = {"": 1, "b": 1, "kb": 10**3, "kib": 2**10, "mb": 10**6, "mib": 2**20, "gb": 10**9, "gib": 2**30,
                 "tb": 10**12, "tib": 2**40}
_MEMORY_BATCHES = (1, 8, 32)
_MEMORY_FORMAT = "posbook.inspect.memory/1"
_TEXT_WIDTH = 88  # the report's own width (report.format_report)


class _Failure(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class _Parser(argparse.ArgumentParser):
    # argparse prints its usage before the error; here every failure is the one line main prints.
    def error(self, message: str) -> None:  # type: ignore[override]
        raise _Failure(BAD_INPUT, message)


def memory_size(text: str) -> int:
    """An argparse type: a size in bytes, plain or with a decimal or binary unit (``80GiB``, ``24GB``, ``512MiB``).

    Units are read in any case. A fraction of a byte is dropped: the caches counted hold whole bytes.
    """
    match = re.fullmatch(r"(\d+(?:\.\d+)?) ?([A-Za-z]*)", text.strip())
    unit = match[2].lower() if match else None
    nbytes = Fraction(match[1]) * _MEMORY_UNITS[unit] if unit in _MEMORY_UNITS else 0
    if nbytes < 1:
        raise argparse.ArgumentTypeError(f"expected a positive size in bytes or with a unit (B, KB, KiB, MB, MiB, GB, "
                                         f"GiB, TB, TiB), such as 80GiB, 24GB or 512MiB; got {text!r}")
    return int(nbytes)


def parser() -> argparse.ArgumentParser:
    raw = argparse.RawDescriptionHelpFormatter
    commands = "\n".join(f"  {name:<10}{summary}\n  {'':<10}e.g. {example}"
                         for name, (summary, example) in COMMANDS.items())
    p = _Parser(prog="posbook", usage="posbook [-h] COMMAND ...", formatter_class=raw,
                description=f"{_OVERVIEW}\n\ncommands:\n{commands}", epilog=f"{_EPILOG}\n\n{_EXIT}")
    sub = p.add_subparsers(dest="command", parser_class=_Parser, help=argparse.SUPPRESS)
    i = sub.add_parser("inspect", prog="posbook inspect", formatter_class=raw, description=_INSPECT,
                       epilog=_INSPECT_EXAMPLES + _EXIT)
    i.add_argument("config", help="a config.json, a folder holding one, a model name, or - for standard input")
    i.add_argument("--context", type=positive_int, metavar="N",
                   help="context length N (default: max_position_embeddings)")
    i.add_argument("--batch", type=positive_int, default=1, metavar="B", help="sequences in the cache (default: 1)")
    i.add_argument("--dtype", choices=tuple(KV_DTYPES), default="bf16", help="cache dtype (default: bf16)")
    i.add_argument("--memory", type=memory_size, metavar="SIZE",
                   help="a KV-cache budget (80GiB, 24GB, 512MiB, or bytes): also print the longest context that "
                        f"fits it at each dtype for batch {', '.join(map(str, _MEMORY_BATCHES))} and --batch")
    i.add_argument("--plot", type=Path, metavar="FILE.png", help="also draw the spectra into this PNG")
    i.add_argument("--json", action="store_true", help="print the report as JSON instead of text")
    return p


def _table_names() -> dict[str, str]:
    """Every spelling the model table answers to, lower-cased → the table's name: its names and Hub ids."""
    names = {}
    for name, entry in models().items():
        names[name.lower()] = name
        if entry.get("hf_id"):
            names[entry["hf_id"].lower()] = name
    return names


def _config_file(folder: Path) -> Path:
    """The config.json of a model folder, of a Hub cache snapshot, or of a Hub cache model folder's one snapshot."""
    if (folder / "config.json").is_file():
        return folder / "config.json"
    snapshots = folder / "snapshots"
    if not snapshots.is_dir():
        raise _Failure(BAD_INPUT, f"cannot read {folder}: it is a directory without a config.json (nor a Hugging Face "
                                  "cache folder with snapshots/)")
    found = sorted(p.name for p in snapshots.iterdir() if p.is_dir())
    if not found:
        raise _Failure(BAD_INPUT, f"cannot read {folder}: this Hugging Face cache folder holds no snapshot")
    if len(found) > 1:
        raise _Failure(BAD_INPUT, f"cannot read {folder}: this Hugging Face cache folder holds {len(found)} snapshots "
                                  f"({', '.join(found)}); pass the one to read, {snapshots}/HASH")
    if not (snapshots / found[0] / "config.json").is_file():
        raise _Failure(BAD_INPUT, f"cannot read {folder}: its snapshot {found[0]} holds no config.json")
    return snapshots / found[0] / "config.json"


def _read(source: str) -> dict[str, Any]:
    if source != "-" and not Path(source).exists():
        names = _table_names()
        if source.lower() in names:
            return model_config(names[source.lower()])
        if source.endswith(".json") or Path(source).is_absolute():  # meant as a path: the table is beside the point
            raise _Failure(BAD_INPUT, f"cannot read {source}: no such file")
        close = [names[m] for m in _checks.close_matches(source.lower(), names)]
        close = list(dict.fromkeys(close))  # a name and its Hub id may both come close
        hint = (f"; did you mean {', '.join(close[:-1])} or {close[-1]}?" if len(close) > 1 else
                f"; did you mean {close[0]}?" if close else " (its names: posbook.models())")
        raise _Failure(BAD_INPUT, f"cannot read {source}: no such file, not a model name in posbook's table{hint}")
    name = "standard input" if source == "-" else source
    try:
        path = _config_file(Path(source)) if Path(source).is_dir() else Path(source)
        text = sys.stdin.read() if source == "-" else path.read_text(encoding="utf-8")
    except FileNotFoundError:  # removed after the check above
        raise _Failure(BAD_INPUT, f"cannot read {source}: no such file") from None
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


def _memory(config: dict[str, Any], budget: int, batch: int, max_pos: int | None) -> dict[str, Any]:
    """The longest context that fits ``budget`` bytes of KV cache, for each batch size and dtype width."""
    widths: dict[int, list[str]] = {}  # bf16 and fp16 take the same bytes: one answer for both
    for dtype, nbytes in KV_DTYPES.items():
        widths.setdefault(nbytes, []).append(dtype)
    rows = []
    for b in sorted({*_MEMORY_BATCHES, batch}):
        for nbytes, dtypes in widths.items():
            n = max_context_for_budget(config, budget, b, nbytes)
            rows.append({"batch": b, "dtypes": dtypes, "bytes_per_number": nbytes, "max_context": n,
                         "fits_max_position_embeddings": None if max_pos is None else n is None or n >= max_pos})
    return {"format": _MEMORY_FORMAT, "budget_bytes": budget, "max_position_embeddings": max_pos, "rows": rows}


def _memory_lines(memory: dict[str, Any], report: dict[str, Any]) -> list[str]:
    head = f"KV budget · {format_bytes(memory['budget_bytes'])} ({memory['budget_bytes']:,} B)"
    if "error" in memory:
        return [head, *textwrap.wrap(memory["error"], _TEXT_WIDTH, initial_indent="  ", subsequent_indent="  ")]
    max_pos = memory["max_position_embeddings"]

    def cell(row: dict[str, Any]) -> str:
        if row["max_context"] is None:
            return "any length"
        return f"all {max_pos:,}" if row["fits_max_position_embeddings"] else f"{row['max_context']:,}"

    table = {"sequences": list(dict.fromkeys("/".join(r["dtypes"]) for r in memory["rows"]))}
    for row in memory["rows"]:
        table.setdefault(row["batch"], []).append(cell(row))
    lines = [f"{head}: the longest context that fits"]
    lines += ["  " + "".join(f"{c:<17}" for c in [first, *rest]).rstrip() for first, rest in table.items()]
    shown = {c.split()[0] for rest in table.values() for c in rest}
    if "all" in shown:
        lines.append("  all: the model's whole context, max_position_embeddings, fits")
    if "any" in shown:
        lines.append("  any length: every layer keeps at most its window, and that cache fits")
    if report["kv_cache"].get("linear_state"):
        lines.append("  not counted: the linear-attention state each sequence also keeps (above)")
    return lines


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
    memory = None
    if args.memory is not None:
        try:
            memory = _memory(config, args.memory, args.batch, report["max_position_embeddings"])
        except ValueError as error:  # a cache posbook does not model; the report above says so too
            memory = {"format": _MEMORY_FORMAT, "budget_bytes": args.memory, "error": str(error)}
    if args.json:
        print(json.dumps(report if memory is None else {**report, "memory": memory}, indent=2, allow_nan=False))
    else:
        print(format_report(report) + ("" if memory is None else "\n\n" + "\n".join(_memory_lines(memory, report))))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line on ``argv`` (default: ``sys.argv[1:]``) and return the exit status; a reader that
    closes the pipe early (``posbook inspect ... | head``) ends it quietly."""
    return quiet_on_closed_pipe(lambda: _main(sys.argv[1:] if argv is None else list(argv)))


def _main(argv: list[str]) -> int:
    name = "posbook inspect" if argv[:1] == ["inspect"] else "posbook"
    try:
        p = parser()
        args = p.parse_args(argv)
        if args.command is None:
            print(p.format_help(), end="")
            return BAD_INPUT
        _inspect(args)
    except _Failure as failure:
        print(f"{name}: error: {str(failure).replace(chr(10), ' ')}", file=sys.stderr)
        return failure.status
    return 0


if __name__ == "__main__":
    sys.exit(main())
