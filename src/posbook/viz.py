"""Plot style and interactive figures that also leave a static figure, and a slider that works, in the HTML book."""

from __future__ import annotations

import base64
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
    """The book's matplotlib look (sharp PNGs, light grid)."""
    plt.rcParams.update(_STYLE)
    try:
        from matplotlib_inline.backend_inline import set_matplotlib_formats
        set_matplotlib_formats("retina")
    except ImportError:  # pragma: no cover - outside Jupyter
        pass


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
    static_page = os.environ.get(STATIC_ENV) == "1"
    if not static_page:
        plt.show()
    live_size = (panel_size[0] * 1.5, panel_size[1] * 1.3)

    def render(params: Mapping[str, Any], dpi: int) -> bytes:
        fig, ax = plt.subplots(figsize=live_size, constrained_layout=True)
        draw(ax, **params)
        png = _png(fig, dpi)
        plt.close(fig)
        return png

    from IPython.display import HTML, display
    if static_page:
        # twice the figure's resolution, shown at its size: sharp on high-density screens
        png = _png(fig, 2 * plt.rcParams["figure.dpi"], bbox_inches="tight")
        plt.close(fig)
        from PIL import Image
        width = Image.open(io.BytesIO(png)).size[0] // 2
        small_multiples = _img(png, alt, f'class="posbook-small-multiples" width="{width}"')
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

    with Image.open(io.BytesIO(png)) as image:
        out = io.BytesIO()
        image.convert("RGB").quantize(colors=colours, method=Image.Quantize.MEDIANCUT).save(out, "PNG", optimize=True)
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


def _img(png: bytes, alt: str, attributes: str = "") -> str:
    """An <img> carrying the PNG itself (a data URI: the page needs no file beside it) and its alt text."""
    return (f'<img {attributes + " " if attributes else ""}alt="{html.escape(alt)}" '
            f'src="data:image/png;base64,{base64.b64encode(png).decode()}">')
