"""posbook.diagrams: every diagram is self-contained, accessible SVG, and what it draws is the library's."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import torch

import posbook as pb
from posbook import diagrams

NS = {"svg": "http://www.w3.org/2000/svg"}
ALL = {"attention_data_flow": dict(chapters={"rope": ["2", "3"], "kv_cache": ["14"]}),
       "four_ways_in": {}, "rope_rotation_and_layouts": {}, "layer_masks": {}, "kv_cache_layouts": {}}


def parse(diagram) -> ET.Element:
    return ET.fromstring(diagram.svg)


def find(root, cls):
    return [e for e in root.iter() if cls in (e.get("class") or "").split()]


@pytest.mark.parametrize("name", sorted(ALL))
def test_each_diagram_is_accessible_self_contained_svg(name, tmp_path):
    diagram = getattr(diagrams, name)(**ALL[name])
    root = parse(diagram)
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    assert root.get("viewBox").startswith("0 0 ") and root.get("width") == "100%"
    title, desc = root.find("svg:title", NS), root.find("svg:desc", NS)
    assert title.text and len(desc.text) > 80
    assert diagram._repr_svg_() == diagram.svg
    for element in root.iter():
        assert not element.tag.endswith(("script", "image", "foreignObject", "style"))
        for key, value in element.attrib.items():
            assert "href" not in key and not key.startswith("on"), (key, value)
            assert "http" not in value or key == "xmlns"
    # text is legible at phone width: nothing under 13 viewBox units in a ~760-wide figure
    assert min(float(e.get("font-size")) for e in root.iter() if e.get("font-size")) >= 13
    assert float(root.get("viewBox").split()[2]) <= 800
    saved = diagram.save(tmp_path / f"{name}.svg")
    assert saved.read_text(encoding="utf-8") == diagram.svg


def test_data_flow_draws_the_stage_table_with_the_registries_and_existing_modules():
    root = parse(diagrams.attention_data_flow())
    stages = [e.get("data-stage") for e in find(root, "stage")]
    assert stages[:len(diagrams.STAGES)] == [s.key for s in diagrams.STAGES]
    assert set(stages) == {s.key for s in diagrams.STAGES + diagrams.SIDE_STAGES}
    text = " ".join(e.text or "" for e in root.iter())
    for registry in (pb.MASK_KINDS, pb.NORMALISERS, pb.BIASES, pb.LAYOUTS, pb.LOGIT_SCALES):
        assert all(name in text for name in registry)
    assert f"{len(pb.ROPE_TYPES)} rope types" in text
    src = Path(pb.__file__).parent
    for module in {e.text for e in find(root, "module")}:
        assert (src / module).is_file(), module
    assert not find(root, "chapter-tag")


def test_data_flow_prints_the_chapter_tags_it_is_given():
    chapters = {"rope": ["2", "3"], "mask": ["9"], "frequencies": ["5"], "kv_cache": ["14"]}
    root = parse(diagrams.attention_data_flow(chapters))
    drawn = {}
    for tag in find(root, "chapter-tag"):
        drawn.setdefault(tag.get("data-stage"), []).append(tag.get("data-chapter"))
    assert {k: sorted(v) for k, v in drawn.items()} == {k: sorted(v) for k, v in chapters.items()}


def test_four_ways_marks_four_places_and_the_fifth():
    root = parse(diagrams.four_ways_in())
    assert sorted({int(e.get("data-way")) for e in find(root, "way")}) == [1, 2, 3, 4, 5]
    legend = ["".join(e.itertext()) for e in find(root, "way-legend")]
    assert all(name in " ".join(legend) for name in ("APE", "RoPE", "ALiBi", "T5", "NoPE", "FoX", "CoPE"))
    # the third way lists the biases that read distances; FoX's and CoPE's, computed from content, are the fifth
    assert all((name in legend[2]) == (bias.reads == "distances") for name, bias in pb.BIASES.items())


@pytest.mark.parametrize("head_dim", [2, 8, 16])
def test_rope_layouts_are_the_librarys(head_dim):
    root = parse(diagrams.rope_rotation_and_layouts(head_dim))
    perm = pb.interleaved_to_half(torch.arange(head_dim)).tolist()
    plane = {(e.get("data-layout"), int(e.get("data-dim"))): int(e.get("data-plane")) for e in find(root, "dim")}
    assert len(plane) == 2 * head_dim
    for j, source in enumerate(perm):  # half dimension j holds interleaved dimension perm[j]: the same plane
        assert plane["half", j] == plane["interleaved", source]
    lines = sorted((int(e.get("data-from")), int(e.get("data-to"))) for e in find(root, "perm"))
    assert lines == sorted((source, j) for j, source in enumerate(perm))
    pairs = {(e.get("data-layout"), int(e.get("data-plane"))): tuple(map(int, e.get("data-dims").split()))
             for e in find(root, "pair")}
    half = head_dim // 2
    assert pairs == {**{("interleaved", i): (2 * i, 2 * i + 1) for i in range(half)},
                     **{("half", i): (i, i + half) for i in range(half)}}
    # the plane a dimension belongs to is the plane apply_rope turns it in, for both layouts
    assert diagrams.rope_pairs(head_dim, "half") == [(i, i, i + half) for i in range(half)]


def test_rope_plane_angle_is_n_minus_m_theta():
    root = parse(diagrams.rope_rotation_and_layouts())
    (arc,) = find(root, "relative-angle")
    assert float(arc.get("data-angle")) == pytest.approx((5 - 2) * 0.35, abs=1e-6)


@pytest.mark.parametrize("length, window, chunk, kinds", [(16, 4, 4, ("sliding", "chunked", "causal")),
                                                          (9, 3, 5, ("full", "causal")), (5, 1, 2, ("chunked",))])
def test_mask_cells_are_attention_mask(length, window, chunk, kinds):
    root = parse(diagrams.layer_masks(length, window, chunk, kinds))
    grids = find(root, "mask")
    assert [g.get("data-kind") for g in grids] == list(kinds)
    sizes = {"sliding": {"window": window}, "chunked": {"chunk_size": chunk}}
    for grid in grids:
        kind = grid.get("data-kind")
        mask = pb.attention_mask(kind, length, **sizes.get(kind, {}))
        cells = find(grid, "cell")
        assert len(cells) == length * length
        drawn = torch.tensor(["on" in c.get("class").split() for c in cells]).reshape(length, length)
        assert torch.equal(drawn, mask)
        assert int(grid.get("data-visible")) == int(mask.sum()) == len(find(grid, "on"))


def test_kv_bytes_and_blocks_are_kvcache():
    root = parse(diagrams.kv_cache_layouts())
    configs = diagrams.kv_example_configs()
    labels = {e.get("data-kind"): e for e in find(root, "bytes")}
    assert list(labels) == ["MHA", "GQA", "MQA", "MLA"] == [pb.cache_kind(c) for c in configs.values()]
    for name, config in configs.items():
        nbytes = pb.kv_cache_bytes_per_token(config)
        assert float(labels[name].get("data-bytes")) == nbytes
        assert labels[name].text == pb.format_bytes(nbytes, 3)
    assert [float(labels[k].get("data-bytes")) for k in labels] == [4096, 1024, 512, 1152]
    blocks = [int(e.get("data-values")) for e in find(root, "block")]
    assert sum(blocks) == sum(pb.kv_values_per_layer(c) for c in configs.values())


BAD = [
    (diagrams.attention_data_flow, dict(chapters=["2"]), TypeError, "chapters"),
    (diagrams.attention_data_flow, dict(chapters={"roap": ["2"]}), ValueError, "chapters key"),
    (diagrams.attention_data_flow, dict(chapters={"rope": "23"}), TypeError, "chapters['rope']"),
    (diagrams.attention_data_flow, dict(chapters={"rope": [2]}), TypeError, "chapters['rope'][0]"),
    (diagrams.attention_data_flow, dict(chapters={"rope": ["1", "2", "3", "4", "5"]}), ValueError, "at most 4"),
    (diagrams.rope_rotation_and_layouts, dict(head_dim=7), ValueError, "head_dim"),
    (diagrams.rope_rotation_and_layouts, dict(head_dim=18), ValueError, "head_dim"),
    (diagrams.rope_rotation_and_layouts, dict(head_dim=8.0), TypeError, "head_dim"),
    (diagrams.rope_rotation_and_layouts, dict(head_dim=True), TypeError, "head_dim"),
    (diagrams.rope_pairs, dict(head_dim=8, layout="neox"), ValueError, "layout"),
    (diagrams.layer_masks, dict(length=1), ValueError, "length"),
    (diagrams.layer_masks, dict(length=65), ValueError, "length"),
    (diagrams.layer_masks, dict(window=0), ValueError, "window"),
    (diagrams.layer_masks, dict(chunk="4"), TypeError, "chunk"),
    (diagrams.layer_masks, dict(kinds="causal"), TypeError, "kinds"),
    (diagrams.layer_masks, dict(kinds=("causal", "local")), ValueError, "kinds[1]"),
    (diagrams.layer_masks, dict(kinds=()), ValueError, "kinds"),
    (diagrams.layer_masks, dict(kinds=("causal", "causal")), ValueError, "kinds"),
    (diagrams.kv_cache_layouts, dict(n_kv_heads=3), ValueError, "n_kv_heads"),
    (diagrams.kv_cache_layouts, dict(n_kv_heads=8), ValueError, "n_kv_heads"),
    (diagrams.kv_cache_layouts, dict(n_heads=2), ValueError, "n_heads"),
    (diagrams.kv_cache_layouts, dict(n_heads=128, n_kv_heads=8), ValueError, "n_heads"),
    (diagrams.kv_cache_layouts, dict(head_dim=0), ValueError, "head_dim"),
    (diagrams.kv_cache_layouts, dict(dtype_bytes=float("nan")), ValueError, "dtype_bytes"),
    (diagrams.kv_cache_layouts, dict(kv_lora_rank=None), TypeError, "kv_lora_rank"),
]


@pytest.mark.parametrize("fn, kwargs, error, names", BAD, ids=[f"{f.__name__}-{k}" for f, k, *_ in BAD])
def test_bad_arguments_are_refused_by_name(fn, kwargs, error, names):
    with pytest.raises(error, match=names.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(")):
        fn(**kwargs)


def test_save_refuses_a_non_path():
    with pytest.raises(TypeError, match="path"):
        diagrams.four_ways_in().save(3)
