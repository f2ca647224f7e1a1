"""Hyperparameter selection (the research's section 4.3, Algorithm 1, Figs. 9, 10, 20 and appendix D.3).

Algorithm 1 on a pool of points (b, T, η) with utilities (test NLL: lower is better):

1. updates:    group by U = b·T·η, keep the points with the minimal η of each group;
2. compute:    group what remains by (U, C), keep the points with the maximal b of each group;
3. individual: discard a point if another remaining point has b, T, η all ≤ and one strictly <;
4. final:      among what is left, the point with the *worst* utility (largest NLL).

Baselines: the *best-utility* point (usual practice) and the standalone *worst-utility* heuristic.
Ties in the final step go to the point listed first in the pool (sorted by ε, b, T, η).

Evaluation (utility-threshold sweep): for every distinct utility u of the pool, the subpool of points
with utility ≤ u; each method picks from it and is compared with the *oracle* (the lowest score in
the subpool): relative risk (y_sel − y_oracle)/y_oracle — defined only where y_oracle > 0 — and
absolute risk y_sel − y_oracle, averaged over thresholds. Monte Carlo variant: each configuration's
score is drawn from N(seed mean, seed std) (std 0 when a configuration has a single seed), the
picks (which depend only on hyperparameters and utility) stay, and the averages are averaged over
trials (5,000 by default, seeded).

Missing scores: a configuration without a value of the score (null/NaN — e.g. ACR over successes where no
search succeeded, which is censored, not 0) cannot be judged, so the pool of the sweep and the risks is the
configurations that have one; how many were left out is reported (``n_points_without_value``).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from empriv.analysis.heuristics import REL_TOL

METHODS = ("algorithm1", "best_utility", "worst_utility")
METHOD_LABELS = {"algorithm1": "Algorithm 1", "best_utility": "best utility", "worst_utility": "worst utility",
                 "oracle": "oracle"}


def _key(x: float) -> float:
    """Group key for a float quantity (U, C): equal within a relative 1e-9."""
    if x == 0 or not math.isfinite(x):
        return x
    return float(f"{x:.9g}")


def point_label(p: dict) -> str:
    return f"b{p['batch_size']}-T{p['steps']}-lr{p['learning_rate']:g}"


@dataclass
class Selection:
    selected: dict
    steps: list[dict] = field(default_factory=list)  # {step, group, kept, discarded, reason}

    @property
    def label(self) -> str:
        return point_label(self.selected)


def _points(pool, utility: str) -> list[dict]:
    from empriv.analysis.table import require_columns

    require_columns(pool, ["batch_size", "steps", "learning_rate", utility], "utility")
    pts = []
    for i, r in enumerate(pool.iter_rows(named=True)):
        p = dict(r)
        p["__i"] = i
        p["compute"] = p["batch_size"] * p["steps"]
        p["update"] = p["compute"] * p["learning_rate"]
        if p[utility] is None or math.isnan(p[utility]):
            raise ValueError(f"utility column {utility!r} is null for {point_label(p)}: every point needs a utility")
        pts.append(p)
    if not pts:
        raise ValueError("the pool is empty: nothing to select from")
    return pts


def _fmt(x: float) -> str:
    return f"{x:.6g}"


def _keep_per_group(points: list[dict], steps: list[dict], *, step: str, group_key: Callable[[dict], Hashable],
                    column: str, pick: Callable, same: Callable[[Any, Any], bool],
                    describe: Callable[[Hashable, Any], tuple[str, str]]) -> list[dict]:
    """Algorithm 1's grouping steps: the points grouped by ``group_key`` (in order of first appearance); in each group
    the points whose ``column`` is ``same`` as the group's ``pick`` (min or max) of it are kept, the others discarded,
    and a group that discards any is noted in ``steps`` with ``describe(key, picked value)`` = (group, reason)."""
    groups: dict[Hashable, list[dict]] = {}
    for p in points:
        groups.setdefault(group_key(p), []).append(p)
    remaining = []
    for key, g in groups.items():
        best = pick(p[column] for p in g)
        keep = [p for p in g if same(p[column], best)]
        drop = [p for p in g if p not in keep]
        remaining += keep
        if drop:
            group, reason = describe(key, best)
            steps.append({"step": step, "group": group, "kept": [point_label(p) for p in keep],
                          "discarded": [point_label(p) for p in drop], "reason": reason})
    return remaining


def select_configuration(pool, utility: str = "test_nll") -> Selection:
    """Algorithm 1 on ``pool`` (one row per configuration). Returns the pick and every step's discards."""
    pts = _points(pool, utility)
    steps: list[dict] = []

    # Step 1 (updates): per U, keep the minimal η
    remaining = _keep_per_group(
        pts, steps, step="updates", group_key=lambda p: _key(p["update"]), column="learning_rate", pick=min,
        same=lambda x, best: math.isclose(x, best, rel_tol=REL_TOL),
        describe=lambda u, eta: (f"U={_fmt(u)}",
                                 f"same updates U={_fmt(u)}: a smaller learning rate (η={eta:g}) is expected to be "
                                 "more private"))

    # Step 2 (compute): per (U, C), keep the maximal b
    remaining = _keep_per_group(
        remaining, steps, step="compute", group_key=lambda p: (_key(p["update"]), _key(p["compute"])),
        column="batch_size", pick=max, same=operator.eq,
        describe=lambda uc, b: (f"U={_fmt(uc[0])}, C={_fmt(uc[1])}",
                                f"same updates and compute C={_fmt(uc[1])}: a larger batch size (b={b}) is expected "
                                "to be more private"))

    # Step 3 (individual): discard points dominated by another remaining point
    def dominates(q: dict, p: dict) -> bool:  # q has every hyperparameter ≤ p's, one strictly
        le = q["batch_size"] <= p["batch_size"] and q["steps"] <= p["steps"] and (
            q["learning_rate"] <= p["learning_rate"] or math.isclose(q["learning_rate"], p["learning_rate"], rel_tol=REL_TOL))
        strict = q["batch_size"] < p["batch_size"] or q["steps"] < p["steps"] or (
            q["learning_rate"] < p["learning_rate"] and not math.isclose(q["learning_rate"], p["learning_rate"], rel_tol=REL_TOL))
        return le and strict

    survivors = []
    for p in remaining:
        by = [q for q in remaining if q is not p and dominates(q, p)]
        if by:
            steps.append({"step": "individual", "group": point_label(p), "kept": [], "discarded": [point_label(p)],
                          "reason": f"dominated by {point_label(by[0])} (b, T, η all ≤, one strictly)"})
        else:
            survivors.append(p)
    survivors.sort(key=lambda p: p["__i"])

    # Final step (worst utility)
    worst = max(p[utility] for p in survivors)
    pick = next(p for p in survivors if p[utility] == worst)
    drop = [p for p in survivors if p is not pick]
    if drop:
        steps.append({"step": "worst_utility", "group": f"{len(survivors)} remaining", "kept": [point_label(pick)],
                      "discarded": [point_label(p) for p in drop],
                      "reason": f"better utility than the pick ({utility} {_fmt(worst)}): the worst-utility point is expected to be most private"})
    return Selection(_clean(pick), steps)


