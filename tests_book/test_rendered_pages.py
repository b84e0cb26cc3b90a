"""Every built page, as a reader's browser shows it: math typeset, images loaded, no error output, one way to search,
and not one request leaving the machine (MathJax and the widget manager are served by the book itself)."""

from __future__ import annotations

import base64
import io
import re
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest
from PIL import Image

from posbook import viz

HTML = Path(__file__).resolve().parents[1] / "_build" / "html"
SKIP = {"genindex.html", "search.html", "py-modindex.html"}
PAGES = sorted(str(p.relative_to(HTML)) for p in HTML.rglob("*.html")
               if p.name not in SKIP and "_static" not in p.parts and "_sources" not in p.parts)
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}
# The search fields and buttons a reader could see; the search dialog's own field shows only once one is pressed.
SEARCH_CONTROLS = "input[type=search], .search-button__button"
# Text that runs past a phone's screen outside any scrolling box (code cells and wide tables scroll inside the column).
RUNS_SIDEWAYS = ("() => [...document.querySelectorAll('article *')].filter(e => { const r = e.getBoundingClientRect();"
                 " if (r.width === 0 || r.right <= innerWidth + 1) return false;"
                 " for (let p = e.parentElement; p; p = p.parentElement)"
                 " if (['auto', 'scroll', 'hidden'].includes(getComputedStyle(p).overflowX)) return false;"
                 " return true; }).slice(0, 3).map(e => `${e.tagName} ${(e.textContent || '').trim().slice(0, 50)}`)")
# Code blocks in the prose (not the cells' code, which is shown folded or scrolls by design) that a desktop reader
# would have to scroll sideways to read: a command cut off at the column's edge.
CLIPPED_COMMANDS = ("() => [...document.querySelectorAll('article div[class*=highlight-] pre')]"
                    ".filter(p => !p.closest('.cell') && p.offsetParent !== null && p.scrollWidth > p.clientWidth + 1)"
                    ".map(p => p.textContent.trim().split('\\n').sort((a, b) => b.length - a.length)[0].slice(0, 80))")
# Images a screen reader could only name by their file (or not at all).
UNDESCRIBED_IMAGES = ("() => [...document.querySelectorAll('article img')].filter(i => !i.closest('[hidden]'))"
                      ".filter(i => !i.alt.trim() || /\\.(png|svg|jpe?g|gif|webp)$/i.test(i.alt.trim()))"
                      ".map(i => i.src.split('/').pop().slice(0, 60))")
# Claims (rows of the opened table) whose number is not on their text's first line, whose computed, expected,
# source and mark do not start under it, or take more than two lines there although the computed value, the
# expected one and the source are short (under 60 characters together: longer ones wrap on a phone whatever the
# layout): the phone layout of book/static/posbook.css.
CLAIM_ROWS_ON_A_PHONE = (
    "() => { const d = document.querySelector('details.posbook-claims'); d.open = true;"
    " const bad = [...d.querySelectorAll('tbody tr')].filter(tr => { const c = [...tr.children];"
    " if (c.length < 6) return false; const r = c.map(e => e.getBoundingClientRect());"
    " const line = parseFloat(getComputedStyle(c[2]).lineHeight) || 20;"
    " const short = (c[2].textContent + c[3].textContent + c[4].textContent).trim().length < 60;"
    " return Math.abs(r[0].top - r[1].top) > 4 || r[2].top < r[1].bottom - 2"
    " || (short && r[5].bottom - r[2].top > 2.2 * line); })"
    ".slice(0, 3).map(tr => tr.children[0].textContent.trim()); d.open = false; return bad; }")
# Claim texts (the opened table's second column, typeset math removed) that still show TeX or caret notation.
RAW_MATH_IN_CLAIMS = (
    "() => { const d = document.querySelector('details.posbook-claims'); d.open = true;"
    " const raw = [...d.querySelectorAll('tbody tr td:nth-child(2)')].map(td => { const c = td.cloneNode(true);"
    " c.querySelectorAll('mjx-container').forEach(m => m.remove()); return c.textContent; })"
    ".filter(t => /\\$|\\^[({]|_\\{|\\\\[a-zA-Z]/.test(t)).slice(0, 3).map(t => t.trim().slice(0, 80));"
    " d.open = false; return raw; }")
# Where the page's first figure starts, in screens from the top (None: the page has no figure).
FIRST_FIGURE_SCREENS = ("() => { const f = [...document.querySelectorAll('article figure')]"
                        ".find(e => e.getBoundingClientRect().height > 100);"
                        " return f ? (f.getBoundingClientRect().top + scrollY) / innerHeight : null; }")
