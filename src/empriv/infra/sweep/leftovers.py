"""Stage commands that outlive their job: recorded while they run (:func:`record_command`), stopped by the sweep
(:func:`stop_leftovers`).

A job runs its item's command in a process group of its own (a signal meant for the job must not reach the
command before the job has decided what to do with it) and, on every way out it sees — success, failure,
cancel, requeue — ends that group. Two ways out it does not see: the job process killed by SIGKILL (the local
engine's controller does so one second after its SIGINT; the OOM killer; a user's ``kill -9``), and a second
signal that arrives while it is ending the group. ``PR_SET_PDEATHSIG`` then reaches the shell that runs the
command, not a process the shell forked (dash and zsh fork a single command; bash execs it): the command
keeps running, writing into outputs the next sweep is about to produce again.

So each running command is written down, ``<job folder>/commands/<item>.json``: its pid (the group's id), its
host, its start time in clock ticks since boot (``/proc/<pid>/stat`` field 22, which tells a recycled pid from
the command) and whether it runs under SLURM (whose job step ends its processes itself). The job removes the
record once the group is gone. The local sweep stops what is left of its own jobs' commands when its jobs are
cancelled or done, and at its start stops what a sweep that was killed left behind (it holds the workspace
lock then, so no other sweep of the workspace can own them) — each time in one line naming the items.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import time
from pathlib import Path

COMMANDS_DIR = "commands"  # in a sweep's job folder


def item_record_path(folder: Path | str, kind: str, address: str) -> Path:
    """``<job folder>/<kind>/<item>.json``: where a job writes down something about its item (``commands`` here,
    ``finished`` in recover.py)."""
    return Path(folder) / kind / (re.sub(r"[^A-Za-z0-9._@=-]", "_", address) + ".json")


def write_record(path: Path, record: dict) -> Path | None:
    """``record`` as one JSON line at ``path``, atomically; None where it cannot be written (a record is a safety
    net: the job runs on)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(record) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        return None
    return path


def start_ticks(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks since boot (None: no such process, or not Linux)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] == "Z":  # a zombie has ended: nothing left to stop
        return None
    return int(fields[19])  # field 22 of the whole line; fields[0] is field 3 (the state)


def record_command(folder: Path | str, address: str, pid: int, root: str | Path) -> Path | None:
    """Write down the running command ``pid`` of ``address`` (atomically); None where that cannot be done (the job
    runs on; the record is a safety net)."""
    record = {"address": address, "pid": pid, "host": socket.gethostname(), "root": str(Path(root).resolve()),
              "start_ticks": start_ticks(pid), "slurm": bool(os.environ.get("SLURM_JOB_ID"))}
    return write_record(item_record_path(folder, COMMANDS_DIR, address), record)


def forget_command(path: Path | None) -> None:
    if path is not None:
        try:
            path.unlink()
        except OSError:
            pass


def group_members(pgid: int, since: int | None = None) -> list[int]:
    """The live processes of process group ``pgid`` (the leader may be gone, its children not) that started at
    tick ``since`` or later (a recycled group id belongs to processes that started before the recorded one)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid and (since is None or int(fields[19]) >= since):
            members.append(int(entry.name))
    return members


def _still_running(record: dict) -> bool:
    pid, ticks = record.get("pid"), record.get("start_ticks")
    return isinstance(pid, int) and bool(group_members(pid, ticks))


def _stop_group(pid: int, since: int | None, grace_s: float) -> None:
    """SIGTERM to the process group ``pid``, SIGKILL after ``grace_s`` to what is left of it."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return
    deadline = time.monotonic() + grace_s
    while group_members(pid, since) and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def stop_leftovers(folders: list[Path], root: str | Path, grace_s: float = 5.0,
                   include_slurm: bool = False) -> list[str]:
    """Stop every recorded command of ``folders`` (job folders) of the workspace ``root`` that still runs on this
    host, remove the records, and return ``item (pid N)`` for each command stopped. Commands of SLURM jobs are left
    to SLURM unless ``include_slurm``; records of another workspace (a ``sweep.folder`` shared by two) are left
    alone."""
    root = str(Path(root).resolve())
    stopped = []
    for folder in folders:
        for path in sorted((Path(folder) / COMMANDS_DIR).glob("*.json")):
            try:
                record = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                forget_command(path)
                continue
            if not isinstance(record, dict) or (record.get("slurm") and not include_slurm):
                continue
            if record.get("host") != socket.gethostname() or record.get("root") != root:
                continue  # another machine's or another workspace's: not ours to stop
            if _still_running(record):
                _stop_group(record["pid"], record.get("start_ticks"), grace_s)
                stopped.append(f"{record.get('address', path.stem)} (pid {record['pid']})")
            forget_command(path)
    return stopped


def sweep_folders(root_folder: Path) -> list[Path]:
    """The job folders under the sweeps' folder (``sweep.folder``), oldest first."""
    try:
        return sorted(p for p in Path(root_folder).iterdir() if p.is_dir())
    except OSError:
        return []
