"""posbook.oracle: the installed transformers, or one line saying why a comparison with it cannot run."""

from __future__ import annotations

import importlib.metadata
import sys

import pytest

from posbook import oracle
from posbook.oracle import OracleMissing


def test_reads_the_installed_sources_without_importing_them():
    pytest.importorskip("transformers")
    assert oracle.transformers_version() == importlib.metadata.version("transformers")
    assert "class LlamaAttention" in oracle.transformers_source("models.llama.modeling_llama")
    forward = oracle.transformers_definition("models.llama.modeling_llama", "forward", inside="LlamaAttention")
    assert forward.startswith("def forward(") and "apply_rotary_pos_emb(" in forward
    assert oracle.transformers_definition("models.llama.modeling_llama", "rotate_half").startswith("def rotate_half(")


def test_names_what_the_installed_version_lacks():
    pytest.importorskip("transformers")
    version = importlib.metadata.version("transformers")
    with pytest.raises(OracleMissing, match=rf"^transformers {version} has no transformers\.models\.nothing$"):
        oracle.transformers_source("models.nothing")
    with pytest.raises(OracleMissing, match=r"defines no LlamaAttention\.nothing in transformers\.models\.llama"):
        oracle.transformers_definition("models.llama.modeling_llama", "nothing", inside="LlamaAttention")
    with pytest.raises(OracleMissing, match="defines no NoSuchClass.forward"):
        oracle.transformers_definition("models.llama.modeling_llama", "forward", inside="NoSuchClass")
    assert oracle.transformers_object("", "__version__") == version
    with pytest.raises(OracleMissing, match=rf"^transformers {version} has no transformers\.nothing_here$"):
        oracle.transformers_object("nothing_here", "x")
    with pytest.raises(OracleMissing, match=rf"^transformers {version} has no transformers\.no_such_name$"):
        oracle.transformers_object("", "no_such_name")
    assert oracle.transformers_object("models.llama.modeling_llama", "LlamaAttention").__name__ == "LlamaAttention"
    assert oracle.differs("f(q, k)", TypeError("unexpected keyword 'sinks'")) == (
        f"transformers {version} differs: f(q, k) raised TypeError: unexpected keyword 'sinks'")


def test_a_blocked_or_absent_transformers_is_not_installed(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # what tools/without_transformers does
    assert oracle.transformers_version() is None
    for call in (lambda: oracle.transformers_source("models.llama.modeling_llama"),
                 lambda: oracle.transformers_definition("models.llama.modeling_llama", "rotate_half"),
                 lambda: oracle.transformers_object("", "__version__")):
        with pytest.raises(OracleMissing, match=r"^transformers is not installed here$"):
            call()
    assert oracle.differs("f", OracleMissing(oracle.NOT_INSTALLED)) == "transformers is not installed here"


def test_a_dependency_missing_inside_transformers_is_not_a_missing_model(monkeypatch):
    pytest.importorskip("transformers")
    import importlib

    def fail(path):
        raise ModuleNotFoundError("No module named 'tokenizers'", name="tokenizers")
    monkeypatch.setattr(importlib, "import_module", fail)
    with pytest.raises(OracleMissing, match=r"cannot import transformers\.models\.x \(ModuleNotFoundError: No module "
                                            r"named 'tokenizers'\)$"):
        oracle.transformers_object("models.x", "y")

    def broken(path):
        raise RuntimeError("needs a newer torch")
    monkeypatch.setattr(importlib, "import_module", broken)
    with pytest.raises(OracleMissing, match=r"cannot import transformers\.models\.x \(RuntimeError: needs a newer torch"):
        oracle.transformers_object("models.x", "y")
