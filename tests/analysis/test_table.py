"""empriv.analysis.table: the run table from metrics files, seed means/stds, the retention rule."""

from __future__ import annotations

import json
import math

import polars as pl
import pytest

from empriv.analysis.table import config_table, read_run_table, retention_filter, run_table, score_records
from empriv.config import ConfigError, parse_params


def params():
    return parse_params({"cube": {"epsilon": [8, "inf"], "batch_size": [32], "steps": [3], "learning_rate": [0.01],
                                  "seed": [0, 1]}})


def write(path, obj):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj))


def test_run_table_takes_every_numeric_score_and_joins_audit(tmp_path):
    p = params()
    for run in p.runs():
        write(tmp_path / "train" / f"{run.file_stem}.json", {"sampler": "poisson", "accountant": "prv", "delta": 1e-4,
                                                          "epsilon_prv": "inf" if not run.private else 7.99})
        score = {"config": run.name, "epsilon": run.epsilon if run.private else "inf", "test_nll": 1.0 + run.seed,
                 "exposure_gap_mean": 2.0, "vmr_mean": 0.0, "acr_mean": 1.5 if run.seed == 0 else None,
                 "vmr_greedy_max": 1, "flag": True, "note": "text", "per_secret": [{"id": "s1", "vmr": 0.0}],
                 "nested": {"x": 1}}
        if run.seed == 0 and run.private:
            score["air_max"] = 0.25  # only one run has it
        write(tmp_path / "score" / f"{run.file_stem}.json", score)
    write(tmp_path / "audit" / "record" / "eps8-b32-T3-lr0.01-s0.json",
          {"audit_eps_lb_95": 0.7, "audit_auc": 0.61, "audit_tpr_at_fpr_0.01": 0.05, "epsilon": 8})
    t = run_table(p, tmp_path / "train", tmp_path / "score", tmp_path / "audit")
    assert t.height == 4
    for col in ("test_nll", "exposure_gap_mean", "acr_mean", "vmr_greedy_max", "air_max", "audit_eps_lb_95",
                "audit_auc", "audit_tpr_at_fpr_0.01"):
        assert col in t.columns and t.schema[col] == pl.Float64, col
    for col in ("flag", "note", "per_secret", "nested"):
        assert col not in t.columns
    assert t["epsilon"].to_list() == [8.0, 8.0, math.inf, math.inf]  # the run's ε, not the score file's
    assert t["acr_mean"].to_list() == [1.5, None, 1.5, None]
    assert t["air_max"].to_list() == [0.25, None, None, None]
    assert t["audit_auc"].to_list() == [0.61, 0.61, None, None]  # the configuration's audit, on each of its seeds
    assert t["exposure_gap_worst"].null_count() == 4  # a known column absent from every file: all null
    assert t["epsilon_prv"].to_list()[2] == math.inf


def test_score_records_are_those_of_the_cube_and_the_named_runs(tmp_path):
    p = params()
    for run in p.runs():
        write(tmp_path / "train" / f"{run.file_stem}.json", {"sampler": "poisson"})
        write(tmp_path / "score" / f"{run.file_stem}.json", {"config": run.name, "seed": run.seed,
                                                          "per_secret": [{"id": "s1", "acr_success": False}]})
    write(tmp_path / "score" / "record" / "eps2-b32-T3-lr0.01-s0.json", {"config": "stale"})  # not in the cube
    got = score_records(p, tmp_path / "train", tmp_path / "score")
    assert sorted(r["config"] for r in got) == sorted(r.name for r in p.runs()) and len(got) == 4
    assert got[0]["per_secret"] == [{"id": "s1", "acr_success": False}]
    t = run_table(p, tmp_path / "train", tmp_path / "score")
    seed0 = set(t.filter(pl.col("seed") == 0)["config"].to_list())
    assert [r["seed"] for r in score_records(p, tmp_path / "train", tmp_path / "score", configs=seed0)] == [0, 0]
    (tmp_path / "train" / f"{p.runs()[0].file_stem}.json").unlink()  # no train record: left out, as run_table would
    assert len(score_records(p, tmp_path / "train", tmp_path / "score")) == 3


