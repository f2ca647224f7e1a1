"""Errors of invalid parameters: :class:`ConfigError` (one self-contained line per problem), a validator's
:class:`ParamError` (what is wrong, the value, what is allowed) and the "did you mean" suggestion."""

from __future__ import annotations

import difflib
from typing import Any

from empriv.checks import NOTHING as _NOTHING, problem_text, short_repr as _short


class ConfigError(ValueError):
    """Invalid parameters or inputs. Each line of the message is one self-contained problem,
    ``<key>: <what is wrong> (got <value>; allowed: …)``; :func:`error_lines` prefixes them with ``error:``."""

    def __init__(self, *messages: Any):
        self.lines = [line for m in messages for line in str(m).splitlines() if line.strip()] or ["invalid parameters"]
        super().__init__("\n".join(self.lines))


def error_lines(err: BaseException) -> str:
    """The one-line-per-problem text a user sees: every line ``error: …`` (a ConfigError's lines, or any other
    exception's message folded onto one line)."""
    if isinstance(err, ConfigError):
        return "\n".join(f"error: {line}" for line in err.lines)
    text = " ".join(str(err).split()) or type(err).__name__
    if isinstance(err, FileNotFoundError) and not text.startswith("missing input"):
        text = f"missing input: {text}"
    return f"error: {text}"


class ParamError(ValueError):
    """A validator's finding: what is wrong, the value, what is allowed; ``key`` (absolute, dotted) when the
    problem belongs to another field than the one validated, ``index`` for an item of a list field."""

    def __init__(self, what: str, got: Any = _NOTHING, allowed: str | None = None, *, key: str | None = None,
                 index: int | None = None):
        self.what, self.got, self.allowed, self.key, self.index = what, got, allowed, key, index
        super().__init__(self.text())

    def text(self) -> str:
        return problem_text(self.what, self.got, self.allowed)


def _did_you_mean(word: str, known) -> str:
    close = difflib.get_close_matches(str(word), [str(k) for k in known], n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""
