"""Bibliography labels that match the author-year citations in the text.

sphinxcontrib-bibtex labels the reference list with alpha keys ("[SLP+21]") by default, and its author-year
citations cannot tell two entries of one author and year apart. This style labels each entry "Su et al., 2021"
(2021a, 2021b where needed) and sorts the list by author, year and title; the book cites with these labels
(bibtex_reference_style "posbook_label"), so the text and the list use the same, unambiguous names. A
parenthetical citation reads "[Su et al., 2021]"; a textual one ({cite:t}) reads "Su et al. (2021)", one link made
from the same label, rather than the stock label style's "Su et al. [Su et al., 2021]".
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pybtex.plugin import register_plugin
from pybtex.richtext import Text
from pybtex.style.formatting.unsrt import Style as UnsrtStyle
from pybtex.style.labels import BaseLabelStyle
from pybtex.style.sorting.author_year_title import SortingStyle
from sphinxcontrib.bibtex.plugin import register_plugin as register_bibtex_plugin
from sphinxcontrib.bibtex.style.referencing import BaseReferenceStyle, BracketStyle
from sphinxcontrib.bibtex.style.referencing.label import LabelReferenceStyle
from sphinxcontrib.bibtex.style.template import join2, node, post_text, pre_text, reference


def _names(entry) -> str:
    people = entry.persons.get("author") or entry.persons.get("editor") or []
    if not people:
        return entry.fields.get("organization", entry.key)
    def last(person) -> str:
        return Text.from_latex(" ".join(person.prelast_names + person.last_names)).render_as("text")

    if len(people) == 1:
        return last(people[0])
    if len(people) == 2:
        return f"{last(people[0])} and {last(people[1])}"
    return f"{last(people[0])} et al."


class AuthorYearLabels(BaseLabelStyle):
    """"Su et al., 2021"; entries that would share a label get 2021a, 2021b, ... in list order."""

    def format_labels(self, sorted_entries):
        entries = list(sorted_entries)
        bases = [(_names(entry), entry.fields.get("year", "n.d.")) for entry in entries]
        counts = {base: bases.count(base) for base in bases}
        seen: dict = {}
        for names, year in bases:
            suffix = ""
            if counts[(names, year)] > 1:
                suffix = "abcdefghijklmnopqrstuvwxyz"[seen.get((names, year), 0)]
                seen[(names, year)] = seen.get((names, year), 0) + 1
            yield f"{names}, {year}{suffix}"


class AuthorYearStyle(UnsrtStyle):
    default_label_style = AuthorYearLabels
    default_sorting_style = SortingStyle


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
    return {"parallel_read_safe": True, "parallel_write_safe": True}
