"""``empriv sweep``: one job per matrix item, locally or on a real localhost SLURM (tools/slurm/cluster.sh).

Fast tests: the resource merge (``sweep.slurm`` + ``sweep.resources[<stage>]`` field by field), the sbatch lines
submitit writes from it, the plan (order, upstream, staleness) and the one-line errors. Slow tests run real
sweeps in temporary git + DVC repositories whose matrix stages are quick Python commands, then check the
outputs, that ``dvc status`` is empty and that ``dvc repro`` runs nothing. The SLURM tests skip, saying why,
where the SLURM binaries, root or submitit are missing; they never install anything.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from empriv.config import ConfigError, SweepParams, parse_section
from empriv.infra.sweep import SweepError, make_plan, merged_resources, run_sweep, slurm_parameters
from slurm_local import CLUSTER, SHIM_DIR, free_port_pair, missing_reason, one_cluster_at_a_time

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PY = sys.executable

# ----------------------------------------------------------------------------------------------- a small project
# up (reads params base.offset) -> train@1, train@2 (matrix over cube.x) -> total (reads every train output, as the
# pipeline's filter stage does) -> score@1, score@2 (each reads its train output and the total)
DVC_YAML = f"""\
stages:
  up:
    cmd: {PY} -c "import yaml; open('up.txt', 'w').write(str(yaml.safe_load(open('params.yaml'))['base']['offset']))"
    params:
      - base.offset
    outs:
      - up.txt
  train:
    matrix:
      x: ${{cube.x}}
    cmd: {PY} train.py ${{item.x}}
    deps:
      - train.py
      - up.txt
    outs:
      - runs/train-${{item.x}}.txt
  total:
    cmd: {PY} -c "import pathlib; open('total.txt', 'w').write(str(sum(int(p.read_text()) for p in pathlib.Path('runs').glob('*.txt'))))"
    deps:
      - runs
    outs:
      - total.txt
  score:
    matrix:
      x: ${{cube.x}}
    cmd: {PY} -c "import os; os.makedirs('out', exist_ok=True); open('out/score-${{item.x}}.txt', 'w').write(str(10 * int(open('runs/train-${{item.x}}.txt').read()) + int(open('total.txt').read())))"
    deps:
      - runs/train-${{item.x}}.txt
      - total.txt
    outs:
      - out/score-${{item.x}}.txt
"""

# train.py: x + offset. RETRY_MODE (an environment variable of the test) makes an item misbehave on its first
# attempt only (a marker file remembers it): "kill" SIGKILLs itself, "preempt" asks SLURM for the warning signal
# (scancel --signal=USR2, as a preempting scheduler sends it) and waits to be stopped, "fail" always says why on
# stderr and exits 3.
TRAIN_PY = """\
import os, signal, subprocess, sys, time

x = sys.argv[1]
offset = int(open("up.txt").read())
mode = dict(m.split("=") for m in os.environ.get("RETRY_MODE", "").split(",") if m).get(x)
marker = f".marker-{x}"
if mode == "fail":
    print(f"train.py: refusing x = {x}", file=sys.stderr)
    sys.exit(3)
if mode and not os.path.exists(marker):
    open(marker, "w").close()
    if mode == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if mode == "preempt":
        signal.signal(signal.SIGUSR2, lambda *a: None)  # the warning reaches the command too; it may checkpoint
        subprocess.run(["scancel", "--signal=USR2", os.environ["SLURM_JOB_ID"]], check=True)
        time.sleep(120)
        sys.exit(5)  # never reached: the sweep job stops this command and is requeued
