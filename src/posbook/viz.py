"""Plot style and interactive figures that also leave a static figure, and a slider that works, in the HTML book."""

from __future__ import annotations

import base64
import hashlib
import html
import io
import itertools
import math
import os
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import matplotlib.pyplot as plt

MAX_FIGURE_WIDTH = 7.5
"""The widest static figure in inches. The book's text column is about 7.3 inches wide, and a wider figure is
scaled down, its text with it."""

STATIC_ENV = "POSBOOK_STATIC_FIGURES"
"""When this environment variable is "1" (the book build sets it), interactive figures show their small multiples
and, instead of live widgets (which need a kernel), frames drawn at build time that a slider on the page swaps."""

MAX_FRAME_STEPS = 7
"""The most positions a slider keeps in the static book (evenly spread over its values, ends and start included)."""

MAX_FRAMES = 36
"""The most frames a static explorer holds, the product of its sliders' kept positions; each slider keeps as many
as fit (six each for two sliders, three each for three)."""

PHONE_WIDTH = 4.0
"""The width in inches of a figure's phone variant. A phone's text column (about 340 CSS px) shows it at about 1.15 px
per point, so the book's 10-point tick labels read at about 11 px; the desktop figure (6.5-10 inches) would show them
at 4-7 px."""

MIN_PHONE_TEXT_PT = 8.5
"""The smallest text size of a phone variant in points. Smaller text (an annotation set small for the desktop figure,
say) is raised to it."""

PHONE_MEDIA = "(max-width: 640px)"
"""The screens that get a figure's phone variant (a CSS media query)."""

PHONE_FIGURES_ENV = "POSBOOK_PHONE_FIGURES"
"""In the book build (with :data:`STATIC_ENV`), the folder this environment variable names receives each figure's
phone variant, named by the SHA-256 of the desktop PNG that the page shows; the book's Sphinx extension serves it to
narrow screens (``<picture>``) and links the desktop PNG for a tap to open at full resolution."""

TEXT_PX_KEY = "posbook-min-text-px"
"""The PNG text chunk that holds the height in image pixels of the figure's smallest tick label or legend text. A page
check multiplies it by the shown width over the image's width to get the size a reader sees."""

LEGENDS_OVER_DATA_KEY = "posbook-legends-over-data"
"""The PNG text chunk holding how many of the figure's legends cover a plotted point or line (:func:`legends_over_data`)."""

_STYLE = {
    "figure.dpi": 110,
    "savefig.dpi": 110,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "font.size": 10,
    "axes.titlesize": 10,
    "legend.frameon": False,
}


def use_style() -> None:
    """The book's matplotlib look (sharp PNGs, light grid). In the book build (:data:`STATIC_ENV`) a figure's PNG
    also carries its checks (:data:`TEXT_PX_KEY`, :data:`LEGENDS_OVER_DATA_KEY`) and leaves a phone variant
    (:data:`PHONE_FIGURES_ENV`)."""
    plt.rcParams.update(_STYLE)
    try:
        from matplotlib_inline.backend_inline import set_matplotlib_formats
        set_matplotlib_formats("retina")
    except ImportError:  # pragma: no cover - outside Jupyter
        return
    from IPython import get_ipython
    shell = get_ipython()
    if shell is not None and os.environ.get(STATIC_ENV) == "1":
        from matplotlib.figure import Figure
        shell.display_formatter.formatters["image/png"].for_type(Figure, book_png)


