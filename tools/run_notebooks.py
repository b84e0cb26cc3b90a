"""Execute every chapter once with nbmake, and hand the executed copies to the book's execution cache.

The stored notebooks never change: copies go to .executed/, nbmake runs them there (``--overwrite`` writes
the outputs into the copies), the JUnit report keeps each notebook's execution time for tools/report.py, and the
executed copies are put in Jupyter Book's cache (_build/.jupyter_cache) under the stored notebook's path. The
cache matches notebooks by a hash of their code cells, so the book build then finds every chapter executed and
runs nothing again: one execution per test run. POSBOOK_NB_WORKERS=N runs N notebooks at once (pytest-xdist).

Readers run the chapters without transformers (a plain ``pip install posbook``), so the run shows they can: a
chapter whose code does not name transformers is executed with transformers made unimportable
(tools/without_transformers), in .executed/without-transformers/, and that is the execution the book shows; a
chapter whose code does name it (it compares posbook with Hugging Face's code) is executed with transformers for
the book, and a second time without it, where its oracle claims are skipped with a note. The book's executions
must check every claim: a chapter that skipped one there fails the run.

A reader's machine is not the build's. With ``--elsewhere`` (``make test``), every chapter that trains a model or
times something (tools/portability.py) is executed once more in another floating-point environment: torch, MKL and
oneDNN held to the instruction set below the CPU's own (AVX2 on an AVX-512 CPU) and one thread more than the
machine has cores (for the chapters that do not fix their threads). Every claim must hold there too. Both executions log their claims (_build/reports/claims-*.jsonl), and
_build/reports/portability.md lists the claims whose values differ between them.
"""

from __future__ import annotations

import json
import re
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

import portability

ROOT = Path(__file__).resolve().parents[1]
# Not under _build/: nbmake refuses to collect notebooks below a folder of that name.
EXECUTED = ROOT / ".executed"
REPORTS = ROOT / "_build" / "reports"
CACHE = ROOT / "_build" / ".jupyter_cache"
# sitecustomize.py there: a kernel started below a folder named in POSBOOK_WITHOUT_TRANSFORMERS cannot import it.
BLOCKER = ROOT / "tools" / "without_transformers"
WITHOUT = EXECUTED / "without-transformers"
SKIPPED = "not checked here"  # what posbook.Claims.skip prints, and the claims table says of a skipped claim
# The environment the chapters that train or time are executed in a second time (tools/portability.py).
SECOND_ENVIRONMENT = "avx2"


