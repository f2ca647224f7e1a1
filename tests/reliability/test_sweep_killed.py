"""A sweep killed by SIGKILL loses nothing it finished (issue 43; empriv.infra.sweep.recover), with real processes,
real DVC and real signals: the next sweep commits the finished items whose outputs and deps are as their job left
them (a dep written again with the same content included), says so in one line, and runs only the rest; a finished item whose output was changed meanwhile runs again.
The same after a SIGKILL in the middle of the commit itself. A per-item counter file counts the runs of each item."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "infra"))
from test_sweep import (DVC_YAML, PARAMS, TRAIN_PY, _assert_clean_and_no_op, _env, _sweep, _template,  # noqa: E402,F401
                        _write_params, project)

PIPELINE = DVC_YAML[:DVC_YAML.index("  total:")]  # up -> train@<x>: the sweep's stages, nothing below them
SWEEP = {**PARAMS["sweep"], "stages": ["train"], "resources": {}}

PY = sys.executable

# train.py whose item 3 waits until a file named "go" exists; every item appends a line to counts/train-<x> once it
# has written its output (the runs that finished)
COUNTING_TRAIN_PY = TRAIN_PY.replace('os.makedirs("runs", exist_ok=True)', '''if x == "3" and not os.path.exists("go"):
    open("started-3", "w").close()
    time.sleep(300)
os.makedirs("runs", exist_ok=True)''') + '''os.makedirs("counts", exist_ok=True)
with open(f"counts/train-{x}", "a") as fh:
    fh.write("run\\n")
'''


def _runs(project: Path) -> dict[str, int]:
    return {p.name: len(p.read_text().splitlines()) for p in sorted((project / "counts").glob("train-*"))}


def _records(project: Path) -> list[Path]:
    return sorted((project / ".empriv" / "sweep").glob("*/finished/*.json"))


def _log(run: subprocess.CompletedProcess, project: Path) -> str:
    """The sweep's log (the line naming it follows the lock's takeover line), without the times of day."""
    found = re.search(r"; log (\S+/sweep\.log)$", run.stdout, re.M)
    assert found, run.stdout
    return "".join(line[9:] + "\n" for line in (project / found.group(1)).read_text().splitlines())


def _status(project: Path) -> dict:
    done = subprocess.run([PY, "-m", "dvc", "status", "--json"], cwd=project, env=_env(), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _wait_until(condition, timeout: float = 120.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(0.05)


@pytest.mark.slow
def test_the_sweep_after_a_sigkill_commits_what_the_killed_one_finished_and_runs_the_rest(project):
    pytest.importorskip("submitit", reason="submitit is not installed in this environment")
    (project / "train.py").write_text(COUNTING_TRAIN_PY)
    (project / "dvc.yaml").write_text(PIPELINE)
    _write_params(project, {**PARAMS, "cube": {"x": [1, 2, 3]}, "sweep": SWEEP})
    sweep = subprocess.Popen([PY, "-m", "empriv.cli", "sweep", "--engine", "local", "--all", "--jobs", "2"],
                             cwd=project, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
    try:
        _wait_until(lambda: sweep.poll() is not None or (
            (project / "started-3").exists() and len(_records(project)) == 3), what="up, train@1 and train@2 finished")
        assert sweep.poll() is None
    finally:
        os.killpg(sweep.pid, signal.SIGKILL)  # the sweep and its jobs, as a lost session or `kill -9` ends them
        sweep.wait()
    assert sorted(p.stem for p in _records(project)) == ["train@1", "train@2", "up"]
    assert _runs(project) == {"train-1": 1, "train-2": 1}
    assert not (project / "dvc.lock").exists()  # nothing was committed
    (project / "runs" / "train-2.txt").write_text("99")  # a finished output changed after its job ended
    # a dep written again with the same content (a new inode and mtime), as an upstream stage re-run with the same
    # result or a checkout leaves it: the records still stand (its noted MD5)
    script = project / "train.py"
    text, mtime = script.read_text(), script.stat().st_mtime_ns
    script.unlink()
    script.write_text(text)
    os.utime(script, ns=(mtime + 10**9, mtime + 10**9))
    (project / "go").touch()

    again = _sweep(project, "--engine", "local", "--all", "--jobs", "2")
    assert again.returncode == 0, again.stdout + again.stderr
    lines = again.stdout.splitlines()
    assert "recovered 2 finished item(s) of a sweep that was killed: committed, not run again" in lines, again.stdout
    assert lines[-1] == "sweep: 2 done, 2 recovered from a killed sweep, 0 failed, 0 blocked, 0 up to date (skipped)"
    log = _log(again, project)
    assert re.search(r"^recovered up: ", log, re.M), log
    assert re.search(r"^recovered train@1: finished by a sweep that was killed, its outputs and deps as its job left "
                     r"them \(committed, not run again\)$", log, re.M), log
    assert re.search(r"^not recovered train@2 \(a killed sweep's record of it\): its outputs changed since its job "
                     r"ended; it runs$", log, re.M), log
    # nothing finished ran again but the item whose output was changed; the one killed ran to its end
    assert _runs(project) == {"train-1": 1, "train-2": 2, "train-3": 1}
    assert (project / "runs" / "train-2.txt").read_text() == "3"
    assert _records(project) == []  # committed: the records are gone
    _assert_clean_and_no_op(project)


# committing in a process that kills itself (SIGKILL) once the first item is in the cache: DVC has re-linked that
# item's output into the workspace, no dvc.lock entry is written
KILLED_COMMIT = """\
import os, signal, sys
from pathlib import Path
from empriv.infra.dvc_adapter import commit_stages
from empriv.infra.sweep.recover import FinishedRecords