def book_png(fig: Any) -> tuple[bytes, dict[str, int]]:
    """The PNG a book page shows for ``fig`` (twice its resolution, shown at its size, as Jupyter's "retina" format),
    with its checks in text chunks; where :data:`PHONE_FIGURES_ENV` names a folder, the phone variant
    (:func:`phone_figure`) is written there under the SHA-256 of this PNG. Returns the PNG and its display size, as
    an IPython formatter does."""
    _check_figure(fig)
    png = checked_png(fig, 2 * fig.dpi)
    folder = os.environ.get(PHONE_FIGURES_ENV)
    if folder:
        phone_png = _phone_png(fig)
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, hashlib.sha256(png).hexdigest() + ".png"), "wb") as out:
            out.write(phone_png)
    width, height = _png_size(png)
    return png, {"width": width // 2, "height": height // 2}


def _phone_png(fig: Any) -> bytes:
    """The checked PNG of ``fig``'s phone variant, at twice its resolution (as the desktop PNG)."""
    phone = phone_figure(fig)
    try:
        return checked_png(phone, 2 * phone.dpi)
    finally:
        plt.close(phone)


def checked_png(fig: Any, dpi: float, *, tight: bool = True) -> bytes:
    """``fig`` as a PNG (cut to what it draws, or at its own size with ``tight=False``) whose text chunks say the
    height in image pixels of its smallest tick label or legend text (:data:`TEXT_PX_KEY`, absent where it has
    neither) and how many legends cover data (:data:`LEGENDS_OVER_DATA_KEY`)."""
    _check_figure(fig)
    if isinstance(dpi, bool) or not isinstance(dpi, (int, float)) or not math.isfinite(dpi) or dpi <= 0:
        raise ValueError(f"dpi must be a positive number of dots per inch, got {dpi!r}")
    if not isinstance(tight, bool):
        raise TypeError(f"tight must be True or False, got {tight!r}")
    fig.draw_without_rendering()  # once, for both checks
    metadata = {LEGENDS_OVER_DATA_KEY: str(_legends_over_data_drawn(fig))}
    smallest = _min_text_pt_drawn(fig)
    if smallest is not None:
        metadata[TEXT_PX_KEY] = f"{smallest * dpi / 72:.2f}"
    return _png(fig, dpi, bbox_inches="tight" if tight else None, metadata=metadata)


def min_text_pt(fig: Any) -> float | None:
    """The size in points of ``fig``'s smallest tick label or legend text, or None where it shows neither."""
    _check_figure(fig)
    fig.draw_without_rendering()  # tick labels exist once the locators have run
    return _min_text_pt_drawn(fig)


def _min_text_pt_drawn(fig: Any) -> float | None:
    sizes = []
    for ax in fig.axes:
        if not ax.get_visible() or not ax.axison:
            continue
        for axis in (ax.xaxis, ax.yaxis):
            if axis.get_visible():
                sizes += [t.get_fontsize() for t in axis.get_ticklabels(which="both")
                          if t.get_visible() and t.get_text().strip()]
    for legend in _legends(fig):
        if legend.get_visible():
            sizes += [t.get_fontsize() for t in legend.get_texts() if t.get_text().strip()]
    return min(sizes, default=None)


def legends_over_data(fig: Any) -> int:
    """How many of ``fig``'s legends cover a plotted point, a point of a plotted line or a bar (each line is sampled
    between its points, so a legend a segment crosses counts)."""
    _check_figure(fig)
    fig.draw_without_rendering()  # legends at their place ("best" is chosen when drawn)
    return _legends_over_data_drawn(fig)


def _legends_over_data_drawn(fig: Any) -> int:
    import numpy as np

    renderer = fig._get_renderer()
    covering = 0
    for legend in _legends(fig):
        if not legend.get_visible():
            continue
        box = legend.get_window_extent(renderer).padded(-2)
        for ax in [legend.axes] if legend.axes is not None else fig.axes:
            points = _data_points(ax, np)
            inside = ((points[:, 0] > box.x0) & (points[:, 0] < box.x1)
                      & (points[:, 1] > box.y0) & (points[:, 1] < box.y1))
            bars = any(p.get_visible() and _shown_part_overlaps(p.get_window_extent(renderer), ax.bbox, box)
                       for p in ax.patches)
            if inside.any() or bars:
                covering += 1
                break
    return covering


def _shown_part_overlaps(extent: Any, axes_box: Any, box: Any) -> bool:
    """Whether the part of a patch inside its axes overlaps ``box`` (a bar from 0 on a log axis reaches far below
    the axes, where a legend under the panels sits)."""
    from matplotlib.transforms import Bbox

    shown = Bbox.intersection(extent, axes_box)
    return shown is not None and shown.overlaps(box)


def _check_figure(fig: Any) -> None:
    from matplotlib.figure import Figure

    if not isinstance(fig, Figure):
        raise TypeError(f"fig must be a matplotlib Figure, got {type(fig).__name__}")


def _legends(fig: Any) -> list[Any]:
    return [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None] + list(fig.legends)


def _data_points(ax: Any, np: Any) -> Any:
    """Display coordinates of what ``ax`` plots, within its box: lines' points and 8 points on each segment,
    scatter points."""
    from matplotlib.collections import PathCollection

    chunks = [np.empty((0, 2))]
    for line in ax.lines:
        if not line.get_visible():
            continue
        xy = line.get_transform().transform(np.asarray(line.get_xydata(), dtype=float))
        xy = xy[np.isfinite(xy).all(axis=1)]
        if line.get_linestyle() not in ("None", "", " ") and len(xy) > 1:
            t = np.linspace(0.0, 1.0, 9)[:, None, None]
            xy = (xy[:-1][None] * (1 - t) + xy[1:][None] * t).reshape(-1, 2)
        chunks.append(xy)
    for collection in ax.collections:
        if isinstance(collection, PathCollection) and collection.get_visible() and len(collection.get_offsets()):
            chunks.append(collection.get_offset_transform().transform(np.asarray(collection.get_offsets(), float)))
    points = np.concatenate(chunks)
    box = ax.bbox
    keep = (points[:, 0] >= box.x0) & (points[:, 0] <= box.x1) & (points[:, 1] >= box.y0) & (points[:, 1] <= box.y1)
    return points[keep]


def phone_figure(fig: Any) -> Any:
    """A copy of ``fig`` laid out for a phone: :data:`PHONE_WIDTH` inches wide, its panels stacked one per row (each
    keeping its desktop aspect, within 2.2 to 3.6 inches tall), each panel's legend in a row of its own under it
    (so it covers no data), a figure legend at the bottom, no text under :data:`MIN_PHONE_TEXT_PT`, titles and axis
    labels under the axes wrapped. The copy is a pyplot figure: close it when drawn."""
    _check_figure(fig)
    import pickle

    fig.draw_without_rendering()  # positions and tick labels as the desktop figure shows them
    try:
        phone = pickle.loads(pickle.dumps(fig))
    except (pickle.PicklingError, AttributeError, TypeError) as error:
        raise ValueError(f"fig cannot be copied for its phone variant ({error}): give its formatters and callbacks "
                         "named functions or matplotlib.ticker classes, not lambdas") from error
    phone.draw_without_rendering()
    _lay_out_for_phone(phone)
    return phone


def _lay_out_for_phone(phone: Any) -> None:
    """:func:`phone_figure`'s layout, made in place (on a figure drawn once, its panels keep the aspect they were
    drawn with; undrawn, the aspect of their grid cells)."""
    from matplotlib.layout_engine import ConstrainedLayoutEngine
    from matplotlib.text import Text

    width_in, height_in = phone.get_size_inches()
    slots: dict[Any, list[Any]] = {}  # one slot per grid cell: an axes and its twins
    for ax in phone.axes:
        if not ax.get_visible():
            ax.remove()
            continue
        spec = ax.get_subplotspec()
        if spec is None or hasattr(ax, "_colorbar"):
            continue  # colorbars and insets follow their parent axes
        slots.setdefault((id(spec.get_gridspec()), spec.rowspan.start, spec.rowspan.stop, spec.colspan.start,
                          spec.colspan.stop), []).append(ax)
    for text in phone.findobj(Text):
        if text.get_fontsize() < MIN_PHONE_TEXT_PT:
            text.set_fontsize(MIN_PHONE_TEXT_PT)
    for ax in phone.axes:
        for axis in ("x", "y"):
            size = min((t.get_fontsize() for t in getattr(ax, f"get_{axis}ticklabels")()), default=MIN_PHONE_TEXT_PT)
            ax.tick_params(axis=axis, which="both", labelsize=max(size, MIN_PHONE_TEXT_PT))
        for text in (ax.title, ax._left_title, ax._right_title, ax.xaxis.label):
            text.set_wrap(True)
    if phone._suptitle is not None:
        phone._suptitle.set_wrap(True)
    rows: list[tuple[str, Any, float]] = []  # (kind, what, height in inches)
    for key in sorted(slots, key=lambda k: (k[1], k[3])):
        axes = slots[key]
        box = axes[0].get_position()
        aspect = (box.height * height_in) / max(box.width * width_in, 1e-9)
        rows.append(("panel", axes, min(3.6, max(2.2, 0.85 * PHONE_WIDTH * aspect))))
        for ax in axes:
            legend = ax.get_legend()
            if legend is not None and legend.get_visible():
                labels = [t.get_text() for t in legend.get_texts()]
                ncols = 2 if max(map(len, labels), default=0) <= 24 else 1
                lines = math.ceil(len(labels) / ncols) + (legend.get_title().get_text() != "")
                rows.append(("legend", (legend, labels, ncols), 0.12 + 0.2 * lines))
    if not isinstance(phone.get_layout_engine(), ConstrainedLayoutEngine):
        try:
            phone.set_layout_engine("constrained")
        except RuntimeError:  # a colorbar made under another layout engine pins it
            pass
    if rows:
        grid = phone.add_gridspec(len(rows), 1, height_ratios=[h for _, _, h in rows])
        for i, (kind, what, _) in enumerate(rows):
            if kind == "panel":
                for ax in what:
                    ax.set_subplotspec(grid[i])
            else:
                legend, labels, ncols = what
                holder = phone.add_subplot(grid[i])
                holder.axis("off")
                title = legend.get_title().get_text() or None
                holder.legend(legend.legend_handles, labels, loc="center", ncols=ncols, title=title,
                              fontsize=max(legend.get_texts()[0].get_fontsize(), MIN_PHONE_TEXT_PT))
                legend.remove()
    body = sum(h for _, _, h in rows) if rows else height_in * PHONE_WIDTH / width_in
    for legend in list(phone.legends):
        labels = [t.get_text() for t in legend.get_texts()]
        handles = legend.legend_handles
        legend.remove()
        ncols = 2 if max(map(len, labels), default=0) <= 24 else 1
        phone.legend(handles, labels, loc="outside lower center", ncols=ncols,
                     fontsize=max(legend.get_texts()[0].get_fontsize(), MIN_PHONE_TEXT_PT))
        body += 0.15 + 0.2 * math.ceil(len(labels) / ncols)
    phone.set_size_inches(PHONE_WIDTH, body + (0.4 if phone._suptitle is not None else 0.0))


def _png_size(png: bytes) -> tuple[int, int]:
    """Width and height of a PNG, read from its header."""
    return int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")


@dataclass(frozen=True)
class Slider:
    """A knob of an interactive figure: ``values`` in order, starting at ``value``; ``names`` (optional) are what
    the control shows for each value (a choice between named modes, say). Plain data, so that a notebook builds no
    widget unless a kernel shows it live."""

    label: str
    values: tuple
    value: Any
    names: tuple | None = None

    def __post_init__(self):
        if not isinstance(self.label, str) or not self.label:
            raise ValueError(f"label must be a non-empty str, got {self.label!r}")
        values = tuple(self.values)
        if not values:
            raise ValueError(f"values of slider {self.label!r} must hold at least one value, got {self.values!r}")
        if self.value not in values:
            raise ValueError(f"value {self.value!r} of slider {self.label!r} must be one of its values {values}")
        object.__setattr__(self, "values", values)
        if self.names is not None:
            names = tuple(str(n) for n in self.names)
            if len(names) != len(values):
                raise ValueError(f"names of slider {self.label!r} must give one name per value ({len(values)}), got "
                                 f"{len(names)}")
            object.__setattr__(self, "names", names)

    @classmethod
    def steps(cls, label: str, start: float, stop: float, step: float, value: float) -> "Slider":
        """Values start, start + step, … up to stop (included), as ints when all three are ints."""
        if not step > 0 or not stop >= start:
            raise ValueError(f"slider {label!r} needs step > 0 and stop >= start, got start={start}, stop={stop}, "
                             f"step={step}")
        n = int(round((stop - start) / step)) + 1
        integer = all(isinstance(x, int) for x in (start, stop, step))
        values = tuple(start + i * step if integer else round(start + i * step, 10) for i in range(n))
        return cls(label, values, value)

    def name(self, value: Any) -> str:
        return self.names[self.values.index(value)] if self.names else f"{value:g}" if isinstance(value, float) \
            else str(value)

    def kept(self, n: int = 0) -> tuple:
        """The positions the static book draws: ``n`` (default and at most MAX_FRAME_STEPS) evenly spread over the
        values, ends included, the one nearest the start replaced by the start."""
        n = min(n or MAX_FRAME_STEPS, MAX_FRAME_STEPS, len(self.values))
        if n == len(self.values):
            return self.values
        picks = sorted({round(i * (len(self.values) - 1) / max(n - 1, 1)) for i in range(n)})
        at = self.values.index(self.value)
        picks[min(range(len(picks)), key=lambda i: abs(picks[i] - at))] = at
        return tuple(self.values[i] for i in sorted(set(picks)))


def interactive_figure(draw: Callable[..., Any], sliders: Mapping[str, Slider], static: Sequence[Mapping[str, Any]],
                       *, alt: str, ncols: int = 3, panel_size: tuple[float, float] = (4.0, 3.0),
                       title: str | None = None) -> Any:
    """Show ``draw(ax, **params)`` as small multiples over ``static``, then a figure whose sliders move its knobs;
    return the small multiples' matplotlib figure (to glue elsewhere on the page, say).

    The small multiples are an ordinary image, so the rendered book keeps a meaningful figure where no kernel runs;
    the sliders (``sliders``: parameter name → :class:`Slider`) redraw a single panel in Jupyter or Colab. The
    static figure is at most :data:`MAX_FIGURE_WIDTH` inches wide (panels shrink to fit). With the environment
    variable :data:`STATIC_ENV` set to "1", as in the book build, the sliders are HTML range inputs over frames drawn
    now, one per combination of their kept positions (:meth:`Slider.kept`, at most :data:`MAX_FRAMES`), which the
    page's script (``posbook-explorer.js``) swaps: the page stays explorable without a kernel, and loads no widgets.
    There the small multiples and the explorer are one HTML output (one figure under the cell's caption), and
    ``alt`` describes the small multiples for a reader who cannot see them.
    """
    _description("alt", alt)
    if not static:
        raise ValueError("static must list at least one parameter set for the static figure")
    if not sliders:
        raise ValueError("sliders must name at least one Slider")
    for name, slider in sliders.items():
        if not isinstance(slider, Slider):
            raise TypeError(f"sliders[{name!r}] must be a posbook.viz.Slider, got {type(slider).__name__}")
    unknown = {k for params in static for k in params} - set(sliders)
    if unknown:
        raise ValueError(f"static uses parameters {sorted(unknown)} that have no slider; sliders: {sorted(sliders)}")
    rows = math.ceil(len(static) / ncols)
    cols = min(ncols, len(static))
    shrink = min(1.0, MAX_FIGURE_WIDTH / (panel_size[0] * cols))
    fig, axes = plt.subplots(rows, cols, figsize=(panel_size[0] * cols * shrink, panel_size[1] * rows * shrink),
                             squeeze=False, constrained_layout=True)
    for ax, params in zip(axes.flat, static):
        draw(ax, **params)
    for ax in list(axes.flat)[len(static):]:
        ax.set_visible(False)
    if title:
        fig.suptitle(title)
    _one_legend_under(fig)
    static_page = os.environ.get(STATIC_ENV) == "1"
    if not static_page:
        plt.show()
    # One panel laid out as a phone variant (_lay_out_for_phone): at 100 dpi it shows at its size on a desktop, and a
    # phone's column shrinks it by about a seventh, its ticks staying legible.
    frame_size = (PHONE_WIDTH, PHONE_WIDTH * panel_size[1] / panel_size[0])

    def render(params: Mapping[str, Any], dpi: int) -> bytes:
        fig, ax = plt.subplots(figsize=frame_size, constrained_layout=True)
        draw(ax, **params)
        # Laid out as a phone variant (its legend under the axes, no text too small once a phone shrinks it) and
        # kept at that size, so that every frame has the same size and the figure does not jump as a slider moves.
        _lay_out_for_phone(fig)
        try:
            return checked_png(fig, dpi, tight=False)
        finally:
            plt.close(fig)

    from IPython.display import HTML, display
    if static_page:
        # twice the figure's resolution, shown at its size: sharp on high-density screens
        png, phone_png = checked_png(fig, 2 * fig.dpi), _phone_png(fig)
        plt.close(fig)
        small_multiples = _picture(png, phone_png, alt, 'class="posbook-small-multiples"')
        explorer = explorer_html(sliders, lambda params: _palette_png(render(params, 100)), title=title)
        display(HTML(small_multiples + explorer))
        return fig

    import ipywidgets

    # The live panel is an Image widget redrawn on every slider change, not an Output widget capturing
    # plt.show(): output capture depends on message routing between kernel and front end, and under headless
    # execution that routing occasionally stalls a cell until its timeout.
    controls = {name: ipywidgets.SelectionSlider(options=[(s.name(v), v) for v in s.values], value=s.value,
                                                 description=s.label, continuous_update=False)
                for name, s in sliders.items()}
    image = ipywidgets.Image(value=render({n: s.value for n, s in sliders.items()}, 100), format="png")

    def redraw(_change: Any) -> None:
        image.value = render({name: control.value for name, control in controls.items()}, 100)

    for control in controls.values():
        control.observe(redraw, names="value")
    display(ipywidgets.VBox([*controls.values(), image]))
    return fig


def _one_legend_under(fig: Any) -> None:
    """Small multiples whose panels all carry the same legend get it once, under the panels: in a narrow panel a
    legend covers the data."""
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    labels = [[t.get_text() for t in legend.get_texts()] for legend in legends]
    if len(legends) < 2 or any(other != labels[0] for other in labels[1:]):
        return
    handles = legends[0].legend_handles
    for legend in legends:
        legend.remove()
    fig.legend(handles, labels[0], loc="outside lower center", ncols=min(len(labels[0]), 4))


def explorer_html(sliders: Mapping[str, Slider], render: Callable[[Mapping[str, Any]], bytes], *,
                  title: str | None = None) -> str:
    """The static explorer: one ``<input type=range>`` per slider over its kept positions, and one PNG frame (from
    ``render(params)``) per combination, all but the current one hidden; ``posbook-explorer.js`` shows the frame
    the inputs select. Frames are listed with the last slider varying fastest."""
    per_slider = max(2, int(MAX_FRAMES ** (1 / len(sliders)) + 1e-9))
    kept = {name: s.kept(per_slider) for name, s in sliders.items()}
    n_frames = math.prod(len(v) for v in kept.values())
    if n_frames > MAX_FRAMES:
        raise ValueError(f"{len(sliders)} sliders keep {n_frames} combinations; at most {MAX_FRAMES} frames fit a "
                         "page: give the figure fewer sliders")
    start = {name: s.value if s.value in kept[name] else kept[name][0] for name, s in sliders.items()}
    controls, frames = [], []
    for name, s in sliders.items():
        values = kept[name]
        names = [s.name(v) for v in values]
        controls.append(
            f'<label class="posbook-explorer-control">{html.escape(s.label)} '
            f'<input type="range" min="0" max="{len(values) - 1}" step="1" value="{values.index(start[name])}" '
            f'aria-label="{html.escape(s.label)}" data-names="{html.escape("|".join(names))}">'
            f'<output>{html.escape(s.name(start[name]))}</output></label>')
    for combo in itertools.product(*kept.values()):
        params = dict(zip(kept, combo))
        shown = all(params[n] == start[n] for n in kept)
        alt = (f"{title}: " if title else "") + ", ".join(f"{sliders[n].label} = {sliders[n].name(v)}"
                                                          for n, v in params.items())
        frames.append(_img(render(params), alt, 'class="posbook-explorer-frame"' + ("" if shown else " hidden")))
    return ('<div class="posbook-explorer">'
            f'<div class="posbook-explorer-controls">{"".join(controls)}</div>'
            f'<div class="posbook-explorer-frames">{"".join(frames)}</div></div>')


def _palette_png(png: bytes, colours: int = 32) -> bytes:
    """The PNG with its colours reduced to a palette of ``colours``: line plots keep their look at about a quarter
    of the bytes, which matters when a page carries a few dozen frames."""
    from PIL import Image

    from PIL.PngImagePlugin import PngInfo

    with Image.open(io.BytesIO(png)) as image:
        info = PngInfo()
        for key, value in image.text.items():  # the checks checked_png wrote
            info.add_text(key, value)
        out = io.BytesIO()
        image.convert("RGB").quantize(colors=colours, method=Image.Quantize.MEDIANCUT).save(
            out, "PNG", optimize=True, pnginfo=info)
    return out.getvalue()


def thumbnail(fig: Any, *, alt: str, caption: str) -> Any:
    """``fig`` as an HTML figure (a PNG with ``alt`` text, and ``caption`` under it) to glue into another page: the
    landing page's cards show each finding's figure this way, with a description a screen reader can speak (a glued
    image would carry only its file name)."""
    from IPython.display import HTML

    _description("alt", alt)
    _description("caption", caption)
    return HTML(f'<figure class="posbook-thumbnail">{_img(_png(fig, plt.rcParams["figure.dpi"]), alt)}'
                f"<figcaption>{html.escape(caption)}</figcaption></figure>")


def _description(name: str, text: Any) -> None:
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"{name} must be a non-empty str describing the figure, got {text!r}")


def _png(fig: Any, dpi: float, **options: Any) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, **options)
    return buffer.getvalue()


def _picture(png: bytes, phone_png: bytes, alt: str, attributes: str = "") -> str:
    """A <picture> of a figure carrying both PNGs (twice their display resolution): the phone variant where the
    screen is at most :data:`PHONE_MEDIA` wide, the desktop one elsewhere."""
    width, height = (n // 2 for n in _png_size(png))
    phone_width, phone_height = (n // 2 for n in _png_size(phone_png))
    size = f'width="{width}" height="{height}"'
    return (f'<picture><source media="{PHONE_MEDIA}" srcset="{_data_uri(phone_png)}" width="{phone_width}" '
            f'height="{phone_height}">{_img(png, alt, f"{attributes} {size}".strip())}</picture>')


def _data_uri(png: bytes) -> str:
    return f"data:image/png;base64,{base64.b64encode(png).decode()}"


def _img(png: bytes, alt: str, attributes: str = "") -> str:
    """An <img> carrying the PNG itself (a data URI: the page needs no file beside it) and its alt text."""
    return (f'<img {attributes + " " if attributes else ""}alt="{html.escape(alt)}" '
            f'src="{_data_uri(png)}">')
