"""tools/portability.py: which chapters run again elsewhere, and the comparison of two claims logs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import portability  # noqa: E402


def _write(path: Path, records: list[tuple]) -> Path:
    path.write_text("".join(json.dumps({"chapter": ch, "key": k, "value": v, "expected": "≤ 1", "held": held,
                                        "environment": {}}) + "\n" for ch, k, v, held in records))
    return path


def test_compare_lists_moved_failed_and_missing_claims_only(tmp_path):
    a = _write(tmp_path / "a.jsonl", [("c1", "same", 0.5, True), ("c1", "moved", 0.5, True),
                                      ("c1", "count", 3, True), ("c2", "only_a", 1.0, True)])
    b = _write(tmp_path / "b.jsonl", [("c1", "same", 0.5, True), ("c1", "moved", 0.75, True),
                                      ("c1", "count", 3, False)])
    rows = portability.compare({"a": a, "b": b})
    assert [r["key"] for r in rows] == ["moved", "count", "only_a"]
    moved, count, only_a = rows
    assert (moved["a"], moved["b"], moved["moved"]) == ("0.5", "0.75", "3.3e-01")
    assert (moved["min"], moved["max"]) == ("0.5", "0.75")
    assert count["b"] == "3 ✗" and count["moved"] == "0"
    assert only_a["b"] == "–"
    table = portability.markdown(rows, ["a", "b"])
    assert table.splitlines()[0] == "| chapter | claim | expected | a | b | relative spread |"
    assert len(table.splitlines()) == 5
    ranged = portability.markdown(rows, ["a", "b"], range_only=True)
    assert ranged.splitlines()[0] == "| chapter | claim | expected | min | max | relative spread |"
    assert "| c1 | `moved` | ≤ 1 | 0.5 | 0.75 | 3.3e-01 |" in ranged
    assert [r["key"] for r in portability.failed_claims(b)] == ["count"]


def test_the_chapters_that_train_or_time_are_found_by_their_code(tmp_path):
    def notebook(code: str, markdown: str = "") -> Path:
        path = tmp_path / f"nb{len(list(tmp_path.iterdir()))}.ipynb"
        path.write_text(json.dumps({"cells": [{"cell_type": "markdown", "source": [markdown]},
                                              {"cell_type": "code", "source": [code]}]}))
        return path
    assert portability.trains_or_times(notebook("fit(model, loss, steps=10)"))
    assert portability.trains_or_times(notebook("results = store.run_grid(GRID)"))
    assert portability.trains_or_times(notebook("t0 = time.perf_counter()"))
    assert not portability.trains_or_times(notebook("x = pb.rope_frequencies(64)", "we fit( a line"))
    assert not portability.trains_or_times(notebook("profit(3)"))
    found = {nb.stem.split("_")[0] for nb in sorted((ROOT / "notebooks").glob("*.ipynb"))
             if portability.trains_or_times(nb)}
    assert {"ch03", "ch11", "ch16", "ch17", "ch19"} <= found
    assert not found & {"ch01", "ch02", "ch15"}


def test_an_unknown_environment_is_refused_by_name():
    with pytest.raises(ValueError, match="environment must be one of native, avx2, default, got 'avx3'"):
        portability.environment_variables("avx3")
    assert portability.environment_variables("avx2")["ATEN_CPU_CAPABILITY"] == "avx2"
    with pytest.raises(ValueError, match="seed must be a non-negative integer or None, got -1"):
        portability.run("avx2", [], seed=-1)


def test_native_clears_what_the_shell_set_and_others_replace_it():
    shell = {"PATH": "/bin", "ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2"}
    assert portability.in_environment("native", shell) == {"PATH": "/bin"}
    assert portability.in_environment("avx2", shell)["MKL_ENABLE_INSTRUCTIONS"] == "AVX2"
    assert portability.extra_threads() == (__import__("os").cpu_count() or 1) + 1


@pytest.mark.parametrize("native, second", [("AVX512", "avx2"), ("AVX512_BF16", "avx2"), ("AVX2", "default"),
                                             ("DEFAULT", None), ("SVE256", None)])
def test_the_second_environment_is_below_the_cpus_own(native, second):
    assert portability.second_environment(native) == second


def test_the_second_environment_takes_here():
    second = portability.second_environment()
    native = portability.probe(portability.in_environment("native"))
    assert second == portability.second_environment(native)
    if second is not None:   # on a CPU with AVX2 or more: torch must report the kernels asked for
        assert portability.check_capability(second, portability.in_environment(second)) == portability.CAPABILITY[second]
    with pytest.raises(RuntimeError, match="asks torch for AVX2, but torch reports"):
        portability.check_capability("avx2", portability.in_environment("default"))


def test_logs_are_named_by_folder_else_by_file_and_never_collide(tmp_path):
    a, b = tmp_path / "x" / "claims.jsonl", tmp_path / "y" / "claims.jsonl"
    assert list(portability.log_names([a, b])) == ["x", "y"]
    c, d = tmp_path / "r" / "claims-book.jsonl", tmp_path / "r" / "claims-avx2.jsonl"
    assert list(portability.log_names([c, d])) == ["claims-book", "claims-avx2"]
    with pytest.raises(ValueError, match="logs must differ in folder or file name"):
        portability.log_names([a, a])
