"""The calibration cache: one JSON file per (request, code versions) key in a directory the caller names.

The library holds no default location: a caller that wants a cache passes a :class:`CalibrationCache`
(the pipeline uses the project's ``empriv.paths.CALIBRATION_CACHE``). An entry records the key it was
stored under; the calibration re-verifies every hit by forward accounting before using it
(:func:`empriv.privacy.calibration.calibrate_noise_multiplier`), so a hand-edited or stale entry is
detected, reported and replaced.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
from pathlib import Path

logger = logging.getLogger("empriv.privacy")


@functools.lru_cache(maxsize=1)
def code_versions() -> dict[str, str | None]:
    """Versions of the code that computes a calibration: empriv, the accountants' numerical version and
    every library any accountant uses (fallbacks included, so the union over the registry)."""
    from importlib import metadata

    import empriv
    from empriv.privacy.accountants import ACCOUNTANTS, NUMERICS_VERSION

    out: dict[str, str | None] = {"empriv": empriv.__version__, "numerics": NUMERICS_VERSION}
    for dist in sorted({lib for acc in ACCOUNTANTS.values() for lib in acc.libraries}):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


def entry_key(request: dict, versions: dict) -> dict:
    """What identifies an entry: the calibration request and the code versions."""
    return {"request": dict(request), "versions": dict(versions)}


def key_digest(key: dict) -> str:
    blob = json.dumps(key, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


class CalibrationCache:
    """A directory of calibration entries (``<sha256 of the key>.json``), written atomically."""

    def __init__(self, directory: str | os.PathLike):
        if isinstance(directory, bool) or not isinstance(directory, (str, os.PathLike)):
            raise ValueError(f"cache directory must be a path, got {directory!r}")
        self.directory = Path(directory)

    def __repr__(self) -> str:
        return f"CalibrationCache({str(self.directory)!r})"

    def path(self, key: dict) -> Path:
        return self.directory / f"{key_digest(key)}.json"

    def load(self, key: dict) -> dict | None:
        """The stored entry ``{"key": ..., "calibration": {...}}`` for ``key``, or None (missing or corrupt,
        the latter with a warning). Whether the entry matches ``key`` is for the caller to check."""
        path = self.path(key)
        try:
            entry = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            logger.warning("calibration cache entry %s is unreadable (%s); recomputing", path, exc)
            return None
        if not isinstance(entry, dict) or not isinstance(entry.get("calibration"), dict):
            logger.warning("calibration cache entry %s has no calibration record; recomputing", path)
            return None
        return entry

    def store(self, key: dict, calibration: dict) -> Path | None:
        """Write (or overwrite) the entry for ``key``; an unwritable directory is a warning, not an error."""
        from empriv.io import atomic_path

        path = self.path(key)
        try:
            with atomic_path(path) as tmp:
                tmp.write_text(json.dumps({"key": key, "calibration": calibration}, sort_keys=True, indent=1) + "\n",
                               encoding="utf-8")
        except OSError as exc:
            logger.warning("could not write calibration cache entry %s (%s)", path, exc)
            return None
        return path


__all__ = ["CalibrationCache", "code_versions", "entry_key", "key_digest"]
