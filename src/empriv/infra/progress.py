"""Progress of long loops, visible on a terminal and in plain logs (DVC, CI, nohup).

:func:`progress` wraps an iterable (or is advanced by hand with ``update``). Where the output is a
terminal it draws a tqdm bar; anywhere else it writes a log line through the ``empriv`` loggers every
time another tenth of the total is done or 30 s have passed since the last line, whichever comes
first, and one line at the end. Without a known total only the time rule applies.

A line reads ``pre-train base: 120/600 steps (20%), 31.0 s elapsed, ~124.0 s left``; it carries
counts and times only, never the items iterated over (records, secrets, canaries).
"""

from __future__ import annotations

import logging
import math
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

log = logging.getLogger("empriv.progress")

#: log a line each time this fraction of the total is done ...
EVERY_FRACTION = 0.1
#: ... or when this many seconds have passed since the last line, whichever comes first
EVERY_SECONDS = 30.0


def on_terminal(stream=None) -> bool:
    """Whether progress goes to a terminal (tqdm bars) or to logs (lines): ``stream`` (default stderr) is a TTY."""
    stream = sys.stderr if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # closed or replaced streams
        return False


class LogProgress:
    """Progress as log lines (see the module docstring); ``clock`` is injectable for tests."""

    def __init__(self, iterable: Iterable | None = None, *, total: int | None = None, desc: str = "",
                 unit: str = "steps", logger: logging.Logger | None = None,
                 every_fraction: float = EVERY_FRACTION, every_seconds: float = EVERY_SECONDS,
                 clock: Callable[[], float] = time.monotonic):
        if total is None and iterable is not None and hasattr(iterable, "__len__"):
            total = len(iterable)
        if total is not None and total < 0:
            raise ValueError(f"progress total must be >= 0, got {total}")
        if not 0 < every_fraction <= 1:
            raise ValueError(f"progress every_fraction must be in (0, 1], got {every_fraction}")
        if not every_seconds > 0:
            raise ValueError(f"progress every_seconds must be > 0, got {every_seconds}")
        self.iterable = iterable
        self.total = total
        self.desc = desc
        self.unit = unit
        self.logger = logger or log
        self.every_fraction = every_fraction
        self.every_seconds = every_seconds
        self.clock = clock
        self.n = 0
        self.lines = 0
        self.closed = False
        self._start = clock()
        self._last_line = self._start
        self._next_fraction = every_fraction

    # --- the bar-like interface (shared with tqdm) --------------------------------------------------
    def __iter__(self) -> Iterator:
        if self.iterable is None:
            raise TypeError("this progress has no iterable: advance it with update(n)")
        try:
            for item in self.iterable:
                yield item
                self.update(1)
        finally:
            self.close()

    def __enter__(self) -> "LogProgress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def update(self, n: int = 1) -> None:
        self.n += n
        now = self.clock()
        if self.total:
            done = self.n / self.total
            if done >= 1:
                return  # the final line is written by close()
            if done + 1e-12 >= self._next_fraction:
                self._line(now)
                return
        if now - self._last_line >= self.every_seconds:
            self._line(now)

    def set_postfix(self, *args, **kwargs) -> None:  # tqdm compatibility: postfixes are not logged
        pass

    set_postfix_str = set_postfix

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._line(self.clock(), final=True)

    # --- the lines ------------------------------------------------------------------------------------
    def _line(self, now: float, final: bool = False) -> None:
        elapsed = now - self._start
        self._last_line = now
        self.lines += 1
        unit = self.unit
        if self.total:
            done = self.n / self.total
            # the next tenth strictly above what is done now (several tenths crossed at once: one line)
            self._next_fraction = (math.floor(done / self.every_fraction + 1e-9) + 1) * self.every_fraction
            text = f"{self.desc}: {self.n}/{self.total} {unit} ({100 * done:.0f}%), {elapsed:.1f} s elapsed"
            if final:
                text += " (done)" if self.n >= self.total else " (stopped)"
            elif self.n:
                text += f", ~{elapsed * (self.total - self.n) / self.n:.1f} s left"
        else:
            text = f"{self.desc}: {self.n} {unit}, {elapsed:.1f} s elapsed" + (" (done)" if final else "")
        self.logger.info(text)


def progress(iterable: Iterable | None = None, *, total: int | None = None, desc: str = "", unit: str = "steps",
             logger: logging.Logger | None = None, tty: bool | None = None, leave: bool = True,
             clock: Callable[[], float] = time.monotonic) -> Any:
    """A tqdm bar on a terminal (``tty`` None: stderr is one), else a :class:`LogProgress`.

    Both iterate over ``iterable`` (or are advanced with ``update(n)``), work as context managers and
    are closed at the end of the iteration. ``logger`` (default ``empriv.progress``) receives the log
    lines; ``clock`` (seconds) drives their 30 s rule.
    """
    if tty is None:
        tty = on_terminal()
    if tty:
        from tqdm import tqdm

        return tqdm(iterable, total=total, desc=desc, unit=unit, leave=leave, dynamic_ncols=True, mininterval=1.0)
    return LogProgress(iterable, total=total, desc=desc, unit=unit, logger=logger, clock=clock)


__all__ = ["EVERY_FRACTION", "EVERY_SECONDS", "LogProgress", "on_terminal", "progress"]
