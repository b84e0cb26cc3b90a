"""The reference list as built: papers in one section, code, issues and posts in the other, each sorted by its
labels, every entry of references.bib exactly once, and no TeX left over in what a reader sees."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from bs4 import BeautifulSoup
from pybtex.database import parse_file
from pybtex.richtext import Text

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "_build" / "html" / "book" / "references.html"
ENTRIES = parse_file(str(ROOT / "references.bib")).entries
# section id on the page -> the .bib entry types it lists (book/references.md filters by type)
SECTIONS = {"papers": {"article", "inproceedings"}, "code-issues-and-posts": {"misc"}}


def rendered_sections() -> dict[str, list[tuple[str, str]]]:
    """Section id -> (label, text) of each entry, in page order."""
    soup = BeautifulSoup(PAGE.read_text(encoding="utf-8"), "html.parser")
    return {section: [(" ".join(c.select_one("span.label").get_text().strip("[]").split()),
                       " ".join(c.get_text(" ").split()))
                      for c in soup.select(f"section#{section} div.citation")]
            for section in SECTIONS}


def natural(text: str) -> list:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text.casefold())]


def label_key(label: str) -> tuple:
    """ "Su et al., 2021b" -> by names, then year and letter, case-insensitive, issue numbers by value."""
    names, _, year = label.rpartition(", ")
    return natural(names), year


def plain_title(entry) -> str:
    return " ".join(Text.from_latex(entry.fields["title"]).render_as("text").casefold().split())


@pytest.fixture(scope="module")
def sections():
    if not PAGE.exists():
        raise RuntimeError(f"{PAGE} is missing: build the book first (make book)")
    return rendered_sections()


def test_every_entry_is_listed_once_in_the_section_of_its_type(sections):
    for key, entry in ENTRIES.items():
        title = plain_title(entry)
        found = [section for section, items in sections.items() for _, text in items if title in text.casefold()]
        expected = [section for section, types in SECTIONS.items() if entry.type in types]
        assert found == expected, f"{key} ({entry.type}): listed in {found}, expected in {expected}"
    assert sum(len(items) for items in sections.values()) == len(ENTRIES)


@pytest.mark.parametrize("section", SECTIONS)
def test_section_is_sorted_by_label(section, sections):
    labels = [label for label, _ in sections[section]]
    assert labels, f"section {section} is empty"
    assert labels == sorted(labels, key=label_key)
    assert len(set(labels)) == len(labels), f"section {section} repeats a label"


def test_no_tex_in_any_entry(sections):
    leftovers = [text for items in sections.values() for _, text in items if re.search(r"[{}\\]", text)]
    assert leftovers == []
