"""Claims: every quantitative statement a chapter makes is checked where it is made.

A chapter opens a :class:`Claims` ledger, checks each statement with the value its own code computed, and ends
by displaying the ledger as a "claims checked" table. A claim that does not hold raises :class:`ClaimError`, so
the notebook stops, nbmake fails, and the book does not build. Each checked value is also glued (myst-nb) under
the claim's key, so the prose can quote the number the page computed instead of a typed one.

What a check takes: a number is an int or a float (numpy's too, or a sympy number), or a one-element tensor or
array holding one; a bool, a string or a bool tensor is not a number. A computed value that is NaN or infinite
cannot satisfy a claim (ClaimError); a NaN or infinite reference (expected value, bound) is refused. A condition
is a bool, a numpy bool or a one-element bool tensor: 1, "yes" or a sympy relation are not (wrap a sympy result
in ``bool(...)`` or compare with ``== 0``).

Where a claim does not hold, what follows depends on who runs the page. The book build stops. A reader's own run
stops too, with a :class:`ClaimError` that names the environment the page ran in (torch, the CPU's vector
instructions, threads, device; :func:`environment`) and says that the published numbers were computed by the
book's build. ``POSBOOK_CLAIMS=warn`` turns a failed claim into a :class:`ClaimWarning`, so a reader can go on
exploring; the claims table then says how many claims did not hold there. ``POSBOOK_CLAIMS_LOG=path`` appends every
claim, held or not, to a JSON-lines file (what ``tools/portability.py`` compares across environments).

A claim that compares with an optional oracle (the installed ``transformers``) cannot be checked where that oracle
is missing or its code differs from what the claim reads: :meth:`Claims.skip` prints why, and the table lists the
claim as not checked rather than dropping it.
"""

from __future__ import annotations

import functools
import html
import json
import math
import os
import platform
import re
import warnings
from dataclasses import dataclass
from numbers import Integral, Real
from typing import Any

import numpy as np
import torch

from . import _checks

try:  # myst-nb is there when the book is built; on Colab the glue is simply not needed.
    from myst_nb import glue as _myst_glue
except ImportError:  # pragma: no cover - exercised only where myst-nb is absent
    _myst_glue = None


def _in_kernel() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover
        return False
    return get_ipython() is not None


class ClaimError(AssertionError):
    """A claim of the book does not hold for the values the page computed."""


class ClaimWarning(UserWarning):
    """A claim that did not hold, where ``POSBOOK_CLAIMS=warn`` lets the page go on."""


# POSBOOK_CLAIMS: what a claim that does not hold does ("raise", the default, or "warn").
MODE_ENV = "POSBOOK_CLAIMS"
MODES = ("raise", "warn")
# POSBOOK_CLAIMS_LOG: a JSON-lines file every claim is appended to (chapter, key, value, expected, held, environment).
LOG_ENV = "POSBOOK_CLAIMS_LOG"
# Set by tools/run_notebooks.py: the page runs in the book's build, whose numbers are the published ones.
BUILD_ENV = "POSBOOK_BOOK_BUILD"
# POSBOOK_SEED: the seed a chapter's own small trainings start from (0, the book's, when unset).
SEED_ENV = "POSBOOK_SEED"
# The sweep a claim on a chapter's own training states its measured margin over (tools/portability.py: seeds 0-2,
# each with torch's kernels at AVX-512, at AVX2 and at their baseline vectors), in the claim's text.
SWEPT = "measured in 9 runs: POSBOOK_SEED 0–2, each on AVX-512, AVX2 and generic CPU kernels"


def chapter_seed() -> int:
    """The seed a chapter's own trainings start from: ``POSBOOK_SEED``, else 0 (what the book shows).

    A claim about a model a chapter trains is a claim about any such run, not about one draw: it must hold for
    every seed from 0 to 2 in every floating-point environment tools/portability.py tests, and its text says
    the margin measured there. A reader can rerun a chapter with ``POSBOOK_SEED=1`` to see another draw.
    """
    text = os.environ.get(SEED_ENV, "").strip()
    if not text:
        return 0
    if not (text.isascii() and text.isdigit()):
        raise ValueError(f"{SEED_ENV} must be a non-negative integer, got {os.environ[SEED_ENV]!r}")
    return int(text)


def claims_mode() -> str:
    """What a failed claim does here: ``"raise"`` (the default) or ``"warn"`` (``POSBOOK_CLAIMS=warn``)."""
    mode = os.environ.get(MODE_ENV, "").strip().lower() or "raise"
    if mode not in MODES:
        raise ValueError(f"{MODE_ENV} must be one of {', '.join(MODES)} (or unset), got {os.environ[MODE_ENV]!r}")
    return mode


