"""posbook — position and numerics in transformer attention, the library behind the book's chapters.

Each mechanism lives in one module, in the order data flows through an attention layer:
:mod:`posbook.scaling` (rotary frequencies) → :mod:`posbook.rope` (rotation of q and k) → ...
:mod:`posbook.claims` checks the numbers the chapters state.
"""

from .analysis import rope_decay_bound
from .claims import ClaimError, Claims, glue
from .device import default_device
from .rope import LAYOUTS, apply_rope, half_to_interleaved, interleaved_to_half, rope_cos_sin
from .scaling import default_inv_freq

__version__ = "0.1.0"

__all__ = [
    "LAYOUTS",
    "ClaimError",
    "Claims",
    "apply_rope",
    "default_device",
    "default_inv_freq",
    "glue",
    "half_to_interleaved",
    "interleaved_to_half",
    "rope_cos_sin",
    "rope_decay_bound",
]