def _clean(p: dict) -> dict:
    return {k: v for k, v in p.items() if not k.startswith("__")}


def best_utility(pool, utility: str = "test_nll") -> dict:
    pts = _points(pool, utility)
    return _clean(min(pts, key=lambda p: (p[utility], p["__i"])))


def worst_utility(pool, utility: str = "test_nll") -> dict:
    pts = _points(pool, utility)
    best = max(p[utility] for p in pts)
    return _clean(next(p for p in pts if p[utility] == best))


def pick_indices(pool, utility: str = "test_nll") -> dict[str, int]:
    """Row index (in ``pool``) each method picks."""
    import polars as pl

    idx = pool.with_row_index("__row")
    out = {}
    for m, p in (("algorithm1", select_configuration(pool, utility).selected), ("best_utility", best_utility(pool, utility)),
                 ("worst_utility", worst_utility(pool, utility))):
        row = idx.filter((pl.col("batch_size") == p["batch_size"]) & (pl.col("steps") == p["steps"])
                         & (pl.col("learning_rate") == p["learning_rate"]) & (pl.col(utility) == p[utility]))
        out[m] = int(row["__row"][0])
    return out


def threshold_sweep(pool, score: str, utility: str = "test_nll") -> list[dict]:
    """One entry per distinct utility u (ascending): subpool size, each method's pick, score and risks."""
    import numpy as np

    from empriv.analysis.table import require_columns

    require_columns(pool, [score, utility])
    pool = pool.filter(~(pool[score].is_null() | pool[score].cast(float).is_nan()))
    if pool.height == 0:
        return []
    y = pool[score].cast(float).to_numpy()
    u = pool[utility].cast(float).to_numpy()
    out = []
    for thr in np.unique(u):
        mask = u <= thr
        sub = pool.filter(mask)
        rows = np.flatnonzero(mask)
        picks = {m: int(rows[i]) for m, i in pick_indices(sub, utility).items()}
        oracle = int(rows[int(np.argmin(y[rows]))])
        entry = {"threshold": float(thr), "n_points": int(mask.sum()), "oracle": point_label(pool.row(oracle, named=True)),
                 "oracle_score": float(y[oracle]), "picks": {}}
        for m, i in picks.items():
            entry["picks"][m] = {"config": point_label(pool.row(i, named=True)), "score": float(y[i]),
                                 "utility": float(u[i]),
                                 "absolute_risk": float(y[i] - y[oracle]),
                                 "relative_risk": float((y[i] - y[oracle]) / y[oracle]) if y[oracle] > 0 else None}
        out.append(entry)
    return out


