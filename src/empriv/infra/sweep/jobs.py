"""The sweep's jobs: :class:`StageJob` (the callable one job runs: an item's command, with DVC's environment, its
starts recorded, a ``Checkpointable`` that submitit requeues on preemption) and :class:`Engine` (one submitit
executor per stage, ``SlurmExecutor`` or ``LocalExecutor``, with that stage's resources)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from empriv.config import SlurmParams, SweepParams
from empriv.infra.sweep.leftovers import forget_command, group_members, record_command
from empriv.infra.sweep.plan import Item, SweepError, merged_resources
from empriv.infra.sweep.recover import started_state, write_record

SUBMITIT_PIN = "submitit==1.5.4"
LOCAL_TIMEOUT_MIN = 7 * 24 * 60  # the local engine has no time limit to speak of (LocalExecutor insists on one)
TERMINATE_GRACE_S = 60  # a preempted job's command gets this long after SIGTERM before SIGKILL

try:  # submitit is a runtime dependency; without it the sweep says so in one line (require_submitit)
    from submitit.helpers import Checkpointable as _Checkpointable
except ImportError:  # pragma: no cover - exercised by a test in a subprocess that hides submitit
    _Checkpointable = object

def slurm_parameters(resources: SlurmParams) -> dict[str, Any]:
    """submitit ``SlurmExecutor.update_parameters`` keywords for one job's resources: one task, ``--time``,
    ``--cpus-per-task``, ``--mem``, ``--gpus-per-node`` (left out when 0: clusters without GRES reject it),
    ``--partition`` (left out when null: the cluster's default), the warning signal and any extra sbatch
    options (``additional``)."""
    params: dict[str, Any] = {
        "ntasks_per_node": 1,
        "time": resources.timeout_min,
        "cpus_per_task": resources.cpus_per_task,
        "mem": _mem_text(resources.mem_gb),
        "signal_delay_s": resources.signal_delay_s,
    }
    if resources.partition is not None:
        params["partition"] = resources.partition
    if resources.gpus_per_node > 0:
        params["gpus_per_node"] = resources.gpus_per_node
    if resources.additional:
        params["additional_parameters"] = dict(resources.additional)
    return params


def _mem_text(mem_gb: float) -> str:
    """sbatch's ``--mem`` for a size in GB (whole GB, else MB)."""
    return f"{int(mem_gb)}GB" if mem_gb == int(mem_gb) else f"{int(round(mem_gb * 1024))}MB"

def _failure(returncode: int) -> str:
    """How a stage command ended, in words. A command killed by signal N shows as -N when the shell exec'd it
    (bash does for a single command) and as exit status 128 + N when the shell waited for it (dash, zsh): both
    read 'killed by SIG...', the second with the status the shell gave."""
    signals = signal.Signals._value2member_map_
    if returncode < 0 and -returncode in signals:
        return f"killed by {signal.Signals(-returncode).name}"
    if 128 < returncode < 160 and returncode - 128 in signals:
        return f"killed by {signal.Signals(returncode - 128).name}, exit status {returncode} from the shell"
    return f"exit status {returncode}"


def no_result_reason(job: Any, state: str) -> str:
    """Why a job ended without a result (submitit's ``UncompletedJobError``), in words: how its process ended when
    this process started it (the local engine: ``job process killed by SIGKILL``), else the scheduler's state."""
    process = getattr(job, "_process", None)
    returncode = process.poll() if process is not None else None
    if returncode:
        return f"job process {_failure(returncode)}, no result (state {state})"
    return f"job ended without a result (state {state})"


def _shell_argv(command: str) -> list[str]:
    """The argv DVC uses for a stage command: the user's ``$SHELL`` (else /bin/sh) ``-c``, with bash and zsh told
    not to read their rc files (as ``dvc.stage.run`` does)."""
    shell = os.environ.get("SHELL") or "/bin/sh"
    name = os.path.basename(shell).lower()
    opts = {"bash": ["--noprofile", "--norc"], "zsh": ["--no-rcs"]}.get(name, [])
    return [shell, *opts, "-c", command]

# --------------------------------------------------------------------------------------------- the job
def _attempts_path(folder: Path, address: str) -> Path:
    return folder / "attempts" / (re.sub(r"[^A-Za-z0-9._@=-]", "_", address) + ".jsonl")


def attempts_of(folder: Path, address: str) -> list[dict]:
    """The starts of an item's command in this sweep (one JSON line each, written by :class:`StageJob`)."""
    path = _attempts_path(folder, address)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _die_with_parent() -> None:
    """In the command's process (Linux): SIGTERM when the job process that started it dies, even by SIGKILL."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class StageJob(_Checkpointable):
    """The callable a job runs: an item's resolved command(s), in its working directory, with DVC's environment
    (``DVC_ROOT``, ``DVC_STAGE``). Each start is recorded in ``<folder>/attempts/<item>.jsonl``. A non-zero exit
    raises (the job fails; the sweep may re-submit it). When SLURM (or the local controller) sends the
    warning signal, submitit calls :meth:`checkpoint`: the command gets SIGTERM (SIGKILL after
    ``TERMINATE_GRACE_S``) and the same callable is requeued, unless the item's attempts are used up."""

    def __init__(self, address: str, commands: list[str], wdir: str, root: str, folder: str, max_attempts: int,
                 env: dict[str, str | None] | None = None, deps: list[str] | None = None,
                 outs: list[str] | None = None, params: dict[str, list[str]] | None = None):
        self.address, self.commands, self.wdir, self.root = address, list(commands), wdir, root
        self.folder, self.max_attempts = folder, max_attempts
        # what recover.py writes down once the command succeeds (None: no record, e.g. a job built by hand)
        self.record_paths = None if outs is None else (list(deps or []), list(outs), dict(params or {}))
        self.env = dict(env or {})  # variables to set (a value) or remove (None) in the command's environment
        self._proc: subprocess.Popen | None = None

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_proc"] = None
        return state

    def _record_start(self) -> int:
        path = _attempts_path(Path(self.folder), self.address)
        path.parent.mkdir(parents=True, exist_ok=True)
        attempt = len(attempts_of(Path(self.folder), self.address)) + 1
        job_id = os.environ.get("SLURM_JOB_ID") or os.environ.get("SUBMITIT_LOCAL_JOB_ID") or ""
        line = {"attempt": attempt, "job_id": job_id, "host": socket.gethostname(), "start": time.time()}
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(line) + "\n")
        return attempt

    def __call__(self) -> dict:
        attempt = self._record_start()
        env = dict(os.environ)
        env.update({"DVC_ROOT": self.root, "DVC_STAGE": self.address})
        for name, value in self.env.items():
            if value is None:
                env.pop(name, None)
            else:
                env[name] = value
        started = time.time()
        paths = getattr(self, "record_paths", None)  # None too for a job pickled by an older sweep
        state = started_state(paths[0], paths[2], self.root) if paths else None
        for command in self.commands:
            print(f"empriv sweep: {self.address} attempt {attempt} on {socket.gethostname()}: {command}", flush=True)
            # own session: a signal meant for the job step reaches the command only through checkpoint()
            self._proc = subprocess.Popen(_shell_argv(command), cwd=self.wdir, env=env, start_new_session=True,
                                          preexec_fn=_die_with_parent)
            record = record_command(self.folder, self.address, self._proc.pid, self.root)  # leftovers.py: for a job killed
            try:
                # poll rather than wait(): Popen.wait() holds a lock that checkpoint(), run from submitit's signal
                # handler in this same thread, would need
                wait = 0.01  # short at first (most stage commands of the default take seconds), then up to 0.2 s
                while (returncode := self._proc.poll()) is None:
                    time.sleep(wait)
                    wait = min(0.2, wait * 1.5)
            finally:  # cancelled (SIGINT), requeued or failing: the command's process group goes with the job;
                # a second SIGINT/SIGTERM (the terminal's and the controller's) must not cut this short
                mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
                try:
                    self._terminate(grace_s=5)
                    if not group_members(self._proc.pid):
                        forget_command(record)
                    self._proc = None
                finally:
                    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            if returncode != 0:
                how = _failure(returncode)
                raise RuntimeError(f"{self.address}: command failed ({how}) on attempt {attempt}")
        if state is not None:  # finished: a sweep killed before its commit leaves this for the next one (recover.py)
            write_record(self.folder, self.address, self.root, self.commands, state, paths[1])
        return {"address": self.address, "attempt": attempt, "seconds": time.time() - started,
                "host": socket.gethostname()}

    def _terminate(self, grace_s: float = TERMINATE_GRACE_S) -> None:
        """SIGTERM to the command's process group, SIGKILL after ``grace_s`` (no blocking wait: this may run
        inside a signal handler)."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is not None:  # the shell has ended; what it forked and left running goes too
            if group_members(proc.pid):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            deadline = time.monotonic() + grace_s
            while proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def checkpoint(self, *args: Any, **kwargs: Any):
        """Preempted or timed out: stop the command and requeue this callable (None: no requeue) when the item
        has attempts left. The command's own checkpoint (a training run's) is what makes the next attempt resume."""
        self._terminate()
        if len(attempts_of(Path(self.folder), self.address)) >= self.max_attempts:
            return None
        from submitit.helpers import DelayedSubmission

        return DelayedSubmission(self, *args, **kwargs)

# --------------------------------------------------------------------------------------------- engines
CONTROLLERS_LOG = "controllers.log"  # in the job folder: what the local engine's controller processes write


@contextlib.contextmanager
def stdio_to(path: Path):
    """While inside, this process's stdout and stderr descriptors (1, 2) write to ``path`` (appended): what a child
    started meanwhile inherits. Python's own ``sys.stdout``/``sys.stderr`` are flushed first and after."""
    sys.stdout.flush()
    sys.stderr.flush()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    saved = [os.dup(1), os.dup(2)]
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        yield path
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for d in (*saved, fd):
            os.close(d)


