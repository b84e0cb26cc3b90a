"""Page-level additions and fixes of the rendered book, as a local Sphinx extension.

``{claim}`text <key>``` links prose to the row of a claim in the page's claims table (posbook.claims gives each row
the id ``claim_anchor(key)``); the page check in tests_book fails on a link whose row does not exist.

sphinx-thebe adds its inline configuration script each time the environment reads documents, and Jupyter Book's
build reads twice, so every page declared ``const THEBE_JS_URL`` twice and logged a SyntaxError. Inline scripts
are kept once each, in order.
"""

from __future__ import annotations

import re

from docutils import nodes

from posbook.claims import claim_anchor

_TEXT_AND_KEY = re.compile(r"^(?P<text>.+?)\s*<(?P<key>[^<>]+)>$", re.DOTALL)


def _claim_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    match = _TEXT_AND_KEY.match(text.strip())
    if match is None:
        message = inliner.reporter.error(f"{{claim}} expects `text <claim key>`, got {text!r}", line=lineno)
        return [inliner.problematic(rawtext, rawtext, message)], [message]
    link = nodes.reference(rawtext, match["text"], internal=True, refuri="#" + claim_anchor(match["key"]))
    return [link], []


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
    app.add_role("claim", _claim_role)
    # Early: html-page-context stops at the first handler that returns a template name. The duplicates are added
    # before any page is written; handlers that add a page's own scripts run later, on the same list.
    app.connect("html-page-context", _unique_scripts, priority=100)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
