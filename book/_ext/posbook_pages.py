"""Page-level fixes of the rendered book, as a local Sphinx extension.

sphinx-thebe adds its inline configuration script each time the environment reads documents, and Jupyter Book's
build reads twice, so every page declared ``const THEBE_JS_URL`` twice and logged a SyntaxError. Inline scripts
are kept once each, in order.
"""

from __future__ import annotations


def _unique_scripts(app, pagename, templatename, context, doctree) -> None:
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, kept = set(), []
    for script in scripts:
        # an inline script's filename is None or "" depending on who added it
        key = (getattr(script, "filename", str(script)) or None,
               tuple(sorted(getattr(script, "attributes", {}).items())))
        if key not in seen:
            seen.add(key)
            kept.append(script)
    scripts[:] = kept  # in place: handlers that run later (MathJax) append to this very list


def setup(app):
    # Early: html-page-context stops at the first handler that returns a template name. The duplicates are added
    # before any page is written; handlers that add a page's own scripts run later, on the same list.
    app.connect("html-page-context", _unique_scripts, priority=100)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