@functools.cache
def _cpu_name() -> str:
    """The CPU's model name (Linux's /proc/cpuinfo, else what :mod:`platform` knows); read once per process."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:  # not Linux
        pass
    return platform.processor() or platform.machine()


def environment() -> dict[str, Any]:
    """Where this page runs, as far as its numbers can depend on it: torch's version, the CPU's name and the
    vector instructions torch's kernels use there (``torch.backends.cpu.get_cpu_capability()``), torch's thread
    count, and the GPU if one is visible."""
    env: dict[str, Any] = {"torch": torch.__version__, "cpu": _cpu_name(),
                           "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                           "threads": torch.get_num_threads()}
    if torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name(0)
    return env


def describe_environment(env: dict[str, Any] | None = None) -> str:
    """:func:`environment` in one line: "torch 2.13.0, AMD EPYC (AVX512), 1 thread"."""
    env = environment() if env is None else env
    threads = env["threads"]
    text = f"torch {env['torch']}, {env['cpu']} ({env['cpu_capability']}), {threads} thread{'s' * (threads != 1)}"
    return text + (f", GPU {env['gpu']}" if "gpu" in env else "")


@dataclass(frozen=True)
class Claim:
    key: str
    statement: str
    computed: str
    expected: str
    source: str | None
    checked: bool = True
    held: bool = True


_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def sci(x: Any, digits: int = 1) -> str:
    """A number for prose, tables and figures as "m × 10ⁿ", with a true minus sign and no-break spaces
    (``sci(3.8e7)`` → "3.8 × 10⁷", ``sci(-4.96e-7, 2)`` → "−4.96 × 10⁻⁷"), instead of Python's "3.8e+07"."""
    # float64 holds 17 significant digits: one before the point and at most 16 after it mean something.
    _checks.number("digits", digits, integer=True, min_value=0, max_value=16)
    value = float(_as_number("x", x))
    mantissa, exponent = f"{value:.{digits}e}".split("e")
    return f"{mantissa.replace('-', '−')}\u00a0×\u00a010{str(int(exponent)).translate(_SUPERSCRIPT)}"


def join_names(names: Any, *, empty: str = "none") -> str:
    """Names for prose: "A", "A and B", "A, B and C", and ``empty`` for none. When a name holds a comma or an "and"
    of its own ("iRoPE, no QK-Norm in NoPE"), semicolons separate the names ("A; B, C; and D"), so a reader can
    tell where each one ends."""
    _checks.text("empty", empty)
    if isinstance(names, (str, bytes)) or not hasattr(names, "__iter__"):
        raise TypeError(f"names must be an iterable of strings, got {type(names).__name__} {names!r}")
    names = list(names)
    for i, name in enumerate(names):
        _checks.text(f"names[{i}]", name)
        if not name.strip():
            raise ValueError(f"names[{i}] must not be blank, got {name!r}")
    if not names:
        return empty
    if len(names) == 1:
        return names[0]
    if any("," in n or " and " in n for n in names):
        return "; ".join(names[:-1]) + "; and " + names[-1]
    return ", ".join(names[:-1]) + " and " + names[-1]


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}".replace("-", "−")
    if isinstance(value, Real):
        v = float(value)
        if v == 0 or (1e-3 <= abs(v) < 1e5):
            return f"{v:.6g}".replace("-", "−")
        return sci(v, 3) if math.isfinite(v) else str(v)
    return str(value)


def _as_number(name: str, value: Any, *, finite: bool = True) -> int | float:
    """A Python number from a number or a one-element tensor or array (see the module docstring); counts stay ints
    (glued as "897", not "897.0"). ``finite``: NaN and ±inf are refused."""
    if not isinstance(value, Real) and hasattr(value, "item"):
        try:
            value = value.item()
        except (TypeError, ValueError, RuntimeError):
            raise TypeError(f"{name} must hold a single number, got {_checks._show(value)}") from None
    if isinstance(value, (bool, np.bool_, str, bytes)):
        raise TypeError(f"{name} must be a real number or a one-element tensor or array, got "
                        f"{type(value).__name__} {value!r}")
    if isinstance(value, Integral):
        return int(value)
    try:
        # A float, or anything that is one (numpy and sympy numbers).
        value = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a real number or a one-element tensor or array, got "
                        f"{type(value).__name__} {value!r}") from None
    if finite and not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return value


