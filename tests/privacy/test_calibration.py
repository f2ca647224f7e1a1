"""Calibration at large ε: correct (calibrate → forward accounting round trip, two independent accountants
agree) for every ε up to the bound, and a one-line error, without allocating, beyond it."""

import math
import tracemalloc

import pytest

from empriv.privacy.accounting import (
    ACCOUNTANTS,
    MAX_EPSILON,
    AccountingError,
    calibrate_noise_multiplier,
    epsilon_for,
    verify_calibration,
)

DELTA = 1.5e-4  # the default cube's δ = n^-1.1 at n = 3000 is 1.5e-4
TOL = 1e-3


def _round_trip(eps, q, steps, pld_grid=None):
    cal = calibrate_noise_multiplier(eps, DELTA, q, steps, tolerance=TOL)
    forward = epsilon_for(cal.noise_multiplier, q, steps, DELTA, cal.accountant)
    assert forward == pytest.approx(cal.epsilon, rel=1e-9)
    assert eps * 0.99 < forward <= eps
    assert verify_calibration(cal, TOL) is None  # and σ is the smallest to the tolerance
    # PRV (our implementation) and PLD (dp-accounting) are independent: they agree at the calibrated σ
    if cal.accountant == "prv":
        other = ACCOUNTANTS["pld"].epsilon_dp_sgd(cal.noise_multiplier, q, steps, DELTA, vdi=pld_grid)
        assert other == pytest.approx(forward, rel=2e-3)
    else:  # PLD answered because PRV's grid is too large here (q = 1e-3, T = 10^4): RDP's looser bound sits above
        assert cal.fallback_reason.startswith("prv failed: prv accountant:")
        assert forward < ACCOUNTANTS["rdp"].epsilon_dp_sgd(cal.noise_multiplier, q, steps, DELTA) < 1.5 * forward
    return cal


@pytest.mark.parametrize("eps,q,steps", [(50.0, 0.5, 100), (100.0, 0.05, 100), (100.0, 1e-3, 100)])
def test_large_epsilon_round_trip(eps, q, steps):
    cal = _round_trip(eps, q, steps, pld_grid=1e-3)  # a 10x coarser PLD grid: still within 2e-4 here
    assert cal.accountant == "prv" and 0.05 < cal.noise_multiplier < 1


@pytest.mark.slow
@pytest.mark.parametrize("eps", [50.0, 100.0])
@pytest.mark.parametrize("q", [1e-3, 0.05, 0.5])
@pytest.mark.parametrize("steps", [1, 100, 10_000])
def test_large_epsilon_round_trip_over_the_cube_range(eps, q, steps):
    # PLD's grid 1e-3 (10x dp-accounting's default): over these 17 PRV-answered configurations PLD/PRV - 1 lies in
    # [-3.0e-4, +4.2e-4] at either grid (the two differ by <= 2.4e-5), against the 2e-3 asserted, at a tenth of the time
    _round_trip(eps, q, steps, pld_grid=1e-3)


def test_epsilon_bound_matches_the_config():
    from empriv.config import EPSILON_MAX

    assert MAX_EPSILON == 100.0
    assert EPSILON_MAX <= MAX_EPSILON  # every ε the params accept can be calibrated


@pytest.mark.parametrize("eps", [1e9, 1000.0, math.nextafter(MAX_EPSILON, math.inf)])
def test_absurd_epsilon_fails_fast_with_one_line(eps):
    tracemalloc.start()
    try:
        with pytest.raises(ValueError) as info:
            calibrate_noise_multiplier(eps, DELTA, 0.05, 100)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    msg = str(info.value)
    assert msg.startswith("epsilon must be <= 100") and repr(eps) in msg and "\n" not in msg
    assert peak < 10 * 2**20


def test_tiny_noise_multiplier_is_refused_before_allocating():
    """σ = 1e-3 (what ε = 1e9 used to reach): PRV and then its fallback PLD refuse by estimate."""
    tracemalloc.start()
    try:
        with pytest.raises(AccountingError) as info:
            epsilon_for(1e-3, 0.05, 100, 1e-5)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    msg = str(info.value)
    assert msg.startswith("pld accountant:") and "GiB" in msg and "noise_multiplier=0.001" in msg
    assert "\n" not in msg
    assert peak < 64 * 2**20
    with pytest.raises(AccountingError, match="quadrature would need"):
        ACCOUNTANTS["prv"].epsilon_dp_sgd(1e-3, 0.05, 100, 1e-5)


def test_prv_refuses_a_domain_beyond_float64_instead_of_reporting_709():
    # σ = 0.05 at q = 0.05, T = 100 has ε in the thousands (RDP bound ~1.9e4): PRV's grid would overflow exp()
    with pytest.raises(AccountingError, match=r"half-width .* \(> 700, the float64 exponent range\)"):
        ACCOUNTANTS["prv"].epsilon_dp_sgd(0.05, 0.05, 100, 1e-5)
    assert ACCOUNTANTS["rdp"].epsilon_dp_sgd(0.05, 0.05, 100, 1e-5) > 1e4


def test_pld_refuses_a_composition_beyond_the_memory_limit():
    # one step at a coarse grid is small (~1.5e5 points); its 10^4-fold composition would be ~5e7 points
    with pytest.raises(AccountingError, match=r"pld accountant: the 10000-fold composition would need .* GiB"):
        ACCOUNTANTS["pld"].epsilon_dp_sgd(0.1, 0.5, 10_000, 1e-5, vdi=1e-3)


def test_a_probe_the_accountant_cannot_answer_does_not_decide_the_accountant():
    """The root search steps down from a σ that meets the target; a probe far below the root that the accountant cannot
    answer (PRV's domain at a small σ) is not a reason to switch accountants: the search probes halfway back up and
    never below the failed σ again. Found on the default cube: ε = 64, q = 32/3000, T = 200 fell back to PLD (~20 s
    instead of ~2 s) because one bracketing probe at σ = 0.11 failed; the root is 0.224."""
    from empriv.privacy.search import _solve_smallest_sigma

    calls = []

    def eps_fn(sigma):  # ε = 4/σ², unanswerable below σ = 0.45; target 16 → root 0.5
        calls.append(sigma)
        if sigma < 0.45:
            raise AccountingError("domain too wide")
        return 4.0 / sigma**2

    sigma, eps, _, _ = _solve_smallest_sigma(eps_fn, 16.0, 1e-3, guess=0.9)  # the first step down overshoots to 0.41
    assert sigma == pytest.approx(0.5, rel=1e-3) and eps <= 16.0 and 4.0 / (sigma / 1.001) ** 2 > 16.0
    failed = [s for s in calls if s < 0.45]
    assert 1 <= len(failed) and all(s >= min(failed) for s in calls)  # never probed below the first failure
    # nothing answered above the failure: the accountant's error stands (the caller falls back)
    with pytest.raises(AccountingError, match="domain too wide"):
        _solve_smallest_sigma(eps_fn, 16.0, 1e-3, guess=0.1)


def test_the_default_cube_calibrates_with_prv_at_eps_64():
    n = 3000
    cal = calibrate_noise_multiplier(64.0, n ** -1.1, 32 / n, 200, tolerance=TOL)
    assert cal.accountant == "prv" and cal.fallback_reason is None
    assert verify_calibration(cal, TOL) is None
    assert ACCOUNTANTS["pld"].epsilon_dp_sgd(cal.noise_multiplier, 32 / n, 200, n ** -1.1) == pytest.approx(cal.epsilon, rel=2e-3)
