"""Bibliography labels that match the author-year citations in the text.

sphinxcontrib-bibtex labels the reference list with alpha keys ("[SLP+21]") by default, and its author-year
citations cannot tell two entries of one author and year apart. This style labels each entry "Su et al., 2021"
(2021a, 2021b where needed) and sorts the list by that label and then title; the book cites with these labels
(bibtex_reference_style "posbook_label"), so the text and the list use the same, unambiguous names. A
parenthetical citation reads "[Su et al., 2021]"; a textual one ({cite:t}) reads "Su et al. (2021)", one link made
from the same label, rather than the stock label style's "Su et al. [Su et al., 2021]".

The reference list has several sections, one bibliography directive each, and each directive labels its own
entries; the letters are given over the whole .bib, so that two entries of one author and year still differ when
they are listed in different sections ("Ye et al., 2024a" is code, "Ye et al., 2024b" the paper).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from pybtex.plugin import register_plugin
from pybtex.richtext import Text
from pybtex.style.formatting.unsrt import Style as UnsrtStyle
from pybtex.style.labels import BaseLabelStyle
from pybtex.style.sorting import BaseSortingStyle
from sphinxcontrib.bibtex.plugin import register_plugin as register_bibtex_plugin
from sphinxcontrib.bibtex.style.referencing import BaseReferenceStyle, BracketStyle
from sphinxcontrib.bibtex.style.referencing.label import LabelReferenceStyle
from sphinxcontrib.bibtex.style.template import join2, node, post_text, pre_text, reference


def _plain(latex: str) -> str:
    return Text.from_latex(latex).render_as("text")


def _names(entry) -> str:
    people = entry.persons.get("author") or entry.persons.get("editor") or []
    if not people:
        return entry.fields.get("organization", entry.key)
    def last(person) -> str:
        return _plain(" ".join(person.prelast_names + person.last_names))

    if len(people) == 1:
        return last(people[0])
    if len(people) == 2:
        return f"{last(people[0])} and {last(people[1])}"
    return f"{last(people[0])} et al."


def _year(entry) -> str:
    return entry.fields.get("year", "n.d.")


def _natural(text: str) -> list:
    """Case-insensitive, numbers by value: "vllm #941" before "vllm #3488"."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text.casefold())]


def sorting_key(entry) -> tuple:
    """By the label as the reader sees it (names, year), then title: braces and TeX in the .bib do not count."""
    return _natural(_names(entry)), _year(entry), _natural(_plain(entry.fields.get("title", "")))


class AuthorYearSorting(BaseSortingStyle):
    def sorting_key(self, entry):
        return sorting_key(entry)


# entry key -> "", "a", "b", ...: set from every entry of the book's .bib files when the build starts.
_SUFFIXES: dict[str, str] = {}


def _letter_entries(app) -> None:
    entries = sorted(app.env.get_domain("cite").bibdata.data.entries.values(), key=sorting_key)
    bases = [(_names(entry), _year(entry)) for entry in entries]
    counts, seen = Counter(bases), Counter()
    _SUFFIXES.clear()
    for entry, base in zip(entries, bases):
        _SUFFIXES[entry.key] = "abcdefghijklmnopqrstuvwxyz"[seen[base]] if counts[base] > 1 else ""
        seen[base] += 1


class AuthorYearLabels(BaseLabelStyle):
    """"Su et al., 2021"; entries of the book that would share a label get 2021a, 2021b, ... in sorted order."""

    def format_labels(self, sorted_entries):
        for entry in sorted_entries:
            yield f"{_names(entry)}, {_year(entry)}{_SUFFIXES[entry.key]}"


class AuthorYearStyle(UnsrtStyle):
    default_label_style = AuthorYearLabels
    default_sorting_style = AuthorYearSorting


@node
def _textual_label(children, data):
    """ "Su et al., 2021a" → "Su et al. (2021a)": the label, read as a textual citation."""
    assert not children
    names, _, year = data["formatted_entry"].label.rpartition(", ")
    return Text(f"{names} ({year})" if names else year)


@dataclass
class TextualLabelReferenceStyle(BaseReferenceStyle):
    """{cite:t} and {cite:ts}: "Su et al. (2021)" as one link."""

    bracket: BracketStyle = field(default_factory=BracketStyle)

    def role_names(self):
        return [f"{capfirst}t{full}" for capfirst in ("", "c") for full in ("", "s")]

    def outer(self, role_name, children):
        return self.bracket.outer(children, brackets=False, capfirst="c" in role_name)

    def inner(self, role_name):
        return join2(sep1=" ", sep2=", ")[pre_text, reference[_textual_label], post_text]


@dataclass
class PosbookLabelReferenceStyle(LabelReferenceStyle):
    """The stock label style with the textual form replaced."""

    def __post_init__(self):
        super().__post_init__()
        self.styles[1] = TextualLabelReferenceStyle()
        self.role_style = {name: style for style in self.styles for name in style.role_names()}


def setup(app):
    register_bibtex_plugin("sphinxcontrib.bibtex.style.referencing", "posbook_label", PosbookLabelReferenceStyle)
    register_plugin("pybtex.style.labels", "posbook_author_year", AuthorYearLabels)
    register_plugin("pybtex.style.formatting", "posbook_author_year", AuthorYearStyle)
    # After sphinxcontrib-bibtex's own handler (priority 500), which reads the .bib files.
    app.connect("builder-inited", _letter_entries, priority=600)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
