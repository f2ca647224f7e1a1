"""Faults during a sweep (issue 43), with real processes: a stage command killed under the warm worker, a job process
killed under submitit's local executor. What the sweep reports must name the signal."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from empriv.infra.sweep.jobs import StageJob, no_result_reason

PY = sys.executable

# a stage command's stand-in: writes its pid where the test can read it, then sleeps
SLEEPER = """\
import os, sys, time
open(sys.argv[1] + ".tmp", "w").write(str(os.getpid()))
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(120)
"""


def _wait_for(path: Path, timeout: float = 60.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            return int(path.read_text())
        time.sleep(0.05)
    raise AssertionError(f"{path} was not written within {timeout} s")


def _stop_warm_servers(warm_dir: Path) -> None:
    """Stop the servers of ``warm_dir`` as tests/infra/test_warm.py does: remove the socket, wait for the pid."""
    for lock in warm_dir.glob("*.lock"):
        text = lock.read_text().strip()
        lock.with_suffix(".sock").unlink(missing_ok=True)
        if not text:
            continue
        pid, deadline = int(text), time.monotonic() + 20
        while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
            time.sleep(0.05)
        if Path(f"/proc/{pid}").exists():
            os.kill(pid, signal.SIGKILL)


def test_a_stage_command_killed_in_a_warm_worker_fails_its_job_naming_the_signal(tmp_path):
    (tmp_path / "sleeper.py").write_text(SLEEPER)
    warm_dir = tmp_path / "warm"
    env = {"EMPRIV_WARM_DIR": str(warm_dir), "EMPRIV_WARM_PRELOAD": "json", "EMPRIV_WARM": "1"}
    job = StageJob("train@x", [f"{PY} -m empriv.infra.warm sleeper.py pid.txt"], str(tmp_path), str(tmp_path),
                   str(tmp_path / "jobs"), max_attempts=2, env=env)
    raised: list[BaseException] = []

    def run() -> None:
        try:
            job()
        except BaseException as err:  # noqa: BLE001 - the test reads it
            raised.append(err)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        worker = _wait_for(tmp_path / "pid.txt")
        os.kill(worker, signal.SIGKILL)  # the worker, as the OOM killer or a user's kill -9 does
        thread.join(timeout=60)
    finally:
        _stop_warm_servers(warm_dir)
    assert not thread.is_alive()
    assert [type(e) for e in raised] == [RuntimeError]
    # bash execs a single command (the client's own -9); dash waits for it (137)
    assert str(raised[0]) in ("train@x: command failed (killed by SIGKILL) on attempt 1",
                              "train@x: command failed (killed by SIGKILL, exit status 137 from the shell) on "
                              "attempt 1")


def test_a_local_job_process_killed_by_a_signal_is_named_in_the_reason(tmp_path):
    submitit = pytest.importorskip("submitit", reason="submitit is not installed in this environment")
    (tmp_path / "sleeper.py").write_text(SLEEPER)
    executor = submitit.LocalExecutor(folder=tmp_path / "jobs")
    executor.update_parameters(timeout_min=10)
    job = executor.submit(StageJob("score@x", [f"{PY} sleeper.py pid.txt"], str(tmp_path), str(tmp_path),
                                   str(tmp_path / "jobs"), max_attempts=1))
    command = _wait_for(tmp_path / "pid.txt")
    try:
        job._process.send_signal(signal.SIGKILL)  # the job's local controller, not the command it runs
        deadline = time.monotonic() + 30
        while not job.done() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert job.done()
        assert no_result_reason(job, job.state) == "job process killed by SIGKILL, no result (state INTERRUPTED)"
    finally:  # the job's own process (submitit's _submit) outlives its controller: end it through its command
        os.kill(command, signal.SIGKILL)
