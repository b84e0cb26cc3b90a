"""posbook.claims: a claim that does not hold stops the chapter; the table lists what held."""

from __future__ import annotations

import pytest
import torch

from posbook import ClaimError, Claims


def test_holding_claims_return_values_and_fill_the_table():
    c = Claims("test chapter")
    assert c.close("a", "two is two", torch.tensor(2.0), 2.0, rtol=1e-12) == 2.0
    assert c.at_most("b", "small", 1e-17, 1e-16) == 1e-17
    assert c.at_least("c", "large", 10, 3) == 10
    assert c.between("d", "inside", 0.5, 0, 1) == 0.5
    assert c.holds("e", "a fact", True) is True
    table = c.table()
    md, html = table._repr_markdown_(), table._repr_html_()
    assert "5 claims checked" in md and "5 claims checked" in html
    assert md.count("\n| ") == 6        # header + 5 rows
    # closed in a dropdown, one anchor per row for links from the prose
    assert md.startswith("````{dropdown} 5 claims checked, all hold.") and md.endswith("\n````")
    assert [f'<span id="claim-{k}">' in md and f'<tr id="claim-{k}">' in html for k in "abcde"] == [True] * 5
    assert table.badge.text == "✓ 5 claims recomputed when this page was built, all hold"
    assert 'href="#claims-checked"' in table.badge._repr_markdown_()
    c2 = Claims("x")
    c2.close("k", "cited", 1.0, 1.0, source="su2021roformer")
    assert "{cite:p}`su2021roformer`" in c2.table()._repr_markdown_()


@pytest.mark.parametrize("check", [
    lambda c: c.close("k", "off", 1.1, 1.0, atol=0.05),
    lambda c: c.close("k", "exact", 1.0 + 1e-15, 1.0),
    lambda c: c.at_most("k", "too big", 2, 1),
    lambda c: c.at_least("k", "too small", 0.5, 1),
    lambda c: c.between("k", "outside", 2, 0, 1),
    lambda c: c.holds("k", "false", False),
    lambda c: c.close("k", "nan", float("nan"), 1.0, atol=1),
])
def test_failing_claims_raise(check):
    with pytest.raises(ClaimError):
        check(Claims("test"))


def test_failing_claim_names_chapter_key_and_values():
    with pytest.raises(ClaimError, match=r"\[ch\] claim 'x.y' does not hold: .* computed value 3, expected ≤ 2"):
        Claims("ch").at_most("x.y", "three is small", 3, 2)


def test_bookkeeping_errors():
    c = Claims("t")
    c.holds("k", "once", True)
    with pytest.raises(ValueError, match="already used"):
        c.holds("k", "twice", True)
    with pytest.raises(ValueError, match="key"):
        c.holds("has space", "bad key", True)
    with pytest.raises(ValueError, match="atol"):
        c.close("n", "negative tolerance", 1, 1, atol=-1)
    with pytest.raises(ValueError, match="chapter"):
        Claims("")
    with pytest.raises(ValueError, match="no claims"):
        Claims("empty").table()
    with pytest.raises(TypeError, match="value"):
        c.at_most("s", "a string", "abc", 1)


def test_a_skipped_claim_is_listed_as_not_checked_with_its_reason(capsys, monkeypatch):
    glued = []
    monkeypatch.setattr("posbook.claims.glue", lambda name, value: glued.append(name))
    c = Claims("t")
    c.holds("own", "checked by the page", True)
    c.skip("hf.same", "transformers agrees", "transformers is not installed here", source="wolf2020transformers")
    assert "Not checked here: transformers agrees (transformers is not installed here)." in capsys.readouterr().out
    assert len(c) == 1 and [s.key for s in c.skipped] == ["hf.same"] and glued == ["own"]
    table = c.table()
    md, html = table._repr_markdown_(), table._repr_html_()
    assert "1 claims checked, all hold. 1 not checked here" in md and "1 not checked here" in html
    assert md.splitlines()[-2] == ('| <span id="claim-hf-same"></span>2 | transformers agrees | not checked here | '
                                   "transformers is not installed here | {cite:p}`wolf2020transformers` | – |")
    assert table.badge.text == "✓ 1 claim recomputed when this page was built, all hold; 1 not checked here"
    assert "not checked here" in repr(table)
    with pytest.raises(ValueError, match="already used"):
        c.holds("hf.same", "checked after all", True)
    with pytest.raises(ValueError, match="already used"):
        c.skip("own", "skipped after checking", "no oracle")
    with pytest.raises(ValueError, match="reason"):
        c.skip("k", "no reason", " ")
    with pytest.raises(ValueError, match="no claims"):
        only_skipped = Claims("t")
        only_skipped.skip("k", "a claim", "no oracle")
        only_skipped.table()


