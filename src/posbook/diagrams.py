"""The book's diagrams, drawn as SVG from the library itself, so that a figure cannot drift from the code.

Each function returns a :class:`Diagram`: Jupyter shows it (``_repr_svg_``), ``.svg`` holds the text and
``.save(path)`` writes it. What a diagram asserts is computed, not typed: the mask grids are
:func:`posbook.masks.attention_mask`, the pairs of the two RoPE layouts are read off :func:`posbook.rope.apply_rope`
and :func:`posbook.rope.interleaved_to_half`, the bytes per token are :func:`posbook.kvcache.kv_cache_bytes_per_token`,
and the variants printed on the data-flow stages are the keys of the registries (:data:`posbook.masks.MASK_KINDS`,
:data:`posbook.normalisers.NORMALISERS`, ...). Each drawn fact also sits in a ``data-*`` attribute, which is what
the tests compare with the library.

The SVG scales to the column (a ``viewBox``, ``width="100%"``), carries a ``<title>`` and a ``<desc>`` for screen
readers, and needs no script, stylesheet or external file. Text inside boxes is dark on mid-tone fills; text and
lines outside boxes use ``currentColor``, so an inline SVG takes the page's text colour in a dark theme (the book
shows SVG outputs as images, which the theme puts on a white card in dark mode).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence
from xml.sax.saxutils import escape

import torch

from . import _checks
from .bias import BIASES
from .kvcache import cache_kind, format_bytes, kv_cache_bytes_per_token, kv_values_per_layer
from .logit_scales import LOGIT_SCALES
from .masks import MASK_KINDS, attention_mask
from .normalisers import NORMALISERS
from .rope import LAYOUTS, apply_rope, interleaved_to_half, rope_cos_sin
from .scaling import ROPE_TYPES

FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, Helvetica, Arial, sans-serif"
MONO = "ui-monospace, 'SFMono-Regular', Menlo, Consolas, monospace"
INK = "#1a1a1a"        # text inside filled boxes: the fills are light enough in both themes
STROKE = "#888888"     # box outlines and arrows: visible on white and on #121212
ROLE_FILLS = {
    "core": "#9cc3e6",       # projections, scores, weighted sum: the attention every model has
    "position": "#f5b97f",   # where position enters: frequencies, rotation, bias
    "numerics": "#a8d8a0",   # keeping logits sane: QK-Norm, softcap, the normaliser
    "mask": "#c6b8e6",       # which keys a query may see
    "cache": "#f0d67e",      # what is kept for the next token
    "input": "#d9d9d9",      # inputs and outputs
}
"""The fill of each role, shared by every diagram, so that a stage keeps its colour from figure to figure."""

PLANE_FILLS = ("#8fb8e0", "#f2a97e", "#9fd49a", "#d7a6e0", "#f2d47f", "#8fd3cf", "#e8a0b4", "#c9c77e")
"""Fills of the rotation planes in :func:`rope_rotation_and_layouts` (head_dim ≤ 16: at most eight planes)."""


def _subscript(i: int) -> str:
    return str(i).translate(str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉"))


class Diagram:
    """An SVG figure: shown by Jupyter and myst-nb as ``image/svg+xml``, its text in ``svg``."""

    def __init__(self, svg: str, title: str, desc: str):
        self.svg = svg
        self.title = title
        self.desc = desc

    def _repr_svg_(self) -> str:
        return self.svg

    def save(self, path: Any) -> Path:
        """Write the SVG to ``path`` (UTF-8) and return the path."""
        path = _checks.path("path", path)
        path.write_text(self.svg, encoding="utf-8")
        return path

    def __repr__(self) -> str:
        return f"Diagram({self.title!r}, {len(self.svg)} characters of SVG)"


# ---- a tiny SVG writer -----------------------------------------------------------------------------------------------

def _attrs(attrs: Mapping[str, Any]) -> str:
    out = []
    for key, value in attrs.items():
        if value is None:
            continue
        key = key.rstrip("_").replace("_", "-")
        out.append(f'{key}="{escape(str(value), {chr(34): "&quot;"})}"')
    return (" " + " ".join(out)) if out else ""


def _el(tag: str, content: str | None = None, **attrs: Any) -> str:
    if content is None:
        return f"<{tag}{_attrs(attrs)}/>"
    return f"<{tag}{_attrs(attrs)}>{content}</{tag}>"


def _text(x: float, y: float, s: str, *, size: float = 15, anchor: str = "middle", fill: str = "currentColor",
          weight: str | None = None, family: str | None = None, **attrs: Any) -> str:
    return _el("text", escape(s), x=f"{x:.1f}", y=f"{y:.1f}", font_size=size, text_anchor=anchor, fill=fill,
               font_weight=weight, font_family=family, dominant_baseline="middle", **attrs)


def _box(x: float, y: float, w: float, h: float, fill: str, *, rx: float = 7, **attrs: Any) -> str:
    return _el("rect", x=f"{x:.1f}", y=f"{y:.1f}", width=f"{w:.1f}", height=f"{h:.1f}", rx=rx, fill=fill,
               stroke=STROKE, stroke_width=1.2, **attrs)


def _line(points: Sequence[tuple[float, float]], *, arrow: bool = True, dashed: bool = False, ids: str = "",
          width: float = 1.6, **attrs: Any) -> str:
    d = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
    return _el("polyline", points=d, fill="none", stroke=STROKE, stroke_width=width,
               stroke_dasharray="5 4" if dashed else None,
               marker_end=f"url(#{ids}-arrow)" if arrow else None, **attrs)


def _arrow_marker(ids: str) -> str:
    path = _el("path", d="M0,0 L10,5 L0,10 z", fill=STROKE)
    return _el("marker", path, id=f"{ids}-arrow", viewBox="0 0 10 10", refX=9, refY=5, markerWidth=7,
               markerHeight=7, orient="auto-start-reverse")


def _svg(ids: str, width: float, height: float, title: str, desc: str, body: Sequence[str]) -> Diagram:
    # ids prefixes the marker id: several diagrams inlined in one page must not share an id.
    content = "".join([_el("title", escape(title), id=f"{ids}-title"), _el("desc", escape(desc), id=f"{ids}-desc"),
                       _el("defs", _arrow_marker(ids)), *body])
    svg = _el("svg", content, xmlns="http://www.w3.org/2000/svg", viewBox=f"0 0 {width:g} {height:g}",
              width="100%", style="max-width: 100%; height: auto", role="img",
              aria_labelledby=f"{ids}-title {ids}-desc", font_family=FONT, class_=f"posbook-diagram {ids}")
    return Diagram(svg, title, desc)


def _variants(registry: Any) -> str:
    return " | ".join(registry)


# ---- 1. one attention layer's data flow ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Stage:
    """One stage of the data flow: its key (for ``chapters``), what the box says, the variants, the module, a role."""

    key: str
    label: str
    variants: str
    module: str | None
    role: str


STAGES: tuple[Stage, ...] = (
    Stage("projections", "q, k, v = x·W_q, x·W_k, x·W_v", "query heads, key/value heads (GQA)", None, "core"),
    Stage("qk_norm", "QK-Norm", "RMSNorm per head, before RoPE", "norms.py", "numerics"),
    Stage("rope", "RoPE rotation", f"layouts: {_variants(LAYOUTS)}; partial", "rope.py", "position"),
    Stage("scores", "scores q·kᵀ · scale", f"length scales: {_variants(LOGIT_SCALES)}", "core.py", "core"),
    Stage("bias", "+ bias b(i − j)", f"biases: {_variants(BIASES)}", "bias.py", "position"),
    Stage("softcap", "softcap", "c · tanh(s / c)", "stability.py", "numerics"),
    Stage("mask", "mask", _variants(MASK_KINDS), "masks.py", "mask"),
    Stage("normaliser", "normaliser", _variants(NORMALISERS), "normalisers.py", "numerics"),
    Stage("weighted_sum", "weights · v", "grouped heads read their k/v head", "core.py", "core"),
    Stage("output", "output", "de-rotation, gate", "core.py", "core"),
)
"""The spine of :func:`attention_data_flow`, top to bottom, in the order of :func:`posbook.core.attention`; the
variants are the keys of each stage's registry."""


