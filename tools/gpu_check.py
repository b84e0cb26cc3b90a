"""Everything posbook checks on a GPU, within a time budget: the device, the CUDA unit tests, compiled
flex_attention local layers against the reference and against dense causal attention, the colab preset's
throughput and MFU against a plain SDPA GPT, the GPU-scale Part V records, and the Part V chapters executed there.
On one H200 the two grids alone did not finish in 321 s (benchmarks/README.md), so under a 10-minute limit the records
go in a run of their own (``--steps device,records --records-share 1``) and the rest in another.

    python tools/gpu_check.py OUT [--wheels DIR] [--budget-s 470]   # on a GPU machine, from the repository root
    python tools/gpu_check.py OUT --steps device,records,notebooks  # some of the steps (see STEPS)
    python tools/gpu_check.py OUT --dry-run                          # the same steps, shrunk, on the CPU (tested)
    python tools/gpu_check.py --fetch-wheels DIR                     # here: the Python 3.12 wheels it lacks there

Everything lands in OUT, at most eight files: ``report.json`` (each step's status, seconds and numbers),
``gpu_check.log`` (all output, the unit tests' included), ``unit.xml`` (JUnit), the two GPU
records (``extrapolation.colab.json``, ``context_extension.colab.json``) and ``notebooks.tar.gz`` (the executed
chapters). A step that fails is reported and the next one still runs; the exit status is 1 if any step failed.

The steps share one time budget: the records stop starting new runs when their share is spent; the chapters,
which read those records, then execute in processes of their own while the tests and timings run (so the timings
share the machine with them: each ratio is measured side by side, both arms alike); a step that cannot fit in what
is left is skipped and says so. The dry run is what the test suite runs, so a typo here fails
on the CPU and not in a GPU run that is hard to come by.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import traceback
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
PART_V = ["ch16_length_generalisation", "ch17_train_short_test_long", "ch18_stretching_a_trained_model",
          "ch19_nanochat_comparison", "ch20_long_context_probes"]
GPU_GRIDS = ["extrapolation.colab", "context_extension.colab"]   # in this order: the second starts from the first
# What the GPU machine lacks to execute a chapter (its image has torch, numpy, matplotlib, sympy, pytest, tqdm, ...),
# at the versions requirements.txt pins for the book. Pure-Python wheels but pyzmq, tornado, debugpy, rpds-py, psutil.
WHEELS = ["nbclient", "nbformat", "jupyter_client", "jupyter_core", "ipykernel", "ipython", "ipython_pygments_lexers",
          "traitlets", "pyzmq", "tornado", "comm", "debugpy", "matplotlib-inline", "nest-asyncio", "platformdirs",
          "fastjsonschema", "jsonschema", "jsonschema-specifications", "referencing", "rpds-py", "jedi",
          "parso", "pexpect", "ptyprocess", "prompt_toolkit", "wcwidth", "stack-data", "executing", "asttokens",
          "pure_eval", "ipywidgets", "widgetsnbextension", "jupyterlab_widgets"]
WHEEL_PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
                   "manylinux1_x86_64"]
# The share of the budget the records may take before no new run starts (--records-share).
RECORDS_SHARE = 0.35
TILES = (128, 64)
# The dry run trains these runs of each GPU grid, shrunk: a global and a local-layer model, then an evaluation and
# a fine-tune stretched from the first.
DRY_LABELS = {"extrapolation.colab": ["RoPE/0", "iRoPE/0"], "context_extension.colab": ["YaRN/4/0/0", "YaRN/16/40/0"]}


class Log:
    """Everything printed goes to the terminal and to OUT/gpu_check.log."""

    def __init__(self, path: Path):
        self.file = path.open("w")

    def __call__(self, *parts: Any) -> None:
        line = " ".join(str(p) for p in parts)
        print(line, flush=True)
        self.file.write(line + "\n")
        self.file.flush()


# ipykernel's nest-asyncio comes into .venv unpinned, as a dependency: this is the version it resolves to.
UNPINNED = {"nest-asyncio": "1.6.0"}


def pinned_versions() -> dict[str, str]:
    """requirements.txt's pins (and UNPINNED), by normalised name."""
    pins = dict(UNPINNED)
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        name, sep, version = line.partition("==")
        if sep and not line.startswith("#"):
            pins[name.strip().lower().replace("_", "-")] = version.strip()
    return pins


