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
own part live — then deletes the older local copies of that run. The offline directory therefore holds
exactly one complete copy of each run, which ``wandb sync`` uploads as it is. Online, the run is opened
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
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger("empriv.tracking")
REDACTED = "[redacted]"

#: the parts of a configuration's run, in the order a full rewrite replays them
SECTIONS = ("train", "audit", "score", "analysis")
#: subdirectory of the W&B directory holding the journals (and their locks)
JOURNAL_DIR = "empriv-journal"
#: job type of the configuration runs and of the summary run
CONFIGURATION_JOB = "configuration"
ANALYSIS_JOB = "analysis"
#: the ε points of a training curve that get an accounting call (evenly spread, the last always included)
MAX_EPSILON_POINTS = 20

_MIN_TEXT = 6  # very short fragments would redact ordinary words
_MIN_TOKENS = 3  # token-id needles: shorter runs of ids occur by chance in any list of numbers


# --------------------------------------------------------------------------- scrubbing
class SecretScrubber:
    """Replaces any string that contains one of ``secrets`` (texts, prompts, continuations) and any list of
    integers that contains one of ``token_sequences`` (canaries as token ids) by ``[redacted]``."""

    def __init__(self, secrets: Iterable[dict] = (), token_sequences: Mapping[str, Sequence[int]] | None = None):
        self._needles: list[tuple[str, str]] = []
        self._sequences: list[tuple[str, tuple[int, ...]]] = []
        for s in secrets:
            for key in ("text", "prompt", "continuation"):
                value = s.get(key)
                if value and len(value) >= _MIN_TEXT:
                    self._needles.append((s.get("id", "?"), value))
        for sid, tokens in (token_sequences or {}).items():
            self.add_token_sequence(sid, tokens)

    def add_token_sequence(self, sid: str, tokens: Sequence[int]) -> None:
        tokens = tuple(int(t) for t in tokens)
        if len(tokens) >= _MIN_TOKENS:
            self._sequences.append((sid, tokens))
            # the ways a list of ids is written as text (JSON, space- or comma-separated)
            for text in (json.dumps(list(tokens)), " ".join(map(str, tokens)), ",".join(map(str, tokens))):
                self._needles.append((sid, text))

    @classmethod
    def from_files(cls, *paths: str | Path) -> "SecretScrubber":
        """Secrets from every JSON-lines file of ``paths`` that exists (planted and mined lists)."""
        from empriv.io import read_jsonl

        rows: list[dict] = []
        for path in paths:
            if Path(path).exists():
                rows.extend(read_jsonl(path))
        return cls(rows)

    def with_canaries(self, canary_set, tokenizer=None) -> "SecretScrubber":
        """This scrubber plus every canary of ``canary_set`` (:class:`~empriv.secrets.canaries.CanarySet`): its
        token ids (prefix + secret, and the secret alone) and, with ``tokenizer``, its decoded text."""
        out = SecretScrubber()
        out._needles, out._sequences = list(self._needles), list(self._sequences)
        for c in canary_set.canaries:
            out.add_token_sequence(c.id, c.tokens)
            out.add_token_sequence(c.id, c.secret)
            if tokenizer is not None:
                vocab = tokenizer.vocab_size
                for part in (c.tokens, c.secret):
                    if part and all(t < vocab for t in part):
                        text = tokenizer.decode(list(part))
                        if len(text.strip()) >= _MIN_TEXT:
                            out._needles.append((c.id, text))
        return out

    @property
    def needles(self) -> list[str]:
        """Every string this scrubber looks for (for tests that scan written files)."""
        return [n for _, n in self._needles]

    def _hit_sequence(self, values: Sequence[int]) -> str | None:
        n = len(values)
        for sid, seq in self._sequences:
            k = len(seq)
            if k <= n and any(tuple(values[i : i + k]) == seq for i in range(n - k + 1)):
                return sid
        return None

    def __call__(self, obj: Any) -> Any:
        if isinstance(obj, str):
            for sid, needle in self._needles:
                if needle in obj:
                    log.warning("a value to be logged contained secret %s: redacted", sid)
                    return REDACTED
            return obj
        if isinstance(obj, dict):
            return {self(k) if isinstance(k, str) else k: self(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            if self._sequences and obj and all(isinstance(v, int) and not isinstance(v, bool) for v in obj):
                sid = self._hit_sequence(obj)
                if sid is not None:
                    log.warning("a value to be logged contained the token ids of %s: redacted", sid)
                    return REDACTED
            return type(obj)(self(v) for v in obj)
        return obj


def numeric(obj: Any) -> Any:
    """``obj`` as JSON-safe values: non-finite floats (∞ = non-private) become None, numpy/torch scalars
    Python numbers, tuples lists, paths strings; nested dicts and lists are converted throughout."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, (bool, int, str)) or obj is None:
        return obj
    if isinstance(obj, dict):
        return {str(k): numeric(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [numeric(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "item") and callable(obj.item):
        return numeric(obj.item())
    return str(obj)


# --------------------------------------------------------------------------- where, which group, which id
def project_root(start: str | Path | None = None) -> Path:
    """The project directory whose ``wandb/`` keeps the runs, from inside any copy DVC runs a stage in.

    The directory to start from is ``$DVC_ROOT`` (DVC sets it for every stage command; for a queued
    experiment it names the *original* repository, not the temporary copy), else ``start``, else the
    working directory. Inside a DVC temporary copy (``<repo>/.dvc/tmp/exps/…``) the repository is the
    part before ``.dvc``; otherwise git's common directory (shared by every worktree, such as the
    preset studies under ``.studies/``) gives the main checkout. Without git: the start directory.
    """
    base = Path(os.environ.get("DVC_ROOT") or start or os.getcwd()).resolve()
    parts = base.parts
    for i in range(1, len(parts) - 3):
        if parts[i : i + 3] == (".dvc", "tmp", "exps"):
            return Path(*parts[:i])
    try:
        out = subprocess.run(["git", "-C", str(base), "rev-parse", "--path-format=absolute", "--git-common-dir"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return base
    common = Path(out.stdout.strip()) if out.returncode == 0 and out.stdout.strip() else None
    if common is not None and common.name == ".git":
        return common.parent
    return base


def tracking_root() -> Path:
    """``$EMPRIV_WANDB_DIR`` if set, else :func:`project_root`: W&B writes its runs into ``<this>/wandb/``."""
    env = os.environ.get("EMPRIV_WANDB_DIR")
    return Path(env).expanduser().resolve() if env else project_root()


def study_group() -> str:
    """The W&B group of this pipeline's runs: ``$EMPRIV_WANDB_GROUP``; else the DVC experiment's name
    (``dvc exp run``, queued or not); else the preset study's name (a worktree ``.studies/<name>``);
    else ``workspace``."""
    for var in ("EMPRIV_WANDB_GROUP", "DVC_EXP_NAME"):
        if os.environ.get(var):
            return os.environ[var]
    here = Path(os.environ.get("DVC_ROOT") or os.getcwd()).resolve()
    if here.parent.name == ".studies":
        return here.name
    return "workspace"


def run_id(project: str, group: str, name: str) -> str:
    """The W&B run id of ``name`` in ``group`` of ``project``: readable, W&B-safe and unique (a hash of all three)."""
    digest = hashlib.sha256(f"{project}\0{group}\0{name}".encode()).hexdigest()[:10]
    slug = re.sub(r"[^A-Za-z0-9_-]+", "_", f"{group}--{name}")[:80]
    return f"{slug}-{digest}"


def epsilon_tags(epsilon: float, method: str | None) -> list[str]:
    """``eps=8`` (``eps=inf`` and ``non-private`` for ∞) and ``method=<method>``; 8 and 8.0 give the same tag."""
    tags = [f"eps={float(epsilon):g}" if math.isfinite(epsilon) else "eps=inf"]
    if not math.isfinite(epsilon):
        tags.append("non-private")
    if method:
        tags.append(f"method={method}")
    return tags


def configuration_config(params, run, *, method: str | None = None) -> dict:
    """The config of a configuration's run: the point of the cube (ε numeric, ∞ as None) and every params
    section but the cubes, as resolved for this run."""
    dump = params.model_dump()
    dump.pop("cube", None)
    if isinstance(dump.get("audit"), dict):
        dump["audit"].pop("cube", None)
    return numeric({
        "configuration": run.name,
        "seed_group": run.group,
        "epsilon": run.epsilon,
        "private": run.private,
        "batch_size": run.batch_size,
        "steps": run.steps,
        "learning_rate": run.learning_rate,
        "seed": run.seed,
        "method": method or getattr(run, "method", None) or params.train.run_method,
        **dump,
    })


# --------------------------------------------------------------------------- the journal
def _journal_dir(root: Path) -> Path:
    return Path(root) / "wandb" / JOURNAL_DIR


def read_journal(root: str | Path, rid: str) -> dict:
    """The journal of run ``rid`` under ``root`` (empty if there is none)."""
    path = _journal_dir(Path(root)) / f"{rid}.json"
    if not path.exists():
        return {"sections": {}}
    return json.loads(path.read_text(encoding="utf-8"))


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        try:
            import fcntl
        except ImportError:  # not POSIX: no concurrent stages to serialise
            yield
            return
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


_RUN_DIR = re.compile(r"^(?:offline-)?run-\d{8}_\d{6}-(?P<rest>.+)$")


def local_copies(root: str | Path, rid: str) -> list[Path]:
    """The run directories of run ``rid`` under ``<root>/wandb`` (offline or online copies; W&B appends ``-1``,
    ``-2`` … to a directory name that exists already, as for two copies started in the same second)."""
    wandb_dir = Path(root) / "wandb"
    if not wandb_dir.is_dir():
        return []
    same = re.compile(re.escape(rid) + r"(?:-\d+)?")
    return sorted(p for p in wandb_dir.iterdir()
                  if p.is_dir() and (m := _RUN_DIR.match(p.name)) and same.fullmatch(m.group("rest")))


def _empty_section() -> dict:
    return {"config": {}, "tags": [], "axes": {}, "rows": [], "summary": {}, "tables": {}, "images": {}}


# --------------------------------------------------------------------------- the run
class Tracker:
    """One stage's part (``section``) of a W&B run. Inactive (mode ``disabled``): every call does nothing.

    ``log`` adds a history row (each curve carries its own x-axis key, declared with ``axis``), ``config``
    and ``summary`` add values, ``table`` and ``image`` add media; ``finish`` writes the section to the
    journal, logs the media and closes the run. Use it as a context manager, or call ``finish``.
    """

    def __init__(self, *, section: str, scrub: "SecretScrubber", run=None, root: Path | None = None,
                 rid: str | None = None, journal: dict | None = None, lock=None, first_row: int = 0,
                 resumed: bool = False, deferred: bool = False):
        self.section = section
        self._scrub = scrub
        self._run = run
        self._root = root
        self._rid = rid
        self._journal = journal
        self._lock = lock
        self._row = first_row
        self._resumed = resumed
        self._deferred = deferred and run is None  # offline: the journal only (see write_offline_runs)
        self._part = _empty_section()
        self._closed = not self.active

    # --- state -------------------------------------------------------------------------------------
    @property
    def active(self) -> bool:
        return self._run is not None or self._deferred

    @property
    def deferred(self) -> bool:
        """True when this part goes to the journal only, for :func:`write_offline_runs` to write."""
        return self._deferred

    @property
    def mode(self) -> str:
        if self._deferred:
            return "offline"
        return "disabled" if self._run is None else str(self._run.settings.mode)

    @property
    def run_id(self) -> str | None:
        return self._rid

    @property
    def directory(self) -> Path | None:
        """The local directory of this run (``…/wandb/offline-run-<time>-<id>``)."""
        return None if self._run is None else Path(self._run.dir).parent

    def __enter__(self) -> "Tracker":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.finish()
        else:
            self.abort()

    # --- adding ------------------------------------------------------------------------------------
    def axis(self, pattern: str, step_key: str) -> None:
        """Plot the metrics matching ``pattern`` (e.g. ``train/*``) against ``step_key`` (e.g. ``train/step``)."""
        if not self.active:
            return
        self._part["axes"][pattern] = step_key
        if self._run is not None:
            _define_axis(self._run, pattern, step_key)

    def log(self, metrics: dict, step: int | None = None) -> None:
        """One history row (``step`` is accepted for compatibility and ignored: declare an ``axis``)."""
        if not self.active:
            return
        row = numeric(self._scrub(dict(metrics)))
        self._part["rows"].append(row)
        if self._run is not None:
            self._run.log(row, step=self._row)
        self._row += 1

    def config(self, values: dict) -> None:
        if not self.active:
            return
        values = numeric(self._scrub(dict(values)))
        self._part["config"].update(values)
        if self._run is not None:
            self._run.config.update(values, allow_val_change=True)

    def tags(self, tags: Iterable[str]) -> None:
        if not self.active:
            return
        new = [t for t in self._scrub(list(tags)) if t not in self._part["tags"]]
        self._part["tags"].extend(new)
        if self._run is not None:
            self._run.tags = tuple(dict.fromkeys([*self._run.tags, *new]))

    def summary(self, values: dict) -> None:
        if not self.active:
            return
        self._part["summary"].update(numeric(self._scrub(dict(values))))

    def table(self, key: str, columns: Sequence[str], rows: Iterable[Sequence]) -> None:
        """A wandb.Table under ``key``; cells are scrubbed and made JSON-safe (∞ → None)."""
        if not self.active:
            return
        self._part["tables"][key] = {"columns": [str(c) for c in self._scrub(list(columns))],
                                     "data": [[_cell(v) for v in numeric(self._scrub(list(r)))] for r in rows]}

    def image(self, key: str, path: str | Path, caption: str | None = None) -> None:
        """A wandb.Image of the file at ``path`` (figures of numbers and ids only)."""
        if not self.active:
            return
        self._part["images"][key] = {"path": str(Path(path).resolve()), "caption": self._scrub(caption)}

    # --- closing -----------------------------------------------------------------------------------
    def finish(self, summary: dict | None = None) -> None:
        """Write this section to the journal, log the media and the summary, close the run and delete the
        run's older local copies."""
        if self._closed:
            return
        self._closed = True
        try:
            if summary:
                self.summary(summary)
            sections = self._journal["sections"]
            sections[self.section] = self._part
            if self._deferred:
                self._write_journal()
                return
            media_sections = [self._part] if self._resumed else [sections[s] for s in _ordered(sections)]
            media = {}
            for part in media_sections:
                media.update(_media(part))
            if media:
                self._run.log(media, step=self._row)
                self._row += 1
            merged_summary = {} if self._resumed else _merged(sections, "summary")
            merged_summary.update(self._part["summary"])
            for k, v in merged_summary.items():
                self._run.summary[k] = v
            if self.mode == "offline" and not self._resumed:  # this copy is whole: write_offline_runs skips it
                self._journal["written"] = _journal_digest(self._journal)
            self._write_journal()
            this = self.directory
            self._run.finish()
            for old in local_copies(self._root, self._rid):
                if this is None or old.resolve() != this.resolve():
                    shutil.rmtree(old, ignore_errors=True)
        finally:
            self._release()

    def abort(self) -> None:
        """Close the run without recording this section (a stage that failed leaves the journal as it was)."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._deferred:  # nothing was written: the journal keeps the last complete parts
                return
            this = self.directory
            self._run.finish(exit_code=1)
            if this is not None:
                shutil.rmtree(this, ignore_errors=True)  # the journal's copy (if any) stays the complete one
        finally:
            self._release()

    def _write_journal(self) -> None:
        _dump_journal(self._root, self._rid, self._journal)

    def _release(self) -> None:
        if self._lock is not None:
            self._lock.__exit__(None, None, None)
            self._lock = None


def _ordered(sections: dict) -> list[str]:
    return [s for s in SECTIONS if s in sections] + sorted(s for s in sections if s not in SECTIONS)


def _merged(sections: dict, key: str) -> dict:
    out: dict = {}
    for s in _ordered(sections):
        out.update(sections[s].get(key) or {})
    return out


def _cell(value: Any) -> Any:
    """A table cell: a scalar as it is, a nested list or dict as its JSON text."""
    return json.dumps(value) if isinstance(value, (list, dict)) else value


def _define_axis(run, pattern: str, step_key: str) -> None:
    run.define_metric(step_key)
    run.define_metric(pattern, step_metric=step_key)


def _media(part: dict) -> dict:
    import wandb

    out = {}
    for key, t in (part.get("tables") or {}).items():
        out[key] = wandb.Table(columns=t["columns"], data=t["data"])
    for key, img in (part.get("images") or {}).items():
        if Path(img["path"]).is_file():
            out[key] = wandb.Image(img["path"], caption=img.get("caption"))
        else:
            log.warning("W&B image %s: %s no longer exists, not logged", key, img["path"])
    return out


def open_run(*, project: str, group: str, name: str, section: str, mode: str, scrub: SecretScrubber,
             job_type: str = CONFIGURATION_JOB, config: dict | None = None, tags: Iterable[str] = (),
             root: str | Path | None = None, replace: bool = False) -> Tracker:
    """Open the W&B run ``name`` of ``group`` for the stage part ``section`` (see the module docstring).

    The run's other sections are replayed from the journal unless the server resumed the run (online);
    ``replace`` drops them (the summary run is rewritten whole by each analysis). ``root`` defaults to
    :func:`tracking_root`. The journal stays locked until ``finish``/``abort``.
    """
    mode = os.environ.get("WANDB_MODE", mode)
    if mode not in ("offline", "online", "disabled"):
        raise ValueError(f"W&B mode must be offline, online or disabled, got {mode!r}")
    if mode == "disabled":
        return Tracker(section=section, scrub=scrub)
    deferred = mode == "offline" and os.environ.get("EMPRIV_WANDB_LIVE", "") not in ("1", "true", "yes")

    root = Path(root).resolve() if root is not None else tracking_root()
    rid = run_id(project, group, name)
    lock = _locked(_journal_dir(root) / f"{rid}.lock")
    lock.__enter__()
    try:
        journal = read_journal(root, rid)
        if replace:
            journal["sections"] = {}
        journal.update(project=project, group=group, name=name, job_type=job_type, run_id=rid)
        others = {s: p for s, p in journal["sections"].items() if s != section}
        own_config = numeric(scrub(dict(config or {})))
        own_tags = list(dict.fromkeys(scrub(list(tags))))
        if deferred:
            tracker = Tracker(section=section, scrub=scrub, root=root, rid=rid, journal=journal, lock=lock,
                              deferred=True)
            tracker._part["config"].update(own_config)
            tracker._part["tags"].extend(own_tags)
            return tracker
        os.environ.setdefault("WANDB_SILENT", "true")
        import wandb

        all_config = {**_merged(others, "config"), **own_config}
        all_tags = list(dict.fromkeys([t for s in _ordered(others) for t in others[s].get("tags", [])] + own_tags))
        run = _init(wandb, root, mode=mode, project=project, name=name, group=group, job_type=job_type, rid=rid,
                    config=scrub(all_config), tags=all_tags)
        resumed = bool(run.resumed)
        first = int(run.starting_step or 0) if resumed else 0
        for s in _ordered(others):
            for pattern, step_key in (others[s].get("axes") or {}).items():
                _define_axis(run, pattern, step_key)
        if not resumed:  # a fresh copy: the other stages' parts are written again
            for s in _ordered(others):
                for row in others[s].get("rows", []):
                    run.log(scrub(row), step=first)
                    first += 1
        tracker = Tracker(section=section, scrub=scrub, run=run, root=root, rid=rid, journal=journal, lock=lock,
                          first_row=first, resumed=resumed)
        tracker._part["config"].update(own_config)
        tracker._part["tags"].extend(own_tags)
        return tracker
    except BaseException:
        lock.__exit__(None, None, None)
        raise


def _init(wandb, root: Path, *, mode: str, project: str, name: str, group: str, job_type: str, rid: str,
          config: dict, tags: list[str]):
    settings = wandb.Settings(
        mode=mode, disable_git=True, save_code=False, console="off", silent=True, allow_val_change=True,
        x_disable_stats=True, x_disable_meta=True, x_disable_machine_info=True, x_save_requirements=False,
    )
    (root / "wandb").mkdir(parents=True, exist_ok=True)
    return wandb.init(project=project, name=name, group=group, job_type=job_type, id=rid, resume="allow",
                      config=config, tags=tags, dir=str(root), settings=settings, reinit="finish_previous")


def _journal_digest(journal: dict) -> str:
    """What an offline copy is written from: the run's identity and its sections."""
    keep = {k: journal.get(k) for k in ("project", "group", "name", "job_type", "run_id", "sections")}
    return hashlib.sha256(json.dumps(keep, sort_keys=True, allow_nan=False).encode()).hexdigest()


def write_offline_runs(root: str | Path | None = None, *, force: bool = False) -> list[str]:
    """Write, as complete offline W&B runs, every journal under ``<root>/wandb`` whose offline copy is missing or
    older than the journal (``force``: all of them); in one process, so W&B starts once. Each run is written
    whole — config and tags of all its sections, their history rows in the order train, audit, score,
    analysis, their tables and figures, the merged summary — and its older local copies are deleted.
    Returns the ids written. ``root`` defaults to :func:`tracking_root`."""
    import time

    root = Path(root).resolve() if root is not None else tracking_root()
    jdir = _journal_dir(root)
    if not jdir.is_dir():
        return []
    start, written = time.monotonic(), []
    for path in sorted(jdir.glob("*.json")):
        rid = path.stem
        with _locked(jdir / f"{rid}.lock"):
            journal = read_journal(root, rid)
            if not journal.get("sections") or not journal.get("name"):
                continue
            digest = _journal_digest(journal)
            if not force and journal.get("written") == digest and local_copies(root, rid):
                continue
            _write_whole_run(root, journal)
            journal["written"] = digest
            _dump_journal(root, rid, journal)
            written.append(rid)
    if written:
        log.info("W&B: wrote %d offline run(s) to %s in %.1f s (upload with: wandb sync --sync-all %s)",
                 len(written), root / "wandb", time.monotonic() - start, root / "wandb")
    return written


def _write_whole_run(root: Path, journal: dict) -> None:
    os.environ.setdefault("WANDB_SILENT", "true")
    import wandb

    rid, sections = journal["run_id"], journal["sections"]
    order = _ordered(sections)
    tags = list(dict.fromkeys(t for s in order for t in sections[s].get("tags", [])))
    run = _init(wandb, root, mode="offline", project=journal["project"], name=journal["name"],
                group=journal["group"], job_type=journal.get("job_type", CONFIGURATION_JOB), rid=rid,
                config=_merged(sections, "config"), tags=tags)
    try:
        for s in order:
            for pattern, step_key in (sections[s].get("axes") or {}).items():
                _define_axis(run, pattern, step_key)
        step = 0
        for s in order:
            for row in sections[s].get("rows", []):
                run.log(row, step=step)
                step += 1
        media = {}
        for s in order:
            media.update(_media(sections[s]))
        if media:
            run.log(media, step=step)
        for k, v in _merged(sections, "summary").items():
            run.summary[k] = v
        this = Path(run.dir).parent
    except BaseException:
        run.finish(exit_code=1)
        raise
    run.finish()
    for old in local_copies(root, rid):
        if old.resolve() != this.resolve():
            shutil.rmtree(old, ignore_errors=True)


def _dump_journal(root: Path, rid: str, journal: dict) -> None:
    from empriv.io import atomic_path

    path = _journal_dir(root) / f"{rid}.json"
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(journal, indent=1, allow_nan=False) + "\n", encoding="utf-8")


def open_configuration_run(params, run, *, section: str, scrub: SecretScrubber, method: str | None = None,
                           root: str | Path | None = None) -> Tracker:
    """The W&B run of configuration ``run`` (a :class:`~empriv.config.RunConfig`) for stage part ``section``:
    named after the configuration, grouped by :func:`study_group`, tagged with ε and the method, its config
    :func:`configuration_config`."""
    method = method or getattr(run, "method", None) or params.train.run_method
    return open_run(project=params.runtime.wandb_project, group=study_group(), name=run.name, section=section,
                    mode=params.runtime.wandb_mode, scrub=scrub, job_type=CONFIGURATION_JOB,
                    config=configuration_config(params, run, method=method),
                    tags=epsilon_tags(run.epsilon, method), root=root)


def open_summary_run(params, *, scrub: SecretScrubber, root: str | Path | None = None) -> Tracker:
    """The pipeline's summary run (``analysis-<group>``, job type ``analysis``), rewritten whole by each analysis."""
    group = study_group()
    dump = params.model_dump()
    return open_run(project=params.runtime.wandb_project, group=group, name=f"analysis-{group}", section="analysis",
                    mode=params.runtime.wandb_mode, scrub=scrub, job_type=ANALYSIS_JOB, config=numeric(dump),
                    tags=["analysis"], root=root, replace=True)


def epsilon_checkpoints(steps: int, log_every: int, max_points: int = MAX_EPSILON_POINTS) -> list[int]:
    """Steps t (1..T, steps done) at which a training curve records the ε spent so far: the logged steps,
    thinned evenly to at most ``max_points``, the last step always included."""
    if steps < 1:
        return []
    logged = sorted({s + 1 for s in range(steps) if s % max(1, log_every) == 0} | {steps})
    if len(logged) <= max_points:
        return logged
    picks = {logged[round(i * (len(logged) - 1) / (max_points - 1))] for i in range(max_points)}
    return sorted(picks | {steps})


__all__ = [
    "ANALYSIS_JOB", "CONFIGURATION_JOB", "JOURNAL_DIR", "MAX_EPSILON_POINTS", "REDACTED", "SECTIONS",
    "SecretScrubber", "Tracker", "configuration_config", "epsilon_checkpoints", "epsilon_tags", "local_copies",
    "numeric", "open_configuration_run", "open_run", "open_summary_run", "project_root", "read_journal",
    "run_id", "study_group", "tracking_root", "write_offline_runs",
]
