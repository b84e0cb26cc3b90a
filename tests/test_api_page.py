"""Every public name is documented, and the API page renders every module that defines one."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

import posbook as pb

API_PAGE = (Path(__file__).resolve().parents[1] / "book" / "api.md").read_text()
DIRECTIVES = re.findall(r"\.\. automodule:: (\S+)\n((?:\s+:members:.*\n)?)", API_PAGE)


def documented_on_page(obj) -> bool:
    for module, members in DIRECTIVES:
        if module != obj.__module__ or ":members:" not in members:
            continue
        listed = members.split(":members:")[1].strip()
        if not listed or obj.__name__ in [m.strip() for m in listed.split(",")]:
            return True
    return False


@pytest.mark.parametrize("name", sorted(pb.__all__))
def test_public_name_has_a_docstring_and_a_place_on_the_api_page(name):
    obj = getattr(pb, name)
    if inspect.isfunction(obj) or inspect.isclass(obj):
        assert inspect.getdoc(obj) and len(inspect.getdoc(obj)) > 20, f"{name} has no real docstring"
        assert documented_on_page(obj), f"{name} ({obj.__module__}) is not rendered by book/api.md"