os.makedirs("runs", exist_ok=True)
open(f"runs/train-{x}.txt", "w").write(str(int(x) + offset))
"""

PARAMS = {
    "base": {"offset": 1},
    "cube": {"x": [1, 2]},
    "sweep": {
        "stages": ["train", "score"],
        "max_retries": 1,
        "slurm": {"partition": "local", "cpus_per_task": 1, "mem_gb": 0.25, "timeout_min": 5, "signal_delay_s": 30},
        "resources": {"score": {"timeout_min": 3}},
    },
}


def _write_params(repo: Path, params: dict) -> None:
    (repo / "params.yaml").write_text(json.dumps(params, indent=1))  # JSON is YAML


def _env(**extra) -> dict:
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(BIN), env.get("PATH", "")])
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def _template(tmp_path_factory):
    repo = tmp_path_factory.mktemp("template") / "project"
    repo.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run([PY, "-m", "dvc", "init", "-q"], cwd=repo, check=True)
    (repo / "dvc.yaml").write_text(DVC_YAML)
    (repo / "train.py").write_text(TRAIN_PY)
    (repo / ".gitignore").write_text(".empriv/\n.marker-*\n")
    _write_params(repo, PARAMS)
    return repo


@pytest.fixture
def project(_template, tmp_path):
    """A fresh git + DVC repository holding the small project above (a copy of one initialised per module)."""
    repo = tmp_path / "project"
    shutil.copytree(_template, repo, symlinks=True)
    return repo


def _sweep(repo: Path, *args: str, env: dict | None = None, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "empriv.cli", "sweep", *args], cwd=repo, env=env or _env(),
                          capture_output=True, text=True, timeout=timeout)


def _log(run: subprocess.CompletedProcess, repo: Path) -> str:
    """The sweep's log file, which its first printed line names, without the times of day: every line of the
    sweep, and the per-job events (submitted, done, restored, up to date at its turn, blocked) only there."""
    found = re.search(r"; log (\S+/sweep\.log)$", run.stdout.splitlines()[0])
    assert found, run.stdout
    lines = (repo / found.group(1)).read_text().splitlines()
    assert all(re.match(r"\d\d:\d\d:\d\d ", line) for line in lines), lines
    return "".join(line[9:] + "\n" for line in lines)


PER_JOB = re.compile(r"^(submitted|done|restored|blocked|requeued|up to date at its turn:|jobs:) ", re.M)


def _dvc(repo: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "dvc", *args], cwd=repo, env=env or _env(), capture_output=True, text=True,
                          timeout=120)


def _assert_clean_and_no_op(repo: Path) -> None:
    status = _dvc(repo, "status", "--json")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout) == {}
    repro = _dvc(repo, "repro")
    assert repro.returncode == 0, repro.stderr
    assert "Running stage" not in repro.stdout + repro.stderr
    assert "Data and pipelines are up to date." in repro.stdout


def _outputs(repo: Path) -> dict[str, str]:
    files = [*sorted((repo / "runs").glob("*.txt")), repo / "total.txt", *sorted((repo / "out").glob("*.txt"))]
    return {p.name: p.read_text() for p in files if p.exists()}


OUT_1 = {"train-1.txt": "2", "train-2.txt": "3", "total.txt": "5", "score-1.txt": "25", "score-2.txt": "35"}


# ----------------------------------------------------------------------------------------------- fast: resources
def test_resources_merge_field_by_field():
    sweep = parse_section(SweepParams, {
        "slurm": {"partition": "gpu", "cpus_per_task": 8, "mem_gb": 32.0, "additional": {"account": "lab"}},
        # cpus_per_task: 2 is SlurmParams' own default, but set here: it replaces the 8 of sweep.slurm
        "resources": {"train": {"gpus_per_node": 1, "timeout_min": 240, "cpus_per_task": 2},
                      "audit": {"additional": {"qos": "short"}}},
    }, "sweep")
    train = merged_resources(sweep, "train")
    assert (train.partition, train.gpus_per_node, train.timeout_min, train.cpus_per_task, train.mem_gb) == \
        ("gpu", 1, 240, 2, 32.0)
    assert train.additional == {"account": "lab"}
    audit = merged_resources(sweep, "audit")
    assert (audit.gpus_per_node, audit.timeout_min, audit.cpus_per_task) == (0, 60, 8)
    assert audit.additional == {"qos": "short"}  # one field: the override's mapping replaces the default's
    assert merged_resources(sweep, "score") == sweep.slurm


def test_slurm_parameters_become_sbatch_lines(tmp_path):
    pytest.importorskip("submitit", reason="submitit is not installed in this environment")
    from submitit.slurm.slurm import _make_sbatch_string  # what SlurmExecutor writes into the job's sbatch file

    sweep = parse_section(SweepParams, {
        "slurm": {"partition": "gpu", "mem_gb": 0.5, "timeout_min": 90, "signal_delay_s": 300,
                  "additional": {"account": "lab", "qos": "high"}},
        "resources": {"train": {"gpus_per_node": 2}}}, "sweep")
    params = slurm_parameters(merged_resources(sweep, "train"))
    assert params == {"ntasks_per_node": 1, "time": 90, "cpus_per_task": 2, "mem": "512MB", "signal_delay_s": 300,
                      "partition": "gpu", "gpus_per_node": 2, "additional_parameters": {"account": "lab", "qos": "high"}}
    lines = set(_make_sbatch_string(command="true", folder=tmp_path, **params).splitlines())
    for line in ("#SBATCH --partition=gpu", "#SBATCH --gpus-per-node=2", "#SBATCH --time=90", "#SBATCH --mem=512MB",
                 "#SBATCH --cpus-per-task=2", "#SBATCH --account=lab", "#SBATCH --qos=high",
                 "#SBATCH --signal=USR2@300", "#SBATCH --ntasks-per-node=1"):
        assert line in lines, line
    # null partition and 0 GPUs: left to the cluster's defaults (no --partition, no --gpus-per-node)
    default = slurm_parameters(SweepParams().slurm)
    assert "partition" not in default and "gpus_per_node" not in default and default["mem"] == "8GB"


def test_bad_resources_fail_in_one_line_naming_the_key():
    with pytest.raises(ConfigError) as err:
        parse_section(SweepParams, {"resources": {"train": {"gpus_per_node": -1}}}, "sweep")
    # one line naming the section and the value (the key path inside the dict, sweep.resources.train.gpus_per_node,
    # needs the dict-key step in empriv.config._error_line: asked of the lead)
    assert len(err.value.lines) == 1
    assert err.value.lines[0].startswith("sweep.resources") and "got -1" in err.value.lines[0]


# ----------------------------------------------------------------------------------------------- fast: plan, errors
def test_plan_orders_items_after_what_they_need(project):
    plan = make_plan(project, ["train", "score"])
    assert [i.address for i in plan.items] == ["train@1", "train@2", "total", "score@1", "score@2"]
    assert {i.address: sorted(i.needs) for i in plan.items} == {
        "train@1": [], "train@2": [], "total": ["train@1", "train@2"], "score@1": ["total", "train@1"],
        "score@2": ["total", "train@2"]}
    assert [i.address for i in plan.items if i.between] == ["total"]  # not selected, but between selected items
    assert plan.upstream == ["up"] and plan.stale_upstream == ["up"] and plan.downstream == []
    assert all(i.stale for i in plan.items)
    assert plan.items[0].commands == [f"{PY} train.py 1"]
    # a glob over keys: train@1 is upstream (nothing it needs is selected), total still sits between
    only = make_plan(project, ["train", "score"], ["2"])
    assert [i.address for i in only.items] == ["train@2", "total", "score@2"]
    assert sorted(only.upstream) == ["train@1", "up"] and only.downstream == ["score@1"]
    # score alone: train items and total are upstream
    score = make_plan(project, ["score"])
    assert sorted(score.upstream) == ["total", "train@1", "train@2"] and score.downstream == []
    assert make_plan(project, ["train"]).downstream == ["score@1", "score@2", "total"]


def test_plan_skips_an_empty_matrix_stage_beside_others_and_refuses_it_alone(project):
    """The pipeline's adaptation_audit has no items by default, an emptied audit cube neither: a sweep of the
    default stages skips them; a sweep of only empty stages is an error."""
    (project / "dvc.yaml").write_text(DVC_YAML + "  audit:\n    matrix:\n      x: ${cube.none}\n    cmd: echo ${item.x}\n")
    _write_params(project, {**PARAMS, "cube": {**PARAMS["cube"], "none": []}})
    plan = make_plan(project, ["train", "audit", "score"])
    assert plan.empty == ["audit"] and plan.stages == ["train", "score"]
    assert [i.address for i in plan.items] == ["train@1", "train@2", "total", "score@1", "score@2"]
    with pytest.raises(SweepError, match=r"^--stages: matrix stage 'audit' has no items"):
        make_plan(project, ["audit"], stages_key="--stages")
    run = _sweep(project, "--engine", "local", "--stages", "train,audit", "--dry-run")
    assert run.returncode == 0, run.stderr
    assert "no items (empty matrix), skipped: audit" in run.stdout.splitlines()


def test_local_jobs_times_threads_above_the_cpus_is_a_warning(project):
    cpus = os.cpu_count() or 1
    _write_params(project, {**PARAMS, "runtime": {"threads": cpus}})
    run = _sweep(project, "--engine", "local", "--jobs", "2", "--dry-run")
    assert run.returncode == 0, run.stderr
    assert (f"warning: 2 local jobs x runtime.threads {cpus} = {2 * cpus} torch threads on {cpus} CPUs: the jobs "
            f"compete for the cores (set runtime.threads to {max(1, cpus // 2)}, or --jobs 1)") in run.stdout
    _write_params(project, {**PARAMS, "runtime": {"threads": 1}})
    run = _sweep(project, "--engine", "local", "--jobs", "1", "--dry-run")
    assert run.returncode == 0 and "warning" not in run.stdout


@pytest.mark.parametrize("args, message", [
    (["--stages", "trian"], "error: --stages: unknown stage; did you mean 'train'? (got 'trian'; allowed: matrix "
                            "stages of dvc.yaml: train, score)"),
    (["--stages", "up"], "error: --stages: stage 'up' has no matrix (one command, no items): run it with `dvc repro "
                         "up` (got 'up'; allowed: matrix stages of dvc.yaml: train, score)"),
    (["--items", "eps*"], "error: --items: no item of train, score matches 'eps*' (got 'eps*'; allowed: globs over "
                          "item names or their keys, e.g. train@1, train@2, score@1)"),
    (["--jobs", "0"], "error: --jobs: must be >= 1 (got 0; allowed: an integer >= 1)"),
])
def test_errors_are_one_line(project, capsys, args, message):
    from empriv.cli import main

    assert main(["sweep", "--root", str(project), "--engine", "local", *args]) == 2
    err = capsys.readouterr().err
    assert err.strip() == message


def test_error_without_matrix_stage_and_unknown_resource_stage(tmp_path, project, capsys):
    from empriv.cli import main

    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "dvc.yaml").write_text("stages:\n  a:\n    cmd: echo a\n")
    assert main(["sweep", "--root", str(plain), "--engine", "local", "--dry-run"]) == 2
    assert capsys.readouterr().err.strip() == ("error: dvc.yaml has no matrix stage (no stage with `matrix:` or "
                                               "`foreach:`): nothing to sweep")
    _write_params(project, {**PARAMS, "sweep": {**PARAMS["sweep"], "resources": {"trian": {"timeout_min": 1}}}})
    with pytest.raises(SweepError, match=r"^sweep\.resources\.trian: not a stage of dvc\.yaml; did you mean 'train'"):
        run_sweep(project, engine="local", dry_run=True, echo=lambda line: None)


def test_error_when_submitit_is_missing(project):
    # the real import failure: the module made unimportable in a fresh interpreter
    code = ("import sys; sys.modules['submitit'] = None; from empriv.cli import main; "
            f"sys.exit(main(['sweep', '--root', {str(project)!r}, '--engine', 'slurm']))")
    run = subprocess.run([PY, "-c", code], capture_output=True, text=True, env=_env(), timeout=120)
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [
        "error: engine slurm needs submitit, which is not installed (import of submitit halted; None in "
        "sys.modules): pip install submitit==1.5.4"]


def test_error_when_no_slurm_is_on_path(project, tmp_path, monkeypatch, capsys):
    pytest.importorskip("submitit", reason="submitit is not installed in this environment")
    from empriv.cli import main

    empty = tmp_path / "nobin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    assert main(["sweep", "--root", str(project), "--engine", "slurm"]) == 2
    assert capsys.readouterr().err.strip() == ("error: engine slurm: no SLURM reachable (sbatch not found on PATH); "
                                               "on a login node of your cluster it is; locally use --engine local")
    assert not (project / ".empriv").exists() and not (project / "up.txt").exists()  # nothing ran


def test_dry_run_prints_the_plan_and_runs_nothing(project):
    run = _sweep(project, "--engine", "local", "--dry-run")
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0] == "sweep: engine local, stages train, score (and between them: total): 5 items, 5 to run, 0 up to date"
    assert "upstream would run first (dvc repro up): up" in lines
    assert f"would run score@1 after train@1, total: {PY} -c" in run.stdout
    assert f"would run total after train@1, train@2: {PY} -c" in run.stdout
    assert not (project / "up.txt").exists() and not (project / "dvc.lock").exists()


def test_all_plans_every_stage_as_a_job(project):
    """--all: the single stages (up, total) are members like the matrix items: no upstream repro, nothing below."""
    run = _sweep(project, "--engine", "local", "--all", "--dry-run")
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0] == "sweep: engine local, stages up, train, total, score: 6 items, 6 to run, 0 up to date"
    assert not any(line.startswith("upstream") for line in lines)
    assert next(line for line in lines if line.startswith("would run")).startswith(f"would run up: {PY} -c")
    assert f"would run train@1 after up: {PY} train.py 1" in lines
    plan = make_plan(project, [], everything=True)
    assert [i.address for i in plan.items] == ["up", "train@1", "train@2", "total", "score@1", "score@2"]
    assert plan.upstream == [] and plan.downstream == [] and not (project / "dvc.lock").exists()


def test_launch_order_puts_long_chains_first_then_the_slowest_stage():
    """Free slots go to the item with the longest chain of items still below it; among equals, to the stage whose
    jobs took longest so far (a stage not yet timed first); ties keep the plan's order."""
    from empriv.infra.sweep import Item, launch_order
    from empriv.infra.sweep.schedule import _depths

    def item(address: str, needs: list[str]) -> Item:
        return Item(address=address, stage=address.partition("@")[0], key="", commands=["true"], wdir=".",
                    needs=needs)

    items = [item("train@1", []), item("train@2", []), item("filter", ["train@1", "train@2"]),
             item("score@1", ["train@1", "filter"]), item("score@2", ["train@2", "filter"]),
             item("audit@1", []), item("analyze", ["score@1", "score@2", "audit@1"])]
    depth = _depths(items)
    assert depth == {"train@1": 4, "train@2": 4, "filter": 3, "score@1": 2, "score@2": 2, "audit@1": 2, "analyze": 1}

    def order(seconds: dict) -> list[str]:
        return [i.address for i in launch_order(items, depth, seconds)]

    assert order({}) == ["train@1", "train@2", "filter", "score@1", "score@2", "audit@1", "analyze"]
    assert order({"score": [2.0, 4.0]}) == ["train@1", "train@2", "filter", "audit@1", "score@1", "score@2", "analyze"]
    assert order({"score": [9.0], "audit": [8.0]}) == ["train@1", "train@2", "filter", "score@1", "score@2", "audit@1",
                                                      "analyze"]
    assert order({"score": [1.0], "audit": [20.0]})[3:6] == ["audit@1", "score@1", "score@2"]


