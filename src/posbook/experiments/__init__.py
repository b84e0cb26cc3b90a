"""Experiments: a small GPT whose layers follow a pattern of position schemes, algorithmic length-generalisation
tasks, a byte-level corpus from the Python standard library, and a resumable trainer (CPU, one GPU, or torchrun);
the grids of runs behind the experiment chapters and the store that records them.

Run ``python -m posbook.experiments --help``; the book's page "Running the experiments" walks through it.
"""

from .checkpoints import load_model
from .config import PRESETS, TASK_NAMES, TrainConfig, choose_preset
from .evaluation import evaluate
from .model import ABSOLUTE_POSITIONS, LAYER_CODES, GPT, GPTConfig, LayerKind
from .toy import fit
from .trainer import train

__all__ = ["ABSOLUTE_POSITIONS", "GPT", "GPTConfig", "LAYER_CODES", "LayerKind", "PRESETS", "TASK_NAMES", "TrainConfig",
           "choose_preset", "evaluate", "fit", "load_model", "train"]
