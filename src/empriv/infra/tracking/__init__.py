"""W&B tracking: one run per configuration, one summary run per pipeline, every value scrubbed of secrets.

**Runs.** A configuration (``eps8-b64-T16-lr0.005-s0``) has one W&B run, named after it, whatever stage
writes to it: ``train`` its training curve (loss, σ, the ε spent so far), ``score`` its scores, ``audit``
its audit run's curve and results. The ``analyze`` stage writes one summary run per pipeline (job type
``analysis``) with the analysis tables and the report figures. A run's group is the study
(:func:`study_group`), its tags say ε (``eps=8``, ``eps=inf`` + ``non-private``) and the method; its
config holds the resolved params with ε numeric (∞ is null). Run ids are deterministic
(:func:`run_id`: project, group and name), so every stage finds the same run.

**Offline runs are written once, at the end.** Offline (the default), a stage does not start W&B at all:
its part goes only to the run's *journal* (below), and :func:`write_offline_runs` — called by the
``analyze`` stage after its summary run, or by ``empriv wandb-write`` — writes every run whose journal
changed as one complete offline run, all in one process. Starting W&B costs ~3 s per process (its
service, the run's files, the shutdown); paid by each of the ~100 stage processes of the default cube it
made a cold ``make repro`` 5–6 minutes longer. Online, each stage writes its part live (below).

**One run from several processes.** W&B cannot resume a run offline: ``resume`` is ignored in offline
mode, and the transaction log of an offline run does not record it, so ``wandb sync`` of several
offline pieces with one id uploads each piece as if it were the whole run (one overwrites the other;
wandb/wandb#3841, #5865; offline resume is still an open pull request, #12110). Hence each stage's part
is kept in a *journal* (``<root>/wandb/empriv-journal/<run id>.json``, one section per stage, already
scrubbed) and every stage writes the *whole* run again from it — the other stages' parts replayed, its
own part live — then, once W&B has finished writing the new copy (``run.finish()`` returns before it has,
issue 45), deletes the older local copies of that run. The offline directory therefore holds exactly one complete
copy of each run, which ``wandb sync`` uploads as it is; a new copy that does not finish keeps the older ones, and
its run is written again next time. Online, the run is opened
with ``resume="allow"``: a run the server already has is resumed and only what is new is logged; one it
lacks is written whole. A file lock on the journal serialises stages that write the same run.

**Where.** Runs go to ``<root>/wandb/``, root = ``$EMPRIV_WANDB_DIR`` or the project root
(:func:`project_root`), so the runs of queued experiments (``dvc exp run --queue``, which run in a
temporary copy that is deleted afterwards) and of preset studies (git worktrees under ``.studies/``)
land in the project's own ``wandb/`` and survive.

**What.** Hyperparameters, ids, numbers and the analysis figures only: no git state, code, console
output, system statistics or machine metadata. Every value (config, history, summary, table cells, image
captions, the journal) passes :class:`SecretScrubber` first: a string containing a secret or a canary,
or a list of token ids containing a canary, becomes ``[redacted]`` (and the secret's *id* is warned about).

Mode ``runtime.wandb_mode`` (offline by default; the ``WANDB_MODE`` environment variable wins);
``disabled`` writes nothing at all, not even the journal. ``EMPRIV_WANDB_LIVE=1`` makes offline stages write
their runs live as online ones do (each stage rewrites the whole run; slower, for debugging W&B itself).

**Modules.** :mod:`~empriv.infra.tracking.scrub` (the scrubber, JSON-safe values),
:mod:`~empriv.infra.tracking.naming` (where, which group, which id, tags and config),
:mod:`~empriv.infra.tracking.journal` (the journal and the local copies), :mod:`~empriv.infra.tracking.runs`
(:class:`Tracker`, opening a run), :mod:`~empriv.infra.tracking.offline` (writing the offline runs),
:mod:`~empriv.infra.tracking.curves` (the ε points of a training curve), :mod:`~empriv.infra.tracking.service`
(W&B's working directories inside the project, its start-up limit, its failures that no retry fixes),
:mod:`~empriv.infra.tracking.transaction_log` (a run's ``.wandb`` log read strictly, and when it is finished). Import
from ``empriv.infra.tracking``.
"""

from empriv.infra.tracking.curves import MAX_EPSILON_POINTS, epsilon_checkpoints
from empriv.infra.tracking.journal import JOURNAL_DIR, SECTIONS, local_copies, read_journal
from empriv.infra.tracking.naming import (configuration_config, epsilon_tags, project_root, run_id, study_group,
                                          tracking_root)
from empriv.infra.tracking.offline import write_offline_runs
from empriv.infra.tracking.runs import (ANALYSIS_JOB, CONFIGURATION_JOB, Tracker, open_configuration_run, open_run,
                                        open_summary_run)
from empriv.infra.tracking.scrub import REDACTED, SecretScrubber, numeric

__all__ = [
    "ANALYSIS_JOB", "CONFIGURATION_JOB", "JOURNAL_DIR", "MAX_EPSILON_POINTS", "REDACTED", "SECTIONS",
    "SecretScrubber", "Tracker", "configuration_config", "epsilon_checkpoints", "epsilon_tags", "local_copies",
    "numeric", "open_configuration_run", "open_run", "open_summary_run", "project_root", "read_journal",
    "run_id", "study_group", "tracking_root", "write_offline_runs",
]
