"""The sweep's schedule: :func:`run_sweep` (the plan, the upstream ``dvc repro``, the jobs, the commit) and the engine
loop that launches ready items into free job slots (:func:`launch_order`), collects finished jobs, re-submits failed
ones and commits the finished items to DVC in one go (see :mod:`empriv.infra.sweep` for the whole story)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from empriv.config import SweepParams, _did_you_mean
from empriv.infra.dvc_adapter import RunCacheRestorer, quiet_logging
from empriv.infra.sweep.commit import collect, prune_lock
from empriv.infra.sweep.faults import deterministic_cause
from empriv.infra.sweep.interrupts import Interrupts
from empriv.infra.sweep.jobs import Engine, attempts_of, check_slurm, no_result_reason, require_submitit
from empriv.infra.sweep.leftovers import stop_leftovers, sweep_folders
from empriv.infra.sweep.lock import workspace_lock
from empriv.infra.sweep.output import SweepOutput, SweepResult, eta_seconds, log_tail, summary_line
from empriv.infra.sweep.plan import (Item, Plan, SweepError, load_sweep_params, make_plan, matrix_stages,
                                     merged_resources, threads_per_job)
from empriv.infra.sweep.recover import FinishedRecords
from empriv.infra.sweep.removed import REMOVED_DIR, move_removed, moved_line
from empriv.infra.sweep.space import cache_dir_of, check_plan_space, free_text

ENGINES = ("local", "slurm")
WAITING_STATES = ("PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "CONFIGURING", "SUSPENDED", "RESV_DEL_HOLD",
                  "UNKNOWN")  # submitted, not running (SLURM's names; UNKNOWN: sacct has not listed the job yet)
LOG_NAME = "sweep.log"  # the sweep's log file, in its job folder
UP_TO_DATE_SHOWN = 8  # up-to-date items named on the terminal (all of them in the log)
CANCEL_WAIT_S = 20.0  # an interrupted local sweep waits this long at most for its cancelled jobs to end


@dataclass
class _Running:
    item: Item
    job: Any
    submitted: float
    attempts_seen: int  # starts recorded for the item when this job was last looked at
    starts: int = 0  # starts of this job seen so far (> 1: requeued)


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
    (:mod:`empriv.infra.sweep.output`). Every line, and the per-job events only there, goes to the sweep's log file
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
    all_names, matrix = matrix_stages(root)
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

    # one sweep per workspace, from before the plan to the end (a dry run changes nothing and takes no lock)
    # and, but in a dry run, SIGINT/SIGTERM noted and acted on between two steps (interrupts.py)
    interrupts = Interrupts()
    with contextlib.nullcontext() if dry_run else workspace_lock(root, echo), \
            contextlib.nullcontext() if dry_run else interrupts:
        with quiet_logging():
            plan = make_plan(root, stage_names, items, stages_key=stages_key, everything=everything)
        result = SweepResult(plan=plan)
        out = SweepOutput(echo, tty=tty)
        try:
            with quiet_logging():
                result = _sweep(root, plan, result, out, engine=engine, sweep=sweep, stages_key=stages_key,
                                items=items, jobs=jobs, params=params, dry_run=dry_run, poll_s=poll_s, matrix=matrix,
                                interrupts=interrupts)
            out.note(summary_line(result))  # the line the command prints last (a dry run has no log)
            return result
        finally:
            out.close_log()

def _stopped(result: SweepResult, interrupts: Interrupts, waiting: list[Item]) -> bool:
    """Whether a signal came (then ``result`` says so, ``waiting`` not started): the sweep stops before its next
    step."""
    if interrupts.signum is None:
        return False
    result.interrupted = interrupts.name
    result.not_started = [i.address for i in waiting]
    return True


def _sweep(root: Path, plan: Plan, result: SweepResult, out: SweepOutput, *, engine: str, sweep: SweepParams,
           stages_key: str, items: list[str] | None, jobs: int, params: str | Path | None, dry_run: bool,
           poll_s: float | None, matrix: list[str], interrupts: Interrupts) -> SweepResult:
    echo = out.say
    folder = None
    records = None
    if not dry_run:  # the job folder and its log first: the first line says where the log is
        folder = Path(sweep.folder)
        folder = (folder if folder.is_absolute() else root / folder) / \
            f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
        out.open_log(folder / LOG_NAME)
        result.folder, result.log = folder, folder / LOG_NAME
        # a sweep that was killed (SIGKILL, a lost terminal) left its commands running: this one holds the lock now
        _say_stopped(echo, stop_leftovers(sweep_folders(folder.parent), root), "an earlier sweep left running (it was "
                     "killed before it could stop them)")
        # what such a sweep finished but could not commit (recover.py): committed at the item's turn if it still holds
        records = FinishedRecords([f for f in sweep_folders(folder.parent) if f != folder], root)
        records.forget([i.address for i in plan.up_to_date if i.address in records])
    between = [i.address for i in plan.items if i.between]
    echo(f"sweep: engine {engine}, stages {', '.join(plan.stages)}"
         + (f" (and between them: {', '.join(between)})" if between else "")
         + f": {len(plan.items)} items, {len(plan.to_run)} to run, {len(plan.up_to_date)} up to date"
         + (f"; log {_rel(folder / LOG_NAME, root)}" if folder is not None else ""))
    if plan.empty:
        echo(f"no items (empty matrix), skipped: {', '.join(plan.empty)}")
    if engine == "local":
        threads = threads_per_job(Path(params) if params else root / "params.yaml")
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
            if i.removed:
                echo(f"would move {len(i.removed)} output(s) of runs dvc.yaml no longer has out of the directories "
                     f"{i.address} reads, to {REMOVED_DIR}/<sweep>/: {', '.join(_rel(p, root) for p in i.removed)}")
            echo(f"would run {i.address}" + (f" after {', '.join(i.needs)}" if i.needs else "") + f": {i.commands[0]}")
        return result

    if records is not None:  # before anything runs or is removed: will it fit?
        out.note(check_plan_space(root, plan, records))
    if plan.upstream:
        echo(f"upstream: dvc repro {' '.join(plan.upstream)}"
             + ("" if plan.stale_upstream else " (up to date)"))
        serial = [u for u in plan.stale_upstream if "@" in u and u.partition("@")[0] in matrix]
        if serial:
            echo(f"note: {len(serial)} stale item(s) of matrix stages upstream run in that dvc repro, one after "
                 f"another ({', '.join(sorted({u.partition('@')[0] for u in serial}))}): add their stage to the "
                 "sweep's stages to run them as jobs")
        if plan.stale_upstream:
            if _stopped(result, interrupts, plan.to_run):
                return result
            run = subprocess.run([sys.executable, "-m", "dvc", "repro", *plan.upstream], cwd=root)
            if _stopped(result, interrupts, plan.to_run):  # dvc repro committed what it finished itself
                return result
            if run.returncode != 0:
                raise SweepError(f"upstream: `dvc repro {' '.join(plan.upstream)}` failed (exit status "
                                 f"{run.returncode}); nothing was submitted")
            plan = make_plan(root, plan.stages, items, stages_key=stages_key)  # staleness after the upstream run
            result.plan = plan
            echo(f"after upstream: {len(plan.to_run)} to run, {len(plan.up_to_date)} up to date")
    if not plan.to_run:
        echo("nothing to run: every item is up to date")
        prune_lock(root, echo, plan.lock_stale)
        return result

    if _stopped(result, interrupts, plan.to_run):
        return result
    runner = Engine(engine, sweep, folder, sorted({i.stage for i in plan.to_run}))
    # local: a finished job is seen within 0.1 s (0.5 s cost ~0.25 s per item of a two-job slot)
    poll_s = poll_s if poll_s is not None else (2.0 if engine == "slurm" else 0.1)
    out.note(f"job folder: {_rel(folder, root)}")
    try:
        _run_jobs(plan, runner, result, root, folder, sweep, jobs, poll_s, out, interrupts, records)
    finally:  # a local job killed by SIGKILL leaves its command running: it ends with the sweep (leftovers.py)
        if engine == "local":
            _say_stopped(echo, stop_leftovers([folder], root), "their jobs left running")
    collect(plan, result, root, echo, records)
    prune_lock(root, echo)
    return result


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

def _run_jobs(plan: Plan, runner: Engine, result: SweepResult, root: Path, folder: Path, sweep: SweepParams,
              jobs: int, poll_s: float, out: SweepOutput, interrupts: Interrupts,
              records: FinishedRecords | None = None) -> None:
    """Run the plan's stale items as jobs. Per-job events go to the log (``out.note``); the user sees the progress,
    retries and failures (``out.say``). A signal (``interrupts``) stops it between two passes: the running jobs
    are cancelled (:func:`_cancel`) and what finished is left for the commit."""
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

    def n_done() -> int:  # finished without failing: run, restored, unchanged, committed as they were
        return sum(map(len, (result.done, result.restored, result.unchanged, result.recovered, result.uncached)))

    def counts(n_run: int) -> str:
        return (f"jobs: {len(running) - n_run} submitted, {n_run} running, {n_done()} done, {len(result.failed)} "
                f"failed, {len(todo)} waiting (of {len(stale)})")

    def show(n_run: int) -> None:
        now = time.monotonic()
        waiting: dict[str, int] = {}
        for i in todo:
            waiting[i.stage] = waiting.get(i.stage, 0) + 1
        eta = eta_seconds(held, waiting, [(r.item.stage, now - r.submitted) for r in running.values()],
                          jobs if runner.name == "local" else peak)
        out.update(n_done() + len(result.failed) + len(result.blocked), n_run, len(result.failed), eta)

    restore = RunCacheRestorer(root)
    out.start(len(stale))
    try:
        while todo or running:
            if _stopped(result, interrupts, todo):
                out.close()
                _cancel(running, result, runner, out)
                break
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
                    reason = no_result_reason(r.job, runner.state(r.job))
                else:
                    reason = _one_line(str(error))
                tail = log_tail(r.job.paths.stderr)
                cause = deterministic_cause(reason, tail)  # a failure every attempt would repeat: no retry
                if cause is not None:
                    result.failed[address] = f"not retried, {cause}; log {log}"
                    out.say(f"failed {address} (job {r.job.job_id}, attempt {len(attempts)}, not retried): {cause}; "
                            f"log {log}")
                    if cause.startswith("no space left on device"):  # which disk, and how full it is now
                        out.say(f"  {free_text(root, cache_dir_of(root))}")
                    continue
                if len(attempts) < max_attempts:
                    out.say(f"retry {address} (attempt {len(attempts) + 1} of {max_attempts}): job {r.job.job_id} "
                            f"failed: {reason}; log {log}")
                    todo.insert(0, r.item)
                    continue
                result.failed[address] = f"{reason}; log {log}"
                out.say(f"failed {address} (job {r.job.job_id}, {len(attempts)} attempt(s)): {reason}; log {log}")
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
                    if item.removed and not _move_removed(item, root, folder, result, out):
                        continue
                    if records is not None and item.address in records:  # finished by a sweep that was killed
                        why = records.check(item)
                        if why is None:
                            result.recovered.append(item.address)
                            finished.add(item.address)
                            out.note(f"recovered {item.address}: finished by a sweep that was killed, its outputs "
                                     "and deps as its job left them (committed, not run again)")
                            continue
                        out.note(f"not recovered {item.address} (a killed sweep's record of it): {why}; it runs")
                        records.forget([item.address])
                    if item.uncached and restore.missing_from_cache(item.address):
                        result.uncached.append(item.address)
                        finished.add(item.address)
                        out.note(f"intact, not in the DVC cache: {item.address} (committed, not run again)")
                        continue
                    if not item.changed and restore.unchanged(item.address):
                        # as `dvc repro` decides at each stage's turn: what it needs re-ran and gave the same outputs
                        result.unchanged.append(item.address)
                        finished.add(item.address)
                        out.note(f"up to date at its turn: {item.address} (what it needs re-ran with the same "
                                 "outputs)")
                        continue
                    if restore.restore(item.address):
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
    except KeyboardInterrupt:  # no handler could be installed (not the main thread): Python's default
        out.close()
        result.interrupted, result.not_started = "SIGINT", [i.address for i in todo]
        _cancel(running, result, runner, out)
        restore.close()
        collect(plan, result, root, out.say, records)
        raise
    finally:
        out.close()  # a no-op when closed above; the bar must not outlive an error
        restore.close()

def _cancel(running: dict[str, _Running], result: SweepResult, runner: Engine, out: SweepOutput,
            wait_s: float = CANCEL_WAIT_S) -> None:
    """The sweep was interrupted: a running job that has just finished counts as done (it is committed with the
    others), the rest are cancelled (``result.cancelled``); local jobs are waited for (at most ``wait_s``), so that
    no command of this sweep still writes when it exits."""
    cancelled = []
    for address, r in running.items():
        try:
            finished = r.job.done() and r.job.exception() is None
        except Exception:  # noqa: BLE001 - a job without a result: not finished
            finished = False
        if finished:
            result.done.append(address)
            continue
        try:
            r.job.cancel(check=False)
        except Exception:  # noqa: BLE001 - best effort on the way out
            pass
        cancelled.append(r)
        result.cancelled.append(address)
    out.say(f"interrupted by {result.interrupted}: cancelling {len(cancelled)} running job(s), then committing the "
            f"{len(result.done) + len(result.restored)} finished item(s)")
    if runner.name == "local":
        deadline = time.monotonic() + wait_s
        while any(not r.job.done() for r in cancelled) and time.monotonic() < deadline:
            time.sleep(0.1)


def _move_removed(item: Item, root: Path, folder: Path, result: SweepResult, out: SweepOutput) -> bool:
    """At an item's turn (what it needs has succeeded): the outputs of removed runs out of its directory deps, into
    ``.empriv/removed/<this sweep>/`` (removed.py), in one line; False (the item failed) when a move fails."""
    dest = root / REMOVED_DIR / folder.name
    try:
        moved = move_removed(root, item.removed, dest, item.deps)
    except OSError as err:
        result.failed[item.address] = f"could not move the outputs of removed runs out of its inputs: {err}"
        out.say(f"failed {item.address}: {result.failed[item.address]}")
        return False
    if moved:
        result.moved += moved
        directories = sorted({_rel(d, root) for d in item.deps for p in item.removed if p.startswith(d + os.sep)})
        out.say(moved_line(moved, directories, item.address, _rel(dest, root)))
        if len(moved) > 4:  # every path in the log
            out.note(moved_line(moved, directories, item.address, _rel(dest, root), shown=None))
    return True


def _say_stopped(echo: Callable[[str], None], stopped: list[str], whose: str) -> None:
    if stopped:
        shown = ", ".join(stopped[:4]) + (f" and {len(stopped) - 4} more" if len(stopped) > 4 else "")
        echo(f"stopped {len(stopped)} stage command(s) {whose}: {shown}")
