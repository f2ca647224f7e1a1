"""``empriv sweep``: one job per matrix item of the selected DVC stages, locally or on SLURM, through submitit.

The modules: :mod:`~empriv.infra.sweep.plan` (items, matrix selection, staleness, resources),
:mod:`~empriv.infra.sweep.jobs` (the job callable and the submitit engines), :mod:`~empriv.infra.sweep.schedule`
(:func:`run_sweep`: launch order, the engine loop, retries, the commit), :mod:`~empriv.infra.sweep.output` (what the
sweep shows, its log, its result and summary line), :mod:`~empriv.infra.sweep.lock` (one sweep per workspace). DVC is
reached through :mod:`empriv.infra.dvc_adapter` alone. Import from ``empriv.infra.sweep``.

A sweep turns the items of dvc.yaml's matrix stages (``train@<config>``, ``score@<config>``, …) into jobs and
brings the results back under DVC's control, so that ``dvc repro`` afterwards has nothing to do:

1. **plan**: the items of the selected stages (``--stages`` / ``sweep.stages``, optionally filtered by
   ``--items`` globs), the stages they depend on that are not selected (*upstream*), and the dependencies between
   selected items (``score@x`` needs ``train@x``).
2. **upstream**: one ``dvc repro <upstream stages>`` brings everything the items read up to date first.
3. **jobs**: an item is stale when DVC says it changed, or when a selected item it depends on is stale. Up-to-date
   items are skipped. A stale item becomes ready once the items it depends on are done; an item whose directory deps
   hold outputs of runs dvc.yaml no longer has (a value removed from the cube) is stale too and moves them to
   ``.empriv/removed/`` first (:mod:`~empriv.infra.sweep.removed`); then its outputs are
   removed (as ``dvc repro`` does) and DVC's run-cache is asked first (an identical earlier run is checked out,
   no job); otherwise the item's resolved ``cmd`` runs as one job: a :class:`StageJob` submitted through
   submitit's ``SlurmExecutor`` or ``LocalExecutor``.
   A failed job is re-submitted, and a preempted one (SLURM's warning signal) is requeued by submitit
   (:class:`StageJob` is a ``Checkpointable``); together at most ``sweep.max_retries`` times per item. A failure
   every attempt would repeat (a stage's user error, a full disk, a refused write: :mod:`~empriv.infra.sweep.faults`)
   is not retried. A training
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

from empriv.infra.sweep.jobs import StageJob, attempts_of, slurm_parameters
from empriv.infra.sweep.lock import EXIT_BUSY, SweepBusy, workspace_lock
from empriv.infra.sweep.output import SweepOutput, SweepResult, summary_line
from empriv.infra.sweep.plan import Item, Plan, SweepError, load_sweep_params, make_plan, merged_resources
from empriv.infra.sweep.schedule import ENGINES, launch_order, run_sweep

__all__ = ["ENGINES", "EXIT_BUSY", "Item", "Plan", "StageJob", "SweepBusy", "SweepError", "SweepOutput", "SweepResult",
           "attempts_of", "launch_order", "load_sweep_params", "make_plan", "merged_resources", "run_sweep",
           "slurm_parameters", "summary_line", "workspace_lock"]
