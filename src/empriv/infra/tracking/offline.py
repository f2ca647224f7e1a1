"""Offline runs written once, at the end: every run whose journal changed, written whole in one process."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

from empriv.infra.tracking.journal import (dump_journal, journal_digest, journal_dir, journal_lock, local_copies,
                                           merged_sections, ordered_sections, read_journal)
from empriv.infra.tracking.naming import tracking_root
from empriv.infra.tracking.runs import CONFIGURATION_JOB, define_axis, init_wandb, media_of

log = logging.getLogger("empriv.tracking")  # one logger for the package, named as before it moved


def write_offline_runs(root: str | Path | None = None, *, force: bool = False) -> list[str]:
    """Write, as complete offline W&B runs, every journal under ``<root>/wandb`` whose offline copy is missing or
    older than the journal (``force``: all of them); in one process, so W&B starts once. Each run is written
    whole — config and tags of all its sections, their history rows in the order train, audit, score,
    analysis, their tables and figures, the merged summary — and its older local copies are deleted.
    Returns the ids written. ``root`` defaults to :func:`tracking_root`."""
    import time

    root = Path(root).resolve() if root is not None else tracking_root()
    jdir = journal_dir(root)
    if not jdir.is_dir():
        return []
    start, written = time.monotonic(), []
    for path in sorted(jdir.glob("*.json")):
        rid = path.stem
        with journal_lock(jdir / f"{rid}.lock"):
            journal = read_journal(root, rid)
            if not journal.get("sections") or not journal.get("name"):
                continue
            digest = journal_digest(journal)
            if not force and journal.get("written") == digest and local_copies(root, rid):
                continue
            _write_whole_run(root, journal)
            journal["written"] = digest
            dump_journal(root, rid, journal)
            written.append(rid)
    if written:  # W&B's service ends with the writing, not whenever this process does
        from empriv.infra.tracking.service import end_service

        end_service()
        log.info("W&B: wrote %d offline run(s) to %s in %.1f s (upload with: wandb sync --sync-all %s)",
                 len(written), root / "wandb", time.monotonic() - start, root / "wandb")
    return written


def _write_whole_run(root: Path, journal: dict) -> None:
    os.environ.setdefault("WANDB_SILENT", "true")
    import wandb

    rid, sections = journal["run_id"], journal["sections"]
    order = ordered_sections(sections)
    tags = list(dict.fromkeys(t for s in order for t in sections[s].get("tags", [])))
    run = init_wandb(wandb, root, mode="offline", project=journal["project"], name=journal["name"],
                     group=journal["group"], job_type=journal.get("job_type", CONFIGURATION_JOB), rid=rid,
                     config=merged_sections(sections, "config"), tags=tags)
    try:
        for s in order:
            for pattern, step_key in (sections[s].get("axes") or {}).items():
                define_axis(run, pattern, step_key)
        step = 0
        for s in order:
            for row in sections[s].get("rows", []):
                run.log(row, step=step)
                step += 1
        media = {}
        for s in order:
            media.update(media_of(sections[s]))
        if media:
            run.log(media, step=step)
        for k, v in merged_sections(sections, "summary").items():
            run.summary[k] = v
        this = Path(run.dir).parent
    except BaseException:
        failed = Path(run.dir).parent
        run.finish(exit_code=1)
        shutil.rmtree(failed, ignore_errors=True)  # not a copy of the run: the older one, if any, stays
        raise
    run.finish()
    for old in local_copies(root, rid):
        if old.resolve() != this.resolve():
            shutil.rmtree(old, ignore_errors=True)
