"""Bibliography labels that match the author-year citations in the text.

sphinxcontrib-bibtex labels the reference list with alpha keys ("[SLP+21]") by default, and its author-year
citations cannot tell two entries of one author and year apart. This style labels each entry "Su et al., 2021"
(2021a, 2021b where needed) and sorts the list by author, year and title; the book cites with these labels
(bibtex_reference_style "label"), so the text and the list use the same, unambiguous names.
"""

from __future__ import annotations

from pybtex.plugin import register_plugin
from pybtex.richtext import Text
from pybtex.style.formatting.unsrt import Style as UnsrtStyle
from pybtex.style.labels import BaseLabelStyle
from pybtex.style.sorting.author_year_title import SortingStyle


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


def setup(app):
    register_plugin("pybtex.style.labels", "posbook_author_year", AuthorYearLabels)
    register_plugin("pybtex.style.formatting", "posbook_author_year", AuthorYearStyle)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
