"""``empriv sweep``: one job per matrix item of the selected DVC stages, locally or on SLURM, through submitit.

A sweep turns the items of dvc.yaml's matrix stages (``train@<config>``, ``score@<config>``, …) into jobs and
brings the results back under DVC's control, so that ``dvc repro`` afterwards has nothing to do:

1. **plan**: the items of the selected stages (``--stages`` / ``sweep.stages``, optionally filtered by
   ``--items`` globs), the stages they depend on that are not selected (*upstream*), and the dependencies between
   selected items (``score@x`` needs ``train@x``).
2. **upstream**: one ``dvc repro <upstream stages>`` brings everything the items read up to date first.
3. **jobs**: an item is stale when DVC says it changed, or when a selected item it depends on is stale. Up-to-date
   items are skipped. A stale item becomes ready once the items it depends on are done; then its outputs are
   removed (as ``dvc repro`` does) and DVC's run-cache is asked first (an identical earlier run is checked out,
   no job); otherwise the item's resolved ``cmd`` runs as one job: a :class:`StageJob` submitted through
   submitit's ``SlurmExecutor`` or ``LocalExecutor``.
   A failed job is re-submitted, and a preempted one (SLURM's warning signal) is requeued by submitit
   (:class:`StageJob` is a ``Checkpointable``); together at most ``sweep.max_retries`` times per item. A training
   command resumes from its own checkpoint: the sweep only runs the command again.
4. **collect**: in this one process, under DVC's repository lock, what ``dvc commit -f <item>`` does for every
   finished item (hash deps and outputs, store the outputs in the cache and the run-cache), the items' entries
   written into dvc.lock in one dump (DVC rewrites the whole file per dump), then ``Repo.status`` of those items
   must be empty.

Why not ``dvc repro --single-item`` per job: DVC holds its repository lock while it reproduces, so concurrent
repros in one workspace conflict; running the resolved command and committing once at the end gives the same
dvc.lock, cache and run-cache entries as ``dvc repro`` (DVC's ``Stage.run`` is ``remove_outs`` + run-cache
restore or the command + ``save`` + ``commit``).

The local engine uses submitit's ``LocalExecutor`` rather than a pool of plain subprocesses: the job callable, its
pickling, the job folder layout (``<job id>_0_log.out``/``.err``, result pickles), failure reporting and the
checkpoint/requeue path are then the very code a SLURM sweep runs, so a local sweep is a faithful rehearsal of a
cluster one. The sweep keeps ``sweep.jobs`` local jobs in flight (LocalExecutor itself starts every job at once).
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from empriv.config import ConfigError, ParamError, SlurmParams, SweepParams, _did_you_mean, parse_section, read_yaml
from empriv.dvc_status import changed_stages, params_parsed_once, read_locked, stage_changed
from empriv.sweep_output import SweepOutput, eta_seconds, log_tail

ENGINES = ("local", "slurm")
WAITING_STATES = ("PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "CONFIGURING", "SUSPENDED", "RESV_DEL_HOLD",
                  "UNKNOWN")  # submitted, not running (SLURM's names; UNKNOWN: sacct has not listed the job yet)
SUBMITIT_PIN = "submitit==1.5.4"
LOCAL_TIMEOUT_MIN = 7 * 24 * 60  # the local engine has no time limit to speak of (LocalExecutor insists on one)
TERMINATE_GRACE_S = 60  # a preempted job's command gets this long after SIGTERM before SIGKILL
LOG_NAME = "sweep.log"  # the sweep's log file, in its job folder
UP_TO_DATE_SHOWN = 8  # up-to-date items named on the terminal (all of them in the log)

try:  # submitit is a runtime dependency; without it the sweep says so in one line (require_submitit)
    from submitit.helpers import Checkpointable as _Checkpointable
except ImportError:  # pragma: no cover - exercised by a test in a subprocess that hides submitit
    _Checkpointable = object


class SweepError(ValueError):
    """A sweep cannot start or cannot finish cleanly; the message is one line."""


# --------------------------------------------------------------------------------------------- parameters
def load_sweep_params(params_path: str | Path) -> SweepParams:
    """The ``sweep`` section of a params file (defaults when it has none). Only this section is read: the sweep
    works on any DVC project; the pipeline's own validation runs as its upstream stage."""
    path = Path(params_path)
    if not path.exists():
        return SweepParams()
    raw = read_yaml(path) or {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: not a mapping of sections (got {type(raw).__name__})")
    return parse_section(SweepParams, raw.get("sweep", {}), "sweep")


def merged_resources(sweep: SweepParams, stage: str) -> SlurmParams:
    """``sweep.slurm`` with the fields that ``sweep.resources[stage]`` sets replacing the defaults, field by field
    (pydantic's ``model_fields_set``: a field the override leaves out keeps the ``sweep.slurm`` value, even where
    the override's own default differs). ``additional`` is one field: an override that sets it replaces it."""
    override = sweep.resources.get(stage)
    if override is None:
        return sweep.slurm
    return sweep.slurm.model_copy(update={name: getattr(override, name) for name in override.model_fields_set})


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


# --------------------------------------------------------------------------------------------- the plan
@dataclass
class Item:
    """One matrix item of a selected stage."""

    address: str  # DVC's name: train@eps8-b128-…
    stage: str  # the matrix stage: train
    key: str  # the item's key: eps8-b128-…
    commands: list[str]  # the resolved cmd (one entry per line of a list cmd)
    wdir: str  # absolute working directory of the command
    needs: list[str] = field(default_factory=list)  # items of the sweep it depends on (run first)
    stale: bool = False
    changed: bool = False  # DVC says the stage itself changed (stale without: only because something it needs is)
    between: bool = False  # not a selected item: a stage between selected items (runs as a job of its own)


@dataclass
class Plan:
    root: Path
    stages: list[str]
    items: list[Item]  # every selected item and every stage between them, dependency order
    upstream: list[str]  # other stages the items depend on directly (``dvc repro`` targets)
    stale_upstream: list[str]  # of those (and their ancestors), the ones DVC would run
    downstream: list[str]  # stages outside the sweep that depend on selected items
    empty: list[str] = field(default_factory=list)  # selected stages whose matrix has no items (skipped)
    lock_stale: list[str] | None = None  # dvc.lock entries of stages dvc.yaml no longer has (None: not looked at)

    @property
    def to_run(self) -> list[Item]:
        return [i for i in self.items if i.stale]

    @property
    def up_to_date(self) -> list[Item]:
        return [i for i in self.items if not i.stale]


def _matrix_stages(root: Path) -> tuple[list[str], list[str]]:
    """(every stage name of ``root/dvc.yaml``, those defined with ``matrix`` or ``foreach``)."""
    path = root / "dvc.yaml"
    if not path.exists():
        raise SweepError(f"{path}: no dvc.yaml: run the sweep from the project root (or pass --root)")
    stages = (read_yaml(path) or {}).get("stages") or {}
    names = list(stages)
    return names, [n for n, d in stages.items() if isinstance(d, dict) and ("matrix" in d or "foreach" in d)]


def _select_stages(requested: list[str], all_stages: list[str], matrix: list[str], key: str) -> list[str]:
    if not matrix:
        raise SweepError("dvc.yaml has no matrix stage (no stage with `matrix:` or `foreach:`): nothing to sweep")
    allowed = ", ".join(matrix)
    chosen: list[str] = []
    for name in requested:
        if name not in all_stages:
            raise SweepError(f"{key}: unknown stage{_did_you_mean(name, all_stages)} (got {name!r}; "
                             f"allowed: matrix stages of dvc.yaml: {allowed})")
        if name not in matrix:
            raise SweepError(f"{key}: stage {name!r} has no matrix (one command, no items): run it with `dvc repro "
                             f"{name}` (got {name!r}; allowed: matrix stages of dvc.yaml: {allowed})")
        if name not in chosen:
            chosen.append(name)
    if not chosen:
        raise SweepError(f"{key}: no stage selected (got []; allowed: matrix stages of dvc.yaml: {allowed})")
    return chosen


def _threads_per_job(params_path: Path) -> int:
    """runtime.threads of the params file (its default when absent): the torch threads each stage process uses."""
    from empriv.config import RuntimeParams

    runtime = (read_yaml(params_path) or {}).get("runtime") or {}
    threads = runtime.get("threads", RuntimeParams.model_fields["threads"].default)
    return threads if isinstance(threads, int) and threads >= 1 else 1


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


def _shell_argv(command: str) -> list[str]:
    """The argv DVC uses for a stage command: the user's ``$SHELL`` (else /bin/sh) ``-c``, with bash and zsh told
    not to read their rc files (as ``dvc.stage.run`` does)."""
    shell = os.environ.get("SHELL") or "/bin/sh"
    name = os.path.basename(shell).lower()
    opts = {"bash": ["--noprofile", "--norc"], "zsh": ["--no-rcs"]}.get(name, [])
    return [shell, *opts, "-c", command]


def make_plan(root: str | Path, stages: list[str], patterns: list[str] | None = None, *,
              stages_key: str = "sweep.stages", everything: bool = False) -> Plan:
    """Resolve the sweep's items, their order and which ones are stale (DVC's own ``Stage.changed``, propagated
    from stale ancestors: an item below a stale stage will run once that stage has run). Reads, never writes
    (but for DVC's hash cache in .dvc/tmp).

    ``everything``: every stage of the project's dvc.yaml is a member — the matrix items and the single stages
    (``prepare``, ``base``, ``analyze``, …) alike — so there is no upstream ``dvc repro`` and nothing downstream
    is left stale (``stages`` and ``patterns`` are then ignored)."""
    from dvc.repo import Repo, lock_repo

    root = Path(root).resolve()
    all_stages, matrix = _matrix_stages(root)
    chosen = list(all_stages) if everything else _select_stages(stages, all_stages, matrix, stages_key)
    repo = Repo(str(root))
    try:
        # DVC names stages relative to the working directory; params.yaml is parsed once for dvc.yaml's vars and
        # every stage's params (dvc_status)
        with contextlib.chdir(root), lock_repo(repo), params_parsed_once():
            index = repo.index
            graph = index.graph  # edges go from a stage to the stages it depends on
            by_group = {name: [] for name in chosen}
            here = str(root / "dvc.yaml")
            for stage in index.stages:
                group, _, key = stage.addressing.partition("@")
                if group in by_group and (str(Path(stage.dvcfile.path).resolve()) == here if everything else key):
                    by_group[group].append(stage)
            if everything:  # a stage whose matrix is empty has no member and is simply not part of the run
                chosen = [name for name in chosen if by_group[name]]
                patterns = None
            # a stage whose matrix is empty (the default adaptation audit, an emptied audit cube) is skipped when
            # another selected stage has items; alone, it is an error
            empty = [name for name in chosen if not by_group[name]]
            if chosen and len(empty) == len(chosen):
                raise SweepError(f"{stages_key}: matrix stage {empty[0]!r} has no items (its matrix/foreach list is "
                                 f"empty) (got {empty[0]!r}; allowed: a matrix stage with items)")
            chosen = [name for name in chosen if by_group[name]]
            candidates = [s for name in chosen for s in by_group[name]]
            if patterns:
                selected = [s for s in candidates
                            if any(fnmatch.fnmatchcase(s.addressing, p) or
                                   fnmatch.fnmatchcase(s.addressing.partition("@")[2], p) for p in patterns)]
                if not selected:
                    pats = ", ".join(repr(p) for p in patterns)
                    examples = ", ".join(s.addressing for s in candidates[:3])
                    raise SweepError(f"--items: no item of {', '.join(chosen)} matches {pats} (got {pats}; allowed: "
                                     f"globs over item names or their keys, e.g. {examples})")
            else:
                selected = candidates
            chosen_set = set(selected)

            import networkx as nx

            # between: non-selected stages that depend on a selected item and that a selected item depends on (the
            # pipeline's `filter` reads every train@ output and every score@ reads it): they run as jobs too, in order
            below = set().union(*(nx.descendants(graph, s) for s in selected)) - chosen_set  # what items depend on
            between = {u for u in below if any(d in chosen_set for d in nx.descendants(graph, u))}
            members = chosen_set | between
            # upstream: the other stages the sweep's members depend on directly (one `dvc repro` brings them up to date)
            upstream: list = []
            for s in [*selected, *sorted(between, key=lambda u: u.addressing)]:
                for dep in graph.successors(s):
                    if dep not in members and dep not in upstream:
                        upstream.append(dep)
            # dependency order: deps first, ties in dvc.yaml's order
            sub = graph.subgraph(members)
            position = {s: i for i, s in enumerate(index.stages)}
            order = list(nx.lexicographical_topological_sort(sub.reverse(copy=True), key=position.__getitem__))
            # staleness: every stage the members depend on, transitively, dependency-first; a stage below a stale
            # one is stale (it runs once that one has run), as `dvc repro` would decide
            relevant = members | below
            rel = graph.subgraph(relevant)
            stale: dict = {}
            changed = changed_stages(repo, rel.nodes)  # DVC's Stage.changed of each, under one read lock
            for s in reversed(list(nx.topological_sort(rel))):
                stale[s] = changed[s] or any(stale[d] for d in rel.successors(s))
            stale_upstream = sorted(s.addressing for s in relevant - members if stale[s])
            downstream = set()
            for s in members:
                downstream |= {a for a in nx.ancestors(graph, s) if a not in members}
            items = []
            for s in order:
                group, _, key = s.addressing.partition("@")
                cmd = s.cmd if isinstance(s.cmd, list) else [s.cmd]
                items.append(Item(address=s.addressing, stage=group, key=key, commands=list(cmd), wdir=str(s.wdir),
                                  needs=[d.addressing for d in sub.successors(s)], stale=stale[s], changed=changed[s],
                                  between=s in between))
            return Plan(root=root, stages=chosen, items=items, upstream=[u.addressing for u in upstream],
                        stale_upstream=stale_upstream, downstream=sorted(d.addressing for d in downstream),
                        empty=empty, lock_stale=_lock_entries_not_in(index, here))
    finally:
        repo.close()


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
                 env: dict[str, str | None] | None = None):
        self.address, self.commands, self.wdir, self.root = address, list(commands), wdir, root
        self.folder, self.max_attempts = folder, max_attempts
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
        for command in self.commands:
            print(f"empriv sweep: {self.address} attempt {attempt} on {socket.gethostname()}: {command}", flush=True)
            # own session: a signal meant for the job step reaches the command only through checkpoint()
            self._proc = subprocess.Popen(_shell_argv(command), cwd=self.wdir, env=env, start_new_session=True,
                                          preexec_fn=_die_with_parent)
            try:
                # poll rather than wait(): Popen.wait() holds a lock that checkpoint(), run from submitit's signal
                # handler in this same thread, would need
                wait = 0.01  # short at first (most stage commands of the default take seconds), then up to 0.2 s
                while (returncode := self._proc.poll()) is None:
                    time.sleep(wait)
                    wait = min(0.2, wait * 1.5)
            finally:  # cancelled (SIGINT), requeued or failing: the command's process group goes with the job
                self._terminate(grace_s=5)
                self._proc = None
            if returncode != 0:
                how = _failure(returncode)
                raise RuntimeError(f"{self.address}: command failed ({how}) on attempt {attempt}")
        return {"address": self.address, "attempt": attempt, "seconds": time.time() - started,
                "host": socket.gethostname()}

    def _terminate(self, grace_s: float = TERMINATE_GRACE_S) -> None:
        """SIGTERM to the command's process group, SIGKILL after ``grace_s`` (no blocking wait: this may run
        inside a signal handler)."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
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


@dataclass
class _Running:
    item: Item
    job: Any
    submitted: float
    attempts_seen: int  # starts recorded for the item when this job was last looked at
    starts: int = 0  # starts of this job seen so far (> 1: requeued)


class _Engine:
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
                             max_attempts=self.sweep.max_retries + 1, env=self.job_env)
        return ex.submit(callable_)

    def state(self, job: Any) -> str:
        return (job.state or "UNKNOWN").upper()

    def refresh(self) -> None:
        if self.name == "slurm":
            from submitit.slurm.slurm import SlurmJob

            SlurmJob.watcher.update()


# --------------------------------------------------------------------------------------------- the sweep
@dataclass
class SweepResult:
    plan: Plan
    done: list[str] = field(default_factory=list)
    restored: list[str] = field(default_factory=list)  # checked out from DVC's run-cache, no job
    # stale at planning only through a stage they need, which then re-ran with the same outputs: nothing to do
    unchanged: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # address -> reason with log path
    blocked: list[str] = field(default_factory=list)  # not run: an item they need failed
    retries: dict[str, int] = field(default_factory=dict)  # address -> re-runs (requeues + re-submissions)
    jobs: dict[str, list[str]] = field(default_factory=dict)  # address -> job ids
    status: dict = field(default_factory=dict)  # Repo.status of the committed items after the commit
    folder: Path | None = None
    log: Path | None = None  # the sweep's log file (every line, the per-job events only there)

    @property
    def ok(self) -> bool:
        return not self.failed and not self.blocked and not self.status


def _rel(path: Path | str, root: Path) -> str:
    path = Path(path)
    try:
        return str(path.resolve().relative_to(root))
    except ValueError:
        return str(path)


def _one_line(text: str, limit: int = 300) -> str:
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip() and not set(ln.strip()) <= {"-"}]
    # a job's traceback: its last line holds the error; submitit's own messages start with their point
    errors = [ln for ln in lines if re.match(r"^[A-Za-z_.]+(Error|Exception)\b", ln)]
    line = errors[-1] if errors else (lines[0] if lines else "no message")
    return line if len(line) <= limit else line[: limit - 3] + "..."


def run_sweep(root: str | Path = ".", *, engine: str | None = None, stages: list[str] | None = None,
              items: list[str] | None = None, jobs: int | None = None, params: str | Path | None = None,
              dry_run: bool = False, poll_s: float | None = None, everything: bool = False,
              echo: Callable[[str], None] = print, tty: bool | None = None) -> SweepResult:
    """Run a sweep (see the module docstring) and return what happened.

    What the user should see goes to ``echo`` (the plan's header, warnings, failures, the commit) with the progress:
    a tqdm bar on a terminal (``tty`` None: stderr is one), else a line per tenth of the items or 30 s
    (:mod:`empriv.sweep_output`). Every line, and the per-job events only there, goes to the sweep's log file
    ``<job folder>/sweep.log``, which the first line names (a dry run has none).

    ``everything`` (``--all``): every stage of dvc.yaml runs as a job of the sweep, single stages included (in
    dependency order, two independent ones at once where ``jobs`` allows), and all of them are committed together:
    what ``dvc repro`` does for the whole pipeline, without DVC's rewrite of dvc.lock after each stage."""
    root = Path(root).resolve()
    if everything and (stages is not None or items):
        raise SweepError(f"--all: every stage of dvc.yaml is swept; --stages and --items select some (got --all with "
                         f"{'--stages' if stages is not None else '--items'}; allowed: one or the other)")
    sweep = load_sweep_params(Path(params) if params else root / "params.yaml")
    engine = engine or sweep.engine
    if engine not in ENGINES:
        raise SweepError(f"--engine: unknown engine (got {engine!r}; allowed: {', '.join(ENGINES)})")
    if jobs is not None and jobs < 1:
        raise SweepError(f"--jobs: must be >= 1 (got {jobs}; allowed: an integer >= 1)")
    jobs = jobs or sweep.jobs
    all_names, matrix = _matrix_stages(root)
    stage_names = list(all_names) if everything else stages if stages is not None else list(sweep.stages)
    stages_key = "--stages" if stages is not None else "sweep.stages"
    for name in sweep.resources:
        if name not in all_names:
            raise SweepError(f"sweep.resources.{name}: not a stage of dvc.yaml{_did_you_mean(name, all_names)} "
                             f"(got {name!r}; allowed: {', '.join(matrix) or 'matrix stages'})")
    if not dry_run:  # fail on the engine before anything runs
        require_submitit(engine)
        if engine == "slurm":
            check_slurm({merged_resources(sweep, s).partition for s in [*stage_names, *sweep.resources]
                         if s in all_names})

    with _dvc_quiet():
        plan = make_plan(root, stage_names, items, stages_key=stages_key, everything=everything)
    result = SweepResult(plan=plan)
    out = SweepOutput(echo, tty=tty)
    try:
        with _dvc_quiet():
            result = _sweep(root, plan, result, out, engine=engine, sweep=sweep, stages_key=stages_key, items=items,
                            jobs=jobs, params=params, dry_run=dry_run, poll_s=poll_s, matrix=matrix)
        out.note(summary_line(result))  # the line the command prints last (a dry run has no log)
        return result
    finally:
        out.close_log()


@contextlib.contextmanager
def _dvc_quiet():
    """DVC's own progress bars (hashing, lock waits, the cache check of ``dvc status``: drawn unless the
    ``dvc.progress`` / ``dvc_data.callbacks`` logger is above ERROR) and info lines ("Updating lock file") would
    break through the sweep's bar: in this process DVC says warnings and errors only while the sweep runs (the
    upstream ``dvc repro`` and the stage commands run in processes of their own)."""
    quiet = {"dvc": logging.WARNING, "dvc.progress": logging.CRITICAL, "dvc_data": logging.WARNING,
             "dvc_data.callbacks": logging.CRITICAL}
    levels = {name: logging.getLogger(name).level for name in quiet}
    for name, level in quiet.items():
        logging.getLogger(name).setLevel(max(level, logging.getLogger(name).getEffectiveLevel()))
    try:
        yield
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


def _sweep(root: Path, plan: Plan, result: SweepResult, out: SweepOutput, *, engine: str, sweep: SweepParams,
           stages_key: str, items: list[str] | None, jobs: int, params: str | Path | None, dry_run: bool,
           poll_s: float | None, matrix: list[str]) -> SweepResult:
    echo = out.say
    folder = None
    if not dry_run:  # the job folder and its log first: the first line says where the log is
        folder = Path(sweep.folder)
        folder = (folder if folder.is_absolute() else root / folder) / \
            f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
        out.open_log(folder / LOG_NAME)
        result.folder, result.log = folder, folder / LOG_NAME
    between = [i.address for i in plan.items if i.between]
    echo(f"sweep: engine {engine}, stages {', '.join(plan.stages)}"
         + (f" (and between them: {', '.join(between)})" if between else "")
         + f": {len(plan.items)} items, {len(plan.to_run)} to run, {len(plan.up_to_date)} up to date"
         + (f"; log {_rel(folder / LOG_NAME, root)}" if folder is not None else ""))
    if plan.empty:
        echo(f"no items (empty matrix), skipped: {', '.join(plan.empty)}")
    if engine == "local":
        threads = _threads_per_job(Path(params) if params else root / "params.yaml")
        cpus = os.cpu_count() or 1
        if min(jobs, max(1, len(plan.to_run))) * threads > cpus:
            echo(f"warning: {jobs} local jobs x runtime.threads {threads} = {jobs * threads} torch threads on {cpus} "
                 f"CPUs: the jobs compete for the cores (set runtime.threads to {max(1, cpus // jobs)}, or --jobs "
                 f"{max(1, cpus // threads)})")
    if plan.up_to_date:
        listed = [i.address for i in plan.up_to_date]
        if len(listed) > UP_TO_DATE_SHOWN:
            out.note(f"up to date (skipped): {', '.join(listed)}")
            out.echo(f"up to date (skipped): {', '.join(listed[:UP_TO_DATE_SHOWN])} and "
                     f"{len(listed) - UP_TO_DATE_SHOWN} more (all of them in the log)")
        else:
            echo(f"up to date (skipped): {', '.join(listed)}")
    for s in dict.fromkeys(i.stage for i in plan.items):
        if engine == "slurm":
            r = merged_resources(sweep, s)
            echo(f"resources of {s}: partition {r.partition or '(default)'}, {r.cpus_per_task} CPUs, "
                 f"{r.gpus_per_node} GPUs, {r.mem_gb:g} GB, {r.timeout_min} min"
                 + (f", {r.additional}" if r.additional else ""))
    if dry_run:
        if plan.stale_upstream:
            echo(f"upstream would run first (dvc repro {' '.join(plan.upstream)}): {', '.join(plan.stale_upstream)}")
        for i in plan.to_run:
            echo(f"would run {i.address}" + (f" after {', '.join(i.needs)}" if i.needs else "") + f": {i.commands[0]}")
        return result

    if plan.upstream:
        echo(f"upstream: dvc repro {' '.join(plan.upstream)}"
             + ("" if plan.stale_upstream else " (up to date)"))
        serial = [u for u in plan.stale_upstream if "@" in u and u.partition("@")[0] in matrix]
        if serial:
            echo(f"note: {len(serial)} stale item(s) of matrix stages upstream run in that dvc repro, one after "
                 f"another ({', '.join(sorted({u.partition('@')[0] for u in serial}))}): add their stage to the "
                 "sweep's stages to run them as jobs")
        if plan.stale_upstream:
            run = subprocess.run([sys.executable, "-m", "dvc", "repro", *plan.upstream], cwd=root)
            if run.returncode != 0:
                raise SweepError(f"upstream: `dvc repro {' '.join(plan.upstream)}` failed (exit status "
                                 f"{run.returncode}); nothing was submitted")
            plan = make_plan(root, plan.stages, items, stages_key=stages_key)  # staleness after the upstream run
            result.plan = plan
            echo(f"after upstream: {len(plan.to_run)} to run, {len(plan.up_to_date)} up to date")
    if not plan.to_run:
        echo("nothing to run: every item is up to date")
        _prune_lock(root, echo, plan.lock_stale)
        return result

    runner = _Engine(engine, sweep, folder, sorted({i.stage for i in plan.to_run}))
    # local: a finished job is seen within 0.1 s (0.5 s cost ~0.25 s per item of a two-job slot)
    poll_s = poll_s if poll_s is not None else (2.0 if engine == "slurm" else 0.1)
    out.note(f"job folder: {_rel(folder, root)}")
    _run_jobs(plan, runner, result, root, folder, sweep, jobs, poll_s, out)
    _collect(plan, result, root, echo)
    _prune_lock(root, echo)
    return result


def _lock_entry_names(lock: Path) -> list[str]:
    """The stage names of a dvc.lock ([] when there is none), read as plain YAML (libyaml when available)."""
    import yaml

    if not lock.exists():
        return []
    with open(lock, encoding="utf-8") as fh:
        return list((yaml.load(fh, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}).get("stages") or {})


def _lock_entries_not_in(index: Any, dvc_yaml: str) -> list[str]:
    """:func:`stale_lock_entries` against an index DVC has already built (no second repository)."""
    known = {s.name for s in index.stages if str(Path(s.dvcfile.path).resolve()) == dvc_yaml}
    return sorted(name for name in _lock_entry_names(Path(dvc_yaml).with_suffix(".lock")) if name not in known)


def stale_lock_entries(root: Path) -> list[str]:
    """Entries of ``root/dvc.lock`` whose stage no longer exists in ``root/dvc.yaml`` (a matrix item of a value
    dropped from the cube, a renamed stage). DVC never removes them, and it re-reads and rewrites the whole lock
    file after every stage, so they slow down every later run (the default lock had grown to twice its size)."""
    from dvc.repo import Repo

    if not (root / "dvc.lock").exists():
        return []
    repo = Repo(str(root))
    try:
        with contextlib.chdir(root):
            return _lock_entries_not_in(repo.index, str(root / "dvc.yaml"))
    finally:
        repo.close()


def _prune_lock(root: Path, echo: Callable[[str], None], stale: list[str] | None = None) -> list[str]:
    """Remove :func:`stale_lock_entries` from dvc.lock (under DVC's repository lock, formatting kept); ``stale``:
    those entries as the plan found them (nothing has been committed since), else read again."""
    from dvc.repo import Repo, lock_repo
    from dvc.utils.serialize import modify_yaml

    stale = stale_lock_entries(root) if stale is None else stale
    if stale:
        repo = Repo(str(root))
        try:
            with contextlib.chdir(root), lock_repo(repo), modify_yaml(root / "dvc.lock") as data:
                for name in stale:
                    data["stages"].pop(name, None)
        finally:
            repo.close()
        shown = ", ".join(stale[:3]) + (f" and {len(stale) - 3} more" if len(stale) > 3 else "")
        echo(f"dvc.lock: removed {len(stale)} entr{'y' if len(stale) == 1 else 'ies'} of stages dvc.yaml no longer "
             f"has ({shown})")
    return stale


class _Restorer:
    """As ``dvc repro`` does before a stage runs: remove its outputs, then try DVC's run-cache (an identical earlier
    run's outputs are checked out). One DVC repository object for the whole sweep, opened at the first item (after
    the upstream repro): opening one and building its index takes ~1 s with the default pipeline, which per item
    would hold up every job launch."""

    def __init__(self, root: Path):
        self.root = root
        self._repo = None
        self._stages: dict = {}

    def _stage(self, address: str) -> Any:
        from dvc.repo import Repo

        if self._repo is None:
            self._repo = Repo(str(self.root))
            self._stages = {s.addressing: s for s in self._repo.index.stages}
        return self._stages[address]

    def unchanged(self, address: str) -> bool:
        """DVC's ``Stage.changed`` now, against the stage's dvc.lock entry: False when a dependency or an output
        differs (the sweep commits at the end, so the lock still holds what the stage last ran with)."""
        from dvc.repo import lock_repo

        with contextlib.chdir(self.root):
            stage = self._stage(address)
            with lock_repo(self._repo), read_locked(self._repo, [stage]):  # one read lock, not three (dvc_status)
                return not stage_changed(stage)

    def __call__(self, address: str) -> bool:
        """Outputs removed; True when the run-cache had them."""
        from dvc.repo import lock_repo
        from dvc.stage.cache import RunCacheNotFoundError

        with contextlib.chdir(self.root):
            stage = self._stage(address)
            with lock_repo(self._repo):
                stage.remove_outs(ignore_remove=False, force=False)
                try:
                    self._repo.stage_cache.restore(stage)
                except RunCacheNotFoundError:
                    return False
                return True

    def close(self) -> None:
        if self._repo is not None:
            self._repo.close()
            self._repo = None


def _depths(items: list[Item]) -> dict[str, int]:
    """Per item, the number of items on the longest chain from it to the end of the sweep (itself included): what
    must still run, one after another, once it has run."""
    below: dict[str, list[str]] = {i.address: [] for i in items}
    for i in items:
        for n in i.needs:
            if n in below:
                below[n].append(i.address)
    depth: dict[str, int] = {}
    for i in reversed(items):  # items are in dependency order: what depends on an item comes after it
        depth[i.address] = 1 + max((depth[a] for a in below[i.address] if a in depth), default=0)
    return depth


def launch_order(ready: list[Item], depth: dict[str, int], seconds: dict[str, list[float]]) -> list[Item]:
    """The order in which ready items take free job slots: the longest chain still below an item first (the
    ``train@`` items before the ``audit@`` items, which only ``analyze`` waits for), then, among equals, the stage
    whose jobs have taken longest so far — a stage not yet timed first, to learn it — so the long ``audit@`` jobs
    fill slots beside the short ``score@`` ones rather than all coming at the end; ties keep dvc.yaml's order."""
    def mean(stage: str) -> float:
        done = seconds.get(stage)
        return sum(done) / len(done) if done else float("inf")

    position = {i.address: k for k, i in enumerate(ready)}
    return sorted(ready, key=lambda i: (-depth.get(i.address, 1), -mean(i.stage), position[i.address]))


def _run_jobs(plan: Plan, runner: _Engine, result: SweepResult, root: Path, folder: Path, sweep: SweepParams,
              jobs: int, poll_s: float, out: SweepOutput) -> None:
    """Run the plan's stale items as jobs. Per-job events go to the log (``out.note``); the user sees the progress,
    retries and failures (``out.say``)."""
    todo = [i for i in plan.to_run]
    stale = {i.address for i in todo}
    finished: set[str] = {i.address for i in plan.up_to_date}
    running: dict[str, _Running] = {}
    submitted_once: set[str] = set()
    last_counts = None
    last_refresh = time.monotonic()
    max_attempts = sweep.max_retries + 1
    depth = _depths(plan.items)
    seconds: dict[str, list[float]] = {}  # command seconds of the finished jobs, per stage (launch_order)
    held: dict[str, list[float]] = {}  # slot seconds (submission to completion) of the finished jobs, per stage (ETA)
    peak = 1  # most jobs seen running at once (SLURM's parallelism for the ETA)

    def n_running() -> int:
        return sum(runner.state(r.job) not in WAITING_STATES for r in running.values())  # or ended, to be collected

    def counts(n_run: int) -> str:
        return (f"jobs: {len(running) - n_run} submitted, {n_run} running, "
                f"{len(result.done) + len(result.restored) + len(result.unchanged)} done, {len(result.failed)} failed, "
                f"{len(todo)} waiting (of {len(stale)})")

    def show(n_run: int) -> None:
        now = time.monotonic()
        waiting: dict[str, int] = {}
        for i in todo:
            waiting[i.stage] = waiting.get(i.stage, 0) + 1
        eta = eta_seconds(held, waiting, [(r.item.stage, now - r.submitted) for r in running.values()],
                          jobs if runner.name == "local" else peak)
        n_finished = (len(result.done) + len(result.restored) + len(result.unchanged) + len(result.failed)
                      + len(result.blocked))
        out.update(n_finished, n_run, len(result.failed), eta)

    restore = _Restorer(root)
    out.start(len(stale))
    try:
        while todo or running:
            # collect what finished
            if runner.name == "slurm" and time.monotonic() - last_refresh > 20:
                runner.refresh()  # a job killed outside submitit is only seen through sacct
                last_refresh = time.monotonic()
            for address, r in list(running.items()):
                if not r.job.done():
                    started = len(attempts_of(folder, address))
                    if started > r.attempts_seen:
                        r.starts += started - r.attempts_seen
                        r.attempts_seen = started
                        if r.starts > 1:  # this job started again: requeued after a preemption or timeout
                            out.note(f"requeued {address} (job {r.job.job_id}): attempt {started} of {max_attempts} "
                                     "started")
                    continue
                del running[address]
                error = r.job.exception()
                attempts = attempts_of(folder, address)
                result.retries[address] = max(0, len(attempts) - 1)
                log = _rel(r.job.paths.stderr, root)
                if error is None:
                    done = r.job.result()
                    seconds.setdefault(r.item.stage, []).append(done["seconds"])
                    held.setdefault(r.item.stage, []).append(time.monotonic() - r.submitted)
                    result.done.append(address)
                    finished.add(address)
                    retried = f", {result.retries[address]} retr{'y' if result.retries[address] == 1 else 'ies'}" \
                        if result.retries[address] else ""
                    out.note(f"done {address} (job {r.job.job_id}, {done['seconds']:.1f} s{retried})")
                    continue
                if type(error).__name__ == "UncompletedJobError":  # no result: killed, timed out, cancelled
                    reason = f"job ended without a result (state {runner.state(r.job)})"
                else:
                    reason = _one_line(str(error))
                if len(attempts) < max_attempts:
                    out.say(f"retry {address} (attempt {len(attempts) + 1} of {max_attempts}): job {r.job.job_id} "
                            f"failed: {reason}; log {log}")
                    todo.insert(0, r.item)
                    continue
                result.failed[address] = f"{reason}; log {log}"
                out.say(f"failed {address} (job {r.job.job_id}, {len(attempts)} attempt(s)): {reason}; log {log}")
                tail = log_tail(r.job.paths.stderr)
                out.say(f"  the last {len(tail)} line(s) its command wrote to stderr:" if tail else
                        "  its command wrote nothing to stderr")
                for line in tail:
                    out.say(f"  | {line}")
            # launch what is ready
            for item in launch_order(todo, depth, seconds):
                if any(n in result.failed or n in result.blocked for n in item.needs):
                    todo.remove(item)
                    result.blocked.append(item.address)
                    out.note(f"blocked {item.address}: it needs "
                             f"{', '.join(n for n in item.needs if n not in finished)}, which failed")
                    continue
                if not all(n in finished for n in item.needs if n in stale) or (
                        runner.name == "local" and len(running) >= jobs):
                    continue
                todo.remove(item)
                if item.address not in submitted_once:
                    submitted_once.add(item.address)
                    if not item.changed and restore.unchanged(item.address):
                        # as `dvc repro` decides at each stage's turn: what it needs re-ran and gave the same outputs
                        result.unchanged.append(item.address)
                        finished.add(item.address)
                        out.note(f"up to date at its turn: {item.address} (what it needs re-ran with the same "
                                 "outputs)")
                        continue
                    if restore(item.address):
                        result.restored.append(item.address)
                        finished.add(item.address)
                        out.note(f"restored {item.address} from DVC's run-cache (an identical run's outputs; no job)")
                        continue
                job = runner.submit(item, root)
                result.jobs.setdefault(item.address, []).append(str(job.job_id))
                running[item.address] = _Running(item, job, time.monotonic(),
                                                 len(attempts_of(folder, item.address)))
                out.note(f"submitted {item.address}: job {job.job_id}, logs {_rel(job.paths.stdout, root)} and .err")
            n_run = n_running()
            peak = max(peak, n_run)
            line = counts(n_run)
            if line != last_counts:
                out.note(line)
                last_counts = line
            show(n_run)
            if todo or running:
                time.sleep(poll_s)
        out.close()
    except KeyboardInterrupt:
        out.close()
        for r in running.values():
            try:
                r.job.cancel(check=False)
            except Exception:  # noqa: BLE001 - best effort on the way out
                pass
        out.say(f"interrupted: cancelled {len(running)} job(s); committing the {len(result.done)} finished item(s)")
        result.failed.update({a: "interrupted" for a in running})
        result.blocked.extend(i.address for i in todo)
        restore.close()
        _collect(plan, result, root, out.say)
        raise
    finally:
        out.close()  # a no-op when closed above; the bar must not outlive an error
        restore.close()


def _collect(plan: Plan, result: SweepResult, root: Path, echo: Callable[[str], None]) -> None:
    """Commit every finished item in this one process (dvc.lock, cache, run-cache), then check DVC's status."""
    from dvc.repo import Repo, lock_repo

    finished = result.done + result.restored
    if not finished:
        return
    echo(f"committing {len(finished)} item(s) to dvc.lock and the DVC cache, then dvc status")
    repo = Repo(str(root))
    try:
        with contextlib.chdir(root):
            with lock_repo(repo):
                _commit_items(repo, finished)
            # the whole pipeline's status once, read back from disk, kept for the committed items (each stage is
            # checked once; per target with its deps, the upstream stages they share were checked once per item)
            repo = _reopened(repo, root)
            done = set(finished)
            result.status = {k: v for k, v in repo.status().items() if k in done}
    finally:
        repo.close()
    if result.status:
        echo(f"dvc status after the commit is not clean: {json.dumps(result.status)}")
    else:
        echo(f"committed {len(finished)} item(s) to dvc.lock and the DVC cache; dvc status of them: clean")
    if plan.downstream:
        echo(f"stages below the sweep are now stale: {', '.join(plan.downstream)} (run `dvc repro` to update them)")


def _reopened(repo: Any, root: Path) -> Any:
    """A fresh repository object (the committed lock entries read back from disk, as a new `dvc status` would)."""
    from dvc.repo import Repo

    repo.close()
    return Repo(str(root))


def _commit_items(repo: Any, addresses: list[str]) -> None:
    """What ``dvc commit -f <address>`` does for each item (hash deps and outputs, store the outputs in the cache and
    the run-cache), but each dvc.yaml's lock entries written in one go: DVC re-reads and rewrites the whole lock file
    per dump, so committing items one by one costs time quadratic in their number (``Repo.commit`` takes a single
    target)."""
    stages_by_address = {s.addressing: s for s in repo.index.stages}  # one index (collect_granular re-reads dvc.yaml)
    by_file: dict[str, tuple[Any, list[Any]]] = {}
    for address in addresses:
        stage = stages_by_address[address]
        stage.save(allow_missing=False)
        stage.commit(allow_missing=False, relink=True)
        by_file.setdefault(stage.dvcfile.path, (stage.dvcfile, []))[1].append(stage)
    for dvcfile, stages in by_file.values():
        dvcfile.dump_stages(stages, update_pipeline=False)


def summary_line(result: SweepResult) -> str:
    parts = [f"{len(result.done)} done"]
    retried = sum(1 for a in result.done if result.retries.get(a))
    if retried:
        parts[-1] += f" ({retried} after retries)"
    if result.restored:
        parts.append(f"{len(result.restored)} restored from the run-cache")
    parts += [f"{len(result.failed)} failed", f"{len(result.blocked)} blocked",
              f"{len(result.plan.up_to_date) + len(result.unchanged)} up to date (skipped)"]
    return "sweep: " + ", ".join(parts)