def test_all_excludes_stages_and_items(project, capsys):
    from empriv.cli import main

    assert main(["sweep", "--root", str(project), "--all", "--stages", "train"]) == 2
    assert capsys.readouterr().err.strip() == ("error: --all: every stage of dvc.yaml is swept; --stages and --items "
                                               "select some (got --all with --stages; allowed: one or the other)")


# ----------------------------------------------------------------------------------------------- slow: local engine
@pytest.mark.slow
def test_local_sweep_runs_upstream_first_skips_fresh_items_and_uses_the_run_cache(project):
    pytest.importorskip("submitit", reason="submitit is not installed in this environment")
    run = _sweep(project, "--engine", "local")
    assert run.returncode == 0, run.stdout + run.stderr
    out, log = run.stdout, _log(run, project)
    # the stale upstream stage ran first, in one `dvc repro`, before any job
    assert out.index("upstream: dvc repro up") < out.index("Running stage 'up'") < out.index("progress: ")
    assert log.index("upstream: dvc repro up") < log.index("submitted train@1")
    # total waits for both train items, score@x for train@x and total (the per-job lines are in the log only)
    assert not PER_JOB.search(out)
    assert max(log.index("done train@1"), log.index("done train@2")) < log.index("submitted total")
    assert log.index("done total") < min(log.index("submitted score@1"), log.index("submitted score@2"))
    assert re.search(r"^submitted train@1: job \d+, logs \.empriv/sweep/\d{8}-\d{6}-\d+/\d+_0_log\.out and \.err$", log,
                     re.M)
    assert "committed 5 item(s) to dvc.lock and the DVC cache; dvc status of them: clean" in out
    assert out.strip().splitlines()[-1] == "sweep: 5 done, 0 failed, 0 blocked, 0 up to date (skipped)"
    assert _outputs(project) == OUT_1
    lock = (project / "dvc.lock").read_text()
    assert all(f"{s}@{x}:" in lock for s in ("train", "score") for x in (1, 2)) and "\n  total:" in lock
    _assert_clean_and_no_op(project)

    # again: everything is up to date, nothing is submitted
    again = _sweep(project, "--engine", "local")
    assert again.returncode == 0, again.stderr
    assert "up to date (skipped): train@1, train@2, total, score@1, score@2" in again.stdout
    assert "nothing to run: every item is up to date" in again.stdout
    assert not re.search("^submitted", _log(again, project), re.M)

    # a changed params value: the stale upstream runs first, then every item below it
    _write_params(project, {**PARAMS, "base": {"offset": 5}})
    changed = _sweep(project, "--engine", "local", "--jobs", "1")
    assert changed.returncode == 0, changed.stdout + changed.stderr
    assert changed.stdout.index("Running stage 'up'") < changed.stdout.index("progress: ")
    changed_log = _log(changed, project)
    assert changed_log.index("after upstream: 5 to run") < changed_log.index("submitted train@1")
    assert _outputs(project) == {"train-1.txt": "6", "train-2.txt": "7", "total.txt": "13", "score-1.txt": "73",
                                 "score-2.txt": "83"}
    assert json.loads(_dvc(project, "status", "--json").stdout) == {}

    # back to the first value: DVC's run-cache has all four runs; no job
    _write_params(project, PARAMS)
    back = _sweep(project, "--engine", "local")
    assert back.returncode == 0, back.stdout + back.stderr
    back_log = _log(back, project)
    assert not re.search("^submitted", back_log, re.M)
    assert sorted(re.findall(r"^restored (\S+) from DVC's run-cache", back_log, re.M)) == \
        ["score@1", "score@2", "total", "train@1", "train@2"]
    assert _outputs(project) == OUT_1
    _assert_clean_and_no_op(project)


