"""Disk space before work: :func:`estimate` what a sweep will write, :func:`check_space` refuses up front when it
cannot fit, and :func:`free_text` names the free space when a full disk stops a job or the commit anyway.

A sweep writes each item's outputs twice over: into the workspace while the command runs, then into the DVC cache
when it commits them (a second copy, unless DVC links the workspace to the cache: ``cache.type`` hardlink or symlink,
or a reflink the file system supports). The cache may sit on another file system (a shared ``cache.dir``). Running
out of space half way costs the work done so far (the cache used to be the first to fill up, at the commit: every
item ran, nothing was committed), so the sweep estimates both before it runs or removes anything:

- an item to run writes what its outputs took last time — dvc.lock records the size and file count of every output
  DVC committed — or, when the item itself was never committed, the mean of the items of its stage that were (a
  cube value added: a training run weighs what the other training runs weigh). An item whose stage was never
  committed (a cold run) cannot be estimated and is left out of the sum (the note says how many). Its current outputs
  are removed before it runs, so the workspace needs only what the new ones add; the cache needs all of it;
- an item to commit without running (outputs intact but missing from the cache; finished by a sweep that was
  killed) needs the size of its outputs in the cache.

Each file is counted in whole 4 KiB blocks and each commit adds a run-cache entry (one block). A shortfall stops the
sweep with one line (:class:`NotEnoughSpace`, ``empriv sweep`` exits 75 as for a busy workspace: a condition of the
machine, not of the request — free space and run it again).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from empriv.infra.dvc_adapter import cache_settings, lock_out_sizes
from empriv.infra.sweep.lock import SweepBusy

BLOCK = 4096  # a file takes whole blocks of the file system (4 KiB on ext4, xfs, tmpfs)
RUN_CACHE_ENTRY = BLOCK  # DVC's run-cache entry of a committed stage: one small YAML file
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
_FICLONE = 0x40049409  # Linux's ioctl that makes a reflink


class NotEnoughSpace(SweepBusy):
    """The sweep cannot fit on the disks it writes to (the one-line message says which, what it needs and what is
    free); ``empriv sweep`` exits 75 (EX_TEMPFAIL: free space, then run again)."""


def size_text(n: float) -> str:
    """``512 B``, ``4.0 KiB``, ``1.2 MiB``, ``3.4 GiB``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover - the loop returns at GiB


def _existing(path: Path) -> Path:
    """``path`` or its nearest ancestor that exists (a cache directory not created yet lives on its parent's disk)."""
    path = Path(path).resolve()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def free_bytes(path: str | Path) -> int:
    """Bytes an unprivileged writer may still write on the file system of ``path`` (``statvfs``'s ``f_bavail``)."""
    st = os.statvfs(_existing(Path(path)))
    return st.f_bavail * st.f_frsize


