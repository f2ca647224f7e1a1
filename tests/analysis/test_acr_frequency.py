"""empriv.analysis.acr_frequency: ACR per ε and secret frequency from the runs' score records (frequent and rare
secrets apart, failed searches counted but never averaged)."""

from __future__ import annotations

import csv

import pytest

from empriv.analysis.acr_frequency import PLOT_HEADER, acr_by_frequency, epsilon_lines, plot_rows, secret_table

# id → (kind, occurrences, frequency) of the secrets of a 3000-record training split
SECRETS = {"secret-00": ("phone_block", 240, 0.08), "secret-04": ("named_email", 120, 0.04),
           "secret-05": ("forwarded_by", 30, 0.01), "secret-08": ("address_list", 3, 0.001)}


def _row(sid: str, acr: float | None = None, searched: bool = True) -> dict:
    kind, occurrences, frequency = SECRETS[sid]
    row = {"id": sid, "kind": kind, "occurrences": occurrences, "frequency": frequency, "vmr": 0.0}
    if searched:
        row.update(acr_success=acr is not None, acr=acr, acr_upper_bound=None if acr is not None else 1.7)
    return row


def _record(eps, seed: int, rows: list[dict], rare_frequency: float | None = 0.01) -> dict:
    protocol = {"ran": any("acr_success" in r for r in rows)}
    if rare_frequency is not None:
        protocol["rare_frequency"] = rare_frequency
    return {"epsilon": eps, "seed": seed, "config": f"eps{eps}-b8-T1-lr0.01-s{seed}", "acr_protocol": protocol,
            "per_secret": rows}


@pytest.fixture
def records() -> list[dict]:
    return [
        # ε = 8, two seeds: the frequent secrets found (but one failure), the rare ones not
        _record(8, 0, [_row("secret-08"), _row("secret-00", 3.0), _row("secret-05"), _row("secret-04", 2.0)]),
        _record(8, 1, [_row("secret-08"), _row("secret-00", 4.0), _row("secret-05"), _row("secret-04")]),
        # ε = inf (written as the score stage writes it): one rare secret found, one frequent not searched
        _record("inf", 0, [_row("secret-08", 1.5), _row("secret-00", 6.0), _row("secret-05"),
                           _row("secret-04", searched=False)]),
        # ε = 2: nothing searched
        _record(2, 0, [_row(s, searched=False) for s in SECRETS]),
    ]


def test_per_secret_and_group_numbers_per_epsilon(records):
    r = acr_by_frequency(records)
    assert r["rare_frequency"] == 0.01 and r["epsilons"] == ["2", "8", "inf"]
    # every secret searched somewhere, by frequency, highest first; 0.01 itself is rare
    assert [(s["id"], s["rare"]) for s in r["secrets"]] == [("secret-00", False), ("secret-04", False),
                                                            ("secret-05", True), ("secret-08", True)]
    assert r["secrets"][3] == {"id": "secret-08", "kind": "address_list", "occurrences": 3, "frequency": 0.001,
                               "rare": True}
    e8 = r["per_epsilon"]["8"]
    assert (e8["n_runs"], e8["n_runs_searched"]) == (2, 2)
    by_id = {s["id"]: s for s in e8["secrets"]}
    assert [s["id"] for s in e8["secrets"]] == ["secret-00", "secret-04", "secret-05", "secret-08"]
    assert (by_id["secret-00"]["n_searched"], by_id["secret-00"]["n_success"]) == (2, 2)
    assert by_id["secret-00"]["acr_mean_over_successes"] == pytest.approx(3.5)
    # one success, one failure: the failure's bound (1.7) is not averaged in
    assert by_id["secret-04"]["success_rate"] == 0.5 and by_id["secret-04"]["acr_mean_over_successes"] == 2.0
    assert by_id["secret-05"]["n_success"] == 0 and by_id["secret-05"]["acr_mean_over_successes"] is None
    assert e8["frequent"] == {"n_secrets": 2, "n_searched": 4, "n_success": 3, "success_rate": 0.75,
                              "acr_mean": pytest.approx(3.0), "min_frequency": 0.04, "max_frequency": 0.08}
    assert e8["rare"] == {"n_secrets": 2, "n_searched": 4, "n_success": 0, "success_rate": 0.0, "acr_mean": None,
                          "min_frequency": 0.001, "max_frequency": 0.01}
    einf = r["per_epsilon"]["inf"]
    assert [s["id"] for s in einf["secrets"]] == ["secret-00", "secret-05", "secret-08"]  # secret-04 not searched
    assert (einf["frequent"]["n_searched"], einf["frequent"]["n_success"], einf["frequent"]["acr_mean"]) == (1, 1, 6.0)
    assert (einf["rare"]["n_searched"], einf["rare"]["n_success"], einf["rare"]["acr_mean"]) == (2, 1, 1.5)
    e2 = r["per_epsilon"]["2"]
    assert (e2["n_runs"], e2["n_runs_searched"], e2["secrets"], e2["frequent"], e2["rare"]) == (1, 0, [], None, None)