@pytest.mark.slow
def test_local_sweep_of_every_stage_commits_them_all_in_one_lock(project):
    """`empriv sweep --all` (what `make repro` runs): the single stages run as jobs in dependency order beside the
    items, one commit for all of them, and `dvc repro` afterwards has nothing to do; a changed param re-runs the
    stage that reads it and everything below, and nothing else."""
    pytest.importorskip("submitit", reason="submitit is not installed in this environment")
    run = _sweep(project, "--engine", "local", "--all")
    assert run.returncode == 0, run.stdout + run.stderr
    out, log = run.stdout, _log(run, project)
    # not a terminal: the header (naming the log), a progress line per tenth of the items or 30 s, the final line
    lines = out.strip().splitlines()
    progress = [line for line in lines if line.startswith("progress: ")]
    assert 1 <= len(progress) <= 12, out
    assert re.fullmatch(r"progress: 6/6 items \(100%\), [\d a-z]+ elapsed \(done\)", progress[-1]), out
    assert all(re.fullmatch(r"progress: [0-5]/6 items \(\d+%\), (\d running, )?[\d a-z]+ elapsed, "
                            r"(~[\d a-z]+ left|ETA after the first job)", line) for line in progress[:-1]), out
    assert lines[-1] == "sweep: 6 done, 0 failed, 0 blocked, 0 up to date (skipped)"
    assert not PER_JOB.search(out) and len(re.findall("^done ", log, re.M)) == 6
    assert all(line in log for line in lines)  # everything printed is in the log as well
    assert "Running stage" not in out and "upstream" not in out  # no dvc repro inside
    assert log.index("done up ") < min(log.index("submitted train@1"), log.index("submitted train@2"))
    assert "committed 6 item(s) to dvc.lock and the DVC cache; dvc status of them: clean" in out
    assert "stages below the sweep" not in out
    assert _outputs(project) == OUT_1 and (project / "up.txt").read_text() == "1"
    _assert_clean_and_no_op(project)

    _write_params(project, {**PARAMS, "base": {"offset": 5}})
    changed = _sweep(project, "--engine", "local", "--all")
    assert changed.returncode == 0, changed.stdout + changed.stderr
    assert len(re.findall("^submitted", _log(changed, project), re.M)) == 6
    assert _outputs(project)["score-2.txt"] == "83"
    _assert_clean_and_no_op(project)

    # `up` reads the whole base section now; a key it does not use makes it re-run with the same output: as
    # `dvc repro` decides at each stage's turn, nothing below it runs (the code stage's fingerprints work so)
    (project / "dvc.yaml").write_text(DVC_YAML.replace("      - base.offset\n", "      - base\n"))
    assert _dvc(project, "commit", "-f", "up").returncode == 0
    _write_params(project, {**PARAMS, "base": {"offset": 5, "unused": 1}})
    same = _sweep(project, "--engine", "local", "--all")
    assert same.returncode == 0, same.stdout + same.stderr
    assert same.stdout.splitlines()[0].startswith(
        "sweep: engine local, stages up, train, total, score: 6 items, 6 to run, 0 up to date; log .empriv/sweep/")
    same_log = _log(same, project)
    assert re.findall(r"^submitted (\S+):", same_log, re.M) == ["up"]
    assert re.findall(r"^up to date at its turn: (\S+) ", same_log, re.M) == \
        ["train@1", "train@2", "total", "score@1", "score@2"]
    assert same.stdout.strip().splitlines()[-1] == "sweep: 1 done, 0 failed, 0 blocked, 5 up to date (skipped)"
    assert _outputs(project)["score-2.txt"] == "83"
    _assert_clean_and_no_op(project)


