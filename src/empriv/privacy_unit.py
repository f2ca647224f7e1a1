"""The privacy unit of a run: what one "individual" of the DP guarantee is, and how training bounds it.

A cube axis (``cube.unit``) lists unit specs, one string each:

- ``record`` — record-level DP: neighbouring data sets differ by one record (every run before user-level DP).
- ``group-k<K>-<strategy>`` — user-level DP by **Group Privacy** (Algorithm 1 of "Mind the Privacy Unit!"):
  each unit contributes exactly K records chosen by ``strategy`` (a unit with fewer is resampled with
  replacement, unless ``privacy.user_resample`` is off), then record-level DP-SGD on that bounded set with σ
  from group-privacy accounting (``privacy.group_accounting``: the tight mixture-of-Gaussians PLD, or the
  naive conversion).
- ``userwise-k<K>-<strategy>`` — user-level DP by **User-wise DP-SGD** (Algorithm 2): units are
  Poisson-sampled, each sampled unit's gradient is that of its mean loss over K records (or K chunks), clipped
  once, noised as one contribution; σ from ordinary accounting over units.

Strategies (short names, as they appear in run names): ``random``, ``longest``, ``shortest``, ``highppl``,
``lowppl`` (highest / lowest perplexity under the initial base model), and for User-wise only ``chunk`` (the
unit's records concatenated, K random windows of the model's training length drawn per step). Under
User-wise DP-SGD, ``random`` and ``chunk`` draw anew at every step; the others use each unit's fixed top-K.

Pure Python: imported by the params validation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

RECORD = "record"
METHODS = ("group", "userwise")
#: short strategy name → the name empriv.data.selection uses
SELECTION_NAMES = {"random": "random", "longest": "longest", "shortest": "shortest",
                   "highppl": "highest_perplexity", "lowppl": "lowest_perplexity"}
GROUP_STRATEGIES = tuple(SELECTION_NAMES)
USERWISE_STRATEGIES = (*GROUP_STRATEGIES, "chunk")
PERPLEXITY_STRATEGIES = ("highppl", "lowppl")
MAX_K = 10_000
ALLOWED = ("'record', 'group-k<K>-<strategy>' (strategy: " + " | ".join(GROUP_STRATEGIES)
           + ") or 'userwise-k<K>-<strategy>' (also: chunk), K an integer in [1, 10000]")

_SPEC = re.compile(r"^(?P<method>[a-z]+)-k(?P<k>[0-9]+)-(?P<strategy>[a-z]+)$")


@dataclass(frozen=True)
class PrivacyUnit:
    """A parsed unit spec (see the module docstring). ``method``/``k``/``strategy`` are None for ``record``."""

    spec: str
    method: str | None = None
    k: int | None = None
    strategy: str | None = None

    @property
    def level(self) -> str:
        """``record`` or ``user``."""
        return RECORD if self.method is None else "user"

    @property
    def user_level(self) -> bool:
        return self.method is not None

    @property
    def suffix(self) -> str:
        """What a run name gains: nothing for record-level runs (their names predate the axis), ``-<spec>`` else."""
        return "" if self.method is None else f"-{self.spec}"

    @property
    def selection_strategy(self) -> str | None:
        """The strategy's name in :mod:`empriv.data.selection` (``random_chunk`` for ``chunk``)."""
        if self.strategy is None:
            return None
        return "random_chunk" if self.strategy == "chunk" else SELECTION_NAMES[self.strategy]

    @property
    def needs_perplexity(self) -> bool:
        return self.strategy in PERPLEXITY_STRATEGIES

    @property
    def redrawn_each_step(self) -> bool:
        """User-wise ``random``/``chunk`` draw a unit's K records (windows) anew at every step."""
        return self.method == "userwise" and self.strategy in ("random", "chunk")

    def as_dict(self) -> dict:
        return {"unit": self.spec, "unit_level": self.level, "unit_method": self.method, "unit_k": self.k,
                "unit_strategy": self.strategy}


def parse_unit(value) -> PrivacyUnit:
    """Parse a unit spec; a bad one raises ``ValueError`` with one line saying what is allowed."""
    if not isinstance(value, str):
        raise ValueError(f"not a unit spec (got {value!r}; allowed: {ALLOWED})")
    text = value.strip()
    if text == RECORD:
        return PrivacyUnit(RECORD)
    m = _SPEC.match(text)
    if not m:
        raise ValueError(f"not a unit spec (got {value!r}; allowed: {ALLOWED})")
    method, k, strategy = m.group("method"), int(m.group("k")), m.group("strategy")
    if method not in METHODS:
        raise ValueError(f"unknown user-level method {method!r} in {value!r} (allowed: group | userwise)")
    if not 1 <= k <= MAX_K or m.group("k") != str(k):
        raise ValueError(f"k must be an integer in [1, {MAX_K}] written without leading zeros (got {m.group('k')!r} "
                         f"in {value!r})")
    allowed = GROUP_STRATEGIES if method == "group" else USERWISE_STRATEGIES
    if strategy not in allowed:
        extra = " (chunk is for userwise only)" if strategy == "chunk" else ""
        raise ValueError(f"unknown selection strategy {strategy!r} for {method} in {value!r}{extra} "
                         f"(allowed: {' | '.join(allowed)})")
    return PrivacyUnit(text, method, k, strategy)


__all__ = ["ALLOWED", "GROUP_STRATEGIES", "METHODS", "PrivacyUnit", "RECORD", "USERWISE_STRATEGIES", "parse_unit"]
