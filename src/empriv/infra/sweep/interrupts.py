"""SIGINT and SIGTERM during a sweep: noted, then acted on at the sweep's next safe point (:class:`Interrupts`).

Python's default turns SIGINT into a ``KeyboardInterrupt`` wherever the sweep happens to be — in a sleep, in the
middle of DVC's commit of the finished items — and lets SIGTERM end the process on the spot (nothing committed, the
lock file left behind). While a sweep runs, both only set :attr:`Interrupts.signum`; the engine loop looks at it
between its steps, cancels the running jobs, commits every finished item and returns, and ``empriv sweep`` prints one
line and exits 128 + the signal's number (130 for SIGINT, 143 for SIGTERM). A signal that arrives while the
finished items are being committed waits for the commit to end.
"""

from __future__ import annotations

import signal
import threading

HANDLED = (signal.SIGINT, signal.SIGTERM)


class Interrupts:
    """While inside (in the main thread), SIGINT and SIGTERM set :attr:`signum` (the first one received) instead of
    raising or ending the process; the previous handlers come back on exit. Elsewhere (another thread, where Python
    cannot install handlers) nothing changes and :attr:`signum` stays None."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, object] = {}

    def __enter__(self) -> "Interrupts":
        if threading.current_thread() is threading.main_thread():
            for signum in HANDLED:
                self._previous[signum] = signal.signal(signum, self._note)
        return self

    def __exit__(self, *exc) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _note(self, signum: int, _frame) -> None:
        if self.signum is None:
            self.signum = signum

    @property
    def name(self) -> str | None:
        """The signal's name (``SIGINT``), None when none was received."""
        return None if self.signum is None else signal.Signals(self.signum).name
