"""posbook.experiments.store: run ids, records and shipped weights; a grid recorded, read back by name and checked by
retraining; a run that starts from a recorded run's weights, handed to the trainer by the store."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

from posbook.experiments import TrainConfig, grids, store, train
from posbook.experiments.corpus import load_corpus
from posbook.experiments.evaluation import evaluate

TINY = dict(n_layer=2, n_embd=32, n_head=4, pattern="RN")


def tiny(**overrides) -> TrainConfig:
    fields = dict(task="copy", preset="cpu", model=dict(TINY), steps=8, batch_size=8, train_max_size=4,
                  eval_sizes=[2, 8], eval_every=8, eval_batches=1, warmup=2)
    fields.update(overrides)
    return TrainConfig(**fields)


@pytest.fixture
def tiny_grid(tmp_path, monkeypatch):
    """A two-run grid named "tiny", recorded under tmp_path instead of the package."""
    runs = {"copy/RoPE": tiny(), "copy/NoPE": tiny(model=dict(TINY, pattern="N"))}
    monkeypatch.setattr(store, "RECORDS", tmp_path)
    monkeypatch.setitem(grids.GRIDS, "tiny", lambda: runs)
    return runs


def test_run_id_depends_on_what_changes_results_only():
    base = tiny()
    assert store.run_id(base) == store.run_id(replace(base, out_dir="/somewhere", progress=True, checkpoint_every=3))
    assert store.run_id(base) != store.run_id(replace(base, seed=1))
    assert store.run_id(base) != store.run_id(replace(base, model=dict(TINY, pattern="N")))
    # A field left to the preset and the same value given explicitly are the same run.
    assert store.run_id(replace(base, lr=None)) == store.run_id(replace(base, lr=3e-3))


def test_run_ids_of_the_recorded_runs_are_what_they_were():
    """Records are keyed by run id: these are ids written into the shipped records before the store had its own
    module, so a change to how an id is computed shows here, not as a chapter that retrains its grid."""
    assert store.run_id(grids.runs("extrapolation")["RoPE/0"]) == "a7c1e244aca98d81"
    assert store.run_id(grids.runs("context_extension")["YaRN/4/40/1"]) == "f7df58e25ad50122"
    assert store.run_id(grids.runs("length_generalisation")["copy/NoPE/1"]) == "97223bc3905bcc15"


def test_grid_is_recorded_reloaded_and_reproduced_exactly(tiny_grid, tmp_path, monkeypatch):
    first = store.run_grid("tiny", save=True)
    saved = json.loads((tmp_path / "tiny.json").read_text())
    assert list(saved["runs"]) == list(tiny_grid) and store.stale_labels("tiny") == []
    assert {"git_sha", "torch", "seed"} <= set(first["copy/RoPE"]["provenance"])
    again = store.run_grid("tiny")          # nothing to train: read back as written
    assert again == json.loads(json.dumps(first))
    prefix = store.reproduce_prefix("tiny", "copy/NoPE", steps=8)      # the whole run, retrained
    assert prefix["identical"] and prefix["abs_diff"] == 0.0
    assert prefix["recorded"] == first["copy/NoPE"]["final"]["train_loss"]
    changed = dict(tiny_grid, **{"copy/NoPE": replace(tiny_grid["copy/NoPE"], steps=9)})
    monkeypatch.setitem(grids.GRIDS, "tiny", lambda: changed)
    assert store.stale_labels("tiny") == ["copy/NoPE"]
    with pytest.raises(ValueError, match="no record for its current configuration"):
        store.reproduce_prefix("tiny", "copy/NoPE", steps=8)


def test_flat_metrics_flattens_nested_metrics_and_drops_curves():
    final = {"train_loss": 1.0, "accuracy_by_size": {"4": 0.5}, "val_bpb_by_position": [1.0, 2.0]}
    assert store.flat_metrics(final) == {"train_loss": 1.0, "accuracy_by_size/4": 0.5}


def test_summary_keeps_every_evaluation_and_thins_the_rest():
    results = train(tiny(steps=130, eval_every=50))
    kept = store.summarise(results)["history"]
    # 130 steps / 60 points: the smallest round stride that keeps at most 60 is 5; step 1 and the evaluations stay.
    assert [h["step"] for h in kept] == [1, *range(5, 131, 5)]
    assert all(h == results["history"][h["step"] - 1] for h in kept)
    assert [h["step"] for h in kept if "accuracy_by_size" in h] == [50, 100, 130]
    assert kept[-1] == results["history"][-1]


def test_bad_grid_arguments_are_named(tiny_grid):
    with pytest.raises(ValueError, match="grid"):
        store.run_grid("nope")
    with pytest.raises(ValueError, match="jobs"):
        store.run_grid("tiny", jobs=0)
    with pytest.raises(ValueError, match="label 'copy/ALiBi' is not a run of the grid"):
        store.reproduce_prefix("tiny", "copy/ALiBi", steps=1)


@pytest.mark.parametrize("grid", sorted(name for name in grids.GRIDS if "." not in name))
def test_every_shipped_record_matches_its_grid(grid):
    """A chapter reads these records; a grid changed without re-running the sweep would make it train for an
    hour (or, worse, show numbers of another configuration), so CI stops here first."""
    runs = grids.runs(grid)
    assert store.stale_labels(grid) == [], f"run `python -m posbook.experiments sweep {grid}`"
    record = store.load_record(grid)
    for label, run in runs.items():
        assert record[label]["run"]["seed"] == run.seed and record[label]["run"]["task"] == run.task


@pytest.mark.parametrize("grid", sorted(grid for grid in grids.GRID_WEIGHTS if "." not in grid))
def test_every_shipped_weights_file_is_of_its_run_s_current_configuration(grid):
    for label in sorted(grids.GRID_WEIGHTS[grid]):
        model, run = store.load_weights(grid, label)
        assert not model.training and store.run_id(run) == store.run_id(grids.runs(grid)[label])


def test_shipped_weights_and_a_retrained_prefix_match_the_record(tiny_grid, tmp_path, monkeypatch):
    runs = {"copy/RoPE": tiny(steps=12, eval_every=12), "copy/NoPE": tiny(model=dict(TINY, pattern="N"))}
    monkeypatch.setitem(grids.GRIDS, "tiny", lambda: runs)
    monkeypatch.setitem(grids.GRID_WEIGHTS, "tiny", {"copy/RoPE"})
    assert store.stale_labels("tiny") == ["copy/RoPE", "copy/NoPE"]
    recorded = store.run_grid("tiny", save=True)
    assert store.weights_path("tiny", "copy/RoPE") == tmp_path / "weights" / "tiny" / "copy__RoPE.pt"
    model, run = store.load_weights("tiny", "copy/RoPE")
    assert not model.training and store.run_id(run) == store.run_id(runs["copy/RoPE"])
    # The shipped weights are the recorded model: evaluated again, they give its recorded accuracy.
    assert evaluate(model, run.resolved(), None, torch.device("cpu"))["accuracy_by_size"] == \
        recorded["copy/RoPE"]["final"]["accuracy_by_size"]
    assert store.reevaluate(model, run, recorded["copy/RoPE"]["final"]) == 0.0 and not model.training
    other = store.load_record("tiny")["copy/NoPE"]["final"]          # another model's record is told apart
    assert store.reevaluate(model, run, {**other, "accuracy_by_size": {"2": -1.0}}) >= 1.0
    with pytest.raises(ValueError, match="recorded holds none of the metrics"):
        store.reevaluate(model, run, {"train_loss": 0.1})
    with pytest.raises(ValueError, match="ships no weights"):
        store.load_weights("tiny", "copy/NoPE")
    # The first 10 of 12 steps, on the 12-step schedule, are the recorded run's first 10 steps.
    prefix = store.reproduce_prefix("tiny", "copy/RoPE", steps=10)
    assert prefix["identical"] and prefix["abs_diff"] == 0.0
    with pytest.raises(ValueError, match="steps=13 is not a step the record"):
        store.reproduce_prefix("tiny", "copy/RoPE", steps=13)
    # Weights of another configuration than the grid's current one are refused: probed, they would pass for the run.
    monkeypatch.setitem(grids.GRIDS, "tiny", lambda: {**runs, "copy/RoPE": replace(runs["copy/RoPE"], seed=3)})
    with pytest.raises(ValueError, match="trained for another configuration"):
        store.load_weights("tiny", "copy/RoPE")
    monkeypatch.setitem(grids.GRIDS, "tiny", lambda: runs)
    store.weights_path("tiny", "copy/RoPE").unlink()
    assert store.stale_labels("tiny") == ["copy/RoPE"]       # a lost weights file is retrained


def test_a_run_can_start_from_shipped_weights_and_only_evaluate(tmp_path, monkeypatch):
    text = dict(task="text", preset="cpu", model=dict(TINY, pattern="R"), steps=6, batch_size=4, seq_len=16,
                warmup=1, eval_every=6, eval_batches=1, corpus_bytes=2_000_000, eval_seq_lens=[16, 32, 64],
                eval_position_bin=8, eval_stride=8)
    source = {"RoPE/0": TrainConfig(**text)}
    monkeypatch.setattr(store, "RECORDS", tmp_path)
    monkeypatch.setitem(grids.GRIDS, "tiny", lambda: source)
    monkeypatch.setitem(grids.GRID_WEIGHTS, "tiny", {"RoPE/0"})
    recorded = store.run_grid("tiny", save=True)["RoPE/0"]["final"]
    again = TrainConfig(**{**text, "steps": 0, "warmup": 0, "init_from": "tiny:RoPE/0"})
    weights = store.initial_weights(again)
    assert store.initial_weights(source["RoPE/0"]) is None            # a run without init_from starts at random
    final = train(again, weights)["final"]
    # No step taken, the same weights and the same evaluation windows: the recorded numbers.
    assert final == {k: v for k, v in recorded.items() if k != "train_loss"}
    model, run = store.load_weights("tiny", "RoPE/0")
    val = load_corpus(run.resolved().corpus_bytes).val
    assert store.reevaluate(model, run, recorded, val) == 0.0     # non-overlapping metrics, sliding left out
    with pytest.raises(ValueError, match="val .* is needed to re-evaluate a text run"):
        store.reevaluate(model, run, recorded)
    assert store.run_id(again) != store.run_id(replace(again, init_from=None, steps=1))
    with pytest.raises(ValueError, match="init_from must be 'grid:label'"):
        replace(again, init_from="RoPE/0").resolved()
    with pytest.raises(ValueError, match="steps"):
        replace(again, init_from=None).resolved()            # zero steps only for a run that starts trained
    with pytest.raises(ValueError, match="init_from label 'RoPE/9' is not a run of grid 'tiny'"):
        store.run_id(replace(again, init_from="tiny:RoPE/9"))
    with pytest.raises(ValueError, match="init_from grid must be one of"):
        store.initial_weights(replace(again, init_from="nowhere:RoPE/0"))


def test_a_gpu_record_where_one_ships_matches_its_grid():
    """GPU-scale records are optional (pages show them when present, whole or in part, and say how many runs they
    hold); every run in one that ships must be of the current configuration of its grid."""
    # gpu_records keeps the recorded runs whose ids are current: every recorded one, or none when no record ships.
    # (The GPU-scale weights do not ship, so stale_labels, which also asks for them, would list the weighted runs.)
    for grid in sorted(name for name in grids.GRIDS if "." in name):
        recorded = set(store.load_record(grid)) if store.record_path(grid).exists() else set()
        assert recorded <= set(grids.runs(grid)), grid
        assert set(store.gpu_records(grid.partition(".")[0])) == recorded, grid


def test_gpu_records_keep_only_current_runs(tmp_path, monkeypatch):
    colab = grids.runs("extrapolation.colab")
    monkeypatch.setattr(store, "RECORDS", tmp_path)
    assert store.gpu_records("extrapolation") == {}
    record = {"RoPE/0": {"id": store.run_id(colab["RoPE/0"]), "final": {"val_bpb": 1.5}},
              "NoPE/0": {"id": "an older configuration", "final": {"val_bpb": 1.6}}}
    store._write_record("extrapolation.colab", record, order=list(record))
    assert list(store.gpu_records("extrapolation")) == ["RoPE/0"]


def test_a_cpu_grid_run_trains_on_the_cpu_and_its_device_is_not_part_of_its_id():
    run = grids.runs("extrapolation")["RoPE/0"]
    assert store._placed(run).device == "cpu" and store.run_id(store._placed(run)) == store.run_id(run)
    colab = grids.runs("extrapolation.colab")["RoPE/0"]
    assert store._placed(colab).device is None
