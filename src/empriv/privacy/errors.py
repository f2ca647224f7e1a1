"""The accountants' error types (kept apart so every privacy module can raise them without cycles)."""

from __future__ import annotations


class AccountingError(RuntimeError):
    """An accountant could not produce a (trustworthy) value for these inputs.

    The message is one line: what could not be done, for which (σ, q, T), and why.
    """


class UnsupportedEventError(ValueError):
    """An accountant was given a DpEvent it does not account (one line: the accountant, the event, what it takes).

    Not an :class:`AccountingError`: it is the caller's mistake, so no fallback accountant is tried."""


__all__ = ["AccountingError", "UnsupportedEventError"]