def fetch_wheels(folder: Path) -> int:
    """Download, for CPython 3.12 on x86-64 Linux, the wheels of WHEELS at requirements.txt's versions."""
    pins = pinned_versions()
    missing = [name for name in WHEELS if name.lower().replace("_", "-") not in pins]
    if missing:
        raise SystemExit(f"requirements.txt pins no version of {missing}")
    folder.mkdir(parents=True, exist_ok=True)
    platforms = [arg for p in WHEEL_PLATFORMS for arg in ("--platform", p)]
    specs = [f"{name}=={pins[name.lower().replace('_', '-')]}" for name in WHEELS]
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version",
               "3.12", "--implementation", "cp", *platforms, "-d", str(folder), *specs]
    return subprocess.run(command).returncode


def install_wheels(folder: Path, log: Log) -> Path:
    """pip install the carried wheels into a folder of their own and put it on sys.path and PYTHONPATH (the
    kernels the notebooks start inherit it)."""
    target = Path(tempfile.gettempdir()) / "posbook-site"
    wheels = sorted(str(p) for p in folder.glob("*.whl"))
    if not wheels:
        raise ValueError(f"--wheels {folder} holds no .whl files; fetch them with --fetch-wheels {folder}")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                    "--no-cache-dir", "--upgrade", "--target", str(target), *wheels], check=True)
    sys.path.insert(0, str(target))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(target), os.environ.get("PYTHONPATH")]))
    log(f"installed {len(wheels)} wheels into {target}")
    return target


# ---------------------------------------------------------------------------------------------------------------
# The steps. Each returns a dict of what it measured and raises if a check fails.

def step_device(ctx: dict) -> dict:
    import torch

    import posbook as pb
    from posbook.device import training_precision
    from posbook.experiments.trainer import git_sha
    device = ctx["device"]
    out = {"python": platform.python_version(), "torch": torch.__version__, "device": str(device),
           "cuda": torch.version.cuda, "posbook_commit": git_sha()}  # the code that runs
    if device.type == "cuda":
        out |= {"name": torch.cuda.get_device_name(device), "capability": list(torch.cuda.get_device_capability(device)),
                "memory_gib": round(torch.cuda.get_device_properties(device).total_memory / 2**30, 1)}
    out["training_dtype"] = str(training_precision(device).dtype)
    out["default_device"] = str(pb.default_device())
    return out


def step_unit_tests(ctx: dict) -> dict:
    """The device-parametrised and CUDA-only tests (tests/test_on_device.py), on the device (POSBOOK_DEVICE)."""
    xml = ctx["out"] / "unit.xml"
    command = [sys.executable, "-m", "pytest", "tests/test_on_device.py", "-q", "-p", "no:cacheprovider",
               f"--junitxml={xml}", "-o", "junit_family=xunit2"]
    env = dict(os.environ, POSBOOK_DEVICE=ctx["device"].type)
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=max(30, ctx["left"]() - 5))
    ctx["log"](done.stdout[-6000:] + done.stderr[-2000:])
    counts = _junit_counts(xml)
    if done.returncode != 0 or counts["failed"] or counts["errors"]:
        raise RuntimeError(f"unit tests failed: {counts}")
    return counts


