"""User-level DP for fine-tuning (Chua et al., "Mind the Privacy Unit!").

* Naive group privacy: an example-level (ε, δ)-DP mechanism is, for users with at
  most k records, (kε, δ·(e^{kε}-1)/(e^{ε}-1))-DP at the user level (Vadhan 2017;
  the paper's printed denominator "ε-1" is read as e^ε - 1, see the spec).
* Tight group privacy (Ganesh 2024, used in the paper's App. B.3): one DP-SGD step
  with Poisson rate q = B/M, against the addition/removal of a user's k records, is
  the Gaussian mechanism with sensitivity ~ Bin(k, q) ("mixture of Gaussians",
  :func:`empriv.privacy.events.group_privacy_event`); T steps are composed by the PLD accountant.
* User-wise DP-SGD: ordinary accounting with users as the unit,
  q = users per step / number of users.

Heavy libraries are imported lazily.
"""

from __future__ import annotations

import math

from empriv.checks import require_int
from empriv.privacy.accountants import ACCOUNTANTS
from empriv.privacy.calibration import Calibration, calibrate_noise_multiplier
from empriv.privacy.checks import (
    _check_delta,
    _check_epsilon,
    _check_sample_rate,
    _check_sigma,
    _check_steps,
    _check_tolerance,
)
from empriv.privacy.events import group_privacy_event
from empriv.privacy.search import _solve_smallest_sigma

#: PLD grid used for the mixture-of-Gaussians accounting (as in the paper: 1e-2..1e-3).
MOG_VALUE_DISCRETIZATION = 1e-3
#: the grid σ is first bracketed on (see calibrate_group_privacy)
COARSE_DISCRETIZATION = 1e-2


def naive_group_privacy(epsilon, delta, k) -> tuple[float, float]:
    """Example-level (ε, δ) -> user-level (kε, δ·(e^{kε}-1)/(e^{ε}-1)) for k records per user."""
    e = _check_epsilon(epsilon)
    d = _check_delta(delta)
    k = require_int("k", k, 1)
    if k == 1:
        return e, d
    # (e^{kε}-1)/(e^{ε}-1) = sum_{i<k} e^{iε}; computed stably.
    factor = math.expm1(k * e) / math.expm1(e) if k * e < 700 else math.inf
    return k * e, d * factor


def example_level_for_user_level(user_epsilon, user_delta, k) -> tuple[float, float]:
    """Inverse of :func:`naive_group_privacy`: example-level (ε_u/k, δ_u(e^{ε_e}-1)/(e^{kε_e}-1))."""
    eu = _check_epsilon(user_epsilon, "user_epsilon")
    du = _check_delta(user_delta, "user_delta")
    k = require_int("k", k, 1)
    ee = eu / k
    return ee, du * math.expm1(ee) / math.expm1(eu)


def _mog_epsilon(sigma, k, q, steps, delta, vdi) -> float:
    """ε at δ of :func:`~empriv.privacy.events.group_privacy_event` under the PLD accountant (grid ``vdi``)."""
    return ACCOUNTANTS["pld"].epsilon(group_privacy_event(sigma, k, q, steps), delta, vdi=vdi)


def group_privacy_epsilon(noise_multiplier, k, sample_rate, steps, delta,
                          *, value_discretization_interval=MOG_VALUE_DISCRETIZATION) -> float:
    """User-level ε of T steps of record-level DP-SGD when each user has k records (tight MoG)."""
    s = _check_sigma(noise_multiplier)
    k = require_int("k", k, 1)
    q = _check_sample_rate(sample_rate)
    t = _check_steps(steps)
    d = _check_delta(delta)
    return _mog_epsilon(s, k, q, t, d, value_discretization_interval)


def calibrate_group_privacy(epsilon, delta, k, sample_rate, steps, *, tolerance=1e-3,
                            value_discretization_interval=MOG_VALUE_DISCRETIZATION) -> Calibration:
    """Smallest σ so that record-level DP-SGD (rate q = B/M) is user-level (ε, δ)-DP with
    k records per user, via the tight mixture-of-Gaussians accounting."""
    e = _check_epsilon(epsilon)
    d = _check_delta(delta)
    k = require_int("k", k, 1)
    q = _check_sample_rate(sample_rate)
    t = _check_steps(steps)
    tol = _check_tolerance(tolerance)
    # Start from the example-level calibration at ε/k-ish (an over-estimate of σ
    # for k > 1 is fine: the solver brackets from there).
    guess = calibrate_noise_multiplier(e, d, min(1.0, q * k), t, accountant="prv").noise_multiplier
    # A PLD's cost grows as its grid gets finer: bracket σ on a 10x coarser grid first (each evaluation ~5-10x
    # cheaper), then finish on the requested grid from that root, which needs about two evaluations.
    coarse = max(value_discretization_interval, COARSE_DISCRETIZATION)
    if coarse > value_discretization_interval:
        _, _, root, slope = _solve_smallest_sigma(
            lambda s: _mog_epsilon(s, k, q, t, d, coarse), e, max(tol, 1e-2), guess)
        guess, precise = root, True
    else:
        slope, precise = -1.5, False
    sigma, eps, _, _ = _solve_smallest_sigma(
        lambda s: _mog_epsilon(s, k, q, t, d, value_discretization_interval),
        e, tol, guess, slope=slope, precise=precise,
    )
    return Calibration(
        noise_multiplier=sigma, epsilon=eps, target_epsilon=e, delta=d, sample_rate=q,
        steps=t, accountant="pld-mog", requested_accountant="pld-mog", fallback_reason=None,
    )


def calibrate_group_privacy_naive(epsilon, delta, k, sample_rate, steps, accountant="prv",
                                  **kwargs) -> Calibration:
    """σ for user-level (ε, δ) via the naive group-privacy conversion: calibrate
    example-level DP-SGD at (ε/k, δ(e^{ε/k}-1)/(e^{ε}-1)).  The returned Calibration
    is example-level (its epsilon/delta are the converted example-level values)."""
    ee, de = example_level_for_user_level(epsilon, delta, k)
    return calibrate_noise_multiplier(ee, de, sample_rate, steps, accountant, **kwargs)


def calibrate_user_wise(epsilon, delta, users_per_step, n_users, steps, accountant="prv",
                        **kwargs) -> Calibration:
    """User-wise DP-SGD: ordinary accounting over users, q = users_per_step / n_users."""
    users_per_step = require_int("users_per_step", users_per_step, 1)
    n_users = require_int("n_users", n_users, users_per_step, meaning="at least users_per_step")
    q = _check_sample_rate(users_per_step / n_users)
    return calibrate_noise_multiplier(epsilon, delta, q, steps, accountant, **kwargs)


__all__ = [
    "calibrate_group_privacy",
    "calibrate_group_privacy_naive",
    "calibrate_user_wise",
    "example_level_for_user_level",
    "group_privacy_epsilon",
    "naive_group_privacy",
]
