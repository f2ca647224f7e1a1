"""empriv.analysis.adaptation_audit: the adaptation-audit study's records → CSV, summary, figures, DVC plot data and
report section, on a hand-made record tree (missing attacks, optimistic variants, seeds, no pre-training block)."""

from __future__ import annotations

import csv
import json

import pytest

from empriv.analysis.adaptation_audit import analyze_adaptation_audit, read_records, summarize


def write(path, obj):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj))


def record(dataset, method, eps, seed, mia, pretraining=None, **extra):
    rec = {"dataset": dataset, "method": method, "epsilon": eps, "batch_size": 16, "steps": 4, "learning_rate": 0.01,
           "seed": seed, "trainable_parameters": {"full": 1000, "lora": 40}[method], "test_nll": 3.0 - (eps == "inf"),
           "mia": mia, **extra}
    if pretraining is not None:
        rec["pretraining"] = pretraining
    return rec


def point(eps, seed):
    return f"eps{eps}-b16-T4-lr0.01-s{seed}"


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "records" / "adaptation_audit"
    a = lambda auc, t1=None, t01=None: {"auc": auc, "tpr_at_1pct_fpr": t1, "tpr_at_0.1pct_fpr": t01}  # noqa: E731
    # iid, full, ε = 1: two seeds; seed 1 lacks rmia; an optimistic rmia beats everything (never "strongest")
    write(root / "iid/full" / f"{point(1, 0)}.json", record("iid", "full", 1, 0, {
        "loss": a(0.60, 0.02, 0.0), "rmia": a(0.70, 0.05, 0.01), "rmia_optimistic": a(0.90, 0.3, 0.1)},
        {"auc_base": 0.55, "auc_adapted": 0.52, "n_members": 100}))
    write(root / "iid/full" / f"{point(1, 1)}.json", record("iid", "full", 1, 1, {
        "loss": a(0.64, 0.04, 0.0)}, {"auc_base": 0.55, "auc_adapted": 0.50, "proxy": "public split"}))
    write(root / "iid/full" / f"{point('inf', 0)}.json", record("iid", "full", "inf", 0, {
        "loss": a(0.80, 0.2), "zlib": a(0.82), "rmia": a(0.95, 0.6)}, {"auc_base": 0.55, "auc_adapted": 0.58}))
    # iid, lora: no pre-training block
    write(root / "iid/lora" / f"{point(1, 0)}.json", record("iid", "lora", 1, 0, {"rmia": a(0.52, 0.01)}))
    # ood, lora: no attacks at all (the producer failed to run them): one row, attack null
    write(root / "ood/lora" / f"{point(1, 0)}.json", record("ood", "lora", 1, 0, {}, {"auc_base": 0.56}))
    return tmp_path / "records"


def test_rows_one_per_run_and_attack(tree):
    rows = read_records(tree)  # the records directory or records/adaptation_audit: both work
    assert rows == read_records(tree / "adaptation_audit")
    assert len(rows) == 3 + 1 + 3 + 1 + 1
    assert [(r["dataset"], r["method"], r["epsilon_label"], r["seed"], r["attack"]) for r in rows[:4]] == [
        ("iid", "full", "1", 0, "loss"), ("iid", "full", "1", 0, "rmia"), ("iid", "full", "1", 0, "rmia_optimistic"),
        ("iid", "full", "1", 1, "loss")]
    last = rows[-1]
    assert last["dataset"] == "ood" and last["attack"] is None and last["auc"] is None
    assert last["pretraining_auc_base"] == 0.56 and "pretraining_auc_adapted" not in last
    assert rows[3].get("pretraining_proxy") is None  # a descriptive string is not a column
    zlib = next(r for r in rows if r["attack"] == "zlib")
    assert zlib["tpr_at_1pct_fpr"] is None and zlib["epsilon"] == float("inf")


def test_csv_has_a_row_per_run_and_attack_and_a_header_without_records(tree, tmp_path):
    out = tmp_path / "adaptation_audit.csv"
    summary = analyze_adaptation_audit(tree, out)
    with open(out, newline="", encoding="utf-8") as fh:
        table = list(csv.DictReader(fh))
    assert len(table) == 9 and table[0]["attack"] == "loss" and table[0]["pretraining_auc_adapted"] == "0.52"
    assert "pretraining_n_members" in table[0] and table[-1]["auc"] == "" and table[-1]["attack"] == ""
    assert summary["n_runs"] == 5
    empty = tmp_path / "empty.csv"
    assert analyze_adaptation_audit(tmp_path / "nothing", empty) is None
    assert empty.read_text(encoding="utf-8").splitlines()[0].startswith("dataset,method,epsilon,epsilon_label")
    assert len(empty.read_text(encoding="utf-8").splitlines()) == 1