def require_submitit(engine: str):
    try:
        import submitit
    except ImportError as err:
        raise SweepError(f"engine {engine} needs submitit, which is not installed ({err}): "
                         f"pip install {SUBMITIT_PIN}") from None
    return submitit


def check_slurm(partitions: set[str | None]) -> list[str]:
    """Fail in one line unless a SLURM controller answers (``sinfo``); the partitions it lists. Partitions the
    resources name must be among them."""
    for tool in ("sbatch", "srun", "sinfo"):
        if shutil.which(tool) is None:
            raise SweepError(f"engine slurm: no SLURM reachable ({tool} not found on PATH); on a login node of your "
                             "cluster it is; locally use --engine local")
    try:
        out = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        raise SweepError("engine slurm: no SLURM reachable (sinfo did not answer within 60 s)") from None
    if out.returncode != 0:
        first = (out.stderr.strip().splitlines() or [f"exit status {out.returncode}"])[0]
        raise SweepError(f"engine slurm: no SLURM reachable (sinfo: {first})")
    available = [p.rstrip("*") for p in out.stdout.split()]
    for p in sorted(x for x in partitions if x is not None):
        if p not in available:
            raise SweepError(f"sweep.slurm.partition: partition {p!r} is not on this cluster (got {p!r}; "
                             f"allowed: {', '.join(available) or 'none listed by sinfo'})")
    return available


