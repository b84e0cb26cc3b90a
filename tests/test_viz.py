"""Interactive figures: a static figure that fits the page, live sliders in a kernel, and in the static book a
slider over frames drawn at build time instead of widgets."""

from __future__ import annotations

import io
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
    # the small multiples: a <picture> serving phones their own variant, the desktop figure with its alt text
    assert page.startswith(f'<picture><source media="{viz.PHONE_MEDIA}" srcset="data:image/png;base64,')
    assert re.search(r'<img class="posbook-small-multiples" width="\d+" height="\d+" alt="Three lines."', page)
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


def _text_chunks(png: bytes) -> dict:
    from PIL import Image
    return Image.open(io.BytesIO(png)).text


def _three_panels_with_legends():
    fig, axes = plt.subplots(1, 3, figsize=(9, 3), constrained_layout=True)
    for i, ax in enumerate(axes):
        ax.plot([0, 1], [0, 1], label="rising")
        ax.plot([0, 1], [1, 0], label="falling")
        ax.legend(loc="center")  # on the crossing: over both lines
        ax.tick_params(labelsize=6)
    return fig


def test_checked_png_records_smallest_text_and_legends_over_data():
    fig = _three_panels_with_legends()
    chunks = _text_chunks(viz.checked_png(fig, 100))
    assert float(chunks[viz.TEXT_PX_KEY]) == pytest.approx(6 * 100 / 72, abs=0.01)
    assert chunks[viz.LEGENDS_OVER_DATA_KEY] == "3"
    for ax in fig.axes:
        ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1))  # beside the axes: over nothing
    assert _text_chunks(viz.checked_png(fig, 100))[viz.LEGENDS_OVER_DATA_KEY] == "0"
    plt.close(fig)


def test_phone_figure_stacks_panels_with_their_legends_under_them_and_leaves_the_figure_alone():
    fig = _three_panels_with_legends()
    phone = viz.phone_figure(fig)
    try:
        assert phone.get_size_inches()[0] == pytest.approx(viz.PHONE_WIDTH)
        panels = [ax for ax in phone.axes if ax.lines]
        boxes = [ax.get_position() for ax in panels]
        assert len(panels) == 3 and all(b.x0 == pytest.approx(boxes[0].x0) for b in boxes)  # one column
        assert boxes[0].y0 > boxes[1].y0 > boxes[2].y0  # in their desktop order, top to bottom
        assert all(ax.get_legend() is None for ax in panels) and viz.legends_over_data(phone) == 0
        assert viz.min_text_pt(phone) >= viz.MIN_PHONE_TEXT_PT
    finally:
        plt.close(phone)
    assert fig.get_size_inches().tolist() == [9, 3] and all(ax.get_legend() is not None for ax in fig.axes)
    plt.close(fig)


def test_book_png_writes_the_phone_variant_under_the_hash_of_the_desktop_png(tmp_path, monkeypatch):
    import hashlib

    monkeypatch.setenv(viz.PHONE_FIGURES_ENV, str(tmp_path))
    fig = _three_panels_with_legends()
    png, size = viz.book_png(fig)
    plt.close(fig)
    phone = tmp_path / f"{hashlib.sha256(png).hexdigest()}.png"
    assert phone.exists() and _text_chunks(phone.read_bytes())[viz.LEGENDS_OVER_DATA_KEY] == "0"
    width, height = viz._png_size(png)
    assert size == {"width": width // 2, "height": height // 2}
    assert viz._png_size(phone.read_bytes())[0] < width  # narrower than the desktop figure


def test_a_figure_that_cannot_be_copied_is_refused_by_name():
    fig, ax = plt.subplots()
    ax.xaxis.set_major_formatter(lambda v, _: f"{v:g}")
    with pytest.raises(ValueError, match="phone variant.*lambdas"):
        viz.phone_figure(fig)
    plt.close(fig)


def test_a_legend_under_the_axes_is_not_over_bars_from_zero_on_a_log_axis():
    fig, ax = plt.subplots(figsize=(4, 3), layout="constrained")
    ax.bar([0, 1], [1e-3, 1.0], label="weights")
    ax.set_yscale("log")
    fig.legend(loc="outside lower center")
    assert viz.legends_over_data(fig) == 0
    plt.close(fig)


@pytest.mark.parametrize("call", [viz.book_png, viz.phone_figure, viz.min_text_pt, viz.legends_over_data,
                                  lambda f: viz.checked_png(f, 100)])
def test_figure_helpers_refuse_what_is_not_a_figure_by_name(call):
    with pytest.raises(TypeError, match="fig must be a matplotlib Figure"):
        call(plt.gca())
    plt.close("all")


@pytest.mark.parametrize("dpi", [0, -1, float("nan"), True, "100"])
def test_checked_png_refuses_a_bad_dpi_by_name(dpi):
    fig = plt.figure()
    with pytest.raises(ValueError, match="dpi must be a positive number"):
        viz.checked_png(fig, dpi)
    plt.close(fig)


def test_small_multiples_with_one_legend_each_share_one_under_the_panels(monkeypatch):
    monkeypatch.setattr(plt, "show", lambda: None)
    monkeypatch.setattr("IPython.display.display", lambda obj: None)
    monkeypatch.delenv(viz.STATIC_ENV, raising=False)

    def draw(ax, a):
        ax.plot([0, 1], [0, a], label="rising")
        ax.plot([0, 1], [a, 0], label="falling")
        ax.legend(loc="center")

    fig = viz.interactive_figure(draw, {"a": viz.Slider.steps("a", 1, 3, 1, 1)}, [{"a": 1}, {"a": 2}, {"a": 3}],
                                 alt="Crossing lines.")
    assert all(ax.get_legend() is None for ax in fig.axes) and len(fig.legends) == 1
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["rising", "falling"]
    assert viz.legends_over_data(fig) == 0
    plt.close("all")
