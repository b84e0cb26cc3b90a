"""Execute every chapter once with nbmake, and hand the executed copies to the book's execution cache.

The stored notebooks never change: copies go to .executed/, nbmake runs them there (``--overwrite`` writes
the outputs into the copies), the JUnit report keeps each notebook's execution time for tools/report.py, and the
executed copies are put in Jupyter Book's cache (_build/.jupyter_cache) under the stored notebook's path. The
cache matches notebooks by a hash of their code cells, so the book build then finds every chapter executed and
runs nothing again: one execution per test run. POSBOOK_NB_WORKERS=N runs N notebooks at once (pytest-xdist).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
# Not under _build/: nbmake refuses to collect notebooks below a folder of that name.
EXECUTED = ROOT / ".executed"
REPORTS = ROOT / "_build" / "reports"
CACHE = ROOT / "_build" / ".jupyter_cache"


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


def main() -> int:
    notebooks = toc_notebooks()
    if EXECUTED.exists():
        shutil.rmtree(EXECUTED)
    REPORTS.mkdir(parents=True, exist_ok=True)
    copies = []
    for nb in notebooks:
        copy = EXECUTED / nb.relative_to(ROOT)
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(nb, copy)
        copies.append(copy)
    # An empty config of its own, so the repository's pytest settings (testpaths, options) stay out of this run.
    (EXECUTED / "pytest.ini").write_text("[pytest]\n")
    workers = os.environ.get("POSBOOK_NB_WORKERS", "1")
    cmd = [sys.executable, "-m", "pytest", "--nbmake", "--overwrite", "--nbmake-timeout=900",
           "-p", "no:cacheprovider", f"--junitxml={REPORTS / 'notebooks.xml'}", "-o", "junit_family=xunit2",
           "-c", str(EXECUTED / "pytest.ini"), "--rootdir", str(EXECUTED), *(["-n", workers] if workers != "1" else []), *map(str, copies)]
    print("run_notebooks:", len(copies), "notebooks", flush=True)
    # The book is static HTML: interactive figures show their small multiples only (posbook.viz.STATIC_ENV).
    code = subprocess.call(cmd, cwd=EXECUTED, env={**os.environ, "POSBOOK_STATIC_FIGURES": "1"})
    if code != 0:
        return code

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
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