def test_run_table_names_missing_runs(tmp_path):
    with pytest.raises(ConfigError, match="missing train/score metrics for 4 configuration"):
        run_table(params(), tmp_path / "train", tmp_path / "score")


def test_read_run_table_round_trip_with_inf(tmp_path):
    t = pl.DataFrame({"epsilon": [2.0, math.inf], "batch_size": [64, 64], "steps": [16, 16],
                      "learning_rate": [0.01, 0.01], "y": [1.0, 2.0]})
    t.write_csv(tmp_path / "runs.csv")
    back = read_run_table(tmp_path / "runs.csv")
    assert back["epsilon"].to_list() == [2.0, math.inf]
    assert back["compute"].to_list() == [1024, 1024] and back["update"].to_list() == pytest.approx([10.24, 10.24])
    assert back["group"].to_list() == ["eps2-b64-T16-lr0.01", "epsinf-b64-T16-lr0.01"]
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['steps'\]"):
        pl.DataFrame({"epsilon": [1.0], "batch_size": [1], "learning_rate": [0.1]}).write_csv(tmp_path / "bad.csv")
        read_run_table(tmp_path / "bad.csv")


def test_config_table_seed_means_and_stds():
    t = pl.DataFrame({"group": ["a", "a", "b"], "epsilon": [8.0] * 3, "batch_size": [64, 64, 128], "steps": [16] * 3,
                      "learning_rate": [0.01] * 3, "seed": [0, 1, 0], "y": [1.0, 3.0, 5.0], "z": [None, 2.0, float("nan")]})
    c = config_table(t, ["y", "z"])
    assert c["group"].to_list() == ["a", "b"]
    assert c["y"].to_list() == [2.0, 5.0]
    assert c["y__seed_std"].to_list()[0] == pytest.approx(math.sqrt(2)) and c["y__seed_std"].to_list()[1] is None
    assert c["z"].to_list() == [2.0, None]  # NaN counts as missing
    assert c["n_seeds"].to_list() == [2, 1]
    assert c["y__n_seeds"].to_list() == [2, 1] and c["z__n_seeds"].to_list() == [1, 0]  # seeds with a value


def test_retention_rule_by_hand():
    c = pl.DataFrame({"epsilon": [8.0] * 4 + [math.inf] * 2, "test_nll": [1.0, 1.05, 1.2, 2.5, 0.5, 0.9],
                      "group": list("abcdef")})
    kept, info = retention_filter(c, base_utility=2.0, fraction=0.9)
    # ε = 8: best gain 2 − 1 = 1 → keep gain ≥ 0.9 ⟺ NLL ≤ 1.1: a, b; ε = inf: best gain 1.5 → NLL ≤ 0.65: e
    assert kept["group"].to_list() == ["a", "b", "e"]
    assert info["8"]["threshold"] == pytest.approx(1.1) and info["8"]["n_kept"] == 2
    assert info["inf"]["threshold"] == pytest.approx(0.65)
    everything, info = retention_filter(c, base_utility=None)
    assert everything.height == 6 and info["8"]["applied"] is False
    kept, info = retention_filter(c, base_utility=0.2)  # nothing improves on the base model
    assert kept.height == 6 and "no configuration improves" in info["8"]["reason"]
    kept, _ = retention_filter(c, base_utility=2.0, fraction=0.0)
    assert kept.height == 6 - 1  # fraction 0: gain ≥ 0 (the NLL 2.5 > base loses utility)
    with pytest.raises(ValueError, match="fraction must be in"):
        retention_filter(c, 2.0, fraction=1.5)


# ------------------------------------------------------------------------------- record layouts and methods
def method_params(methods=("full", "lora"), audit=None):
    raw = {"cube": {"epsilon": [8, "inf"], "batch_size": [32], "steps": [3], "learning_rate": [0.01], "seed": [0, 1],
                    "method": list(methods)}}
    if audit:
        raw["audit"] = {"cube": audit}
    return parse_params(raw)


