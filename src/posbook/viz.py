"""Plot style and interactive figures that also leave a static figure in the HTML book."""

from __future__ import annotations

import io
import math
from typing import Any, Callable, Mapping, Sequence

import matplotlib.pyplot as plt

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
    the sliders (``sliders``: name → ipywidgets control) redraw a single panel in Jupyter or Colab.
    """
    if not static:
        raise ValueError("static must list at least one parameter set for the static figure")
    unknown = {k for params in static for k in params} - set(sliders)
    if unknown:
        raise ValueError(f"static uses parameters {sorted(unknown)} that have no slider; sliders: {sorted(sliders)}")
    rows = math.ceil(len(static) / ncols)
    cols = min(ncols, len(static))
    fig, axes = plt.subplots(rows, cols, figsize=(panel_size[0] * cols, panel_size[1] * rows),
                             squeeze=False, constrained_layout=True)
    for ax, params in zip(axes.flat, static):
        draw(ax, **params)
    for ax in list(axes.flat)[len(static):]:
        ax.set_visible(False)
    if title:
        fig.suptitle(title)
    plt.show()

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
