"""Issue 43, the 100,000-run row: `empriv validate` (the first step of `make repro`) stops such a cube in one line,
within a few seconds of CPU and before anything touches an output; --yes lets it through."""

from __future__ import annotations

import resource

from reliability_project import snapshot


def test_a_100000_run_cube_stops_in_validate_within_a_few_cpu_seconds(project):
    project.set("cube", {"epsilon": list(range(1, 11)), "batch_size": list(range(1, 11)),
                         "steps": list(range(1, 11)), "learning_rate": [0.01 * i for i in range(1, 11)],
                         "seed": list(range(10)), "unit": ["record"], "method": ["full"]})
    before = snapshot(project.root)
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = project.validate()
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    line = project.fails_with_one_line(proc, before)
    assert line.startswith("error: cube: 100,000 runs (+ 1 audit runs): about ") and "sweep.max_runs 2,000" in line
    assert (used.ru_utime + used.ru_stime) - (cpu.ru_utime + cpu.ru_stime) < 6  # the machine may be busy: CPU time


def test_yes_lets_a_cube_above_the_limit_through(project):
    project.set("cube.seed", [0, 1, 2]).set("sweep", {"max_runs": 3})  # 3 runs + 1 audit run
    before = snapshot(project.root)
    line = project.fails_with_one_line(project.validate(), before)
    assert line.startswith("error: cube: 3 runs (+ 1 audit runs): ") and "above sweep.max_runs 3" in line
    proc = project.run("empriv", "validate", "--yes")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == "params.yaml: valid (3 configurations in the cube, 1 in the audit cube)"
