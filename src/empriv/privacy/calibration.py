"""σ calibration: the smallest noise multiplier whose ε upper bound at δ is at most a target ε,
optionally through a verified :class:`~empriv.privacy.cache.CalibrationCache`.

Bounds: targets above :data:`MAX_EPSILON` are refused before any accounting (at such ε the noise
multiplier is so small that the accountants' grids grow without bound; ε = 1e9 would ask for tens of
GB). Every ε in (0, MAX_EPSILON] is answered or fails with a one-line :class:`AccountingError`.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
from dataclasses import dataclass

from empriv.privacy.accountants import ACCOUNTANT_NAMES, ACCOUNTANTS, Accountant, check_accountant_name
from empriv.privacy.cache import CalibrationCache, code_versions, entry_key
from empriv.privacy.checks import (
    _check_delta,
    _check_epsilon,
    _check_sample_rate,
    _check_steps,
    _check_tolerance,
)
from empriv.privacy.errors import AccountingError
from empriv.privacy.events import dp_sgd_event
from empriv.privacy.forward import with_fallback
from empriv.privacy.search import _analytic_guess, _solve_smallest_sigma

logger = logging.getLogger("empriv.privacy")

#: Largest target ε the calibration accepts (the accountants are tested up to it for q in 1e-3..0.5 and
#: T in 1..10^4). The project's params bound finite ε by ``empriv.config.EPSILON_MAX`` (<= this).
MAX_EPSILON = 100.0


@dataclass(frozen=True)
class Calibration:
    noise_multiplier: float  # σ
    epsilon: float  # ε upper bound at σ reported by `accountant`
    target_epsilon: float
    delta: float
    sample_rate: float  # q
    steps: int  # T
    accountant: str  # accountant that actually produced the value (after any fallback)
    requested_accountant: str
    fallback_reason: str | None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _calibrate_with(acc: Accountant, target, delta, q, steps, tol, family=None) -> tuple[float, float]:
    """Smallest σ whose event ``family(σ)`` has ε <= target at δ under ``acc`` (root finder of
    :mod:`empriv.privacy.search`). ``family``: σ → DpEvent, by default DP-SGD's σ → T-fold Poisson-subsampled
    Gaussian (σ, q); the accountant's ``locate`` starts the search from the DP-SGD family's root."""
    if family is None:
        family = lambda s: dp_sgd_event(s, q, steps)  # noqa: E731
    loc = acc.locate(target, delta, q, steps, tol)
    if loc is None:
        guess, slope, precise = _analytic_guess(target, delta, q, steps), -1.5, False
    else:
        (guess, slope), precise = loc, True
    sigma, eps, _, _ = _solve_smallest_sigma(
        lambda s: acc.epsilon(family(s), delta), target, tol, guess,
        slope=slope, precise=precise,
    )
    return sigma, eps


def verify_calibration(cal: Calibration, tolerance: float) -> str | None:
    """Re-check a calibration by forward accounting with the accountant that produced it.

    A calibration holds if ε(σ) is at most the target (and equals the recorded ε) and σ is the smallest
    such σ to the calibration's relative tolerance: ε(σ / (1 + tolerance)) exceeds the target. Two
    forward evaluations, against about ten for a calibration. Returns None if it holds, else the reason.
    """
    if cal.accountant not in ACCOUNTANT_NAMES:
        return f"unknown accountant {cal.accountant!r}"
    chain, name = [], cal.requested_accountant
    while name in ACCOUNTANT_NAMES and name not in chain:
        chain.append(name)
        name = ACCOUNTANTS[name].fallback
    if cal.accountant not in chain:
        return f"accountant {cal.accountant!r} is not {cal.requested_accountant!r} or one of its fallbacks"
    for field in ("noise_multiplier", "epsilon"):
        value = getattr(cal, field)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 <= value < math.inf):
            return f"{field} {value!r} is not a finite number >= 0"
    sigma = cal.noise_multiplier
    if sigma <= 0:
        return f"noise_multiplier {sigma!r} is not > 0"
    acc = ACCOUNTANTS[cal.accountant]
    target = cal.target_epsilon
    try:  # the event at σ and at σ / (1 + tolerance)
        at, below = (dp_sgd_event(s, cal.sample_rate, cal.steps) for s in (sigma, sigma / (1 + tolerance)))
    except ValueError as exc:
        return f"it does not describe T-fold Poisson-subsampled Gaussian ({exc})"
    try:
        eps = acc.epsilon(at, cal.delta)
        if eps > target * (1 + 1e-12):
            return (f"noise_multiplier {sigma:g} gives epsilon {eps:.6g} under {cal.accountant}, "
                    f"above the target {target:g}")
        if not math.isclose(eps, cal.epsilon, rel_tol=1e-6, abs_tol=1e-9):
            return f"recorded epsilon {cal.epsilon!r} differs from the recomputed {eps:.6g}"
        smaller = acc.epsilon(below, cal.delta)
    except AccountingError as exc:
        return f"{cal.accountant} cannot re-account it ({exc})"
    if not smaller > target:
        return (f"noise_multiplier {sigma:g} is not the smallest to tolerance {tolerance:g}: "
                f"{sigma / (1 + tolerance):g} already gives epsilon {smaller:.6g} <= {target:g}")
    return None


def _as_cache(cache) -> CalibrationCache | None:
    if cache is None or cache is False:
        return None
    if isinstance(cache, CalibrationCache):
        return cache
    if isinstance(cache, (str, os.PathLike)):
        return CalibrationCache(cache)
    raise ValueError(f"cache must be a CalibrationCache, a directory or None (no cache), got {cache!r}")


def _from_cache(store: CalibrationCache, key: dict, tol: float) -> Calibration | None:
    entry = store.load(key)
    if entry is None:
        return None
    path = store.path(key)
    if entry.get("key") != key:
        stored = entry.get("key") if isinstance(entry.get("key"), dict) else {}
        diff = sorted(k for part in ("request", "versions")
                      for k in set((stored.get(part) or {})) | set(key[part])
                      if (stored.get(part) or {}).get(k) != key[part].get(k))
        logger.warning("calibration cache entry %s was made for another request or code version (differs in %s); "
                       "recomputing", path, ", ".join(diff) or "its layout")
        return None
    try:
        cal = Calibration(**entry["calibration"])
    except TypeError as exc:
        logger.warning("calibration cache entry %s is malformed (%s); recomputing", path, exc)
        return None
    req = key["request"]
    if (cal.target_epsilon, cal.delta, cal.sample_rate, cal.steps, cal.requested_accountant) != (
            req["epsilon"], req["delta"], req["sample_rate"], req["steps"], req["accountant"]):
        logger.warning("calibration cache entry %s does not describe the request it is stored under; recomputing",
                       path)
        return None
    reason = verify_calibration(cal, tol)
    if reason is not None:
        logger.warning("calibration cache entry %s failed verification (%s); recomputing sigma for epsilon=%g, "
                       "delta=%g, sample_rate=%g, steps=%d", path, reason, req["epsilon"], req["delta"],
                       req["sample_rate"], req["steps"])
        return None
    logger.debug("calibration cache hit %s (verified)", path)
    return cal


def calibrate_noise_multiplier(
    epsilon,
    delta,
    sample_rate,
    steps,
    accountant="prv",
    *,
    tolerance=1e-3,
    cache=None,
) -> Calibration:
    """Smallest noise multiplier σ whose ε upper bound at δ is <= ``epsilon``.

    σ is found to relative precision ``tolerance``: the returned σ satisfies
    ε(σ) <= epsilon and ε(σ / (1 + tolerance)) > epsilon.  If the requested
    accountant cannot answer (e.g. PRV with a tiny δ or very many steps), the
    fallback accountant is used, a warning is logged on logger
    ``empriv.privacy`` and the fact is recorded in the result.

    ``cache``: None or False (no cache, the default), a :class:`CalibrationCache` or a directory.
    A cached entry is used only after :func:`verify_calibration` accepts it; otherwise a warning
    names the entry and σ is recomputed and stored over it.
    """
    target = _check_epsilon(epsilon)
    if target > MAX_EPSILON:
        raise ValueError(f"epsilon must be <= {MAX_EPSILON:g} for noise calibration (a larger epsilon means "
                         f"almost no noise; use a non-private run instead), got {epsilon!r}")
    d = _check_delta(delta)
    q = _check_sample_rate(sample_rate)
    t = _check_steps(steps)
    check_accountant_name(accountant)
    tol = _check_tolerance(tolerance)
    store = _as_cache(cache)

    key = None
    if store is not None:
        key = entry_key({"epsilon": target, "delta": d, "sample_rate": q, "steps": t,
                         "accountant": accountant, "tolerance": tol}, code_versions())
        hit = _from_cache(store, key, tol)
        if hit is not None:
            return hit

    (sigma, eps), used, reason = with_fallback(
        accountant, lambda a: _calibrate_with(a, target, d, q, t, tol)
    )
    cal = Calibration(
        noise_multiplier=float(sigma),
        epsilon=float(eps),
        target_epsilon=target,
        delta=d,
        sample_rate=q,
        steps=t,
        accountant=used,
        requested_accountant=accountant,
        fallback_reason=reason,
    )
    if store is not None:
        store.store(key, cal.to_dict())
    return cal


__all__ = ["MAX_EPSILON", "Calibration", "calibrate_noise_multiplier", "verify_calibration"]
