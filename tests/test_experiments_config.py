"""posbook.experiments.config: what a run is. The presets fill in what a run leaves out, each task apart; every field
says what it does, for the command line that is built from them."""

from __future__ import annotations

import dataclasses

import pytest

from posbook.experiments import TrainConfig
from posbook.experiments.config import FIELD_GROUPS, PRESETS, TASK_NAMES, gpt_config, vocab_size
from posbook.experiments import tasks as tasks_lib


def test_cpu_preset_sets_each_task_apart_from_text():
    text, copy = TrainConfig(task="text", preset="cpu").resolved(), TrainConfig(task="copy", preset="cpu").resolved()
    assert text.steps == PRESETS["cpu"]["steps"] and text.model["n_embd"] == 128
    assert copy.steps == PRESETS["cpu"]["tasks"]["copy"]["steps"]
    assert copy.eval_sizes[:2 * copy.train_max_size] == list(range(1, 2 * copy.train_max_size + 1))
    addition = TrainConfig(task="addition", preset="cpu").resolved()     # the task entry may set L as well
    assert addition.train_max_size == 2 and addition.eval_sizes == [1, 2, 3, 4, 6, 8]
    assert TrainConfig(task="addition", preset="cpu", train_max_size=8).resolved().train_max_size == 8
    mine = TrainConfig(task="copy", preset="cpu", steps=7, model=dict(n_embd=32)).resolved()
    assert mine.steps == 7 and mine.model["n_embd"] == 32 and mine.model["n_layer"] == copy.model["n_layer"]


def test_every_field_says_what_it_does_and_where_it_belongs():
    for field in dataclasses.fields(TrainConfig):
        assert len(field.metadata.get("help", "")) > 10, field.name
        assert field.metadata.get("group") in FIELD_GROUPS, field.name
        assert "``" not in field.metadata["help"], field.name        # plain words: the command line prints them


def test_the_model_of_a_run_has_room_for_its_tokens_and_its_longest_sequence():
    assert vocab_size("text") == 256
    # the recorded tasks share one vocabulary; the indexed copy adds its labels after it
    assert {vocab_size(task) for task in ("copy", "copy-distinct", "reverse", "addition", "passkey",
                                          "copy-coupled", "reverse-coupled")} == {24}
    assert vocab_size("copy-indexed") == tasks_lib.LABEL + tasks_lib.N_LABELS + 1
    text = gpt_config(TrainConfig(task="text", preset="cpu", seq_len=32, eval_seq_lens=[32, 512]))
    assert (text.vocab_size, text.max_seq_len) == (256, 512)
    with pytest.raises(ValueError, match="^task must be one of"):
        vocab_size("sorting")
