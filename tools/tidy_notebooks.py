"""Keep the chapters' scaffolding out of the reader's way: claim calls in cells of their own, cell tags, code format.

    python tools/tidy_notebooks.py            # rewrite the stored notebooks in place
    python tools/tidy_notebooks.py --check    # exit 1 and list what would change (tests/test_notebook_hygiene.py)

A rendered page shows the code that teaches. The rest is tagged by what the cell does (``cell_role``):

============ ========================================================= ==============
role         cell                                                      tag
============ ========================================================= ==============
install      the first code cell (installs posbook where it is missing) remove-input
setup        imports and the chapter's ``claims = pb.Claims(...)``     hide-input
checks       only claim checks and glue (``claims.*``, ``pb.glue``)      remove-input
claims-table the closing ``claims.table()``                            remove-input
figure       draws a figure (matplotlib, ``pb.viz``)                   hide-input
table        formats a table (``display(Markdown(...))``)              hide-input
mixed        computes, and checks inside a block (``if``/``with``)     hide-input
quiet        computes and shows nothing (no print, display or value)   hide-input
long         shows something, in more than LONG_CELL lines of code     hide-input
teach        everything else: a step that ends in what it shows        (shown)
============ ========================================================= ==============

A visible code cell ends in an output the reader sees (a value, a print, a table, a figure); a cell that only
computes for what follows is folded like the scaffolding, so the page's visible code is code that shows something.

A teaching cell must not call ``claims`` or ``glue``: its checks are split off into a ``checks`` cell that follows
it. A check is moved past the statements after it only when that cannot change what runs (it reads nothing they
assign, they read nothing it assigns, and it calls nothing that could draw random numbers or change state);
otherwise the cell is cut at the check, which runs the same statements in the same order. Figure and table cells
are never cut (the inline backend shows a figure at the end of the cell that draws it); they are hidden whole.
Code is formatted by ``ruff format`` at 88 columns, so code blocks fit the column without scrolling.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
import sys
import tempfile
import tokenize
from io import StringIO
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
LINE_LENGTH = 88
MANAGED_TAGS = ("remove-input", "hide-input")
TAGS = {"install": ["remove-input"], "setup": ["hide-input"], "checks": ["remove-input"],
        "claims-table": ["remove-input"], "figure": ["hide-input"], "table": ["hide-input"], "mixed": ["hide-input"],
        "quiet": ["hide-input"], "long": ["hide-input"], "teach": []}
LONG_CELL = 40    # lines: a visible cell longer than this is folded (a reader scrolls past it, or it belongs in src/)
SHOWING_CALLS = {"print", "display", "show"}

CLAIM_METHODS = {"close", "at_most", "at_least", "between", "holds", "skip"}
FIGURE = re.compile(r"\bplt\.|\.subplots?\(|\bax\.|\baxes\[|\bfig\.|interactive_figure"
                    r"|pb\.viz\.(?!use_style)|pb\.diagrams\.")
TABLE = re.compile(r"\bdisplay\((Markdown|HTML)\(")
SETUP = re.compile(r"^claims = pb\.Claims\(", re.M)
# Calls a moved check may make: they compute from their arguments and change nothing (no random numbers).
PURE_CALLS = {
    "abs", "all", "allclose", "amax", "amin", "any", "argmax", "argmin", "bool", "ceil", "clone", "count", "cpu",
    "dict", "diff", "dim", "double", "endswith", "enumerate", "eq", "equal", "exp", "flatten", "float", "floor",
    "format", "fsum", "ge", "get", "gt", "imag", "index", "int", "isclose", "isfinite", "isinf", "isinstance",
    "isnan", "isqrt", "item", "items", "join", "keys", "le", "len", "list", "log", "log10", "log2", "lower", "lt",
    "max", "mean", "min", "ne", "norm", "numel", "numpy", "prod", "range", "ravel", "real", "replace", "round",
    "sci", "set", "sign", "size", "sorted", "split", "sqrt", "square", "squeeze", "startswith", "std", "str",
    "strip", "sum", "tensor", "to", "tolist", "total_seconds", "tuple", "upper", "values", "var", "zip",
}
PURE_MODULES = {"math", "torch", "np", "numpy"}  # math.log(...), torch.allclose(...): only PURE_CALLS names


def _call_name(call: ast.Call) -> tuple[str | None, str]:
    """(base name, called name) of ``f(...)`` → (None, "f"), ``a.b.f(...)`` → ("a", "f")."""
    func = call.func
    if isinstance(func, ast.Name):
        return None, func.id
    if isinstance(func, ast.Attribute):
        base = func.value
        while isinstance(base, ast.Attribute):
            base = base.value
        return (base.id if isinstance(base, ast.Name) else None), func.attr
    return None, ""


def is_check_call(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        if func.value.id == "claims" and func.attr in CLAIM_METHODS:
            return True
        if func.value.id in {"pb", "posbook"} and func.attr == "glue":
            return True
    return isinstance(func, ast.Name) and func.id == "glue"


def is_check(stmt: ast.stmt) -> bool:
    """A claim check or a glue call, alone or assigned (``err = claims.at_most(...)``), or a loop of them."""
    if isinstance(stmt, (ast.Expr, ast.Assign, ast.AnnAssign)) and stmt.value is not None:
        return is_check_call(stmt.value)
    if isinstance(stmt, ast.For):
        return not stmt.orelse and all(is_check(s) for s in stmt.body)
    return False


def _names(node: ast.AST) -> tuple[set[str], set[str]]:
    """(names read, names possibly changed) by a statement; a method call may change the object it is called on."""
    loads, stores = set(), set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            (stores if isinstance(n.ctx, (ast.Store, ast.Del)) else loads).add(n.id)
        elif isinstance(n, (ast.FunctionDef, ast.ClassDef)):
            stores.add(n.name)
        elif isinstance(n, ast.alias):
            stores.add((n.asname or n.name).split(".")[0])
        elif isinstance(n, (ast.Attribute, ast.Subscript)) and isinstance(n.ctx, ast.Store):
            base = n.value
            while isinstance(base, (ast.Attribute, ast.Subscript)):
                base = base.value
            if isinstance(base, ast.Name):
                stores.add(base.id)
        elif isinstance(n, ast.Call):
            base, name = _call_name(n)
            if base is not None and name not in PURE_CALLS and base not in PURE_MODULES | {"pb", "posbook", "claims"}:
                stores.add(base)
    return loads, stores


def _calls_only_pure(stmt: ast.stmt) -> bool:
    for n in ast.walk(stmt):
        if isinstance(n, ast.Call) and not is_check_call(n):
            base, name = _call_name(n)
            if name not in PURE_CALLS or (base is not None and base in {"pb", "posbook", "plt"}):
                return False
    return True


def _movable(check: ast.stmt, later: list[ast.stmt]) -> bool:
    """Whether ``check`` can run after ``later`` instead of before it with the same effect."""
    if not _calls_only_pure(check):
        return False
    reads, writes = _names(check)
    for stmt in later:
        r, w = _names(stmt)
        if reads & w or writes & (r | w):
            return False
    return True


def _segments(source: str, tree: ast.Module) -> list[str] | None:
    """The source of each top-level statement, with the comments and blank lines before it (None when two
    statements share a line: the cell is then left whole)."""
    body = tree.body
    if any(b.lineno == a.end_lineno for a, b in zip(body, body[1:])):
        return None
    lines = source.splitlines(keepends=True)
    bounds = [0] + [s.end_lineno for s in body[:-1]]
    ends = [s.end_lineno for s in body[:-1]] + [len(lines)]
    return ["".join(lines[b:e]).rstrip("\n") + "\n" for b, e in zip(bounds, ends)]


def split_checks(source: str) -> list[tuple[str, bool]]:
    """The cell as consecutive pieces ``(source, is_checks)``: checks moved to the end where that is safe, else
    the cell is cut around them. One piece when the cell is all checks or holds none."""
    tree = ast.parse(source)
    body = tree.body
    checks = [is_check(s) for s in body]
    segs = _segments(source, tree)
    if not any(checks) or all(checks) or segs is None:
        return [(source, bool(body) and all(checks))]
    # From the last statement back: a check moves to the end when none of the statements after it that stay
    # can tell the difference. Moved checks keep their order, and so do the statements that stay.
    moved: set[int] = set()
    for i in reversed(range(len(body))):
        later = [body[j] for j in range(i + 1, len(body)) if j not in moved]
        if checks[i] and _movable(body[i], later):
            moved.add(i)
    order = [i for i in range(len(body)) if i not in moved] + sorted(moved)
    pieces: list[tuple[str, bool]] = []
    for j in order:
        if pieces and pieces[-1][1] == checks[j]:
            pieces[-1] = (pieces[-1][0] + segs[j], checks[j])
        else:
            pieces.append((segs[j], checks[j]))
    return [(text.strip("\n") + "\n", kind) for text, kind in pieces]


def cell_role(source: str, index: int, n_code: int) -> str:
    """What a code cell does (see the module docstring); ``index`` counts code cells from 0."""
    if index == 0:
        return "install"
    if index == n_code - 1 and source.strip().endswith(".table()"):
        return "claims-table"
    for role, pattern in (("setup", SETUP), ("figure", FIGURE), ("table", TABLE)):
        if pattern.search(source):
            return role
    tree = ast.parse(source)
    if tree.body and all(is_check(s) for s in tree.body):
        return "checks"
    if any(is_check_call(n) for n in ast.walk(tree)):
        return "mixed"
    if not shows_something(source, tree):
        return "quiet"
    return "long" if len(source.strip().splitlines()) > LONG_CELL else "teach"


def shows_something(source: str, tree: ast.Module) -> bool:
    """Whether a cell puts anything on the page: a print, display or show call anywhere in it, or a last statement
    that is an expression whose value the notebook displays (not silenced by a trailing semicolon)."""
    if any(isinstance(n, ast.Call) and _call_name(n)[1] in SHOWING_CALLS for n in ast.walk(tree)):
        return True
    return bool(tree.body) and isinstance(tree.body[-1], ast.Expr) and not source.rstrip().endswith(";")


def _quiet(source: str) -> str:
    """A piece that no longer ends its cell must not start showing its last value (``torch.manual_seed(0)``)."""
    tree = ast.parse(source)
    if tree.body and isinstance(tree.body[-1], ast.Expr) and not source.rstrip().endswith(";"):
        call = tree.body[-1].value
        if not (isinstance(call, ast.Call) and _call_name(call)[1] in {"print", "display", "show"}):
            return source.rstrip("\n") + ";\n"
    return source


def lift_long_comments(source: str) -> str:
    """A comment at the end of a line longer than the format's lines moves to a line of its own above it, so the
    formatter does not break the code apart to make room for the comment."""
    try:
        tokens = list(tokenize.generate_tokens(StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        return source
    lines = source.splitlines(keepends=True)
    moves = {}  # line index -> column where its trailing comment starts
    for tok in tokens:
        row, col = tok.start
        line = lines[row - 1] if row - 1 < len(lines) else ""
        after_backslash = row > 1 and lines[row - 2].rstrip().endswith("\\")  # no line may come between
        if (tok.type == tokenize.COMMENT and line[:col].strip() and len(line.rstrip("\n")) > LINE_LENGTH
                and not after_backslash):
            moves[row - 1] = col
    for i in sorted(moves, reverse=True):
        line, col = lines[i], moves[i]
        indent = line[: len(line) - len(line.lstrip())]
        newline = "\n" if line.endswith("\n") else ""
        lines[i:i + 1] = [indent + line[col:].rstrip() + "\n", line[:col].rstrip() + newline]
    return "".join(lines)


def _code_cell(source: str) -> dict:
    return {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
            "source": source.splitlines(keepends=True)}


def tidy(nb: dict) -> dict:
    """The notebook with checks split out of teaching cells and every code cell tagged by its role (in memory)."""
    cells = []
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    for cell in nb["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] != "code" or code.index(cell) == 0:
            cells.append(cell)
            continue
        index = code.index(cell)
        if cell_role(source, index, len(code)) in {"claims-table", "setup", "figure", "table"}:
            cells.append(cell)
            continue
        pieces = split_checks(source)
        if len(pieces) == 1:
            cells.append(cell)
            continue
        for k, (text, is_checks) in enumerate(pieces):
            new = _code_cell(_quiet(text) if is_checks or k < len(pieces) - 1 else text)
            if k == 0:
                new["metadata"] = dict(cell.get("metadata", {}))
            cells.append(new)
    code = [c for c in cells if c["cell_type"] == "code"]
    for index, cell in enumerate(code):
        role = cell_role("".join(cell["source"]), index, len(code))
        if role == "checks":  # a check returns its value, which the page must not show as a bare output
            cell["source"] = _quiet("".join(cell["source"])).splitlines(keepends=True)
        meta = cell.setdefault("metadata", {})
        tags = [t for t in meta.get("tags", []) if t not in MANAGED_TAGS] + TAGS[role]
        if tags:
            meta["tags"] = tags
        else:
            meta.pop("tags", None)
    return dict(nb, cells=cells)


def ruff_format(path: Path, name: str) -> None:
    done = subprocess.run([sys.executable, "-m", "ruff", "format", "--quiet", "--no-cache", "--isolated",
                           f"--line-length={LINE_LENGTH}", str(path)], capture_output=True, text=True)
    if done.returncode != 0:  # ruff names the cell it cannot parse
        raise SystemExit(f"ruff format failed on {name}:\n{done.stderr.replace(str(path), name)}")


def dump(nb: dict) -> str:
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


def formatted(nb: dict, name: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "notebook.ipynb"
        out.write_text(dump(nb))
        ruff_format(out, name)
        return json.loads(out.read_text())


def tidied_text(path: Path) -> str:
    """What the stored notebook at ``path`` would be after tidying (formatted first, so that statements that
    shared a line are on lines of their own before checks are split off)."""
    nb = json.loads(path.read_text())
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            cell["source"] = lift_long_comments("".join(cell["source"])).splitlines(keepends=True)
    nb = formatted(tidy(formatted(nb, path.name)), path.name)
    return dump(nb)  # ruff writes the JSON in its own layout; store it in ours


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a notebook is not tidy")
    parser.add_argument("paths", nargs="*", type=Path, help="notebooks (default: every chapter)")
    args = parser.parse_args(argv)
    untidy = []
    for path in args.paths or sorted(NOTEBOOKS.glob("*.ipynb")):
        text = tidied_text(path)
        if text != path.read_text():
            untidy.append(path)
            if not args.check:
                path.write_text(text)
    for path in untidy:
        print(f"{'not tidy' if args.check else 'tidied'}: {path.resolve().relative_to(ROOT)}")
    return 1 if args.check and untidy else 0


if __name__ == "__main__":
    sys.exit(main())
