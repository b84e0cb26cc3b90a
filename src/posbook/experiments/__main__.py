"""Command line: ``python -m posbook.experiments {train,evaluate,sweep,show,presets,patterns}``.

Under torchrun (``torchrun --nproc_per_node=N -m posbook.experiments train ...``) every process runs this same
command and training uses DistributedDataParallel.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import re
import sys
import typing
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .._cli import positive_int, quiet_on_closed_pipe, sweep_command
from ..device import default_device
from .checkpoints import load_model
from .config import FIELD_GROUPS, PRESETS, TASK_NAMES, TrainConfig, gpt_config
from .evaluation import evaluate
from .grids import GRID_PRESETS, GRIDS, grid_name
from .grids import runs as grid_runs
from .model import ABSOLUTE_POSITIONS, LAYER_CODES, LOGIT_SCALINGS, QK_NORM_MODES, GPTConfig
from .store import (SHIPPED_RECORDS, flat_metrics, initial_weights, load_record, record_path, run_grid,
                    stale_labels)
from .trainer import train

# Help texts are read in a terminal: plain words, no reST markup (the module docstring above is for the API page).
_DESCRIPTION = "Train and evaluate the experiment chapters' small models, and train and read their recorded grids."
_EPILOG = ("Run python -m posbook.experiments COMMAND --help for the options of a command. Under torchrun "
           "(torchrun --nproc_per_node=N -m posbook.experiments train ...) every process runs the same command "
           "and training uses DistributedDataParallel.")
TABLE_WIDTH = 100   # show's tables fit a terminal this wide: wider ones are split into pages of columns


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(part) for part in text.split(",") if part]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers such as 8,16,32, got {text!r}") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"expected positive sizes such as 8,16,32, got {text!r}")
    return sizes


def _folder(text: str) -> Path:
    """An argparse type: a folder, which may not exist yet, but not a file."""
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"expected a folder, got the file {text!r}")
    return path


class _OneLineParser(argparse.ArgumentParser):
    # argparse prints its usage before the error; here a bad command line is one line, like every other failure.
    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _model_default(name: str) -> Any:
    """A GPTConfig field's default, for the help of the option that overrides it."""
    return GPTConfig.__dataclass_fields__[name].default


# The model options of train: flag -> (type, help). Each sets the GPTConfig field of its name (dashes as
# underscores) when given; the ones the preset sets say so.
MODEL_OPTIONS: dict[str, tuple[type, str]] = {
    "--n-layer": (int, "number of layers (default: the preset's)"),
    "--n-embd": (int, "model width (default: the preset's)"),
    "--n-head": (int, "attention heads per layer (default: the preset's)"),
    "--n-kv-head": (int, "key and value heads, fewer than --n-head for grouped-query attention (default: as many "
                         "as --n-head)"),
    "--window": (int, f"tokens a sliding-window layer (code S) sees (default: {_model_default('window')})"),
    "--chunk-size": (int, f"tokens per chunk of a chunked layer (code C) (default: {_model_default('chunk_size')})"),
    "--rope-theta": (float, f"RoPE base (default: {_model_default('rope_theta'):g})"),
    "--rope-fraction": (float, "the fraction of frequencies that rotate in p-RoPE (code P), of dimensions in "
                               f"partial RoPE (code H) (default: {_model_default('rope_fraction')})"),
    "--softcap": (float, "cap the attention logits smoothly at this value, as Gemma 2 does (default: no cap)"),
}
# The options of train that differ from their TrainConfig field's name (the first is what messages name; the rest
# are accepted as well). Every other field's option is its name with dashes: eval_seq_lens -> --eval-seq-lens.
OPTION_NAMES: dict[str, tuple[str, ...]] = {"out_dir": ("--out", "--out-dir")}
_METAVARS = {"out_dir": "DIR", "init_from": "GRID:LABEL", "device": "DEVICE"}


def option_name(name: str) -> str:
    """The train option that sets the TrainConfig field (or GPTConfig field) ``name``, as messages name it."""
    return OPTION_NAMES.get(name, ("--" + name.replace("_", "-"),))[0]


def _integer(text: str) -> int:
    """An argparse type: an integer written in decimal (its range is TrainConfig's to check)."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer such as 100, got {text!r}") from None


def _real(text: str) -> float:
    """An argparse type: a real number such as 0.001 or 1e-3."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number such as 0.001, got {text!r}") from None


# How a TrainConfig field's type is read from the command line: its type hint -> argparse keywords.
_READERS: dict[Any, dict[str, Any]] = {
    int | None: dict(type=_integer), int: dict(type=_integer), float | None: dict(type=_real), float: dict(type=_real),
    list[int] | None: dict(type=_sizes), str | None: dict(), str: dict(),
    bool: dict(action="store_true"), bool | None: dict(action=argparse.BooleanOptionalAction),
}