def _sweep_picks(pool, score: str, utility: str):
    """(sorted-threshold subpool masks, pick row per method per threshold) for the vectorised risks."""
    import numpy as np

    u = pool[utility].cast(float).to_numpy()
    masks, picks = [], {m: [] for m in METHODS}
    for thr in np.unique(u):
        mask = u <= thr
        rows = np.flatnonzero(mask)
        for m, i in pick_indices(pool.filter(mask), utility).items():
            picks[m].append(int(rows[i]))
        masks.append(mask)
    return np.array(masks), {m: np.array(v) for m, v in picks.items()}


def _risk_arrays(Y, masks, picks) -> dict:
    """Y: trials × points → per method, per trial: mean absolute risk and mean relative risk over thresholds
    (relative: over the thresholds whose oracle score is > 0; NaN if none), and the defined fraction."""
    import numpy as np

    big = np.where(masks[None, :, :], Y[:, None, :], np.inf)  # trials × thresholds × points
    oracle = big.min(axis=2)  # trials × thresholds
    out = {}
    for m, idx in picks.items():
        absolute = Y[:, idx] - oracle  # trials × thresholds
        valid = oracle > 0
        rel = np.where(valid, absolute / np.where(valid, oracle, 1.0), 0.0)
        n_valid = valid.sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            rel_mean = np.where(n_valid > 0, rel.sum(axis=1) / np.maximum(n_valid, 1), np.nan)
        out[m] = (absolute.mean(axis=1), rel_mean, valid.mean(axis=1))
    return out


def _summarise(arrays: dict) -> dict:
    import numpy as np

    out = {}
    for m, (absolute, rel, defined) in arrays.items():
        ok = ~np.isnan(rel)
        out[m] = {"absolute_risk": float(absolute.mean()),
                  "relative_risk": float(rel[ok].mean()) if ok.any() else None,
                  "relative_defined_fraction": float(defined.mean())}
    return out


def selection_risks(configs, score: str, utility: str = "test_nll", trials: int = 5000, seed: int = 0) -> dict:
    """Risks of each method on one pool (one row per configuration, with ``<score>__seed_std`` for Monte Carlo).

    ``mean``: on the seed means; ``monte_carlo``: averaged over ``trials`` resampled layouts (None if trials = 0).
    Configurations without a ``score`` value are left out of the pool (``n_points_without_value``).
    """
    import numpy as np

    from empriv.analysis.table import require_columns

    require_columns(configs, [score, utility])
    pool = configs.filter(~(configs[score].is_null() | configs[score].cast(float).is_nan()))
    if pool.height == 0:
        return {"n_points": 0, "n_thresholds": 0, "mean": None, "monte_carlo": None,
                "n_points_without_value": configs.height, "reason": f"no configuration has a {score} value"}
    masks, picks = _sweep_picks(pool, score, utility)
    mu = pool[score].cast(float).to_numpy()
    std_col = f"{score}__seed_std"
    sd = (pool[std_col].cast(float).fill_nan(None).fill_null(0.0).to_numpy() if std_col in pool.columns
          else np.zeros_like(mu))
    out = {"n_points": pool.height, "n_points_without_value": configs.height - pool.height, "n_thresholds": int(masks.shape[0]),
           "mean": _summarise(_risk_arrays(mu[None, :], masks, picks)),
           "monte_carlo": None, "trials": trials, "seed": seed,
           "n_points_without_seed_std": int((sd == 0).sum())}
    if trials > 0:
        rng = np.random.default_rng(seed)
        chunk = max(1, min(trials, 2_000_000 // max(1, masks.size)))
        parts = []
        for start in range(0, trials, chunk):
            n = min(chunk, trials - start)
            parts.append(_risk_arrays(rng.normal(mu, sd, size=(n, mu.size)), masks, picks))
        merged = {m: tuple(np.concatenate([p[m][k] for p in parts]) for k in range(3)) for m in METHODS}
        out["monte_carlo"] = _summarise(merged)
    return out
