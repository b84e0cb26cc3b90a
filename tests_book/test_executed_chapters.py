"""The chapters as the book executed them (_build/jupyter_execute): no bare values under the code, and every
figure numbered, captioned, described for a reader who cannot see it, and referred to by its number."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

EXECUTED = Path(__file__).resolve().parents[1] / "_build" / "jupyter_execute" / "notebooks"
CHAPTERS = sorted(EXECUTED.glob("*.ipynb"))
IMAGES = ("image/png", "image/svg+xml", "image/jpeg")


def test_the_book_was_built():
    assert CHAPTERS, f"no executed chapter under {EXECUTED}: run make build-book first"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_no_bare_values_under_the_code(path):
    # A cell whose last line is a value prints its repr ("True", "1.1102230246251565e-16", a dict): the page
    # shows it without saying what it is. Results are shown as figures, tables or sentences instead.
    nb = json.loads(path.read_text())
    bare = [(i, o["data"]["text/plain"][:80]) for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code"
            for o in c["outputs"] if o["output_type"] == "execute_result" and set(o["data"]) <= {"text/plain"}]
    assert bare == [], f"{path.name}: bare values under cells: {bare}"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_every_figure_is_numbered_captioned_described_and_cited(path):
    nb = json.loads(path.read_text())
    prose = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    # {numref} in a numbered chapter ("Fig. 5.2"); {ref} where the page sits outside the numbered parts
    cited = set(re.findall(r"\{(?:num)?ref\}`(?:[^`<]*<)?([^`>]+)>?`", prose))
    problems = []
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code" or not any(set(o.get("data", {})) & set(IMAGES) for o in cell["outputs"]):
            continue
        meta = cell["metadata"].get("mystnb", {})
        figure, image = meta.get("figure", {}), meta.get("image", {})
        name = figure.get("name", "")
        if not (figure.get("caption", "").strip() and name and image.get("alt", "").strip()):
            problems.append(f"cell {i}: needs mystnb.figure.caption, .name and mystnb.image.alt")
        elif name not in cited:
            problems.append(f"cell {i}: the prose never refers to {name}")
        n_images = sum(bool(set(o.get("data", {})) & set(IMAGES)) for o in cell["outputs"])
        if n_images > 1:
            problems.append(f"cell {i}: {n_images} images under one caption")
    assert problems == [], f"{path.name}: {problems}"
