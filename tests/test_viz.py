"""Interactive figures: a static figure that fits the page, and no dead sliders in the static book."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import ipywidgets  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from posbook import viz  # noqa: E402


def run(monkeypatch, static_env):
    shown, displayed = [], []
    monkeypatch.setattr(plt, "show", lambda: shown.append(plt.gcf().get_size_inches().tolist()))
    monkeypatch.setattr("IPython.display.display", lambda obj: displayed.append(obj))
    if static_env:
        monkeypatch.setenv(viz.STATIC_ENV, "1")
    else:
        monkeypatch.delenv(viz.STATIC_ENV, raising=False)
    viz.interactive_figure(lambda ax, a: ax.plot([0, a]), {"a": ipywidgets.IntSlider(value=1, min=1, max=3)},
                           [{"a": 1}, {"a": 2}, {"a": 3}], panel_size=(4.0, 3.0))
    plt.close("all")
    return shown, displayed


def test_static_figure_fits_the_column_and_live_widget_follows(monkeypatch):
    shown, displayed = run(monkeypatch, static_env=False)
    assert shown[0][0] == pytest.approx(viz.MAX_FIGURE_WIDTH) and shown[0][1] == pytest.approx(3.0 * 7.5 / 12)
    assert len(displayed) == 1 and isinstance(displayed[0], ipywidgets.VBox)


def test_book_build_shows_only_the_static_figure(monkeypatch):
    shown, displayed = run(monkeypatch, static_env=True)
    assert len(shown) == 1 and displayed == []