def step_local_attention(ctx: dict) -> dict:
    """Compiled flex_attention sliding-window attention: equal to the masked reference, and its time against dense
    causal attention (SDPA's flash kernel), forward + backward, set against the ratio of (query, key) pairs the two
    compute."""
    import torch
    import torch.nn.functional as F

    import posbook as pb
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from local_attention import pairs, timed
    device, dry = ctx["device"], ctx["dry_run"]
    t, w, batch, heads, d = (256, 16, 1, 2, 16) if dry else (4096, 128, 4, 8, 64)
    dtype = torch.float32 if dry else torch.bfloat16
    gen = torch.Generator(device=device).manual_seed(0)
    q, k, v = (torch.randn(batch, heads, t, d, device=device, dtype=dtype, generator=gen) for _ in range(3))
    reference = pb.attention(q.float(), k.float(), v.float(), mask=pb.attention_mask("sliding", t, window=w,
                                                                                    device=device), impl="sdpa")
    out = {"T": t, "W": w, "batch": batch, "heads": heads, "head_dim": d, "dtype": str(dtype)}
    out["flop_ratio"] = pairs("causal", t, w) / pairs("sliding", t, w)
    # flex_attention has no backward on the CPU: the dry run times the forward passes alone.
    backward = not dry
    leaves = [x.detach().requires_grad_(backward) for x in (q, k, v)]
    out["timed"] = "forward + backward" if backward else "forward"

    def finish(y):
        if backward:
            y.sum().backward()

    def dense():
        finish(F.scaled_dot_product_attention(*leaves, is_causal=True))

    repeats = 3 if dry else 20
    out["dense_causal_ms"] = timed(dense, repeats, warmup=2) * 1e3
    for tile in TILES:           # flex's default tile, and a finer one that wastes less of a 128-wide window
        try:
            flex = pb.local_attention(q, k, v, kind="sliding", window=w, impl="flex", block_size=tile)
            diff = (flex.float() - reference).abs().max().item()
            out[f"max_abs_diff_tile{tile}"] = diff
            if diff > (1e-4 if dry else 3e-2):
                raise RuntimeError(f"flex sliding attention (tiles of {tile}) differs from the reference by {diff:.3g}")
            ms = timed(lambda: finish(pb.local_attention(*leaves, kind="sliding", window=w, impl="flex",
                                                         block_size=tile)), repeats, warmup=2) * 1e3
        except Exception as exc:           # reported; the step fails below only if no tile worked
            out[f"error_tile{tile}"] = f"{type(exc).__name__}: {str(exc)[:500]}"
            continue
        out[f"sliding_ms_tile{tile}"] = ms
        out[f"speedup_tile{tile}"] = out["dense_causal_ms"] / ms
        out[f"speedup_over_flop_ratio_tile{tile}"] = out[f"speedup_tile{tile}"] / out["flop_ratio"]
    measured = [out[key] for key in out if key.startswith("speedup_over_flop_ratio")]
    if not measured:
        raise RuntimeError(f"no tile size ran: {[out[key] for key in out if key.startswith('error')]}")
    out["best_speedup_over_flop_ratio"] = max(measured)
    out["goal"] = "speedup >= 0.7 x the FLOP ratio"
    out["goal_met"] = out["best_speedup_over_flop_ratio"] >= 0.7
    return out


def step_throughput(ctx: dict) -> dict:
    """Training tokens/s of the colab preset's model (pattern R) against a plain SDPA GPT of the same size, both
    under torch.compile, in the device's training precision; MFU against the GPU's dense bf16 peak."""
    import torch

    from posbook.device import training_precision
    from posbook.experiments.model import GPT, GPTConfig
    from posbook.experiments.config import PRESETS
    from posbook.experiments.trainer import peak_flops
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from model_throughput import PlainGPT, tokens_per_s

    device, dry = ctx["device"], ctx["dry_run"]
    preset = PRESETS["colab"]
    layers, width, heads = ((2, 64, 2) if dry else
                            (preset["model"]["n_layer"], preset["model"]["n_embd"], preset["model"]["n_head"]))
    t, batch = (64, 4) if dry else (preset["seq_len"], preset["batch_size"])
    precision = training_precision(device)
    # The dry run compiles with dynamo's eager backend: the same tracing, no C++ or Triton code generation.
    backend = "eager" if dry else "inductor"
    torch.manual_seed(0)
    ours = GPT(GPTConfig(vocab_size=256, n_layer=layers, n_embd=width, n_head=heads, max_seq_len=t)).to(device)
    plain = PlainGPT(256, width, layers, heads, t).to(device)
    flops = ours.flops_per_token(t)

    steps = 3 if dry else 30
    out = {"layers": layers, "width": width, "heads": heads, "T": t, "batch": batch, "dtype": str(precision.dtype),
           "params_posbook": ours.num_params(), "params_plain": sum(p.numel() for p in plain.parameters()),
           "flops_per_token": flops}
    rounds = {"posbook": [], "plain": []}
    # Three warm-up steps: compilation, autotuning, the allocator.
    options = dict(device=device, precision=precision, backend=backend, warmup=3)
    for _ in range(1 if dry else 2):        # alternated, so that drifting clocks hit both alike
        rounds["posbook"].append(tokens_per_s(ours, batch, t, 256, steps, **options))
        rounds["plain"].append(tokens_per_s(plain, batch, t, 256, steps, **options))
    out["tokens_per_s_posbook"] = statistics.median(rounds["posbook"])
    out["tokens_per_s_plain"] = statistics.median(rounds["plain"])
    out["ratio"] = out["tokens_per_s_posbook"] / out["tokens_per_s_plain"]
    out["goal"] = "posbook >= 0.95 x plain"
    out["goal_met"] = out["ratio"] >= 0.95
    if device.type == "cuda":
        peak = peak_flops(device)
        out["peak_flops"] = peak
        if peak:
            out["mfu_posbook"] = flops * out["tokens_per_s_posbook"] / peak
            out["mfu_plain"] = flops * out["tokens_per_s_plain"] / peak
    return out


