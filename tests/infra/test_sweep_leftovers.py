"""Stage commands that outlive their job (empriv.infra.sweep.leftovers, issue 43), with real processes: a command
whose shell (dash forks a single command) was killed keeps running in its process group; the sweep stops it, at
the end of its own jobs and at the start of the next sweep after a sweep was killed, in one line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from empriv.infra.sweep.leftovers import group_members, record_command, start_ticks, stop_leftovers

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_sweep import TRAIN_PY, _env, _sweep, _template, project  # noqa: E402,F401  (the sweep tests' project)

from test_sweep_faults import SLEEPER, STOPPING_TRAIN_PY, _wait_for  # noqa: E402  (stand-ins of a stage command)

PY = sys.executable


def _orphaned_command(tmp_path: Path) -> tuple[int, int]:
    """A command as a dead job leaves it: dash forked python (the group's only member now), the shell killed.
    Returns (group id, python's pid)."""
    (tmp_path / "sleeper.py").write_text(SLEEPER)
    shell = subprocess.Popen(["/bin/dash", "-c", f"{PY} sleeper.py pid.txt; true"], cwd=tmp_path,
                             start_new_session=True)
    child = _wait_for(tmp_path / "pid.txt")
    assert child != shell.pid  # forked, not exec'd
    shell.kill()
    shell.wait()
    assert group_members(shell.pid) == [child]
    return shell.pid, child


@pytest.mark.skipif(not Path("/bin/dash").exists() or not Path("/proc/self/stat").exists(),
                    reason="needs Linux's /proc and dash (a shell that forks a single command)")
def test_a_recorded_command_whose_shell_died_is_stopped_and_its_record_removed(tmp_path):
    pgid, child = _orphaned_command(tmp_path)
    folder = tmp_path / "sweep" / "1"
    record = record_command(folder, "train@x", pgid, tmp_path)
    assert record is not None and json.loads(record.read_text())["pid"] == pgid
    try:
        assert stop_leftovers([folder], tmp_path / "elsewhere") == []  # another workspace's: left alone
        assert start_ticks(child) is not None and record.exists()
        assert stop_leftovers([folder], tmp_path) == [f"train@x (pid {pgid})"]
        assert start_ticks(child) is None and group_members(pgid) == []
        assert not record.exists()
        assert stop_leftovers([folder], tmp_path) == []  # nothing left: says nothing
    finally:
        if start_ticks(child) is not None:
            os.kill(child, signal.SIGKILL)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux's /proc")
def test_a_record_whose_pid_was_recycled_is_dropped_without_a_signal(tmp_path):
    """A process of the recorded group id that started before the recorded command is not the command."""
    other = subprocess.Popen([PY, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        folder = tmp_path / "sweep" / "1"
        record = record_command(folder, "train@x", other.pid, tmp_path)
        data = json.loads(record.read_text())
        data["start_ticks"] += 10_000  # recorded as starting later than the process that holds the id now
        record.write_text(json.dumps(data))
        assert stop_leftovers([folder], tmp_path) == []
        assert other.poll() is None and not record.exists()
    finally:
        other.kill()
        other.wait()


@pytest.mark.slow
@pytest.mark.skipif(not Path("/bin/dash").exists(), reason="needs dash (a shell that forks a single command)")
def test_the_sweep_after_a_killed_sweep_stops_the_command_it_left_and_says_so_in_one_line(project):
    """SIGKILL to the sweep and its job processes (what a lost node or `kill -9` of the group does): the command of
    the running item survives, forked by dash in its own session. The next sweep stops it before it runs that
    item again."""
    pytest.importorskip("submitit", reason="submitit is not installed in this environment")
    (project / "train.py").write_text(STOPPING_TRAIN_PY)
    env = _env(SHELL="/bin/dash")
    sweep = subprocess.Popen([PY, "-m", "empriv.cli", "sweep", "--engine", "local", "--stages", "train"], cwd=project,
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        command = _wait_for(project / "started-2", timeout=120)
    finally:
        os.killpg(sweep.pid, signal.SIGKILL)
        sweep.wait()
    try:
        deadline = time.monotonic() + 10
        while start_ticks(command) is not None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert start_ticks(command) is not None, "the command did not outlive the killed sweep: nothing to test"
        (project / "go").touch()
        again = _sweep(project, "--engine", "local", "--stages", "train", env=env)
        assert again.returncode == 0, again.stdout + again.stderr
        lines = [ln for ln in again.stdout.splitlines() if ln.startswith("stopped ")]
        assert len(lines) == 1 and lines[0].startswith(
            "stopped 1 stage command(s) an earlier sweep left running (it was killed before it could stop them): "
            "train@2 (pid "), again.stdout
        assert start_ticks(command) is None
        assert again.stdout.strip().splitlines()[-1].startswith("sweep: ")
        assert "train@2" not in json.loads(subprocess.run([PY, "-m", "dvc", "status", "--json"], cwd=project,
                                                          env=env, capture_output=True, text=True).stdout or "{}")
    finally:
        if start_ticks(command) is not None:
            os.kill(command, signal.SIGKILL)
