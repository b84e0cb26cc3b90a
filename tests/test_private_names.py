"""No private name crosses a module boundary in src/posbook: what one module needs of another is public (the checked
API, or the unchecked layer beneath it), and shared argument checks live in ``posbook._checks``. Two private modules
exist to be shared, ``_checks`` and ``_cli``: their names may be used anywhere."""

from __future__ import annotations

import ast
from pathlib import Path

import posbook

SRC = Path(posbook.__file__).resolve().parent
SHARED = {"posbook._checks", "posbook._cli"}     # modules whose whole purpose is shared internals


def module_name(path: Path) -> str:
    """``posbook.rope`` for src/posbook/rope.py; a package's ``__init__`` is the package."""
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(SRC.rglob("*.py"))}


def private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def crossings(source: str, name: str, is_package: bool, modules: set[str]) -> list[str]:
    """``line: what`` for every private name that module ``name`` takes from another posbook module: ``from .x import
    _y``, ``x._y`` on a module bound by an import, and ``from . import _x`` of a private module other than the shared
    ones."""
    package = name if is_package else name.rpartition(".")[0]
    bound: dict[str, str] = {}       # local name -> the posbook module it is bound to
    found = []
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in modules:
                    bound[alias.asname or alias.name] = alias.name if alias.asname else alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            if base not in modules:
                continue
            for alias in node.names:
                target = f"{base}.{alias.name}"
                if target in modules:                       # a module: ``from . import rope``
                    bound[alias.asname or alias.name] = target
                    if private(alias.name) and target not in SHARED:
                        found.append(f"{node.lineno}: import of the private module {target}")
                elif private(alias.name) and base not in SHARED and base != name:
                    found.append(f"{node.lineno}: from {base} import {alias.name}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and private(node.attr) and isinstance(node.value, ast.Name):
            target = bound.get(node.value.id)
            if target is not None and target not in SHARED and target != name:
                found.append(f"{node.lineno}: {node.value.id}.{node.attr} ({target})")
    return sorted(found, key=lambda line: (int(line.split(":")[0]), line))


def test_the_scan_finds_each_form_of_crossing():
    modules = {"posbook", "posbook.a", "posbook.b", "posbook._c", "posbook.sub", "posbook.sub.d"} | SHARED
    source = ("from .a import _hidden, shown\nfrom . import b, _c, _checks\nimport posbook.a as a_mod\n"
              "b._inner(); b.outer(); _checks._show(1); a_mod._x\n")
    assert crossings(source, "posbook.d", False, modules) == [
        "1: from posbook.a import _hidden", "2: import of the private module posbook._c", "4: a_mod._x (posbook.a)",
        "4: b._inner (posbook.b)"]
    assert crossings("from ..a import _up\n", "posbook.sub.d", False, modules) == ["1: from posbook.a import _up"]
    # The shared modules' names, and a module's own private names, are not crossings.
    assert crossings("from ._checks import _show\nfrom . import _cli\n", "posbook.d", False, modules) == []
    assert crossings("from . import d\nd._own\n", "posbook.sub.d", False, modules) == []


def test_no_private_name_is_imported_across_modules():
    names = set(MODULES)
    offenders = {name: found for name, path in MODULES.items()
                 if (found := crossings(path.read_text(), name, path.name == "__init__.py", names))}
    assert not offenders, "private names used across modules (make them public, or move shared checks to _checks):\n" \
        + "\n".join(f"{MODULES[name].relative_to(SRC.parent)}:{line}" for name, lines in offenders.items()
                    for line in lines)