@pytest.mark.slow
def test_on_a_terminal_a_sweep_draws_one_bar_and_nothing_of_dvc(project):
    """stdout and stderr a terminal (a pseudo-terminal of 120 columns): the bar with its ETA, the final lines, no
    per-job line and none of DVC's own progress bars (hashing, lock waits), which the sweep's process silences."""
    pytest.importorskip("submitit", reason="submitit is not installed in this environment")
    import fcntl
    import pty
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    proc = subprocess.Popen([PY, "-m", "empriv.cli", "sweep", "--engine", "local", "--all"], cwd=project, env=_env(),
                            stdin=subprocess.DEVNULL, stdout=slave, stderr=slave)
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the terminal's other end is closed
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    assert proc.wait(timeout=240) == 0
    screen = b"".join(chunks).decode("utf-8", "replace")
    assert re.search(r"sweep: +\d+%\|.*\| [1-5]/6 items \[\d\d:\d\d, ETA ~\d+ s, \d running\]", screen), screen
    assert re.search(r"sweep: 100%\|.*\| 6/6 items \[\d\d:\d\d\]", screen), screen
    assert "sweep: 6 done, 0 failed, 0 blocked, 0 up to date (skipped)" in screen
    assert not re.search(r"(^|[\r\n])(submitted|done|progress:) ", screen), screen
    assert "Collecting files" not in screen and "Waiting to acquire lock" not in screen, screen
    assert "Checking cache" not in screen, screen


