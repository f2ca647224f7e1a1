"""Small statistics the analysis modules share."""

from __future__ import annotations

import math


def sample_std(vals: list[float]) -> float | None:
    """The sample standard deviation (n − 1 in the denominator) of ``vals``; ``None`` for fewer than two values, and
    exactly 0 when all are equal (not the rounding residue of their mean, ~1e-16)."""
    if len(vals) < 2:
        return None
    if max(vals) == min(vals):
        return 0.0
    m = sum(vals) / len(vals)
    return math.sqrt(sum((v - m) ** 2 for v in vals) / (len(vals) - 1))
