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
  seed stds' degrees of freedom ``n_runs − n`` replace ``n − 1``; a ``…_se`` without a count of two or more beside it
  (a configuration's ``<score>_se`` in configs.json) ``value / √2``, as if from two seeds (the fewest: an upper bound);
- a ratio of two standard deviations (``config_seed_ratio…``): ``value · √(1/(n − 1))``;
- a Spearman ρ (``rho_…``): ``(1 − ρ²)·√(1.06/(n − 3))``, with ``n`` beside it (Fieller's approximation);
- a count of successes ``k`` of ``n`` trials, a binomial standard error ``√(n p (1 − p))``
  (:func:`binomial_standard_error`; p = k/n, or (k + ½)/(n + 1) at k = 0 or n): ``<x>_success`` beside
  ``<x>_searched`` (ACR searches), ``n_configs_kept`` beside ``n_configs`` (the retention rule), and, inside a score's
  entry, ``n`` and ``n_runs`` (the configurations and runs with a value — random for ACR over successes) out of the
  enclosing ε group's ``n_configs`` and ``n_runs`` (``parent``);
- anything else (ε, design counts, R² without ``r2_se``, p-values, the base utility): no uncertainty. The analyze
  stage writes ``<key>_se`` beside the values whose uncertainty needs the runs (a configuration's seed mean, a
  bootstrap over seeds and configurations for the derived statistics: :mod:`empriv.analysis.bootstrap`).

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


def binomial_standard_error(k: float, n: float) -> float | None:
    """The standard error of a count of ``k`` successes in ``n`` trials, ``√(n p (1 − p))`` with p = k/n; at k = 0
    or k = n (where that is 0, though a rerun could well move the count) p = (k + ½)/(n + 1). None for n ≤ 0 or
    k outside [0, n]."""
    if not (is_number(k) and is_number(n)) or n <= 0 or not 0 <= k <= n:
        return None
    p = k / n if 0 < k < n else (k + 0.5) / (n + 1)
    return math.sqrt(n * p * (1 - p))


def _binomial_total(siblings: Mapping[str, Any], leaf: str, parent: Mapping[str, Any] | None) -> float | None:
    """The number of trials behind a count ``leaf`` (module docstring), or None if ``leaf`` is no such count."""
    if leaf.endswith("_success"):
        return siblings.get(leaf[: -len("success")] + "searched")
    if leaf == "n_configs_kept":
        return siblings.get("n_configs")
    if leaf in ("n", "n_runs") and "mean" in siblings and parent is not None:
        return parent.get("n_configs" if leaf == "n" else "n_runs")
    return None


def uncertainty(siblings: Mapping[str, Any], leaf: str, parent: Mapping[str, Any] | None = None) -> float | None:
    """The standard uncertainty of ``siblings[leaf]`` (module docstring), or None where none is defined.
    ``parent``: the keys of the enclosing object (the ε group of a score's entry), for the counts that need them."""
    v = siblings.get(leaf)
    if not is_number(v):
        return None
    own = siblings.get(f"{leaf}_se")
    if is_number(own):
        return abs(float(own))
    total = _binomial_total(siblings, leaf, parent)
    if is_number(total):
        return binomial_standard_error(float(v), float(total))
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
        if n and n >= 2:
            return abs(float(v)) / math.sqrt(2 * (n - 1))
        # a standard error without a count beside it (a configuration's, over its seeds): as if from two draws, the
        # fewest a standard deviation has — the most it can move when the seeds change
        return abs(float(v)) / math.sqrt(2) if leaf.endswith("_se") else None
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
