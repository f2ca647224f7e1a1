"""The one error type of the accountants (kept apart so every privacy module can raise it without cycles)."""

from __future__ import annotations


class AccountingError(RuntimeError):
    """An accountant could not produce a (trustworthy) value for these inputs.

    The message is one line: what could not be done, for which (σ, q, T), and why.
    """


__all__ = ["AccountingError"]
