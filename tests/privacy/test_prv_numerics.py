"""The PRV accountant's fast numerics against naive references, the root search against brute force, and the
default run's calibrated σ pinned to the values its records hold (issue 30: speed without changing results)."""

import math

import numpy as np
import pytest

from empriv.privacy.accountants import prv as P
from empriv.privacy.calibration import calibrate_noise_multiplier
from empriv.privacy.search import _solve_smallest_sigma

# (σ, q, T, δ): small and large σ, q and T, δ down to 1e-9
SPREAD = [
    (0.18, 0.0053, 100, 1.5e-4), (0.22, 0.0107, 200, 1.5e-4), (0.58, 0.0053, 100, 1.5e-4),
    (0.68, 0.00256, 2000, 1e-5), (1.07, 0.0205, 1000, 1e-6), (2.7, 0.041, 200, 1e-6),
    (0.35, 0.3, 5, 1e-5), (4.0, 0.5, 50, 1e-9), (0.9, 0.001, 3000, 1e-8), (1.3, 1.0, 10, 1e-5),
]


@pytest.mark.parametrize("sigma,q,steps,delta", SPREAD)
@pytest.mark.parametrize("eps_error", [0.1, 0.01])
def test_domain_from_a_few_orders_equals_all_orders(sigma, q, steps, delta, eps_error):
    assert P._prv_domain(sigma, q, steps, eps_error, delta / 1000) == P._prv_domain_all_orders(
        sigma, q, steps, eps_error, delta / 1000)


@pytest.mark.parametrize("sigma,q", [(0.2, 0.005), (0.7, 0.0026), (1.5, 0.3), (1.0, 1.0)])
def test_tail_on_a_sorted_grid_is_the_full_tail_bit_for_bit(sigma, q):
    lower = math.log1p(-q) if q < 1 else -30.0
    t = np.sort(np.concatenate([np.linspace(-30, 30, 20001), [0.0, lower, np.nextafter(lower, 1.0), -1e-300]]))
    tail, k = P._psg_tail_sorted(t, q, sigma)
    ref, left = P._psg_tail(t, q, sigma)
    assert np.array_equal(tail, ref)
    assert k == int(left.sum()) and left[:k].all() and not left[k:].any()


@pytest.mark.parametrize("steps", [1, 2, 3, 100, 1999, 2000])
def test_power_by_squaring_matches_complex_power(steps):
    rng = np.random.default_rng(steps)
    x = rng.uniform(0, 1, 4000) * np.exp(1j * rng.uniform(-math.pi, math.pi, 4000))
    x[:5] = [1.0, -1.0, 1j, 0.0, 0.999999]
    got = P._power(x, steps)
    ref = x ** steps
    assert np.allclose(got, ref, rtol=1e-12, atol=1e-290)
    assert not np.shares_memory(got, x)
    tiny = np.abs(ref) < 1e-300
    assert (got[tiny] == 0).all()  # underflowing powers are exact zeros, never subnormal arithmetic


