"""Command line: ``python -m posbook.experiments {train,evaluate,sweep,show,presets,patterns}``.

Under torchrun (``torchrun --nproc_per_node=N -m posbook.experiments train ...``) every process runs this same
command and training uses DistributedDataParallel.
"""

from __future__ import annotations

import argparse
import json
import sys

from .._cli import positive_int
from .model import ABSOLUTE_POSITIONS, LAYER_CODES, LOGIT_SCALINGS, QK_NORM_MODES
from .sweep import GRID_PRESETS, GRIDS, flat_metrics, grid_name, load_record, record_path, run_grid, stale_labels
from .trainer import PRESETS, TASK_NAMES, TrainConfig, evaluate, load_model, train


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(part) for part in text.split(",") if part]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers such as 8,16,32, got {text!r}") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"expected positive sizes such as 8,16,32, got {text!r}")
    return sizes


class _OneLineParser(argparse.ArgumentParser):
    # argparse prints its usage before the error; here a bad command line is one line, like every other failure.
    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def parser() -> argparse.ArgumentParser:
    p = _OneLineParser(prog="python -m posbook.experiments", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True, parser_class=_OneLineParser)

    t = sub.add_parser("train", help="train one model and write checkpoint.pt and results.json to --out")
    t.add_argument("--task", choices=TASK_NAMES, default="text")
    t.add_argument("--preset", choices=sorted(PRESETS), help="default: POSBOOK_PRESET, else chosen from the hardware")
    t.add_argument("--pattern", default="R", help="layer codes, repeated to n_layer (see the 'patterns' command)")
    t.add_argument("--absolute-positions", choices=ABSOLUTE_POSITIONS, default="none")
    t.add_argument("--qk-norm", choices=QK_NORM_MODES, default="none")
    t.add_argument("--logit-scaling", choices=LOGIT_SCALINGS, default="none")
    t.add_argument("--window", type=int)
    t.add_argument("--chunk-size", type=int)
    t.add_argument("--rope-theta", type=float)
    t.add_argument("--rope-fraction", type=float)
    t.add_argument("--sinks", action="store_true")
    t.add_argument("--softcap", type=float)
    t.add_argument("--n-layer", type=int)
    t.add_argument("--n-embd", type=int)
    t.add_argument("--n-head", type=int)
    t.add_argument("--n-kv-head", type=int)
    for name in ("steps", "batch-size", "seq-len", "train-max-size", "curriculum-steps", "warmup", "eval-every", "eval-batches",
                 "checkpoint-every", "seed", "corpus-bytes"):
        t.add_argument(f"--{name}", type=int)
    t.add_argument("--lr", type=float)
    t.add_argument("--eval-sizes", type=_sizes, help="comma-separated problem sizes, e.g. 8,16,32")
    t.add_argument("--eval-seq-lens", type=_sizes, help="text: comma-separated lengths for bits per byte, e.g. 128,512")
    t.add_argument("--out", help="output folder (checkpoint.pt, results.json)")
    t.add_argument("--resume", action="store_true",
                   help="continue from --out/checkpoint.pt (--out must exist; without a checkpoint it says so and "
                        "starts from step 0)")
    t.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None)

    e = sub.add_parser("evaluate", help="accuracy by size (tasks) or bits per byte (text) of a checkpoint")
    e.add_argument("checkpoint")
    e.add_argument("--eval-sizes", type=_sizes)
    e.add_argument("--eval-seq-lens", type=_sizes)

    chapter_grids = sorted(name for name in GRIDS if "." not in name)
    w = sub.add_parser("sweep", help="train a chapter's grid of runs and write its record into the package")
    w.add_argument("grid", choices=chapter_grids)
    w.add_argument("--preset", choices=GRID_PRESETS, default="cpu",
                   help="the grid's scale: cpu (the records the chapters check, trained on the CPU) or colab (the "
                        "GPU-scale version, where a grid has one; trained on the default device)")
    w.add_argument("--jobs", type=positive_int, default=1, help="processes at once, one thread each (default 1)")
    w.add_argument("--retrain", action="store_true", help="train every run again, not only missing or stale ones")
    w.add_argument("--list", action="store_true", help="print the grid's labels and whether each is recorded")

    s = sub.add_parser("show", help="a recorded grid's final metrics per run label")
    s.add_argument("grid", choices=sorted(GRIDS), help="a grid name; a GPU-scale grid is e.g. extrapolation.colab")
    s.add_argument("--json", action="store_true", help="print {label: final metrics} as JSON instead of a table")

    sub.add_parser("presets", help="list the presets and their settings")
    sub.add_parser("patterns", help="list the layer codes a pattern is made of")
    return p


