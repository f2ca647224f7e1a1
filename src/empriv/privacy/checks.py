"""Input checks shared by the privacy functions: each failure is one ``ValueError`` line naming the
argument, the value and what is allowed. (An accountant's name is checked by the registry:
:func:`empriv.privacy.accountants.check_accountant_name`; this module imports nothing of empriv.)"""

from __future__ import annotations

import math
import numbers


def _as_real(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    value = float(value)
    if math.isnan(value):
        raise ValueError(f"{name} must be a number, got nan")
    return value


def _check_positive(name: str, value) -> float:
    v = _as_real(name, value)
    if not (v > 0) or math.isinf(v):
        raise ValueError(f"{name} must be > 0 and finite, got {value!r}")
    return v


def _check_epsilon(value, name: str = "epsilon") -> float:
    return _check_positive(name, value)


def _check_delta(value, name: str = "delta") -> float:
    v = _as_real(name, value)
    if not (0 < v < 1):
        raise ValueError(f"{name} must satisfy 0 < {name} < 1, got {value!r}")
    return v


def _check_sample_rate(value, name: str = "sample_rate") -> float:
    v = _as_real(name, value)
    if not (0 < v <= 1):
        raise ValueError(f"{name} must satisfy 0 < {name} <= 1, got {value!r}")
    return v


def _check_steps(value, name: str = "steps") -> int:
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    if isinstance(value, numbers.Integral):
        v = int(value)
    elif isinstance(value, numbers.Real) and float(value).is_integer():
        v = int(value)
    else:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    if v < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return v


def _check_sigma(value, name: str = "noise_multiplier") -> float:
    return _check_positive(name, value)


def _check_tolerance(value) -> float:
    v = _as_real("tolerance", value)
    if not (0 < v < 0.5):
        raise ValueError(f"tolerance must satisfy 0 < tolerance < 0.5, got {value!r}")
    return v