SIDE_STAGES: tuple[Stage, ...] = (
    Stage("positions", "positions m, n", "of each query and key", None, "input"),
    Stage("frequencies", "frequencies θᵢ", f"{len(ROPE_TYPES)} rope types", "scaling.py", "position"),
    Stage("kv_cache", "KV cache", "k after RoPE, and v", "kvcache.py", "cache"),
)
"""The stages beside the spine, where positions and frequencies feed the rotation and the KV cache keeps the rotated
keys and the values."""

MAX_TAGS = 4
"""The most chapter tags one stage shows."""


def _stage_keys() -> tuple[str, ...]:
    return tuple(stage.key for stage in STAGES + SIDE_STAGES)


def _check_chapters(chapters: Any) -> dict[str, list[str]]:
    if chapters is None:
        return {}
    _checks.mapping("chapters", chapters)
    out = {}
    for key, labels in chapters.items():
        _checks.choice("chapters key", key, _stage_keys())
        if isinstance(labels, (str, bytes)) or not isinstance(labels, (list, tuple)):
            raise TypeError(f"chapters[{key!r}] must be a list of chapter labels such as ['2', '3'], got "
                            f"{type(labels).__name__} {labels!r}")
        if len(labels) > MAX_TAGS:
            raise ValueError(f"chapters[{key!r}] must hold at most {MAX_TAGS} labels, got {len(labels)}")
        for i, label in enumerate(labels):
            _checks.text(f"chapters[{key!r}][{i}]", label)
            if len(label) > 4:
                raise ValueError(f"chapters[{key!r}][{i}] must be a short label (at most 4 characters, such as "
                                 f"'12'), got {label!r}")
        out[key] = list(labels)
    return out


def _tags(right: float, y: float, labels: Sequence[str], stage: str, cls: str = "chapter-tag") -> list[str]:
    """Chapter tags right-aligned at ``right``: small dark pills with light text, the same in both themes."""
    out, x = [], right
    for label in reversed(labels):
        w = 12 + 8 * len(label)
        x -= w
        out.append(_el("g", _el("rect", x=f"{x:.1f}", y=f"{y - 10:.1f}", width=w, height=20, rx=10, fill="#3d3d3d",
                               stroke=STROKE)
                       + _text(x + w / 2, y + 1, label, size=13, fill="#ffffff", weight="600"),
                       class_=cls, data_stage=stage, data_chapter=label))
        x -= 4
    return out


def _stage_box(stage: Stage, x: float, y: float, w: float, h: float, tags: Sequence[str]) -> list[str]:
    out = [_box(x, y, w, h, ROLE_FILLS[stage.role], class_="stage", data_stage=stage.key, data_role=stage.role)]
    out.append(_text(x + 12, y + 16, stage.label, size=15, anchor="start", fill=INK, weight="600"))
    if stage.module:
        out.append(_text(x + w - 10, y + 16, stage.module, size=13, anchor="end", fill=INK, family=MONO,
                         opacity=0.75, class_="module"))
    if stage.variants:
        out.append(_text(x + 12, y + 35, stage.variants, size=13, anchor="start", fill=INK))
    out += _tags(x + w - 8, y + 35, tags, stage.key)
    return out


