"""empriv.analysis.one_at_a_time: the research's Fig. 5 (a–c) panels pick the right configurations."""

from __future__ import annotations

import math

import polars as pl
import pytest
from analysis_tables import make_run_table

from empriv.analysis.one_at_a_time import one_at_a_time, reference_values
from empriv.analysis.table import config_table


def _configs(table=None, score="exposure_gap_mean"):
    return config_table(make_run_table() if table is None else table, [score])


def test_reference_is_the_middle_value_upper_for_an_even_count():
    t = pl.DataFrame({"batch_size": [64, 128, 256, 64], "steps": [16, 32, 16, 16], "learning_rate": [0.01] * 4})
    assert reference_values(t) == {"batch_size": 128, "steps": 32, "learning_rate": 0.01}
    t = pl.DataFrame({"batch_size": [8, 16, 32, 64], "steps": [1, 2, 3, 4], "learning_rate": [1e-3, 1e-3, 1e-3, 1e-3]})
    assert reference_values(t) == {"batch_size": 32, "steps": 3, "learning_rate": 1e-3}


def test_panels_of_a_two_value_cube_hold_the_others_at_the_reference():
    configs = _configs()
    kept = {"eps8-b128-T32-lr0.01", "eps8-b64-T32-lr0.01"}
    out = one_at_a_time(configs, "exposure_gap_mean", kept_groups=kept)
    assert out["reference"] == {"batch_size": 128, "steps": 32, "learning_rate": 0.01}
    assert [p["vary"] for p in out["panels"]] == ["batch_size", "steps", "learning_rate"]
    want = {"batch_size": ["b64-T32-lr0.01", "b128-T32-lr0.01"], "steps": ["b128-T16-lr0.01", "b128-T32-lr0.01"],
            "learning_rate": ["b128-T32-lr0.005", "b128-T32-lr0.01"]}
    for p in out["panels"]:
        assert p["reason"] is None and p["missing"] == {}
        assert list(p["lines"]) == ["2", "8", "inf"]
        assert p["held"] == {a: v for a, v in out["reference"].items() if a != p["vary"]}
        for e, pts in p["lines"].items():
            prefix = f"eps{e}-"
            assert [pt["config"] for pt in pts] == [prefix + c for c in want[p["vary"]]]
            assert [pt["value"] for pt in pts] == sorted(pt["value"] for pt in pts)
            for pt in pts:  # the seed mean and std of that configuration
                row = configs.filter(pl.col("group") == pt["config"]).row(0, named=True)
                assert pt["mean"] == pytest.approx(row["exposure_gap_mean"])
                assert pt["seed_std"] == pytest.approx(row["exposure_gap_mean__seed_std"]) and pt["n_seeds"] == 2
                assert pt["kept"] is (pt["config"] in kept)
    # the shared point (the reference itself) is in all three panels
    ref = "eps8-b128-T32-lr0.01"
    assert all(any(pt["config"] == ref for pt in p["lines"]["8"]) for p in out["panels"])


def test_one_value_on_an_axis_empties_that_panel_only():
    t = make_run_table(epsilons=(8.0,)).filter(pl.col("batch_size") == 64)
    out = one_at_a_time(_configs(t), "exposure_gap_mean")
    b, steps, lr = out["panels"]
    assert b["lines"] == {} and b["reason"] == "the cube has one b (64): nothing to vary"
    assert list(steps["lines"]) == ["8"] and steps["held"] == {"batch_size": 64, "learning_rate": 0.01}
    assert lr["lines"]["8"][0]["config"] == "eps8-b64-T32-lr0.005"
    assert lr["lines"]["8"][0]["kept"] is None  # no retention information given


def test_a_partial_sweep_without_the_reference_says_so_per_epsilon():
    t = make_run_table(epsilons=(2.0, 8.0))
    t = t.filter(~((pl.col("epsilon") == 2.0) & (pl.col("batch_size") == 128) & (pl.col("steps") == 32)))
    out = one_at_a_time(_configs(t), "exposure_gap_mean")
    vary_b = out["panels"][0]
    assert list(vary_b["lines"]) == ["8"]
    assert vary_b["missing"]["2"] == ("1 configuration(s) with T = 32, η = 0.01, 1 with a value of "
                                      "exposure_gap_mean (need two)")


def test_a_score_without_values_and_no_score():
    t = make_run_table(epsilons=(8.0, math.inf))
    out = one_at_a_time(_configs(t, "acr_mean"), "acr_mean")
    # acr_mean exists on seed 0 only: configuration means are that seed's value, the seed std is none
    pt = out["panels"][0]["lines"]["8"][0]
    assert pt["seed_std"] is None and pt["n_seeds"] == 1
    empty = t.with_columns(pl.lit(None, dtype=pl.Float64).alias("acr_mean"))
    out = one_at_a_time(_configs(empty, "acr_mean"), "acr_mean")
    assert all(p["lines"] == {} and p["reason"] == "no ε has two configurations at the reference with a value"
               for p in out["panels"])
    assert one_at_a_time(_configs(t), None) == {}