def test_old_and_new_layouts_are_both_read(tmp_path):
    """full runs written before the method axis (records/<kind>/record/<point>.json, method in the record or
    none), lora runs in the new layout (records/<kind>/record/lora/<point>.json)."""
    p = method_params()
    for run in p.runs():
        point = run.point_name
        if run.method == "full":  # old layout; seed 1's records name no method at all (written before methods)
            where = f"record/{point}.json"
            extra = {"method": "full"} if run.seed == 0 else {}
        else:
            where = f"record/lora/{point}.json"
            extra = {"method": "lora", "trainable_parameters": 1234}
        write(tmp_path / "train" / where, {"sampler": "poisson", **extra})
        write(tmp_path / "score" / where, {"config": run.name, "test_nll": 2.0 + run.seed + (run.method == "lora"),
                                           **({"trainable_parameters": 1234} if run.method == "lora" else {})})
        if run.seed == 0 and run.private:
            write(tmp_path / "audit" / where, {"audit_eps_lb_95": 0.5 if run.method == "full" else 0.25,
                                               "trainable_parameters": 99, "method": run.method})
    t = run_table(p, tmp_path / "train", tmp_path / "score", tmp_path / "audit")
    assert t.height == 8
    assert t["config"].to_list() == [r.name for r in p.runs()]
    assert t["config"].to_list()[0] == "eps8-b32-T3-lr0.01-s0-full"
    assert t["method"].to_list() == [r.method for r in p.runs()]
    assert t["trainable_parameters"].to_list() == [None if r.method == "full" else 1234 for r in p.runs()]
    assert t.schema["trainable_parameters"] == pl.Int64
    # several methods: each method's configurations apart
    assert sorted(set(t["group"].to_list())) == ["eps8-b32-T3-lr0.01-full", "eps8-b32-T3-lr0.01-lora",
                                                 "epsinf-b32-T3-lr0.01-full", "epsinf-b32-T3-lr0.01-lora"]
    by = {(c, m): v for c, m, v in zip(t["config"], t["method"], t["test_nll"])}
    assert by[("eps8-b32-T3-lr0.01-s1-lora", "lora")] == 4.0 and by[("eps8-b32-T3-lr0.01-s1-full", "full")] == 3.0
    assert t.filter(pl.col("audit_eps_lb_95").is_not_null())["audit_eps_lb_95"].to_list() == [0.5, 0.25, 0.5, 0.25]
    assert "trainable_parameters" in t.columns and "audit_trainable_parameters" not in t.columns
    configs = config_table(t, ["test_nll"])
    assert configs.height == 4 and set(configs["method"].to_list()) == {"full", "lora"}
    assert configs.filter(pl.col("method") == "lora")["trainable_parameters"].to_list() == [1234, 1234]


def test_an_old_layout_record_of_another_method_is_not_taken(tmp_path):
    """The old layout has one file per point: a lora run may not read the full run's record."""
    p = method_params()
    for run in p.runs():
        if run.method == "full":
            write(tmp_path / "train" / f"record/{run.point_name}.json", {"method": "full"})
            write(tmp_path / "score" / f"record/{run.point_name}.json", {"test_nll": 1.0})
    with pytest.raises(ConfigError, match=r"missing train/score metrics for 4 configuration\(s\), e\.g\. "
                                          r"\['eps8-b32-T3-lr0.01-s0-lora'"):
        run_table(p, tmp_path / "train", tmp_path / "score")


def test_one_method_keeps_the_groups_it_had(tmp_path):
    """One method (new layout): group names without the method, as before the axis existed (metrics/configs.json keys
    do not change), while the run names carry it."""
    p = method_params(("full",))
    for run in p.runs():
        write(tmp_path / "train" / f"{run.file_stem}.json", {"method": "full", "trainable_parameters": 7})
        write(tmp_path / "score" / f"{run.file_stem}.json", {"test_nll": 1.0})
    t = run_table(p, tmp_path / "train", tmp_path / "score")
    assert sorted(set(t["group"].to_list())) == ["eps8-b32-T3-lr0.01", "epsinf-b32-T3-lr0.01"]
    assert t["config"].to_list()[1] == "eps8-b32-T3-lr0.01-s1-full" and t["trainable_parameters"].to_list() == [7] * 4


