"""What ``empriv sweep`` shows while its jobs run, and its log file.

The user sees the sweep's time, not its bookkeeping:

- **on a terminal** (stderr is a TTY): one tqdm bar over the sweep's items to run, with the elapsed time and an
  ETA (:func:`eta_seconds`), the jobs in flight and the failures so far;
- **anywhere else** (``make repro`` under nohup, CI): one line each time another tenth of the items is finished or
  30 s have passed since the last line, whichever comes first (the rule of :mod:`empriv.infra.progress`), and one at the
  end: ``progress: 12/48 items (25%), 2 running, 1 min 40 s elapsed, ~5 min left``.

Every line the sweep writes goes to its **log file**, ``<job folder>/sweep.log`` (the first line printed names it),
each with the time of day; the per-job events — ``submitted … job … logs …``, ``done …``, ``restored …``,
``up to date at its turn …``, ``blocked …``, ``requeued …`` and the count line ``progress: 3 submitted, 2 running,
…`` — go *only* there. A job that fails for good is printed in full: the item, the reason with its exit status,
the path of its log and the last lines its command wrote to stderr. What the sweep did is a :class:`SweepResult`,
told in one line by :func:`summary_line`.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from empriv.infra.progress import EVERY_FRACTION, EVERY_SECONDS, on_terminal
from empriv.infra.sweep.plan import Plan

#: lines of a failed command's stderr printed with its failure
TAIL_LINES = 15
#: the terminal bar is redrawn at most this often (seconds) while nothing finishes (elapsed time, ETA)
BAR_REFRESH_S = 1.0


def eta_seconds(durations: Mapping[str, Sequence[float]], waiting: Mapping[str, int],
                running: Sequence[tuple[str, float]], slots: int) -> float | None:
    """Seconds until the sweep's remaining jobs are done, from the job times measured so far.

    ``durations``: per stage kind (``train``, ``score``, ``analyze`` …), the seconds each of its finished jobs held
    a slot (submission to completion); ``waiting``: per stage kind, the items not started yet (blocked ones left
    out); ``running``: (stage kind, seconds since submission) of each job in flight; ``slots``: jobs at once.

    The estimator: a stage kind's expected job time m_k is the mean of its finished jobs, or — a kind none of whose
    jobs has finished yet (a single stage, say) — the mean of every finished job. The work left is

        W = Σ_k waiting_k · m_k + Σ_running max(0, m_k − elapsed)

    and the ETA is max(W / slots, the longest single job left): a job holds one slot, so the last long one is not
    shared. It assumes the slots stay full (a chain of items that must run one after another is not modelled) and
    that a job still running takes its kind's mean. None until some job has finished (nothing measured yet); 0 when
    nothing is left.
    """
    if slots < 1:
        raise ValueError(f"slots must be >= 1, got {slots}")
    if not any(waiting.values()) and not running:
        return 0.0
    every = [d for ds in durations.values() for d in ds]
    if not every:
        return None
    overall = sum(every) / len(every)

    def mean(kind: str) -> float:
        ds = durations.get(kind)
        return sum(ds) / len(ds) if ds else overall

    left = [mean(kind) for kind, n in waiting.items() for _ in range(n)]
    left += [max(0.0, mean(kind) - elapsed) for kind, elapsed in running]
    return max(sum(left) / slots, max(left, default=0.0))


def duration_text(seconds: float) -> str:
    """``42 s``, ``4 min 10 s``, ``1 h 05 min``."""
    s = int(round(max(0.0, seconds)))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {(s % 3600) // 60:02d} min"


def log_tail(path: str | Path, lines: int = TAIL_LINES) -> list[str]:
    """The last ``lines`` lines a job's command wrote to stderr (the job's ``.err`` log), without submitit's own
    traceback of the sweep job that follows them (it repeats the failure's reason); [] when there are none."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    kept = []
    for line in text.splitlines():
        if line.startswith("submitit ERROR") and "triggered an exception" in line:
            break  # the job's traceback: everything after it is submitit's, not the command's
        if line.startswith(("submitit INFO", "submitit WARNING")):
            continue
        kept.append(line.rstrip())
    while kept and not kept[-1].strip():
        kept.pop()
    return kept[-lines:]


class SweepOutput:
    """The sweep's two channels: ``say`` (printed through ``echo`` and logged) and ``note`` (logged only), and its
    progress (a tqdm bar on a terminal, else lines through ``echo``; ``tty`` None: stderr is a terminal).
    ``clock`` (seconds) drives the elapsed time of the lines and their 30 s rule; the log's times of day are the
    wall clock's, and the bar keeps its own elapsed time."""

    def __init__(self, echo: Callable[[str], None], *, tty: bool | None = None,
                 clock: Callable[[], float] = time.monotonic, every_fraction: float = EVERY_FRACTION,
                 every_seconds: float = EVERY_SECONDS):
        self.echo = echo
        self.tty = on_terminal() if tty is None else tty
        self.clock = clock
        self.every_fraction, self.every_seconds = every_fraction, every_seconds
        self.log_path: Path | None = None
        self._log = None
        self._bar = None
        self.total = 0
        self.lines = 0  # progress lines written (off a terminal)
        self._start = self._last_line = self._last_draw = 0.0
        self._next_fraction = every_fraction
        self._shown: tuple | None = None
        self._state: tuple[int, int, int, float | None] = (0, 0, 0, None)

    # --- the log file ---------------------------------------------------------------------------------------
    def open_log(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.log_path = path
        self._log = open(path, "a", encoding="utf-8")

    def note(self, line: str) -> None:
        """Into the log file only (nothing before the log is opened: a dry run has none)."""
        if self._log is not None:
            stamp = time.strftime("%H:%M:%S")
            for part in str(line).splitlines() or [""]:
                self._log.write(f"{stamp} {part}\n")
            self._log.flush()

    def say(self, line: str) -> None:
        """Printed (above the bar, which is redrawn below it) and logged."""
        self.note(line)
        if self._bar is not None:
            from tqdm import tqdm

            with tqdm.external_write_mode(file=sys.stdout):
                self.echo(line)
        else:
            self.echo(line)

    # --- progress -------------------------------------------------------------------------------------------
    def start(self, total: int) -> None:
        """Progress over ``total`` items to run."""
        self.total = total
        self._start = self._last_line = self._last_draw = self.clock()
        self._next_fraction = self.every_fraction
        if self.tty:
            from tqdm import tqdm

            self._bar = tqdm(total=total, desc="sweep", unit="item", dynamic_ncols=True, file=sys.stderr,
                             bar_format="{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} items "
                                        "[{elapsed}{postfix}]")

    def update(self, finished: int, running: int, failed: int, eta: float | None) -> None:
        """The state now: items finished (done, restored, unchanged, failed or blocked), jobs in flight, items
        failed for good, the ETA in seconds (None: unknown yet). Cheap to call at every poll."""
        self._state = (finished, running, failed, eta)
        now = self.clock()
        if self._bar is not None:
            if (finished, running, failed) != self._shown or now - self._last_draw >= BAR_REFRESH_S:
                self._shown, self._last_draw = (finished, running, failed), now
                self._bar.n = finished
                self._bar.set_postfix_str(self._postfix(running, failed, eta), refresh=False)
                self._bar.refresh()
            return
        if self.total and finished >= self.total:
            return  # the final line is written by close()
        if (self.total and finished / self.total + 1e-12 >= self._next_fraction) or \
                now - self._last_line >= self.every_seconds:
            self._line(now)

    def close(self) -> None:
        """The final line (off a terminal) or the bar's last state."""
        if self._bar is not None:
            finished, running, failed, eta = self._state
            self._bar.n = finished
            self._bar.set_postfix_str(self._postfix(running, failed, eta), refresh=False)
            self._bar.close()
            self._bar = None
            self.note(self._text(self.clock(), final=True))
        elif self.total:
            self._line(self.clock(), final=True)
        self.total = 0

    def close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def _postfix(self, running: int, failed: int, eta: float | None) -> str:
        finished = self._state[0] >= self.total
        parts = [] if finished else [f"ETA ~{duration_text(eta)}" if eta is not None else "ETA after the first job",
                                     f"{running} running"]
        if failed:
            parts.append(f"{failed} failed")
        return ", ".join(parts)

    def _text(self, now: float, final: bool = False) -> str:
        finished, running, failed, eta = self._state
        text = f"progress: {finished}/{self.total} items ({100 * finished / max(1, self.total):.0f}%)"
        if running and not final:
            text += f", {running} running"
        if failed:
            text += f", {failed} failed"
        text += f", {duration_text(now - self._start)} elapsed"
        if final:
            text += " (stopped)" if finished < self.total else " (ended with failures)" if failed else " (done)"
        else:
            text += f", ~{duration_text(eta)} left" if eta is not None else ", ETA after the first job"
        return text

    def _line(self, now: float, final: bool = False) -> None:
        finished = self._state[0]
        self._last_line = now
        if self.total:  # the next tenth strictly above what is finished now (several crossed at once: one line)
            done = finished / self.total
            self._next_fraction = (math.floor(done / self.every_fraction + 1e-9) + 1) * self.every_fraction
        self.lines += 1
        self.say(self._text(now, final))


__all__ = ["SweepOutput", "TAIL_LINES", "duration_text", "eta_seconds", "log_tail"]


# --------------------------------------------------------------------------------------------- what happened
@dataclass
class SweepResult:
    plan: Plan
    done: list[str] = field(default_factory=list)
    restored: list[str] = field(default_factory=list)  # checked out from DVC's run-cache, no job
    # stale at planning only through a stage they need, which then re-ran with the same outputs: nothing to do
    unchanged: list[str] = field(default_factory=list)
    # finished by a sweep that was killed, outputs and deps as its job left them (recover.py): committed, not run
    recovered: list[str] = field(default_factory=list)
    # outputs missing from the DVC cache but intact in the workspace: committed, not run
    uncached: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # address -> reason with log path
    blocked: list[str] = field(default_factory=list)  # not run: an item they need failed
    retries: dict[str, int] = field(default_factory=dict)  # address -> re-runs (requeues + re-submissions)
    jobs: dict[str, list[str]] = field(default_factory=dict)  # address -> job ids
    status: dict = field(default_factory=dict)  # Repo.status of the committed items after the commit
    folder: Path | None = None
    log: Path | None = None  # the sweep's log file (every line, the per-job events only there)
    interrupted: str | None = None  # the signal that stopped the sweep (SIGINT, SIGTERM), None when it ran to its end
    cancelled: list[str] = field(default_factory=list)  # items whose running jobs the interrupt cancelled
    not_started: list[str] = field(default_factory=list)  # items still waiting when it came
    moved: list[str] = field(default_factory=list)  # outputs of removed runs moved to .empriv/removed/ (removed.py)

    @property
    def ok(self) -> bool:
        return not self.failed and not self.blocked and not self.status and not self.interrupted


def interrupted_line(result: SweepResult) -> str:
    """The one line of an interrupted sweep: what was committed, what was cancelled, how to resume."""
    committed = len(result.done) + len(result.restored) + len(result.recovered) + len(result.uncached)
    waiting = f", {len(result.not_started)} not started" if result.not_started else ""
    return (f"sweep: interrupted by {result.interrupted}: committed {committed} finished item(s), cancelled "
            f"{len(result.cancelled)} running job(s){waiting}; run `make repro` again to resume")


def summary_line(result: SweepResult) -> str:
    if result.interrupted:
        return interrupted_line(result)
    parts = [f"{len(result.done)} done"]
    retried = sum(1 for a in result.done if result.retries.get(a))
    if retried:
        parts[-1] += f" ({retried} after retries)"
    if result.restored:
        parts.append(f"{len(result.restored)} restored from the run-cache")
    if result.recovered:
        parts.append(f"{len(result.recovered)} recovered from a killed sweep")
    if result.uncached:
        parts.append(f"{len(result.uncached)} committed to the cache as they were")
    parts += [f"{len(result.failed)} failed", f"{len(result.blocked)} blocked",
              f"{len(result.plan.up_to_date) + len(result.unchanged)} up to date (skipped)"]
    return "sweep: " + ", ".join(parts)
