"""Forward accounting: ε(δ) and δ(ε) for a given noise multiplier σ, with the accountants' fallbacks."""

from __future__ import annotations

import logging
import math
from typing import Callable, TypeVar

from empriv.privacy.accountants import ACCOUNTANTS, Accountant
from empriv.privacy.checks import (
    _as_real,
    _check_accountant,
    _check_delta,
    _check_sample_rate,
    _check_sigma,
    _check_steps,
)
from empriv.privacy.errors import AccountingError

logger = logging.getLogger("empriv.privacy")

T = TypeVar("T")


def with_fallback(name: str, call: Callable[[Accountant], T]) -> tuple[T, str, str | None]:
    """``call(accountant)``; if it raises AccountingError, the accountant's fallback (logged as a warning).

    Returns (value, name of the accountant that answered, reason of the fallback or None).
    """
    acc = ACCOUNTANTS[name]
    try:
        return call(acc), name, None
    except AccountingError as exc:
        if acc.fallback is None:
            raise
        reason = f"{name} failed: {exc}"
        logger.warning("%s; falling back to the %s accountant", reason, acc.fallback)
        value, used, _ = with_fallback(acc.fallback, call)
        return value, used, reason


def epsilon_for(noise_multiplier, sample_rate, steps, delta, accountant="prv") -> float:
    """ε upper bound of T-fold Poisson-subsampled Gaussian with noise multiplier σ at δ."""
    sigma = _check_sigma(noise_multiplier)
    q = _check_sample_rate(sample_rate)
    t = _check_steps(steps)
    d = _check_delta(delta)
    _check_accountant(accountant)
    value, _, _ = with_fallback(accountant, lambda a: a.epsilon(sigma, q, t, d))
    return value


def delta_for(noise_multiplier, sample_rate, steps, epsilon, accountant="prv") -> float:
    """δ upper bound at ε of T-fold Poisson-subsampled Gaussian with noise multiplier σ."""
    sigma = _check_sigma(noise_multiplier)
    q = _check_sample_rate(sample_rate)
    t = _check_steps(steps)
    e = _as_real("epsilon", epsilon)
    if not (e >= 0) or math.isinf(e):
        raise ValueError(f"epsilon must be >= 0 and finite, got {epsilon!r}")
    _check_accountant(accountant)
    value, _, _ = with_fallback(accountant, lambda a: a.delta(sigma, q, t, e))
    return value


__all__ = ["delta_for", "epsilon_for", "with_fallback"]
