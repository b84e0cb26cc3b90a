"""Copy the JavaScript the book serves itself from the pinned npm packages in vendor/ to _build/vendored-js/js/.

_config.yml lists _build/vendored-js in html_static_path, so these files end up under _static/js/ of the built
book, and mathjax_path / nb_ipywidgets_js point there. They are kept out of the book's own _static/ folder on
purpose: Jupyter Book adds a <script> tag for every .js file it finds there, and MathJax alone ships hundreds.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODULES = ROOT / "vendor" / "node_modules"
TARGET = ROOT / "_build" / "vendored-js" / "js"
EXTRA = ROOT / "_build" / "vendored-extra"

COPIES = {
    MODULES / "mathjax" / "es5": TARGET / "mathjax",
    MODULES / "requirejs" / "require.js": TARGET / "require.min.js",
    # Kept at its npm path: the widget manager fetches its fonts from <data-jupyter-widgets-cdn>/@jupyter-widgets/
    # html-manager/dist/, and _config.yml points that attribute here.
    MODULES / "@jupyter-widgets" / "html-manager" / "dist": TARGET / "@jupyter-widgets" / "html-manager" / "dist",
}


def main() -> int:
    missing = [str(src) for src in COPIES if not src.exists()]
    if missing:
        print("vendor_js: missing npm files (run `npm ci --prefix vendor`):\n  " + "\n  ".join(missing), file=sys.stderr)
        return 1
    if TARGET.exists():
        shutil.rmtree(TARGET)
    TARGET.mkdir(parents=True)
    for src, dst in COPIES.items():
        if src.is_dir():
            # MathJax's speech-rule engine is only loaded by the assistive "speech" menu options; it is 10 MB.
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("sre", "*.map"))
        else:
            shutil.copy2(src, dst)
    # The widget manager's stylesheet asks for its icon fonts relative to the page, and every page with widgets is
    # a chapter in notebooks/: html_extra_path copies this tree to the root of the built book.
    fonts = EXTRA / "notebooks" / "@jupyter-widgets" / "html-manager" / "dist"
    if EXTRA.exists():
        shutil.rmtree(EXTRA)
    fonts.mkdir(parents=True)
    for font in (MODULES / "@jupyter-widgets" / "html-manager" / "dist").iterdir():
        if font.suffix in {".woff", ".woff2", ".ttf", ".eot", ".svg"}:
            shutil.copy2(font, fonts / font.name)
    print(f"vendor_js: {sum(1 for _ in TARGET.rglob('*') if _.is_file())} files in {TARGET.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
