"""empriv.analysis.selection: Algorithm 1 (all four steps), the baselines, the threshold sweep and the risks."""

from __future__ import annotations

import math

import polars as pl
import pytest

from empriv.analysis.selection import (best_utility, select_configuration, selection_risks, threshold_sweep,
                                       worst_utility)

# name: (b, T, η, utility (test NLL), score)
POOL = {
    "A": (64, 16, 0.01, 0.95, 5.0),    # U = 10.24, C = 1024: step 1 drops it (larger η at the same U)
    "B": (128, 16, 0.005, 0.80, 2.0),  # U = 10.24, C = 2048
    "D": (64, 32, 0.005, 0.75, 3.0),   # U = 10.24, C = 2048: step 2 drops it (smaller b at the same U, C)
    "E": (256, 16, 0.005, 0.70, 2.5),  # U = 20.48: step 3 drops it (B has b, T, η all ≤, b strictly)
    "F": (32, 64, 0.001, 0.85, 1.0),   # U = 2.048: survives with B; the final step picks it (worse utility than B)
}


def pool_table(points=POOL, std=None):
    rows = [{"name": k, "batch_size": b, "steps": t, "learning_rate": e, "test_nll": u, "y": y,
             "y__seed_std": (std or {}).get(k)} for k, (b, t, e, u, y) in points.items()]
    return pl.DataFrame(rows, schema_overrides={"y__seed_std": pl.Float64})


def label(name):
    b, t, e, _, _ = POOL[name]
    return f"b{b}-T{t}-lr{e:g}"


def test_algorithm_1_needs_all_four_steps():
    sel = select_configuration(pool_table())
    assert sel.selected["name"] == "F"
    steps = [(s["step"], s["discarded"]) for s in sel.steps]
    assert steps == [
        ("updates", [label("A")]),
        ("compute", [label("D")]),
        ("individual", [label("E")]),
        ("worst_utility", [label("B")]),
    ]
    assert "dominated by " + label("B") in sel.steps[2]["reason"]
    assert all(s["reason"] for s in sel.steps)


def test_baselines():
    t = pool_table()
    assert best_utility(t)["name"] == "E"
    assert worst_utility(t)["name"] == "A"


def test_single_point_pool_and_empty_pool():
    t = pool_table({"F": POOL["F"]})
    sel = select_configuration(t)
    assert sel.selected["name"] == "F" and sel.steps == []
    with pytest.raises(ValueError, match="empty"):
        select_configuration(t.clear())


def test_threshold_sweep_by_hand():
    sweep = threshold_sweep(pool_table(), "y")
    assert [s["threshold"] for s in sweep] == [0.70, 0.75, 0.80, 0.85, 0.95]
    assert [s["n_points"] for s in sweep] == [1, 2, 3, 4, 5]
    picks = [{m: p["config"] for m, p in s["picks"].items()} for s in sweep]
    assert [p["algorithm1"] for p in picks] == [label(n) for n in "EDBFF"]
    assert [p["best_utility"] for p in picks] == [label("E")] * 5
    assert [p["worst_utility"] for p in picks] == [label(n) for n in "EDBFA"]
    assert [s["oracle"] for s in sweep] == [label(n) for n in "EEBFF"]
    assert [s["picks"]["algorithm1"]["absolute_risk"] for s in sweep] == pytest.approx([0, 0.5, 0, 0, 0])
    assert [s["picks"]["best_utility"]["relative_risk"] for s in sweep] == pytest.approx([0, 0, 0.25, 1.5, 1.5])


def test_risks_on_the_means_by_hand():
    r = selection_risks(pool_table(), "y", trials=0)
    assert (r["n_points"], r["n_thresholds"]) == (5, 5)
    m = r["mean"]
    assert m["algorithm1"]["absolute_risk"] == pytest.approx(0.1)
    assert m["best_utility"]["absolute_risk"] == pytest.approx(0.7)
    assert m["worst_utility"]["absolute_risk"] == pytest.approx(0.9)
    assert m["algorithm1"]["relative_risk"] == pytest.approx(0.04)
    assert m["best_utility"]["relative_risk"] == pytest.approx(0.65)
    assert m["worst_utility"]["relative_risk"] == pytest.approx(0.84)
    assert r["monte_carlo"] is None