def test_glue_turns_one_element_tensors_into_numbers(monkeypatch):
    import numpy as np
    import torch

    from posbook import claims as claims_module

    glued = {}
    monkeypatch.setattr(claims_module, "_myst_glue", lambda name, value, display=False: glued.__setitem__(name, value))
    monkeypatch.setattr(claims_module, "_in_kernel", lambda: True)
    claims_module.glue("t", torch.tensor(8.75, dtype=torch.float64))
    claims_module.glue("n", np.float32(0.5))
    claims_module.glue("i", torch.tensor(7))
    claims_module.glue("v", torch.arange(3))
    assert glued["t"] == 8.75 and type(glued["t"]) is float
    assert glued["n"] == 0.5 and type(glued["n"]) is float
    assert glued["i"] == 7 and type(glued["i"]) is int
    assert isinstance(glued["v"], torch.Tensor)  # not a single number: glued as it is


def test_sci_writes_numbers_for_prose():
    import pytest as _pytest

    import posbook as pb

    assert pb.sci(3.8e7) == "3.8\u00a0×\u00a010⁷"
    assert pb.sci(-4.96e-7, 2) == "−4.96\u00a0×\u00a010⁻⁷"
    assert pb.sci(1) == "1.0\u00a0×\u00a010⁰"
    with _pytest.raises(ValueError, match="finite"):
        pb.sci(float("inf"))
    with _pytest.raises(TypeError, match="digits"):
        pb.sci(1.0, 1.5)


def test_checks_take_numbers_and_truth_values_only():
    import numpy as np

    c = Claims("t")
    assert c.close("np", "numpy numbers", np.float32(0.5), np.int64(0), atol=1) == 0.5
    assert c.at_most("t1", "one-element tensor", torch.tensor([3]), 4) == 3
    assert c.holds("npb", "numpy bool", np.bool_(True)) is True
    assert c.holds("tb", "one-element bool tensor", torch.tensor([True])) is True
    for bad in (True, "1.0", torch.tensor(True), [1.0]):
        with pytest.raises(TypeError, match="value"):
            c.at_least("k", "not a number", bad, 0)
    with pytest.raises(TypeError, match="bound"):
        c.at_most("k", "bool bound", 0, False)
    for bad in (1, "yes", None, torch.tensor([True, True])):
        with pytest.raises(TypeError, match="condition"):
            c.holds("k", "not a truth value", bad)
    with pytest.raises(ValueError, match="expected must be finite"):
        c.close("k", "infinite reference", 1.0, float("inf"), rtol=1e-6)
    with pytest.raises(ClaimError, match="computed value is -inf"):
        c.at_most("k", "infinite value", float("-inf"), 2)
    with pytest.raises(ValueError, match="rtol"):
        c.close("k", "NaN tolerance", 1, 1, rtol=float("nan"))
    with pytest.raises(TypeError, match="statement"):
        c.holds("k", None, True)
    with pytest.raises(TypeError, match="source"):
        c.holds("k", "cited", True, source=3)


def test_glue_and_sci_refuse_what_prose_cannot_show():
    import posbook as pb

    with pytest.raises(TypeError, match="value"):
        pb.glue("x", None)
    with pytest.raises(TypeError, match="name"):
        pb.glue(3, 1.0)
    with pytest.raises(TypeError, match="display"):
        pb.glue("x", 1.0, display=1)
    with pytest.raises(TypeError, match="x"):
        pb.sci(True)
    with pytest.raises(ValueError, match="digits"):
        pb.sci(1.0, 17)


def test_the_table_glues_its_badge_for_the_top_of_the_page(monkeypatch):
    glued = {}
    monkeypatch.setattr("posbook.claims.glue", lambda name, value: glued.__setitem__(name, value))
    c = Claims("t")
    c.holds("a.b", "one", True)
    c.holds("a.c", "two", True)
    table = c.table()
    assert glued["claims.badge"] == table.badge and glued["claims.badge"].checked == 2


def test_claim_anchors_are_html_ids():
    from posbook.claims import claim_anchor
    assert claim_anchor("table.moves") == "claim-table-moves"
    assert claim_anchor("fp32 angle/1M") == "claim-fp32-angle-1M"
    with pytest.raises(TypeError, match="key"):
        claim_anchor(3)


def test_join_names_reads_unambiguously():
    from posbook import join_names
    assert join_names([]) == "none" and join_names([], empty="no scheme") == "no scheme"
    assert join_names(["RoPE"]) == "RoPE"
    assert join_names(["RoPE", "ALiBi"]) == "RoPE and ALiBi"
    assert join_names(iter(["RoPE", "ALiBi", "T5"])) == "RoPE, ALiBi and T5"
    # a name with a comma of its own: semicolons, so "iRoPE, no QK-Norm in NoPE" stays one name
    assert join_names(["RoPE (SSSL)", "iRoPE, no QK-Norm in NoPE", "iRoPE"]) == \
        "RoPE (SSSL); iRoPE, no QK-Norm in NoPE; and iRoPE"
    with pytest.raises(TypeError, match="names"):
        join_names("RoPE")
    with pytest.raises(TypeError, match=r"names\[1\]"):
        join_names(["RoPE", 3])
    with pytest.raises(ValueError, match=r"names\[0\]"):
        join_names([" "])