def _set_by_preset() -> set[str]:
    """The TrainConfig fields some preset (or its entry for a task) sets: left out, they take the preset's value."""
    names = {key for values in PRESETS.values() for key in values}
    names |= {key for values in PRESETS.values() for task in values.get("tasks", {}).values() for key in task}
    return names - {"model", "tasks"}


def _run_option_help(field: dataclasses.Field, reader: dict[str, Any], preset_sets: set[str]) -> str:
    """A run option's help: its field's ``help`` metadata, how a list is written, and its default."""
    text = field.metadata["help"]
    if reader.get("type") is _sizes:
        head, brace, default = text.partition(" (default:")
        text = f"{head}, comma-separated such as 8,16,32{brace}{default}"
    if "(default:" in text:
        return text
    if field.name in preset_sets:
        return text + " (default: the preset's)"
    if field.default is not None and not isinstance(field.default, bool):
        return text + f" (default: {field.default})"
    return text


def _add_run_options(groups: dict[str, Any]) -> None:
    """One option per TrainConfig field, each in its field's group, read by the field's type hint: an integer, a
    real number, comma-separated sizes, a name, a flag; for ``model``, the options of GPTConfig fields."""
    hints = typing.get_type_hints(TrainConfig)
    preset_sets = _set_by_preset()
    choices = {"task": TASK_NAMES, "preset": sorted(PRESETS)}
    for field in dataclasses.fields(TrainConfig):
        if field.name == "model":
            _add_model_options(groups["model"])
            continue
        if hints[field.name] not in _READERS:
            raise TypeError(f"TrainConfig.{field.name} has type {hints[field.name]}, which train cannot read from "
                            f"the command line; readable types: {list(_READERS)}")
        reader = _READERS[hints[field.name]]
        names = OPTION_NAMES.get(field.name, (option_name(field.name),))
        options = dict(reader, dest=field.name, help=_run_option_help(field, reader, preset_sets))
        if field.name in choices:
            options["choices"] = choices[field.name]
        if field.name in _METAVARS:
            options["metavar"] = _METAVARS[field.name]
        groups[field.metadata["group"]].add_argument(*names, **options)


def _add_model_options(model: Any) -> None:
    """The options that set GPTConfig fields of the run's model (TrainConfig.model)."""
    model.add_argument("--pattern", default="R",
                       help="layer codes, repeated to the number of layers, e.g. SSSN (see the patterns command; "
                            "default: R)")
    model.add_argument("--absolute-positions", choices=ABSOLUTE_POSITIONS, default="none",
                       help="a table of positions added to the token embeddings (default: none)")
    model.add_argument("--qk-norm", choices=QK_NORM_MODES, default="none",
                       help="normalise queries and keys in every layer (all), only in the layers that rotate "
                            "(rope), or nowhere (none, the default)")
    model.add_argument("--logit-scaling", choices=LOGIT_SCALINGS, default="none",
                       help="scale the logits of NoPE layers (code N) by query position: SWAN's log scaling, "
                            "Llama 4's temperature tuning, or a constant factor (default: none)")
    model.add_argument("--sinks", action="store_true", help="add a learned sink logit per head in every layer")
    for flag, (kind, text) in MODEL_OPTIONS.items():
        model.add_argument(flag, type=_integer if kind is int else _real, help=text)


def _add_train(sub: argparse._SubParsersAction) -> None:
    t = sub.add_parser("train", help="train one model; with --out, write checkpoint.pt and results.json there",
                       description="Train one model and print its final metrics. An option left out takes the "
                                   "preset's value.")
    _add_run_options({name: t.add_argument_group(name) for name in FIELD_GROUPS})


