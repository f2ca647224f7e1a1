"""empriv diff on real training: the same tiny cube on "another machine" has no changed metric; a much larger
learning rate is found as changed.

One real pipeline (a copy of the session's ``tiny_pipeline``, tests/test_pipeline.py's tiny default built by
make_repo, whose data, tokenizer, base, canaries and ε = 8 training runs this cube shares; then `dvc repro` with this
module's params) on a cube of 2 runs (ε = 8, seeds 0 and 1: the seed standard error needs two seeds) and 1 audit run,
each result committed; `empriv diff` compares the commits. Another machine: the model stages again (those reading
``runtime.threads``: base, record scores, canaries, train, score, audit) at ``runtime.threads`` 2 instead of 1 and
with torch's portable CPU kernels instead of the vectorised ones (``ATEN_CPU_CAPABILITY=default``, read by torch in
the process that imports it: the stages run in a warm server of their own, started with that environment, in its
own ``EMPRIV_WARM_DIR``, since the variable is not part of the warm server's key). On this model the thread count
alone changes no bit (its matrices are too small for torch to split them), the kernels do (measured: the exposure
gaps and continuation NLLs move, test NLL does not): the test checks that exact values in records/ differ, so a
stage that ran on the vectorised kernels fails it."""

from __future__ import annotations

import json

import pytest
from test_pipeline import TINY, _env, _run, copy_repo, stop_warm_servers, write_params

from empriv.cli import main

pytestmark = pytest.mark.slow

CUBE = {**TINY,
        "cube": {"epsilon": [8], "batch_size": [32], "steps": [3], "learning_rate": [0.01], "seed": [0, 1]},
        "score": {**TINY["score"], "acr": {**TINY["score"]["acr"], "max_secrets": 1}},
        "audit": {**TINY["audit"], "cube": {"epsilon": [8], "batch_size": [32], "steps": [4], "learning_rate": [0.05],
                                            "seed": [0]}}}
GIT = ["git", "-c", "user.name=empriv-test", "-c", "user.email=test@example.invalid"]


def rerun(work, env, overrides: dict, message: str) -> str:
    write_params(work, overrides)
    _run(["dvc", "repro"], work, env)
    _run(GIT + ["add", "-A"], work, env)
    _run(GIT + ["commit", "-qm", message], work, env)
    return _run(["git", "rev-parse", "HEAD"], work, env).stdout.strip()


def verdicts(work, a: str, b: str, capsys) -> list[dict]:
    assert main(["diff", a, b, "--root", str(work), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def runs(tiny_pipeline, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("machines")
    work, env = copy_repo(tiny_pipeline[3], tmp / "repo"), _env(tmp)
    one = rerun(work, env, CUBE, "runtime.threads 1")
    other = {**env, "ATEN_CPU_CAPABILITY": "default", "EMPRIV_WARM_DIR": str(tmp / "warm-another-machine")}
    try:
        two = rerun(work, other, {**CUBE, "runtime": {**CUBE["runtime"], "threads": 2}}, "another machine")
    finally:
        stop_warm_servers(tmp / "warm-another-machine")
    lr = rerun(work, env, {**CUBE, "cube": {**CUBE["cube"], "learning_rate": [0.2]}}, "learning rate 0.2")
    return work, one, two, lr


def exact_runs(work, rev: str) -> list[dict]:
    """records/runs.csv at ``rev`` (from DVC's cache), without the wall times."""
    import csv
    import io

    import dvc.api

    rows = list(csv.DictReader(io.StringIO(dvc.api.read("records/runs.csv", repo=str(work), rev=rev))))
    return [{k: v for k, v in r.items() if "wall_time" not in k} for r in rows]


def test_another_machine_changes_no_metric_beyond_its_noise(runs, capsys):
    work, one, two, _ = runs
    a, b = exact_runs(work, one), exact_runs(work, two)
    drift = sorted({k for x, y in zip(a, b) for k in x if x[k] != y[k]})
    assert "exposure_gap_mean" in drift, drift  # the exact values did move
    rows = verdicts(work, one, two, capsys)
    summary = [r for r in rows if r["path"] == "metrics/summary.json"]
    assert any(r["metric"] == "eps8.exposure_gap_mean.se_seed" for r in summary)  # the uncertainty is written
    changed = [r for r in rows if r["verdict"] not in ("within noise", "unchanged")]
    assert changed == [], changed
    moved = [r for r in rows if r["delta"]]
    print(f"another machine: {len(drift)} exact columns moved; {len(rows)} metrics, {len(moved)} differ in their "
          f"written digits, none changed")


def test_a_much_larger_learning_rate_is_found_as_changed(runs, capsys):
    work, one, _, lr = runs
    rows = verdicts(work, one, lr, capsys)
    changed = {r["metric"] for r in rows if r["verdict"] == "changed" and r["path"] == "metrics/summary.json"}
    assert {"eps8.test_nll.mean", "eps8.continuation_nll_mean.mean", "eps8.exposure_gap_mean.mean"} & changed, changed
    # the configuration's name holds η: its configs.json entry is gone and the new one is new
    assert {r["verdict"] for r in rows if r["path"] == "metrics/configs.json"} == {"new", "gone"}
    assert rows[0]["verdict"] == "changed"  # the verdicts lead