def test_the_split_comes_from_the_records_or_the_caller(records):
    wider = acr_by_frequency(records, rare_frequency=0.05)  # 4 % is rare now
    assert [s["rare"] for s in wider["secrets"]] == [False, True, True, True]
    assert wider["per_epsilon"]["8"]["frequent"]["n_searched"] == 2
    assert wider["per_epsilon"]["8"]["rare"]["n_success"] == 1
    # the records' own split (here 0.005) when the caller gives none; the default 0.01 when no record names one
    assert acr_by_frequency([{**r, "acr_protocol": {"rare_frequency": 0.005}} for r in records])["rare_frequency"] == 0.005
    older = [{k: v for k, v in r.items() if k != "acr_protocol"} for r in records]
    assert acr_by_frequency(older)["rare_frequency"] == 0.01
    mixed = [records[0], {**records[1], "acr_protocol": {"rare_frequency": 0.02}}]
    with pytest.raises(ValueError, match=r"different score\.acr\.rare_frequency values \[0\.01, 0\.02\]"):
        acr_by_frequency(mixed)
    with pytest.raises(ValueError, match=r"rare_frequency must be a number in \[0, 1\), got 2"):
        acr_by_frequency(records, rare_frequency=2)


def test_unknown_frequency_is_frequent_and_sorted_last():
    rows = [{"id": "x", "acr_success": True, "acr": 2.0}, {"id": "y", "occurrences": 3, "acr_success": False, "acr": None},
            {"id": "z", "frequency": 0.002, "acr_success": False, "acr": None}]
    r = acr_by_frequency([_record(8, 0, rows)])
    assert [(s["id"], s["frequency"], s["rare"]) for s in r["secrets"]] == [("z", 0.002, True), ("x", None, False),
                                                                            ("y", None, False)]
    g = r["per_epsilon"]["8"]["frequent"]
    assert (g["n_searched"], g["n_success"], g["acr_mean"], g["min_frequency"]) == (2, 1, 2.0, None)
    # with n_train, y's 3 occurrences are 0.001 of the records: rare
    r = acr_by_frequency([_record(8, 0, rows)], n_train=3000)
    assert [(s["id"], s["rare"]) for s in r["secrets"]] == [("z", True), ("y", True), ("x", False)]


def test_summary_lines_table_and_plot_rows(records, tmp_path):
    from empriv.analysis.plotting import write_rows

    r = acr_by_frequency(records)
    lines = epsilon_lines(r, ["2", "8", "inf"])
    assert lines[0] == "ACR at ε = 2: not searched"
    assert lines[1] == ("ACR at ε = 8, 2 runs: frequent secrets (≥ 4 %, 2 secrets) 3/4 found, ACR 3.00; "
                        "rare (≤ 1 %, 2 secrets) 0/4 found")
    assert lines[2] == ("ACR at ε = inf, 1 run: frequent secrets (≥ 8 %, 1 secret) 1/1 found, ACR 6.00; "
                        "rare (≤ 1 %, 2 secrets) 1/2 found, ACR 1.50")
    assert "score.acr.rare_frequency = 1 %" in lines[3] and all(len(line) <= 140 for line in lines)
    header, rows = secret_table(r)
    assert header == ["secret", "kind", "records", "frequency", "group", "ε = 2", "ε = 8", "ε = inf"]
    assert rows[0] == ["secret-00", "phone_block", "240", "8 %", "frequent", "–", "2/2 3.50", "1/1 6.00"]
    assert rows[1][5:] == ["–", "1/2 2.00", "–"] and rows[3][:5] == ["secret-08", "address_list", "3", "0.1 %", "rare"]
    assert rows[4] == ["all frequent", "", "", "≥ 4 %", "frequent", "–", "3/4 3.00", "1/1 6.00"]
    assert rows[5] == ["all rare", "", "", "≤ 1 %", "rare", "–", "0/4", "1/2 1.50"]
    path = write_rows(tmp_path / "acr_by_frequency.csv", PLOT_HEADER, plot_rows(r))
    got = list(csv.DictReader(open(path, encoding="utf-8")))
    assert list(got[0]) == ["epsilon", "secret", "occurrences", "frequency", "rare", "n_searched", "n_success",
                            "success_rate", "acr_mean"]
    assert len(got) == 4 + 3  # ε = 8: four secrets searched, ε = inf: three, ε = 2: none
    assert got[2] == {"epsilon": "8", "secret": "secret-05", "occurrences": "30", "frequency": "0.01", "rare": "1",
                      "n_searched": "2", "n_success": "0", "success_rate": "0.0", "acr_mean": ""}
    assert got[4]["epsilon"] == "inf" and float(got[4]["acr_mean"]) == 6.0


def test_the_plot_data_and_the_report_carry_it(records, tmp_path, runs):
    from empriv.analysis.plot_data import write_plot_data
    from empriv.analysis.report import render_html
    from empriv.analysis.stage import compute_analysis

    a, configs = compute_analysis(runs, privacy_scores=["exposure_gap_mean"], monte_carlo_trials=5, base_utility=2.0)
    html = render_html(a, {}, cube={}, params={}, assumptions=[], run_rows=(runs.columns, []))
    assert "ACR by secret frequency" not in html and not (tmp_path / "acr_by_frequency.csv").exists()
    a["acr_by_frequency"] = acr_by_frequency(records)
    written = write_plot_data(a, configs, tmp_path)
    assert tmp_path / "acr_by_frequency.csv" in written
    html = render_html(a, {}, cube={}, params={}, assumptions=[], run_rows=(runs.columns, []))
    section = html.split('<h2 id="acr-by-frequency">ACR by secret frequency</h2>')[1].split("<h2>")[0]
    assert "not a string repeated in many records" in section and "1 %" in section
    assert section.count("<tr>") == 1 + 4 + 2  # header, four secrets, two group totals
    assert "<td class=\"\">2/2 3.50</td>" in section and "<td class=\"l\">secret-08</td>" in section
