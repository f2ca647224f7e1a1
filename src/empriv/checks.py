"""Argument checks shared by the library packages, and the project's one format for a bad input:
``<key>: <what> (got <value>; allowed: <allowed>)`` on one line (:func:`problem_text`; the config's
:class:`~empriv.config.errors.ParamError` writes its findings with it too). :func:`require_int` checks an integer
against its range, :func:`require_real` a finite number against its bounds; both raise ``ValueError`` with
``what`` "not an integer" / "not a number" / "not a finite number" / "out of range", as the config's own field
checks say it. A leaf: it imports nothing of empriv, so every layer (data, secrets, …) may use it."""

from __future__ import annotations

import math
import numbers
from typing import Any

NOTHING = object()  # "no value given" (None is a value)


def short_repr(value: Any, limit: int | None = None) -> str:
    """``repr(value)``, cut to ``limit`` characters (``...`` at the end). By default a string (a path, a name the
    user must find again) keeps up to 240 characters, any other value 80."""
    if limit is None:
        limit = 240 if isinstance(value, str) else 80
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def problem_text(what: str, got: Any = NOTHING, allowed: str | None = None) -> str:
    """``<what> (got <value>; allowed: <allowed>)``, each part in parentheses only when given; the caller puts the
    key before it (``<key>: …``)."""
    extra = []
    if got is not NOTHING:
        extra.append(f"got {short_repr(got)}")
    if allowed:
        extra.append(f"allowed: {allowed}")
    return what + (f" ({'; '.join(extra)})" if extra else "")


def bad_input(key: str, what: str, got: Any = NOTHING, allowed: str | None = None) -> ValueError:
    """The ``ValueError`` for a bad input: ``<key>: <what> (got <value>; allowed: <allowed>)``."""
    return ValueError(f"{key}: {problem_text(what, got, allowed)}")


def interval_text(lower: tuple[str, float] | None, upper: tuple[str, float] | None) -> str:
    """`` in [a, b)``, `` >= a``, … from the (symbol, bound) of each side: how the config and these checks word a
    range ('' without bounds)."""
    if lower and upper:
        return (f" in {'[' if lower[0] == '>=' else '('}{_number(lower[1])}, {_number(upper[1])}"
                f"{']' if upper[0] == '<=' else ')'}")
    bound = lower or upper
    return f" {bound[0]} {_number(bound[1])}" if bound else ""


def _number(x) -> str:
    return str(int(x)) if isinstance(x, numbers.Integral) else f"{x:g}"  # an integer bound never in e-notation


def require_int(key: str, value, minimum: int | None = None, maximum: int | None = None, *, meaning: str = "") -> int:
    """``value`` as an ``int`` when it is an integer (Python or numpy, not a bool) in [``minimum``, ``maximum``]
    (None: no bound on that side); else ``ValueError("<key>[ (<meaning>)]: not an integer | out of range (got
    <value>; allowed: an integer >= <minimum> | an integer in [<minimum>, <maximum>] | …)")``."""
    allowed = "an integer" + interval_text(None if minimum is None else (">=", minimum),
                                           None if maximum is None else ("<=", maximum))
    name = f"{key} ({meaning})" if meaning else key
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise bad_input(name, "not an integer", value, allowed)
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise bad_input(name, "out of range", value, allowed)
    return int(value)


def require_real(key: str, value, *, gt: float | None = None, ge: float | None = None, lt: float | None = None,
                 le: float | None = None, meaning: str = "") -> float:
    """``value`` as a ``float`` when it is a finite real number (not a bool) within the bounds given (``gt``: >,
    ``ge``: >=, ``lt``: <, ``le``: <=; at most one of each side, as pydantic's ``Field``); else ``ValueError("<key>:
    not a number | not a finite number | out of range (got <value>; allowed: a finite number in (0, 1] | …)")``."""
    lower = (">", gt) if gt is not None else (">=", ge) if ge is not None else None
    upper = ("<", lt) if lt is not None else ("<=", le) if le is not None else None
    allowed = "a finite number" + interval_text(lower, upper)
    name = f"{key} ({meaning})" if meaning else key
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise bad_input(name, "not a number", value, allowed)
    if not math.isfinite(value):
        raise bad_input(name, "not a finite number", value, allowed)
    if (lower and not (value > lower[1] if lower[0] == ">" else value >= lower[1])) or \
            (upper and not (value < upper[1] if upper[0] == "<" else value <= upper[1])):
        raise bad_input(name, "out of range", value, allowed)
    return float(value)
