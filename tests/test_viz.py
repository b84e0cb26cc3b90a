"""Interactive figures: a static figure that fits the page, live sliders in a kernel, and in the static book a
slider over frames drawn at build time instead of widgets."""

from __future__ import annotations

import re

import matplotlib

matplotlib.use("Agg")

import ipywidgets  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from IPython.display import HTML  # noqa: E402

from posbook import viz  # noqa: E402

SLIDERS = {"a": viz.Slider.steps("a", 1, 3, 1, 1), "b": viz.Slider("mode", (0, 1), 1, names=("off", "on"))}


def run(monkeypatch, static_env, sliders=SLIDERS):
    shown, displayed, drawn = [], [], []
    monkeypatch.setattr(plt, "show", lambda: shown.append(plt.gcf().get_size_inches().tolist()))
    monkeypatch.setattr("IPython.display.display", lambda obj: displayed.append(obj))
    if static_env:
        monkeypatch.setenv(viz.STATIC_ENV, "1")
    else:
        monkeypatch.delenv(viz.STATIC_ENV, raising=False)

    def draw(ax, a, b=1):
        drawn.append((a, b))
        ax.plot([0, a * (b + 1)])

    viz.interactive_figure(draw, sliders, [{"a": 1}, {"a": 2}, {"a": 3}], alt="Three lines.", panel_size=(4.0, 3.0))
    plt.close("all")
    return shown, displayed, drawn


def test_static_figure_fits_the_column_and_live_widget_follows(monkeypatch):
    shown, displayed, _ = run(monkeypatch, static_env=False)
    assert shown[0][0] == pytest.approx(viz.MAX_FIGURE_WIDTH) and shown[0][1] == pytest.approx(3.0 * 7.5 / 12)
    assert len(displayed) == 1 and isinstance(displayed[0], ipywidgets.VBox)
    controls = [c for c in displayed[0].children if isinstance(c, ipywidgets.SelectionSlider)]
    assert [c.value for c in controls] == [1, 1] and [name for name, _ in controls[1].options] == ["off", "on"]


def test_book_build_shows_frames_for_every_position_and_no_widget(monkeypatch):
    shown, displayed, drawn = run(monkeypatch, static_env=True)
    # one output (one figure under the cell's caption): the small multiples with their alt text, then the explorer
    assert shown == [] and len(displayed) == 1 and isinstance(displayed[0], HTML)
    page = displayed[0].data
    assert page.startswith('<img class="posbook-small-multiples" width="') and 'alt="Three lines."' in page
    # one frame per combination of positions, the last slider varying fastest, only the start one visible
    assert drawn[3:] == [(1, 0), (1, 1), (2, 0), (2, 1), (3, 0), (3, 1)]
    frames = re.findall(r'<img class="posbook-explorer-frame" [^>]*>', page)
    assert len(frames) == 6 and [" hidden" in f for f in frames] == [True, False, True, True, True, True]
    assert 'alt="a = 1, mode = on"' in frames[1]
    inputs = re.findall(r'<input type="range"[^>]*>', page)
    assert [re.search(r'max="(\d+)"', i).group(1) for i in inputs] == ["2", "1"]
    assert 'data-names="off|on"' in inputs[1] and 'value="1"' in inputs[1]


def test_slider_keeps_evenly_spread_positions_with_its_start():
    slider = viz.Slider.steps("n", 0, 64, 1, 3)
    assert len(slider.values) == 65 and slider.kept(3) == (3, 32, 64)
    assert viz.Slider.steps("b", 2.0, 7.0, 0.5, 4.0).kept(6) == (2.0, 3.0, 4.0, 5.0, 6.0, 7.0)
    assert viz.Slider("m", (0, 1, 2), 2).kept() == (0, 1, 2)


def test_too_many_sliders_for_a_page_are_refused(monkeypatch):
    many = {name: viz.Slider.steps(name, 0, 9, 1, 0) for name in "abcdef"}
    with pytest.raises(ValueError, match="at most 36 frames"):
        viz.explorer_html(many, lambda params: b"")


@pytest.mark.parametrize("make, match", [
    (lambda: viz.Slider("", (1,), 1), "label"),
    (lambda: viz.Slider("a", (), 1), "at least one value"),
    (lambda: viz.Slider("a", (1, 2), 3), "must be one of its values"),
    (lambda: viz.Slider("a", (1, 2), 1, names=("x",)), "one name per value"),
    (lambda: viz.Slider.steps("a", 3, 1, 1, 2), "stop >= start"),
])
def test_bad_sliders_are_refused_by_name(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_widgets_instead_of_sliders_are_refused(monkeypatch):
    with pytest.raises(TypeError, match=r"sliders\['a'\] must be a posbook.viz.Slider"):
        viz.interactive_figure(lambda ax, a: None, {"a": ipywidgets.IntSlider()}, [{"a": 1}], alt="x")
    with pytest.raises(ValueError, match="alt must be a non-empty str"):
        viz.interactive_figure(lambda ax, a: None, SLIDERS, [{"a": 1}], alt="")


def test_thumbnail_carries_its_alt_text_and_caption():
    fig, ax = plt.subplots()
    ax.plot([0, 1])
    page = viz.thumbnail(fig, alt='A rising "line"', caption="One line.").data
    plt.close(fig)
    assert 'alt="A rising &quot;line&quot;"' in page and "<figcaption>One line.</figcaption>" in page
    assert page.count("data:image/png;base64,") == 1
    with pytest.raises(ValueError, match="alt must be a non-empty str"):
        viz.thumbnail(fig, alt=" ", caption="x")
