"""Run chapters in other floating-point environments and compare what their claims computed.

A chapter's claims must hold wherever a reader runs it. This tool executes chapters (copies, under
``.portability/<environment>[-seed<k>]/``) with every claim logged (``POSBOOK_CLAIMS_LOG``) and failed claims turned
into warnings (``POSBOOK_CLAIMS=warn``), so one run shows every claim that fails, not only the first:

    .venv/bin/python tools/portability.py run --env avx2 notebooks/ch11_entropy_collapse.ipynb
    .venv/bin/python tools/portability.py run --env default --seed 1 notebooks/ch11_entropy_collapse.ipynb
    .venv/bin/python tools/portability.py compare --range .portability/*/claims.jsonl

Every environment but ``native`` holds torch's kernels, MKL and oneDNN to an older instruction set, and every one
runs the chapters with one thread more than the machine has cores (an IPython startup file sets it in the kernel:
``OMP_NUM_THREADS`` above the core count is capped by OpenMP); a chapter that sets its own thread count keeps it.
``compare`` prints, as a markdown table, every claim whose value differs between the logs or that failed in one of
them. tools/run_notebooks.py executes the chapters that :func:`trains_or_times` finds once more in
:func:`second_environment` (``make test``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Not under _build/: nbmake refuses to collect notebooks below a folder of that name; not under .executed/, which
# every book execution clears.
OUT = ROOT / ".portability"

# The variables that hold torch's own kernels (ATen), MKL and oneDNN to one instruction set, so that a CPU with
# AVX-512 computes as an older one would; "native" clears them, so the CPU's own kernels run.
ISA_VARIABLES = ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA")
ENVIRONMENTS: dict[str, dict[str, str]] = {
    "native": {},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
    "default": {"ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2", "ONEDNN_MAX_CPU_ISA": "SSE41"},
}
# What torch.backends.cpu.get_cpu_capability() reports once an environment took (None: whatever the CPU has).
CAPABILITY = {"native": None, "avx2": "AVX2", "default": "DEFAULT"}
# POSBOOK_PORTABILITY_THREADS: the thread count the startup file gives torch in each kernel.
THREADS_ENV = "POSBOOK_PORTABILITY_THREADS"
STARTUP = """import os, torch
torch.set_num_threads(int(os.environ["{env}"]))
""".format(env=THREADS_ENV)


def extra_threads() -> int:
    """One thread more than the machine has cores: what the chapters that leave torch's thread count alone get."""
    return (os.cpu_count() or 1) + 1


def environment_variables(name: str) -> dict[str, str]:
    """The variables that put a process in environment ``name`` (see :data:`ENVIRONMENTS`)."""
    if name not in ENVIRONMENTS:
        raise ValueError(f"environment must be one of {', '.join(ENVIRONMENTS)}, got {name!r}")
    return dict(ENVIRONMENTS[name])


