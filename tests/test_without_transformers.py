"""Readers run posbook without transformers: the blocker tools/run_notebooks.py runs chapters under works, and the
whole library imports with transformers unimportable."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BLOCKER = ROOT / "tools" / "without_transformers"


def run(code: str, cwd: Path, blocked_under: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(BLOCKER), os.environ.get("PYTHONPATH")])),
           "POSBOOK_WITHOUT_TRANSFORMERS": str(blocked_under)}
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)


CHECK = """
import importlib.util, subprocess, sys
try:
    from transformers.models.llama import modeling_llama
except ModuleNotFoundError:
    imported = False
else:
    imported = True
child = subprocess.run([sys.executable, "-c", "import importlib.util; print(importlib.util.find_spec('transformers'))"],
                       cwd="/", capture_output=True, text=True).stdout.strip()
print(imported, importlib.util.find_spec("transformers") is None, child)
"""


def test_blocks_transformers_below_its_folder_and_in_the_processes_started_there(tmp_path):
    inside = tmp_path / "blocked" / "notebooks"
    inside.mkdir(parents=True)
    done = run(CHECK, inside, tmp_path / "blocked")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True", "None"]


def test_leaves_transformers_alone_elsewhere(tmp_path):
    (tmp_path / "blocked").mkdir()
    done = run("import importlib.util; print(importlib.util.find_spec('transformers') is None)", tmp_path,
               tmp_path / "blocked")
    assert done.returncode == 0, done.stderr
    import importlib.util
    assert done.stdout.strip() == str(importlib.util.find_spec("transformers") is None)


def test_every_module_of_the_library_imports_without_transformers(tmp_path):
    code = """
import importlib, pkgutil, sys
import posbook
names = [m.name for m in pkgutil.walk_packages(posbook.__path__, "posbook.") if not m.name.endswith("__main__")]
for name in names:
    importlib.import_module(name)
assert sys.modules["transformers"] is None
print(len(names))
"""
    done = run(code, tmp_path, tmp_path)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) > 20
