"""Which failures a retry cannot fix: :func:`deterministic_cause`.

The sweep re-submits a failed job up to ``sweep.max_retries`` times because most failures of a long job on a cluster
are accidents of the moment: a kill (the OOM killer, a node lost), a preemption, a time limit. Some failures are
the same on every attempt, and retrying them only costs time (a cold model stage: minutes) and hides the cause
among the retry lines:

- **a user error of the stage**: the stage scripts end an invalid params value, a missing or unwritable input, a
  library's ``ValueError`` naming a bad value with one ``error: …`` line and **exit status 2**
  (:func:`empriv.stage.run_stage`); Python's own usage errors and argparse's exit 2 too;
- **a configuration error** that escaped that net (a ``ConfigError`` or ``ValueError`` traceback);
- **a full disk** (``ENOSPC``, ``EDQUOT``) or **a file system that refuses the write** (``EACCES``/``PermissionError``,
  ``EROFS``): the next attempt writes the same files to the same place;
- **W&B without its prerequisites** (online mode without an API key): nothing on the next attempt provides one;
- **the job itself could not start the command** (its working directory or shell missing).

A command killed by a signal is never deterministic here (a kill or an out-of-memory kill may not repeat), nor is
any other exit status: those stay retried. The cause is read from what the sweep has of a failed job: the one-line
reason of its exception (``RuntimeError: train@x: command failed (exit status 2) on attempt 1``) and the last lines
its command wrote to stderr (the job's ``.err`` log, :func:`~empriv.infra.sweep.output.log_tail`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

#: exit status of a stage that refused its input (run_stage's user error; Python's and argparse's usage errors)
USER_ERROR_STATUS = 2

_EXIT = re.compile(r"command failed \(exit status (\d+)\)")

# (what the sweep says, a pattern of the line the command died of), first match wins
_CAUSES: tuple[tuple[str, re.Pattern], ...] = (
    ("no space left on device", re.compile(r"No space left on device|\[Errno 28\]|Disk quota exceeded|\[Errno 122\]")),
    ("read-only file system", re.compile(r"Read-only file system|\[Errno 30\]")),
    ("permission denied", re.compile(r"PermissionError|Permission denied|\[Errno 13\]|\[Errno 1\] Operation not "
                                     r"permitted")),
    ("W&B prerequisites missing", re.compile(r"api_key not configured|wandb\.errors\.[\w.]*(Usage|Authentication)"
                                            r"Error|WANDB_API_KEY")),
    ("a configuration error", re.compile(r"^([\w]+\.)*(ConfigError|ParamError|ValidationError)\b")),
    ("an invalid value", re.compile(r"^ValueError\b")),
)

# the last line of a Python traceback: the exception the command died of
_EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w]*\.)*[A-Za-z_]\w*(Error|Exception)\b")

# the job's own exception (not the command's exit): it could not start the command at all
_JOB_CANNOT_START = re.compile(r"^(FileNotFoundError|NotADirectoryError|PermissionError)\b")


def exit_status_of(reason: str) -> int | None:
    """The command's exit status in a job's failure reason (:class:`~empriv.infra.sweep.jobs.StageJob`'s message),
    None when it was killed by a signal or the job failed otherwise."""
    found = _EXIT.search(reason)
    return int(found.group(1)) if found else None


def _kind(line: str) -> str | None:
    return next((what for what, pattern in _CAUSES if pattern.search(line)), None)


def deterministic_cause(reason: str, stderr_tail: Sequence[str]) -> str | None:
    """Why a failed job would fail the same way again (what the sweep prints: the kind of failure and the line that
    shows it), or None when it may not (retry it). ``reason``: the one-line reason of the job's exception;
    ``stderr_tail``: the last lines its command wrote to stderr. Only the line the command died of counts (the
    first ``error: …`` line of an exit status 2, else the last exception line of a traceback): a warning that mentions a
    full disk earlier in the log does not make a later crash deterministic."""
    if "killed by SIG" in reason or "no result" in reason:
        return None  # a kill, a lost job process: accidents a retry may not meet again
    status = exit_status_of(reason)
    if status is None:
        return f"the job could not start its command: {reason}" if _JOB_CANNOT_START.match(reason) else None
    lines = [ln.strip() for ln in stderr_tail if ln.strip()]
    if status == USER_ERROR_STATUS:
        said = [ln for ln in lines if ln.startswith("error: ")]
        if not said:
            return "exit status 2 (a stage's user error: invalid params or inputs)"
        more = f" (and {len(said) - 1} more error line(s) in its log)" if len(said) > 1 else ""
        return f"{_kind(said[0]) or 'the stage refused its input'}: {said[0]}{more}"
    died_of = next((ln for ln in reversed(lines) if _EXCEPTION_LINE.match(ln)), None)
    kind = _kind(died_of) if died_of else None
    return f"{kind}: {died_of}" if kind else None
