"""One sweep per workspace: :func:`workspace_lock`, held by ``empriv sweep`` from before it plans until it exits.

Two sweeps in one workspace plan the same stale items, run them twice at once (each removing the outputs the other
is writing) and then race for DVC's repository lock at the commit. The sweep therefore takes an exclusive
``flock`` on ``<root>/.empriv/sweep.lock`` first, and writes into it who holds it: one JSON line with the pid, the
host, the start time and the command. A second sweep that finds the lock taken stops at once with one line naming
the running one (:class:`SweepBusy`, exit status :data:`EXIT_BUSY`).

The kernel releases a ``flock`` when its holder exits, however it exits (SIGKILL and a lost node included), so a
lock is never held by a process that is gone. The file is emptied on every orderly exit; a file still naming a
holder when the lock is free is what a sweep that was killed left behind: the next sweep takes it over and says so
in one line. The descriptor is not inherited by the jobs' processes (Python opens files non-inheritable).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from empriv.infra.sweep.plan import SweepError

LOCK_NAME = ".empriv/sweep.lock"  # under the project root
EXIT_BUSY = 75  # EX_TEMPFAIL of sysexits.h: a temporary condition, try again later


class SweepBusy(SweepError):
    """Another sweep holds the workspace; the message (one line) names it. ``empriv sweep`` exits :data:`EXIT_BUSY`."""


def _holder_text(holder: dict) -> str:
    started = holder.get("started")
    when = "at an unknown time"
    if isinstance(started, (int, float)):
        ago = max(0, int(time.time() - started))
        span = f"{ago} s" if ago < 120 else f"{ago // 60} min" if ago < 7200 else f"{ago // 3600} h"
        when = f"started {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(started))} ({span} ago)"
    host = holder.get("host")
    where = f" on {host}" if host and host != socket.gethostname() else ""
    command = holder.get("command")
    return f"pid {holder.get('pid', '?')}{where}, {when}" + (f": {command}" if command else "")


def _read_holder(fd: int) -> dict | None:
    """Who the lock file names (None when it is empty or not ours to read)."""
    os.lseek(fd, 0, os.SEEK_SET)
    data = b""
    while chunk := os.read(fd, 4096):
        data += chunk
    try:
        holder = json.loads(data.decode("utf-8")) if data.strip() else None
    except (UnicodeDecodeError, json.JSONDecodeError):
        return {"pid": "?", "command": "(unreadable lock file)"}
    return holder if isinstance(holder, dict) else None


def _write_holder(fd: int, holder: dict | None) -> None:
    os.ftruncate(fd, 0)
    if holder is not None:
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, (json.dumps(holder) + "\n").encode("utf-8"))


@contextlib.contextmanager
def workspace_lock(root: str | Path, echo: Callable[[str], None] = print,
                   command: list[str] | None = None) -> Iterator[Path]:
    """Hold ``<root>/.empriv/sweep.lock`` while inside (yields its path). Raises :class:`SweepBusy` at once when another
    process holds it; takes over, saying so through ``echo``, a lock file left by a sweep that is gone."""
    path = Path(root) / LOCK_NAME
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as err:
        raise SweepError(f"cannot create the sweep's lock file {path}: {err.strerror} (the workspace must be "
                         "writable)") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd) or {}
            raise SweepBusy(f"another sweep is running in this workspace ({_holder_text(holder)}); wait for it to "
                            f"end, or stop it (kill -INT {holder.get('pid', '<pid>')}), then run again "
                            f"(lock {path})") from None
        previous = _read_holder(fd)
        if previous is not None:
            echo(f"sweep: taking over {LOCK_NAME} from a sweep that ended without releasing it "
                 f"({_holder_text(previous)})")
        _write_holder(fd, {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time(),
                           "command": " ".join(command if command is not None else ["empriv", *sys.argv[1:]])})
        try:
            yield path
        finally:
            _write_holder(fd, None)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