def step_records(ctx: dict) -> dict:
    """Train the GPU-scale grids (the dry run: shrunk copies, into a scratch records folder) and copy the records
    to OUT."""
    from posbook.experiments import grids, store
    deadline = time.monotonic() + ctx["budget"] * ctx["records_share"]
    out = {}
    if ctx["dry_run"]:
        # Shrunk copies stand in for the grids, in this process (the records go to a scratch folder): the store reads
        # a grid's runs by name, and checks the weights a stretched run starts from against them. Every copy is cut
        # from the real grids before any stands in, for a stretched grid is built from the runs of its source grid.
        shrunk = {grid: {label: _shrunk(grids.runs(grid)[label]) for label in DRY_LABELS[grid]} for grid in GPU_GRIDS}
        for grid, runs in shrunk.items():
            grids.GRIDS[grid] = lambda runs=runs: runs
    for grid in GPU_GRIDS:
        runs = grids.runs(grid)
        start = time.perf_counter()
        done = store.run_grid(grid, save=True, deadline=deadline)
        out[grid] = {"runs": len(runs), "recorded": len(done), "seconds": time.perf_counter() - start,
                     "final": {label: entry["final"].get("val_bpb_by_len") or entry["final"].get("val_bpb")
                               for label, entry in done.items()}}
        ctx["log"](f"{grid}: {len(done)} of {len(runs)} runs recorded in {out[grid]['seconds']:.0f} s")
        path = store.record_path(grid)
        if path.exists():
            (ctx["out"] / path.name).write_bytes(path.read_bytes())
    missing = {grid: entry["runs"] - entry["recorded"] for grid, entry in out.items() if entry["recorded"] < entry["runs"]}
    if missing:
        raise RuntimeError(f"out of time before every run was trained: {missing} runs not recorded")
    return out


def step_start_notebooks(ctx: dict) -> dict:
    """Start executing the Part V chapters as a reader would, on the device (the dry run: one small stand-in
    notebook), one process each, while the next steps run; they read the GPU records just written."""
    import nbformat
    folder = Path(tempfile.mkdtemp(prefix="posbook-nb-"))
    if ctx["dry_run"]:
        stub = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
            "import posbook as pb\nfrom posbook.experiments import store\n"
            "print(pb.default_device(), len(store.load_record('extrapolation')))")])
        nbformat.write(stub, folder / "stub.source.ipynb")
        sources = {"stub": folder / "stub.source.ipynb"}
    else:
        sources = {name: ROOT / "notebooks" / f"{name}.ipynb" for name in PART_V}
    cell_timeout = int(max(60, ctx["left"]() - 20))
    procs = {}
    for name, source in sources.items():
        with (folder / f"{name}.log").open("w") as output:     # a file, not a pipe: nothing blocks on a full buffer
            procs[name] = subprocess.Popen([sys.executable, __file__, "--execute", str(source),
                                            str(folder / f"{name}.ipynb"), "--cell-timeout", str(cell_timeout)],
                                           cwd=ROOT, start_new_session=True, stdout=output, stderr=subprocess.STDOUT)
    ctx["notebooks"] = {"folder": folder, "started": time.monotonic(), "procs": procs}
    return {"started": sorted(sources), "cell_timeout_s": cell_timeout}


