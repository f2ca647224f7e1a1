"""Per-stage params files: what each stage reads of params.yaml, as one small JSON file (issue 30; a prototype).

A no-op ``dvc repro`` parses params.yaml once per stage that lists ``params:`` (113 parses of the default's 15.7 KB)
and walks the whole document once per key; dvc.lock repeats every stage's values (39 % of its 282 KB). A stage that
instead depends, as a file, on ``<dir>/<stage>.json`` — the keys it reads with their values, and nothing else —
re-runs exactly when those values change, and costs DVC one stat and one state-database lookup (measured: 0.73×
the CPU time of a no-op ``dvc repro`` of the default, dvc.lock 161 KB; docs/timing.md, "What the project still
controls in a no-op dvc repro"). Not wired in yet: dvc.yaml (each stage's ``params:`` replaced by the file dep, a
top-level ``params: [params.yaml]``) and the validate stage (writing these files as a ``cache: false`` output) are
the other half of the change.

:data:`STAGE_KEYS` is the table of what each stage definition reads (dotted keys of params.yaml, as DVC's key-level
params); it holds exactly dvc.yaml's ``params:`` lists today (a test checks it against dvc.yaml).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable, Mapping

STAGE_KEYS: dict[str, tuple[str, ...]] = {
    "prepare": ("data",),
    "tokenizer": ("tokenizer", "base.name"),
    "secrets": ("secrets.ngram", "secrets.top_k", "secrets.min_count", "secrets.split_rule",
                "secrets.min_continuation_chars", "secrets.min_in_window_fraction", "secrets.overrides", "data.source",
                "base.seq_len"),
    "base": ("base", "score.eval_batch_size", "runtime.device", "runtime.threads"),
    "record_scores": ("base.seq_len", "score.eval_batch_size", "runtime.device", "runtime.threads"),
    "train": ("train", "privacy", "data.n_train", "base.seq_len", "runtime.device", "runtime.precision",
              "runtime.threads"),
    "filter": ("secrets.filter", "secrets.filter_runs", "secrets.acr_min_finetuned", "secrets.acr_max_base",
               "score.acr", "score.air_template", "score.air_max_new_tokens", "cube", "runtime.device",
               "runtime.threads"),
    "score": ("score", "data.source", "base.seq_len", "runtime.device", "runtime.threads"),
    "canaries": ("canaries", "audit.cube.unit", "base.seq_len", "runtime.device", "runtime.threads"),
    "audit": ("audit", "train", "privacy", "data.n_train", "base.seq_len", "runtime.device", "runtime.precision",
              "runtime.threads"),
    "adaptation_data": ("adaptation_audit",),
    "adaptation_audit": ("adaptation_audit", "train", "privacy", "base.seq_len", "runtime.device",
                         "runtime.precision", "runtime.threads"),
    "analyze": ("cube", "audit.cube", "analyze"),
    "profiles": ("cube.epsilon", "cube.batch_size", "cube.steps", "privacy", "data.n_train"),
}


def stage_document(params: Mapping[str, Any], keys: Iterable[str]) -> dict[str, Any]:
    """The part of ``params`` (params.yaml as loaded) that ``keys`` name, nested as in params.yaml. A key that the
    document lacks raises ``KeyError`` naming it (validate fills defaults in first, as DVC needs every key)."""
    out: dict[str, Any] = {}
    for key in keys:
        node: Any = params
        target = out
        parts = key.split(".")
        for i, part in enumerate(parts):
            if not isinstance(node, Mapping) or part not in node:
                raise KeyError(f"params key {key!r}: {'.'.join(parts[:i + 1])!r} is missing")
            node = node[part]
            if i < len(parts) - 1:
                target = target.setdefault(part, {})
        target[parts[-1]] = node
    return out


def render(document: Mapping[str, Any]) -> str:
    """One stable spelling of a stage document (sorted keys, inf as JSON's ``Infinity``): equal values, equal bytes,
    so DVC's md5 of the file changes exactly when a value does."""
    return json.dumps(document, sort_keys=True, indent=1, allow_nan=True) + "\n"


def write_stage_params(params: Mapping[str, Any], out_dir: str | Path,
                       stage_keys: Mapping[str, Iterable[str]] = STAGE_KEYS) -> list[Path]:
    """Write ``<out_dir>/<stage>.json`` for every stage of ``stage_keys``; a file whose content would not change is
    left alone (its mtime too), files of stages no longer in the table are removed. Returns the files written.
    Each write goes to a temporary file renamed into place (a stage never sees half a file)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for stage, keys in stage_keys.items():
        path = out / f"{stage}.json"
        text = render(stage_document(params, keys))
        if path.exists() and path.read_text(encoding="utf-8") == text:
            continue
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
        written.append(path)
    for stale in out.glob("*.json"):
        if stale.stem not in stage_keys:
            stale.unlink()
    return written
