"""Page-level additions and fixes of the rendered book, as a local Sphinx extension.

``{claim}`text <key>``` links prose to the row of a claim in the page's claims table (posbook.claims gives each row
the id ``claim_anchor(key)``); the page check in tests_book fails on a link whose row does not exist.

``{posbook-diagram} name`` draws ``posbook.diagrams.<name>()`` into a Markdown page (a chapter shows a diagram as
the output of a cell), inline, so that it takes the page's text colour in dark mode. ``:chapters:`` passes a JSON
object of keyword arguments' ``chapters`` mapping.

A figure glued from another page (``{glue}`` with ``:doc:``) names its image by the hash of the glued PNG, and
myst-nb writes no such file unless that page displays the very same bytes; the missing images are written from
the glue caches.

A figure a chapter shows as a PNG (posbook.viz.book_png) has a phone variant, written by the notebook's execution
into the folder ``POSBOOK_PHONE_FIGURES`` names under the desktop PNG's hash: each such ``<img>`` becomes a
``<picture>`` that serves it to narrow screens, inside a link to the desktop PNG (a tap opens it at full resolution).
An SVG image is put in a box that scrolls sideways, so a phone can show it large enough to read (book/static/posbook.css).

sphinx-thebe adds its inline configuration script each time the environment reads documents, and Jupyter Book's
build reads twice, so every page declared ``const THEBE_JS_URL`` twice and logged a SyntaxError. Inline scripts
are kept once each, in order.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
from pathlib import Path

from docutils import nodes
from docutils.parsers.rst import Directive, directives

from posbook import diagrams, viz
from posbook.claims import claim_anchor

_TEXT_AND_KEY = re.compile(r"^(?P<text>.+?)\s*<(?P<key>[^<>]+)>$", re.DOTALL)


def _claim_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    match = _TEXT_AND_KEY.match(text.strip())
    if match is None:
        message = inliner.reporter.error(f"{{claim}} expects `text <claim key>`, got {text!r}", line=lineno)
        return [inliner.problematic(rawtext, rawtext, message)], [message]
    link = nodes.reference(rawtext, match["text"], internal=True, refuri="#" + claim_anchor(match["key"]))
    return [link], []


class DiagramDirective(Directive):
    required_arguments = 1
    option_spec = {"chapters": directives.unchanged}

    def run(self):
        name = self.arguments[0]
        draw = getattr(diagrams, name, None)
        if name.startswith("_") or not callable(draw):
            raise self.error(f"posbook.diagrams has no diagram {name!r}")
        kwargs = {"chapters": json.loads(self.options["chapters"])} if "chapters" in self.options else {}
        svg = draw(**kwargs).svg
        return [nodes.raw("", f'<figure class="posbook-diagram">{svg}</figure>', format="html")]


def _write_glued_images(app, doctree, docname) -> None:
    images = Path(app.builder.outdir) / app.builder.imagedir
    wanted = {}
    for node in doctree.findall(nodes.image):
        uri = Path(node["uri"])
        # A page's own outputs still point into the execution folder here (Sphinx copies them to _images when
        # it has written every page); a glued one from another page already points into _images.
        if uri.parent.name == app.builder.imagedir and re.fullmatch(r"[0-9a-f]{64}\.png", uri.name) \
                and not (images / uri.name).exists():
            wanted[uri.stem] = uri.name
    if not wanted:
        return
    for cache in Path(app.env.mystnb_config.output_folder).rglob("*.glue.json"):
        for output in json.loads(cache.read_text()).values():
            data = output.get("data", {}).get("image/png")
            if data is None:
                continue
            png = base64.b64decode(data)
            digest = hashlib.sha256(png).hexdigest()
            if digest in wanted:
                images.mkdir(parents=True, exist_ok=True)
                (images / wanted.pop(digest)).write_bytes(png)
    if wanted:
        raise RuntimeError(f"{docname}: glued images found in no glue cache: {sorted(wanted.values())}")


_FIGURE = re.compile(r'<img [^>]*?src="(?P<src>[^"]*?_images/(?P<hash>[0-9a-f]{64}))\.png"[^>]*>')
_SVG_IMAGE = re.compile(r'<img [^>]*?src="[^"]*?_images/[0-9a-f]{64}\.svg"[^>]*>')


def _phone_figures(app, pagename, templatename, context, doctree) -> None:
    body, folder = context.get("body"), os.environ.get(viz.PHONE_FIGURES_ENV)
    if not body:
        return

    def picture(match: re.Match) -> str:
        phone = Path(folder) / f"{match['hash']}.png" if folder else None
        if phone is None or not phone.exists():
            return match[0]
        images = Path(app.builder.outdir) / app.builder.imagedir
        images.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(phone, images / f"{match['hash']}-phone.png")
        return (f'<a class="posbook-figure-zoom" href="{match["src"]}.png" title="Open the figure at full size">'
                f'<picture><source media="{viz.PHONE_MEDIA}" srcset="{match["src"]}-phone.png">{match[0]}'
                "</picture></a>")

    body = _FIGURE.sub(picture, body)
    context["body"] = _SVG_IMAGE.sub(lambda m: f'<span class="posbook-scroll">{m[0]}</span>', body)


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
    app.add_directive("posbook-diagram", DiagramDirective)
    app.connect("doctree-resolved", _write_glued_images)
    # Early: html-page-context stops at the first handler that returns a template name. The duplicates are added
    # before any page is written; handlers that add a page's own scripts run later, on the same list.
    app.connect("html-page-context", _unique_scripts, priority=100)
    app.connect("html-page-context", _phone_figures)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