def in_environment(name: str, base: dict[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this process's environment) with the instruction-set variables of environment ``name``,
    and none left over from the shell."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if k not in ISA_VARIABLES}
    return {**env, **environment_variables(name)}


def probe(env: dict[str, str]) -> str:
    """The capability torch reports in a Python started with ``env``."""
    code = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    got = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return got.stdout.strip()


def check_capability(name: str, env: dict[str, str]) -> str:
    """The capability torch reports in ``env``; refuse a setting that did not take."""
    capability = probe(env)
    wanted = CAPABILITY[name]
    if wanted is not None and capability != wanted:
        raise RuntimeError(f"environment {name!r} asks torch for {wanted}, but torch reports {capability}")
    return capability


def second_environment(native: str | None = None) -> str | None:
    """The environment that computes differently from this CPU's own kernels: AVX2 under AVX-512, the baseline
    kernels under AVX2, and None where torch already runs its baseline (or another architecture's) kernels.
    ``native``: the capability to decide for (default: what torch reports here)."""
    native = probe(in_environment("native")) if native is None else native
    if native.startswith("AVX512"):
        return "avx2"
    if native == "AVX2":
        return "default"
    return None


# A chapter's code that trains a model (posbook.experiments' fit, train, a grid's runs or a recorded prefix) or
# times something: what make test executes a second time in another environment.
TRAINS_OR_TIMES = re.compile(r"\bfit\(|\btrain\(|\brun_grid\(|\breproduce_prefix\(|\bstep_times\(|perf_counter|"
                             r"\btime\.time\(|\btimeit\b")


def trains_or_times(nb: Path) -> bool:
    """Whether a chapter's code trains a model or times something (see :data:`TRAINS_OR_TIMES`)."""
    cells = json.loads(Path(nb).read_text())["cells"]
    return any(TRAINS_OR_TIMES.search("".join(c["source"])) for c in cells if c["cell_type"] == "code")


def run(name: str, notebooks: list[Path], *, workers: int = 1, junit: Path | None = None,
        seed: int | None = None) -> tuple[int, Path]:
    """Execute ``notebooks`` in environment ``name``, failed claims turned into warnings and every claim logged;
    return pytest's exit code and the claims log. ``junit``: where pytest writes its JUnit report; ``seed``: the
    chapters' own trainings start from it (``POSBOOK_SEED``; the book's 0 when None)."""
    if seed is not None and (not isinstance(seed, int) or seed < 0):
        raise ValueError(f"seed must be a non-negative integer or None, got {seed!r}")
    folder = OUT / (name if seed is None else f"{name}-seed{seed}")
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    log = folder / "claims.jsonl"
    startup = folder / "ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True)
    (startup / "00-threads.py").write_text(STARTUP)
    env = {**in_environment(name), "POSBOOK_CLAIMS_LOG": str(log), "POSBOOK_CLAIMS": "warn",
           "POSBOOK_STATIC_FIGURES": "1", "IPYTHONDIR": str(folder / "ipython"), THREADS_ENV: str(extra_threads())}
    env.pop("POSBOOK_SEED", None)
    if seed is not None:
        env["POSBOOK_SEED"] = str(seed)
    # the book serves the figures of its own build only (posbook.viz.PHONE_FIGURES_ENV)
    env.pop("POSBOOK_PHONE_FIGURES", None)
    print(f"portability: {name}: torch reports {check_capability(name, env)}, {extra_threads()} threads where a "
          f"chapter leaves them alone; {len(notebooks)} notebooks", flush=True)
    copies = []
    for nb in notebooks:
        copy = folder / nb.resolve().relative_to(ROOT)
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(nb, copy)
        copies.append(copy)
    (folder / "pytest.ini").write_text("[pytest]\n")
    cmd = [sys.executable, "-m", "pytest", "--nbmake", "--overwrite", "--nbmake-timeout=900", "-p",
           "no:cacheprovider", "-c", str(folder / "pytest.ini"), "--rootdir", str(folder),
           *([f"--junitxml={junit}", "-o", "junit_family=xunit2"] if junit else []),
           *(["-n", str(workers)] if workers > 1 else []), *map(str, copies)]
    log.touch()
    code = subprocess.call(cmd, cwd=folder, env=env)
    if code != 0:
        print(f"portability: {name}: pytest exited {code}", file=sys.stderr)
    return code, log


def failed_claims(log: Path) -> list[dict]:
    """The claims of a log that did not hold."""
    return [r for r in read_log(log).values() if not r["held"]]


def read_log(path: Path) -> dict[tuple[str, str], dict]:
    """A claims log as {(chapter, key): record}; a key logged twice (a chapter run twice) keeps the last."""
    records = {}
    for line in Path(path).read_text().splitlines():
        if line.strip():
            record = json.loads(line)
            records[record["chapter"], record["key"]] = record
    return records


def _differs(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return not (a == b or (math.isnan(a) and math.isnan(b)))
    return a != b


def _show(record: dict | None) -> str:
    if record is None:
        return "–"
    value = record["value"]
    text = f"{value:.8g}" if isinstance(value, float) else str(value)
    return text + ("" if record["held"] else " ✗")


def _numbers(records: list[dict]) -> list[float]:
    return [r["value"] for r in records if isinstance(r["value"], (int, float)) and not isinstance(r["value"], bool)]


def _relative_spread(records: list[dict]) -> str:
    """max − min over the logs, relative to the largest magnitude: how far a number moved."""
    values = _numbers(records)
    if len(values) < 2:
        return ""
    scale = max(abs(v) for v in values)
    return "0" if max(values) == min(values) else f"{(max(values) - min(values)) / scale:.1e}"


def compare(logs: dict[str, Path]) -> list[dict]:
    """The claims whose value differs between ``logs`` (name → path), or that failed in any: one row each, with
    the chapter, key, expected text and value per log, in the order the first log has them."""
    tables = {name: read_log(path) for name, path in logs.items()}
    keys: list[tuple[str, str]] = []
    for table in tables.values():
        keys += [k for k in table if k not in keys]
    rows = []
    for key in keys:
        records = [tables[name].get(key) for name in tables]
        present = [r for r in records if r is not None]
        moved = any(_differs(present[0]["value"], r["value"]) for r in present[1:])
        failed = any(not r["held"] for r in present)
        if moved or failed or len(present) < len(records):
            rows.append({"chapter": key[0], "key": key[1], "expected": present[0]["expected"],
                         **{name: _show(r) for name, r in zip(tables, records)},
                         "min": f"{min(_numbers(present)):.4g}" if _numbers(present) else "",
                         "max": f"{max(_numbers(present)):.4g}" if _numbers(present) else "",
                         "moved": _relative_spread(present)})
    return rows


def markdown(rows: list[dict], names: list[str], *, range_only: bool = False) -> str:
    """``rows`` of :func:`compare` as a markdown table: each log's value, or (``range_only``) the least and the
    largest over them."""
    columns = ["min", "max"] if range_only else names
    head = ["chapter", "claim", "expected", *columns, "relative spread"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [row["chapter"], f"`{row['key']}`", row["expected"], *(row[n] for n in columns), row["moved"]]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


def _seed(text: str) -> int:
    if not (text.isascii() and text.isdigit()):
        raise argparse.ArgumentTypeError(f"must be a non-negative integer, got {text!r}")
    return int(text)


def log_names(paths: list[Path]) -> dict[str, Path]:
    """A name for each log: its folder's (as ``run`` writes them), else its file's stem; two logs of one name are
    refused rather than one hiding the other."""
    names = [p.parent.name for p in paths]
    if len(set(names)) < len(names):
        names = [p.stem for p in paths]
    if len(set(names)) < len(names):
        raise ValueError(f"logs must differ in folder or file name, got {', '.join(map(str, paths))}")
    return dict(zip(names, paths))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run_p = sub.add_parser("run", help="execute chapters in one environment, logging every claim")
    run_p.add_argument("--env", required=True, choices=sorted(ENVIRONMENTS))
    run_p.add_argument("--workers", type=int, default=1)
    run_p.add_argument("--seed", type=_seed, default=None, help="POSBOOK_SEED for the chapters' own trainings")
    run_p.add_argument("notebooks", nargs="+", type=Path)
    cmp_p = sub.add_parser("compare", help="claims that move between logs, as a markdown table")
    cmp_p.add_argument("logs", nargs="+", type=Path, help="claims.jsonl files; each is named by its folder")
    cmp_p.add_argument("--range", action="store_true", help="the least and largest value, not one column per log")
    args = parser.parse_args(argv)
    if args.command == "run":
        for nb in args.notebooks:
            if not nb.exists():
                parser.error(f"notebooks: {nb} does not exist")
        code, log = run(args.env, args.notebooks, workers=args.workers, seed=args.seed)
        failed = failed_claims(log)
        for record in failed:
            print(f"portability: {args.env}: claim {record['key']!r} of {record['chapter']!r} does not hold: "
                  f"{record['value']} against {record['expected']}", file=sys.stderr)
        print(log)
        return 1 if (code or failed) else 0
    logs = log_names(args.logs)
    rows = compare(logs)
    print(markdown(rows, list(logs), range_only=args.range))
    print(f"\n{len(rows)} claims move or fail between {', '.join(logs)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