def test_audit_runs_outside_the_main_cube_are_named(tmp_path):
    from empriv.analysis.table import audit_runs_outside_cube

    p = method_params(("full",), audit={"epsilon": [8], "batch_size": [32, 64], "steps": [3], "learning_rate": [0.01],
                                        "seed": [0], "method": ["full"]})
    for run in p.audit_runs():
        write(tmp_path / "audit" / f"{run.file_stem}.json", {"audit_eps_lb_95": 1.0})
    assert audit_runs_outside_cube(p, tmp_path / "audit") == ["eps8-b64-T3-lr0.01-s0-full"]


def test_read_run_table_without_a_method_column_is_full(tmp_path):
    t = pl.DataFrame({"epsilon": [2.0, 2.0], "batch_size": [64, 64], "steps": [16, 16], "learning_rate": [0.01, 0.01],
                      "method": ["full", "lora"]})
    t.write_csv(tmp_path / "m.csv")
    assert read_run_table(tmp_path / "m.csv")["group"].to_list() == ["eps2-b64-T16-lr0.01-full", "eps2-b64-T16-lr0.01-lora"]
    t.drop("method").write_csv(tmp_path / "one.csv")
    back = read_run_table(tmp_path / "one.csv")
    assert back["method"].to_list() == ["full", "full"] and back["group"].to_list() == ["eps2-b64-T16-lr0.01"] * 2


def test_the_audit_is_joined_by_configuration_whatever_the_seeds_of_either_cube(tmp_path):
    """Issue 42: re-seeding the main cube (seeds 2, 3; the audit cube at seed 0) once dropped every audit column —
    the join looked for the audit record of the run's own seed — and `empriv diff` read 14 audit rows as gone."""
    from empriv.analysis.metrics import config_metrics, summary_metrics
    from empriv.analysis.table import audit_runs_outside_cube

    def cube(seeds, audit_seeds):
        return parse_params({"cube": {"epsilon": [8], "batch_size": [32, 64], "steps": [3], "learning_rate": [0.01],
                                      "seed": seeds},
                             "audit": {"cube": {"epsilon": [8], "batch_size": [32, 64], "steps": [3],
                                                "learning_rate": [0.01], "seed": audit_seeds}}})

    def table(p, root):
        for run in p.runs():
            write(root / "train" / f"{run.file_stem}.json", {"sampler": "poisson"})
            write(root / "score" / f"{run.file_stem}.json", {"test_nll": 1.0 + run.seed / 10, "exposure_gap_mean": 2.0})
        for run in p.audit_runs():
            write(root / "audit" / f"{run.file_stem}.json", {"audit_eps_lb_95": run.batch_size / 100 + run.seed / 10})
        return run_table(p, root / "train", root / "score", root / "audit")

    keys = {}
    for seeds, audit in (([0, 1], [0]), ([2, 3], [0]), ([2, 3], [1, 3])):
        p = cube(seeds, audit)
        t = table(p, tmp_path / f"{seeds}-{audit}")
        assert audit_runs_outside_cube(p, tmp_path / f"{seeds}-{audit}" / "audit", t) == []
        c = config_metrics(t, "exposure_gap_mean", "test_nll")
        keys[(tuple(seeds), tuple(audit))] = {(g, k) for g, e in c.items() for k in e}
        mean_audit_seed = sum(audit) / len(audit) / 10  # averaged over the audit cube's seeds
        assert c["eps8-b64-T3-lr0.01"]["audit_eps_lb_95"] == pytest.approx(0.64 + mean_audit_seed)
        assert summary_metrics(t, ["exposure_gap_mean"], "test_nll", None)["eps8"]["audit_eps_lb_95"] == pytest.approx(
            0.64 + mean_audit_seed)
    assert len({frozenset(k) for k in keys.values()}) == 1  # the same metric keys whatever the seeds
    assert ("eps8-b32-T3-lr0.01", "audit_eps_lb_95") in keys[((2, 3), (0,))]
