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


def test_readme_example_runs_and_says_what_it_prints():
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    (code,) = re.findall(r"```python\n(.*?)```", readme, re.S)
    namespace: dict = {}
    exec(code, namespace)  # noqa: S102 - the README's own example
    assert namespace["out"].shape == (1, 32, 16, 128)
    assert "# 70272" in code and pb.kv_cache_bytes_per_token(pb.model_config("DeepSeek-V3")) == 70272
