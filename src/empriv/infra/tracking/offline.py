"""Offline runs written once, at the end: every run whose journal changed, written whole in one process."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from empriv.infra.tracking.journal import (discard_copy, dump_journal, journal_digest, journal_dir,
                                           journal_lock_if_free, local_copies, merged_sections, ordered_sections, read_journal,
                                           retire_older_copies)
from empriv.infra.tracking.naming import tracking_root
from empriv.infra.tracking.runs import CONFIGURATION_JOB, define_axis, init_wandb, media_of

log = logging.getLogger("empriv.tracking")  # one logger for the package, named as before it moved


def write_offline_runs(root: str | Path | None = None, *, force: bool = False) -> list[str]:
    """Write, as complete offline W&B runs, every journal under ``<root>/wandb`` whose offline copy is missing or
    older than the journal (``force``: all of them); in one process, so W&B starts once. Each run is written
    whole — config and tags of all its sections, their history rows in the order train, audit, score,
    analysis, their tables and figures, the merged summary. Once all are written and W&B's service is ended, each
    new copy that W&B has finished writing replaces the run's older local copies and marks its journal written; one
    that does not finish keeps them (:func:`~empriv.infra.tracking.journal.retire_older_copies`), and its journal
    stays unwritten, for the next call to write again. Returns the ids written. ``root`` defaults to
    :func:`tracking_root`."""
    import time

    root = Path(root).resolve() if root is not None else tracking_root()
    jdir = journal_dir(root)
    if not jdir.is_dir():
        return []
    start, written, busy = time.monotonic(), [], []  # written: (run id, journal digest, new copy, older copies)
    try:
        for path in sorted(jdir.glob("*.json")):
            rid = path.stem
            with journal_lock_if_free(jdir / f"{rid}.lock") as free:
                if not free:  # a stage (of this workspace or of a study sharing the root) is tracking it now: its
                    busy.append(rid)  # section lands in the journal when it ends, for the next call to write
                    continue
                journal = read_journal(root, rid)
                if not journal.get("sections") or not journal.get("name"):
                    continue
                digest = journal_digest(journal)
                if not force and journal.get("written") == digest and local_copies(root, rid):
                    continue
                if journal.pop("written", None) == digest:  # rewritten (force): unwritten until the new copy is
                    dump_journal(root, rid, journal)
                older = local_copies(root, rid)
                written.append((rid, digest, _write_whole_run(root, journal), older))
    finally:  # also when a run failed: the runs written before it replace their older copies
        if written:
            _retire_older_copies(root, written)
    if busy:
        log.info("W&B: %d run(s) left to the stages tracking them now (%s); a later call writes them", len(busy),
                 ", ".join(busy[:3]) + (" …" if len(busy) > 3 else ""))
    if written:
        log.info("W&B: wrote %d offline run(s) to %s in %.1f s (upload with: wandb sync --sync-all %s)",
                 len(written), root / "wandb", time.monotonic() - start, root / "wandb")
    return [rid for rid, *_ in written]


def _retire_older_copies(root: Path, written: list[tuple[str, str, Path, list[Path]]]) -> None:
    """End W&B's service, then, for each (run id, journal digest, new copy, older copies) written, delete the older
    copies once the new one is finished and mark the journal written (if no stage changed it since)."""
    from empriv.infra.tracking.service import end_service

    # the service ends with the writing, not whenever this process does, and closes every log as it ends (one
    # inherited through WANDB_SERVICE is not ours to end: retire_older_copies waits for each log all the same)
    end_service()
    for rid, digest, new, older in written:
        with journal_lock_if_free(journal_dir(root) / f"{rid}.lock") as free:
            if not free or not new.is_dir():  # a stage tracks it now, or a later writer replaced this copy: the
                continue  # older copies stay until the next writing, the journal stays unwritten
            if retire_older_copies(rid, new, older):
                journal = read_journal(root, rid)
                if journal_digest(journal) == digest:  # else a stage changed it since: the next call writes it
                    journal["written"] = digest
                    dump_journal(root, rid, journal)


def _write_whole_run(root: Path, journal: dict) -> Path:
    """Write the run of ``journal`` as a new offline copy; returns its directory. A failure deletes that copy."""
    os.environ.setdefault("WANDB_SILENT", "true")
    import wandb

    rid, sections = journal["run_id"], journal["sections"]
    order = ordered_sections(sections)
    tags = list(dict.fromkeys(t for s in order for t in sections[s].get("tags", [])))
    run = init_wandb(wandb, root, mode="offline", project=journal["project"], name=journal["name"],
                     group=journal["group"], job_type=journal.get("job_type", CONFIGURATION_JOB), rid=rid,
                     config=merged_sections(sections, "config"), tags=tags)
    this = Path(run.dir).parent
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
    except BaseException:
        run.finish(exit_code=1)
        discard_copy(this)  # not a copy of the run: the older one, if any, stays
        raise
    run.finish()
    return this