class Engine:
    """Submits :class:`StageJob`s through one submitit executor per stage (each with that stage's resources)."""

    def __init__(self, name: str, sweep: SweepParams, folder: Path, stages: list[str]):
        self.name, self.sweep, self.folder = name, sweep, folder
        submitit = require_submitit(name)
        self.executors: dict[str, Any] = {}
        if name == "slurm":
            check_slurm({merged_resources(sweep, s).partition for s in stages})
            for s in stages:
                ex = submitit.SlurmExecutor(folder=folder, max_num_timeout=sweep.max_retries)
                ex.update_parameters(**slurm_parameters(merged_resources(sweep, s)))
                self.executors[s] = ex
            self.job_env: dict[str, str | None] = {}
        else:
            for s in stages:
                ex = submitit.LocalExecutor(folder=folder, max_num_timeout=sweep.max_retries)
                ex.update_parameters(timeout_min=LOCAL_TIMEOUT_MIN,
                                     signal_delay_s=merged_resources(sweep, s).signal_delay_s)
                self.executors[s] = ex
            # LocalExecutor sets CUDA_VISIBLE_DEVICES from its gpus_per_node (none): give the command the
            # devices this process sees
            self.job_env = {"CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES")}

    def submit(self, item: Item, root: Path) -> Any:
        ex = self.executors[item.stage]
        if self.name == "slurm":
            ex.update_parameters(job_name=re.sub(r"[^A-Za-z0-9._@=-]", "_", f"empriv-{item.address}"))
        callable_ = StageJob(item.address, item.commands, item.wdir, str(root), str(self.folder),
                             max_attempts=self.sweep.max_retries + 1, env=self.job_env, deps=item.deps,
                             outs=item.outs, params=item.params)
        if self.name != "local":
            return ex.submit(callable_)
        # LocalExecutor starts a controller process that writes to the descriptors it inherits: when it is stopped
        # (a cancel, the terminal's Ctrl-C) its KeyboardInterrupt traceback went to the sweep's terminal
        with stdio_to(self.folder / CONTROLLERS_LOG):
            return ex.submit(callable_)

    def state(self, job: Any) -> str:
        return (job.state or "UNKNOWN").upper()

    def refresh(self) -> None:
        if self.name == "slurm":
            from submitit.slurm.slurm import SlurmJob

            SlurmJob.watcher.update()

