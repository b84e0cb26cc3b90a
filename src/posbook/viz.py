"""Plot style and interactive figures that also leave a static figure in the HTML book."""

from __future__ import annotations

import io
import math
import os
from typing import Any, Callable, Mapping, Sequence

import matplotlib.pyplot as plt

MAX_FIGURE_WIDTH = 7.5
"""The widest static figure in inches. The book's text column is about 7.3 inches wide, and a wider figure is
scaled down, its text with it."""

STATIC_ENV = "POSBOOK_STATIC_FIGURES"
"""When this environment variable is "1" (the book build sets it), interactive figures show only their static
small multiples: sliders on a static page would move without redrawing anything."""

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


def interactive_figure(draw: Callable[..., Any], sliders: Mapping[str, Any], static: Sequence[Mapping[str, Any]],
                       *, ncols: int = 3, panel_size: tuple[float, float] = (4.0, 3.0), title: str | None = None) -> None:
    """Show ``draw(ax, **params)`` as small multiples over ``static``, then as a live ipywidgets figure.

    The small multiples are an ordinary image, so the rendered book keeps a meaningful figure where no kernel runs;
    the sliders (``sliders``: name → ipywidgets control) redraw a single panel in Jupyter or Colab. The static
    figure is at most :data:`MAX_FIGURE_WIDTH` inches wide (panels shrink to fit). With the environment variable
    :data:`STATIC_ENV` set to "1", as in the book build, only the static figure is shown.
    """
    if not static:
        raise ValueError("static must list at least one parameter set for the static figure")
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
    plt.show()
    if os.environ.get(STATIC_ENV) == "1":
        return

    import ipywidgets
    from IPython.display import display

    # The live panel is an Image widget redrawn on every slider change, not an Output widget capturing
    # plt.show(): output capture depends on message routing between kernel and front end, and under headless
    # execution that routing occasionally stalls a cell until its timeout.
    live_size = (panel_size[0] * 1.5, panel_size[1] * 1.3)

    def render() -> bytes:
        fig, ax = plt.subplots(figsize=live_size, constrained_layout=True)
        draw(ax, **{name: control.value for name, control in sliders.items()})
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=100)
        plt.close(fig)
        return buffer.getvalue()

    image = ipywidgets.Image(value=render(), format="png")

    def redraw(_change: Any) -> None:
        image.value = render()

    for control in sliders.values():
        control.observe(redraw, names="value")
    display(ipywidgets.VBox([*sliders.values(), image]))
