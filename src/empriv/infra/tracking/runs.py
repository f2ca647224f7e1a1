"""A stage's part of a W&B run (:class:`Tracker`) and how it is opened: :func:`open_run`, for a configuration
(:func:`open_configuration_run`) or the pipeline's summary (:func:`open_summary_run`)."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from empriv.infra.tracking.journal import (discard_copy, dump_journal, empty_section, journal_digest, journal_dir,
                                           journal_lock, local_copies, merged_sections, ordered_sections, read_journal,
                                           retire_older_copies)
from empriv.infra.tracking.naming import configuration_config, epsilon_tags, run_id, study_group, tracking_root
from empriv.infra.tracking.scrub import SecretScrubber, numeric

log = logging.getLogger("empriv.tracking")  # one logger for the package, named as before it moved

#: job type of the configuration runs and of the summary run
CONFIGURATION_JOB = "configuration"
ANALYSIS_JOB = "analysis"


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
        self._part = empty_section()
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
            define_axis(self._run, pattern, step_key)

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
        """Write this section to the journal, log the media and the summary, close the run and, once W&B has
        finished writing the new local copy, delete the run's older ones (:func:`retire_older_copies`)."""
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
            media_sections = [self._part] if self._resumed else [sections[s] for s in ordered_sections(sections)]
            media = {}
            for part in media_sections:
                media.update(media_of(part))
            if media:
                self._run.log(media, step=self._row)
                self._row += 1
            merged_summary = {} if self._resumed else merged_sections(sections, "summary")
            merged_summary.update(self._part["summary"])
            for k, v in merged_summary.items():
                self._run.summary[k] = v
            self._journal.pop("written", None)  # no finished copy of this journal yet
            self._write_journal()
            this = self.directory
            older = local_copies(self._root, self._rid)  # the journal's lock is held: no other writer adds one
            self._run.finish()
            # run.finish() returns before W&B has written the new copy: the older ones go once it is finished
            finished = retire_older_copies(self._rid, this, older)
            if finished and self.mode == "offline" and not self._resumed:  # whole: write_offline_runs skips it
                self._journal["written"] = journal_digest(self._journal)
                self._write_journal()
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
            discard_copy(this)  # the journal's copy (if any) stays the complete one
        finally:
            self._release()

    def _write_journal(self) -> None:
        dump_journal(self._root, self._rid, self._journal)

    def _release(self) -> None:
        if self._lock is not None:
            self._lock.__exit__(None, None, None)
            self._lock = None


def _cell(value: Any) -> Any:
    """A table cell: a scalar as it is, a nested list or dict as its JSON text."""
    return json.dumps(value) if isinstance(value, (list, dict)) else value


def define_axis(run, pattern: str, step_key: str) -> None:
    run.define_metric(step_key)
    run.define_metric(pattern, step_metric=step_key)


def media_of(part: dict) -> dict:
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
    lock = journal_lock(journal_dir(root) / f"{rid}.lock")
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

        all_config = {**merged_sections(others, "config"), **own_config}
        all_tags = list(dict.fromkeys([t for s in ordered_sections(others) for t in others[s].get("tags", [])] + own_tags))
        run = init_wandb(wandb, root, mode=mode, project=project, name=name, group=group, job_type=job_type,
                         rid=rid, config=scrub(all_config), tags=all_tags)
        resumed = bool(run.resumed)
        first = int(run.starting_step or 0) if resumed else 0
        for s in ordered_sections(others):
            for pattern, step_key in (others[s].get("axes") or {}).items():
                define_axis(run, pattern, step_key)
        if not resumed:  # a fresh copy: the other stages' parts are written again
            for s in ordered_sections(others):
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


def init_wandb(wandb, root: Path, *, mode: str, project: str, name: str, group: str, job_type: str, rid: str,
          config: dict, tags: list[str]):
    """``wandb.init`` of run ``rid`` under ``<root>/wandb``, W&B's working directories inside the project and a short
    start-up limit (:mod:`empriv.infra.tracking.service`); a failure no retry can fix raises a one-line ConfigError."""
    from empriv.config import ConfigError
    from empriv.infra.tracking.service import deterministic_failure, prepare_environment, settings

    prepare_environment(root, mode)
    try:
        return wandb.init(project=project, name=name, group=group, job_type=job_type, id=rid, resume="allow",
                          config=config, tags=tags, dir=str(root), settings=settings(wandb, mode),
                          reinit="finish_previous")
    except Exception as err:
        line = deterministic_failure(err, mode)
        if line is None:
            raise
        raise ConfigError(line) from err


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
