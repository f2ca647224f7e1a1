"""Standard errors of the derived statistics of ``metrics/analysis.json`` by a bootstrap over configurations and seeds.

A configuration's score is a seed mean, and the statistics built on those means (Table 8's standard deviations and
their ratio, the heuristics' accuracies, the selection risks) move when the runs are drawn again. `empriv diff`
needs that spread to tell a change from seed noise; no formula gives it for an accuracy over pairs or for Algorithm
1's risk, so it is resampled (a two-stage, or nested, bootstrap; Davison & Hinkley 1997, section 3.8):

1. within every ε group, the configurations are drawn with replacement (as many as there are);
2. within every drawn configuration, its runs (seeds) are drawn with replacement (as many as it has);

and the statistic is computed on the resampled run table by the very functions the analysis uses
(:func:`derived_statistics`). The standard error is the standard deviation of a statistic over
:data:`REPLICATES` resamples. Drawing the configurations again as well as the seeds makes it an upper bound of the
pure seed noise (the cube's configurations do not change between two runs of it): `empriv diff` calls fewer false
alarms at the price of some power. A configuration drawn twice is two points with the same hyperparameters: no
heuristic compares them, Algorithm 1 and the oracle see both. With one seed per configuration only stage 1 varies.

Deterministic: the draws come from :data:`SEED`, so the same runs give the same standard errors on any machine
(up to float drift in the statistics themselves). A statistic undefined in more than half of the resamples (a
ratio whose seed standard deviation is 0 when seeds are drawn twice, an accuracy without pairs) has no standard
error (None).
"""

from __future__ import annotations

import math
from collections.abc import Callable

REPLICATES = 200  # ~0.1 s each on the default cube's 64 runs (4 ε × 8 configurations × 2 seeds)
SEED = 0  # fixed: the same runs give the same standard errors (metrics are compared across commits)
MIN_DEFINED = 0.5  # a statistic needs a value in at least this fraction of the resamples


def _layout(runs, by: str) -> list[list[list[int]]]:
    """Row indices of ``runs``: per ``by`` group (sorted), per configuration (``group``, in order of appearance)."""
    groups: dict = {}
    for i, (key, group) in enumerate(zip(runs[by].to_list(), runs["group"].to_list())):
        groups.setdefault(key, {}).setdefault(group, []).append(i)
    return [list(groups[k].values()) for k in sorted(groups)]


def resample_runs(runs, rng, *, by: str = "epsilon", layout: list[list[list[int]]] | None = None):
    """One nested-bootstrap resample of a run table (module docstring): configurations drawn with replacement within
    each ``by`` group, then the runs of each drawn configuration with replacement. A configuration drawn j times
    appears as j configurations, ``<group>~<draw>`` (so a seed mean never pools two draws); ``seed`` and ``config``
    are renumbered inside each."""
    import polars as pl

    layout = _layout(runs, by) if layout is None else layout
    rows, groups, seeds = [], [], []
    names = runs["group"].to_list()
    for configurations in layout:
        for draw, c in enumerate(rng.integers(0, len(configurations), size=len(configurations))):
            members = configurations[int(c)]
            picked = [members[int(j)] for j in rng.integers(0, len(members), size=len(members))]
            rows += picked
            groups += [f"{names[members[0]]}~{draw}"] * len(picked)
            seeds += list(range(len(picked)))
    out = runs[rows].with_columns(pl.Series("group", groups), pl.Series("seed", seeds))
    return out.with_columns((pl.col("group") + "-s" + pl.col("seed").cast(pl.String)).alias("config"))


def bootstrap_standard_errors(runs, statistic: Callable[[object], dict[str, float | None]], *,
                              replicates: int = REPLICATES, seed: int = SEED, by: str = "epsilon") -> dict:
    """``{name: standard error}`` of every value ``statistic(runs)`` returns (a flat dict of floats or None): the
    standard deviation (ddof = 1) of ``statistic`` over ``replicates`` resamples (:func:`resample_runs`); None for a
    name defined in fewer than :data:`MIN_DEFINED` of them."""
    import numpy as np

    if replicates < 2:
        raise ValueError(f"replicates must be >= 2, got {replicates}")
    rng = np.random.default_rng(seed)
    layout = _layout(runs, by)
    draws: dict[str, list[float]] = {}
    for _ in range(replicates):
        for name, v in statistic(resample_runs(runs, rng, by=by, layout=layout)).items():
            values = draws.setdefault(name, [])
            if v is not None and math.isfinite(v):
                values.append(float(v))
    return {name: (float(np.std(v, ddof=1)) if len(v) >= max(2, MIN_DEFINED * replicates) else None)
            for name, v in draws.items()}


def derived_statistics(runs, score: str, utility: str, *, base_utility: float | None = None,
                       retention_fraction: float = 0.9) -> dict[str, float | None]:
    """The derived statistics of ``metrics/analysis.json`` for ``score``, computed as
    :func:`empriv.analysis.stage.compute_analysis` computes them, flat: ``<ε label>.<key>`` with key ``std_configs``,
    ``std_seeds``, ``config_seed_ratio`` (over the configurations the retention rule keeps),
    ``config_seed_ratio_all`` (over all), ``heuristic_<rule>`` (accuracy) and, at finite ε, ``risk_<method>`` (the
    absolute risk on the seed means)."""
    import polars as pl

    from empriv.analysis.heuristics import heuristics_by_group
    from empriv.analysis.metrics import RISK_METHODS
    from empriv.analysis.selection import selection_risks
    from empriv.analysis.table import config_table, epsilon_label, retention_filter
    from empriv.analysis.variance import seed_vs_configuration, table8

    configs_all = config_table(runs, [score, utility])
    configs, _ = retention_filter(configs_all, base_utility, retention_fraction, utility)
    out: dict[str, float | None] = {}
    for label, d in seed_vs_configuration(configs, score).items():
        out.update({f"{label}.std_configs": d["hyperparameter"], f"{label}.std_seeds": d["randomness"],
                    f"{label}.config_seed_ratio": d.get("ratio")})
    for label, d in (table8(configs, score, configs_all=configs_all).get("per_epsilon") or {}).items():
        out[f"{label}.config_seed_ratio_all"] = (d.get("all") or {}).get("ratio")
    for label, by_score in heuristics_by_group(configs, [score]).items():
        out.update({f"{label}.heuristic_{r}": d["accuracy"] for r, d in by_score[score].items()})
    for eps in sorted(configs["epsilon"].unique().to_list()):
        if math.isinf(eps):
            continue
        pool = configs.filter((pl.col("epsilon") == eps) & pl.col(score).cast(pl.Float64).fill_nan(None).is_not_null())
        if pool.height:
            risks = selection_risks(pool, score, utility, trials=0)["mean"]
            out.update({f"{epsilon_label(eps)}.risk_{m}": risks[m]["absolute_risk"] for m in RISK_METHODS})
    return out


def analysis_standard_errors(runs, score: str | None, utility: str, *, base_utility: float | None = None,
                             retention_fraction: float = 0.9, replicates: int = REPLICATES,
                             seed: int = SEED) -> dict:
    """ε label → ``{key: standard error}`` of :func:`derived_statistics` (nested bootstrap, module docstring);
    ``{}`` without a score."""
    if score is None or runs.height == 0:
        return {}
    flat = bootstrap_standard_errors(
        runs, lambda t: derived_statistics(t, score, utility, base_utility=base_utility,
                                           retention_fraction=retention_fraction),
        replicates=replicates, seed=seed)
    out: dict = {}
    for name, se in flat.items():
        label, _, key = name.partition(".")
        out.setdefault(label, {})[key] = se
    return out
