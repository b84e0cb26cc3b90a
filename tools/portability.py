"""Run chapters in other floating-point environments and compare what their claims computed.

A chapter's claims must hold wherever a reader runs it. This tool executes chapters (copies, under
``.executed/portability/<environment>/``) with every claim logged (``POSBOOK_CLAIMS_LOG``) and failed claims turned
into warnings (``POSBOOK_CLAIMS=warn``), so one run shows every claim that moves, not only the first that breaks:

    .venv/bin/python tools/portability.py run --env avx2 notebooks/ch11_entropy_collapse.ipynb
    .venv/bin/python tools/portability.py run --env default --seed 1 notebooks/ch11_entropy_collapse.ipynb
    .venv/bin/python tools/portability.py compare .executed/portability/*/claims.jsonl

``compare`` prints, as a markdown table, every claim whose value differs between the logs or that failed in one of
them, with its value in each. tools/run_notebooks.py uses :data:`ENVIRONMENTS` and :func:`environment_variables`
for the second execution that ``make test`` makes of the chapters that train.
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
OUT = ROOT / ".executed" / "portability"

# Each environment holds torch's own kernels (ATen), MKL and oneDNN to one instruction set, so a CPU with AVX-512
# computes as an older one would. ``threads`` is added to the machine's core count for the chapters that do not fix
# their threads (a chapter that calls torch.set_num_threads keeps its own).
ENVIRONMENTS: dict[str, dict[str, str]] = {
    "native": {},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
    "default": {"ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2", "ONEDNN_MAX_CPU_ISA": "SSE41"},
}
# What torch.backends.cpu.get_cpu_capability() reports once an environment took (None: whatever the CPU has).
CAPABILITY = {"native": None, "avx2": "AVX2", "default": "DEFAULT"}


def environment_variables(name: str, *, extra_thread: bool = True) -> dict[str, str]:
    """The variables that put a process in environment ``name``; with ``extra_thread``, one thread more than the
    machine has cores (``OMP_NUM_THREADS``), for the chapters that leave torch's thread count alone."""
    if name not in ENVIRONMENTS:
        raise ValueError(f"environment must be one of {', '.join(ENVIRONMENTS)}, got {name!r}")
    variables = dict(ENVIRONMENTS[name])
    if extra_thread:
        variables["OMP_NUM_THREADS"] = str((os.cpu_count() or 1) + 1)
    return variables


def check_capability(name: str, env: dict[str, str]) -> str:
    """Start a Python in ``env`` and return the capability torch reports there; refuse a setting that did not take."""
    probe = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    got = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    capability = got.stdout.strip()
    wanted = CAPABILITY[name]
    if wanted is not None and capability != wanted:
        raise RuntimeError(f"environment {name!r} asks torch for {wanted}, but torch reports {capability}")
    return capability


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
    folder = OUT / (name if seed is None else f"{name}-seed{seed}")
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    log = folder / "claims.jsonl"
    env = {**os.environ, **environment_variables(name), "POSBOOK_CLAIMS_LOG": str(log), "POSBOOK_CLAIMS": "warn",
           "POSBOOK_STATIC_FIGURES": "1"}
    env.pop("POSBOOK_SEED", None)
    if seed is not None:
        env["POSBOOK_SEED"] = str(seed)
    # the book serves the figures of its own build only (posbook.viz.PHONE_FIGURES_ENV)
    env.pop("POSBOOK_PHONE_FIGURES", None)
    print(f"portability: {name}: torch reports {check_capability(name, env)}; {len(notebooks)} notebooks",
          flush=True)
    copies = []
    for nb in notebooks:
        copy = folder / nb.resolve().relative_to(ROOT)
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(nb, copy)
        copies.append(copy)
    (folder / "pytest.ini").write_text("[pytest]\n")
    cmd = [sys.executable, "-m", "pytest", "--nbmake", "--overwrite", "--nbmake-timeout=1800", "-p",
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run_p = sub.add_parser("run", help="execute chapters in one environment, logging every claim")
    run_p.add_argument("--env", required=True, choices=sorted(ENVIRONMENTS))
    run_p.add_argument("--workers", type=int, default=1)
    run_p.add_argument("--seed", type=int, default=None, help="POSBOOK_SEED for the chapters' own trainings")
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
    logs = {path.parent.name: path for path in args.logs}
    rows = compare(logs)
    print(markdown(rows, list(logs), range_only=args.range))
    print(f"\n{len(rows)} claims move or fail between {', '.join(logs)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