def attention_data_flow(chapters: Mapping[str, Sequence[str]] | None = None) -> Diagram:
    """One attention layer's data flow, stage by stage, as the package is laid out (:data:`STAGES`).

    Each box names its stage, the variants posbook implements (read from the stage's registry) and the module that
    holds it; positions feed the frequencies and then the rotation, and the KV cache sits beside k and v.
    ``chapters`` maps a stage key (``"rope"``, ``"mask"``, ...; see :data:`STAGES` and :data:`SIDE_STAGES`) to
    up to four chapter labels, printed as tags on that stage: ``{"rope": ["2", "3"]}``. The landing page and the
    chapter "Four ways in" show it.
    """
    tags = _check_chapters(chapters)
    ids = "pb-flow"
    spine_x, spine_w, h, pitch = 254, 332, 46, 62
    top = 74
    body: list[str] = []
    # the input
    body.append(_box(spine_x + spine_w / 2 - 90, 14, 180, 36, ROLE_FILLS["input"], rx=18))
    body.append(_text(spine_x + spine_w / 2, 32, "x (hidden states)", fill=INK, weight="600"))
    body.append(_line([(spine_x + spine_w / 2, 50), (spine_x + spine_w / 2, top - 2)], ids=ids))
    rows = {}
    for i, stage in enumerate(STAGES):
        y = top + i * pitch
        rows[stage.key] = y
        body += _stage_box(stage, spine_x, y, spine_w, h, tags.get(stage.key, ()))
        if i:
            body.append(_line([(spine_x + spine_w / 2, y - pitch + h), (spine_x + spine_w / 2, y - 2)], ids=ids))
    # positions -> frequencies -> RoPE, on the left
    side = {stage.key: stage for stage in SIDE_STAGES}
    left_x, left_w = 14, 168
    pos_y, freq_y = rows["projections"], rows["rope"]
    pos, freq = side["positions"], side["frequencies"]
    body += [_box(left_x, pos_y, left_w, h, ROLE_FILLS[pos.role], class_="stage", data_stage=pos.key,
                  data_role=pos.role),
             _text(left_x + 12, pos_y + 16, pos.label, anchor="start", fill=INK, weight="600"),
             _text(left_x + 12, pos_y + 35, "of queries and keys", size=13, anchor="start", fill=INK)]
    # The side boxes are narrow: their tags sit just below them, where the column is empty.
    body += _tags(left_x + left_w - 4, pos_y + h + 16, tags.get("positions", ()), "positions")
    body += [_box(left_x, freq_y, left_w, 64, ROLE_FILLS[freq.role], class_="stage", data_stage=freq.key,
                  data_role=freq.role),
             _text(left_x + 12, freq_y + 16, freq.label, anchor="start", fill=INK, weight="600"),
             _text(left_x + 12, freq_y + 35, freq.variants, size=13, anchor="start", fill=INK),
             _text(left_x + 12, freq_y + 53, freq.module, size=13, anchor="start", fill=INK, family=MONO,
                   opacity=0.75, class_="module")]
    body += _tags(left_x + left_w - 4, freq_y + 64 + 16, tags.get("frequencies", ()), "frequencies")
    body.append(_line([(left_x + left_w / 2, pos_y + h), (left_x + left_w / 2, freq_y - 2)], ids=ids))
    body.append(_line([(left_x + left_w, freq_y + h / 2), (spine_x - 2, freq_y + h / 2)], ids=ids))
    body.append(_text((left_x + left_w + spine_x) / 2, freq_y + h / 2 - 12, "cos, sin", size=13))
    # the KV cache on the right: v from the projections, k from the rotation; read by the scores and by · v
    cache_x, cache_w = spine_x + spine_w + 30, 746 - (spine_x + spine_w + 30)
    cache_y = rows["rope"]
    cache_h = rows["scores"] + h - cache_y
    lane = cache_x + cache_w - 26
    body += [_box(cache_x, cache_y, cache_w, cache_h, ROLE_FILLS["cache"], class_="stage", data_stage="kv_cache",
                  data_role="cache"),
             _text(cache_x + 12, cache_y + 16, side["kv_cache"].label, size=15, anchor="start", fill=INK,
                   weight="600"),
             _text(cache_x + 12, cache_y + 36, "k after RoPE,", size=13, anchor="start", fill=INK),
             _text(cache_x + 12, cache_y + 54, "and v", size=13, anchor="start", fill=INK),
             _text(cache_x + 12, cache_y + cache_h - 14, side["kv_cache"].module, size=13, anchor="start", fill=INK,
                   family=MONO, opacity=0.75, class_="module")]
    body += _tags(cache_x + cache_w - 8, cache_y + 16, tags.get("kv_cache", ()), "kv_cache")
    right = spine_x + spine_w
    proj_mid, rope_mid = rows["projections"] + h / 2, rows["rope"] + h / 2
    body.append(_line([(right, proj_mid), (lane, proj_mid), (lane, cache_y - 2)], ids=ids))
    body.append(_text(lane + 10, (proj_mid + cache_y) / 2, "v", size=15, anchor="start", weight="600"))
    body.append(_line([(right, rope_mid), (cache_x - 2, rope_mid)], ids=ids))
    body.append(_text((right + cache_x) / 2, rope_mid - 11, "k", size=15, weight="600"))
    scores_mid = rows["scores"] + h / 2
    body.append(_line([(cache_x, scores_mid), (right + 2, scores_mid)], ids=ids))
    body.append(_text((right + cache_x) / 2, scores_mid - 11, "k", size=15, weight="600"))
    wsum_mid = rows["weighted_sum"] + h / 2
    body.append(_line([(lane, cache_y + cache_h), (lane, wsum_mid), (right + 2, wsum_mid)], ids=ids))
    body.append(_text(lane + 10, (cache_y + cache_h + wsum_mid) / 2, "v", size=15, anchor="start", weight="600"))
    height = rows["output"] + h + 14
    if tags:
        key_y = rows["output"] + h / 2
        body += _tags(14 + 24, key_y, ["n"], "key", cls="tag-key")
        body.append(_text(44, key_y, "chapter", size=13, anchor="start"))
    chain = " → ".join(stage.label + (f" ({stage.module})" if stage.module else "") for stage in STAGES)
    desc = (f"Data flow through one attention layer, top to bottom: x → {chain}. On the left, the positions of "
            f"queries and keys give the rotary frequencies (scaling.py, {len(ROPE_TYPES)} rope types), whose cos and "
            "sin the RoPE rotation uses. On the right, the KV cache (kvcache.py) keeps each token's key after RoPE "
            "and its value; the scores read the cached keys and the weighted sum reads the cached values.")
    if tags:
        desc += " Chapter tags: " + "; ".join(f"{key}: {', '.join(v)}" for key, v in tags.items()) + "."
    return _svg(ids, 760, height, "One attention layer, stage by stage", desc, body)


