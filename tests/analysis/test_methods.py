"""Adaptation methods through the analysis: grouping keys of the summary, the DVC metrics and the analysis, the
per-method comparison's numbers, and that a table with one method gives exactly the outputs it gave before."""

from __future__ import annotations

import json
import math

import polars as pl
import pytest
from analysis_tables import make_method_table, make_run_table

from empriv.analysis.metrics import analysis_metrics, summary_metrics, summary_metrics_by_unit
from empriv.analysis.stage import compute_analysis
from empriv.analysis.variance import format_summary_record, summarize, summary_record

SCORES = ["exposure_gap_mean", "vmr_mean"]


def run(table, **kw):
    kw.setdefault("privacy_scores", SCORES)
    kw.setdefault("monte_carlo_trials", 50)
    kw.setdefault("base_utility", None)
    return compute_analysis(table, **kw)


@pytest.fixture(scope="module")
def one_method():
    return make_run_table().with_columns(pl.lit("full").alias("method"), pl.lit(1000).alias("trainable_parameters"))


@pytest.fixture(scope="module")
def two_methods():
    return make_method_table(("lora", "full"))  # listed lora first: full is still the main method


def test_one_method_adds_no_key_anywhere(one_method):
    plain = make_run_table()
    a1, _ = run(one_method)
    a0, _ = run(plain)
    assert "methods" not in a1 and "n_runs_all_methods" not in a1
    assert a1["variance"] == a0["variance"] and a1["selection"] == a0["selection"]
    assert analysis_metrics(a1) == analysis_metrics(a0)
    s1 = summary_metrics_by_unit(one_method, SCORES, "test_nll", 1.7)
    assert s1 == summary_metrics(plain, SCORES, "test_nll", 1.7)
    assert set(s1) == {"n_runs", "n_configs", "base_test_nll", "eps2", "eps8", "epsinf"}
    rec = summary_record(one_method, SCORES)
    assert set(rec) == {"scores", "per_epsilon", "n_runs"} and rec["per_epsilon"] == summarize(plain, SCORES)


def test_summary_metrics_key_each_method_after_epsilon(two_methods):
    s = summary_metrics_by_unit(two_methods, SCORES, "test_nll", None)
    assert {k for k in s if k.startswith("eps")} == {"eps2", "eps8", "epsinf", "eps2-lora", "eps8-lora", "epsinf-lora"}
    full = two_methods.filter(pl.col("method") == "full")
    lora = two_methods.filter(pl.col("method") == "lora")
    assert s["eps8"] == summary_metrics(full, SCORES, "test_nll", None)["eps8"]
    assert s["eps8-lora"] == summary_metrics(lora, SCORES, "test_nll", None)["eps8"]
    assert s["n_runs"] == 96 and s["n_configs"] == 48
    # lora memorises half as much in the constructed table: its worst configuration mean, by hand
    want = lora.filter(pl.col("epsilon") == 8.0).group_by("group").agg(pl.col("exposure_gap_mean").mean())
    assert s["eps8-lora"]["exposure_gap_mean"]["worst"] == pytest.approx(want["exposure_gap_mean"].max())
    # methods and units together: eps8-<unit>-<method> for the pair that is neither main
    units = pl.concat([two_methods.with_columns(pl.lit("record").alias("unit")), two_methods.with_columns(pl.lit("group-k5-random").alias("unit"),
                                                             (pl.col("group") + "-g").alias("group"))])
    keys = {k for k in summary_metrics_by_unit(units, SCORES, "test_nll", None) if k.startswith("eps8")}
    assert keys == {"eps8", "eps8-lora", "eps8-group-k5-random", "eps8-group-k5-random-lora"}


def test_summary_record_by_method(two_methods):
    rec = summary_record(two_methods, SCORES)
    assert rec["method"] == "full" and list(rec["by_method"]) == ["full", "lora"]
    assert rec["n_runs"] == 48 and rec["n_runs_all_methods"] == 96
    assert rec["per_epsilon"] == rec["by_method"]["full"]
    lora8 = rec["by_method"]["lora"]["8"]["exposure_gap_mean"]
    want = (two_methods.filter((pl.col("method") == "lora") & (pl.col("epsilon") == 8.0))
            .group_by("group").agg(pl.col("exposure_gap_mean").mean())["exposure_gap_mean"])
    assert lora8["mean"] == pytest.approx(want.mean()) and lora8["std_across_configs"] == pytest.approx(want.std())
    text = format_summary_record(rec)
    assert text.startswith("[method full]") and "[method lora]" in text and text.count("eps  configs") == 2


