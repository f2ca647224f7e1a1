"""inputs: fingerprints of the raw inputs that live outside the DAG → .empriv/inputs/{corpus,base}.json.

DVC cannot depend on a path that is a parameter (``data.path``, a local ``base.name``) and absent for the built-in
sources, so this stage — run on every ``dvc repro`` (``always_changed``; it only hashes) — writes each input's
SHA-256. The file changes exactly when the input does, and prepare / base depend on it: editing the raw corpus
re-runs prepare and everything downstream, an unchanged corpus re-runs nothing.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from empriv import paths
from empriv.config import Params


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


def main(params: Params, out_dir=paths.INPUTS_DIR) -> dict:
    from empriv.io import write_json

    local_base = params.base.name.startswith(("/", ".", "~"))  # config's rule for a local model directory
    corpus = {"source": params.data.source, **fingerprint(params.data.path),
              "overrides": fingerprint(params.secrets.overrides)}
    base = {"name": params.base.name, **fingerprint(params.base.name if local_base else None)}
    write_json(Path(out_dir) / "corpus.json", corpus)
    write_json(Path(out_dir) / "base.json", base)
    return {"corpus": corpus, "base": base}


if __name__ == "__main__":
    from empriv.stage import run_stage

    run_stage(main)