@pytest.mark.slow
def test_a_sweep_removes_the_lock_entries_of_items_the_cube_dropped(project):
    """DVC keeps a dropped matrix item's dvc.lock entry for ever (and rewrites the whole file after every stage):
    the sweep removes it, and DVC is still clean."""
    pytest.importorskip("submitit", reason="submitit is not installed in this environment")
    assert _sweep(project, "--engine", "local").returncode == 0
    import yaml

    def entries() -> set[str]:
        return set(yaml.safe_load((project / "dvc.lock").read_text())["stages"])

    assert entries() == {"up", "train@1", "train@2", "total", "score@1", "score@2"}
    _write_params(project, {**PARAMS, "cube": {"x": [1]}})
    run = _sweep(project, "--engine", "local")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "dvc.lock: removed 2 entries of stages dvc.yaml no longer has (score@2, train@2)" in run.stdout.splitlines()
    assert entries() == {"up", "train@1", "total", "score@1"}
    _assert_clean_and_no_op(project)
    again = _sweep(project, "--engine", "local")
    assert again.returncode == 0 and "dvc.lock: removed" not in again.stdout


@pytest.mark.slow
def test_local_sweep_failure_names_its_log_and_commits_the_rest(project):
    pytest.importorskip("submitit", reason="submitit is not installed in this environment")
    run = _sweep(project, "--engine", "local", env=_env(RETRY_MODE="2=fail"))
    assert run.returncode == 1
    out = run.stdout
    assert re.search(r"^retry train@2 \(attempt 2 of 2\): job \d+ failed: RuntimeError: train@2: command failed "
                     r"\(exit status 3\) on attempt 1; log \S+_0_log\.err$", out, re.M), out
    # the failure in full on the terminal: the item, its exit status, its log and what its command wrote to stderr
    assert re.search(r"^failed train@2 \(job \d+, 2 attempt\(s\)\): RuntimeError: train@2: command failed \(exit status "
                     r"3\) on attempt 2; log \S+_0_log\.err\n  the last 1 line\(s\) its command wrote to stderr:\n"
                     r"  \| train\.py: refusing x = 2\n", out, re.M), out
    assert re.findall(r"^blocked (\S+):", _log(run, project), re.M) == ["total", "score@1", "score@2"]
    failed = re.search(r"^error: train@2 failed: RuntimeError: train@2: command failed \(exit status 3\) on attempt 2; "
                       r"log (\S+_0_log\.err)$", run.stderr, re.M)
    assert failed, run.stderr
    assert "RuntimeError: train@2: command failed" in (project / failed.group(1)).read_text()
    assert "error: not run because an item they need failed: total, score@1, score@2" in run.stderr
    assert out.strip().splitlines()[-1] == "sweep: 1 done, 1 failed, 3 blocked, 0 up to date (skipped)"
    assert (project / "runs" / "train-1.txt").read_text() == "2" and not (project / "total.txt").exists()
    status = json.loads(_dvc(project, "status", "--json").stdout)
    assert set(status) == {"train@2", "total", "score@1", "score@2"}  # train@1 is committed; the rest stays stale