def toc_files() -> list[str]:
    """Every `file:` entry of _toc.yml, in book order (without suffix)."""
    files: list[str] = []

    def walk(node):
        if isinstance(node, dict):
            if "file" in node:
                files.append(node["file"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(yaml.safe_load((ROOT / "_toc.yml").read_text()))
    return files


def toc_notebooks() -> list[Path]:
    """The notebooks _toc.yml lists, in book order."""
    return [ROOT / f"{f}.ipynb" for f in toc_files() if (ROOT / f"{f}.ipynb").exists()]


def uses_transformers(nb: Path) -> bool:
    """Whether a chapter's code reads transformers, itself or through posbook.oracle (its prose may name it; a
    citation key such as wolf2020transformers does not count)."""
    cells = json.loads(nb.read_text())["cells"]
    return any(re.search(r"\btransformers\b|\boracle\.", "".join(c["source"]))
               for c in cells if c["cell_type"] == "code")


def outputs_text(path: Path) -> str:
    """Every text an executed notebook's cells output (streams, and each output's text forms)."""
    texts = []
    for cell in json.loads(path.read_text())["cells"]:
        for out in cell.get("outputs", []):
            texts.append("".join(out.get("text", "")))
            for mime, data in out.get("data", {}).items():
                if mime.startswith("text/"):
                    texts.append("".join(data))
    return "\n".join(texts)


def main(argv: list[str]) -> int:
    """``--elsewhere`` (make test): then execute the chapters that train or time in a second environment."""
    unknown = [a for a in argv if a != "--elsewhere"]
    if unknown:
        raise SystemExit(f"run_notebooks: arguments must be --elsewhere or nothing, got {' '.join(unknown)}")
    notebooks = toc_notebooks()
    if EXECUTED.exists():
        shutil.rmtree(EXECUTED)
    REPORTS.mkdir(parents=True, exist_ok=True)
    copies, second_runs = [], []

    def copy_to(folder: Path, nb: Path) -> Path:
        copy = folder / nb.relative_to(ROOT)
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(nb, copy)
        return copy

    phone_figures = os.environ.get("POSBOOK_PHONE_FIGURES")  # posbook.viz.PHONE_FIGURES_ENV, set by the Makefile
    if phone_figures:  # this run's figures only: the book serves what is there
        shutil.rmtree(phone_figures, ignore_errors=True)
    for nb in notebooks:
        if uses_transformers(nb):
            copies.append(copy_to(EXECUTED, nb))
            second_runs.append(copy_to(WITHOUT, nb))
        else:
            copies.append(copy_to(WITHOUT, nb))
    # An empty config of its own, so the repository's pytest settings (testpaths, options) stay out of this run.
    (EXECUTED / "pytest.ini").write_text("[pytest]\n")
    workers = os.environ.get("POSBOOK_NB_WORKERS", "1")
    cmd = [sys.executable, "-m", "pytest", "--nbmake", "--overwrite", "--nbmake-timeout=900",
           "-p", "no:cacheprovider", f"--junitxml={REPORTS / 'notebooks.xml'}", "-o", "junit_family=xunit2",
           "-c", str(EXECUTED / "pytest.ini"), "--rootdir", str(EXECUTED), *(["-n", workers] if workers != "1" else []),
           *map(str, copies + second_runs)]
    print(f"run_notebooks: {len(copies)} notebooks, {len(copies) - len(second_runs)} of them without transformers; "
          f"{len(second_runs)} use it and run again without it", flush=True)
    env = {**os.environ,
           # The book is static HTML: interactive figures show their small multiples only (posbook.viz.STATIC_ENV).
           "POSBOOK_STATIC_FIGURES": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(BLOCKER), os.environ.get("PYTHONPATH")])),
           "POSBOOK_WITHOUT_TRANSFORMERS": str(WITHOUT),
           # posbook.claims: a failed claim stops the build, and every claim is logged for the comparison below
           "POSBOOK_BOOK_BUILD": "1",
           "POSBOOK_CLAIMS_LOG": str(REPORTS / "claims-book.jsonl"),
           "POSBOOK_CLAIMS": "raise"}
    env.pop("POSBOOK_SEED", None)  # the book shows seed 0, whatever the shell that builds it says
    (REPORTS / "claims-book.jsonl").unlink(missing_ok=True)
    code = subprocess.call(cmd, cwd=EXECUTED, env=env)
    if code != 0:
        return code
    skipping = [copy.relative_to(EXECUTED) for copy in copies if SKIPPED in outputs_text(copy).lower()]
    if skipping:
        print("run_notebooks: the book's execution of these chapters left claims unchecked (see 'Not checked "
              f"here' in their outputs): {', '.join(map(str, skipping))}", file=sys.stderr)
        return 1
    unblocked = [copy.relative_to(EXECUTED) for copy in second_runs if SKIPPED not in outputs_text(copy).lower()]
    if unblocked:
        print("run_notebooks: these chapters checked every claim without transformers, so it was not blocked "
              f"(tools/without_transformers): {', '.join(map(str, unblocked))}", file=sys.stderr)
        return 1

    import nbformat
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn

    cache = get_cache(CACHE)
    cache.clear_cache()
    for nb, copy in zip(notebooks, copies):
        executed = nbformat.read(copy, as_version=4)
        # The cache keys a notebook by its code cells *including cell metadata*; the kernel added execution
        # timestamps there, so give each cell back the metadata of the stored notebook.
        stored = nbformat.read(nb, as_version=4)
        for cell, original in zip(executed.cells, stored.cells):
            cell.metadata = original.metadata
        cache.cache_notebook_bundle(CacheBundleIn(executed, str(nb), data={"execution_seconds": None}),
                                    check_validity=False, overwrite=True)
    print(f"run_notebooks: cached {len(copies)} executed notebooks in {CACHE.relative_to(ROOT)}")
    if "--elsewhere" in argv:
        return elsewhere([nb for nb in notebooks if portability.trains_or_times(nb)])
    return 0


def elsewhere(notebooks: list[Path]) -> int:
    """Execute ``notebooks`` again in :func:`portability.second_environment`; fail if a claim does not hold there,
    and write the claims whose values moved to _build/reports/portability.md."""
    second = portability.second_environment()
    if second is None:
        print("run_notebooks: torch runs its baseline kernels on this CPU already; the chapters that train or time "
              "are not executed a second time", file=sys.stderr)
        return 0
    workers = min(2, os.cpu_count() or 1)  # one thread each in most of them: the two cores work in parallel
    code, log = portability.run(second, notebooks, workers=workers, junit=REPORTS / "portability.xml")
    (REPORTS / f"claims-{second}.jsonl").write_text(log.read_text())
    moved = portability.read_log(log)
    chapters = {chapter for chapter, _ in moved}
    rows = [r for r in portability.compare({"book build": REPORTS / "claims-book.jsonl", second: log})
            if r["chapter"] in chapters]
    (REPORTS / "portability.md").write_text(portability.markdown(rows, ["book build", second]) + "\n")
    print(f"run_notebooks: {len(rows)} claims of the {len(notebooks)} chapters that train or time move between the "
          f"book build and {second} (_build/reports/portability.md)")
    failed = portability.failed_claims(log)
    for record in failed:
        print(f"run_notebooks: in {second}, claim {record['key']!r} of {record['chapter']!r} does not hold: "
              f"computed {record['value']}, expected {record['expected']}", file=sys.stderr)
    if code != 0 or failed:
        print(f"run_notebooks: the chapters that train or time do not all hold in {second}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
