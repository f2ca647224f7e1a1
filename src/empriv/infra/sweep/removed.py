"""Outputs of runs the cube no longer has, inside the directories later stages read (issue 43).

Removing a value from the cube removes its matrix items from dvc.yaml, but not their outputs: DVC leaves
``records/train/…/eps8-…-s2.json`` where it is. ``analyze`` depends on the whole directory ``records/train`` (and
``filter`` on ``models/runs``), and a directory dependency is hashed over every file in it, the ``.gitignore`` DVC
writes beside its outputs included. So the stale files of removed runs stayed in those stages' dependency hashes
(dvc.lock then names a state no checkout of that commit reproduces: a fresh clone sees ``analyze`` changed), and a
stage that reads the whole directory counted them.

:func:`find_removed` finds them (read only, at planning): in a directory dependency of a stage the sweep runs, a path
that no stage of the project declares as an output (nor lies inside, nor above, one) and that *was* an output —
it matches the output path of a matrix/foreach stage of dvc.yaml with other values (``models/runs/${item.unit}/…``:
a run of a removed cube value), or it is an output of a dvc.lock entry dvc.yaml no longer has (a renamed or dropped
stage, until the sweep prunes that entry). Nothing else is touched: a temporary, a user's own file or a source
file in such a directory stays (git-tracked source directories hold no output path of a matrix stage).

:func:`move_removed` moves them, at the turn of the first item that reads their directory — once every item it
needs has succeeded, validation included, so bad params stop before anything is moved — to
``.empriv/removed/<sweep>/<their path>`` (recoverable; the sweep says what it moved and where in one line). Each
moved path's entry leaves its directory's ``.gitignore`` as DVC's own ``ignore_remove`` takes it out (the file goes
when no entry is left), and directories left empty go too, so the directory hashes as DVC would have it had the runs
never been there. DVC's cache and run-cache keep the moved runs: a value added back is restored from the run-cache,
not run again.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from empriv.config import read_yaml

REMOVED_DIR = Path(".empriv") / "removed"  # where moved outputs go, one folder per sweep


def output_patterns(root: Path) -> list[re.Pattern]:
    """The output paths of dvc.yaml's matrix/foreach stages (outs, metrics, plots) as patterns over paths relative
    to ``root``: each ``${…}`` stands for one path component's worth of any value."""
    path = root / "dvc.yaml"
    stages = ((read_yaml(path) or {}).get("stages") or {}) if path.exists() else {}
    patterns = []
    for definition in stages.values():
        if not isinstance(definition, dict) or not ("matrix" in definition or "foreach" in definition):
            continue
        body = definition.get("do", definition) if "foreach" in definition else definition
        wdir = str(body.get("wdir") or ".")
        for kind in ("outs", "metrics", "plots"):
            for out in body.get(kind) or []:
                name = next(iter(out)) if isinstance(out, dict) else out
                if not isinstance(name, str) or "${" not in name:
                    continue
                template = os.path.normpath(os.path.join(wdir, name)).replace(os.sep, "/")
                parts = re.split(r"\$\{[^}]*\}", template)
                patterns.append(re.compile("[^/]+".join(re.escape(p) for p in parts)))
    return patterns


def lock_outputs(root: Path, entries: list[str] | None) -> set[str]:
    """The output paths (relative to ``root``) of these dvc.lock entries."""
    lock = root / "dvc.lock"
    if not entries or not lock.exists():
        return set()
    stages = (read_yaml(lock) or {}).get("stages") or {}
    return {os.path.normpath(str(out["path"])).replace(os.sep, "/") for name in entries
            for out in ((stages.get(name) or {}).get("outs") or []) if isinstance(out, dict) and "path" in out}