def parser() -> argparse.ArgumentParser:
    p = _OneLineParser(prog="python -m posbook.experiments", description=_DESCRIPTION, epilog=_EPILOG)
    sub = p.add_subparsers(dest="command", required=True, parser_class=_OneLineParser, metavar="COMMAND",
                           help="one of the commands below")
    _add_train(sub)

    e = sub.add_parser("evaluate", help="accuracy by size (tasks) or bits per byte (text) of a checkpoint")
    e.add_argument("checkpoint", help="a checkpoint.pt that train wrote")
    e.add_argument("--eval-sizes", type=_sizes,
                   help="tasks: comma-separated problem sizes, e.g. 8,16,32 (default: those the run was trained with)")
    e.add_argument("--eval-seq-lens", type=_sizes,
                   help="text: comma-separated lengths, e.g. 128,512 (default: those the run was trained with)")

    chapter_grids = sorted(name for name in GRIDS if "." not in name)
    w = sub.add_parser("sweep", help="train a chapter's grid of runs and record the results, by default in the "
                                     "installed package (--out DIR: in DIR)")
    w.add_argument("grid", choices=chapter_grids, metavar="GRID", help="a chapter's grid: " + ", ".join(chapter_grids))
    w.add_argument("--preset", choices=GRID_PRESETS, default="cpu",
                   help="the grid's scale: cpu (the records the chapters check, trained on the CPU) or colab (the "
                        "GPU-scale version, where a grid has one; trained on the default device)")
    w.add_argument("--jobs", type=positive_int, default=1, help="processes at once, one thread each (default: 1)")
    w.add_argument("--retrain", action="store_true", help="train every run again, not only missing or stale ones")
    w.add_argument("--list", action="store_true", help="print the grid's labels and whether each is recorded")
    w.add_argument("--out", type=_folder, metavar="DIR",
                   help="write the record (DIR/GRID.json) and the weights it keeps into DIR, and read what is "
                        f"already recorded there (default: {SHIPPED_RECORDS}, inside the installed package)")

    s = sub.add_parser("show", help="a recorded grid's final metrics per run label")
    s.add_argument("grid", choices=sorted(GRIDS), metavar="GRID",
                   help="a grid: " + ", ".join(sorted(GRIDS)) + " (a name with .colab is a grid's GPU-scale version)")
    s.add_argument("--json", action="store_true", help="print {label: final metrics} as JSON instead of tables")
    s.add_argument("--records", type=_folder, metavar="DIR",
                   help=f"read the record from DIR, where sweep --out DIR wrote it (default: {SHIPPED_RECORDS})")

    sub.add_parser("presets", help="list the presets and their settings")
    sub.add_parser("patterns", help="list the layer codes a pattern is made of")
    return p


def _numeric_first(keys: list[str]) -> list[str]:
    """Sizes and lengths in numeric order ("4" before "16"), then any other keys in their order."""
    return sorted(keys, key=lambda key: (0, int(key)) if key.isdigit() else (1, 0))


def _by_family(rows: dict[str, dict[str, float]]) -> dict[str, dict[str, dict[str, float]]]:
    """Flat metrics per label regrouped by family, family -> label -> key: first "" for the plain metrics
    ("train_loss"), then each part before a last '/' ("accuracy_by_size"), keyed by the part after it (the size)."""
    families: dict[str, dict[str, dict[str, float]]] = {"": {}}
    for label, metrics in rows.items():
        for name, value in metrics.items():
            family, _, key = name.rpartition("/")
            families.setdefault(family, {}).setdefault(label, {})[key] = value
    return {family: table for family, table in families.items() if table}


