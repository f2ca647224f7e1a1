"""Faults during a sweep (issue 43), with real processes: a stage command killed under the warm worker and a job
process killed under submitit's local executor (the reason names the signal); two sweeps in one workspace (the
second stops at once naming the first), a lock left by a killed sweep (taken over in one line); failures a retry
cannot fix (not retried); SIGINT and SIGTERM (cancel, commit what finished, one line, exit 130 / 143)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
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


# ----------------------------------------------------------------------------------------- one sweep per workspace
sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_sweep import TRAIN_PY, _env, _sweep, _template, project  # noqa: E402,F401  (the sweep tests' project)

from empriv.infra.sweep import EXIT_BUSY, SweepBusy, workspace_lock  # noqa: E402

# train.py that says it started, then waits for a file named "go" before writing its output
WAITING_TRAIN_PY = TRAIN_PY.replace('os.makedirs("runs", exist_ok=True)',
                                    'open(f"started-{x}", "w").close()\n'
                                    'while not os.path.exists("go"):\n    time.sleep(0.05)\n'
                                    'os.makedirs("runs", exist_ok=True)')


def _wait_until(condition, timeout: float = 120.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(0.05)


@pytest.mark.slow
def test_a_second_sweep_in_the_same_workspace_stops_at_once_naming_the_first(project):
    pytest.importorskip("submitit", reason="submitit is not installed in this environment")
    (project / "train.py").write_text(WAITING_TRAIN_PY)
    lock = project / ".empriv" / "sweep.lock"
    first = subprocess.Popen([PY, "-m", "empriv.cli", "sweep", "--engine", "local", "--stages", "train"], cwd=project,
                             env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_until(lambda: (project / "started-1").exists() or first.poll() is not None, what="train@1 to start")
        assert first.poll() is None, first.communicate()
        second = _sweep(project, "--engine", "local", "--stages", "train", timeout=120)
        assert second.returncode == EXIT_BUSY == 75 and second.stdout == "", second.stdout + second.stderr
        assert re.fullmatch(
            rf"error: another sweep is running in this workspace \(pid {first.pid}, started "
            r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \(\d+ s ago\): empriv sweep --engine local --stages train\); wait for it "
            rf"to end, or stop it \(kill -INT {first.pid}\), then run again \(lock \S+/\.empriv/sweep\.lock\)\n",
            second.stderr), second.stderr
        assert len(list((project / ".empriv" / "sweep").iterdir())) == 1  # the second made no job folder
        (project / "go").touch()
        out, err = first.communicate(timeout=240)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode == 0, out + err
    assert out.strip().splitlines()[-1] == "sweep: 2 done, 0 failed, 0 blocked, 0 up to date (skipped)"
    assert lock.read_text() == ""  # released
    third = _sweep(project, "--engine", "local", "--stages", "train")
    assert third.returncode == 0 and "taking over" not in third.stdout + third.stderr
    assert "nothing to run: every item is up to date" in third.stdout


HOLD = """\
import sys, time
from empriv.infra.sweep import workspace_lock
with workspace_lock(sys.argv[1], command=["empriv", "sweep", "--all"]):
    print("held", flush=True)
    time.sleep(120)