# The figures a reader sees (not the landing page's thumbnails, which are cards that link to a chapter): the image
# the browser chose (a <picture> serves a phone its own variant), its shown and natural widths, and the link a tap
# follows.
SHOWN_FIGURES = ("() => [...document.querySelectorAll('article img')]"
                 ".filter(i => i.offsetParent !== null && !i.closest('[hidden], .posbook-thumbnail'))"
                 ".map(i => ({src: i.currentSrc, shown: i.getBoundingClientRect().width, natural: i.naturalWidth,"
                 " link: i.closest('a.posbook-figure-zoom') ? i.closest('a.posbook-figure-zoom').href : null}))")
# Diagrams drawn into the page as SVG: the smallest text as shown, in CSS px.
INLINE_SVG_TEXT_PX = ("() => [...document.querySelectorAll('article svg[viewBox]')].filter(s => s.getClientRects().length)"
                      ".map(s => Math.min(...[...s.querySelectorAll('[font-size]')].map(t => parseFloat(t.getAttribute('font-size'))))"
                      " * s.getBoundingClientRect().width / s.viewBox.baseVal.width)")
MIN_PHONE_TEXT_PX = 9  # the smallest tick label or legend text a phone reader is asked to read, in CSS px
VISIBLE_SEARCH = (f"() => [...document.querySelectorAll('{SEARCH_CONTROLS}')]"
                  ".filter(e => e.getClientRects().length > 0 && getComputedStyle(e).visibility !== 'hidden').length")


def _image_bytes(url: str) -> bytes:
    if url.startswith("data:"):
        return base64.b64decode(url.split(",", 1)[1])
    return (HTML / unquote(urlparse(url).path).lstrip("/")).read_bytes()


def _figure_problems(page, width: int) -> list[str]:
    """What a reader at ``width`` px could not read in the page's figures: text under MIN_PHONE_TEXT_PX on a phone
    (a PNG's smallest tick label or legend text, posbook.viz.TEXT_PX_KEY, scaled as shown; an SVG's smallest
    font-size), a legend over data (posbook.viz.LEGENDS_OVER_DATA_KEY), a PNG that carries neither check, and on a
    phone a figure file that a tap does not open."""
    problems = []
    for figure in page.evaluate(SHOWN_FIGURES):
        data, name = _image_bytes(figure["src"]), figure["src"].split("/")[-1][:40]
        scale = figure["shown"] / figure["natural"]
        if data.startswith(b"\x89PNG"):
            text = Image.open(io.BytesIO(data)).text
            if viz.LEGENDS_OVER_DATA_KEY not in text:
                problems.append(f"{name}: a PNG without posbook.viz's checks")
                continue
            if text[viz.LEGENDS_OVER_DATA_KEY] != "0":
                problems.append(f"{name}: {text[viz.LEGENDS_OVER_DATA_KEY]} legends over data")
            px = float(text[viz.TEXT_PX_KEY]) * scale if viz.TEXT_PX_KEY in text else None
        else:
            svg = data.decode()
            view_width = float(re.search(r'viewBox="[-\d.]+ [-\d.]+ ([\d.]+)', svg)[1])
            sizes = [float(x) for x in re.findall(r'font-size="([\d.]+)"', svg)]
            px = min(sizes) * figure["shown"] / view_width if sizes else None
        if width < 640 and px is not None and px < MIN_PHONE_TEXT_PX:
            problems.append(f"{name}: smallest text {px:.1f} px")
        if width < 640 and not figure["src"].startswith("data:") and data.startswith(b"\x89PNG") \
                and not (figure["link"] and _image_bytes(figure["link"]).startswith(b"\x89PNG")):
            problems.append(f"{name}: a tap does not open the full-size figure")
    if width < 640:
        problems += [f"an inline diagram's smallest text {px:.1f} px" for px in page.evaluate(INLINE_SVG_TEXT_PX)
                     if px < MIN_PHONE_TEXT_PX]
    return problems


def test_book_has_pages():
    assert "index.html" in PAGES or any(p.endswith("intro.html") for p in PAGES), PAGES
    assert any(p.startswith("notebooks/") for p in PAGES), "no chapter page was built"