def step_notebooks(ctx: dict) -> dict:
    """Wait for the chapters started by step_start_notebooks (until the budget ends), and pack the executed copies
    into OUT/notebooks.tar.gz."""
    import signal
    state = ctx.get("notebooks")
    if state is None:
        raise RuntimeError("the notebooks were never started (see start_notebooks)")
    results = {}
    for name, proc in state["procs"].items():
        try:
            proc.wait(timeout=max(1, ctx["left"]() - 5))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)        # the kernel it started goes with it
            proc.wait()
            results[name] = {"error": "out of time", "seconds": time.monotonic() - state["started"]}
            continue
        status = state["folder"] / f"{name}.json"
        output = (state["folder"] / f"{name}.log").read_text()
        results[name] = (json.loads(status.read_text()) if status.exists() else
                         {"error": f"exit status {proc.returncode}: {output[-1500:]}", "seconds": None})
    with tarfile.open(ctx["out"] / "notebooks.tar.gz", "w:gz") as tar:
        for name in results:
            path = state["folder"] / f"{name}.ipynb"
            if path.exists():
                tar.add(path, arcname=path.name)
    for name, r in results.items():
        ctx["log"](f"{name}: {'FAILED ' + r['error'] if r['error'] else 'ok'} ({r['seconds'] or 0:.0f} s)")
    failed = sorted(name for name, r in results.items() if r["error"])
    if failed:
        raise RuntimeError(f"{len(failed)} chapter(s) failed: {failed}")
    return results


def execute_notebook(source: Path, target: Path, cell_timeout: int) -> int:
    """Execute one notebook (in notebooks/, as the book does) and write it to target, with target.json saying how
    long it took and what failed."""
    import nbformat
    from nbclient import NotebookClient
    nb = nbformat.read(source, as_version=4)
    start = time.perf_counter()
    error = None
    try:
        # Two threads a kernel: five chapters share the machine's cores with the steps running meanwhile.
        NotebookClient(nb, timeout=cell_timeout, kernel_name="python3",
                       resources={"metadata": {"path": str(ROOT / "notebooks")}}).execute(
            env={**os.environ, "OMP_NUM_THREADS": "2"})
    except Exception as exc:           # reported in the JSON beside the executed copy
        error = f"{type(exc).__name__}: {str(exc)[-1500:]}"
    nbformat.write(nb, target)
    target.with_suffix(".json").write_text(json.dumps({"seconds": time.perf_counter() - start, "error": error}))
    return 0 if error is None else 1


STEPS: list[tuple[str, Callable[[dict], dict], float]] = [
    # name, function, the least time (s) it needs to be worth starting on a GPU
    ("device", step_device, 0),
    ("records", step_records, 60),
    ("start_notebooks", step_start_notebooks, 120),    # they run while the three steps after them do
    ("unit_tests", step_unit_tests, 30),
    ("local_attention", step_local_attention, 30),
    ("throughput", step_throughput, 60),
    ("notebooks", step_notebooks, 0),
]


# ---------------------------------------------------------------------------------------------------------------

def _shrunk(run):
    """A GPU-scale run cut to a CPU-sized smoke test: two layers of one 64-wide head (RoPE's head_dim stays 64, so
    the stretched rope configs stay valid), two steps, batches of two, a megabyte of corpus."""
    steps = 0 if run.steps == 0 else 2
    model = dict(run.model, n_layer=2, n_embd=64, n_head=1)
    return replace(run, model=model, steps=steps, warmup=min(run.warmup or 0, 1), eval_every=max(1, steps),
                   batch_size=2, eval_batches=1, corpus_bytes=1_000_000)


def _junit_counts(xml: Path) -> dict:
    import xml.etree.ElementTree as ET
    if not xml.exists():
        return {"tests": 0, "failed": 0, "errors": 1, "skipped": 0, "passed": 0}
    suite = ET.parse(xml).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    counts = {key: int(suite.get(key, 0)) for key in ("tests", "failures", "errors", "skipped")}
    counts["failed"] = counts.pop("failures")
    counts["passed"] = counts["tests"] - counts["failed"] - counts["errors"] - counts["skipped"]
    return counts