def _composed_naive(sigma, q, steps, eps_error, delta_error):
    """prv-accountant's discretisation step by step: masks over the whole grid, complex power."""
    from scipy.fft import irfft, next_fast_len, rfft

    L, dt = P._prv_domain_all_orders(sigma, q, steps, eps_error, delta_error)
    i_min, i_max = math.floor(-L / dt), math.ceil(L / dt)
    n = i_max - i_min + 1
    if n % 2:
        n, i_max = n + 1, i_max + 1
    n_fast = next_fast_len(n, real=True)
    while n_fast % 2:
        n_fast = next_fast_len(n_fast + 1, real=True)
    i_min -= (n_fast - n) // 2
    i_max += (n_fast - n) - (n_fast - n) // 2
    n = n_fast
    t = dt * np.arange(i_min, i_max + 1, dtype=float)
    edges = np.clip(dt * (np.arange(i_min, i_max + 2, dtype=float) - 0.5), t[0], t[-1])
    cdf, sf = P._psg_cdf_sf(edges, q, sigma)
    # P(a < X <= b) from the CDF on the left of 0 and the survival function on the right
    f = np.where(edges[1:] <= 0, cdf[1:] - cdf[:-1], np.where(edges[:-1] > 0, sf[:-1] - sf[1:], cdf[1:] - cdf[:-1]))
    cross = (edges[:-1] <= 0) & (edges[1:] > 0)
    f[cross] = (1.0 - sf[1:][cross]) - cdf[:-1][cross]
    remaining = (1.0 - sf[-1]) - cdf[0]
    f = f / remaining
    cdf_c, _ = P._psg_cdf_sf(t, q, sigma)
    shift = float(np.sum(cdf[:-1] + cdf[1:] - 2 * cdf_c)) * dt / 3.0 / remaining
    fn = irfft(rfft(f) ** steps, n)
    m = steps - 1 + (n // 2 if steps % 2 == 0 else 0)
    return np.roll(fn, m), t + shift * steps


@pytest.mark.parametrize("sigma,q,steps,delta", [(0.68, 0.00256, 2000, 1e-5), (1.07, 0.0205, 1000, 1e-6),
                                                 (0.6, 0.0053, 100, 1.5e-4), (0.9, 0.001, 300, 1e-8)])
def test_composition_matches_the_naive_reference(sigma, q, steps, delta):
    fn, tn, n = P._prv_composed(sigma, q, steps, 0.01, delta / 1000)
    ref_fn, ref_tn = _composed_naive(sigma, q, steps, 0.01, delta / 1000)
    assert len(ref_fn) == n
    assert np.allclose(tn, ref_tn, rtol=0, atol=1e-9)
    assert np.max(np.abs(fn - ref_fn)) < 1e-13
    eps = P._prv_eps_from(fn, tn, delta, delta / 1000, 0.01, n)
    ref = P._prv_eps_from(ref_fn, ref_tn, delta, delta / 1000, 0.01, n)
    assert eps == pytest.approx(ref, rel=1e-6)


def _brute_force_smallest(eps_fn, target, lo, hi, points=200_001):
    grid = np.exp(np.linspace(math.log(lo), math.log(hi), points))
    ok = [s for s in grid if eps_fn(s) <= target]
    return ok[0]


@pytest.mark.parametrize("target", [0.3, 1.0, 2.0, 8.0, 40.0])
@pytest.mark.parametrize("tol", [1e-3, 1e-2])
def test_search_returns_the_smallest_sigma_within_its_tolerance(target, tol):
    """A cheap monotone ε(σ) with the shape of DP-SGD's (steep at small σ, ~1/σ at large σ)."""
    def eps_fn(s):
        return 0.05 / s + 3.0 / s ** 2 + math.log1p(1.0 / s ** 4)

    brute = _brute_force_smallest(eps_fn, target, 1e-2, 1e3)
    for guess, precise in [(brute * 3, False), (brute / 3, False), (brute * 1.0004, True), (0.5, False)]:
        sigma, eps, _, _ = _solve_smallest_sigma(eps_fn, target, tol, guess, precise=precise)
        assert eps == pytest.approx(eps_fn(sigma), rel=1e-12) and eps_fn(sigma) <= target
        assert eps_fn(sigma / (1 + tol)) > target
        # the brute-force grid is 7e-5 apart in log σ: the search's σ lies within tol above the true smallest
        assert brute / 1.0001 <= sigma <= brute * (1 + tol) * 1.0001


def test_search_on_the_rdp_accountant_against_brute_force():
    from empriv.privacy.accountants import ACCOUNTANTS

    rdp = ACCOUNTANTS["rdp"]
    q, steps, delta, target = 0.01, 300, 1e-5, 2.0
    eps_fn = lambda s: rdp.epsilon_dp_sgd(s, q, steps, delta)  # noqa: E731
    sigma, eps, _, _ = _solve_smallest_sigma(eps_fn, target, 1e-3, 0.9)
    grid = np.exp(np.linspace(math.log(sigma) - 0.01, math.log(sigma) + 0.01, 401))
    first_ok = next(s for s in grid if eps_fn(s) <= target)
    assert eps <= target and eps_fn(sigma / 1.001) > target
    assert first_ok / 1.0001 <= sigma <= first_ok * 1.0011


# The default run's σ (ε ∈ {2, 64}, q = b/3000, b ∈ {16, 32}, T ∈ {100, 200}, δ = 3000^-1.1) as its records
# hold them (records/train/record/full/eps*-b*-T*-lr0.003-s0.json, computed before the issue-30 speed work).
DEFAULT_RUN_SIGMA = {
    (2, 16, 100): 0.5756142308258402, (2, 16, 200): 0.6034330565355672,
    (2, 32, 100): 0.663206266037307, (2, 32, 200): 0.7064267018527359,
    (64, 16, 100): 0.17376175120699114, (64, 16, 200): 0.19417249484022736,
    (64, 32, 100): 0.1983673646596607, (64, 32, 200): 0.2238442457796187,
}


@pytest.mark.parametrize("eps,b,steps", [(2, 16, 100), (2, 32, 200), (64, 32, 200)])
def test_default_run_sigma_unchanged_by_the_speed_work(eps, b, steps):
    cal = calibrate_noise_multiplier(eps, 3000 ** -1.1, b / 3000, steps)
    assert cal.accountant == "prv"
    assert cal.noise_multiplier == pytest.approx(DEFAULT_RUN_SIGMA[(eps, b, steps)], rel=1e-8)
