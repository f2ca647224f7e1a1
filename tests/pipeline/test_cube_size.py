"""empriv.pipeline.cube_size (issue 43, "size warnings"): `empriv validate` says how many runs a large cube has and
how long it would take here, and refuses one above sweep.max_runs unless --yes — a 100,000-run cube in about a
second of CPU, before DVC ever reads dvc.yaml (tests/reliability/test_cube_size_limit.py); the default's 64 runs
pass as before."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from empriv.config import ConfigError, parse_params
from empriv.pipeline.cube_size import LARGE_RUNS, run_counts, size_lines, wall_time_estimate
from empriv.study_plan import plan

ROOT = Path(__file__).resolve().parents[2]


def cube(n_eps: int, n_b: int, n_seeds: int) -> dict:
    return {"epsilon": [i + 1 for i in range(n_eps)], "batch_size": [8 * (i + 1) for i in range(n_b)],
            "steps": [10], "learning_rate": [0.01], "seed": list(range(n_seeds))}


def test_the_default_params_say_nothing_more():
    params = parse_params(__import__("yaml").safe_load((ROOT / "params.yaml").read_text()))
    assert run_counts(params) == (64, 8) and size_lines(params) == []


def test_a_large_cube_prints_its_runs_and_the_estimate_of_study_plan():
    params = parse_params({"cube": cube(5, 10, 6), "sweep": {"jobs": 1}})
    assert sum(run_counts(params)) > LARGE_RUNS
    (line,) = size_lines(params)
    seconds, slots = wall_time_estimate(params)
    assert slots == 1
    assert seconds == pytest.approx(plan(params)["cpu"]["study_cpu_years"] * 365 * 24 * 3600)
    assert line.startswith(f"warning: large cube: 300 runs (+ {run_counts(params)[1]} audit runs): about ")
    assert "on this machine (1 at once;" in line


def test_above_sweep_max_runs_it_refuses_in_one_line_unless_asked():
    params = parse_params({"cube": cube(10, 10, 25)})  # 2,500 runs
    with pytest.raises(ConfigError) as info:
        size_lines(params)
    (line,) = str(info.value).splitlines()
    audits = run_counts(params)[1]
    assert line.startswith(f"cube: 2,500 runs (+ {audits} audit runs): about ")
    assert line.endswith("above sweep.max_runs 2,000, so nothing was run (allowed: a smaller cube; or `empriv validate "
                         f"--yes` / `make repro YES=1`, or sweep.max_runs >= {2500 + audits} in params.yaml, if the "
                         "cube is meant)")
    assert size_lines(params, yes=True)[0].startswith("warning: large cube: 2,500 runs")
    assert size_lines(parse_params({"cube": cube(10, 10, 25), "sweep": {"max_runs": 2503}}))


def test_make_repro_passes_yes_through():
    def validate_line(*args):
        out = subprocess.run(["make", "-n", "repro", "STAMP=Makefile", *args], cwd=ROOT, capture_output=True,
                             text=True).stdout  # STAMP: the venv taken as built
        return next(line for line in out.splitlines() if "empriv validate" in line)

    assert validate_line().split()[1:] == ["validate", "--fill-defaults"]
    assert validate_line("YES=1").split()[1:] == ["validate", "--fill-defaults", "--yes"]