# ----------------------------------------------------------------------------------------------- slow: SLURM
@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """A localhost SLURM cluster for this module's tests, stopped (by its recorded PIDs) when they are done."""
    reason = missing_reason()
    if reason:
        pytest.skip(reason)
    state = tmp_path_factory.mktemp("slurm")
    with one_cluster_at_a_time():
        try:
            start = subprocess.run([str(CLUSTER), "start", str(state), str(free_port_pair())], capture_output=True,
                                   text=True, timeout=180)
            if start.returncode != 0:
                pytest.skip(f"the localhost SLURM cluster did not start: {start.stderr.strip()[-300:]}")
            env = _env(SLURM_CONF=str(state / "slurm.conf"))
            env["PATH"] = os.pathsep.join([str(SHIM_DIR), env["PATH"]])
            yield {"state": state, "env": env}
        finally:
            subprocess.run([str(CLUSTER), "stop", str(state)], capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_slurm_sweep_collects_into_one_lock(project, slurm):
    run = _sweep(project, "--engine", "slurm", env=slurm["env"])
    assert run.returncode == 0, run.stdout + run.stderr
    out, log = run.stdout, _log(run, project)
    assert "resources of train: partition local, 1 CPUs, 0 GPUs, 0.25 GB, 5 min" in out
    assert "resources of score: partition local, 1 CPUs, 0 GPUs, 0.25 GB, 3 min" in out
    assert not PER_JOB.search(out)
    jobs = dict(re.findall(r"^submitted (\S+): job (\d+), logs", log, re.M))
    assert sorted(jobs) == ["score@1", "score@2", "total", "train@1", "train@2"]
    assert log.index("done train@2") < log.index("submitted score@2")
    # they really were SLURM jobs: the controller's job-completion records hold them, completed, named by item
    jobcomp = (slurm["state"] / "jobcomp.txt").read_text()
    for address, job_id in jobs.items():
        record = re.search(rf"JobId={job_id} .*", jobcomp).group(0)
        assert "JobState=COMPLETED" in record and f"Name=empriv-{address} " in record
    # per-stage resources reached sbatch: score's override of timeout_min, the rest from sweep.slurm
    folder = next((project / ".empriv" / "sweep").iterdir())
    scripts = {a: (folder / f"{j}_submission.sh").read_text() for a, j in jobs.items()}
    assert "#SBATCH --time=5\n" in scripts["train@1"] and "#SBATCH --time=5\n" in scripts["total"]
    assert "#SBATCH --time=3\n" in scripts["score@1"] and "#SBATCH --time=3\n" in scripts["score@2"]
    assert all("#SBATCH --partition=local\n" in s and "#SBATCH --mem=256MB\n" in s for s in scripts.values())
    assert _outputs(project) == OUT_1
    _assert_clean_and_no_op(project)


def _release_requeued(env: dict, stop: threading.Event) -> None:
    """SLURM holds a requeued job for ~2 minutes (BeginTime); the test releases it at once (StartTime=now)."""
    while not stop.is_set():
        out = subprocess.run(["squeue", "-h", "-t", "PD", "-o", "%i %r"], env=env, capture_output=True,
                             text=True).stdout
        for line in out.splitlines():
            job_id, _, reason = line.partition(" ")
            if reason.strip() == "BeginTime":
                subprocess.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], env=env,
                               capture_output=True)
        stop.wait(0.5)


