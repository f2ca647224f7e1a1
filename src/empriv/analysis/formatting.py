"""How the analysis prints a number, shared by the figures' labels and the HTML report's tables."""

from __future__ import annotations

import math


def format_value(x, digits: int = 3) -> str:
    """``x`` as the report shows it: n/a for None, NaN/inf spelled out, ``digits`` decimals or scientific
    notation for very small or large magnitudes; strings pass through."""
    if x is None:
        return "n/a"
    if isinstance(x, str):
        return x
    if isinstance(x, float) and math.isnan(x):
        return "NaN"
    if isinstance(x, float) and math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if isinstance(x, float):
        if x != 0 and (abs(x) < 10 ** -digits or abs(x) >= 10 ** 6):
            return f"{x:.{digits - 1}e}"
        return f"{x:.{digits}f}"
    return str(x)
