"""empriv.pipeline.profiles: the cube's ε(δ) profiles, calibrated through the verified cache, written whole."""

import csv
import io
import math
import subprocess
import sys
from pathlib import Path

import pytest

from empriv import paths
from empriv.config import parse_params
from empriv.pipeline import profiles as stage
from empriv.privacy.profiles import N_STAGE_DELTAS, cube_deltas, profiles_csv

DELTA = 1e-5


@pytest.fixture(scope="module")
def params():
    return parse_params({
        "data": {"n_train": 1000},
        "privacy": {"delta": DELTA, "accountant": "prv"},
        "cube": {"epsilon": [2, "inf"], "batch_size": [20, 100], "steps": [10], "learning_rate": [1e-3], "seed": [0]},
    })


def _rows(path):
    return list(csv.DictReader(io.StringIO(path.read_text())))


def test_stage_writes_profiles_and_uses_the_cache(params, tmp_path):
    out, cache_dir = tmp_path / "plots" / "profiles", tmp_path / ".empriv" / "calibration"
    out.mkdir(parents=True)
    (out / "stale.png").write_bytes(b"old")
    written = stage.main(params, out_dir=out, calibration_cache=cache_dir)
    assert written == ["profiles.csv", "eps2.png"]
    assert sorted(p.name for p in out.iterdir()) == ["eps2.png", "profiles.csv"]  # replaced whole
    assert (out / "eps2.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = _rows(out / "profiles.csv")
    n_deltas = len(cube_deltas(DELTA))
    assert n_deltas == N_STAGE_DELTAS + 1  # the grid plus δ* itself
    assert len(rows) == 1 * 2 * 2 * n_deltas  # finite ε × configurations × (prv, moments) × δ
    assert {r["config"] for r in rows} == {"b20-T10", "b100-T10"}
    prv = [r for r in rows if r["accountant"] == "prv"]
    at_target = [float(r["epsilon"]) for r in prv if float(r["delta"]) == pytest.approx(DELTA)]
    assert len(at_target) == 2 and all(1.98 < e <= 2.0 for e in at_target)  # both calibrated to (2, δ*)
    lowest = {r["config"]: float(r["epsilon"]) for r in prv if float(r["delta"]) == min(float(x["delta"]) for x in prv)}
    assert abs(lowest["b20-T10"] - lowest["b100-T10"]) > 0.05  # different curves away from δ*
    moments = {}
    for r in rows:
        if r["accountant"] == "moments":
            moments.setdefault(r["delta"], set()).add(r["epsilon"])
    assert all(len(v) == 1 for v in moments.values())  # the closed-form profiles coincide
    entries = sorted(cache_dir.glob("*.json"))
    assert len(entries) == 2  # one verified calibration per configuration, shared with train@
    before = [e.read_bytes() for e in entries]
    stage.main(params, out_dir=out, calibration_cache=cache_dir)
    assert [e.read_bytes() for e in sorted(cache_dir.glob("*.json"))] == before
    assert _rows(out / "profiles.csv") == rows


def test_profiles_csv_format():
    text = profiles_csv([{"target_epsilon": 2.0, "target_delta": 1e-5, "config": "b1-T1", "batch_size": 1, "steps": 1,
                          "sample_rate": 0.001, "accountant": "prv", "delta": 1e-5, "epsilon": 1.23456789,
                          "noise_multiplier": 0.5}])
    assert text.splitlines() == [
        "target_epsilon,target_delta,config,batch_size,steps,sample_rate,accountant,noise_multiplier,delta,epsilon",
        "2.0,1.000000e-05,b1-T1,1,1,1.000000e-03,prv,0.500000,1.000000e-05,1.234568"]


def test_profile_rows_carry_the_configuration_and_the_target(params, tmp_path):
    """The columns the DVC plots split and place series by: b, T, q = b/n and the target (ε, δ*) on every row."""
    out = tmp_path / "profiles"
    stage.main(params, out_dir=out, calibration_cache=None)
    rows = _rows(out / "profiles.csv")
    assert {(r["config"], r["batch_size"], r["steps"], r["sample_rate"]) for r in rows} == {
        ("b20-T10", "20", "10", "2.000000e-02"), ("b100-T10", "100", "10", "1.000000e-01")}
    assert {(float(r["target_epsilon"]), r["target_delta"]) for r in rows} == {(2.0, "1.000000e-05")}
    sigma: dict = {}
    for r in rows:
        sigma.setdefault((r["config"], r["accountant"]), set()).add(r["noise_multiplier"])
    assert len(sigma) == 4 and all(len(v) == 1 for v in sigma.values())  # one σ per configuration and accountant


def test_stage_runs_as_its_script(tmp_path):
    (tmp_path / "params.yaml").write_text(
        "data: {n_train: 1000}\nprivacy: {delta: 1.0e-5}\n"
        "cube: {epsilon: [8], batch_size: [100], steps: [4], learning_rate: [0.001], seed: [0]}\n")
    script = Path(__file__).resolve().parents[2] / "stages/profiles.py"  # as dvc.yaml runs it
    r = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in (tmp_path / "plots" / "profiles").iterdir()) == ["eps8.png", "profiles.csv"]
    assert len(list((tmp_path / paths.CALIBRATION_CACHE).glob("*.json"))) == 1  # the project's cache
    rows = _rows(tmp_path / "plots" / "profiles" / "profiles.csv")
    assert all(math.isfinite(float(r["epsilon"])) for r in rows)
