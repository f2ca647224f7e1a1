"""The uncertainty of every DVC metric, and the digits it is written to.

One rule set serves two purposes: :func:`round_metrics` writes each metric to the digits its uncertainty supports
(so that float drift between machines — CPU kernels, thread counts — does not reach the metrics files), and
``empriv diff`` (:mod:`empriv.diff`) uses the same :func:`uncertainty` to tell a real change from noise.

The uncertainty of a numeric leaf is found from the leaf's name and its siblings (the keys of the same JSON object):

- ``<key>_se`` beside it (a regression coefficient: ``coef_log_b_se``, its OLS standard error);
- ``mean`` of a score: ``se_seed`` (the seed noise of the mean over configurations: the part that differs when the
  same configurations are run again), else ``se`` (over configurations: one seed per configuration);
- ``worst`` (one configuration's mean): ``se_seed · √n``, the seed standard error of one configuration, else ``std``;
- a standard deviation or standard error (``std``, ``se``, ``se_seed``, ``std_configs``, ``std_seeds``, ``…_se``):
  ``value / √(2(n − 1))``, with ``n`` or ``n_configs`` beside it (the normal approximation); for ``se_seed`` the
  seed stds' degrees of freedom ``n_runs − n`` replace ``n − 1``;
- a ratio of two standard deviations (``config_seed_ratio…``): ``value · √(1/(n − 1))``;
- a Spearman ρ (``rho_…``): ``(1 − ρ²)·√(1.06/(n − 3))``, with ``n`` beside it (Fieller's approximation);
- anything else (ε, counts, heuristic accuracies, risks, R², p-values, the base utility): no uncertainty.

Writing: a value with an uncertainty ``u > 0`` is rounded to the decimal of the second significant digit of ``u``
(``mean`` 4.98977 with ``se_seed`` 0.63 → 4.99), so a change in the last written digit is at most ``u/10``.
A value without one (or with ``u = 0``) keeps :data:`SIGNIFICANT_DIGITS` significant digits. Integers and
``epsilon`` are written exactly. Exact values stay in ``records/``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

SIGNIFICANT_DIGITS = 4  # values without an uncertainty: float drift (5th digit) stays below the written precision
UNCERTAINTY_DIGITS = 2  # a value with an uncertainty: to the second significant digit of that uncertainty
SPREAD_LEAVES = ("std", "se", "se_seed", "std_configs", "std_seeds")
EXACT_LEAVES = ("epsilon",)


def is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _count(siblings: Mapping[str, Any]) -> float | None:
    for name in ("n", "n_configs"):
        v = siblings.get(name)
        if is_number(v):
            return float(v)
    return None


def uncertainty(siblings: Mapping[str, Any], leaf: str) -> float | None:
    """The standard uncertainty of ``siblings[leaf]`` (module docstring), or None where none is defined."""
    v = siblings.get(leaf)
    if not is_number(v):
        return None
    own = siblings.get(f"{leaf}_se")
    if is_number(own):
        return abs(float(own))
    n = _count(siblings)
    if leaf == "mean":
        for name in ("se_seed", "se"):
            if is_number(siblings.get(name)):
                return abs(float(siblings[name]))
        return None
    if leaf == "worst":
        se_seed, std = siblings.get("se_seed"), siblings.get("std")
        if is_number(se_seed) and n and n > 0:
            return abs(float(se_seed)) * math.sqrt(n)
        return abs(float(std)) if is_number(std) else None
    if leaf == "se_seed" and is_number(siblings.get("n_runs")) and n:
        df = float(siblings["n_runs"]) - n  # the seed stds' degrees of freedom: Σ (k_i − 1)
        return abs(float(v)) / math.sqrt(2 * df) if df >= 1 else None
    if leaf in SPREAD_LEAVES or leaf.endswith("_se"):
        return abs(float(v)) / math.sqrt(2 * (n - 1)) if n and n >= 2 else None
    if leaf.startswith("config_seed_ratio"):
        return abs(float(v)) * math.sqrt(1 / (n - 1)) if n and n >= 2 else None
    if leaf.startswith("rho_"):
        return (1 - float(v) ** 2) * math.sqrt(1.06 / (n - 3)) if n and n > 3 else None
    return None


def round_value(value: float, u: float | None) -> float:
    """``value`` to the second significant digit of ``u``, or to :data:`SIGNIFICANT_DIGITS` without one."""
    if value == 0 or not math.isfinite(value):
        return value
    if u is not None and u > 0 and math.isfinite(u):
        decimals = UNCERTAINTY_DIGITS - 1 - math.floor(math.log10(u))
    else:
        decimals = SIGNIFICANT_DIGITS - 1 - math.floor(math.log10(abs(value)))
    out = round(value, decimals)
    return out + 0.0  # no -0.0


def round_metrics(obj: Any) -> Any:
    """A copy of a metrics object (nested dicts of numbers and nulls) with every float written to the digits its
    uncertainty supports; the uncertainties are those of the exact values."""
    if not isinstance(obj, Mapping):
        return obj
    out = {}
    for key, v in obj.items():
        if isinstance(v, Mapping):
            out[key] = round_metrics(v)
        elif isinstance(v, float) and key not in EXACT_LEAVES and math.isfinite(v):
            out[key] = round_value(v, uncertainty(obj, key))
        else:
            out[key] = v
    return out
