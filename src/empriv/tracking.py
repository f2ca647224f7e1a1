"""W&B run logging with secret scrubbing.

W&B runs offline by default (``runtime.wandb_mode``; the ``WANDB_MODE`` environment variable wins).
Nothing but hyperparameters, ids and scores is logged: git state, code, console output and
system statistics are not captured, and every logged value is checked against the secret list —
a string containing a secret is replaced by ``[redacted]`` (and the secret's *id* is warned about).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

log = logging.getLogger("empriv.tracking")
REDACTED = "[redacted]"


class SecretScrubber:
    """Replaces any string that contains one of ``secrets`` (texts, prompts, continuations)."""

    def __init__(self, secrets: Iterable[dict] = ()):
        self._needles: list[tuple[str, str]] = []
        for s in secrets:
            for key in ("text", "prompt", "continuation"):
                value = s.get(key)
                if value and len(value) >= 6:  # very short fragments would redact ordinary words
                    self._needles.append((s.get("id", "?"), value))

    @classmethod
    def from_files(cls, *paths: str | Path) -> "SecretScrubber":
        """Secrets from every JSON-lines file of ``paths`` that exists (planted and mined lists)."""
        from empriv.io import read_jsonl

        rows: list[dict] = []
        for path in paths:
            if Path(path).exists():
                rows.extend(read_jsonl(path))
        return cls(rows)

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
            return type(obj)(self(v) for v in obj)
        return obj


class Tracker:
    """A thin W&B run: ``log`` metrics per step, ``finish`` with a summary. Mode 'disabled' logs nothing."""

    def __init__(self, run, scrub: SecretScrubber):
        self._run = run
        self._scrub = scrub

    @property
    def mode(self) -> str:
        return "disabled" if self._run is None else str(self._run.settings.mode)

    def log(self, metrics: dict, step: int) -> None:
        if self._run is not None:
            self._run.log(self._scrub(metrics), step=step)

    def finish(self, summary: dict | None = None) -> None:
        if self._run is None:
            return
        for k, v in self._scrub(summary or {}).items():
            self._run.summary[k] = v
        self._run.finish()


def start_run(
    *,
    project: str,
    name: str,
    group: str,
    job_type: str,
    config: dict,
    mode: str,
    scrub: SecretScrubber,
    directory: str | Path = ".",
) -> Tracker:
    mode = os.environ.get("WANDB_MODE", mode)
    if mode == "disabled":
        return Tracker(None, scrub)
    os.environ.setdefault("WANDB_SILENT", "true")
    import wandb

    settings = wandb.Settings(
        mode=mode, disable_git=True, save_code=False, console="off", x_disable_stats=True, silent=True
    )
    Path(directory).mkdir(parents=True, exist_ok=True)
    run = wandb.init(
        project=project,
        name=name,
        group=group,
        job_type=job_type,
        config=scrub(config),
        dir=str(directory),
        settings=settings,
        reinit="finish_previous",
    )
    return Tracker(run, scrub)
