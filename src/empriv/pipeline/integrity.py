"""Are the runs' models and records still what DVC recorded? (``empriv summary`` prints a warning per problem.)

A run's outputs live outside git (DVC's cache, or the workspace): a disk that filled up, a copy interrupted, a model
truncated by hand, a record deleted, and the summary would be computed from runs that are no longer there.
:func:`output_problems` reads ``dvc.lock`` as plain YAML (no DVC API) and checks, for the model stages' outputs
(``train@``, ``audit@``, ``score@``, ``base``), that every file exists with the size and, for files up to
:data:`HASH_LIMIT` bytes, the md5 DVC recorded; a directory is checked against its manifest in the local DVC cache
(``.dvc/cache/files/md5/…/….dir``) when the cache holds it, else by its file count and total size.
"""

from __future__ import annotations

import json
from pathlib import Path

from empriv.io import file_digest

STAGES = ("train@", "audit@", "score@", "base")
HASH_LIMIT = 64 * 2**20  # larger files: size only (a 500 MB model is not hashed for a summary)


def _file_problem(path: Path, md5: str | None, size: int | None) -> str | None:
    if not path.is_file():
        return "missing"
    actual = path.stat().st_size
    if size is not None and actual != size:
        return f"{actual} bytes, dvc.lock says {size} (truncated or changed)"
    if md5 and actual <= HASH_LIMIT and file_digest(path, "md5") != md5:
        return "content differs from its DVC hash (truncated or changed since the stage ran)"
    return None


def _manifest(root: Path, md5: str) -> list[dict] | None:
    path = root / ".dvc" / "cache" / "files" / "md5" / md5[:2] / md5[2:]
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _dir_problems(root: Path, rel: str, out: dict) -> list[str]:
    path = root / rel
    if not path.is_dir():
        return [f"{rel}: missing"]
    manifest = _manifest(root, out.get("md5", "")) if str(out.get("md5", "")).endswith(".dir") else None
    if manifest is not None:
        problems = []
        for entry in manifest:
            problem = _file_problem(path / entry["relpath"], entry.get("md5"), entry.get("size"))
            if problem:
                problems.append(f"{rel}/{entry['relpath']}: {problem}")
        return problems
    files = [f for f in path.rglob("*") if f.is_file()]
    size = sum(f.stat().st_size for f in files)
    if out.get("nfiles") is not None and len(files) != out["nfiles"]:
        return [f"{rel}: {len(files)} files, dvc.lock says {out['nfiles']} (a file missing or added)"]
    if out.get("size") is not None and size != out["size"]:
        return [f"{rel}: {size} bytes in all, dvc.lock says {out['size']} (a file truncated or changed)"]
    return []


def output_problems(root: str | Path = ".", lock: str | Path = "dvc.lock", stages: tuple[str, ...] = STAGES) -> list[str]:
    """One line per output of the named stages (prefixes of their dvc.lock names) that is missing or does not match
    what dvc.lock recorded, each naming the stage to restore or re-run; [] when dvc.lock does not exist."""
    import yaml

    root = Path(root)
    lock = root / lock
    if not lock.is_file():
        return []
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: 0.05 s for the default's dvc.lock, not 0.5 s
    entries = (yaml.load(lock.read_text(encoding="utf-8"), Loader=loader) or {}).get("stages") or {}
    problems = []
    for name, entry in entries.items():
        if not any(name == s or (s.endswith("@") and name.startswith(s)) for s in stages):
            continue
        for out in (entry or {}).get("outs") or []:
            rel = out.get("path")
            if not rel:
                continue
            if str(out.get("md5", "")).endswith(".dir") or (root / rel).is_dir():
                found = _dir_problems(root, rel, out)
            else:
                problem = _file_problem(root / rel, out.get("md5"), out.get("size"))
                found = [f"{rel}: {problem}"] if problem else []
            problems += [f"{p} (stage {name}: `dvc checkout {name}` restores it from the cache, `dvc repro {name}` "
                         f"re-runs it)" for p in found]
    return problems
