"""tools/tidy_notebooks.py: checks leave teaching cells without changing what runs; cells are tagged by role."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from tidy_notebooks import cell_role, lift_long_comments, split_checks, tidy  # noqa: E402


def test_a_check_moves_to_the_end_when_nothing_after_it_can_tell():
    source = 'x = torch.randn(3)\nerr = claims.at_most("a", "s", x.abs().max(), 1)\ny = x * 2\n'
    assert split_checks(source) == [("x = torch.randn(3)\ny = x * 2\n", False),
                                    ('err = claims.at_most("a", "s", x.abs().max(), 1)\n', True)]


def test_a_check_stays_in_place_when_a_later_statement_reads_it_or_changes_what_it_reads():
    reads_it = 'err = claims.at_most("a", "s", e, 1)\nprint(err)\n'
    changes_its_input = 'claims.holds("a", "s", bool(x))\nx = 3\n'
    mutates_its_input = 'claims.holds("a", "s", bool(x.all()))\nx.add_(1)\n'
    for source in (reads_it, changes_its_input, mutates_its_input):
        pieces = split_checks(source)
        assert [kind for _, kind in pieces] == [True, False], source     # cut, in the original order
        assert "".join(text for text, _ in pieces) == source


def test_a_check_that_may_draw_random_numbers_is_not_moved():
    source = 'claims.at_most("a", "s", error_of(torch.randn(3)), 1)\ny = torch.randn(2)\n'
    assert [kind for _, kind in split_checks(source)] == [True, False]


def test_roles():
    assert cell_role("import posbook", 0, 5) == "install"
    assert cell_role("claims.table()", 4, 5) == "claims-table"
    assert cell_role('import torch\nclaims = pb.Claims("x")', 1, 5) == "setup"
    assert cell_role("fig, ax = plt.subplots()\nax.plot(x)", 2, 5) == "figure"
    assert cell_role('display(Markdown("| a |"))', 2, 5) == "table"
    assert cell_role('claims.holds("a", "s", True)\npb.glue("k", 1)', 2, 5) == "checks"
    assert cell_role('if ok:\n    claims.holds("a", "s", True)', 2, 5) == "mixed"
    # a visible cell shows something: a value, a print or a display; one that only computes is folded
    assert cell_role("y = f(x)\ny", 2, 5) == "teach"
    assert cell_role("print(f(x))", 2, 5) == "teach"
    assert cell_role("y = f(x)", 2, 5) == "quiet"
    assert cell_role("f(x);", 2, 5) == "quiet"
    assert cell_role("y = f(x)\n" * 40 + "y", 2, 5) == "long"


def test_tidy_splits_tags_and_quiets_the_checks():
    code = lambda s: {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],  # noqa: E731
                      "source": s}
    nb = {"cells": [code("import posbook"), code('claims = pb.Claims("t")'),
                    code('x = f()\nclaims.holds("a", "s", bool(x))\ny = g()'), code("claims.table()")]}
    cells = tidy(nb)["cells"]
    assert ["".join(c["source"]) for c in cells] == [
        "import posbook", 'claims = pb.Claims("t")', "x = f()\ny = g()\n", 'claims.holds("a", "s", bool(x));\n',
        "claims.table()"]
    assert [c["metadata"].get("tags", []) for c in cells] == [
        ["remove-input"], ["hide-input"], ["hide-input"], ["remove-input"], ["remove-input"]]


def test_a_long_trailing_comment_moves_above_its_line():
    code = "torch.set_num_threads(1)  # " + "a reason " * 10 + "\n"
    assert lift_long_comments(code) == "# " + ("a reason " * 10).rstrip() + "\ntorch.set_num_threads(1)\n"
    short = "x = 1  # short\n"
    assert lift_long_comments(short) == short