def _blocks(size: int, files: int = 1) -> int:
    """Bytes ``files`` files of ``size`` bytes in all take on disk, at least (whole blocks each)."""
    return max(files, -(-size // BLOCK)) * BLOCK


def on_disk(paths: list[str]) -> int:
    """What the files under ``paths`` take now, in whole blocks (0 for what does not exist)."""
    total = 0
    for path in paths:
        if os.path.isdir(path):
            for dirpath, _dirs, files in os.walk(path):
                for name in files:
                    with contextlib.suppress(OSError):
                        total += _blocks(os.stat(os.path.join(dirpath, name)).st_size)
        elif os.path.exists(path):
            total += _blocks(os.stat(path).st_size)
    return total


@dataclass
class Estimate:
    """What a sweep will write, in bytes: into the workspace, into the DVC cache."""

    workspace: int = 0
    cache: int = 0
    to_run: int = 0  # items to run
    to_commit: int = 0  # items to commit without running
    unknown: list[str] = field(default_factory=list)  # items to run whose size nothing measured (left out)


def estimate(to_run: list, to_commit: list, lock_sizes: dict[str, dict[str, tuple[int, int]]]) -> Estimate:
    """The bytes ``to_run`` items (plan :class:`~empriv.infra.sweep.plan.Item`\\ s) and ``to_commit`` items will
    write (module docstring); ``lock_sizes``: :func:`~empriv.infra.dvc_adapter.lock_out_sizes`."""
    def recorded(address: str) -> int:
        return sum(_blocks(size, files) for size, files in lock_sizes[address].values())

    by_stage: dict[str, list[int]] = {}
    for address in lock_sizes:
        by_stage.setdefault(address.partition("@")[0], []).append(recorded(address))
    result = Estimate(to_run=len(to_run), to_commit=len(to_commit))
    for item in to_run:
        if item.address in lock_sizes:
            size = recorded(item.address)
        elif by_stage.get(item.stage):
            size = sum(by_stage[item.stage]) // len(by_stage[item.stage])
        else:
            result.unknown.append(item.address)
            continue
        result.workspace += max(0, size - on_disk(item.outs))
        result.cache += size + RUN_CACHE_ENTRY
    for item in to_commit:
        result.cache += on_disk(item.outs) + RUN_CACHE_ENTRY
    return result


def _reflinks(directory: Path) -> bool:
    """Whether the file system of ``directory`` makes reflinks (copies that share their blocks until written)."""
    try:
        with tempfile.TemporaryDirectory(dir=_existing(directory)) as tmp:
            src, dst = Path(tmp) / "a", Path(tmp) / "b"
            src.write_bytes(b"x")
            with open(src, "rb") as fs, open(dst, "wb") as fd:
                fcntl.ioctl(fd.fileno(), _FICLONE, fs.fileno())
            return True
    except OSError:
        return False


def check_space(root: Path, cache_dir: Path, cache_types: list[str], need: Estimate) -> str:
    """Raise :class:`NotEnoughSpace` (one line) when ``need`` does not fit in the free space of the workspace ``root``
    and the DVC cache ``cache_dir``; else return a line for the log saying what was checked."""
    ws_free, cache_free = free_bytes(root), free_bytes(cache_dir)
    same = os.stat(_existing(root)).st_dev == os.stat(_existing(cache_dir)).st_dev
    linked = bool(cache_types) and cache_types[0] in ("hardlink", "symlink")
    shared = same and (linked or (cache_types[:1] == ["reflink"] and _reflinks(cache_dir)))
    items = f"{need.to_run} item(s) to run" + (f" and {need.to_commit} to commit" if need.to_commit else "")
    unknown = (f"; {len(need.unknown)} item(s) of stages never committed not counted" if need.unknown else "")
    copy = "DVC links the workspace to the cache" if shared else "DVC keeps a second copy in the cache"
    fix = ("free space, or point the DVC cache at a larger disk (`dvc cache dir <path>`), then run again"
           f" (estimated from dvc.lock's output sizes{unknown})")
    if same:
        total = need.workspace + (0 if shared else need.cache)
        if total > ws_free:
            raise NotEnoughSpace(f"not enough free disk space for this sweep: {items} will write about "
                                 f"{size_text(total)} into the workspace {root} and the DVC cache {cache_dir}, one "
                                 f"disk ({copy}), which has {size_text(ws_free)} free; {fix}")
    else:
        if need.workspace > ws_free:
            raise NotEnoughSpace(f"not enough free disk space for this sweep: {items} will write about "
                                 f"{size_text(need.workspace)} into the workspace {root}, which has "
                                 f"{size_text(ws_free)} free; {fix}")
        if need.cache > cache_free:
            raise NotEnoughSpace(f"not enough free disk space for this sweep: {items} will write about "
                                 f"{size_text(need.cache)} into the DVC cache {cache_dir}, which has "
                                 f"{size_text(cache_free)} free; {fix}")
    return (f"disk space: {items} will write about {size_text(need.workspace)} into the workspace "
            f"({size_text(ws_free)} free) and {size_text(need.cache)} into the DVC cache {cache_dir} "
            f"({size_text(cache_free)} free{'; one disk, ' + copy if same else ''}){unknown}")


def free_text(root: Path, cache_dir: Path | None) -> str:
    """``free now: workspace <root> 0 B, DVC cache <dir> 12.0 KiB`` (the file systems a sweep writes to)."""
    parts = [f"workspace {root} {size_text(free_bytes(root))}"]
    if cache_dir is not None:
        parts.append(f"DVC cache {cache_dir} {size_text(free_bytes(cache_dir))}")
    return "free now: " + ", ".join(parts)


def commit_line(err: OSError, root: Path, cache_dir: Path | None, committed: int, total: int) -> str:
    """The one line of a commit that ran out of space (``err``: ENOSPC or EDQUOT)."""
    path = f" writing {err.filename}" if err.filename else ""
    return (f"no space left on device{path} while committing the finished items to the DVC cache ({err.strerror}); "
            f"{free_text(root, cache_dir)}; {committed} of {total} item(s) committed, the others keep their outputs "
            "in the workspace and the next sweep commits them without running them: free space (or `dvc cache dir "
            "<path>` on a larger disk), then run again")


def cache_dir_of(root: Path) -> Path | None:
    """The project's DVC cache directory (None when DVC cannot say: it only names a disk in an error line)."""
    try:
        return cache_settings(root)[0]
    except Exception:  # noqa: BLE001 - a courtesy of an error line
        return None


def check_plan_space(root: Path, plan, records) -> str:
    """:func:`check_space` of a sweep's plan (raises :class:`NotEnoughSpace`): its stale items; those likely to be
    committed without running — outputs missing from the cache only, or a killed sweep's record that matches now
    (:class:`~empriv.infra.sweep.recover.FinishedRecords`) — count for the cache alone. Returns the log's line."""
    commit_only = [i for i in plan.to_run if i.uncached or (i.address in records and records.check(i) is None)]
    to_run = [i for i in plan.to_run if i not in commit_only]
    cache_dir, types = cache_settings(root)
    return check_space(root, cache_dir, types, estimate(to_run, commit_only, lock_out_sizes(root)))