def test_analysis_groups_variance_by_epsilon_and_method(two_methods):
    a, configs = run(two_methods)
    assert set(configs["method"].unique().to_list()) == {"full"}  # the research's statistics: the main method
    assert a["n_runs"] == 48 and a["n_runs_all_methods"] == 96
    assert any(n.startswith("adaptation methods full, lora") for n in a["notes"])
    groups = a["variance"]["exposure_gap_mean"]
    assert [(g["group"]["epsilon"], g["group"]["method"]) for g in groups] == [
        ("2", "full"), ("2", "lora"), ("8", "full"), ("8", "lora"), ("inf", "full"), ("inf", "lora")]
    lora8 = next(g for g in groups if g["group"] == {"epsilon": "8", "method": "lora"})
    want = (two_methods.filter((pl.col("method") == "lora") & (pl.col("epsilon") == 8.0))
            .group_by("group").agg(pl.col("exposure_gap_mean").mean())["exposure_gap_mean"])
    assert lora8["n_configs"] == 8 and lora8["std"] == pytest.approx(want.std())
    m = a["methods"]
    assert m["main"] == "full" and m["methods"] == ["full", "lora"] and len(m["points"]) == 48
    row = next(r for r in m["table"] if r["epsilon"] == "8" and r["method"] == "lora")
    assert row["n_configs"] == 8 and row["n_kept"] == 8 and row["trainable_parameters"] == 1000
    assert row["primary_mean"] == pytest.approx(want.mean()) and row["primary_std"] == pytest.approx(want.std())
    nll = (two_methods.filter((pl.col("method") == "lora") & (pl.col("epsilon") == 8.0))
           .group_by("group").agg(pl.col("test_nll").mean())["test_nll"])
    assert row["utility_best"] == pytest.approx(nll.min()) and row["utility_mean"] == pytest.approx(nll.mean())
    sv = m["seed_vs_configuration"]["lora"]["exposure_gap_mean"]["8"]
    assert sv["hyperparameter"] == pytest.approx(want.std())
    # the compact metrics: Table 8's two stds of the other method under eps8-lora, nothing else new
    am = analysis_metrics(a)
    per = am["exposure_gap_mean"]
    assert set(per) == {"eps2", "eps8", "epsinf", "eps2-lora", "eps8-lora", "epsinf-lora"}
    assert per["eps8-lora"] == {"std_configs": pytest.approx(want.std()), "std_seeds": sv["randomness"]}
    assert "audit_spread" not in am
    json.dumps(am, allow_nan=False)


def test_retention_per_method_keeps_a_weaker_method(two_methods):
    """lora is 0.3 nats worse everywhere: one threshold over both methods would drop all of it; per method it keeps
    its own best configurations."""
    a, configs = run(two_methods, base_utility=2.0)
    ret = a["methods"]["retention"]["lora"]["8"]
    assert ret["applied"] and ret["n_kept"] >= 1
    lora = two_methods.filter((pl.col("method") == "lora") & (pl.col("epsilon") == 8.0))
    best = lora.group_by("group").agg(pl.col("test_nll").mean())["test_nll"].min()
    assert ret["threshold"] == pytest.approx(2.0 - 0.9 * (2.0 - best))
    kept = [p for p in a["methods"]["points"] if p["method"] == "lora" and p["epsilon"] == "8" and p["kept"]]
    assert len(kept) == ret["n_kept"] and all(p["utility"] <= ret["threshold"] + 1e-12 for p in kept)


def test_method_figure_and_report_section(two_methods, tmp_path):
    from empriv.analysis.figures import make_figures, write_plot_data
    from empriv.analysis.report import render_html

    a, configs = run(two_methods)
    figs = make_figures(a, configs, tmp_path)
    assert figs["methods"].stat().st_size > 1000 and "audit_spread" not in figs
    write_plot_data(a, configs, tmp_path)
    rows = (tmp_path / "variance.csv").read_text(encoding="utf-8").splitlines()
    assert any(",ε=8 · lora," in r for r in rows)
    html = render_html(a, figs, cube={"epsilon": [2, 8, math.inf]}, params={}, assumptions=[],
                       run_rows=(two_methods.columns, [list(r) for r in two_methods.iter_rows()]))
    assert "<h2>Adaptation methods</h2>" in html and "primary score versus utility per adaptation method" in html
    section = html.split("<h2>Adaptation methods</h2>")[1].split("<h2>")[0]
    assert section.count("<tr>") >= 1 + 6  # header + one row per ε and method


def test_cli_select_needs_a_method(two_methods, tmp_path, capsys):
    from empriv.cli import main

    path = tmp_path / "runs.csv"
    two_methods.write_csv(path)
    assert main(["analyze", "select", "--runs", str(path), "--score", "exposure_gap_mean", "--epsilon", "8"]) == 2
    assert "several methods ['lora', 'full']: choose one with --method" in capsys.readouterr().err
    assert main(["analyze", "select", "--runs", str(path), "--score", "exposure_gap_mean", "--epsilon", "8",
                 "--method", "lora", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["method"] == "lora" and res["n_pool"] == 8
    assert main(["analyze", "select", "--runs", str(path), "--score", "exposure_gap_mean", "--epsilon", "8",
                 "--method", "prefix"]) == 2
    assert "--method prefix is not in the table" in capsys.readouterr().err
