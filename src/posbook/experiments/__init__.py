"""Experiments: a small GPT whose layers follow a pattern of position schemes, algorithmic length-generalisation
tasks, a byte-level corpus from the Python standard library, and a resumable trainer (CPU, one GPU, or torchrun).

Run ``python -m posbook.experiments --help``; the book's page "Running the experiments" walks through it.
"""

from .model import ABSOLUTE_POSITIONS, LAYER_CODES, GPT, GPTConfig, LayerKind
from .toy import fit
from .trainer import PRESETS, TASK_NAMES, TrainConfig, choose_preset, evaluate, load_model, train

__all__ = ["ABSOLUTE_POSITIONS", "GPT", "GPTConfig", "LAYER_CODES", "LayerKind", "PRESETS", "TASK_NAMES", "TrainConfig",
           "choose_preset", "evaluate", "fit", "load_model", "train"]