MODEL_FLAGS = {"pattern": "pattern", "absolute_positions": "absolute_positions", "qk_norm": "qk_norm",
               "logit_scaling": "logit_scaling", "window": "window", "chunk_size": "chunk_size",
               "rope_theta": "rope_theta", "rope_fraction": "rope_fraction", "softcap": "softcap",
               "n_layer": "n_layer", "n_embd": "n_embd", "n_head": "n_head", "n_kv_head": "n_kv_head"}


def show(grid: str, as_json: bool = False) -> int:
    """Print a recorded grid's final metrics per label: JSON ``{label: final}``, or a table of the scalar ones."""
    record = load_record(grid)
    if not record:
        raise ValueError(f"grid {grid!r} has no record yet; run `python -m posbook.experiments sweep {grid}`")
    if as_json:
        print(json.dumps({label: entry["final"] for label, entry in record.items()}, indent=1))
        return 0
    rows = {label: flat_metrics(entry["final"]) for label, entry in record.items()}
    columns = list(dict.fromkeys(key for metrics in rows.values() for key in metrics))
    width = max(len(label) for label in rows)
    print(f"{'label':<{width}}  " + "  ".join(f"{c:>{max(8, len(c))}}" for c in columns))
    for label, metrics in rows.items():
        cells = [f"{metrics[c]:>{max(8, len(c))}.4f}" if c in metrics else " " * max(8, len(c)) for c in columns]
        print(f"{label:<{width}}  " + "  ".join(cells))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command == "presets":
        print(json.dumps(PRESETS, indent=2))
        return 0
    if args.command == "patterns":
        for code, kind in LAYER_CODES.items():
            print(f"{code}  {kind.summary}")
        print("A pattern repeats to n_layer: 'SSSN' over 8 layers is SSSNSSSN.")
        return 0
    try:
        if args.command == "show":
            return show(args.grid, as_json=args.json)
        if args.command == "sweep":
            grid = grid_name(args.grid, args.preset)
            runs = GRIDS[grid]()
            stale = set(stale_labels(grid, runs))
            if args.list:
                for label in runs:
                    print(f"{label:32s} {'to train' if label in stale else 'recorded'}")
                return 0
            todo = len(runs) if args.retrain else len(stale)
            print(f"{grid}: training {todo} of {len(runs)} runs with {args.jobs} job(s)", file=sys.stderr)
            run_grid(grid, runs, retrain=args.retrain, jobs=args.jobs, save=True)
            print(record_path(grid))
            return 0
        if args.command == "evaluate":
            import torch

            from ..device import default_device
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
        model = {key: getattr(args, flag) for flag, key in MODEL_FLAGS.items() if getattr(args, flag) is not None}
        if args.sinks:
            model["sinks"] = True
        run_fields = dict(task=args.task, preset=args.preset, model=model, steps=args.steps, batch_size=args.batch_size,
                          seq_len=args.seq_len, train_max_size=args.train_max_size,
                          curriculum_steps=args.curriculum_steps, eval_sizes=args.eval_sizes,
                          eval_seq_lens=args.eval_seq_lens, lr=args.lr, warmup=args.warmup,
                          eval_every=args.eval_every, eval_batches=args.eval_batches,
                          corpus_bytes=args.corpus_bytes, out_dir=args.out, resume=args.resume, progress=args.progress)
        if args.checkpoint_every is not None:
            run_fields["checkpoint_every"] = args.checkpoint_every
        if args.seed is not None:
            run_fields["seed"] = args.seed
        results = train(TrainConfig(**run_fields))
        print(json.dumps({"final": results["final"], "tokens_per_s": results["tokens_per_s"],
                          "provenance": results["provenance"]}, indent=2))
        return 0
    except (ValueError, TypeError, OSError) as error:  # one line, never a traceback
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
