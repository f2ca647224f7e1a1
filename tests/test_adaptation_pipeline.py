"""End to end (real DVC): the adaptation audit of issue 17 — adaptation_data@<dataset> and adaptation_audit@<item>
for full fine-tuning and prefix tuning at ε = 8 and ∞ on the iid and ood sets of a tiny base, then the records'
attacks, the pre-training probe, the cube's other methods in the main cube, and a clean `dvc status`."""

from __future__ import annotations

import json
import math

import pytest

from test_pipeline import TINY, _run, make_repo

pytestmark = pytest.mark.slow

SIZES = {"n_members": 40, "n_nonmembers": 40, "n_shadow": 40, "n_population": 40, "n_probe": 40}
OVERRIDES = {
    **TINY,
    "base": {**TINY["base"], "n_positions": 72},  # room for the 4 virtual tokens of prompt and DPZero tuning
    "train": {"micro_batch_size": 16, "prefix": {"n_virtual": 4}, "prompt": {"n_virtual": 4}, "dpzero": {"n_prompt": 4},
              "variants": {"dpflat": {"method": "prefix", "dpflat": {"awp": True, "awp_steps": 2, "kd": True,
                                                                     "nor_steps": 5, "kd_lambda": 0.001}}}},
    # the main cube: one point, every kind of method (train + score through the pipeline)
    "cube": {"epsilon": [8], "batch_size": [32], "steps": [3], "learning_rate": [0.01], "seed": [0],
             "method": ["full", "prefix", "prompt", "head", "dpzero", "dpflat"]},
    "score": {**TINY["score"], "acr": {**TINY["score"]["acr"], "max_secrets": 1}},
    "audit": {**TINY["audit"], "cube": {"epsilon": [8], "batch_size": [32], "steps": [6], "learning_rate": [0.05],
                                        "seed": [0], "method": ["prefix"]}},
    "adaptation_audit": {"cube": {"dataset": ["iid", "ood"], "epsilon": [8, "inf"], "batch_size": [16],
                                  "steps": [40], "learning_rate": [0.01], "seed": [0], "method": ["full", "prefix"]},
                         **SIZES},
}
ATTACKS = ("loss", "zlib", "min_k", "min_k_optimistic", "reference_pretrained", "reference_shadow", "rmia_shadow",
           "rmia_shadow_optimistic", "rmia_pretrained", "rmia_pretrained_optimistic")


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    return make_repo(tmp_path_factory.mktemp("adaptation"), OVERRIDES)


def _record(work, dataset, method, eps):
    return json.loads((work / f"records/adaptation_audit/{dataset}/{method}/eps{eps}-b16-T40-lr0.01-s0.json").read_text())


def test_every_adaptation_audit_item_records_every_attack_and_the_probe(repo):
    work, _, _ = repo
    for dataset in ("iid", "ood"):
        sets = json.loads((work / f"data/adaptation/{dataset}/sets.json").read_text())
        assert sets["counts"] == {"members": 40, "nonmembers": 40, "shadow": 40, "population": 40,
                                  "probe_members": 40, "probe_nonmembers": 40}
        for method in ("full", "prefix"):
            for eps in ("8", "inf"):
                r = _record(work, dataset, method, eps)
                assert (r["dataset"], r["method"], r["n_members"], r["n_nonmembers"]) == (dataset, method, 40, 40)
                assert set(ATTACKS) <= set(r["mia"])
                for name, entry in r["mia"].items():
                    assert 0.0 <= entry["auc"] <= 1.0, (name, entry)
                    assert entry["optimistic"] == name.endswith("_optimistic")
                assert math.isfinite(r["test_nll"]) and math.isfinite(r["base_test_nll"])
                assert 0.0 <= r["pretraining"]["auc_base"] <= 1.0 and 0.0 <= r["pretraining"]["auc_adapted"] <= 1.0
                if eps == "8":
                    assert r["train"]["noise_multiplier"] > 0 and r["train"]["epsilon_prv"] <= 8 + 1e-6
                else:
                    assert r["train"]["noise_multiplier"] == 0
        full, prefix = _record(work, dataset, "full", "inf"), _record(work, dataset, "prefix", "inf")
        assert prefix["trainable_parameters"] < full["trainable_parameters"]
        # non-private full fine-tuning on 40 texts for 40 steps of 16 learns them: members' loss below non-members'
        assert full["train_nll"] < full["test_nll"] and full["mia"]["loss"]["auc"] > 0.6


def test_adaptation_records_hold_no_text(repo):
    work, _, _ = repo
    texts = [json.loads(line)["text"] for d in ("iid", "ood") for f in ("members", "nonmembers", "probe_members")
             for line in (work / f"data/adaptation/{d}/{f}.jsonl").read_text().splitlines()]
    blob = "".join(p.read_text() for p in (work / "records/adaptation_audit").rglob("*.json"))
    assert not [t for t in texts if t[:40] in blob]


def test_every_method_of_the_main_cube_trains_scores_and_audits(repo):
    work, env, _ = repo
    for method in ("full", "prefix", "prompt", "head", "dpzero", "dpflat"):
        train = json.loads((work / f"records/train/record/{method}/eps8-b32-T3-lr0.01-s0.json").read_text())
        score = json.loads((work / f"records/score/record/{method}/eps8-b32-T3-lr0.01-s0.json").read_text())
        assert train["method"] == method and train["config"] == f"eps8-b32-T3-lr0.01-s0-{method}"
        assert math.isfinite(score["test_nll"]) and score["n_secrets"] >= 1
    dpflat = json.loads((work / "records/train/record/dpflat/eps8-b32-T3-lr0.01-s0.json").read_text())
    assert dpflat["adaptation"] == "prefix" and dpflat["dpflat_strict"] is False
    audit = json.loads((work / "records/audit/record/prefix/eps8-b32-T6-lr0.05-s0.json").read_text())
    assert audit["train"]["method"] == "prefix" and audit["train"]["also_trained"].startswith("input embeddings")
    assert audit["audit_eps_lb_95"] <= audit["audit_epsilon_upper"]
    assert (work / "models/audit/record/prefix/eps8-b32-T6-lr0.05-s0/empriv_adapter.json").is_file()
    status = _run(["dvc", "status", "--json"], work, env)
    assert json.loads(status.stdout or "{}") == {}
