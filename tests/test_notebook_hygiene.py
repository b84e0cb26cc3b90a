"""The stored chapters: without outputs, listed in _toc.yml, runnable on Colab from the one declared URL."""

from __future__ import annotations

import ast
import collections
import json
import re
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from run_notebooks import toc_files  # noqa: E402  (the one reader of _toc.yml)
from tidy_notebooks import MANAGED_TAGS, is_check_call, tidied_text  # noqa: E402

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())


def test_there_are_chapters():
    assert NOTEBOOKS, "notebooks/ holds no chapter"


def test_toc_and_notebooks_folder_agree():
    in_toc = {f for f in toc_files() if f.startswith("notebooks/")}
    on_disk = {f"notebooks/{p.stem}" for p in NOTEBOOKS}
    assert in_toc == on_disk
    for f in toc_files():
        assert (ROOT / f"{f}.md").exists() or (ROOT / f"{f}.ipynb").exists(), f"_toc.yml lists missing {f}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_stored_without_outputs(path):
    nb = json.loads(path.read_text())
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "code":
            assert cell.get("outputs") == [], f"{path.name} cell {i} has stored outputs"
            assert cell.get("execution_count") is None, f"{path.name} cell {i} has an execution count"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_first_cell_installs_from_declared_repository(path):
    url = CONFIG["repository"]["url"]
    nb = json.loads(path.read_text())
    first_code = next(c for c in nb["cells"] if c["cell_type"] == "code")
    src = "".join(first_code["source"])
    assert "import posbook" in src and "except ImportError" in src
    assert f"git+{url}" in src, f"{path.name} installs from somewhere other than {url}"
    assert src.count("git+") == 1


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_chapter_declares_kind_and_ends_with_claims_table(path):
    nb = json.loads(path.read_text())
    assert nb["metadata"].get("posbook", {}).get("kind") in {"analysis", "experiment", "training"}
    last_code = [c for c in nb["cells"] if c["cell_type"] == "code"][-1]
    assert "".join(last_code["source"]).strip().endswith(".table()")


def test_launch_buttons_point_to_colab():
    assert CONFIG["launch_buttons"]["colab_url"].startswith("https://colab.research.google.com")
    assert CONFIG["repository"]["url"].startswith("https://github.com/")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_chapter_shows_its_claims_badge_under_the_title(path):
    # posbook.Claims.table() glues the badge; the title cell shows it, so the count is the first thing one reads
    nb = json.loads(path.read_text())
    title = "".join(nb["cells"][0]["source"])
    assert title.startswith("# ") and "```{glue:md} claims.badge" in title.split("\n\n")[1], path.name
    lines = [line for c in nb["cells"] if c["cell_type"] == "markdown" for line in "".join(c["source"]).splitlines()]
    assert "## Claims checked" in lines, f"{path.name}: the badge links to the 'Claims checked' section"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_tidy(path):
    # checks in cells of their own, every cell tagged by its role, code formatted at 88 columns
    assert tidied_text(path) == path.read_text(), f"run: python tools/tidy_notebooks.py {path.relative_to(ROOT)}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_shown_code_checks_and_glues_nothing(path):
    # what a reader sees is the code that teaches; claim checks and glue are in hidden or removed cells
    nb = json.loads(path.read_text())
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code" or set(cell["metadata"].get("tags", [])) & set(MANAGED_TAGS):
            continue
        tree = ast.parse("".join(cell["source"]))
        assert not any(is_check_call(n) for n in ast.walk(tree)), f"{path.name} cell {i} shows a check"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_chapter_ends_with_takeaways_tied_to_their_evidence(path):
    # 3-5 bullets just before the claims table, each linked to the figure or claim behind it
    nb = json.loads(path.read_text())
    text = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    heading = "What this page tells you" if path.stem == "inspect_your_model" else "Key takeaways"
    section = re.search(rf"^## {heading}\n(.*?)^## Claims checked$", text, re.S | re.M)
    assert section, f"{path.name}: no '## {heading}' section right before '## Claims checked'"
    bullets = re.findall(r"^- (.*?)(?=^- |\Z)", section.group(1), re.S | re.M)
    assert 3 <= len(bullets) <= 5, f"{path.name}: {len(bullets)} takeaways"
    for bullet in bullets:
        assert re.search(r"\{(claim|numref|ref)\}`", bullet), f"{path.name}: takeaway without evidence: {bullet[:80]}"