def _truth(condition: Any) -> bool:
    """A truth value: a bool, a numpy bool or a one-element bool tensor."""
    if isinstance(condition, (bool, np.bool_)):
        return bool(condition)
    if isinstance(condition, torch.Tensor) and condition.dtype == torch.bool and condition.numel() == 1:
        return bool(condition)
    raise TypeError(f"condition must be a bool, a numpy bool or a one-element bool tensor, got "
                    f"{type(condition).__name__} {_checks._show(condition)}")


class Claims:
    """The ledger of one chapter.

    >>> claims = Claims("RoPE from first principles")
    >>> claims.close("rope.norm", "rotation keeps the norm", 2.0, 2.0, rtol=1e-12)
    2.0
    """

    def __init__(self, chapter: str):
        _checks.text("chapter", chapter)
        if not chapter.strip():
            raise ValueError(f"chapter must not be blank, got {chapter!r}")
        self.chapter = chapter
        self._claims: list[Claim] = []
        self._skipped: list[Claim] = []

    # -- the checks --------------------------------------------------------------------------------------------
    def close(self, key: str, statement: str, value: Any, expected: Any, *, rtol: float = 0.0, atol: float = 0.0,
              source: str | None = None) -> int | float:
        """Holds when ``abs(value - expected) <= atol + rtol * abs(expected)``; rtol and atol are finite and >= 0."""
        self._check_labels(key, statement, source)
        _checks.number("rtol", rtol, min_value=0)
        _checks.number("atol", atol, min_value=0)
        v, e = self._computed(key, value), _as_number("expected", expected)
        tol = atol + rtol * abs(e)
        ok = abs(v - e) <= tol
        tol_text = "exact" if tol == 0 else f"± {_fmt(tol)}"
        return self._record(key, statement, v, f"{_fmt(e)} ({tol_text})", ok, source)

    def at_most(self, key: str, statement: str, value: Any, bound: Any, *, source: str | None = None) -> int | float:
        """Holds when ``value <= bound``."""
        self._check_labels(key, statement, source)
        v, b = self._computed(key, value), _as_number("bound", bound)
        return self._record(key, statement, v, f"≤ {_fmt(b)}", v <= b, source)

    def at_least(self, key: str, statement: str, value: Any, bound: Any, *, source: str | None = None) -> int | float:
        """Holds when ``value >= bound``."""
        self._check_labels(key, statement, source)
        v, b = self._computed(key, value), _as_number("bound", bound)
        return self._record(key, statement, v, f"≥ {_fmt(b)}", v >= b, source)

    def between(self, key: str, statement: str, value: Any, low: Any, high: Any, *,
                source: str | None = None) -> int | float:
        """Holds when ``low <= value <= high``."""
        self._check_labels(key, statement, source)
        v, lo, hi = self._computed(key, value), _as_number("low", low), _as_number("high", high)
        if lo > hi:
            raise ValueError(f"low must be <= high, got low={lo}, high={hi}")
        return self._record(key, statement, v, f"in [{_fmt(lo)}, {_fmt(hi)}]", lo <= v <= hi, source)

    def holds(self, key: str, statement: str, condition: Any, *, shown: Any = None,
              source: str | None = None) -> bool:
        """A yes/no fact (a symbolic identity simplified to zero, a tensor equality, ...): ``condition`` is a bool, a
        numpy bool or a one-element bool tensor; ``shown`` (any value, default the condition) fills the table's
        "computed" column."""
        self._check_labels(key, statement, source)
        condition = _truth(condition)
        shown = condition if shown is None else shown
        self._record(key, statement, shown, "holds", condition, source)
        return condition

    def skip(self, key: str, statement: str, reason: str, *, source: str | None = None) -> None:
        """A claim this page cannot check here: the oracle it compares with is not installed, or its code differs
        from what the claim reads (``reason`` says which).

        Prints a note with the reason, and the table lists the claim as *not checked here*; nothing is glued under
        ``key``, and nothing about the claim is asserted. Use it only around the oracle, never for a claim the
        page's own code can check.

        >>> Claims("t").skip("hf.same", "transformers agrees", "transformers is not installed here")
        Not checked here: transformers agrees (transformers is not installed here).
        """
        self._check_labels(key, statement, source)
        if not isinstance(reason, str) or not reason.strip():
            raise ValueError("reason must say why the claim is not checked")
        reason = reason.strip()
        self._skipped.append(Claim(key, statement, "not checked here", reason, source, checked=False))
        print(f"Not checked here: {statement} ({reason}).")

    # -- bookkeeping -------------------------------------------------------------------------------------------
    def _check_labels(self, key: Any, statement: Any, source: Any) -> None:
        _checks.text("key", key)
        if any(c.isspace() for c in key):
            raise ValueError(f"key must be a string without spaces, got {key!r}")
        if any(c.key == key for c in (*self._claims, *self._skipped)):
            raise ValueError(f"key {key!r} is already used in this chapter's claims")
        _checks.text("statement", statement)
        if source is not None:
            _checks.text("source", source)

    def _computed(self, key: str, value: Any) -> int | float:
        """The value a claim is about, a number (NaN and ±inf included: :meth:`_record` fails them)."""
        return _as_number("value", value, finite=False)

    def _record(self, key: str, statement: str, value: Any, expected: str, ok: bool,
                source: str | None) -> Any:
        mode = claims_mode()  # a bad POSBOOK_CLAIMS is refused at the first claim, held or not
        # A NaN or infinite value satisfies no claim: a training that diverged is the failure a reader must see.
        finite = not isinstance(value, Real) or isinstance(value, bool) or math.isfinite(value)
        ok = ok and finite
        _log(self.chapter, key, value, expected, ok)
        if not ok:
            computed = f"computed value {_fmt(value)}" if finite else f"the computed value is {value!r}"
            message = f"[{self.chapter}] claim {key!r} does not hold: {statement} — {computed}, expected {expected}"
            if not os.environ.get(BUILD_ENV):
                message += f". This run: {describe_environment()}; the numbers the book shows were computed by its build."
                if mode == "raise":
                    message += f" Set {MODE_ENV}=warn to turn failed claims into warnings and go on."
            if mode == "raise":
                raise ClaimError(message)
            warnings.warn(message, ClaimWarning, stacklevel=3)
        self._claims.append(Claim(key, statement, _fmt(value), expected, source, held=ok))
        glue(key, value)
        return value

    def __len__(self) -> int:
        """The number of claims checked (skipped ones not counted)."""
        return len(self._claims)

    def __iter__(self):
        return iter(self._claims)

    @property
    def skipped(self) -> tuple[Claim, ...]:
        """The claims :meth:`skip` recorded as not checked here."""
        return tuple(self._skipped)

    def table(self) -> "ClaimsTable":
        """The "claims checked" table (claims not checked here last); display it as the last output of the chapter.

        It also glues the table's one-line badge under the key ``claims.badge``, for the top of the page
        (``{glue:md}`claims.badge```): the count a reader sees first is the count of the table at the end.
        """
        if not self._claims:
            raise ValueError("no claims were checked in this chapter")
        table = ClaimsTable(self.chapter, tuple(self._claims) + tuple(self._skipped))
        glue("claims.badge", table.badge)
        return table


