"""The import graph of posbook.experiments: one module per concern, each importing only the ones below it, so the
graph has no cycle (a function-level import counts: a cycle hidden inside a function is still a cycle), and the
core never imports the experiments."""

from __future__ import annotations

import ast
from pathlib import Path

import posbook

SRC = Path(posbook.__file__).resolve().parent


def module_name(path: Path) -> str:
    """``posbook.experiments.store`` for src/posbook/experiments/store.py; a package's ``__init__`` is the package."""
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(SRC.rglob("*.py"))}


def imports_of(name: str) -> set[str]:
    """The posbook modules that ``name`` imports, wherever in the file the import statement stands."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module or ""
            # ``from . import grids`` imports the module grids; ``from .config import TrainConfig`` the module config.
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]
        else:
            continue
        found |= {target for target in targets if target in MODULES and target != name}
    return found


GRAPH = {name: imports_of(name) for name in MODULES}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (as a path that returns to its first module) per strongly connected group of modules that has one,
    found by depth-first search."""
    found, state = [], {}            # state: 1 on the current path, 2 finished

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                found.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return found


def test_the_search_finds_a_cycle_where_there_is_one():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_experiments_package_has_no_import_cycle():
    experiments = {name: {target for target in targets if target.startswith("posbook.experiments")}
                   for name, targets in GRAPH.items() if name.startswith("posbook.experiments")}
    assert {"posbook.experiments.config", "posbook.experiments.trainer", "posbook.experiments.store",
            "posbook.experiments.grids"} <= set(experiments)
    assert cycles(experiments) == []


def test_each_layer_imports_only_the_layers_below_it():
    """What a run is, how it is evaluated and trained, the catalogue of grids, and the store that records them: the
    trainer knows nothing of grids or records (the store hands it the weights a run starts from)."""
    below = {
        "config": set(),
        "evaluation": {"config"},
        "checkpoints": {"config"},
        "trainer": {"config", "evaluation", "checkpoints"},
        "grids": {"config"},
        "store": {"config", "evaluation", "checkpoints", "trainer", "grids"},
    }
    layered = set(below)
    for module, allowed in below.items():
        imported = {target.rpartition(".")[2] for target in GRAPH[f"posbook.experiments.{module}"]}
        assert imported & layered <= allowed, f"{module} imports {sorted(imported & layered - allowed)}"


def test_the_core_never_imports_the_experiments():
    core = {name: targets for name, targets in GRAPH.items() if not name.startswith("posbook.experiments")}
    offenders = {name: sorted(t for t in targets if t.startswith("posbook.experiments"))
                 for name, targets in core.items()}
    assert not {name: targets for name, targets in offenders.items() if targets}