# A sentence of a page's summary that states a number or a comparison links the claim or figure that checks it.
SUMMARY_SECTIONS = ("Results at a glance", "Key takeaways", "What this page tells you")
COMPARISON = re.compile(r"\b(than|more|less|fewer|better|worse|faster|slower|higher|lower|larger|smaller|greater|"
                        r"best|worst|most|least|exceeds?|beats?|outperforms?|improves?|degrades?|twice|half|"
                        r"times)\b", re.I)
EVIDENCE = re.compile(r"\{(claim|numref|ref)\}`")


def summary_sentences(markdown: str):
    """(section, sentence) for every sentence of the summary sections, bullets and paragraphs alike."""
    for heading in SUMMARY_SECTIONS:
        match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", markdown, re.S | re.M)
        if not match:
            continue
        text = re.sub(r"```.*?```", " ", match.group(1), flags=re.S)  # glued figures and directives
        for block in re.split(r"\n(?=- )|\n\n", text):
            for sentence in re.split(r"(?<=[.!?])\s+(?=[A-Z{(])", " ".join(block.split())):
                if sentence.strip():
                    yield heading, sentence


def states_a_number_or_comparison(sentence: str) -> bool:
    # Role targets (claim labels hold digits), inline math and code are not what the sentence states.
    words = re.sub(r"\{[\w:]+\}`[^`]*`|\$[^$]*\$|`[^`]*`", " ", sentence)
    return "{glue" in sentence or bool(re.search(r"\d", words) or COMPARISON.search(words))


def test_the_summary_check_reads_sentences_as_meant():
    text = ("## Key takeaways\n\n- RoPE is worse than ALiBi ({claim}`x <a.b>`). It is 3 times worse.\n"
            "- A $2^{-8}$ slope, see {doc}`ch07`.\n\n## Claims checked\n")
    flagged = [s for _, s in summary_sentences(text) if states_a_number_or_comparison(s) and not EVIDENCE.search(s)]
    assert flagged == ["It is 3 times worse."]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_summary_sentences_link_their_evidence(path):
    nb = json.loads(path.read_text())
    markdown = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    bare = [f"{heading}: {sentence[:160]}" for heading, sentence in summary_sentences(markdown)
            if states_a_number_or_comparison(sentence) and not EVIDENCE.search(sentence)]
    assert not bare, f"{path.name}: sentences that state a number or a comparison without a claim or figure:\n" + \
        "\n".join(bare)


def _string_first_args(tree: ast.AST, names: set[str]) -> list[str]:
    """The literal first argument of every call to a function or method named in ``names``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
            if name in names:
                found.append(node.args[0].value)
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_key_is_glued_twice(path):
    # Every claim glues its value under its own name; gluing another value under that name (or one name twice)
    # is a duplicate glue key, which stops the strict book build. A skipped claim glues nothing, and stands in the
    # other branch of the claim it replaces, so skips are not counted.
    nb = json.loads(path.read_text())
    keys = []
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            source = "".join(line for line in cell["source"] if not line.lstrip().startswith(("%", "!")))
            keys += _string_first_args(ast.parse(source), {"close", "holds", "glue"})
    twice = sorted(k for k, n in collections.Counter(keys).items() if n > 1)
    assert not twice, f"{path.name}: glued more than once: {twice}"



@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_claim_links_give_text_and_key(path):
    # The {claim} role takes `text <key>` (it links within the page); a bare key stops the strict build.
    nb = json.loads(path.read_text())
    markdown = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    bare = [text for text in re.findall(r"\{claim\}`([^`]*)`", markdown)
            if not re.fullmatch(r"[^<]+<[^>]+>", text.strip(), re.S)]
    assert not bare, f"{path.name}: {{claim}} needs `text <key>`: {bare}"


def test_glue_from_another_page_names_its_format():
    # myst-nb reads `path::key` only with a format after it (`path::key:s`, `path::key:.2f`); without one the strict
    # build finds no key.
    for page in sorted((ROOT / "book").glob("*.md")):
        bare = re.findall(r"\{glue:\w+\}`([^`]*\.ipynb::[^`:]+)`", page.read_text())
        assert not bare, f"{page.name}: glue from another page without a format: {bare}"