# ---- 2. the four ways position enters a layer ------------------------------------------------------------------------

FOUR_WAYS: tuple[tuple[str, str, str], ...] = (
    ("APE", "added to the token:", "x + p(m) before W_q, W_k, W_v, so v carries position too"),
    ("RoPE", "rotates q and k:", "q by mθ, k by nθ; the logit sees only n − m, v is untouched"),
    ("ALiBi, T5", "added to the logit:", "+ b(i − j) after q·kᵀ (posbook.bias: {biases})"),
    ("NoPE", "nothing:", "no position is added; the causal mask alone lets a decoder tell order"),
    ("FoX, CoPE, stick-breaking", "from content:", "gates of the tokens between set b or the weights"),
)
"""The legend of :func:`four_ways_in`: name, where position enters, how (the four ways that count tokens, then the
fifth, which computes position from content)."""


def _badge(x: float, y: float, number: int) -> str:
    return _el("g", _el("circle", cx=f"{x:.1f}", cy=f"{y:.1f}", r=12, fill=PLANE_FILLS[number - 1], stroke=STROKE)
               + _text(x, y + 1, str(number), size=14, fill=INK, weight="700"), class_="way", data_way=number)


def _node(x: float, y: float, label: str, fill: str, r: float = 14) -> list[str]:
    return [_el("circle", cx=f"{x:.1f}", cy=f"{y:.1f}", r=r, fill=fill, stroke=STROKE, stroke_width=1.2),
            _text(x, y + 1, label, size=16, fill=INK, weight="700")]


def _added_term(x: float, y: float, box_y: float, box_w: float, label: str, badge: int, ids: str) -> list[str]:
    """A "+" on the line at (x, y) with the term it adds in a box below it, and its numbered badge."""
    fill = ROLE_FILLS["position"]
    return (_node(x, y, "+", fill)
            + [_box(x - box_w / 2, box_y, box_w, 30, fill), _text(x, box_y + 16, label, size=14, fill=INK),
               _line([(x, box_y), (x, y + 16)], ids=ids), _badge(x + 22, y - 28, badge)])


def four_ways_in() -> Diagram:
    """Where position can enter one attention layer, marked on x → q, k, v → logits → softmax → output.

    ① APE adds a position vector to the token before the projections; ② RoPE rotates q and k; ③ ALiBi and T5 add a
    bias to each logit; ④ NoPE adds nothing and leaves the causal mask as the only source of order. The chapter
    "Four ways in" walks through each. ⑤, the fifth way, computes position from content: FoX and CoPE add a bias made
    from gates of the tokens between key and query, and stick-breaking replaces the softmax (chapter "Position from
    content").
    """
    ids = "pb-ways"
    body: list[str] = []
    q_y, k_y, v_y = 62, 146, 236
    blue, orange, green = ROLE_FILLS["core"], ROLE_FILLS["position"], ROLE_FILLS["numerics"]
    # x, and ① APE: + p(m)
    body += [_box(14, k_y - 24, 56, 48, ROLE_FILLS["input"]), _text(42, k_y + 1, "x", size=17, fill=INK,
                                                                   weight="700"),
             _text(42, k_y + 40, "token at m", size=13)]
    body.append(_line([(70, k_y), (96, k_y)], ids=ids))
    body += _added_term(112, k_y, 196, 48, "p(m)", 1, ids)
    # the projections
    body.append(_line([(126, k_y), (146, k_y)], arrow=False))
    body.append(_line([(146, q_y), (146, v_y)], arrow=False))
    for y, name in ((q_y, "W_q"), (k_y, "W_k"), (v_y, "W_v")):
        body.append(_line([(146, y), (164, y)], ids=ids))
        body += [_box(166, y - 20, 62, 40, blue), _text(197, y + 1, name, fill=INK, weight="600")]
    # ② RoPE: R(mθ) on q, R(nθ) on k
    body.append(_line([(228, q_y), (262, q_y)], ids=ids))
    body.append(_line([(228, k_y), (262, k_y)], ids=ids))
    body += _node(279, q_y, "R", orange, r=15) + _node(279, k_y, "R", orange, r=15)
    body += [_text(279, q_y - 28, "R(mθ)", size=14), _text(279, k_y + 30, "R(nθ)", size=14),
             _text(246, q_y - 12, "q", size=15, weight="600"), _text(246, k_y - 12, "k", size=15, weight="600")]
    body.append(_badge(312, (q_y + k_y) / 2, 2))
    # the logits, and ③ + b(i − j)
    body.append(_line([(294, q_y), (336, q_y)], ids=ids))
    body.append(_line([(294, k_y), (336, k_y)], ids=ids))
    mid = (q_y + k_y) / 2
    body += [_box(338, q_y - 22, 92, k_y - q_y + 44, blue), _text(384, mid - 10, "q·kᵀ", size=16, fill=INK,
                                                                  weight="600"),
             _text(384, mid + 14, "/ √d", size=15, fill=INK)]
    body.append(_line([(430, mid), (452, mid)], ids=ids))
    body += _added_term(468, mid, 150, 56, "b(i−j)", 3, ids)
    # mask and softmax, ④ NoPE: the causal mask alone
    body.append(_line([(482, mid), (506, mid)], ids=ids))
    body += [_box(508, mid - 28, 100, 56, green), _text(558, mid - 11, "causal mask", size=14, fill=INK),
             _text(558, mid + 11, "softmax", size=14, fill=INK, weight="600")]
    body.append(_badge(604, mid - 30, 4))
    body.append(_badge(604, mid + 30, 5))
    # · v and the output
    body.append(_line([(608, mid), (630, mid)], ids=ids))
    body += [_box(632, mid - 24, 56, 48, blue), _text(660, mid + 1, "· v", size=16, fill=INK, weight="600")]
    body.append(_line([(228, v_y), (660, v_y), (660, mid + 26)], ids=ids))
    body.append(_text(246, v_y - 12, "v", size=15, weight="600"))
    body.append(_line([(688, mid), (708, mid)], ids=ids))
    body += [_box(710, mid - 20, 40, 40, ROLE_FILLS["input"]), _text(730, mid + 1, "o", size=16, fill=INK,
                                                                     weight="700")]
    # the legend
    by_distance = [name for name, bias in BIASES.items() if bias.reads == "distances"]
    rows = [(name, where, how.format(biases=", ".join(by_distance))) for name, where, how in FOUR_WAYS]
    for i, (name, where, how) in enumerate(rows):
        y = 286 + 28 * i
        body.append(_badge(26, y, i + 1))
        spans = (_el("tspan", escape(name), font_weight="700") + _el("tspan", escape("  " + where), font_style="italic")
                 + _el("tspan", escape(" " + how)))
        body.append(_el("text", spans, x=46, y=y + 1, font_size=15, fill="currentColor", dominant_baseline="middle",
                        class_="way-legend"))
    desc = ("Schematic of one attention layer: the token x at position m goes through W_q, W_k and W_v to q, k and "
            "v; q·kᵀ/√d gives the logits, then the causal mask and softmax, then the weighted sum of v gives the "
            "output o. Five numbered marks show where position can enter: "
            + "; ".join(f"{i + 1}, {name}: {where} {how}" for i, (name, where, how) in enumerate(rows)) + ".")
    return _svg(ids, 760, 286 + 28 * (len(rows) - 1) + 22, "Where position enters attention: four ways and a fifth",
                desc, body)


