"""Recorded grids of runs (posbook.experiments.sweep), the task curriculum, and bits per byte beyond the
training length."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

from posbook.experiments import TrainConfig, sweep, tasks, train
from posbook.experiments.corpus import load_corpus
from posbook.experiments.trainer import evaluate, largest_train_size

TINY = dict(n_layer=2, n_embd=32, n_head=4, pattern="RN")


def tiny(**overrides) -> TrainConfig:
    fields = dict(task="copy", preset="cpu", model=dict(TINY), steps=8, batch_size=8, train_max_size=4,
                  eval_sizes=[2, 8], eval_every=8, eval_batches=1, warmup=2)
    fields.update(overrides)
    return TrainConfig(**fields)


@pytest.fixture
def tiny_grid(tmp_path, monkeypatch):
    """A two-run grid recorded under tmp_path instead of the package."""
    runs = {"copy/RoPE": tiny(), "copy/NoPE": tiny(model=dict(TINY, pattern="N"))}
    monkeypatch.setattr(sweep, "RECORDS", tmp_path)
    monkeypatch.setitem(sweep.GRIDS, "tiny", lambda: runs)
    return runs


def test_run_id_depends_on_what_changes_results_only():
    base = tiny()
    assert sweep.run_id(base) == sweep.run_id(replace(base, out_dir="/somewhere", progress=True, checkpoint_every=3))
    assert sweep.run_id(base) != sweep.run_id(replace(base, seed=1))
    assert sweep.run_id(base) != sweep.run_id(replace(base, model=dict(TINY, pattern="N")))
    # A field left to the preset and the same value given explicitly are the same run.
    assert sweep.run_id(replace(base, lr=None)) == sweep.run_id(replace(base, lr=3e-3))


def test_grid_is_recorded_reloaded_and_reproduced_exactly(tiny_grid, tmp_path):
    first = sweep.run_grid("tiny", tiny_grid, save=True)
    saved = json.loads((tmp_path / "tiny.json").read_text())
    assert list(saved["runs"]) == list(tiny_grid) and sweep.stale_labels("tiny", tiny_grid) == []
    assert {"git_sha", "torch", "seed"} <= set(first["copy/RoPE"]["provenance"])
    again = sweep.run_grid("tiny", tiny_grid)          # nothing to train: read back as written
    assert again == json.loads(json.dumps(first))
    prefix = sweep.reproduce_prefix("tiny", tiny_grid, "copy/NoPE", steps=8)      # the whole run, retrained
    assert prefix["identical"] and prefix["abs_diff"] == 0.0
    assert prefix["recorded"] == first["copy/NoPE"]["final"]["train_loss"]
    changed = dict(tiny_grid, **{"copy/NoPE": replace(tiny_grid["copy/NoPE"], steps=9)})
    assert sweep.stale_labels("tiny", changed) == ["copy/NoPE"]
    with pytest.raises(ValueError, match="no record for its current configuration"):
        sweep.reproduce_prefix("tiny", changed, "copy/NoPE", steps=8)


def test_flat_metrics_flattens_nested_metrics_and_drops_curves():
    final = {"train_loss": 1.0, "accuracy_by_size": {"4": 0.5}, "val_bpb_by_position": [1.0, 2.0]}
    assert sweep.flat_metrics(final) == {"train_loss": 1.0, "accuracy_by_size/4": 0.5}


def test_summary_keeps_every_evaluation_and_thins_the_rest():
    results = train(tiny(steps=130, eval_every=50))
    kept = sweep.summarise(results)["history"]
    # 130 steps / 60 points: the smallest round stride that keeps at most 60 is 5; step 1 and the evaluations stay.
    assert [h["step"] for h in kept] == [1, *range(5, 131, 5)]
    assert all(h == results["history"][h["step"] - 1] for h in kept)
    assert [h["step"] for h in kept if "accuracy_by_size" in h] == [50, 100, 130]
    assert kept[-1] == results["history"][-1]


def test_bad_grid_arguments_are_named(tiny_grid):
    with pytest.raises(ValueError, match="grid"):
        sweep.run_grid("nope", tiny_grid)
    with pytest.raises(ValueError, match="jobs"):
        sweep.run_grid("tiny", tiny_grid, jobs=0)
    with pytest.raises(ValueError, match="runs must be a non-empty dict"):
        sweep.run_grid("tiny", {})
    with pytest.raises(ValueError, match="label 'copy/ALiBi' is not a run of the grid"):
        sweep.reproduce_prefix("tiny", tiny_grid, "copy/ALiBi", steps=1)


@pytest.mark.parametrize("grid", sorted(name for name in sweep.GRIDS if "." not in name))
def test_every_shipped_record_matches_its_grid(grid):
    """A chapter reads these records; a grid changed without re-running the sweep would make it train for an
    hour (or, worse, show numbers of another configuration), so CI stops here first."""
    runs = sweep.GRIDS[grid]()
    assert sweep.stale_labels(grid, runs) == [], f"run `python -m posbook.experiments sweep {grid}`"
    record = sweep.load_record(grid)
    for label, run in runs.items():
        assert record[label]["run"]["seed"] == run.seed and record[label]["run"]["task"] == run.task


def test_curriculum_grows_the_largest_size_linearly():
    run = tiny(train_max_size=8, curriculum_steps=70, steps=100).resolved()
    sizes = [largest_train_size(run, step) for step in range(100)]
    assert sizes[0] == 1 and sizes[69] == 7 and sizes[70:] == [8] * 30
    assert all(b - a in (0, 1) for a, b in zip(sizes, sizes[1:]))
    assert largest_train_size(tiny(train_max_size=8).resolved(), 0) == 8      # no curriculum: L from step 0
    with pytest.raises(ValueError, match="curriculum_steps"):
        tiny(curriculum_steps=-1).resolved()


def test_text_runs_report_bits_per_byte_at_longer_lengths():
    run = TrainConfig(task="text", preset="cpu", model=dict(TINY), steps=2, batch_size=2, seq_len=16, eval_every=2,
                      eval_batches=1, corpus_bytes=200_000, eval_seq_lens=[16, 64])
    final = train(run)["final"]
    assert set(final["val_bpb_by_len"]) == {"16", "64"}
    assert final["val_bpb_by_len"]["16"] == final["val_bpb"]
    with pytest.raises(ValueError, match="eval_seq_lens"):
        replace(run, eval_seq_lens=[0]).resolved()


def test_show_prints_a_recorded_grid_as_a_table_and_as_json(capsys):
    from posbook.experiments.__main__ import main
    record = sweep.load_record("long_context")
    assert main(["show", "long_context", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {label: entry["final"] for label, entry in record.items()}
    assert main(["show", "long_context"]) == 0
    lines = capsys.readouterr().out.splitlines()
    # The plain metrics first, a row per label in the record's order; then accuracy by size, paged to fit 100 columns.
    assert lines[0].split() == ["label", "train_loss"]
    assert [line.split("  ")[0].strip() for line in lines[1:1 + len(record)]] == list(record)
    last_page = lines[lines.index("accuracy_by_size (continued):") + 1:]
    assert last_page[0].split()[-1] == "64"
    assert float(last_page[1].split()[-1]) == pytest.approx(record["RoPE/0"]["final"]["accuracy_by_size"]["64"],
                                                            abs=5e-5)


def test_shipped_weights_and_a_retrained_prefix_match_the_record(tiny_grid, tmp_path, monkeypatch):
    runs = {"copy/RoPE": tiny(steps=12, eval_every=12), "copy/NoPE": tiny(model=dict(TINY, pattern="N"))}
    monkeypatch.setitem(sweep.GRIDS, "tiny", lambda: runs)
    monkeypatch.setitem(sweep.GRID_WEIGHTS, "tiny", {"copy/RoPE"})
    assert sweep.stale_labels("tiny", runs) == ["copy/RoPE", "copy/NoPE"]
    recorded = sweep.run_grid("tiny", runs, save=True)
    assert sweep.weights_path("tiny", "copy/RoPE") == tmp_path / "weights" / "tiny" / "copy__RoPE.pt"
    model, run = sweep.load_weights("tiny", "copy/RoPE", runs)
    assert not model.training and sweep.run_id(run) == sweep.run_id(runs["copy/RoPE"])
    # The shipped weights are the recorded model: evaluated again, they give its recorded accuracy.
    assert evaluate(model, run.resolved(), None, torch.device("cpu"))["accuracy_by_size"] == \
        recorded["copy/RoPE"]["final"]["accuracy_by_size"]
    assert sweep.reevaluate(model, run, recorded["copy/RoPE"]["final"]) == 0.0 and not model.training
    other = sweep.load_record("tiny")["copy/NoPE"]["final"]          # another model's record is told apart
    assert sweep.reevaluate(model, run, {**other, "accuracy_by_size": {"2": -1.0}}) >= 1.0
    with pytest.raises(ValueError, match="recorded holds none of the metrics"):
        sweep.reevaluate(model, run, {"train_loss": 0.1})
    with pytest.raises(ValueError, match="ships no weights"):
        sweep.load_weights("tiny", "copy/NoPE")
    with pytest.raises(ValueError, match="trained for another configuration"):
        sweep.load_weights("tiny", "copy/RoPE", {"copy/RoPE": replace(runs["copy/RoPE"], seed=3)})
    # The first 10 of 12 steps, on the 12-step schedule, are the recorded run's first 10 steps.
    prefix = sweep.reproduce_prefix("tiny", runs, "copy/RoPE", steps=10)
    assert prefix["identical"] and prefix["abs_diff"] == 0.0
    with pytest.raises(ValueError, match="steps=13 is not a step the record"):
        sweep.reproduce_prefix("tiny", runs, "copy/RoPE", steps=13)
    sweep.weights_path("tiny", "copy/RoPE").unlink()
    assert sweep.stale_labels("tiny", runs) == ["copy/RoPE"]       # a lost weights file is retrained


def test_a_run_can_start_from_shipped_weights_and_only_evaluate(tmp_path, monkeypatch):
    text = dict(task="text", preset="cpu", model=dict(TINY, pattern="R"), steps=6, batch_size=4, seq_len=16,
                warmup=1, eval_every=6, eval_batches=1, corpus_bytes=2_000_000, eval_seq_lens=[16, 32, 64],
                eval_position_bin=8, eval_stride=8)
    source = {"RoPE/0": TrainConfig(**text)}
    monkeypatch.setattr(sweep, "RECORDS", tmp_path)
    monkeypatch.setitem(sweep.GRIDS, "tiny", lambda: source)
    monkeypatch.setitem(sweep.GRID_WEIGHTS, "tiny", {"RoPE/0"})
    recorded = sweep.run_grid("tiny", source, save=True)["RoPE/0"]["final"]
    again = TrainConfig(**{**text, "steps": 0, "warmup": 0, "init_from": "tiny:RoPE/0"})
    final = train(again)["final"]
    # No step taken, the same weights and the same evaluation windows: the recorded numbers.
    assert final == {k: v for k, v in recorded.items() if k != "train_loss"}
    model, run = sweep.load_weights("tiny", "RoPE/0", source)
    val = load_corpus(run.resolved().corpus_bytes).val
    assert sweep.reevaluate(model, run, recorded, val) == 0.0     # non-overlapping metrics, sliding left out
    with pytest.raises(ValueError, match="val .* is needed to re-evaluate a text run"):
        sweep.reevaluate(model, run, recorded)
    assert sweep.run_id(again) != sweep.run_id(replace(again, init_from=None, steps=1))
    with pytest.raises(ValueError, match="init_from must be 'grid:label'"):
        replace(again, init_from="RoPE/0").resolved()
    with pytest.raises(ValueError, match="steps"):
        replace(again, init_from=None).resolved()            # zero steps only for a run that starts trained
    with pytest.raises(ValueError, match="init_from label 'RoPE/9' is not a run of grid 'tiny'"):
        sweep.run_id(replace(again, init_from="tiny:RoPE/9"))


def test_passkey_extension_stretches_the_recorded_rope_retrievers():
    runs = sweep.passkey_extension()
    source = sweep.long_context()["RoPE/1"]
    assert sweep.PASSKEY_TRAINED_LENGTH == tasks.sequence_length("passkey", source.train_max_size)
    free, tuned = runs["YaRN/4/0/1"], runs[f"YaRN/4/{sweep.PASSKEY_FINETUNE_STEPS}/1"]
    assert free.init_from == tuned.init_from == "long_context:RoPE/1"
    assert free.steps == 0 and free.eval_sizes == source.eval_sizes
    assert free.model["rope"]["rope_scaling"] == {"rope_type": "yarn", "factor": 4.0,
                                                  "original_max_position_embeddings": sweep.PASSKEY_TRAINED_LENGTH}
    assert runs["none/1/0/1"].model.get("rope") is None
    resolved = tuned.resolved()
    assert resolved.train_max_size == max(source.eval_sizes)      # fine-tuned on the haystacks it is tested on
    assert resolved.steps / source.resolved().steps == 0.05
    assert {label.split("/")[0] for label in runs if label.split("/")[2] != "0"} == set(sweep.FINETUNED_METHODS)


@pytest.mark.parametrize("grid", sorted(name for name in sweep.GRIDS if "." in name))
def test_a_gpu_record_where_one_ships_matches_its_grid(grid):
    """GPU-scale records are optional (pages show them when present); one that ships must be of the current runs."""
    # gpu_records keeps the recorded runs whose ids are current: all of them, or none when no record ships. (The
    # GPU-scale weights do not ship, so stale_labels, which also asks for them, would list the weighted runs.)
    expected = set(sweep.GRIDS[grid]()) if sweep.record_path(grid).exists() else set()
    assert set(sweep.gpu_records(grid.partition(".")[0])) == expected


def test_grid_names_by_preset_and_gpu_records_keep_only_current_runs(tmp_path, monkeypatch):
    assert sweep.grid_name("extrapolation") == "extrapolation"
    assert sweep.grid_name("extrapolation", "colab") == "extrapolation.colab"
    with pytest.raises(ValueError, match="grid 'long_context' has no colab version; grids with one: "
                                         r"\['context_extension', 'extrapolation'\]"):
        sweep.grid_name("long_context", "colab")
    with pytest.raises(ValueError, match="^preset must be one of"):
        sweep.grid_name("extrapolation", "tpu")
    with pytest.raises(ValueError, match="^grid must be one of"):
        sweep.grid_name("extrapolation.colab")
    # The GPU scale: the colab preset's model at T = 256, read to 16T; the CPU grid's ids are what they were.
    colab = sweep.GRIDS["extrapolation.colab"]()
    run = colab["iRoPE/0"].resolved()
    assert (run.preset, run.seq_len, max(run.eval_seq_lens), run.model["window"]) == ("colab", 256, 4096, 64)
    assert sweep.GRIDS["context_extension.colab"]()["YaRN/4/0/0"].init_from == "extrapolation.colab:RoPE/0"
    monkeypatch.setattr(sweep, "RECORDS", tmp_path)
    assert sweep.gpu_records("extrapolation") == {}
    record = {"RoPE/0": {"id": sweep.run_id(colab["RoPE/0"]), "final": {"val_bpb": 1.5}},
              "NoPE/0": {"id": "an older configuration", "final": {"val_bpb": 1.6}}}
    sweep._write_record("extrapolation.colab", record, order=list(record))
    assert list(sweep.gpu_records("extrapolation")) == ["RoPE/0"]


def test_a_cpu_grid_run_trains_on_the_cpu_and_its_device_is_not_part_of_its_id():
    run = sweep.GRIDS["extrapolation"]()["RoPE/0"]
    assert sweep._placed(run).device == "cpu" and sweep.run_id(sweep._placed(run)) == sweep.run_id(run)
    colab = sweep.GRIDS["extrapolation.colab"]()["RoPE/0"]
    assert sweep._placed(colab).device is None