def _log(chapter: str, key: str, value: Any, expected: str, held: bool) -> None:
    """Append one claim to the ``POSBOOK_CLAIMS_LOG`` file, if that is set."""
    path = os.environ.get(LOG_ENV, "").strip()
    if not path:
        return
    if isinstance(value, (bool, np.bool_)):
        value = bool(value)
    elif isinstance(value, Real):
        value = float(value) if not isinstance(value, Integral) else int(value)
    else:
        value = str(value)
    record = {"chapter": chapter, "key": key, "value": value, "expected": expected, "held": bool(held),
              "environment": environment()}
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")


def claim_anchor(key: str) -> str:
    """The HTML id of a claim's row in the claims table, for links from the prose (``{claim}`text <key>```)."""
    _checks.text("key", key)
    return "claim-" + re.sub(r"[^A-Za-z0-9_-]+", "-", key)


@dataclass(frozen=True)
class ClaimsBadge:
    """One line for the top of a page: how many claims the page recomputed, linked to its table."""

    checked: int
    unchecked: int
    failed: int = 0

    @property
    def text(self) -> str:
        noun = "claim" if self.checked == 1 else "claims"
        if self.failed:
            text = f"✗ {self.checked:,} {noun} recomputed here, {_not_holding(self.failed)} ({MODE_ENV}=warn)"
        else:
            text = f"✓ {self.checked:,} {noun} recomputed when this page was built, all hold"
        return text + (f"; {self.unchecked} not checked here" if self.unchecked else "")

    def _repr_markdown_(self) -> str:
        # Raw HTML inside MyST: a link to the section the table sits in (its heading is "Claims checked").
        return f'<a class="posbook-claims-badge" href="#{TABLE_SECTION}">{html.escape(self.text)}</a>'

    def __repr__(self) -> str:
        return self.text


