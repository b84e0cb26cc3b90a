"""Context extension of a trained RoPE model: the rope configs of chapter 5's methods, by the names the book uses.

Each method is the rope dict that :func:`posbook.scaling.rope_parameters` reads (Hugging Face's form), built from the
model's own ``rope_theta`` and ``head_dim``, the extension ``factor`` and the length the model was trained at.
``GPT.with_rope`` (or ``load_model(..., rope=...)``) puts it on trained weights.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import _checks
from .model import GPTConfig

# Method → the rope_scaling dict for (factor, training length); None: the rotation the model was trained with.
EXTENSION_METHODS: dict[str, Callable[[float, int], dict[str, Any] | None]] = {
    "none": lambda factor, trained: None,
    # Position interpolation (Chen et al. 2023): every position divided by the factor.
    "PI": lambda factor, trained: {"rope_type": "linear", "factor": factor},
    # NTK-aware base change (bloc97 2023): the slowest plane interpolated by the factor, the fastest untouched.
    "NTK": lambda factor, trained: {"rope_type": "ntk", "factor": factor},
    # Dynamic NTK (emozilla 2023): the NTK base change for the length in hand, none up to the training length.
    "dynamic": lambda factor, trained: {"rope_type": "dynamic", "factor": factor},
    # NTK-by-parts (bloc97; Peng et al. 2023 §3.2): interpolate only planes with few turns in the training length.
    "by-parts": lambda factor, trained: {"rope_type": "ntk_by_parts", "factor": factor,
                                         "original_max_position_embeddings": trained},
    # YaRN (Peng et al. 2023): by-parts plus the attention temperature 0.1 ln(factor) + 1 on q and k.
    "YaRN": lambda factor, trained: {"rope_type": "yarn", "factor": factor,
                                     "original_max_position_embeddings": trained},
    "YaRN-no-factor": lambda factor, trained: {"rope_type": "yarn", "factor": factor, "attention_factor": 1.0,
                                               "original_max_position_embeddings": trained},
    # Llama 3.1's rule, with its published low/high frequency factors (1 and 4).
    "llama3": lambda factor, trained: {"rope_type": "llama3", "factor": factor, "low_freq_factor": 1.0,
                                       "high_freq_factor": 4.0, "original_max_position_embeddings": trained},
}
"""The registry of context-extension methods, name → rope_scaling dict for (factor, training length).

:meta hide-value:
"""


def extension_rope(config: GPTConfig, method: str, factor: float, trained_length: int) -> dict[str, Any] | None:
    """The rope dict (for ``GPTConfig.rope``) that stretches a model's RoPE layers by ``factor`` with
    ``method``, for a model trained on ``trained_length`` tokens; None for ``"none"``."""
    _checks.instance("config", config, GPTConfig)
    _checks.choice("method", method, EXTENSION_METHODS)
    _checks.number("factor", factor, positive=True)
    if factor < 1:
        raise ValueError(f"factor must be >= 1 (the ratio of the new context to the trained one), got {factor!r}")
    _checks.number("trained_length", trained_length, integer=True, positive=True)
    scaling = EXTENSION_METHODS[method](float(factor), trained_length)
    if scaling is None:
        return None
    rope = {"rope_theta": config.rope_theta, "head_dim": config.head_dim, "rope_scaling": scaling}
    if method == "dynamic":          # Hugging Face's dynamic rule reads the trained length here
        rope["max_position_embeddings"] = trained_length
    return rope