# ---- 3. RoPE: one plane, and the two layouts -------------------------------------------------------------------------

MAX_ROPE_DIAGRAM_DIM = 16
"""The widest head :func:`rope_rotation_and_layouts` draws (eight planes, eight colours)."""


def rope_pairs(head_dim: int, layout: str) -> list[tuple[int, int, int]]:
    """The planes of one head as ``(plane, dim_a, dim_b)``, read off :func:`posbook.rope.apply_rope` itself.

    Each basis vector e_j is rotated with a distinct angle per plane; the dimension that receives its sine is j's
    partner, and the angle tells which frequency θᵢ turns the pair. ``"interleaved"`` gives (i, 2i, 2i + 1),
    ``"half"`` gives (i, i, i + head_dim/2). Used by :func:`rope_rotation_and_layouts` (chapter "RoPE from first
    principles").
    """
    _checks.size("head_dim", head_dim, min_value=2)
    if head_dim % 2:
        raise ValueError(f"head_dim must be even (RoPE turns pairs of dimensions), got {head_dim}")
    _checks.choice("layout", layout, LAYOUTS)
    planes = head_dim // 2
    angles = torch.arange(1, planes + 1, dtype=torch.float64) * (math.pi / 2 / (planes + 1))  # distinct, < π/2
    cos, sin = rope_cos_sin(torch.ones(1), angles, layout=layout, dtype=torch.float64)
    turned = apply_rope(torch.eye(head_dim, dtype=torch.float64)[:, None, :], cos, sin, layout=layout)[:, 0, :]
    found = {}
    for j in range(head_dim):
        row = turned[j].abs().clone()
        row[j] = -1
        partner = int(row.argmax())
        plane = int(round(float(torch.acos(turned[j, j].clamp(-1, 1))) / (math.pi / 2 / (planes + 1)))) - 1
        found[plane] = (plane, *sorted((j, partner)))
    return [found[i] for i in range(planes)]


