"""Copy the JavaScript the book serves itself from the pinned npm packages in vendor/ to _build/vendor/vendor/.

_config.yml lists _build/vendor in html_static_path, so these files end up under _static/vendor/ of the built
book, and mathjax_path / nb_ipywidgets_js point there. They are kept out of the book's own _static/ folder on
purpose: Jupyter Book adds a <script> tag for every .js file it finds there, and MathJax alone ships hundreds.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODULES = ROOT / "vendor" / "node_modules"
TARGET = ROOT / "_build" / "vendor" / "vendor"

COPIES = {
    MODULES / "mathjax" / "es5": TARGET / "mathjax",
    MODULES / "requirejs" / "require.js": TARGET / "require.min.js",
    MODULES / "@jupyter-widgets" / "html-manager" / "dist": TARGET / "html-manager",
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
    print(f"vendor_js: {sum(1 for _ in TARGET.rglob('*') if _.is_file())} files in {TARGET.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
