"""Every public name is documented, every public module has its page in the API reference, and the pages are in the
book's table of contents."""

from __future__ import annotations

import inspect
import pkgutil
import re
from pathlib import Path

import pytest
import yaml

import posbook as pb

ROOT = Path(__file__).resolve().parents[1]
INDEX = ROOT / "book" / "api.md"
MODULE_PAGES = sorted((ROOT / "book" / "api").glob("*.md"))
PAGES = {page: page.read_text() for page in [INDEX, *MODULE_PAGES]}
# An automodule directive and its option lines (a :members: list may run on over further indented lines).
AUTOMODULE = re.compile(r"\.\. automodule:: (\S+)\n((?:[ \t]+:.*\n(?:[ \t]{4,}[^:\s].*\n)*)*)")


def directives():
    """(page, module, members) for each automodule: members None without :members:, "" for all, else the list."""
    for page, text in PAGES.items():
        for module, options in AUTOMODULE.findall(text):
            members = re.search(r":members:(.*?)(?=\n\s*:|\Z)", options, re.DOTALL)
            yield page, module, None if members is None else " ".join(members[1].split())


DIRECTIVES = list(directives())
PUBLIC_MODULES = ["posbook"] + sorted(
    m.name for m in pkgutil.walk_packages(pb.__path__, "posbook.")
    if not any(part.startswith("_") for part in m.name.split(".")))


def documented_on_page(obj) -> bool:
    for _, module, members in DIRECTIVES:
        if module != obj.__module__ or members is None:
            continue
        if not members or obj.__name__ in [m.strip() for m in members.split(",")]:
            return True
    return False


@pytest.mark.parametrize("name", sorted(pb.__all__))
def test_public_name_has_a_docstring_and_a_place_on_the_api_pages(name):
    obj = getattr(pb, name)
    if inspect.isfunction(obj) or inspect.isclass(obj):
        assert inspect.getdoc(obj) and len(inspect.getdoc(obj)) > 20, f"{name} has no real docstring"
        assert documented_on_page(obj), f"{name} ({obj.__module__}) is not rendered by the pages under book/api"


@pytest.mark.parametrize("module", PUBLIC_MODULES)
def test_public_module_is_on_exactly_one_api_page(module):
    pages = [page.relative_to(ROOT) for page, documented, _ in DIRECTIVES if documented == module]
    assert len(pages) == 1, f"{module} is rendered by {pages or 'no page'} (book/api.md and book/api/*.md)"
    if module == "posbook":
        assert pages[0] == INDEX.relative_to(ROOT), "the package's own docstring opens the API reference"


def test_every_module_page_is_in_the_table_of_contents_under_the_api_reference():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    (api,) = [c for part in toc["parts"] for c in part["chapters"] if c["file"] == "book/api"]
    listed = [section["file"] for section in api.get("sections", [])]
    on_disk = [str(page.relative_to(ROOT).with_suffix("")) for page in MODULE_PAGES]
    assert sorted(listed) == on_disk, "book/api/*.md and the sections of book/api in _toc.yml differ"
    # The index links every page, in the order of the table of contents (the order data flows).
    linked = re.findall(r"\{doc\}`(api/\w+)`", PAGES[INDEX])
    assert ["book/" + page for page in linked] == listed


def test_readme_example_runs_and_says_what_it_prints():
    readme = (ROOT / "README.md").read_text()
    (code,) = re.findall(r"```python\n(.*?)```", readme, re.DOTALL)
    namespace: dict = {}
    exec(code, namespace)  # noqa: S102 - the README's own example
    assert namespace["out"].shape == (1, 32, 16, 128)
    assert "# 70272" in code and pb.kv_cache_bytes_per_token(pb.model_config("DeepSeek-V3")) == 70272