def test_a_readers_failed_claim_names_the_environment_and_the_way_on(monkeypatch):
    monkeypatch.delenv("POSBOOK_BOOK_BUILD", raising=False)
    monkeypatch.delenv("POSBOOK_CLAIMS", raising=False)
    with pytest.raises(ClaimError) as caught:
        Claims("ch").at_most("x.y", "three is small", 3, 2)
    message = str(caught.value)
    assert f"torch {torch.__version__}" in message
    assert torch.backends.cpu.get_cpu_capability() in message
    assert f"{torch.get_num_threads()} thread" in message
    assert "computed by its build" in message and "POSBOOK_CLAIMS=warn" in message
    # in the book's build the message is the claim alone: the build's numbers are the published ones
    monkeypatch.setenv("POSBOOK_BOOK_BUILD", "1")
    with pytest.raises(ClaimError) as caught:
        Claims("ch").at_most("x.y", "three is small", 3, 2)
    assert "POSBOOK_CLAIMS=warn" not in str(caught.value)


def test_warn_mode_records_a_failed_claim_and_goes_on(monkeypatch):
    from posbook import ClaimWarning
    monkeypatch.setenv("POSBOOK_CLAIMS", "warn")
    c = Claims("ch")
    with pytest.warns(ClaimWarning, match=r"claim 'x.y' does not hold: .* computed value 3, expected ≤ 2"):
        assert c.at_most("x.y", "three is small", 3, 2) == 3
    c.holds("z", "a fact", True)
    table = c.table()
    assert table.badge.failed == 1 and table.badge.checked == 2
    assert table.badge.text.startswith("✗ 2 claims recomputed here, 1 does not hold")
    md = table._repr_markdown_()
    assert "2 claims checked, 1 does not hold here (marked ✗)." in md
    assert md.count("| ✗ |") == 1 and md.count("| ✓ |") == 1
    assert "1 failed" in repr(table)


def test_warn_mode_also_goes_on_past_a_value_that_is_not_finite(monkeypatch, tmp_path):
    import json
    from posbook import ClaimWarning
    log = tmp_path / "claims.jsonl"
    monkeypatch.setenv("POSBOOK_CLAIMS", "warn")
    monkeypatch.setenv("POSBOOK_CLAIMS_LOG", str(log))
    monkeypatch.delenv("POSBOOK_BOOK_BUILD", raising=False)
    c = Claims("ch")
    # -inf <= 2 would hold as a comparison; a value that is not finite holds no claim
    with pytest.warns(ClaimWarning, match=r"the computed value is -inf, expected ≤ 2\. This run: torch") as seen:
        c.at_most("x", "small", float("-inf"), 2)
    assert "POSBOOK_CLAIMS=warn" not in str(seen[0].message)   # already set: no advice to set it
    with pytest.warns(ClaimWarning, match="the computed value is nan"):
        c.close("y", "one", torch.tensor(float("nan")), 1.0, atol=1)
    assert c.table().badge.failed == 2
    assert [json.loads(line)["held"] for line in log.read_text().splitlines()] == [False, False]


@pytest.mark.parametrize("mode", ["Warn", "ignore", "0"])
def test_a_bad_claims_mode_is_refused_by_name(monkeypatch, mode):
    monkeypatch.setenv("POSBOOK_CLAIMS", mode)
    if mode == "Warn":  # the mode is read case-insensitively
        with pytest.warns(UserWarning):
            Claims("ch").at_most("k", "no", 3, 2)
        return
    with pytest.raises(ValueError, match=r"POSBOOK_CLAIMS must be one of raise, warn .*" + mode):
        Claims("ch").at_most("k", "yes", 1, 2)


def test_the_log_holds_every_claim_with_its_environment(monkeypatch, tmp_path):
    import json
    log = tmp_path / "claims.jsonl"
    monkeypatch.setenv("POSBOOK_CLAIMS_LOG", str(log))
    monkeypatch.setenv("POSBOOK_CLAIMS", "warn")
    c = Claims("ch")
    c.close("a", "two", torch.tensor(2.0), 2.0)
    c.at_least("n", "a count", 7, 3)
    with pytest.warns(UserWarning):
        c.holds("b", "false", False, shown="no")
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(r["key"], r["value"], r["held"]) for r in records] == [("a", 2.0, True), ("n", 7, True), ("b", "no", False)]
    assert isinstance(records[1]["value"], int)
    assert records[0]["chapter"] == "ch" and records[0]["expected"] == "2 (exact)"
    assert records[0]["environment"]["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert records[0]["environment"]["threads"] == torch.get_num_threads()


def test_the_chapter_seed_is_zero_unless_a_reader_asks(monkeypatch):
    from posbook import chapter_seed
    monkeypatch.delenv("POSBOOK_SEED", raising=False)
    assert chapter_seed() == 0
    monkeypatch.setenv("POSBOOK_SEED", " 2 ")
    assert chapter_seed() == 2
    for bad in ("-1", "1.5", "one", "²"):
        monkeypatch.setenv("POSBOOK_SEED", bad)
        with pytest.raises(ValueError, match=f"POSBOOK_SEED must be a non-negative integer, got '{bad}'"):
            chapter_seed()