@pytest.mark.slow
def test_slurm_retries_a_killed_and_a_preempted_job(project, slurm):
    env = dict(slurm["env"], RETRY_MODE="1=kill,2=preempt")
    stop = threading.Event()
    releaser = threading.Thread(target=_release_requeued, args=(env, stop), daemon=True)
    releaser.start()
    try:
        run = _sweep(project, "--engine", "slurm", "--stages", "train", env=env)
    finally:
        stop.set()
        releaser.join()
    assert run.returncode == 0, run.stdout + run.stderr
    out, log = run.stdout, _log(run, project)
    # killed: the job fails, the sweep submits a new one
    assert re.search(r"^retry train@1 \(attempt 2 of 2\): job \d+ failed: RuntimeError: train@1: command failed "
                     r"\(killed by SIGKILL(, exit status 137 from the shell)?\) on attempt 1; log \S+$", out, re.M), out
    assert len(re.findall(r"^submitted train@1: job", log, re.M)) == 2
    # preempted: SLURM's warning signal, submitit checkpoints and requeues the same job
    assert len(re.findall(r"^submitted train@2: job (\d+)", log, re.M)) == 1
    job2 = re.search(r"^submitted train@2: job (\d+)", log, re.M).group(1)
    assert re.search(rf"^done train@1 \(job \d+, [\d.]+ s, 1 retry\)$", log, re.M), log
    assert re.search(rf"^done train@2 \(job {job2}, [\d.]+ s, 1 retry\)$", log, re.M), log
    folder = next((project / ".empriv" / "sweep").iterdir())
    log2 = (folder / f"{job2}_0_log.out").read_text()
    assert f"Requeued job {job2}" in log2 and "empriv sweep: train@2 attempt 2" in log2
    attempts = [json.loads(x) for x in (folder / "attempts" / "train@2.jsonl").read_text().splitlines()]
    assert [(a["attempt"], a["job_id"]) for a in attempts] == [(1, job2), (2, job2)]
    assert out.strip().splitlines()[-1] == "sweep: 2 done (2 after retries), 0 failed, 0 blocked, 0 up to date (skipped)"
    assert _outputs(project) == {"train-1.txt": "2", "train-2.txt": "3"}
    status = json.loads(_dvc(project, "status", "--json", env=env).stdout)
    assert set(status) == {"total", "score@1", "score@2"}  # not in this sweep: stale below the new train outputs
    assert "stages below the sweep are now stale: score@1, score@2, total" in out


@pytest.mark.slow
def test_slurm_unreachable_controller_is_one_line(project, slurm):
    conf = (slurm["state"] / "slurm.conf").read_text()
    dead = slurm["state"] / "dead.conf"
    dead.write_text(re.sub(r"SlurmctldPort=\d+", f"SlurmctldPort={free_port_pair()}", conf))
    run = _sweep(project, "--engine", "slurm", env=dict(slurm["env"], SLURM_CONF=str(dead)))
    assert run.returncode == 2
    assert run.stderr.strip() == ("error: engine slurm: no SLURM reachable (sinfo: slurm_load_partitions: Unable to "
                                  "contact slurm controller (connect failure))")


def test_a_signal_reads_the_same_whether_or_not_the_shell_exec_d_the_command():
    from empriv.infra.sweep.jobs import _failure
    assert _failure(-9) == "killed by SIGKILL"
    assert _failure(137) == "killed by SIGKILL, exit status 137 from the shell"
    assert _failure(143) == "killed by SIGTERM, exit status 143 from the shell"
    assert _failure(3) == "exit status 3"
    assert _failure(128) == "exit status 128"
    assert _failure(255) == "exit status 255"
    # the real thing: dash waits for its child, bash execs a single command
    command = f"{sys.executable} -c 'import os; os.kill(os.getpid(), 9)'"
    for shell, expected in (("/bin/dash", "killed by SIGKILL, exit status 137 from the shell"),
                            ("/bin/bash", "killed by SIGKILL")):
        rc = subprocess.run([shell, "-c", command]).returncode
        assert _failure(rc) == expected, (shell, rc)
