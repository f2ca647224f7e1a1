"""Forward accounting: ε(δ) and δ(ε) of a DpEvent, or of DP-SGD at a given noise multiplier σ, with the
accountants' fallbacks."""

from __future__ import annotations

import logging
import math
from typing import Callable, TypeVar

from empriv.privacy.accountants import ACCOUNTANTS, Accountant, check_accountant_name
from empriv.privacy.checks import (
    _as_real,
    _check_delta,
    _check_sample_rate,
    _check_sigma,
    _check_steps,
)
from empriv.privacy.errors import AccountingError
from empriv.privacy.events import dp_sgd_event

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
    check_accountant_name(accountant)
    event = dp_sgd_event(sigma, q, t)
    value, _, _ = with_fallback(accountant, lambda a: a.epsilon(event, d))
    return value


def delta_for(noise_multiplier, sample_rate, steps, epsilon, accountant="prv") -> float:
    """δ upper bound at ε of T-fold Poisson-subsampled Gaussian with noise multiplier σ."""
    sigma = _check_sigma(noise_multiplier)
    q = _check_sample_rate(sample_rate)
    t = _check_steps(steps)
    e = _as_real("epsilon", epsilon)
    if not (e >= 0) or math.isinf(e):
        raise ValueError(f"epsilon must be >= 0 and finite, got {epsilon!r}")
    check_accountant_name(accountant)
    event = dp_sgd_event(sigma, q, t)
    value, _, _ = with_fallback(accountant, lambda a: a.delta(event, e))
    return value


def epsilon_of(event, delta, accountant="prv") -> float:
    """ε upper bound at δ of a DpEvent (:mod:`empriv.privacy.events`; ∞ with a NonPrivate part), with the
    accountant's fallbacks. An event the accountant does not take raises its UnsupportedEventError."""
    d = _check_delta(delta)
    check_accountant_name(accountant)
    value, _, _ = with_fallback(accountant, lambda a: a.epsilon(event, d))
    return value


def delta_of(event, epsilon, accountant="prv") -> float:
    """δ upper bound at ε of a DpEvent (1 with a NonPrivate part), with the accountant's fallbacks."""
    e = _as_real("epsilon", epsilon)
    if not (e >= 0) or math.isinf(e):
        raise ValueError(f"epsilon must be >= 0 and finite, got {epsilon!r}")
    check_accountant_name(accountant)
    value, _, _ = with_fallback(accountant, lambda a: a.delta(event, e))
    return value


__all__ = ["delta_for", "delta_of", "epsilon_for", "epsilon_of", "with_fallback"]
