"""How often a secret occurs in the training split, and whether ACR reports it as *rare*.

Record-level DP bounds what one training record can leak, not what a string repeated in hundreds of records
leaks: a secret in 8 % of the records is memorised under DP where one in a single record is protected. So ACR is
reported by frequency: a searched secret whose frequency is ≤ ``score.acr.rare_frequency`` is rare
(:func:`is_rare_secret`), the others frequent. A secret's frequency is its record's ``frequency`` (occurrences / n,
written by the secrets stage into every secret and copied into each per-secret score row), else
``occurrences`` / ``n_train`` when only the count and the training-split size are known; a secret with neither has
no frequency and counts as **frequent** (the pooled keys, as before frequencies were reported).

No torch here: the analysis reads it too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from empriv.config import ACRParams

#: ``score.acr.rare_frequency``'s default (defined once, in the config): the split of the library functions' defaults
DEFAULT_RARE_FREQUENCY: float = ACRParams.model_fields["rare_frequency"].default


def secret_frequency(row: Mapping, n_train: int | None = None) -> float | None:
    """The fraction of the training records that contain the secret of ``row`` (a secret record or a per-secret
    score row): its ``frequency``, else ``occurrences`` / ``n_train`` when both are known, else None."""
    f = row.get("frequency")
    if f is not None:
        return float(f)
    occurrences = row.get("occurrences")
    if occurrences is not None and n_train:
        return float(occurrences) / float(n_train)
    return None


def check_rare_frequency(rare_frequency: float) -> float:
    """``rare_frequency`` as a float, or ``ValueError`` naming it when it is not in [0, 1)."""
    if isinstance(rare_frequency, bool) or not isinstance(rare_frequency, (int, float)) \
            or math.isnan(rare_frequency) or not 0.0 <= rare_frequency < 1.0:
        raise ValueError(f"rare_frequency must be a number in [0, 1), got {rare_frequency!r}")
    return float(rare_frequency)


def is_rare_secret(row: Mapping, rare_frequency: float, n_train: int | None = None) -> bool:
    """True when the secret's frequency (:func:`secret_frequency`) is known and ≤ ``rare_frequency`` (30 / 3000 is
    rare at 0.01: both are the float nearest 1/100); a secret of unknown frequency is frequent (False)."""
    f = secret_frequency(row, n_train)
    return f is not None and f <= check_rare_frequency(rare_frequency)
