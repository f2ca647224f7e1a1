"""The research's pairwise hyperparameter heuristics (section 4.2) and their accuracy (Fig. 7).

Configuration 1 = (b₁, T₁, η₁) is predicted to have better empirical privacy (a lower score) than
configuration 2 if:

- ``individual``: b₁ ≤ b₂, T₁ ≤ T₂, η₁ ≤ η₂, at least one strict;
- ``compute``:    C₁ = C₂, η₁ = η₂, b₁ > b₂ (C = b·T);
- ``updates``:    U₁ = U₂, η₁ < η₂ (U = C·η).

A pair is *correct* only if the predicted-better configuration has a strictly lower score: ties
count as wrong (which is why all-zero scores give accuracy ≈ 0 in the research's VMR results).
The random-guess baseline is the expected accuracy of a coin flip on the same pairs under the same
rule: ½ on every pair whose scores differ, 0 on ties (= 0.5 when no pair is tied).
Equality of C and U is tested with a relative tolerance of 1e-9 (U is a float product).
"""

from __future__ import annotations

import math

RULES = ("individual", "compute", "updates")
REL_TOL = 1e-9


def _eq(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=0.0)


def predicts_better(rule: str, p1: dict, p2: dict) -> bool:
    """True if ``rule`` predicts configuration ``p1`` has better empirical privacy than ``p2``.
    Points are mappings with batch_size, steps, learning_rate (compute and update derived if absent)."""
    b1, t1, e1 = p1["batch_size"], p1["steps"], p1["learning_rate"]
    b2, t2, e2 = p2["batch_size"], p2["steps"], p2["learning_rate"]
    if rule == "individual":
        le = b1 <= b2 and t1 <= t2 and (e1 <= e2 or _eq(e1, e2))
        strict = b1 < b2 or t1 < t2 or (e1 < e2 and not _eq(e1, e2))
        return le and strict
    if rule == "compute":
        return _eq(b1 * t1, b2 * t2) and _eq(e1, e2) and b1 > b2
    if rule == "updates":
        return _eq(b1 * t1 * e1, b2 * t2 * e2) and e1 < e2 and not _eq(e1, e2)
    raise ValueError(f"unknown heuristic rule {rule!r}; allowed: {list(RULES)}")


def heuristic_pairs(table, score: str, rule: str) -> list[tuple[dict, dict]]:
    """Every ordered pair (better, worse) of rows the rule applies to (rows with a null/NaN score skipped)."""
    from empriv.analysis.table import require_columns

    if rule not in RULES:
        raise ValueError(f"unknown heuristic rule {rule!r}; allowed: {list(RULES)}")
    require_columns(table, [score])
    rows = [r for r in table.select(["batch_size", "steps", "learning_rate", score]).iter_rows(named=True)
            if r[score] is not None and not math.isnan(r[score])]
    return [(p, q) for i, p in enumerate(rows) for j, q in enumerate(rows) if i != j and predicts_better(rule, p, q)]


def heuristic_summary(table, score: str, rule: str) -> dict:
    """accuracy, n_pairs, n_correct, n_ties, random_baseline (accuracy and baseline None without pairs), and
    n_configs_without_value: rows whose score is null/NaN (e.g. ACR over successes where no search succeeded),
    left out of every pair rather than read as 0."""
    pairs = heuristic_pairs(table, score, rule)
    n = len(pairs)
    correct = sum(1 for p, q in pairs if p[score] < q[score])
    ties = sum(1 for p, q in pairs if p[score] == q[score])
    missing = sum(1 for v in table[score].to_list() if v is None or (isinstance(v, float) and math.isnan(v)))
    return {"accuracy": correct / n if n else None, "n_pairs": n, "n_correct": correct, "n_ties": ties,
            "random_baseline": 0.5 * (n - ties) / n if n else None, "n_configs_without_value": missing}


def heuristic_accuracy(table, score: str, rule: str) -> tuple[float, int]:
    """(accuracy, number of pairs) of ``rule`` on ``table`` (one row per configuration); NaN without pairs."""
    s = heuristic_summary(table, score, rule)
    return (s["accuracy"] if s["accuracy"] is not None else math.nan), s["n_pairs"]


def heuristics_by_group(configs, scores: list[str], by: str = "epsilon") -> dict:
    """ε label → score → rule → summary, on configuration means."""
    import polars as pl

    from empriv.analysis.table import epsilon_label

    out: dict = {}
    for key in sorted(configs[by].unique().to_list()):
        g = configs.filter(pl.col(by) == key)
        label = epsilon_label(key) if by == "epsilon" else str(key)
        out[label] = {s: {r: heuristic_summary(g, s, r) for r in RULES} for s in scores}
    return out
