"""empriv.analysis.variance: per-ε statistics across configurations (seeds averaged first)."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest

from empriv.analysis.variance import format_summary, summarize

INF = math.inf


@pytest.fixture
def table():
    rows = [
        # epsilon, group, seed, gap, nll
        (2.0, "A", 0, 1.0, 10.0), (2.0, "A", 1, 3.0, 12.0),
        (2.0, "B", 0, 4.0, 20.0), (2.0, "B", 1, 6.0, 20.0),
        (2.0, "C", 0, 10.0, 30.0),  # one seed only
        (64.0, "E", 0, 1.0, 5.0), (64.0, "F", 0, 3.0, 7.0),
        (INF, "D", 0, 0.5, 1.0), (INF, "D", 1, 0.7, 2.0),
    ]
    return pl.DataFrame(rows, schema=["epsilon", "group", "seed", "gap", "nll"], orient="row")


def test_summarize_by_hand(table):
    out = summarize(table, ["gap", "nll"])
    assert list(out) == ["2", "64", "inf"]  # sorted by ε, inf last

    e2 = out["2"]
    assert (e2["n_configs"], e2["n_runs"]) == (3, 5)
    # seed means per config: A 2, B 5, C 10 → mean 17/3, sample std sqrt(98/3 / 2)
    assert e2["gap"]["mean"] == pytest.approx(17 / 3)
    assert e2["gap"]["std_across_configs"] == pytest.approx(math.sqrt(((2 - 17 / 3) ** 2 + (5 - 17 / 3) ** 2 + (10 - 17 / 3) ** 2) / 2))
    assert e2["gap"]["std_across_configs"] == pytest.approx(4.041451884327381)
    assert (e2["gap"]["min"], e2["gap"]["max"]) == (2.0, 10.0)
    # within-config seed std: A sqrt(2), B sqrt(2), C undefined (one seed) → mean sqrt(2)
    assert e2["gap"]["mean_seed_std"] == pytest.approx(math.sqrt(2))
    # nll: config means 11, 20, 30 → mean 61/3; seed stds sqrt(2), 0
    assert e2["nll"]["mean"] == pytest.approx(61 / 3)
    assert e2["nll"]["std_across_configs"] == pytest.approx(math.sqrt(((11 - 61 / 3) ** 2 + (20 - 61 / 3) ** 2 + (30 - 61 / 3) ** 2) / 2))
    assert e2["nll"]["mean_seed_std"] == pytest.approx(math.sqrt(2) / 2)

    e64 = out["64"]
    assert (e64["n_configs"], e64["n_runs"]) == (2, 2)
    assert e64["gap"]["mean"] == pytest.approx(2.0)
    assert e64["gap"]["std_across_configs"] == pytest.approx(math.sqrt(2))
    assert e64["gap"]["mean_seed_std"] is None  # no configuration has two seeds

    einf = out["inf"]
    assert (einf["n_configs"], einf["n_runs"]) == (1, 2)
    assert einf["gap"]["mean"] == pytest.approx(0.6)
    assert einf["gap"]["std_across_configs"] is None  # one configuration: no spread to measure
    assert einf["gap"]["mean_seed_std"] == pytest.approx(math.sqrt(0.02))
    assert einf["nll"]["mean"] == pytest.approx(1.5)


def test_seeds_are_averaged_before_the_std_across_configs(table):
    # pooling runs directly would give a different (wrong) std: guard against that
    pooled = float(table.filter(pl.col("epsilon") == 2.0)["gap"].std())
    assert summarize(table, ["gap"])["2"]["gap"]["std_across_configs"] != pytest.approx(pooled)


def test_absent_score_column_is_skipped_and_named(table, caplog):
    # e.g. ACR switched off (score.acr.enabled: false): the other scores are still summarised, the absent one is named
    with caplog.at_level("WARNING", logger="empriv.analyze"):
        out = summarize(table, ["gap", "vmr_mean"])
    assert "vmr_mean" in caplog.text
    assert "vmr_mean" not in out["2"] and out["2"]["gap"]["mean"] == pytest.approx(17 / 3)


def test_no_score_column_at_all_is_an_error(table):
    with pytest.raises(ValueError, match=r"names no column of the run table \(\['acr_mean', 'vmr_mean'\]\)"):
        summarize(table, ["acr_mean", "vmr_mean"])


def test_format_summary_has_a_row_per_epsilon(table):
    scores = ["gap", "nll"]
    text = format_summary(summarize(table, scores), scores)
    lines = text.splitlines()
    assert lines[0].split() == ["eps", "configs", "gap", "nll"]
    assert set(lines[1].replace(" ", "")) == {"-"}
    rows = {line.split()[0]: line for line in lines[2:5]}
    assert set(rows) == {"2", "64", "inf"}
    assert rows["2"].split()[1] == "3"
    assert "5.667 ± 4.041" in rows["2"] and "20.333 ±" in rows["2"]
    assert "2.000 ± 1.414" in rows["64"]
    assert "0.600" in rows["inf"] and "1.500" in rows["inf"] and "±" not in rows["inf"]  # one config: no std
    assert "seeds averaged first" in lines[-1]
    # columns are aligned
    assert len({len(line) for line in lines[:5]}) == 1


def test_format_summary_missing_values():
    summary = {"8": {"n_configs": 1, "gap": {"mean": None, "std_across_configs": 0.0}}}
    assert "n/a" in format_summary(summary, ["gap"]).splitlines()[2]


# ------------------------------------------------------------------- Fig. 2 groups, Table 8, correlations
def _configs():
    from empriv.analysis.table import config_table

    rows = [(2.0, "A", 0, 1.0), (2.0, "A", 1, 3.0), (2.0, "B", 0, 4.0), (2.0, "B", 1, 6.0), (2.0, "C", 0, 10.0),
            (INF, "D", 0, 0.5)]
    t = pl.DataFrame([{"epsilon": e, "group": g, "seed": s, "gap": y, "batch_size": 64, "steps": 16,
                       "learning_rate": 0.01} for e, g, s, y in rows])
    return config_table(t, ["gap"])


def test_group_std_by_hand():
    from empriv.analysis.variance import group_std

    out = group_std(_configs(), "gap")
    assert [g["group"] for g in out] == [{"epsilon": "2"}, {"epsilon": "inf"}]
    assert sorted(out[0]["values"]) == [2.0, 5.0, 10.0]
    assert out[0]["std"] == pytest.approx(4.041451884327381)
    assert out[1]["std"] is None and out[1]["n_configs"] == 1


def test_seed_vs_configuration_by_hand():
    from empriv.analysis.variance import seed_vs_configuration

    out = seed_vs_configuration(_configs(), "gap")
    assert out["2"]["randomness"] == pytest.approx(math.sqrt(2))  # A, B: sqrt(2) each; C has one seed
    assert out["2"]["hyperparameter"] == pytest.approx(4.041451884327381)
    assert out["2"]["n_configs_with_seed_std"] == 2
    assert out["2"]["ratio"] == pytest.approx(4.041451884327381 / math.sqrt(2)) and out["2"]["ratio_reason"] is None
    assert (out["2"]["n_seeds_min"], out["2"]["n_seeds_max"], out["2"]["n_runs"]) == (1, 2, 5)
    assert out["inf"] == {"randomness": None, "hyperparameter": None, "n_configs": 1, "n_configs_with_seed_std": 0,
                          "n_configs_without_value": 0, "ratio": None,
                          "ratio_reason": "1 configuration(s) with a value: no std across configurations",
                          "n_seeds_min": 1, "n_seeds_max": 1, "n_runs": 1}


def test_spearman_correlations():
    from scipy.stats import spearmanr

    from empriv.analysis.variance import spearman_correlations

    t = pl.DataFrame({"epsilon": [8.0] * 5, "audit_eps_lb_95": [0.1, 0.4, 0.3, 0.9, 0.5], "y": [1.0, 2.0, 3.0, 4.0, 5.0],
                      "zero": [0.0] * 5})
    out = spearman_correlations(t, ["audit_eps_lb_95", "y", "zero", "absent"])
    ref = spearmanr([0.1, 0.4, 0.3, 0.9, 0.5], [1, 2, 3, 4, 5])
    assert out["8"]["audit_eps_lb_95~y"]["rho"] == pytest.approx(ref.statistic)
    assert out["8"]["audit_eps_lb_95~y"]["p"] == pytest.approx(ref.pvalue)
    assert out["8"]["y~zero"]["rho"] is None  # constant column
    assert not any("absent" in k for k in out["8"])


def test_equal_configuration_means_have_exactly_zero_std():
    # 0.889 eight times: the mean's rounding residue must not show up as a spread of ~2e-16
    t = pl.DataFrame({"epsilon": [2.0] * 8, "group": list("ABCDEFGH"), "seed": [0] * 8, "acr": [8 / 9] * 8})
    assert summarize(t, ["acr"])["2"]["acr"]["std_across_configs"] == 0.0
    from empriv.analysis.variance import group_std

    assert group_std(t, "acr")[0]["std"] == 0.0


# ------------------------------------------------------------- censored ACR: null = no value, never 0
@pytest.fixture
def acr_runs():
    """ACR over successes is null where no search succeeded; success rate is defined for every searched run."""
    rows = [
        # epsilon, group, seed, acr_mean (over successes), acr_success_rate, n_searched, n_success
        (2.0, "A", 0, None, 0.0, 9, 0), (2.0, "A", 1, None, 0.0, 9, 0),
        (2.0, "B", 0, None, 0.0, 9, 0), (2.0, "B", 1, None, 0.0, 9, 0),
        (INF, "C", 0, 2.6, 1 / 9, 9, 1), (INF, "C", 1, None, 0.0, 9, 0),
        (INF, "D", 0, 2.0, 2 / 9, 9, 2), (INF, "D", 1, 3.0, 1 / 9, 9, 1),
        (INF, "E", 0, None, 0.0, 9, 0), (INF, "E", 1, None, None, None, None),  # seed 1 of E: ACR not run
    ]
    return pl.DataFrame(rows, schema={"epsilon": pl.Float64, "group": pl.String, "seed": pl.Int64, "acr_mean": pl.Float64,
                                      "acr_success_rate": pl.Float64, "acr_n_searched": pl.Float64,
                                      "acr_n_success": pl.Float64}, orient="row")


def test_summarize_leaves_null_acr_out(acr_runs):
    out = summarize(acr_runs, ["acr_mean", "acr_success_rate"])
    e2, einf = out["2"], out["inf"]
    # ε = 2: no configuration has an ACR value — none, not 0
    assert e2["acr_mean"]["mean"] is None and e2["acr_mean"]["n_configs_with_value"] == 0
    assert e2["acr_mean"]["n_runs_with_value"] == 0
    assert e2["acr_success_rate"]["mean"] == 0.0 and e2["acr_success_rate"]["n_configs_with_value"] == 2
    # ε = ∞: seed means over the seeds with a value: C = 2.6 (seed 1 has none), D = 2.5, E none
    assert einf["acr_mean"]["mean"] == pytest.approx((2.6 + 2.5) / 2)
    assert einf["acr_mean"]["std_across_configs"] == pytest.approx(math.sqrt(2) * 0.05)  # std of {2.6, 2.5}
    assert einf["acr_mean"]["n_configs_with_value"] == 2 and einf["acr_mean"]["n_runs_with_value"] == 3
    assert einf["acr_mean"]["mean_seed_std"] == pytest.approx(math.sqrt(0.5))  # D only: std of {2, 3}
    # success rate: C = 1/18, D = 3/18, E = 0 (its seed 1 did not search)
    assert einf["acr_success_rate"]["mean"] == pytest.approx((1 / 18 + 3 / 18 + 0) / 3)
    # pooled search counts: 4 successes in 5 searched runs × 9 secrets
    assert einf["acr_searches"] == {"n_runs": 5, "n_searched": 45, "n_success": 4, "success_rate": pytest.approx(4 / 45)}
    assert e2["acr_searches"] == {"n_runs": 4, "n_searched": 36, "n_success": 0, "success_rate": 0.0}


def test_format_summary_names_acr_over_successes_with_n(acr_runs):
    scores = ["acr_mean", "acr_success_rate"]
    text = format_summary(summarize(acr_runs, scores), scores)
    lines = text.splitlines()
    assert "acr_mean over successes" in lines[0] and "acr_success_rate" in lines[0]
    rows = {line.split()[0]: line for line in lines[2:4]}
    assert "none (n=0)" in rows["2"] and "0.000 ± 0.000" in rows["2"]  # no value vs a measured rate of 0
    assert "2.550 ± 0.071 [0.707] (n=2/3)" in rows["inf"]
    # one line per ε; no rare secret in these runs (no acr_rare_* column): the counts are not split
    assert lines[5:7] == ["ACR at ε = 2: 0/36 found (4 runs)", "ACR at ε = inf: 4/45 found (5 runs)"]
    assert "acr_mean/acr_max are over the successes only" in lines[7] and "rare" not in text
    assert len({len(line) for line in lines[:4]}) == 1


def test_group_statistics_skip_configurations_without_a_value(acr_runs):
    from empriv.analysis.table import config_table
    from empriv.analysis.variance import group_std, seed_vs_configuration

    t = acr_runs.with_columns(pl.lit(64).alias("batch_size"), pl.lit(16).alias("steps"), pl.lit(0.01).alias("learning_rate"))
    configs = config_table(t, ["acr_mean"])
    g = {tuple(x["group"].values()): x for x in group_std(configs, "acr_mean")}
    assert g[("2",)]["n_configs"] == 0 and g[("2",)]["n_configs_without_value"] == 2 and g[("2",)]["mean"] is None
    assert g[("inf",)]["values"] == pytest.approx([2.6, 2.5]) and g[("inf",)]["configs"] == ["C", "D"]
    assert g[("inf",)]["n_configs_without_value"] == 1 and g[("inf",)]["std"] == pytest.approx(0.0707106781)
    svc = seed_vs_configuration(configs, "acr_mean")
    assert svc["inf"]["hyperparameter"] == pytest.approx(0.0707106781) and svc["inf"]["randomness"] == pytest.approx(math.sqrt(0.5))
    assert (svc["inf"]["n_configs"], svc["inf"]["n_configs_without_value"]) == (2, 1)
    assert svc["2"] == {"randomness": None, "hyperparameter": None, "n_configs": 0, "n_configs_with_seed_std": 0,
                        "n_configs_without_value": 2, "ratio": None,
                        "ratio_reason": "0 configuration(s) with a value: no std across configurations",
                        "n_seeds_min": None, "n_seeds_max": None, "n_runs": 0}


# ------------------------------------------------------------------- Table 8 by hand: 2 ε × 4 configurations × 2 seeds
TABLE8_RUNS = {  # (ε, b, T) → the two seeds' scores
    (2.0, 64, 16): (1.0, 2.0), (2.0, 64, 32): (2.0, 4.0), (2.0, 128, 16): (3.0, 3.0), (2.0, 128, 32): (6.0, 7.0),
    (8.0, 64, 16): (1.0, 1.0), (8.0, 64, 32): (5.0, 9.0), (8.0, 128, 16): (2.0, 4.0), (8.0, 128, 32): (10.0, 10.0)}


def _table8_frame(seeds=(0, 1)):
    from empriv.analysis.table import config_table

    rows = [{"epsilon": e, "group": f"eps{e:g}-b{b}-T{t}", "batch_size": b, "steps": t, "learning_rate": 0.01,
             "seed": s, "y": ys[s]} for (e, b, t), ys in TABLE8_RUNS.items() for s in seeds]
    return config_table(pl.DataFrame(rows), ["y"])


def test_table8_by_hand():
    from empriv.analysis.variance import seed_vs_configuration

    out = seed_vs_configuration(_table8_frame(), "y")
    # ε = 2: means 1.5, 3, 3, 6.5 (mean 3.5): var = (4 + .25 + .25 + 9) / 3 = 4.5; seed stds |Δ|/√2: 1, 2, 0, 1 → 1/√2 each
    assert out["2"]["hyperparameter"] == pytest.approx(math.sqrt(4.5))
    assert out["2"]["randomness"] == pytest.approx((1 + 2 + 0 + 1) / 4 / math.sqrt(2))
    assert out["2"]["ratio"] == pytest.approx(math.sqrt(4.5) / (1 / math.sqrt(2)))  # 3.0
    # ε = 8: means 1, 7, 3, 10 (mean 5.25): var = (18.0625 + 3.0625 + 5.0625 + 22.5625) / 3 = 16.25; seed stds 0, 4, 2, 0
    assert out["8"]["hyperparameter"] == pytest.approx(math.sqrt(16.25))
    assert out["8"]["randomness"] == pytest.approx(6 / 4 / math.sqrt(2))
    assert out["8"]["ratio"] == pytest.approx(math.sqrt(16.25) / (6 / 4 / math.sqrt(2)))
    for e in ("2", "8"):
        assert (out[e]["n_configs"], out[e]["n_seeds_min"], out[e]["n_seeds_max"], out[e]["n_runs"]) == (4, 2, 2, 8)
        assert out[e]["ratio_reason"] is None


def test_table8_kept_and_all():
    import polars as pl

    from empriv.analysis.variance import table8

    every = _table8_frame()
    kept = every.filter(~pl.col("group").is_in(["eps2-b64-T16", "eps8-b64-T16"]))
    t = table8(kept, "y", configs_all=every)
    assert t["score"] == "y" and list(t["per_epsilon"]) == ["2", "8"]
    d = t["per_epsilon"]["2"]
    # kept at ε = 2: means 3, 3, 6.5 → std √(4.0833…); seed stds √2, 0, 1/√2
    assert d["hyperparameter"] == pytest.approx(float(np.std([3.0, 3.0, 6.5], ddof=1)))
    assert d["randomness"] == pytest.approx((math.sqrt(2) + 0 + 1 / math.sqrt(2)) / 3)
    assert d["n_configs"] == 3 and d["all"]["n_configs"] == 4
    assert d["all"]["ratio"] == pytest.approx(3.0)
    assert table8(kept, None) == {}
    # an ε that the retention rule emptied still has its 'all' numbers
    t = table8(kept.filter(pl.col("epsilon") == 2.0), "y", configs_all=every)
    assert t["per_epsilon"]["8"]["n_configs"] == 0 and t["per_epsilon"]["8"]["ratio"] is None
    assert t["per_epsilon"]["8"]["all"]["n_configs"] == 4


def test_table8_degrades_gracefully():
    import polars as pl

    from empriv.analysis.variance import seed_vs_configuration

    one_seed = seed_vs_configuration(_table8_frame(seeds=(0,)), "y")
    assert one_seed["2"]["randomness"] is None and one_seed["2"]["ratio"] is None
    assert one_seed["2"]["ratio_reason"] == "one seed per configuration: no std across seeds"
    assert one_seed["2"]["hyperparameter"] is not None and one_seed["2"]["n_seeds_max"] == 1
    constant = _table8_frame().with_columns(pl.lit(0.0).alias("y"), pl.lit(0.0).alias("y__seed_std"))
    c = seed_vs_configuration(constant, "y")["8"]
    assert (c["hyperparameter"], c["randomness"], c["ratio"]) == (0.0, 0.0, None)
    assert c["ratio_reason"] == "the score is constant (both standard deviations are 0)"
    flat_seeds = _table8_frame().with_columns(pl.lit(0.0).alias("y__seed_std"))
    assert seed_vs_configuration(flat_seeds, "y")["2"]["ratio_reason"].startswith("the std across seeds is 0")


def test_summary_prints_table8_per_epsilon():
    from empriv.analysis.variance import format_summary_record, format_table8, table8

    every = _table8_frame()
    t = table8(every, "y", configs_all=every)
    lines = format_table8(t).splitlines()
    assert len(lines) == 2
    assert lines[0] == ("ε = 2: configuration vs seed std of y: 2.121 vs 0.707 (ratio 3.00) over the 4 configuration(s) "
                        "kept by the retention rule (2 seeds each); all 4 configurations: 2.121 vs 0.707 (ratio 3.00)")
    one = table8(_table8_frame(seeds=(0,)), "y")
    assert format_table8(one).splitlines()[0].endswith(
        "(ratio n/a: one seed per configuration: no std across seeds) over the 4 configuration(s) kept by the "
        "retention rule (1 seed each)")
    one = table8(_table8_frame(seeds=(0,)), "y", configs_all=_table8_frame(seeds=(0,)))
    assert format_table8(one).splitlines()[0].endswith("; all 4 configurations: 2.160 vs n/a (ratio n/a)")  # said once
    # `empriv summary`: the lines follow the table when the record has them; an older record prints as before
    from analysis_tables import make_run_table

    from empriv.analysis.variance import summary_record

    record = summary_record(make_run_table(), ["exposure_gap_mean"])
    before = format_summary_record(record)
    record["table8"] = t
    after = format_summary_record(record)
    assert after.startswith(before.split("\n\n")[0]) and after.endswith(lines[1])
    assert "configuration vs seed std" not in before


def test_format_summary_says_which_epsilons_were_not_searched(acr_runs):
    """An ε whose runs are outside score.acr.epsilons shows 'not searched', not a missing entry or 0/0."""
    scores = ["acr_mean", "acr_success_rate"]
    no_search_at_2 = acr_runs.with_columns(
        pl.when(pl.col("epsilon") == 2.0).then(None).otherwise(pl.col(c)).alias(c)
        for c in ("acr_n_searched", "acr_n_success", "acr_success_rate"))
    lines = format_summary(summarize(no_search_at_2, scores), scores).splitlines()
    assert lines[5:7] == ["ACR at ε = 2: not searched", "ACR at ε = inf: 4/45 found (5 runs)"]
    assert "'not searched': no run of that ε is in score.acr.epsilons / training_seeds" in lines[-1]


def test_summary_pools_frequent_and_rare_searches_apart(acr_runs):
    """acr_searches stays the pooled count of the acr_n_* columns (the frequent secrets since the split);
    acr_rare_searches pools acr_rare_n_*, and the per-ε lines give both."""
    scores = ["acr_mean", "acr_success_rate"]
    # every searched run also searched 3 rare secrets; one ε = inf run found one of them
    t = acr_runs.with_columns(
        pl.when(pl.col("acr_n_searched").is_not_null()).then(3.0).alias("acr_rare_n_searched"),
        pl.when(pl.col("acr_n_searched").is_null()).then(None)
        .when((pl.col("group") == "D") & (pl.col("seed") == 1)).then(1.0).otherwise(0.0).alias("acr_rare_n_success"))
    out = summarize(t, scores)
    assert out["inf"]["acr_searches"] == {"n_runs": 5, "n_searched": 45, "n_success": 4, "success_rate": pytest.approx(4 / 45)}
    assert out["inf"]["acr_rare_searches"] == {"n_runs": 5, "n_searched": 15, "n_success": 1,
                                               "success_rate": pytest.approx(1 / 15)}
    assert out["2"]["acr_rare_searches"] == {"n_runs": 4, "n_searched": 12, "n_success": 0, "success_rate": 0.0}
    lines = format_summary(out, scores).splitlines()
    assert lines[5:7] == ["ACR at ε = 2: frequent secrets 0/36 found (4 runs); rare 0/12 found (4 runs)",
                          "ACR at ε = inf: frequent secrets 4/45 found (5 runs); rare 1/15 found (5 runs)"]
    # only rare secrets searched at ε = 2: the frequent group says 'not searched', not 0/0
    only_rare = t.with_columns(pl.when(pl.col("epsilon") == 2.0).then(None).otherwise(pl.col(c)).alias(c)
                               for c in ("acr_n_searched", "acr_n_success"))
    assert format_summary(summarize(only_rare, scores), scores).splitlines()[5] == (
        "ACR at ε = 2: frequent secrets not searched; rare 0/12 found (4 runs)")


def test_summary_record_prints_acr_by_secret_frequency():
    """With acr_by_frequency (the analyze stage adds it), a line per ε from it and the table by secret."""
    from analysis_tables import make_run_table

    from empriv.analysis.acr_frequency import acr_by_frequency
    from empriv.analysis.variance import format_summary_record, summary_record

    def row(sid, frequency, acr=None):
        return {"id": sid, "kind": "phone_block", "occurrences": round(frequency * 3000), "frequency": frequency,
                "acr_success": acr is not None, "acr": acr, "acr_upper_bound": None if acr else 2.0}

    records = [{"epsilon": 8, "per_secret": [row("secret-00", 0.08, 3.0), row("secret-01", 0.04, 2.5),
                                             row("secret-07", 0.002), row("secret-08", 0.001)]},
               {"epsilon": 8, "per_secret": [row("secret-00", 0.08, 3.5), row("secret-01", 0.04),
                                             row("secret-07", 0.002), row("secret-08", 0.001)]}]
    record = summary_record(make_run_table(), ["exposure_gap_mean"])
    assert "ACR at" not in format_summary_record(record)  # no ACR column, no record of searches: no line
    record["acr_by_frequency"] = acr_by_frequency(records)
    text = format_summary_record(record)
    lines = text.splitlines()
    assert "ACR at ε = 2: not searched" in lines and "ACR at ε = inf: not searched" in lines
    assert ("ACR at ε = 8, 2 runs: frequent secrets (≥ 4 %, 2 secrets) 3/4 found, ACR 3.00; "
            "rare (≤ 0.2 %, 2 secrets) 0/4 found") in lines
    table = text.split("ACR by secret frequency")[1].splitlines()
    assert table[2].split() == ["secret", "kind", "records", "frequency", "group", "ε", "=", "8"]
    assert table[4].split() == ["secret-00", "phone_block", "240", "8", "%", "frequent", "2/2", "3.25"]
    assert table[7].split() == ["secret-08", "phone_block", "3", "0.1", "%", "rare", "0/2"]
    acr_part = lines[next(i for i, line in enumerate(lines) if line.startswith("ACR at")):]
    assert len(acr_part) == 3 + 3 + 1 + 2 + 2 + 4 + 2 and max(len(line) for line in acr_part) <= 140