def run(out: Path, *, dry_run: bool, budget: float, wheels: Path | None, steps: list[str] | None = None,
        records_share: float = RECORDS_SHARE) -> int:
    started = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    log = Log(out / "gpu_check.log")
    if wheels is not None:
        install_wheels(wheels, log)
    sys.path.insert(0, str(ROOT / "src"))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))
    import torch

    from posbook.experiments import store
    if dry_run:
        device = torch.device("cpu")
        os.environ["POSBOOK_DEVICE"] = "cpu"
        store.RECORDS = Path(tempfile.mkdtemp(prefix="posbook-records-"))   # never the package's own records
    else:
        if not torch.cuda.is_available():
            raise SystemExit("no CUDA device here: run on a GPU machine, or add --dry-run")
        device = torch.device("cuda")
    ctx = {"out": out, "log": log, "device": device, "dry_run": dry_run, "budget": budget,
           "records_share": records_share, "left": lambda: budget - (time.monotonic() - started)}
    report: dict[str, Any] = {"dry_run": dry_run, "budget_s": budget, "steps": {}}
    for name, step, needs in STEPS:
        if steps is not None and name not in steps:
            continue
        needs = 0 if dry_run else needs
        if ctx["left"]() < needs:
            report["steps"][name] = {"status": "skipped", "why": f"{ctx['left']():.0f} s left, needs {needs:.0f} s"}
            log(f"== {name}: skipped ({report['steps'][name]['why']})")
            continue
        log(f"== {name} ({ctx['left']():.0f} s left)")
        start = time.perf_counter()
        buffer = io.StringIO()
        try:
            with contextlib.redirect_stderr(buffer):
                result = step(ctx)
            entry = {"status": "ok", **result}
        except Exception as exc:      # one step's failure must not cost the others' evidence
            entry = {"status": "failed", "error": f"{type(exc).__name__}: {exc}"}
            log(traceback.format_exc())
        if buffer.getvalue().strip():
            log(buffer.getvalue()[-4000:])
        entry["seconds"] = round(time.perf_counter() - start, 1)
        report["steps"][name] = entry
        log(json.dumps({name: entry}, indent=1, default=str)[:3000])
        (out / "report.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    report["wall_s"] = round(time.monotonic() - started, 1)
    report["ok"] = all(entry["status"] == "ok" for entry in report["steps"].values())
    (out / "report.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    log(f"== done in {report['wall_s']} s: {'every step ok' if report['ok'] else 'some steps failed or skipped'}")
    return 0 if report["ok"] else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path, help="output folder (created)")
    parser.add_argument("--dry-run", action="store_true", help="the same steps shrunk, on the CPU")
    parser.add_argument("--budget-s", type=float, default=470.0, help="wall-clock budget of the whole run (s)")
    parser.add_argument("--wheels", type=Path, help="a folder of wheels to install first (see --fetch-wheels)")
    parser.add_argument("--steps", help=f"comma-separated steps to run, of {','.join(n for n, _, _ in STEPS)} "
                                        "(default: all; the notebooks step needs start_notebooks)")
    parser.add_argument("--records-share", type=float, default=RECORDS_SHARE,
                        help="the share of the budget after which the records start no new run")
    parser.add_argument("--fetch-wheels", type=Path, metavar="DIR",
                        help="download the Python 3.12 wheels the GPU machine lacks into DIR, then stop")
    # Internal: one chapter's execution, in a process of its own (step_start_notebooks).
    parser.add_argument("--execute", nargs=2, type=Path, metavar=("SOURCE", "TARGET"), help=argparse.SUPPRESS)
    parser.add_argument("--cell-timeout", type=int, default=600, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.fetch_wheels is not None:
        return fetch_wheels(args.fetch_wheels)
    if args.execute is not None:
        return execute_notebook(*args.execute, args.cell_timeout)
    if args.out is None:
        parser.error("OUT (the output folder) is required unless --fetch-wheels is given")
    if args.budget_s <= 0:
        parser.error(f"--budget-s must be positive, got {args.budget_s}")
    if not 0 < args.records_share <= 1:
        parser.error(f"--records-share must be in (0, 1], got {args.records_share}")
    steps = None
    if args.steps is not None:
        steps = args.steps.split(",")
        unknown = sorted(set(steps) - {name for name, _, _ in STEPS})
        if unknown:
            parser.error(f"--steps names unknown steps {unknown}; the steps are {[n for n, _, _ in STEPS]}")
    return run(args.out, dry_run=args.dry_run, budget=args.budget_s, wheels=args.wheels, steps=steps,
               records_share=args.records_share)


if __name__ == "__main__":
    sys.exit(main())