def _pages(count: int, first: int, width: int) -> list[range]:
    """``count`` columns ``width`` wide, two spaces apart, after a first column ``first`` wide, split into pages of
    nearly equal size whose lines fit TABLE_WIDTH (one column a page at least)."""
    fit = max(1, (TABLE_WIDTH - first) // (2 + width))
    size = math.ceil(count / math.ceil(count / fit))
    return [range(start, min(start + size, count)) for start in range(0, count, size)]


def _table(title: str, rows: dict[str, dict[str, float]], keys: list[str]) -> list[str]:
    """Lines of a table of ``rows[label][key]``, one column per key, split into pages that fit TABLE_WIDTH; each
    page after a ``title`` line (none for an empty title) and a header of the keys."""
    first = max(len("label"), *map(len, rows))
    cells = {label: [f"{row[key]:.4f}" if key in row else "" for key in keys] for label, row in rows.items()}
    width = max(len(text) for text in [*keys, *(text for texts in cells.values() for text in texts)])
    lines: list[str] = []
    for n, page in enumerate(_pages(len(keys), first, width)):
        if lines:
            lines.append("")
        if title:
            lines.append(f"{title}:" if n == 0 else f"{title} (continued):")
        lines.append(f"{'label':<{first}}" + "".join(f"  {keys[i]:>{width}}" for i in page))
        lines += [(f"{label:<{first}}" + "".join(f"  {texts[i]:>{width}}" for i in page)).rstrip()
                  for label, texts in cells.items()]
    return lines


def show(grid: str, as_json: bool = False, records: Path | None = None) -> int:
    """Print a recorded grid's final metrics per label: JSON ``{label: final}``, or tables of the scalar ones: the
    plain metrics, then one table per family of metrics by size or length, its columns in numeric order."""
    record = load_record(grid, records)
    if not record:
        where = [] if records is None else ["--out", str(records)]
        raise ValueError(f"grid {grid!r} has no record in {record_path(grid, records).parent} yet; run "
                         f"`{sweep_command(grid, *where)}`")
    if as_json:
        print(json.dumps({label: entry["final"] for label, entry in record.items()}, indent=1))
        return 0
    tables = []
    for family, table in _by_family({label: flat_metrics(entry["final"]) for label, entry in record.items()}).items():
        keys = _numeric_first(list(dict.fromkeys(key for metrics in table.values() for key in metrics)))
        # Every label gets a row in every table (blank where a run lacks the family), so rows line up across tables.
        tables.append("\n".join(_table(family, {label: table.get(label, {}) for label in record}, keys)))
    print("\n\n".join(tables))
    return 0


def _train_config(args: argparse.Namespace) -> TrainConfig:
    """The run a train command line asks for: the options given, the preset's values for the rest."""
    model_fields = ["pattern", "absolute_positions", "qk_norm", "logit_scaling",
                    *(flag[2:].replace("-", "_") for flag in MODEL_OPTIONS)]
    model = {name: getattr(args, name) for name in model_fields if getattr(args, name) is not None}
    if args.sinks:
        model["sinks"] = True
    # An option left out keeps TrainConfig's default: None (the preset's value), or the field's own default.
    values = {field.name: getattr(args, field.name) for field in dataclasses.fields(TrainConfig)
              if field.name != "model" and getattr(args, field.name) is not None}
    return TrainConfig(model=model, **values)


@contextmanager
def _naming_the_option(args: argparse.Namespace) -> Iterator[None]:
    """Turn a ValueError or TypeError about a value given on the train command line into one that names its option
    (``argument --steps: steps must be >= 1, got 0``): posbook's messages begin with the name of what is wrong."""
    try:
        yield
    except (ValueError, TypeError) as error:
        message = str(error)
        name = re.match(r"[A-Za-z_]\w*", message)
        given = {dest for dest, value in vars(args).items()
                 if dest != "command" and value is not None and value is not False}
        if name is None or name[0] not in given:
            raise
        kind = TypeError if isinstance(error, TypeError) else ValueError
        raise kind(f"argument {option_name(name[0])}: {message}") from None


def _train(args: argparse.Namespace) -> int:
    # Every option is checked, and the weights a run starts from are read, before anything trains, so that a
    # command line that fails fails at once, in one line that names its option.
    with _naming_the_option(args):
        run = _train_config(args)
        gpt_config(run)
        weights = initial_weights(run)
        if run.out_dir is None:
            if run.device is None:
                default_device()        # a bad POSBOOK_DEVICE is refused before the note
            if os.environ.get("RANK", "0") == "0":      # under torchrun, once
                print("note: no --out given: the model and results are not saved", file=sys.stderr)
        results = train(run, weights)
    print(json.dumps({"final": results["final"], "tokens_per_s": results["tokens_per_s"],
                      "provenance": results["provenance"]}, indent=2))
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    import torch

    device = default_device()
    model, run = load_model(args.checkpoint, device)
    if args.eval_sizes:
        run.eval_sizes = args.eval_sizes
    if args.eval_seq_lens:
        run.eval_seq_lens = args.eval_seq_lens
    data = None
    if run.task == "text":
        from .corpus import load_corpus
        data = load_corpus(run.corpus_bytes)
    with torch.no_grad():
        print(json.dumps(evaluate(model, run, data, device), indent=2))
    return 0


def _sweep(args: argparse.Namespace) -> int:
    grid = grid_name(args.grid, args.preset)
    runs = grid_runs(grid)
    stale = set(stale_labels(grid, args.out))
    if args.list:
        for label in runs:
            print(f"{label:32s} {'to train' if label in stale else 'recorded'}")
        return 0
    todo = len(runs) if args.retrain else len(stale)
    print(f"{grid}: training {todo} of {len(runs)} runs with {args.jobs} job(s)", file=sys.stderr)
    run_grid(grid, retrain=args.retrain, jobs=args.jobs, save=True, records=args.out)
    print(record_path(grid, args.out))
    return 0


def _show(args: argparse.Namespace) -> int:
    return show(args.grid, as_json=args.json, records=args.records)


def _presets(args: argparse.Namespace) -> int:
    print(json.dumps(PRESETS, indent=2))
    return 0


def _patterns(args: argparse.Namespace) -> int:
    for code, kind in LAYER_CODES.items():
        print(f"{code}  {kind.summary}")
    print("A pattern repeats to n_layer: 'SSSN' over 8 layers is SSSNSSSN.")
    return 0


COMMANDS = {"train": _train, "evaluate": _evaluate, "sweep": _sweep, "show": _show, "presets": _presets,
            "patterns": _patterns}
"""Every command: a function of the parsed command line that returns the exit status."""


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except BrokenPipeError:     # the reader of standard output left: quiet_on_closed_pipe ends quietly
        raise
    except (ValueError, TypeError, OSError) as error:  # one line, never a traceback
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(quiet_on_closed_pipe(main))