root = Path(sys.argv[1])
records = FinishedRecords([root / "jobs"], root)

def committed(address):
    records.refresh_outs(address, [str(root / "runs" / f"train-{address[-1]}.txt")])
    os.kill(os.getpid(), signal.SIGKILL)

commit_stages(root, ["train@1", "train@2"], committed=committed)
"""


@pytest.mark.slow
def test_a_sweep_killed_during_its_commit_leaves_records_the_next_one_commits(project):
    """The killed sweep's jobs ran (StageJob, as a sweep's job runs them); its commit was killed after the first
    item: that item's output was re-linked by DVC (a new mtime), the other untouched, dvc.lock not written."""
    pytest.importorskip("submitit", reason="submitit is not installed in this environment")
    from empriv.infra.sweep import make_plan
    from empriv.infra.sweep.jobs import StageJob

    (project / "train.py").write_text(COUNTING_TRAIN_PY)
    (project / "dvc.yaml").write_text(PIPELINE)
    _write_params(project, {**PARAMS, "sweep": SWEEP})
    up = subprocess.run([PY, "-m", "dvc", "repro", "up"], cwd=project, env=_env(), capture_output=True, text=True)
    assert up.returncode == 0, up.stderr
    for item in make_plan(project, ["train"]).items:
        StageJob(item.address, item.commands, item.wdir, str(project), str(project / "jobs"), max_attempts=1,
                 deps=item.deps, outs=item.outs, params=item.params)()
    first = json.loads((project / "jobs" / "finished" / "train@1.json").read_text())
    killed = subprocess.run([PY, "-c", KILLED_COMMIT, str(project)], env=_env(), capture_output=True, text=True)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert "train@1" not in (project / "dvc.lock").read_text()
    refreshed = json.loads((project / "jobs" / "finished" / "train@1.json").read_text())
    assert refreshed["outs"] != first["outs"]  # DVC re-linked it: the record followed
    # the killed sweep's job folder where the next sweep looks for it
    (project / ".empriv" / "sweep").mkdir(parents=True)
    (project / "jobs").rename(project / ".empriv" / "sweep" / "20000101-000000-1")

    again = _sweep(project, "--engine", "local", "--stages", "train")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "recovered 2 finished item(s) of a sweep that was killed: committed, not run again" in again.stdout
    assert again.stdout.splitlines()[-1] == ("sweep: 0 done, 2 recovered from a killed sweep, 0 failed, 0 blocked, "
                                             "0 up to date (skipped)")
    assert _runs(project) == {"train-1": 1, "train-2": 1}
    assert _records(project) == []
    _assert_clean_and_no_op(project)
