"""tools/gpu_check.py: its dry run (every step of the GPU run, shrunk, on the CPU) passes here, so the one GPU run
it is for does not fail on a typo; what it brings back fits the GPU machine's limits on returned files."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tools" / "gpu_check.py"


def load_tool():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_dry_run_passes_every_step_and_writes_what_the_gpu_run_writes(tmp_path):
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, str(SCRIPT), str(out), "--dry-run"], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    tool = load_tool()
    assert report["dry_run"] and report["ok"]
    assert list(report["steps"]) == [name for name, _, _ in tool.STEPS]
    assert all(step["status"] == "ok" for step in report["steps"].values())
    assert report["steps"]["unit_tests"]["passed"] >= 10 and report["steps"]["unit_tests"]["failed"] == 0
    local = report["steps"]["local_attention"]
    assert all(local[f"max_abs_diff_tile{tile}"] < 1e-4 for tile in tool.TILES) and local["flop_ratio"] > 1
    assert report["steps"]["throughput"]["params_posbook"] == report["steps"]["throughput"]["params_plain"]
    for grid, labels in tool.DRY_LABELS.items():
        record = json.loads((out / f"{grid}.json").read_text())
        assert list(record["runs"]) == labels
    # The device machine returns at most 8 files of at most 16 MiB, named in letters, digits, '.', '_' and '-'.
    files = sorted(p for p in out.rglob("*") if p.is_file())
    assert {p.name for p in files} == {"report.json", "gpu_check.log", "unit.xml", "notebooks.tar.gz",
                                       *(f"{grid}.json" for grid in tool.GPU_GRIDS)}
    assert len(files) <= 8 and all(p.stat().st_size < 16 * 2**20 for p in files)
    assert all(re.fullmatch(r"[A-Za-z0-9._-]+", p.name) for p in files)
    # The package's own records are untouched: the dry run trains into a scratch folder.
    assert not any((ROOT / "src/posbook/experiments/records" / f"{grid}.json").exists() and
                   json.loads((ROOT / "src/posbook/experiments/records" / f"{grid}.json").read_text())["runs"].keys()
                   == set(labels) for grid, labels in tool.DRY_LABELS.items())


def test_the_gpu_run_refuses_a_machine_without_cuda_and_bad_arguments(tmp_path):
    for args, message in [([str(tmp_path / "o")], "no CUDA device here"),
                          ([], "OUT (the output folder) is required"),
                          ([str(tmp_path / "o"), "--budget-s", "0"], "--budget-s must be positive"),
                          ([str(tmp_path / "o"), "--steps", "device,recrods"], "unknown steps ['recrods']"),
                          ([str(tmp_path / "o"), "--records-share", "1.5"], "--records-share must be in")]:
        done = subprocess.run([sys.executable, str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True,
                              timeout=120, env={"PATH": "/usr/bin:/bin", "CUDA_VISIBLE_DEVICES": ""})
        assert done.returncode != 0 and message in done.stderr, done.stderr[-2000:]


def test_every_wheel_the_gpu_machine_needs_is_pinned_here():
    tool = load_tool()
    pins = tool.pinned_versions()
    assert all(name.lower().replace("_", "-") in pins for name in tool.WHEELS)
    with pytest.raises(SystemExit):
        tool.main(["--budget-s", "-1", "x"])