def test_monte_carlo_without_seed_noise_equals_the_means():
    r = selection_risks(pool_table(), "y", trials=50, seed=3)  # no std column values: every std is 0
    assert r["n_points_without_seed_std"] == 5
    for m in ("algorithm1", "best_utility", "worst_utility"):
        assert r["monte_carlo"][m]["absolute_risk"] == pytest.approx(r["mean"][m]["absolute_risk"])
        assert r["monte_carlo"][m]["relative_risk"] == pytest.approx(r["mean"][m]["relative_risk"])


def test_monte_carlo_matches_a_closed_form_and_is_seeded():
    # P1: utility 0.5, score 1 exactly; P2: utility 0.6, score ~ N(1, 1). Best utility always picks P1;
    # at the second threshold its absolute risk is 1 − min(1, Y2) = max(0, −Z): mean 1/√(2π); first threshold 0.
    pts = {"P1": (64, 16, 0.01, 0.5, 1.0), "P2": (128, 16, 0.01, 0.6, 1.0)}
    t = pool_table(pts, std={"P2": 1.0})
    r = selection_risks(t, "y")  # 5,000 trials by default
    assert r["trials"] == 5000
    assert r["monte_carlo"]["best_utility"]["absolute_risk"] == pytest.approx(0.5 / math.sqrt(2 * math.pi), abs=0.02)
    again = selection_risks(t, "y")
    assert again["monte_carlo"] == r["monte_carlo"]
    other = selection_risks(t, "y", seed=1)
    assert other["monte_carlo"] != r["monte_carlo"]


def test_relative_risk_undefined_when_the_oracle_scores_zero():
    pts = {"P1": (64, 16, 0.01, 0.5, 0.0), "P2": (128, 16, 0.01, 0.6, 0.0)}
    r = selection_risks(pool_table(pts), "y", trials=10)
    for m in ("algorithm1", "best_utility", "worst_utility"):
        assert r["mean"][m]["absolute_risk"] == 0.0
        assert r["mean"][m]["relative_risk"] is None
        assert r["mean"][m]["relative_defined_fraction"] == 0.0


def test_null_scores_are_left_out_and_an_all_null_pool_is_reported():
    t = pool_table().with_columns(pl.when(pl.col("name") == "F").then(None).otherwise(pl.col("y")).alias("y"))
    assert threshold_sweep(t, "y")[-1]["n_points"] == 4
    empty = pool_table().with_columns(pl.lit(None, dtype=pl.Float64).alias("y"))
    assert selection_risks(empty, "y")["reason"] == "no configuration has a y value"


def test_unknown_score_column_is_named():
    with pytest.raises(ValueError, match=r"unknown score column\(s\) \['acr_mean'\].*test_nll"):
        threshold_sweep(pool_table(), "acr_mean")


def test_configurations_without_a_score_are_left_out_of_the_sweep_and_risks():
    """A null score (ACR over successes where no search succeeded) is not a 0 the oracle could pick: the sweep and
    the risks are those of the pool without that configuration."""
    holes = pool_table({**POOL, "F": (32, 64, 0.001, 0.85, None)}, std={"A": 0.5, "B": 0.2})
    kept = pool_table({k: v for k, v in POOL.items() if k != "F"}, std={"A": 0.5, "B": 0.2})
    assert threshold_sweep(holes, "y") == threshold_sweep(kept, "y")
    r, ref = selection_risks(holes, "y", trials=300, seed=1), selection_risks(kept, "y", trials=300, seed=1)
    assert r["n_points"] == 4 and r["n_points_without_value"] == 1 and ref["n_points_without_value"] == 0
    assert r["mean"] == ref["mean"] and r["monte_carlo"] == ref["monte_carlo"]
    # by hand, on the seed means of A, B, D, E: Algorithm 1 picks B (y 2.0) from the full subpool; the oracle is B too
    full = threshold_sweep(holes, "y")[-1]
    assert full["oracle_score"] == 2.0 and full["picks"]["algorithm1"]["score"] == 2.0
    assert full["picks"]["best_utility"]["score"] == 2.5 and full["picks"]["worst_utility"]["score"] == 5.0
    none = selection_risks(pool_table({k: (*v[:4], None) for k, v in POOL.items()}), "y")
    assert none["mean"] is None and none["n_points_without_value"] == 5 and "no configuration has a y value" in none["reason"]
