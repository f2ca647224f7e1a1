"""Argument checks shared by the library packages, each raising the project's one-line ``ValueError`` that names the
argument, the value and what is allowed. A leaf: it imports nothing of empriv, so every layer (data, secrets, …) may
use it."""

from __future__ import annotations

import numbers


def require_int(name: str, value, minimum: int, *, meaning: str = "") -> int:
    """``value`` as an ``int`` when it is an integer (Python or numpy, not a bool) ``>= minimum``; else
    ``ValueError("<name> must be an integer >= <minimum>[ (<meaning>)], got <value!r>")``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        said = f" ({meaning})" if meaning else ""
        raise ValueError(f"{name} must be an integer >= {minimum}{said}, got {value!r}")
    return int(value)
