"""input@<key>: the fingerprint of one raw file outside the repository → data/inputs/<key>/fingerprint.json.

    python stages/inputs.py --key corpus|overrides|base|public

params' ``inputs`` mapping names the raw files that other params keys point to — ``corpus`` (``data.path``),
``overrides`` (``secrets.overrides``), ``base`` (a local ``base.name`` directory), ``public`` (``data.public_path``)
— and validation keeps it equal
to them (``empriv validate --fix-inputs`` writes it). dvc.yaml makes one ``input@<key>`` stage per entry
(``foreach``) with the file as its DVC dependency, so DVC itself notices an edit in place; the built-in sources
and bases name no file, make no stage and leave nothing to re-check (``dvc status`` stays empty). Each stage
writes the file's SHA-256 into its own directory under ``data/inputs/``; prepare (corpus, public), secrets and
base/tokenizer depend on those directories (git-tracked, so they exist when empty): an edited corpus or public file
re-runs prepare and what follows, an unchanged one re-runs nothing.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
from pathlib import Path

from empriv import paths
from empriv.config import RAW_INPUTS, Params

log = logging.getLogger(__name__)
FINGERPRINT = "fingerprint.json"


def fingerprint(path: str | Path | None) -> dict:
    """SHA-256 of a file, or of a directory's files (relative name + content, sorted); None for no path."""
    if path is None:
        return {"path": None}
    p = Path(path).expanduser()
    h = hashlib.sha256()
    files = [p] if p.is_file() else sorted(f for f in p.rglob("*") if f.is_file())
    size = 0
    for f in files:
        if p.is_dir():
            h.update(str(f.relative_to(p)).encode() + b"\0")
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
                size += len(block)
    return {"path": str(path), "sha256": h.hexdigest(), "bytes": size, "files": len(files)}


def fingerprint_path(key: str, root: Path = paths.INPUTS_DIR) -> Path:
    return Path(root) / key / FINGERPRINT


def prune_stale(params: Params, root: Path = paths.INPUTS_DIR) -> list[Path]:
    """Delete the fingerprints of raw inputs the params no longer name (their input@ stage is gone), so the
    dependents' directories hold exactly the current inputs. Returns the deleted files."""
    removed = []
    for key in RAW_INPUTS:
        f = fingerprint_path(key, root)
        if key not in params.inputs and f.exists():
            f.unlink()
            removed.append(f)
    return removed


def main(params: Params, key: str, out_root: Path = paths.INPUTS_DIR) -> dict:
    from empriv.io import write_json

    if key not in params.inputs:
        raise ValueError(f"--key: params name no raw input {key!r} (got {key!r}; allowed: "
                         f"{', '.join(params.inputs) or 'none: inputs is empty'})")
    from empriv.config import ConfigError
    from empriv.pipeline.input_checks import input_errors

    # the file's content, checked again here: an edit in place re-runs this stage (not validate) before its dependents
    errors = input_errors(params, Path("."), keys=(key,))
    if errors:
        raise ConfigError(*errors)
    found = fingerprint(params.inputs[key])
    record = {"key": key, "param": RAW_INPUTS[key], **found}
    write_json(fingerprint_path(key, out_root), record)
    log.info("input %s (%s): %d file(s), %d bytes, sha256 %s", key, RAW_INPUTS[key], found["files"], found["bytes"],
             found["sha256"][:12])
    return record


def cli(argv: list[str] | None = None) -> None:
    """The stage's command line (``stages/inputs.py --key <key>``)."""
    from empriv.stage import run_stage

    ap = argparse.ArgumentParser(prog="python stages/inputs.py", description=__doc__.splitlines()[0])
    ap.add_argument("--key", required=True, choices=sorted(RAW_INPUTS))
    args = ap.parse_args(argv)
    run_stage(lambda params: main(params, args.key))