class RemovedFinder:
    """:func:`find_removed` with what it needs read once: the declared outputs of every stage of the project
    (absolute, resolved), the output patterns of dvc.yaml and the outputs of the stale dvc.lock entries."""

    def __init__(self, root: Path, declared: list[str], stale_lock_entries: list[str] | None):
        self.root = root
        self.declared = set(declared)
        self.ancestors = {str(p) for d in declared for p in Path(d).parents}
        self.patterns = output_patterns(root)
        self.lock_outs = lock_outputs(root, stale_lock_entries)
        self._found: dict[str, list[str]] = {}

    def _was_output(self, rel: str) -> bool:
        return rel in self.lock_outs or any(p.fullmatch(rel) for p in self.patterns)

    def _may_hold(self, rel_dir: str) -> bool:
        """Whether an output pattern or a stale output could lie inside ``rel_dir`` (else it is not walked)."""
        inside = rel_dir.rstrip("/") + "/"
        if any(out.startswith(inside) for out in self.lock_outs):
            return True
        for p in self.patterns:
            fixed = p.pattern.split("[^/]+")[0].replace("\\", "")
            if fixed.startswith(inside) or inside.startswith(fixed[: fixed.rfind("/") + 1]):
                return True
        return False

    def in_directory(self, directory: str) -> list[str]:
        """The removed outputs inside ``directory`` (absolute), sorted; [] when it is not a directory, is itself a
        declared output (or inside one), or cannot hold an output path."""
        if directory in self._found:
            return self._found[directory]
        found: list[str] = []
        d = Path(directory)
        try:
            rel_dir = d.relative_to(self.root).as_posix()
        except ValueError:
            rel_dir = None
        inside_declared = directory in self.declared or any(str(p) in self.declared for p in d.parents)
        if rel_dir is not None and d.is_dir() and not inside_declared and self._may_hold(rel_dir):
            self._walk(directory, found)
        self._found[directory] = sorted(found)
        return self._found[directory]

    def _walk(self, directory: str, found: list[str]) -> None:
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError:
            return
        for entry in entries:
            path = entry.path
            if path in self.declared or entry.name == ".gitignore":
                continue
            is_dir = entry.is_dir(follow_symlinks=False)
            if path in self.ancestors:  # holds declared outputs: look further down
                if is_dir:
                    self._walk(path, found)
                continue
            if self._was_output(Path(path).relative_to(self.root).as_posix()):
                found.append(path)
            elif is_dir:
                self._walk(path, found)


def find_removed(finder: RemovedFinder, deps: list[str]) -> list[str]:
    """The removed outputs (absolute paths) inside the directory dependencies ``deps`` of one stage."""
    return sorted({p for d in deps for p in finder.in_directory(d)})


def _ignore_remove(path: Path) -> None:
    """What DVC's ``scm.ignore_remove`` does for an output: its ``/<name>`` entry out of the ``.gitignore`` beside it,
    the file removed when no line is left."""
    gitignore = path.parent / ".gitignore"
    if not gitignore.is_file():
        return
    entry = "/" + path.name
    escaped = "/" + re.sub(r"([*?\[\]!#\\])", r"\\\1", path.name)  # how DVC writes a name with wildcard characters
    lines = gitignore.read_text(encoding="utf-8").splitlines(keepends=True)
    kept = [line for line in lines if line.strip() not in (entry, escaped)]
    if len(kept) == len(lines):
        return
    if not kept:
        gitignore.unlink()
    else:
        gitignore.write_text("".join(kept), encoding="utf-8")


def move_removed(root: Path, paths: list[str], dest: Path, stop_at: list[str]) -> list[str]:
    """Move ``paths`` (absolute, inside ``root``) to ``dest/<path relative to root>``, take their entries out of the
    ``.gitignore`` beside them, and remove the directories they leave empty, up to (not including) the directories
    ``stop_at``. Returns the paths moved, relative to ``root``. A path gone meanwhile is skipped; an ``OSError`` of a
    move is raised (what was moved before it stays moved)."""
    moved = []
    keep = {str(Path(s)) for s in stop_at} | {str(root)}
    for path in map(Path, paths):
        if not os.path.lexists(path):
            continue
        rel = path.relative_to(root)
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(path), str(target))  # a rename on the same file system
        _ignore_remove(path)
        moved.append(rel.as_posix())
        parent = path.parent
        while str(parent) not in keep and parent != parent.parent and parent.is_dir() and not any(parent.iterdir()):
            parent.rmdir()
            parent = parent.parent
    return moved


def moved_line(moved: list[str], directories: list[str], reader: str, dest: str, shown: int | None = 4) -> str:
    """The one line that tells the user what was moved (paths relative to the project), out of which directories
    (read by the item ``reader``), and where to."""
    listed = moved if shown is None or len(moved) <= shown else \
        [*moved[:shown], f"and {len(moved) - shown} more (all of them in the log)"]
    return (f"moved {len(moved)} output(s) of runs dvc.yaml no longer has out of {', '.join(directories)} (read by "
            f"{reader}) to {dest}/, where they stay (DVC's run-cache restores them if their values come back): "
            f"{', '.join(listed)}")
