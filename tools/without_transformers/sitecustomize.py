"""A Python started with this folder on PYTHONPATH, from inside a folder named by POSBOOK_WITHOUT_TRANSFORMERS,
cannot import transformers: tools/run_notebooks.py runs chapters this way to show they run where readers run them.

POSBOOK_WITHOUT_TRANSFORMERS holds folders (separated as PYTHONPATH is); a process whose working directory is one
of them, or below one, gets ``sys.modules["transformers"] = None``. Then ``import transformers`` (and any
``from transformers... import``) raises ModuleNotFoundError and ``importlib.util.find_spec("transformers")``
returns None, as where it is not installed. The processes it starts inherit the block. Any other
sitecustomize on the path still runs.
"""

import os
import sys


def _blocked() -> bool:
    cwd = os.path.realpath(os.getcwd())
    for folder in filter(None, os.environ.get("POSBOOK_WITHOUT_TRANSFORMERS", "").split(os.pathsep)):
        folder = os.path.realpath(folder)
        if cwd == folder or cwd.startswith(folder.rstrip(os.sep) + os.sep):
            return True
    return False


def _run_next_sitecustomize() -> None:
    # This module shadows any sitecustomize further down sys.path (a distribution's, a venv's): run that one too.
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


if _blocked():
    sys.modules["transformers"] = None
    os.environ["POSBOOK_WITHOUT_TRANSFORMERS"] = os.sep  # and for every process this one starts
_run_next_sitecustomize()
