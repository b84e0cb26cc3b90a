"""Close a test run: the per-notebook execution-time table (slowest first), budgets, and one summary line.

Budgets on the 2-core CI machine: an analysis chapter ≤ 45 s, an experiment chapter ≤ 150 s, a training chapter
(Part V: it reads recorded grids and shipped weights, and retrains a prefix or a few runs to show the record is
what the code computes) ≤ 300 s (a notebook says which it is in its metadata,
``"posbook": {"kind": "analysis" | "experiment" | "training"}``), all notebooks together ≤ 1,200 s. A notebook
over its budget fails the run. A chapter that uses transformers runs twice (tools/run_notebooks.py); its run
without transformers has its own row and the same budget.
"""

from __future__ import annotations

import json
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from run_notebooks import uses_transformers

ROOT = Path(__file__).resolve().parents[1]
REPORTS = ROOT / "_build" / "reports"
BUDGET_S = {"analysis": 45.0, "experiment": 150.0, "training": 300.0}
TOTAL_BUDGET_S = 1200.0


def notebook_kind(path: Path) -> str:
    meta = json.loads(path.read_text()).get("metadata", {}).get("posbook", {})
    kind = meta.get("kind")
    if kind not in BUDGET_S:
        raise SystemExit(f"report: {path} must declare metadata.posbook.kind as one of {sorted(BUDGET_S)}, got {kind!r}")
    return kind


def main() -> int:
    failed = False
    passed = failures = skipped = 0
    for xml in sorted(REPORTS.glob("*.xml")):
        for suite in ET.parse(xml).getroot().iter("testsuite"):
            n, f, e, s = (int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped"))
            passed += n - f - e - s
            failures += f + e
            skipped += s

    rows = []
    nb_xml = REPORTS / "notebooks.xml"
    if nb_xml.exists():
        for case in ET.parse(nb_xml).getroot().iter("testcase"):
            name = case.get("file") or case.get("name")
            source = ROOT / "notebooks" / Path(name).name
            kind = notebook_kind(source) if source.exists() else "?"
            # nbmake's classname is the copy's path under .executed/, dotted
            second_run = (case.get("classname", "").startswith("without-transformers.") and source.exists()
                          and uses_transformers(source))
            seconds = float(case.get("time", 0))
            ok = case.find("failure") is None and case.find("error") is None
            rows.append((seconds, source.name + (" (no transformers)" if second_run else ""), kind, ok))
    rows.sort(reverse=True)

    print("\nNotebook execution times (slowest first)")
    print(f"{'notebook':<48} {'kind':<11} {'seconds':>8} {'budget':>7}")
    for seconds, name, kind, ok in rows:
        budget = BUDGET_S.get(kind, float("inf"))
        flag = "" if seconds <= budget else "  OVER BUDGET"
        if not ok:
            flag += "  FAILED"
        failed |= seconds > budget
        print(f"{name:<48} {kind:<11} {seconds:8.1f} {budget:7.0f}{flag}")
    total = sum(r[0] for r in rows)
    over_total = total > TOTAL_BUDGET_S
    print(f"{'total':<48} {'':<11} {total:8.1f} {TOTAL_BUDGET_S:7.0f}{'  OVER BUDGET' if over_total else ''}")
    failed |= over_total

    # The second execution of the chapters that train or time (tools/run_notebooks.py --elsewhere): shown, and
    # counted in the whole command's time, not in the book's budget.
    second_xml = REPORTS / "portability.xml"
    if second_xml.exists():
        cases = list(ET.parse(second_xml).getroot().iter("testcase"))
        seconds = sum(float(c.get("time", 0)) for c in cases)
        print(f"second floating-point environment: {len(cases)} notebooks, {seconds:.1f} s of notebook time "
              "(two at a time)")
    start = ROOT / "_build" / "reports" / "started"
    if start.exists():
        print(f"whole test command so far: {time.time() - float(start.read_text()):.0f} s (budget 2700 s: 45 minutes)")
    print(f"\nposbook: {passed} passed, {failures} failed, {skipped} skipped")
    return 1 if (failed or failures) else 0


if __name__ == "__main__":
    sys.exit(main())