"""


def test_the_lock_is_refused_while_held_taken_over_when_its_holder_was_killed_and_released_on_errors(tmp_path):
    holder = subprocess.Popen([PY, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(SweepBusy, match=rf"^another sweep is running in this workspace \(pid {holder.pid}, "
                                            r"started [-\d]+ [:\d]+ \(\d+ s ago\): empriv sweep --all\)"):
            with workspace_lock(tmp_path):
                pass
    finally:
        holder.kill()  # SIGKILL: no finally runs in the holder, its lock file still names it
        holder.wait()
        holder.stdout.close()
    path = tmp_path / ".empriv" / "sweep.lock"
    assert json.loads(path.read_text())["pid"] == holder.pid
    said: list[str] = []
    with workspace_lock(tmp_path, said.append, command=["empriv", "sweep"]):
        assert json.loads(path.read_text())["pid"] == os.getpid()
    assert len(said) == 1 and re.fullmatch(
        rf"sweep: taking over \.empriv/sweep\.lock from a sweep that ended without releasing it \(pid {holder.pid}, "
        r"started [-\d]+ [:\d]+ \(\d+ s ago\): empriv sweep --all\)", said[0]), said
    assert path.read_text() == ""
    with pytest.raises(RuntimeError, match="inside"):  # an error inside releases it too
        with workspace_lock(tmp_path, said.append):
            raise RuntimeError("inside")
    with workspace_lock(tmp_path, said.append):
        pass
    assert len(said) == 1  # no takeover after an orderly exit


# ----------------------------------------------------------------------------------- deterministic failures
from empriv.infra.sweep.faults import deterministic_cause, exit_status_of  # noqa: E402
from test_sweep import PARAMS, _log, _write_params  # noqa: E402

FAILED = "RuntimeError: train@2: command failed ({}) on attempt 1"


@pytest.mark.parametrize("how, tail, cause", [
    # run_stage's user error: exit status 2 and its error lines (the first one shown)
    ("exit status 2", ["2026 empriv INFO loading", "error: cube.epsilon: is required (allowed: a list)",
                       "error: cube.x: unknown key"],
     "the stage refused its input: error: cube.epsilon: is required (allowed: a list) (and 1 more error line(s) in "
     "its log)"),
    ("exit status 2", ["error: [Errno 13] Permission denied: 'models/x'"],
     "permission denied: error: [Errno 13] Permission denied: 'models/x'"),
    ("exit status 2", [], "exit status 2 (a stage's user error: invalid params or inputs)"),
    # a traceback's last line
    ("exit status 1", ["Traceback (most recent call last):", '  File "x.py", line 3', "    fh.write(b)",
                       "OSError: [Errno 28] No space left on device"],
     "no space left on device: OSError: [Errno 28] No space left on device"),
    ("exit status 1", ["PermissionError: [Errno 13] Permission denied: '/data/out'"],
     "permission denied: PermissionError: [Errno 13] Permission denied: '/data/out'"),
    ("exit status 1", ["wandb.errors.errors.UsageError: api_key not configured (no-tty). call wandb.login(key=[your_api_key])"],
     "W&B prerequisites missing: wandb.errors.errors.UsageError: api_key not configured (no-tty). call "
     "wandb.login(key=[your_api_key])"),
    ("exit status 1", ["empriv.config.errors.ConfigError: train.method: unknown method 'ful'"],
     "a configuration error: empriv.config.errors.ConfigError: train.method: unknown method 'ful'"),
    ("exit status 1", ["ValueError: epsilon must be > 0, got -1"],
     "an invalid value: ValueError: epsilon must be > 0, got -1"),
    # retried: a crash that is not one of those, a warning about the disk before another crash, any kill
    ("exit status 1", ["warning: [Errno 28] No space left on device (cache not written)",
                       "RuntimeError: CUDA error: an illegal memory access was encountered"], None),
    ("exit status 3", ["train.py: refusing x = 2"], None),
    ("killed by SIGKILL", ["OSError: [Errno 28] No space left on device"], None),
    ("killed by SIGTERM, exit status 143 from the shell", [], None),
])
def test_which_failures_a_retry_cannot_fix(how, tail, cause):
    assert deterministic_cause(FAILED.format(how), tail) == cause


def test_a_job_that_cannot_start_its_command_and_one_without_a_result():
    assert deterministic_cause("FileNotFoundError: [Errno 2] No such file or directory: '/gone/wdir'", []) == \
        "the job could not start its command: FileNotFoundError: [Errno 2] No such file or directory: '/gone/wdir'"
    assert deterministic_cause("job process killed by SIGKILL, no result (state INTERRUPTED)", []) is None
    assert deterministic_cause("job ended without a result (state TIMEOUT)", ["ValueError: x"]) is None
    assert [exit_status_of(FAILED.format(h)) for h in ("exit status 2", "exit status 137", "killed by SIGKILL")] == \
        [2, 137, None]


# train.py's modes for these: "config" runs empriv's run_stage on the project's params (not empriv's: a ConfigError,
# exit 2), "full" writes to /dev/full (a real ENOSPC traceback, exit 1); "kill" SIGKILLs its first attempt
FAULT_TRAIN_PY = TRAIN_PY.replace('marker = f".marker-{x}"\n', '''marker = f".marker-{x}"
if mode == "config":
    from empriv.stage import run_stage
    run_stage(lambda params: None)
if mode == "full":
    with open("/dev/full", "w") as fh:
        fh.write("weights")
''')


@pytest.mark.slow
def test_deterministic_failures_are_not_retried_and_a_kill_is(project):
    pytest.importorskip("submitit", reason="submitit is not installed in this environment")
    assert os.path.exists("/dev/full")
    (project / "train.py").write_text(FAULT_TRAIN_PY)
    _write_params(project, {**PARAMS, "cube": {"x": [1, 2, 3]}})
    run = _sweep(project, "--engine", "local", "--stages", "train", env=_env(RETRY_MODE="1=config,2=full,3=kill"))
    assert run.returncode == 1, run.stdout + run.stderr
    out = run.stdout
    assert re.search(r"^failed train@1 \(job \d+, attempt 1, not retried\): the stage refused its input: error: "
                     r"base\.offset: unknown key \(allowed: [^)]*\) \(and \d+ more error line\(s\) in its log\); "
                     r"log \S+_0_log\.err$", out, re.M), out
    assert re.search(r"^failed train@2 \(job \d+, attempt 1, not retried\): no space left on device: OSError: "
                     r"\[Errno 28\] No space left on device; log \S+_0_log\.err$", out, re.M), out
    assert re.search(r"^retry train@3 \(attempt 2 of 2\): job \d+ failed: RuntimeError: train@3: command failed "
                     r"\(killed by SIGKILL(, exit status 137 from the shell)?\) on attempt 1", out, re.M), out
    assert not re.search(r"^retry train@[12]", out, re.M) and "the last" not in out  # one line each, no tail
    folder = next((project / ".empriv" / "sweep").iterdir())
    starts = {x: len((folder / "attempts" / f"train@{x}.jsonl").read_text().splitlines()) for x in (1, 2, 3)}
    assert starts == {1: 1, 2: 1, 3: 2}
    assert re.search(r"^error: train@2 failed: not retried, no space left on device: OSError: \[Errno 28\] No space "
                     r"left on device; log \S+$", run.stderr, re.M), run.stderr
    assert out.strip().splitlines()[-1] == "sweep: 1 done (1 after retries), 2 failed, 0 blocked, 0 up to date (skipped)"
    assert (project / "runs" / "train-3.txt").read_text() == "4"
    assert re.search(r"^done train@3 \(job \d+, [\d.]+ s, 1 retry\)$", _log(run, project), re.M)


# ----------------------------------------------------------------------------------------------- interrupts
# empriv.infra.sweep.interrupts: SIGINT and SIGTERM noted, acted on between two steps of the engine loop
# train.py whose item 2 writes its pid and waits (until a file named "go" exists); item 1 finishes at once
STOPPING_TRAIN_PY = TRAIN_PY.replace('os.makedirs("runs", exist_ok=True)',
                                     'if x == "2" and not os.path.exists("go"):\n'
                                     '    open("started-2.tmp", "w").write(str(os.getpid()))\n'
                                     '    os.replace("started-2.tmp", "started-2")\n'
                                     '    time.sleep(300)\n'
                                     'os.makedirs("runs", exist_ok=True)')


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


@pytest.mark.slow
@pytest.mark.parametrize("signum, to_group", [(signal.SIGINT, True), (signal.SIGTERM, False)])
def test_an_interrupted_sweep_cancels_commits_what_finished_and_says_so_in_one_line(project, signum, to_group):
    """SIGINT as Ctrl-C sends it (to the whole foreground process group: the sweep, submitit's local controllers and
    job processes), SIGTERM as `make` forwards it (to the sweep alone)."""
    pytest.importorskip("submitit", reason="submitit is not installed in this environment")
    (project / "train.py").write_text(STOPPING_TRAIN_PY)
    sweep = subprocess.Popen([PY, "-m", "empriv.cli", "sweep", "--engine", "local", "--stages", "train"], cwd=project,
                             env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
    try:
        def train_1_done() -> bool:
            logs = list((project / ".empriv" / "sweep").glob("*/sweep.log"))
            return bool(logs) and re.search(r"\bdone train@1 ", logs[0].read_text()) is not None

        _wait_until(lambda: sweep.poll() is not None or ((project / "started-2").exists() and train_1_done()),
                    what="train@1 done and train@2 started")
        assert sweep.poll() is None, sweep.communicate()
        command = int((project / "started-2").read_text())
        if to_group:
            os.killpg(sweep.pid, signum)
        else:
            sweep.send_signal(signum)
        out, err = sweep.communicate(timeout=120)
    finally:
        if sweep.poll() is None:
            os.killpg(sweep.pid, signal.SIGKILL)
            sweep.wait()
    assert sweep.returncode == 128 + signum, out + err
    name = signal.Signals(signum).name
    assert out.strip().splitlines()[-1] == (f"sweep: interrupted by {name}: committed 1 finished item(s), cancelled "
                                            "1 running job(s); run `make repro` again to resume"), out
    assert f"interrupted by {name}: cancelling 1 running job(s), then committing the 1 finished item(s)" in out
    assert "Traceback" not in out + err and "KeyboardInterrupt" not in out + err, out + err
    if to_group:  # the controllers' own traceback of the terminal's SIGINT goes to their log, not the terminal
        assert "KeyboardInterrupt" in next((project / ".empriv" / "sweep").glob("*/controllers.log")).read_text()
    _wait_until(lambda: not _alive(command), timeout=30, what="the cancelled command to end")
    assert (project / ".empriv" / "sweep.lock").read_text() == ""
    status = json.loads(subprocess.run([PY, "-m", "dvc", "status", "--json"], cwd=project, env=_env(),
                                       capture_output=True, text=True, timeout=120).stdout)
    assert "train@2" in status and "train@1" not in status  # the finished item is committed
    # resuming: only what is still stale runs
    (project / "go").touch()
    again = _sweep(project, "--engine", "local", "--stages", "train")
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout.strip().splitlines()[-1] == "sweep: 1 done, 0 failed, 0 blocked, 1 up to date (skipped)"