# The id Sphinx gives the "## Claims checked" heading that every chapter ends with.
TABLE_SECTION = "claims-checked"


@dataclass(frozen=True)
class ClaimsTable:
    chapter: str
    claims: tuple[Claim, ...]

    @property
    def badge(self) -> ClaimsBadge:
        checked = sum(c.checked for c in self.claims)
        return ClaimsBadge(checked, len(self.claims) - checked, sum(not c.held for c in self.claims))

    def _headline(self) -> str:
        badge = self.badge
        if badge.failed:
            text = f"{badge.checked} claims checked, {_not_holding(badge.failed)} here (marked ✗)."
        else:
            text = f"{badge.checked} claims checked, all hold."
        return text + (f" {badge.unchecked} not checked here (marked –)." if badge.unchecked else "")

    def _repr_markdown_(self) -> str:
        # MyST markdown: the book renders the citations and links them to the bibliography. The table sits in a
        # closed dropdown (sphinx-design), so the page reads without it; each row carries its claim's anchor, and
        # a link to that anchor opens the dropdown.
        def cell(text: str) -> str:
            return text.replace("|", "\\|").replace("\n", " ")
        rows = ["| # | claim | computed | expected | source | |", "|---|---|---|---|---|---|"]
        for i, c in enumerate(self.claims, 1):
            source = f"{{cite:p}}`{c.source}`" if c.source else ""
            computed = f"`{cell(c.computed)}`" if c.checked else cell(c.computed)
            rows.append(f'| <span id="{claim_anchor(c.key)}"></span>{i} | {cell(c.statement)} | {computed} | '
                        f"{cell(c.expected)} | {source} | {_mark(c)} |")
        fence = "````"  # longer than any backtick run a claim's text can hold
        return (f"{fence}{{dropdown}} {self._headline()} Show the table\n:class-container: posbook-claims\n\n"
                + "\n".join(rows) + f"\n{fence}")

    def _repr_html_(self) -> str:
        esc = html.escape

        def row(i: int, c: Claim) -> str:
            computed = f"<code>{esc(c.computed)}</code>" if c.checked else esc(c.computed)
            mark = _mark(c)
            return (f'<tr id="{claim_anchor(c.key)}"><td>{i}</td><td>{esc(c.statement)}</td><td>{computed}</td>'
                    f"<td>{esc(c.expected)}</td><td>{esc(c.source or '')}</td><td>{mark}</td></tr>")
        body = "".join(row(i, c) for i, c in enumerate(self.claims, 1))
        return (f"<details><summary><b>{esc(self._headline())}</b> Show the table</summary><table>"
                "<tr><th>#</th><th>claim</th><th>computed</th><th>expected</th><th>source</th><th></th></tr>"
                f"{body}</table></details>")

    def __repr__(self) -> str:
        badge = self.badge
        rest = f", {badge.unchecked} not checked here" if badge.unchecked else ""
        held = f"{badge.failed} failed" if badge.failed else "all hold"
        return f"ClaimsTable({self.chapter!r}, {badge.checked} claims, {held}{rest})"


def _not_holding(n: int) -> str:
    """ "1 does not hold", "3 do not hold"."""
    return f"{n:,} {'does' if n == 1 else 'do'} not hold"


def _mark(claim: Claim) -> str:
    """The table's last column: ✓ held, ✗ did not hold (only under POSBOOK_CLAIMS=warn), – not checked here."""
    if not claim.checked:
        return "–"
    return "✓" if claim.held else "✗"


def glue(name: str, value: Any, *, display: bool = False) -> None:
    """Glue a value for the prose ({glue:text}`name`); a no-op where myst-nb is not installed.

    ``name`` is a non-empty string; ``value`` anything myst-nb can show except None (a function that returns
    nothing glued by mistake would put "None" in the prose).
    """
    _checks.text("name", name)
    if value is None:
        raise TypeError(f"value must not be None (glue {name!r} the value itself)")
    _checks.flag("display", display)
    if _myst_glue is not None and _in_kernel():
        # A one-element tensor or array is glued as the number it holds, so prose can format it ({glue:text}`x:.2f`).
        if hasattr(value, "item") and getattr(value, "size", None) is not None and not isinstance(value, (int, float)):
            try:
                value = value.item()
            except (ValueError, RuntimeError):
                pass
        if isinstance(value, Real) and not isinstance(value, (bool, int)):
            value = float(value)
        _myst_glue(name, value, display=display)
