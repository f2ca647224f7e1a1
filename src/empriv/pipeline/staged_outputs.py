"""A stage's outputs replaced as one (issue 43: "no partial outputs, anywhere").

Each output is written to a temporary path beside it (:meth:`StagedOutputs.file`, :meth:`StagedOutputs.directory`);
:meth:`StagedOutputs.publish` then renames every previous output aside and every new one into place — renames
only, within each output's own directory, so the switch takes milliseconds and no file is ever half written. Work
that may still fail after the outputs exist (logging to W&B, which reads the published figures) runs after
``publish`` inside the block; if anything in the block fails, the previous outputs are put back (or, where there
were none, the new ones removed) and the temporaries deleted: a failed stage leaves the outputs of the last run that
succeeded, whole, matching ``dvc.lock``. When the block ends normally the previous outputs are deleted.

    with StagedOutputs() as out:
        write_json(out.file(paths.SUMMARY), summary)
        make_figures(analysis, out.directory(paths.ANALYSIS_PLOTS_DIR))
        out.publish()
        track_analysis(...)   # a failure here puts the previous outputs back

A block that never calls ``publish`` publishes when it ends. SIGKILL between two renames of ``publish`` can still
leave a mix; anything else (an exception, SIGINT/SIGTERM turned into exceptions) cannot.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists() or path.is_symlink():
        path.unlink(missing_ok=True)


class StagedOutputs:
    """The outputs of one stage run, staged beside their final paths and switched together (module doc)."""

    def __init__(self) -> None:
        self._staged: list[tuple[Path, Path]] = []  # (final path, temporary path)
        self._moved: list[tuple[Path, Path | None]] = []  # (final path, where its previous content went, or None)
        self._published = False

    def _check(self, final: Path) -> Path:
        final = Path(final)
        if self._published:
            raise RuntimeError(f"{final}: outputs were already published")
        if any(f == final for f, _ in self._staged):
            raise ValueError(f"{final}: staged twice")
        final.parent.mkdir(parents=True, exist_ok=True)
        return final

    def file(self, final: str | Path) -> Path:
        """A fresh empty temporary file beside ``final``: write the output there (any writer, atomic or not)."""
        final = self._check(final)
        fd, tmp = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".staged", dir=final.parent)
        os.close(fd)
        os.chmod(tmp, 0o644)
        self._staged.append((final, Path(tmp)))
        return Path(tmp)

    def directory(self, final: str | Path) -> Path:
        """A fresh empty temporary directory beside ``final``: it replaces ``final`` whole."""
        final = self._check(final)
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".staged", dir=final.parent))
        os.chmod(tmp, 0o755)
        self._staged.append((final, tmp))
        return tmp

    def publish(self) -> None:
        """Move every previous output aside and every staged one into place (on an error half way, what was moved
        is moved back before the error propagates)."""
        if self._published:
            return
        self._published = True
        try:
            for final, tmp in self._staged:
                aside = None
                if final.exists() or final.is_symlink():
                    aside = final.with_name(f".{final.name}.{os.getpid()}.previous")
                    _remove(aside)
                    os.replace(final, aside)
                self._moved.append((final, aside))
                os.replace(tmp, final)
        except BaseException:
            self._restore()
            raise

    def _restore(self) -> None:
        for final, aside in reversed(self._moved):
            _remove(final)
            if aside is not None:
                os.replace(aside, final)
        self._moved = []

    def __enter__(self) -> "StagedOutputs":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is None:
                self.publish()
                for _, aside in self._moved:
                    if aside is not None:
                        _remove(aside)
            else:
                self._restore()
        finally:
            for _, tmp in self._staged:
                if tmp.exists():
                    _remove(tmp)
