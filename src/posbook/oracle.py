"""The installed ``transformers`` as an oracle: a few chapters compare posbook with Hugging Face's own code.

posbook never needs ``transformers`` (the test suite does), and readers run the chapters with whatever version they
have, or none. Each function here returns what a comparison reads, or raises :class:`OracleMissing`, whose message
says in one line why the comparison cannot run here, for :meth:`posbook.claims.Claims.skip`::

    from posbook import oracle

    statement = "LlamaAttention rotates k before caching it"
    try:
        forward = oracle.transformers_definition("models.llama.modeling_llama", "forward", inside="LlamaAttention")
    except oracle.OracleMissing as why:
        claims.skip("hf.rotates_first", statement, str(why))
    else:
        claims.holds("hf.rotates_first", statement,
                     forward.index("apply_rotary_pos_emb(") < forward.index(".update("))

Where ``transformers`` is absent, or blocked as ``sys.modules["transformers"] = None`` does, every function says
"transformers is not installed here".
"""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import importlib.util
from pathlib import Path
from typing import Any

NOT_INSTALLED = "transformers is not installed here"


class OracleMissing(LookupError):
    """The installed ``transformers`` cannot serve as the oracle here: it is missing, or it lacks (or runs
    differently) the code a comparison reads. ``str(error)`` is the reason, in one line."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else NOT_INSTALLED


def _spec():
    try:  # find_spec locates the package without importing it (which takes seconds)
        return importlib.util.find_spec("transformers")
    except (ImportError, ValueError):  # ValueError: a module object in sys.modules without a spec
        return None


def transformers_version() -> str | None:
    """The version of the ``transformers`` this Python would import, or None where it has none (found without
    importing it)."""
    if _spec() is None:
        return None
    try:
        return importlib.metadata.version("transformers")
    except importlib.metadata.PackageNotFoundError:  # importable but without metadata, e.g. a source checkout
        return "(version unknown)"


def _installed() -> str:
    """"transformers 5.24.0", for messages; OracleMissing where it is not installed."""
    version = transformers_version()
    if version is None:
        raise OracleMissing(NOT_INSTALLED)
    return f"transformers {version}"


def transformers_source(module: str) -> str:
    """The text of ``transformers.<module>`` as installed (``module`` like ``"models.llama.modeling_llama"``), read
    from its file without importing ``transformers``."""
    installed = _installed()
    path = Path(_spec().submodule_search_locations[0], *module.split(".")).with_suffix(".py")
    if not path.is_file():
        raise OracleMissing(f"{installed} has no transformers.{module}")
    return path.read_text(encoding="utf-8")


def transformers_definition(module: str, name: str, inside: str | None = None) -> str:
    """The source of function ``name`` (a method of class ``inside``, if given) in ``transformers.<module>`` as
    installed, exactly as written there."""
    text = transformers_source(module)
    for node in ast.walk(ast.parse(text)):
        if inside is not None and isinstance(node, ast.ClassDef) and node.name == inside:
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name == name:
                    return ast.get_source_segment(text, item)
            break
        if inside is None and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return ast.get_source_segment(text, node)
    where = f"{inside}.{name}" if inside else name
    raise OracleMissing(f"{_installed()} defines no {where} in transformers.{module}")


def transformers_object(module: str, name: str) -> Any:
    """``transformers.<module>.<name>``, imported (``module`` ``""`` for the top-level package)."""
    installed = _installed()
    path = f"transformers.{module}" if module else "transformers"
    try:
        found = importlib.import_module(path)
    except ModuleNotFoundError as error:
        if (error.name or "").startswith("transformers"):  # not a dependency of transformers that is missing
            raise OracleMissing(f"{installed} has no {path}") from error
        raise OracleMissing(f"{installed} cannot import {path} (ModuleNotFoundError: {error})") from error
    except Exception as error:  # an import of another version's code can fail in any way; the reason names it
        raise OracleMissing(f"{installed} cannot import {path} ({type(error).__name__}: {error})") from error
    try:
        return getattr(found, name)
    except AttributeError as error:
        raise OracleMissing(f"{installed} has no {path}.{name}") from error


def differs(what: str, error: BaseException) -> str:
    """The reason for :meth:`posbook.claims.Claims.skip` when the installed ``transformers`` has the code a comparison
    reads but it runs differently from what the page expects (another signature, another return value):
    ``what`` names the call, ``error`` is what it raised. Where transformers is not installed (the error is then
    the failed import), it says that."""
    if isinstance(error, OracleMissing):
        return str(error)
    version = transformers_version()
    if version is None:
        return NOT_INSTALLED
    return f"transformers {version} differs: {what} raised {type(error).__name__}: {error}"
