"""posbook.experiments.grids: every grid read by name, the scales a grid comes in, and the runs that stretch a
recorded model."""

from __future__ import annotations

import pytest

from posbook.experiments import TrainConfig, grids, tasks


@pytest.mark.parametrize("grid", sorted(grids.GRIDS))
def test_a_grid_read_by_name_is_its_runs_built_afresh(grid):
    runs = grids.runs(grid)
    assert runs and all(isinstance(run, TrainConfig) for run in runs.values())
    assert runs == grids.GRIDS[grid]() and runs is not grids.runs(grid)      # a caller may change its copy


def test_an_unknown_grid_is_refused_by_name():
    with pytest.raises(ValueError, match="^grid must be one of .*; did you mean 'extrapolation'"):
        grids.runs("extrapolaton")


def test_passkey_extension_stretches_the_recorded_rope_retrievers():
    runs = grids.runs("passkey_extension")
    source = grids.runs("long_context")["RoPE/1"]
    assert grids.PASSKEY_TRAINED_LENGTH == tasks.sequence_length("passkey", source.train_max_size)
    free, tuned = runs["YaRN/4/0/1"], runs[f"YaRN/4/{grids.PASSKEY_FINETUNE_STEPS}/1"]
    assert free.init_from == tuned.init_from == "long_context:RoPE/1"
    assert free.steps == 0 and free.eval_sizes == source.eval_sizes
    assert free.model["rope"]["rope_scaling"] == {"rope_type": "yarn", "factor": 4.0,
                                                  "original_max_position_embeddings": grids.PASSKEY_TRAINED_LENGTH}
    assert runs["none/1/0/1"].model.get("rope") is None
    resolved = tuned.resolved()
    assert resolved.train_max_size == max(source.eval_sizes)      # fine-tuned on the haystacks it is tested on
    assert resolved.steps / source.resolved().steps == 0.05
    # every fine-tuned method, and DroPE recalibrated on the trained haystacks
    assert {label.split("/")[0] for label in runs if label.split("/")[2] != "0"} == {*grids.FINETUNED_METHODS, "DroPE"}


def test_grid_names_by_preset():
    assert grids.grid_name("extrapolation") == "extrapolation"
    assert grids.grid_name("extrapolation", "colab") == "extrapolation.colab"
    with pytest.raises(ValueError, match="grid 'long_context' has no colab version; grids with one: "
                                         r"\['context_extension', 'extrapolation'\]"):
        grids.grid_name("long_context", "colab")
    with pytest.raises(ValueError, match="^preset must be one of"):
        grids.grid_name("extrapolation", "tpu")
    with pytest.raises(ValueError, match="^grid must be one of"):
        grids.grid_name("extrapolation.colab")


def test_the_gpu_scale_grids_train_the_colab_model_at_four_times_the_length():
    # The GPU scale: the colab preset's model at T = 256, read to 16T; it stretches its own RoPE model.
    run = grids.runs("extrapolation.colab")["iRoPE/0"].resolved()
    assert (run.preset, run.seq_len, max(run.eval_seq_lens), run.model["window"]) == ("colab", 256, 4096, 64)
    assert grids.runs("context_extension.colab")["YaRN/4/0/0"].init_from == "extrapolation.colab:RoPE/0"


def test_every_run_that_ships_weights_is_a_run_of_its_grid():
    for grid, labels in grids.GRID_WEIGHTS.items():
        assert labels <= set(grids.runs(grid)), grid


def test_the_length_controls_change_ids_or_format_and_their_ablations_one_thing_each():
    runs = grids.runs("length_controls")
    for control, spec in grids.LENGTH_CONTROLS.items():
        for family, task in zip(("copy", "reverse"), spec["tasks"]):
            for seed in grids.SEEDS:
                run = runs[f"{family}/{control}/{seed}"].resolved()
                assert (run.task, run.seed, run.train_max_size, run.steps) == (task, seed, 8, spec["steps"])
                assert run.model == spec["model"]
    assert runs["copy/random ids/0"].resolved().random_positions >= max(
        grids.LENGTH_CONTROLS["random ids"]["eval_sizes"]) * 2 + 3       # the longest test sequence's ids
    for control, changes in grids.CONTROL_ABLATIONS.items():
        base = runs[f"copy/{control}/0"].resolved()
        for name, change in changes.items():
            run = runs[f"copy/{control} ({name})/0"].resolved()
            differs = {field for field in ("model", "steps", "random_positions", "task", "seed")
                       if getattr(run, field) != getattr(base, field)}
            assert len(differs) == 1 and differs <= {"model", "steps", "random_positions"}, (name, differs)
            if differs == {"model"}:
                assert len({k for k in run.model if run.model[k] != base.model.get(k)}) == 1, name


def test_drope_runs_drop_the_rotation_and_recalibrate_at_the_training_length():
    runs = grids.runs("context_extension")
    source = grids.runs("extrapolation")["RoPE/1"].resolved()
    for steps in (0, *grids.DROPE_STEPS):
        run = runs[f"DroPE/1/{steps}/1"].resolved()
        assert run.model == {**source.model, "pattern": "N"} and run.init_from == "extrapolation:RoPE/1"
        assert (run.seq_len, run.batch_size, run.steps) == (source.seq_len, source.batch_size, steps)
        if steps:
            assert run.lr == pytest.approx(source.lr / 10) and run.warmup == steps // 10
    passkey = grids.runs("passkey_extension")[f"DroPE/1/{grids.PASSKEY_FINETUNE_STEPS}/2"].resolved()
    assert passkey.train_max_size == grids.runs("long_context")["RoPE/2"].resolved().train_max_size
    with pytest.raises(ValueError, match="DroPE removes RoPE from an all-RoPE model"):
        grids.dropped("extrapolation", "iRoPE/0", 40)
    assert "DroPE/1/0/0" not in grids.runs("context_extension.colab")


def test_content_positions_share_chapter_17s_protocol():
    runs = grids.runs("content_positions")
    for scheme, model in grids.CONTENT_SCHEMES.items():
        assert runs[f"{scheme}/2"] == grids.extrapolation_run(model, 2)
    for scheme in grids.FLIP_FLOP_SCHEMES:
        run = runs[f"flip-flop/{scheme}/0"].resolved()
        assert run.task == "flip-flop" and run.train_max_size == 16 and run.eval_sizes == grids.FLIP_FLOP_SIZES
