"""Which secret candidates are kept: degenerate-string rejection and the model-based filters.

- :func:`degenerate_reason` / :func:`reject_degenerate` run on mined candidates at the ``secrets`` stage
  (:func:`empriv.secrets.build.mined_secrets`), before any model exists.
- :func:`filter_candidates` is appendix B.6's model-based filtering, in the research's order; the
  ``filter`` stage calls it through :func:`empriv.secrets.filtering.filter_secrets` with the cube's
  non-private models and the base model.

Candidates are mined by :mod:`empriv.secrets.mining`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TypeVar

T_Candidate = TypeVar("T_Candidate")

# Degenerate mined secrets (boilerplate rules, blank runs, punctuation bars) measure nothing about
# memorising private data, and each would also drop every held-out sample containing it. A mined
# secret is rejected, with the first reason that applies, when:
#   - ``whitespace_only``: it has no visible character;
#   - ``punctuation_run``: fewer than MIN_LETTER_SHARE of its visible characters are letters
#     ("-----", ".\n*****", "= = = =");
#   - ``few_letters``: it has fewer than MIN_SECRET_LETTERS letters in all;
#   - ``continuation_without_letters``: its continuation s₂ (what is measured) has no letter or digit.
MIN_SECRET_LETTERS = 8
MIN_LETTER_SHARE = 0.25
DEGENERATE_REASONS = ("whitespace_only", "punctuation_run", "few_letters", "continuation_without_letters")


def degenerate_reason(text: str, continuation: str | None = None) -> str | None:
    """Why the secret ``text`` (split off ``continuation``) is degenerate, or None (see above)."""
    visible = [c for c in text if not c.isspace()]
    if not visible:
        return "whitespace_only"
    letters = sum(c.isalpha() for c in visible)
    if letters < MIN_LETTER_SHARE * len(visible):
        return "punctuation_run"
    if letters < MIN_SECRET_LETTERS:
        return "few_letters"
    if continuation is not None and not any(c.isalnum() for c in continuation):
        return "continuation_without_letters"
    return None


def reject_degenerate(records: Sequence[dict]) -> tuple[list[dict], dict[str, int]]:
    """(records that are not degenerate, count of rejected ones by reason — every reason listed)."""
    kept: list[dict] = []
    rejected = {reason: 0 for reason in DEGENERATE_REASONS}
    for r in records:
        reason = degenerate_reason(r["text"], r.get("continuation"))
        if reason is None:
            kept.append(r)
        else:
            rejected[reason] += 1
    return kept, rejected


def filter_candidates(
    candidates: Sequence[T_Candidate],
    reproduces_verbatim_finetuned: Callable[[T_Candidate], bool],
    reproduces_verbatim_base: Callable[[T_Candidate], bool],
    acr_finetuned: Callable[[T_Candidate], float] | None = None,
    acr_base: Callable[[T_Candidate], float] | None = None,
    thresholds: tuple[float, float] = (1.5, 0.5),
) -> tuple[list[T_Candidate], dict]:
    """Appendix B.6 secret filtering, in the research's order; returns (kept, record of filters).

    1. ``finetuned_verbatim``: keep what the non-privately fine-tuned model reproduces verbatim;
    2. ``finetuned_acr``: keep ACR ≥ thresholds[0] (only when ``acr_finetuned`` is given);
    3. ``base_verbatim``: drop what the pre-trained base model reproduces verbatim;
    4. ``base_acr``: keep ACR ≤ thresholds[1] (only when ``acr_base`` is given).

    The record lists every filter with ``ran`` and the number ``removed``, plus ``n_in``/``n_out``.
    """
    if len(thresholds) != 2 or not all(isinstance(t, (int, float)) and math.isfinite(t) for t in thresholds):
        raise ValueError(f"thresholds must be two finite numbers (finetuned ACR min, base ACR max), got {thresholds!r}")
    for name, fn in (("reproduces_verbatim_finetuned", reproduces_verbatim_finetuned),
                     ("reproduces_verbatim_base", reproduces_verbatim_base)):
        if not callable(fn):
            raise ValueError(f"{name} must be callable, got {type(fn).__name__}")
    acr_min, acr_max = float(thresholds[0]), float(thresholds[1])
    steps = [
        ("finetuned_verbatim", True, lambda c: bool(reproduces_verbatim_finetuned(c))),
        ("finetuned_acr", acr_finetuned is not None, lambda c: acr_finetuned(c) >= acr_min),
        ("base_verbatim", True, lambda c: not reproduces_verbatim_base(c)),
        ("base_acr", acr_base is not None, lambda c: acr_base(c) <= acr_max),
    ]
    kept = list(candidates)
    record: dict = {"n_in": len(kept), "filters": []}
    for name, ran, keep in steps:
        entry = {"name": name, "ran": ran, "removed": 0}
        if name.endswith("_acr"):
            entry["threshold"] = acr_min if name == "finetuned_acr" else acr_max
        if ran:
            before = len(kept)
            kept = [c for c in kept if keep(c)]
            entry["removed"] = before - len(kept)
        record["filters"].append(entry)
    record["n_out"] = len(kept)
    return kept, record