@pytest.mark.parametrize("page_path", PAGES)
def test_page(page_path, book_url, browser):
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    external, failed, console_errors = [], [], []

    def route(route):
        host = urlparse(route.request.url).hostname
        if route.request.url.startswith(("data:", "blob:", "about:")) or host in LOCAL_HOSTS:
            route.continue_()
        else:
            external.append(route.request.url)
            route.abort()

    page.route("**/*", route)
    page.on("requestfailed", lambda r: failed.append(f"{r.url} ({r.failure})"))
    page.on("console", lambda m: console_errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: console_errors.append(str(e)))
    page.goto(f"{book_url}/{page_path}", wait_until="networkidle")

    has_math = page.evaluate("() => document.querySelectorAll('div.math, span.math, .math').length") > 0
    if has_math:
        page.wait_for_function("() => window.MathJax && MathJax.startup && MathJax.startup.promise", timeout=30000)
        page.evaluate("() => MathJax.startup.promise")
        page.wait_for_function("() => document.querySelectorAll('mjx-container').length > 0", timeout=30000)
        assert page.locator("mjx-merror").count() == 0, f"{page_path}: MathJax could not typeset some math"
        unrendered = page.evaluate(
            "() => [...document.querySelectorAll('.math')].filter(e => !e.querySelector('mjx-container')).length")
        assert unrendered == 0, f"{page_path}: {unrendered} math elements were not typeset"

    broken = page.evaluate(
        "() => [...document.images].filter(i => i.offsetParent !== null && !(i.complete && i.naturalWidth > 0))"
        ".map(i => i.src)")
    assert broken == [], f"{page_path}: images not loaded: {broken}"

    for width, height in ((1400, 900), (390, 844)):  # a desktop and a phone: the figures must keep their shape
        page.set_viewport_size({"width": width, "height": height})
        # A <picture> loads the variant for this width: wait until every image has it, decoded and laid out.
        page.wait_for_load_state("networkidle")
        page.wait_for_function("() => [...document.images].every(i => i.complete)", timeout=30000)
        page.evaluate("() => Promise.all([...document.images].map(i => i.decode().catch(() => null)))")
        if page_path.startswith("notebooks/ch"):
            # A chapter leads with its key figure: on the first screen of a desktop, within two of a phone.
            first = page.evaluate(FIRST_FIGURE_SCREENS)
            limit = 0.6 if width == 1400 else 2.0
            assert first is not None and first < limit, \
                f"{page_path}: the first figure starts {first} screens down at {width} px (at most {limit})"
        squashed = page.evaluate(
            "() => [...document.images].filter(i => i.offsetParent !== null && i.naturalWidth > 0 && i.clientHeight > 0"
            " && Math.abs((i.clientWidth / i.clientHeight) / (i.naturalWidth / i.naturalHeight) - 1) > 0.02)"
            ".map(i => `${i.src.split('/').pop()} ${i.clientWidth}x${i.clientHeight}`)")
        assert squashed == [], f"{page_path}: images out of their aspect ratio at {width} px: {squashed}"
        # The claims table, opened, wraps within the column instead of running off it.
        overflow = page.evaluate(
            "() => [...document.querySelectorAll('details.posbook-claims')].map(d => { d.open = true;"
            " const t = d.querySelector('table');"
            " const r = t.getBoundingClientRect().right - d.getBoundingClientRect().right;"
            " d.open = false; return r; }).filter(r => r > 1)")
        assert overflow == [], f"{page_path}: the claims table runs {overflow} px past the column at {width} px"
        if width == 1400 and page.locator("details.posbook-claims").count():
            # Claim texts typeset their math: no TeX or caret notation left as text once MathJax has run.
            raw = page.evaluate(RAW_MATH_IN_CLAIMS)
            assert raw == [], f"{page_path}: claim texts with math not typeset: {raw}"
        if width == 390 and page.locator("details.posbook-claims").count():
            # On a phone a claim is its number and text, then one line of computed · expected · source ✓.
            loose = page.evaluate(CLAIM_ROWS_ON_A_PHONE)
            assert loose == [], f"{page_path}: claims that take more than text + two lines at 390 px: {loose}"
        # Every figure legible at this width, no legend over data, and on a phone a tap opens the full-size figure.
        unreadable = _figure_problems(page, width)
        assert unreadable == [], f"{page_path}: at {width} px: {unreadable}"
        sideways = page.evaluate(RUNS_SIDEWAYS)
        assert sideways == [], f"{page_path}: at {width} px these run past the screen, so the page scrolls sideways: {sideways}"
        # One way to search (the sidebar's field on a desktop, the header's button on a phone), and it opens search.
        assert page.evaluate(VISIBLE_SEARCH) == 1, f"{page_path}: not exactly one search field or button at {width} px"
        page.locator(SEARCH_CONTROLS).locator("visible=true").click()
        page.locator("#pst-search-dialog input[type=search]").wait_for(state="visible", timeout=5000)
        page.keyboard.press("Escape")

    errors = page.evaluate(
        "() => [...document.querySelectorAll('.cell_output .traceback, .cell_output .stderr, .output.traceback,"
        " .output.stderr, .output.error')].map(e => e.innerText.slice(0, 200))")
    assert errors == [], f"{page_path}: error output in cells: {errors}"

    widgets_failed = page.evaluate(
        "() => [...document.querySelectorAll('script[type=\"application/vnd.jupyter.widget-view+json\"]')]"
        ".filter(s => !s.previousElementSibling || !s.previousElementSibling.classList.contains('widget-subarea')"
        " && !(s.parentElement && s.parentElement.querySelector('.widget-subarea, .jupyter-widgets'))).length")
    assert widgets_failed == 0, f"{page_path}: {widgets_failed} widgets were not rendered"

    # The claims badge under the title opens the table it links to.
    if page.locator("a.posbook-claims-badge").count():
        page.locator("a.posbook-claims-badge").first.click()
        assert page.evaluate("() => document.querySelector('details.posbook-claims').open"), \
            f"{page_path}: the claims badge did not open the claims table"
        page.evaluate("() => { document.querySelector('details.posbook-claims').open = false; }")

    # No widget manager (require.js, the 3.6 MB ipywidgets bundle) where no widget is shown.
    views = page.evaluate("() => document.querySelectorAll('script[type=\"application/vnd.jupyter.widget-view+json\"]').length")
    bundles = page.evaluate("() => [...document.scripts].map(s => s.src).filter(s => /embed-amd|require\\.min/.test(s))")
    assert views > 0 or bundles == [], f"{page_path}: loads {bundles} but shows no widget"

    # Static explorers (posbook.viz.interactive_figure): one frame shows, and moving a slider shows another.
    for index in range(page.locator(".posbook-explorer").count()):
        explorer = page.locator(".posbook-explorer").nth(index)
        shown = "e => [...e.querySelectorAll('.posbook-explorer-frame')].filter(f => !f.hidden).map(f => f.src)"
        before = explorer.evaluate(shown)
        assert len(before) == 1, f"{page_path}: explorer {index} shows {len(before)} frames, not one"
        explorer.evaluate("e => { const s = e.querySelector('input[type=range]');"
                          " s.value = (Number(s.value) + 1) % (Number(s.max) + 1);"
                          " s.dispatchEvent(new Event('input')); }")
        after = explorer.evaluate(shown)
        assert len(after) == 1 and after != before, f"{page_path}: explorer {index}'s slider did not change its frame"

    # Dark mode inverts figures (hues kept) rather than dimming them on a white card.
    page.evaluate("() => { document.documentElement.dataset.theme = 'dark'; }")
    grey = page.evaluate("() => [...document.querySelectorAll('article img')].filter(i => i.offsetParent !== null"
                         " && !getComputedStyle(i).filter.includes('invert')).map(i => i.src.split('/').pop().slice(0, 40))")
    assert grey == [], f"{page_path}: figures not inverted in dark mode: {grey}"
    page.evaluate("() => { document.documentElement.dataset.theme = 'light'; }")

    page.set_viewport_size({"width": 1400, "height": 900})
    clipped = page.evaluate(CLIPPED_COMMANDS)
    assert clipped == [], f"{page_path}: code blocks in the prose run past the column at 1400 px: {clipped}"
    undescribed = page.evaluate(UNDESCRIBED_IMAGES)
    assert undescribed == [], f"{page_path}: images without a description (alt text): {undescribed}"

    # Links within the page (the claims badge, {claim} links from the prose to a row of the claims table) land
    # on something; a link to a claim the page no longer checks would otherwise go nowhere, silently.
    dangling = page.evaluate(
        "() => [...document.querySelectorAll('article a[href^=\"#\"]')].map(a => a.getAttribute('href').slice(1))"
        ".filter(id => id && !document.getElementById(decodeURIComponent(id)))")
    assert dangling == [], f"{page_path}: links to nothing on the page: {dangling}"

    assert external == [], f"{page_path}: requests leaving the machine: {external}"
    assert failed == [], f"{page_path}: failed requests: {failed}"
    assert console_errors == [], f"{page_path}: browser console errors: {console_errors}"
    page.close()


def test_search_snippets_show_no_raw_tex(book_url, browser):
    # Snippets are cut from pages' text before MathJax typesets it; posbook-search.js reads the math's content.
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    page.goto(f"{book_url}/search.html?q=training+length", wait_until="networkidle")
    page.wait_for_function("() => document.querySelectorAll('#search-results li p.context').length > 3",
                           timeout=60000)
    snippets = page.evaluate("() => [...document.querySelectorAll('#search-results li p.context')]"
                             ".map(p => p.textContent)")
    raw = [s[:120] for s in snippets if "\\(" in s or "\\)" in s or "$$" in s]
    assert raw == [], f"search snippets with raw TeX: {raw}"
    page.close()