def rope_rotation_and_layouts(head_dim: int = 8) -> Diagram:
    """RoPE in one picture: on the left one plane, where q at position m turns by mθ and k at n by nθ, so their
    angle is (n − m)θ; on the right the dimensions of a head in the interleaved and the half layout, each plane's
    pair joined by an arc of its colour, and the permutation :func:`posbook.rope.interleaved_to_half` between them.

    The rotated vectors come from :func:`posbook.rope.apply_rope`, the pairs from :func:`rope_pairs` and the lines
    from ``interleaved_to_half(torch.arange(head_dim))``. ``head_dim``: even, 2 … 16. Chapter "RoPE from first
    principles".
    """
    _checks.size("head_dim", head_dim, min_value=2)
    if head_dim % 2 or head_dim > MAX_ROPE_DIAGRAM_DIM:
        raise ValueError(f"head_dim must be even and at most {MAX_ROPE_DIAGRAM_DIM} (one colour per plane), got "
                         f"{head_dim}")
    ids = "pb-rope"
    body: list[str] = []
    # left: one plane. q and k start on the first axis; m = 2, n = 5, θ = 0.35 rad, turned by apply_rope.
    m, n, theta = 2, 5, 0.35
    cos, sin = rope_cos_sin(torch.tensor([m, n]), torch.tensor([theta], dtype=torch.float64), dtype=torch.float64)
    q, k = apply_rope(torch.tensor([[1.0, 0.0], [0.8, 0.0]], dtype=torch.float64), cos, sin).tolist()
    cx, cy, r = 120, 196, 120

    def at(v, scale=1.0):
        return cx + r * scale * v[0], cy - r * scale * v[1]

    def arc(a0, a1, radius, **attrs):
        x0, y0 = cx + radius * math.cos(a0), cy - radius * math.sin(a0)
        x1, y1 = cx + radius * math.cos(a1), cy - radius * math.sin(a1)
        return _el("path", d=f"M{x0:.1f},{y0:.1f} A{radius},{radius} 0 0 0 {x1:.1f},{y1:.1f}", fill="none", **attrs)

    angle_q, angle_k = math.atan2(q[1], q[0]), math.atan2(k[1], k[0])
    body += [_text(150, 22, "one plane", size=15, weight="700"),

             _line([(cx - 30, cy), (cx + r + 14, cy)], arrow=False, width=1, opacity=0.6),
             _line([(cx, cy + 14), (cx, cy - r - 14)], arrow=False, width=1, opacity=0.6),
             arc(0, angle_q, 44, stroke=STROKE, stroke_width=1.4),
             arc(angle_q, angle_k, 76, stroke="#d9822b", stroke_width=3, class_="relative-angle",
                 data_angle=f"{angle_k - angle_q:.6f}")]
    for v, name, colour in ((q, "q at m", "#3f7fbf"), (k, "k at n", "#c0632a")):
        x, y = at(v)
        body.append(_el("line", x1=cx, y1=cy, x2=f"{x:.1f}", y2=f"{y:.1f}", stroke=colour, stroke_width=3,
                        marker_end=f"url(#{ids}-arrow)", class_="vector"))
    qx, qy = at(q, 1.08)
    kx, ky = at(k, 1.14)
    body += [_text(qx + 2, qy - 4, "R(mθ) q", size=15, anchor="start", weight="600"),
             _text(kx, ky - 10, "R(nθ) k", size=15, weight="600")]
    mx, my = cx + 56 * math.cos(angle_q / 2), cy - 56 * math.sin(angle_q / 2)
    body.append(_text(mx + 8, my, "mθ", size=14, anchor="start"))
    mid = (angle_q + angle_k) / 2
    body.append(_text(cx + 98 * math.cos(mid) - 10, cy - 98 * math.sin(mid) - 4, "(n − m)θ", size=15,
                      anchor="end" if math.cos(mid) < 0.3 else "start", weight="700", fill="#d9822b"))
    body += [_text(150, cy + 40, "q·k depends on n − m only", size=14),
             _text(150, cy + 60, f"(drawn for m = {m}, n = {n})", size=13, opacity=0.8)]
    # right: the two layouts, pairs read off apply_rope, the permutation off interleaved_to_half
    perm = interleaved_to_half(torch.arange(head_dim)).tolist()   # half[j] holds interleaved dim perm[j]
    x0, width = 330, 416
    cell = min(48, (width - 4) / head_dim)
    boxw = cell - 6
    roomy = cell >= 40
    boxh = 46 if roomy else boxw
    top_y, bottom_y = 92, 236
    body.append(_text(x0 + width / 2, 22, f"the {head_dim} dimensions of one head", size=15, weight="700"))
    rows = (("interleaved", top_y, "interleaved: planes (2i, 2i+1)"),
            ("half", bottom_y, "half: planes (i, i + d/2); lines: interleaved_to_half"))
    for layout, y, caption in rows:
        plane_of = {}
        for plane, a, b in rope_pairs(head_dim, layout):
            plane_of[a] = plane_of[b] = plane
            xa, xb = x0 + (a + 0.5) * cell, x0 + (b + 0.5) * cell
            up = layout == "interleaved"
            lift = (16 + 10 * plane) if not up else 22
            ybase = y - 2 if up else y + boxh + 2
            yctl = ybase - 2 * lift if up else ybase + 2 * lift
            body.append(_el("path", d=f"M{xa:.1f},{ybase:.1f} Q{(xa + xb) / 2:.1f},{yctl:.1f} {xb:.1f},{ybase:.1f}",
                            fill="none", stroke=PLANE_FILLS[plane], stroke_width=3, class_="pair",
                            data_layout=layout, data_plane=plane, data_dims=f"{a} {b}"))
        for j in range(head_dim):
            x = x0 + j * cell + 3
            body.append(_box(x, y, boxw, boxh, PLANE_FILLS[plane_of[j]], rx=4, class_="dim", data_layout=layout,
                             data_dim=j, data_plane=plane_of[j]))
            if roomy:  # the dimension, and the frequency that turns it
                body.append(_text(x + boxw / 2, y + 15, str(j), size=15, fill=INK, weight="600"))
                body.append(_text(x + boxw / 2, y + 34, f"θ{_subscript(plane_of[j])}", size=13, fill=INK))
            else:
                body.append(_text(x + boxw / 2, y + boxh / 2 + 1, str(j), size=13, fill=INK))
        label_y = y - 40 if layout == "interleaved" else y + boxh + 16 + 10 * (head_dim // 2) + 22
        body.append(_text(x0, label_y, caption, size=14, anchor="start", weight="600"))
    for j, source in enumerate(perm):
        body.append(_el("line", x1=f"{x0 + (source + 0.5) * cell:.1f}", y1=top_y + boxh + 2,
                        x2=f"{x0 + (j + 0.5) * cell:.1f}", y2=bottom_y - 3, stroke=STROKE, stroke_width=1.2,
                        class_="perm", data_from=source, data_to=j))
    height = max(cy + 76, bottom_y + boxh + 16 + 10 * (head_dim // 2) + 36)
    pairs = {layout: ", ".join(f"({a},{b})" for _, a, b in rope_pairs(head_dim, layout)) for layout in LAYOUTS}
    desc = (f"Left: one rotation plane; q at position m is turned by mθ and k at position n by nθ, so the angle "
            f"between them is (n − m)θ (drawn for m = {m}, n = {n}). Right: the {head_dim} dimensions of one head "
            f"in two layouts, each plane's pair in one colour. Interleaved pairs: {pairs['interleaved']}. Half "
            f"pairs: {pairs['half']}. Lines show interleaved_to_half: half dimension j holds interleaved dimension "
            + ", ".join(f"{j}←{s}" for j, s in enumerate(perm)) + ".")
    return _svg(ids, 760, height, "RoPE: one plane, and two layouts of a head", desc, body)


# ---- 4. the masks of local and global layers -------------------------------------------------------------------------

MASK_FILLS = {"sliding": ROLE_FILLS["mask"], "chunked": ROLE_FILLS["position"], "causal": ROLE_FILLS["core"],
              "full": ROLE_FILLS["numerics"]}
"""Fill of the visible cells, per kind of :data:`posbook.masks.MASK_KINDS`."""

MAX_MASK_LENGTH = 64
"""The longest sequence :func:`layer_masks` draws (a 64 × 64 grid of cells a few pixels wide)."""


def _mask_title(kind: str, window: int, chunk: int) -> str:
    return {"sliding": f"sliding, window {window}", "chunked": f"chunked, chunk {chunk}",
            "causal": "causal (global)", "full": "full (bidirectional)"}[kind]


def layer_masks(length: int = 16, window: int = 4, chunk: int = 4,
                kinds: Sequence[str] = ("sliding", "chunked", "causal")) -> Diagram:
    """The masks of a sliding-window, a chunked (iRoPE's local layers) and a global causal layer, side by side.

    Each grid is :func:`posbook.masks.attention_mask` for ``length`` positions, query i down, key j across; a
    filled cell is a key the query may see, and the subtitle counts them. ``window`` is the sliding window
    (keys with 0 ≤ i − j < window), ``chunk`` the chunk size; ``kinds``: one to four of ``"sliding"``,
    ``"chunked"``, ``"causal"``, ``"full"``. ``length``: 2 … 64. Chapter "iRoPE and hybrids".
    """
    _checks.size("length", length, min_value=2)
    if length > MAX_MASK_LENGTH:
        raise ValueError(f"length must be at most {MAX_MASK_LENGTH} (one cell per query-key pair), got {length}")
    _checks.size("window", window)
    _checks.size("chunk", chunk)
    if isinstance(kinds, (str, bytes)) or not isinstance(kinds, (list, tuple)):
        raise TypeError(f"kinds must be a list or tuple of mask kinds such as ('sliding', 'causal'), got "
                        f"{type(kinds).__name__} {kinds!r}")
    if not 1 <= len(kinds) <= len(MASK_KINDS):
        raise ValueError(f"kinds must hold 1 to {len(MASK_KINDS)} mask kinds, got {len(kinds)}")
    for i, kind in enumerate(kinds):
        _checks.choice(f"kinds[{i}]", kind, MASK_KINDS)
    if len(set(kinds)) != len(kinds):
        raise ValueError(f"kinds must not repeat a kind, got {tuple(kinds)!r}")
    ids = "pb-masks"
    sizes = {"window": window, "chunk_size": chunk}
    panel = 760 / len(kinds)
    grid = min(220.0, panel - 60)
    cell = grid / length
    top = 72
    body: list[str] = []
    summaries = []
    for p, kind in enumerate(kinds):
        size_name = MASK_KINDS[kind].size_name
        mask = attention_mask(kind, length, **({size_name: sizes[size_name]} if size_name else {}))
        visible = int(mask.sum())
        gx = p * panel + (panel - grid) / 2 + 14
        body += [_text(gx + grid / 2, 24, _mask_title(kind, window, chunk), size=15, weight="700"),
                 _text(gx + grid / 2, 48, f"{visible} of {length * length} pairs", size=13, opacity=0.85)]
        cells = []
        for i in range(length):
            for j in range(length):
                x, y = gx + j * cell, top + i * cell
                on = bool(mask[i, j])
                cells.append(_el("rect", x=f"{x:.2f}", y=f"{y:.2f}", width=f"{cell:.2f}", height=f"{cell:.2f}",
                                 fill=MASK_FILLS[kind] if on else "none", stroke=STROKE,
                                 stroke_width=0.6 if length <= 32 else 0.3, stroke_opacity=1 if on else 0.45,
                                 class_="cell on" if on else "cell off"))
        body.append(_el("g", "".join(cells), class_="mask", data_kind=kind, data_visible=visible,
                        data_length=length))
        body.append(_el("rect", x=f"{gx:.1f}", y=top, width=f"{grid:.1f}", height=f"{grid:.1f}", fill="none",
                        stroke=STROKE, stroke_width=1.2))
        # axes: key j across the top edge's foot, query i down the left edge
        body += [_text(gx, top + grid + 14, "0", size=13), _text(gx + grid - cell / 2, top + grid + 14,
                                                                 str(length - 1), size=13),
                 _text(gx + grid / 2, top + grid + 34, "key j →", size=14),
                 _text(gx - 10, top + cell / 2, "0", size=13, anchor="end"),
                 _text(gx - 10, top + grid - cell / 2, str(length - 1), size=13, anchor="end"),
                 _text(gx - 24, top + grid / 2, "query i →", size=14,
                       transform=f"rotate(-90 {gx - 24:.1f} {top + grid / 2:.1f})")]
        summaries.append(f"{_mask_title(kind, window, chunk)}: {visible} of {length * length} query-key pairs "
                         "visible")
    desc = (f"Attention masks for {length} positions, query i down and key j across, a filled cell where the query "
            "may attend to the key: " + "; ".join(summaries) + ".")
    return _svg(ids, 760, top + grid + 48, "Masks of local and global layers", desc, body)


# ---- 5. what the KV cache keeps per token ----------------------------------------------------------------------------

KV_FILLS = {"k": "#9cc3e6", "v": "#a8d8a0", "latent": "#c6b8e6", "rope_key": "#f5b97f"}
"""Fills of a key head, a value head, MLA's latent c_KV and its shared RoPE key."""

MAX_KV_DIAGRAM_HEADS = 64
"""The most query heads :func:`kv_cache_layouts` draws one block per head for."""


def kv_example_configs(n_heads: int = 8, n_kv_heads: int = 2, head_dim: int = 128, kv_lora_rank: int = 512,
                       qk_rope_head_dim: int = 64) -> dict[str, dict[str, Any]]:
    """One-layer Hugging Face configs for MHA, GQA, MQA and MLA at one example shape, as :func:`kv_cache_layouts`
    draws them (:mod:`posbook.kvcache` reads them). MLA's per-head query/value sizes are head_dim; they do not enter
    the cache. ``n_heads``: 3 … 64; ``n_kv_heads``: a divisor of n_heads between 1 and n_heads (GQA)."""
    _checks.size("n_heads", n_heads, min_value=3)
    if n_heads > MAX_KV_DIAGRAM_HEADS:
        raise ValueError(f"n_heads must be at most {MAX_KV_DIAGRAM_HEADS} (one block per head), got {n_heads}")
    _checks.size("n_kv_heads", n_kv_heads, min_value=2)
    if n_kv_heads >= n_heads or n_heads % n_kv_heads:
        raise ValueError(f"n_kv_heads must divide n_heads={n_heads} and be smaller (GQA: 1 < n_kv_heads < n_heads), "
                         f"got {n_kv_heads}")
    _checks.size("head_dim", head_dim)
    _checks.size("kv_lora_rank", kv_lora_rank)
    _checks.size("qk_rope_head_dim", qk_rope_head_dim)
    base = {"model_type": "llama", "num_hidden_layers": 1, "hidden_size": n_heads * head_dim,
            "num_attention_heads": n_heads, "head_dim": head_dim}
    return {"MHA": {**base, "num_key_value_heads": n_heads},
            "GQA": {**base, "num_key_value_heads": n_kv_heads},
            "MQA": {**base, "num_key_value_heads": 1},
            "MLA": {"model_type": "deepseek_v3", "num_hidden_layers": 1, "hidden_size": n_heads * head_dim,
                    "num_attention_heads": n_heads, "num_key_value_heads": n_heads, "kv_lora_rank": kv_lora_rank,
                    "qk_rope_head_dim": qk_rope_head_dim, "qk_nope_head_dim": head_dim, "v_head_dim": head_dim}}


def kv_cache_layouts(n_heads: int = 8, n_kv_heads: int = 2, head_dim: int = 128, kv_lora_rank: int = 512,
                     qk_rope_head_dim: int = 64, dtype_bytes: float = 2) -> Diagram:
    """What one token leaves in the KV cache of one layer under MHA, GQA, MQA and MLA, drawn to scale.

    Rows of blocks: a key and a value per key/value head (MHA: ``n_heads`` of them, GQA: ``n_kv_heads``, MQA: one),
    or for MLA one latent c_KV of ``kv_lora_rank`` numbers and the RoPE key of ``qk_rope_head_dim`` numbers shared
    by all heads. Block widths are numbers cached; each row ends with its bytes per token per layer from
    :func:`posbook.kvcache.kv_cache_bytes_per_token` (``dtype_bytes`` per number, 2 for BF16) and the share of
    MHA's. The row names are :func:`posbook.kvcache.cache_kind` of :func:`kv_example_configs`. Chapter "Heads,
    head_dim and the KV cache".
    """
    configs = kv_example_configs(n_heads, n_kv_heads, head_dim, kv_lora_rank, qk_rope_head_dim)
    _checks.number("dtype_bytes", dtype_bytes, positive=True)
    ids = "pb-kv"
    values = {name: kv_values_per_layer(config) for name, config in configs.items()}
    nbytes = {name: kv_cache_bytes_per_token(config, dtype_bytes) for name, config in configs.items()}
    x0, span, top, pitch, bar = 150, 410, 92, 60, 34
    scale = span / max(values.values())
    body = [_text(14, 22, f"per token and layer: {n_heads} query heads, head_dim {head_dim}, {dtype_bytes:g} bytes "
                  "per number", size=15, anchor="start", weight="700"),
            _text(744, 56, "bytes per token", size=13, anchor="end", opacity=0.85)]
    rows_desc = []
    for r, (name, config) in enumerate(configs.items()):
        y = top + r * pitch
        kind = cache_kind(config)
        kv = config["num_key_value_heads"]
        detail = (f"{kv} k/v head{'s' if kv > 1 else ''}" if kind != "MLA"
                  else "latent + RoPE key")
        body += [_text(14, y + bar / 2 - 9, kind, size=16, anchor="start", weight="700", class_="kind"),
                 _text(14, y + bar / 2 + 11, detail, size=13, anchor="start", opacity=0.85)]
        if kind == "MLA":
            blocks = [("latent", "c_KV", kv_lora_rank), ("rope_key", "k_rope", qk_rope_head_dim)]
        else:
            blocks = ([("k", f"k{_subscript(h)}", head_dim) for h in range(kv)]
                      + [("v", f"v{_subscript(h)}", head_dim) for h in range(kv)])
        x = x0
        for role, label, count in blocks:
            w = count * scale
            body.append(_box(x, y, w, bar, KV_FILLS[role], rx=3, class_="block", data_role=role,
                             data_values=count))
            room = 7.5 * len(label) + 6
            if w >= room:
                body.append(_text(x + w / 2, y + bar / 2 + 1, label, size=13 if w < 60 else 14, fill=INK))
            else:  # too narrow for its name: say it just after the row
                body.append(_text(x + w + 6, y + bar / 2 + 1, label, size=13, anchor="start"))
            x += w
        if kind == "MLA":  # after the RoPE key's name
            body.append(_text(x + 70, y + bar / 2 + 1, f"{values[name]} numbers for all {n_heads} heads", size=13,
                              anchor="start", opacity=0.85))
        share = nbytes[name] / nbytes["MHA"]
        body += [_text(744, y + bar / 2 - 8, format_bytes(nbytes[name], 3), size=16, anchor="end", weight="700",
                       class_="bytes", data_kind=kind, data_bytes=f"{nbytes[name]:g}"),
                 _text(744, y + bar / 2 + 12, f"{share:.3g}× MHA", size=13, anchor="end", opacity=0.85)]
        rows_desc.append(f"{kind} ({detail}): {values[name]} numbers, {format_bytes(nbytes[name], 3)}")
    # legend
    ly = top + 4 * pitch + 8
    x = 14
    for role, text in (("k", f"key head ({head_dim})"), ("v", f"value head ({head_dim})"),
                       ("latent", f"latent c_KV ({kv_lora_rank})"), ("rope_key", f"RoPE key ({qk_rope_head_dim})")):
        body += [_box(x, ly - 8, 16, 16, KV_FILLS[role], rx=3), _text(x + 22, ly + 1, text, size=13, anchor="start")]
        x += 30 + 7.2 * len(text)
    desc = (f"Bytes of KV cache one token adds to one layer, for {n_heads} query heads of head_dim {head_dim} at "
            f"{dtype_bytes:g} bytes per number, with blocks drawn to scale: " + "; ".join(rows_desc) + ".")
    return _svg(ids, 760, ly + 22, "What one token stores in the KV cache", desc, body)