def test_summary_means_strongest_attack_and_pretraining_change(tree):
    s = summarize(read_records(tree))
    assert s["datasets"] == ["iid", "ood"] and s["methods"] == ["full", "lora"] and s["epsilons"] == ["1", "inf"]
    assert s["attacks"] == ["loss", "zlib", "rmia", "rmia_optimistic"] and s["headline_attack"] == "rmia"
    cell = {(c["dataset"], c["method"], c["epsilon"], c["attack"]): c for c in s["cells"]}
    loss = cell[("iid", "full", "1", "loss")]
    assert loss["auc"] == pytest.approx(0.62) and loss["n_runs"] == 2 and loss["auc_std"] == pytest.approx(0.04 / 2 ** 0.5)
    assert loss["tpr_at_1pct_fpr"] == pytest.approx(0.03)
    assert cell[("iid", "full", "1", "rmia")]["n_runs"] == 1  # seed 1 has no rmia: left out, not 0
    strongest = {(r["dataset"], r["method"], r["epsilon"]): r for r in s["strongest"]}
    assert strongest[("iid", "full", "1")]["attack"] == "rmia"  # 0.70 > 0.62; the optimistic 0.90 does not count
    assert strongest[("iid", "full", "inf")]["attack"] == "rmia" and ("ood", "lora", "1") not in strongest
    pre = {(r["dataset"], r["method"], r["epsilon"]): r for r in s["pretraining"]}
    p = pre[("iid", "full", "1")]
    assert p["auc_base"] == pytest.approx(0.55) and p["auc_adapted"] == pytest.approx(0.51)
    assert p["change"] == pytest.approx(-0.04) and p["n_runs"] == 2
    assert ("iid", "lora", "1") not in pre  # no pre-training block
    assert pre[("ood", "lora", "1")]["auc_adapted"] is None and pre[("ood", "lora", "1")]["change"] is None
    util = {(r["dataset"], r["method"], r["epsilon"]): r for r in s["utility"]}
    assert util[("iid", "lora", "1")]["trainable_parameters"] == 40 and util[("iid", "full", "inf")]["test_nll"] == 2.0


def test_bad_records_are_one_line_errors(tmp_path):
    root = tmp_path / "adaptation_audit"
    write(root / "iid/full/x.json", record("iid", "full", -1, 0, {}))
    with pytest.raises(ValueError, match=r"x\.json: epsilon must be a number > 0 or inf, got -1"):
        read_records(root)
    write(root / "iid/full/x.json", record("iid", "full", 1, 0, {"loss": 0.7}))
    with pytest.raises(ValueError, match=r"mia\.loss must be an object of metrics, got float"):
        read_records(root)
    write(root / "iid/full/x.json", record("iid", "full", 1, 0, {"loss": {"auc": "high"}}))
    with pytest.raises(ValueError, match=r"mia\.loss\.auc must be a number, got 'high'"):
        read_records(root)


def test_figures_plot_data_and_report_section(tree, tmp_path):
    from analysis_tables import make_run_table

    from empriv.analysis.figures import make_figures, write_plot_data
    from empriv.analysis.report import render_html
    from empriv.analysis.stage import compute_analysis

    a, configs = compute_analysis(make_run_table(epsilons=(8.0,)), privacy_scores=["exposure_gap_mean"],
                                  monte_carlo_trials=10)
    a["adaptation_audit"] = analyze_adaptation_audit(tree)
    plots = tmp_path / "plots"
    figs = make_figures(a, configs, plots)
    assert figs["adaptation_audit"].stat().st_size > 1000 and figs["adaptation_pretraining"].stat().st_size > 1000
    paths = write_plot_data(a, configs, plots)
    assert paths[-1].name == "adaptation_audit.csv"
    with open(paths[-1], newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == len(a["adaptation_audit"]["cells"]) == 3 + 3 + 1
    inf = [r for r in rows if r["epsilon"] == "inf"]
    assert {r["epsilon_label"] for r in inf} == {"∞"} and {r["attack"] for r in inf} == {"loss", "zlib", "rmia"}
    html = render_html(a, figs, cube={}, params={}, assumptions=[], run_rows=([], []))
    section = html.split("<h2>Auditing private adaptations</h2>")[1].split("<h2>")[0]
    assert "<h3>AUC (rmia)</h3>" in section and "<h3>TPR at 1 % FPR (rmia)</h3>" in section
    # the AUC table: header method, iid ε=1, iid ε=inf, ood ε=1, ood ε=inf; full's iid ε=1 cell is rmia's 0.700
    auc_table = section.split("<h3>AUC (rmia)</h3>")[1].split("</table>")[0]
    assert "iid ε=1" in auc_table and "ood ε=inf" in auc_table and "0.700" in auc_table and "0.950" in auc_table
    assert "Leakage of the pre-training data" in section and "-0.040" in section
    assert section.count("data:image/png;base64,") == 2


def test_the_headline_attack_is_rmia_with_the_shadow_under_the_producers_names(tmp_path):
    """empriv.audit.adaptation names its attacks rmia_shadow, reference_pretrained, …: the headline is shadow RMIA."""
    root = tmp_path / "records" / "adaptation_audit"
    a = {"auc": 0.6, "tpr_at_1pct_fpr": 0.02, "tpr_at_0.1pct_fpr": 0.0}
    write(root / "iid/full" / f"{point(8, 0)}.json", record("iid", "full", 8, 0, {
        "loss": a, "min_k": a, "reference_pretrained": a, "rmia_pretrained": a, "rmia_shadow": a,
        "rmia_shadow_optimistic": {**a, "optimistic": True}}))
    s = summarize(read_records(tmp_path / "records"))
    assert s["headline_attack"] == "rmia_shadow"
    assert s["attacks"].index("reference_pretrained") < s["attacks"].index("rmia_shadow")  # research order kept
