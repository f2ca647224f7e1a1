"""A real single-node SLURM cluster on localhost (tools/slurm/cluster.sh) running submitit jobs.

The cluster runs no accounting daemon; submitit's state polls go through the `sacct` stand-in in
tools/slurm/bin, which answers from the controller (squeue) and the jobcomp/filetxt records.
The test never installs anything: without the SLURM and munge binaries, root, or submitit it skips.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from slurm_local import CLUSTER, DAEMONS, ROOT, SHIM_DIR, free_port_pair, missing_reason, one_cluster_at_a_time

pytestmark = pytest.mark.slow

_missing = missing_reason()
if _missing:
    pytest.skip(_missing, allow_module_level=True)
submitit = pytest.importorskip("submitit", reason="submitit is not installed in this environment")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status")
    return not (status.exists() and "\nState:\tZ" in status.read_text())


def _shim_sacct(job_id: str, env: dict) -> str:
    out = subprocess.run(["sacct", "-o", "JobID,State,NodeList", "--parsable2", "-j", job_id],
                         env=env, capture_output=True, text=True, check=True, timeout=120).stdout
    return out


def square_plus(x: int, y: int) -> tuple[int, str]:
    return x * x + y, os.environ.get("SLURM_JOB_ID", "")


def sleep_then_return(seconds: float) -> str:
    time.sleep(seconds)
    return "slept"


@pytest.fixture
def cluster(tmp_path, monkeypatch):
    with one_cluster_at_a_time():
        yield from _cluster(tmp_path, monkeypatch)


def _cluster(tmp_path, monkeypatch):
    state = tmp_path / "slurm"
    port = free_port_pair()
    started = time.monotonic()
    run = subprocess.run([str(CLUSTER), "start", str(state), str(port)], capture_output=True, text=True,
                         timeout=180)
    start_seconds = time.monotonic() - started
    pids = {d: int((state / "pids" / f"{d}.pid").read_text()) for d in DAEMONS
            if (state / "pids" / f"{d}.pid").exists()}
    try:
        assert run.returncode == 0, run.stdout + run.stderr
        monkeypatch.setenv("SLURM_CONF", str(state / "slurm.conf"))
        monkeypatch.setenv("PATH", f"{SHIM_DIR}{os.pathsep}{os.environ['PATH']}")
        # jobs unpickle this module's functions by reference (sbatch exports the environment)
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT / "tests"),
                                                                       os.environ.get("PYTHONPATH")])))
        yield {"state": state, "pids": pids, "start_seconds": start_seconds}
    finally:
        subprocess.run([str(CLUSTER), "stop", str(state)], capture_output=True, text=True, timeout=120)


def test_submitit_jobs_on_localhost_cluster(cluster, tmp_path):
    state, pids = cluster["state"], cluster["pids"]
    assert set(pids) == set(DAEMONS) and all(_alive(p) for p in pids.values())
    assert shutil.which("sacct") == str(SHIM_DIR / "sacct")
    conf = (state / "slurm.conf").read_text()
    assert f"CPUs={os.cpu_count()}" in conf or f"CPUs={len(os.sched_getaffinity(0))}" in conf
    sinfo = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %P %t"], capture_output=True, text=True, check=True)
    assert sinfo.stdout.split() == ["localhost", "local*", "idle"]

    executor = submitit.SlurmExecutor(folder=tmp_path / "logs")
    executor.update_parameters(partition="local", cpus_per_task=1, ntasks_per_node=1, time=2)

    # 1. a function's result comes back from the cluster
    job = executor.submit(square_plus, 7, 3)
    value, slurm_job_id = job.result()
    assert value == 52
    assert slurm_job_id == job.job_id  # it really ran as that SLURM job

    # 2. a second job's state, polled through the sacct path submitit uses
    watcher = job.watcher
    job2 = executor.submit(sleep_then_return, 4.0)
    calls_before = watcher.num_calls
    states = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        info = job2.get_info(mode="force")  # one sacct call
        if info.get("State") and (not states or states[-1] != info["State"]):
            states.append(info["State"])
        if info.get("State") == "COMPLETED":
            break
        time.sleep(0.3)
    assert watcher.num_calls > calls_before
    assert states[-1] == "COMPLETED", states
    assert states[0] in ("PENDING", "RUNNING"), states
    assert set(states) <= {"PENDING", "RUNNING", "COMPLETING", "COMPLETED"}, states
    assert job2.get_info(mode="cache")["NodeList"] == "localhost"
    assert job2.done() and job2.result() == "slept"
    assert job2.state == "COMPLETED"

    # 3. the jobcomp records hold both jobs
    jobcomp = (state / "jobcomp.txt").read_text()
    for j in (job, job2):
        assert f"JobId={j.job_id} " in jobcomp

    # stop: every recorded daemon is gone, and the stand-in answers from the jobcomp file alone
    stop = subprocess.run([str(CLUSTER), "stop", str(state)], capture_output=True, text=True, timeout=120)
    assert stop.returncode == 0, stop.stderr
    for name, pid in pids.items():
        assert not _alive(pid), f"{name} (pid {pid}) still running after stop"
    assert not list((state / "pids").glob("*.pid"))
    status = subprocess.run([str(CLUSTER), "status", str(state)], capture_output=True, text=True)
    assert status.returncode == 1 and status.stdout.count("not running") == 3
    out = _shim_sacct(job2.job_id, dict(os.environ))
    assert out.splitlines() == ["JobID|State|NodeList", f"{job2.job_id}|COMPLETED|localhost"]


def test_sacct_stand_in_refuses_what_it_does_not_implement(cluster):
    env = dict(os.environ)
    for args, word in ((["-j", "1"], "parsable"),
                       (["-P", "-o", "JobID,Elapsed"], "Elapsed"),
                       (["-P", "--starttime", "now"], "--starttime"),
                       (["-P", "-j", "12.batch"], "12.batch")):
        r = subprocess.run(["sacct", *args], env=env, capture_output=True, text=True)
        assert r.returncode == 2 and r.stdout == ""
        assert len(r.stderr.strip().splitlines()) == 1 and word in r.stderr
    # an unknown job id: the header only, as the real sacct prints
    assert _shim_sacct("999999", env).splitlines() == ["JobID|State|NodeList"]
