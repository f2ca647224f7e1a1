"""Privacy accounting for DP-SGD (Poisson-subsampled Gaussian mechanism).

Public API
----------
``calibrate_noise_multiplier`` -- smallest noise multiplier σ whose ε upper bound
is at most the target ε (relative tolerance ``tolerance`` on σ).
``epsilon_for`` / ``delta_for`` -- ε(δ) and δ(ε) for a given σ.
``ACCOUNTANTS`` -- the single registry of accountants ("prv", "rdp", "pld").

Heavy libraries (numpy, scipy, opacus, dp_accounting, prv_accountant) are imported
lazily inside functions so that importing this module stays cheap.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import numbers
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

logger = logging.getLogger("empriv.privacy")

#: Bump when the numerical behaviour of any accountant changes (invalidates the cache).
CACHE_VERSION = "empriv-accounting-v1"

MIN_SIGMA = 1e-3
MAX_SIGMA = 1e4


class AccountingError(RuntimeError):
    """An accountant could not produce a (trustworthy) value for these inputs."""


# ---------------------------------------------------------------------------
# Result type
# ---------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------
# Input validation
# ---------------------------------------------------------------------------


def _as_real(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    value = float(value)
    if math.isnan(value):
        raise ValueError(f"{name} must be a number, got nan")
    return value


def _check_positive(name: str, value) -> float:
    v = _as_real(name, value)
    if not (v > 0) or math.isinf(v):
        raise ValueError(f"{name} must be > 0 and finite, got {value!r}")
    return v


def _check_epsilon(value, name: str = "epsilon") -> float:
    return _check_positive(name, value)


def _check_delta(value, name: str = "delta") -> float:
    v = _as_real(name, value)
    if not (0 < v < 1):
        raise ValueError(f"{name} must satisfy 0 < {name} < 1, got {value!r}")
    return v


def _check_sample_rate(value, name: str = "sample_rate") -> float:
    v = _as_real(name, value)
    if not (0 < v <= 1):
        raise ValueError(f"{name} must satisfy 0 < {name} <= 1, got {value!r}")
    return v


def _check_steps(value, name: str = "steps") -> int:
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    if isinstance(value, numbers.Integral):
        v = int(value)
    elif isinstance(value, numbers.Real) and float(value).is_integer():
        v = int(value)
    else:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    if v < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return v


def _check_sigma(value, name: str = "noise_multiplier") -> float:
    return _check_positive(name, value)


def _check_accountant(name) -> str:
    if not isinstance(name, str) or name not in ACCOUNTANTS:
        known = ", ".join(sorted(ACCOUNTANTS))
        raise ValueError(f"accountant must be one of {known}, got {name!r}")
    return name


def _check_tolerance(value) -> float:
    v = _as_real("tolerance", value)
    if not (0 < v < 0.5):
        raise ValueError(f"tolerance must satisfy 0 < tolerance < 0.5, got {value!r}")
    return v


# ---------------------------------------------------------------------------
# Accountants
# ---------------------------------------------------------------------------


class Accountant:
    """Interface of an accountant for T-fold Poisson-subsampled Gaussian composition.

    ``epsilon``/``delta`` return upper bounds and raise :class:`AccountingError`
    when the method cannot answer.  ``fallback`` names the accountant used
    instead in that case (or ``None``).
    """

    name: str = ""
    description: str = ""
    fallback: str | None = None

    def epsilon(self, sigma: float, q: float, steps: int, delta: float) -> float:
        raise NotImplementedError

    def delta(self, sigma: float, q: float, steps: int, epsilon: float) -> float:
        raise NotImplementedError

    def locate(self, target: float, delta: float, q: float, steps: int) -> tuple[float, float]:
        """Cheap approximate σ for ``target`` ε, and its relative uncertainty."""
        return _analytic_guess(target, delta, q, steps), 0.5


#: name -> accountant instance.  The only place to touch when adding one.
ACCOUNTANTS: dict[str, Accountant] = {}


def register(cls: type[Accountant]) -> type[Accountant]:
    """Class decorator adding an accountant to :data:`ACCOUNTANTS`."""
    ACCOUNTANTS[cls.name] = cls()
    return cls


def _analytic_guess(target: float, delta: float, q: float, steps: int) -> float:
    """Rough σ from the moments-accountant/Gaussian approximation (only a starting point)."""
    # ε ≈ q sqrt(T) sqrt(2 log(1.25/δ)) / σ for small q; full-batch Gaussian if q = 1.
    s = q * math.sqrt(steps) * math.sqrt(2 * math.log(1.25 / delta)) / target
    return min(max(s, 0.3), MAX_SIGMA / 2)


def _finite_or_raise(name: str, value: float) -> float:
    if value is None or math.isnan(value):
        raise AccountingError(f"{name} accountant returned NaN")
    return float(value)


# --- fast PRV ---------------------------------------------------------------
#
# The PRV accountant of Gopi et al. (2021), following prv-accountant 0.2.0 step by
# step (same safe domain size, mesh, cell-centred mean-preserving discretisation,
# FFT self-composition and ε extraction) but vectorised in float64 with a
# numerically stable closed form of the PRV's CDF/survival function.  This is
# 5-20x faster than the library; tests check agreement with the library.

_PRV_ORDERS = [1.0 + x / 10.0 for x in range(1, 100)] + list(range(12, 64))
_PRV_MAX_POINTS = 8_000_000  # beyond this the PRV grid is too large ("cannot answer")
_F64_EPS = 2.220446049250313e-16


def _psg_cdf_sf(t, q: float, sigma: float):
    """CDF and survival function of the PRV of the Poisson-subsampled Gaussian.

    With z = log(1 + (e^t - 1)/q), A = (2σ²z - 1)/(2√2σ), B = (2σ²z + 1)/(2√2σ):
    sf(t) = q/2 erfc(A) + (1-q)/2 erfc(B) and cdf(t) = q/2 erfc(-A) + (1-q)/2 erfc(-B)
    for t > log(1-q) (the support's lower end), which is prv-accountant's closed
    form rewritten so that neither tail suffers from cancellation.
    """
    import numpy as np
    from scipy.special import erfc

    t = np.asarray(t, dtype=float)
    lower = math.log1p(-q) if q < 1 else -math.inf
    inside = t > lower
    tt = np.where(inside, t, 0.0)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        pos = tt > 0
        z = np.where(
            pos,
            tt - math.log(q) + np.log1p(-(1 - q) * np.exp(-np.abs(tt))),
            np.log1p(np.expm1(np.minimum(tt, 0.0)) / q),
        )
    c = 2 * math.sqrt(2) * sigma
    a = (2 * sigma * sigma * z - 1) / c
    b = (2 * sigma * sigma * z + 1) / c
    sf = 0.5 * q * erfc(a) + 0.5 * (1 - q) * erfc(b)
    cdf = 0.5 * q * erfc(-a) + 0.5 * (1 - q) * erfc(-b)
    sf = np.where(inside, sf, 1.0)
    cdf = np.where(inside, cdf, 0.0)
    return cdf, sf


def _log_a_quadrature(q: float, sigma: float, orders):
    """log A_α of the Poisson-subsampled Gaussian (Mironov et al. 2019) for many orders.

    A_α = E_{z~N(0,σ²)}[(1 - q + q exp((2z-1)/(2σ²)))^α], computed by the trapezoid
    rule in log space on a grid resolving both the Gaussian (scale σ) and the
    mixture term (scale σ²).  The integrand is smooth and decays like a Gaussian,
    so the rule converges geometrically; tests compare with opacus' series.
    """
    import numpy as np
    from scipy.special import logsumexp

    a = np.asarray(orders, dtype=float)[:, None]
    h = min(sigma, sigma * sigma) / 8.0
    lo = -12.0 * sigma
    hi = float(a.max()) + 12.0 * sigma + 1.0
    n = int(math.ceil((hi - lo) / h)) + 1
    z = np.linspace(lo, hi, n)
    x = (2 * z - 1) / (2 * sigma * sigma)
    with np.errstate(divide="ignore"):
        mix = np.logaddexp(math.log1p(-q) if q < 1 else -np.inf, math.log(q) + x)
    logn = -z * z / (2 * sigma * sigma) - math.log(sigma * math.sqrt(2 * math.pi))
    step = (hi - lo) / (n - 1)
    return logsumexp(logn[None, :] + a * mix[None, :], axis=1) + math.log(step)


def _prv_domain(sigma, q, steps, eps_error, delta_error):
    """Safe half-width L and mesh (Gopi et al. Remark 5.6 / Thm 5.5, as prv-accountant)."""
    import numpy as np

    a = np.asarray(_PRV_ORDERS, dtype=float)
    rdp1 = _log_a_quadrature(q, sigma, a) / (a - 1)

    def eps(rdp, delta):
        with np.errstate(all="ignore"):
            return float(np.nanmin(rdp - np.log(delta * a) / (a - 1) + np.log1p(-1 / a)))

    L = max(eps(rdp1 * steps, delta_error / 4), eps(rdp1, delta_error / 8 / steps))
    L = max(L, eps_error) + 3
    mesh = eps_error / math.sqrt(steps / 2 * math.log(12 / delta_error))
    return L, mesh


def _prv_composed(sigma, q, steps, eps_error, delta_error):
    """Discretised T-fold composition: (pmf, grid t) in float64."""
    import numpy as np
    from scipy.fft import irfft, rfft

    L, dt = _prv_domain(sigma, q, steps, eps_error, delta_error)
    if not math.isfinite(L):
        raise AccountingError(f"prv domain size is not finite (L={L})")
    # Domain aligned with the origin, even number of nodes (Domain.create_aligned).
    t_min = math.floor(-L / dt) * dt
    t_max = math.ceil(L / dt) * dt
    n = int(round((t_max - t_min) / dt)) + 1
    if n % 2:
        n += 1
        t_max += dt
    if n > _PRV_MAX_POINTS:
        raise AccountingError(
            f"prv grid would need {n} points (> {_PRV_MAX_POINTS}) for steps={steps}"
        )
    dt = (t_max - t_min) / (n - 1)
    t_max = t_min + (n - 1) * dt
    t = t_min + dt * np.arange(n, dtype=float)
    # Cell-centred discretisation of the PRV truncated to [t_min, t_max].
    edges = np.clip(t_min - dt / 2 + dt * np.arange(n + 1, dtype=float), t_min, t_max)
    cdf, sf = _psg_cdf_sf(edges, q, sigma)
    left = edges[1:] <= 0
    f = np.where(left, cdf[1:] - cdf[:-1], sf[:-1] - sf[1:])
    remaining = float(cdf[-1] - cdf[0]) if cdf[0] < 0.5 else float(sf[0] - sf[-1])
    f = f / remaining
    # Mean-preserving shift: Σ_cell ∫(t - t_c) dF = dt/3 (F(a) + F(b) - 2 F(c)) by Simpson.
    cc, sc = _psg_cdf_sf(t, q, sigma)
    second = np.where(t <= 0, cdf[:-1] + cdf[1:] - 2 * cc, -(sf[:-1] + sf[1:] - 2 * sc))
    shift = float(second.sum()) * dt / 3 / remaining
    if not abs(shift) < dt / 2:
        raise AccountingError("discrete mean differs from continuous mean significantly")
    # Self-composition by FFT (prv_accountant.composers.Fourier).
    fn = irfft(rfft(f) ** steps, n)
    m = steps - 1
    if steps % 2 == 0:
        m += n // 2
    fn = np.roll(fn, m)
    # Base domain shifted by `shift`; the composed one by a further shift*(T-1).
    tn = t + shift * steps
    return fn, tn, n


def _prv_eps_from(fn, tn, delta, delta_error, eps_error, n) -> float:
    import numpy as np

    if _F64_EPS * n * 64 > delta - delta_error:
        raise AccountingError(
            f"delta={delta:g} too small for a float64 PRV grid of {n} points"
        )
    with np.errstate(over="ignore", invalid="ignore"):
        d1 = np.cumsum(fn[::-1])[::-1]
        d2 = np.cumsum((fn * np.exp(-tn))[::-1])[::-1]
        ndelta = np.exp(tn) * d2 - d1
    target = delta - delta_error
    i = int(np.searchsorted(ndelta, -target, side="left"))
    if i <= 0 or i >= n:
        raise AccountingError("prv cannot compute epsilon (outside the discretisation domain)")
    eps = math.log((d1[i] - target) / d2[i]) + eps_error
    if math.isnan(eps):
        raise AccountingError("prv returned NaN")
    return eps


def _prv_delta_from(fn, tn, epsilon, delta_error, eps_error) -> float:
    import numpy as np

    e = epsilon - eps_error
    with np.errstate(over="ignore", invalid="ignore"):
        d = float(np.where(tn >= e, fn * (1.0 - np.exp(e - tn)), 0.0).sum())
    if math.isnan(d):
        raise AccountingError("prv returned NaN")
    return d + delta_error


@register
class PRVAccountant(Accountant):
    """Numerical composition of privacy random variables (Gopi et al. 2021).

    Reports the *upper* bound with ``eps_error`` = 0.01 and ``delta_error`` = δ/1000
    (prv-accountant's estimate + error, the settings opacus uses).
    """

    name = "prv"
    description = (
        "privacy random variables, Gopi et al. 2021 (prv-accountant algorithm; upper "
        "bound, eps_error=0.01, delta_error=delta/1000)"
    )
    fallback = "pld"
    eps_error = 0.01
    coarse_eps_error = 0.1

    def epsilon(self, sigma, q, steps, delta, *, eps_error=None, report_eps_error=None):
        ee = eps_error or self.eps_error
        de = delta / 1000
        try:
            fn, tn, n = _prv_composed(sigma, q, steps, ee, de)
        except MemoryError as exc:
            raise AccountingError(f"prv ran out of memory: {exc}") from exc
        rep = ee if report_eps_error is None else report_eps_error
        return _prv_eps_from(fn, tn, delta, de, rep, n)

    def delta(self, sigma, q, steps, epsilon):
        de = 1e-12
        try:
            fn, tn, n = _prv_composed(sigma, q, steps, self.eps_error, de)
        except MemoryError as exc:
            raise AccountingError(f"prv ran out of memory: {exc}") from exc
        return min(1.0, max(0.0, _prv_delta_from(fn, tn, epsilon, de, self.eps_error)))

    def locate(self, target, delta, q, steps):
        # Same algorithm on a 10x coarser grid, reporting with the fine error margin.
        guess = _analytic_guess(target, delta, q, steps)
        sigma, _ = _solve_smallest_sigma(
            lambda s: self.epsilon(
                s, q, steps, delta, eps_error=self.coarse_eps_error,
                report_eps_error=self.eps_error,
            ),
            target, 2e-3, guess, 0.5,
        )
        return sigma, 1e-3


@register
class RDPAccountant(Accountant):
    """Rényi DP of the subsampled Gaussian (opacus' analysis, Mironov et al. 2019),
    converted with the Balle et al. 2020 bound over an extended grid of orders."""

    name = "rdp"
    description = "Renyi DP (opacus RDP analysis, orders 1.1..1024, Balle et al. 2020 conversion)"
    fallback = None

    @staticmethod
    def _orders():
        return [1 + x / 10.0 for x in range(1, 100)] + list(range(11, 64)) + [
            64, 80, 96, 128, 160, 192, 256, 320, 384, 512, 768, 1024]

    def _rdp(self, sigma, q, steps):
        from opacus.accountants.analysis import rdp as _rdp

        orders = self._orders()
        return orders, _rdp.compute_rdp(q=q, noise_multiplier=sigma, steps=steps, orders=orders)

    def epsilon(self, sigma, q, steps, delta):
        import numpy as np

        orders, rdp = self._rdp(sigma, q, steps)
        a = np.asarray(orders, dtype=float)
        with np.errstate(all="ignore"):
            eps = rdp - (math.log(delta) + np.log(a)) / (a - 1) + np.log((a - 1) / a)
        if np.isnan(eps).all():
            raise AccountingError("rdp accountant returned NaN for all orders")
        return float(max(0.0, np.nanmin(eps)))

    def delta(self, sigma, q, steps, epsilon):
        import numpy as np

        orders, rdp = self._rdp(sigma, q, steps)
        a = np.asarray(orders, dtype=float)
        # δ = exp((α-1)(rdp-ε)) / α * (1-1/α)^(α-1)   (Balle et al. 2020, Prop. 12 / Canonne et al.)
        with np.errstate(all="ignore"):
            logd = (a - 1) * (rdp - epsilon) - np.log(a) + (a - 1) * np.log1p(-1 / a)
        return float(min(1.0, math.exp(min(0.0, float(np.nanmin(logd))))))


@register
class PLDAccountant(Accountant):
    """Privacy loss distributions with connect-the-dots discretisation (dp-accounting)."""

    name = "pld"
    description = (
        "privacy loss distributions, connect-the-dots, pessimistic (dp-accounting, "
        "value_discretization_interval=1e-4)"
    )
    fallback = None
    value_discretization_interval = 1e-4

    def _pld(self, sigma, q, steps, vdi=None):
        from dp_accounting.pld import privacy_loss_distribution as P

        try:
            base = P.from_gaussian_mechanism(
                standard_deviation=sigma,
                sampling_prob=q,
                value_discretization_interval=vdi or self.value_discretization_interval,
                use_connect_dots=True,
                pessimistic_estimate=True,
            )
            return base.self_compose(steps)
        except (ValueError, RuntimeError, FloatingPointError, MemoryError, OverflowError) as exc:
            raise AccountingError(f"dp-accounting PLD failed: {exc}") from exc

    def epsilon(self, sigma, q, steps, delta, vdi=None):
        return _finite_or_raise("pld", self._pld(sigma, q, steps, vdi).get_epsilon_for_delta(delta))

    def delta(self, sigma, q, steps, epsilon):
        d = _finite_or_raise("pld", self._pld(sigma, q, steps).get_delta_for_epsilon(epsilon))
        return min(1.0, max(0.0, d))

    def locate(self, target, delta, q, steps):
        # A coarse PLD (10x coarser grid) is ~10x cheaper and within ~1e-3 in ε.
        guess = _analytic_guess(target, delta, q, steps)
        sigma, _ = _solve_smallest_sigma(
            lambda s: self.epsilon(s, q, steps, delta, vdi=1e-3), target, 1e-2, guess, 0.5
        )
        return sigma, 0.01


# ---------------------------------------------------------------------------
# Root finding
# ---------------------------------------------------------------------------


def _solve_smallest_sigma(
    eps_fn: Callable[[float], float], target: float, tol: float, guess: float, spread: float
) -> tuple[float, float]:
    """Smallest σ with eps_fn(σ) <= target, to relative tolerance ``tol``.

    ``eps_fn`` must be non-increasing in σ.  Returns (σ_hi, eps_fn(σ_hi)) such
    that eps_fn(σ_hi) <= target and eps_fn(σ_hi/(1+tol)) > target (both were
    evaluated).  Works in (log σ, log ε) where ε is close to linear, placing
    pairs of points around the predicted root so that a good initial guess
    finishes in two evaluations.
    """
    lo: tuple[float, float] | None = None  # (log σ, ε) with ε > target
    hi: tuple[float, float] | None = None  # (log σ, ε) with ε <= target
    h = math.log1p(tol) * 0.45
    log_target = math.log(target)

    def evaluate(x: float) -> bool:
        nonlocal lo, hi
        e = eps_fn(math.exp(x))
        if e <= target:
            if hi is None or x < hi[0]:
                hi = (x, e)
            return True
        if lo is None or x > lo[0]:
            lo = (x, e)
        return False

    def y(e: float) -> float:
        return math.log(e) - log_target if 0 < e < math.inf else (50.0 if e > 0 else -50.0)

    x0 = math.log(guess)
    s = max(math.log1p(spread), h)
    if s <= h * 1.01:
        evaluate(x0 + h) and evaluate(x0 - h)
    else:
        evaluate(x0 + s) and evaluate(x0 - s)
    # Expand until bracketed.
    step = max(s, 0.25)
    while hi is None:
        x = lo[0] + step
        if x > math.log(MAX_SIGMA):
            raise AccountingError(
                f"target epsilon not reached even with noise_multiplier {MAX_SIGMA:g}"
            )
        evaluate(x)
        step *= 2
    step = max(s, 0.25)
    while lo is None:
        x = hi[0] - step
        if x < math.log(MIN_SIGMA):
            # Even a tiny σ meets the target; report the smallest σ we support.
            return math.exp(hi[0]), hi[1]
        evaluate(x)
        step *= 2
    # Refine.
    side_count = 0
    last_side = None
    for _ in range(200):
        xl, el = lo
        xh, eh = hi
        width = xh - xl
        if width <= math.log1p(tol):
            break
        yl, yh = y(el), y(eh)
        if yl > 40 or yh < -40 or side_count >= 2:
            r = 0.5 * (xl + xh)
            side_count = 0
        else:
            r = xl + width * yl / (yl - yh) if yl != yh else 0.5 * (xl + xh)
        margin = min(h, width / 4)
        if width <= 2 * h / 0.9:
            # One more point splits the bracket into two halves that are both small enough.
            went_hi = evaluate(0.5 * (xl + xh))
        else:
            a = min(max(r + h, xl + margin), xh - margin)
            went_hi = evaluate(a)
            if went_hi:
                b = min(max(a - 2 * h, xl + margin), a - margin)
                if b > lo[0]:
                    evaluate(b)
        side = "hi" if went_hi else "lo"
        side_count = side_count + 1 if side == last_side else 1
        last_side = side
    else:  # pragma: no cover - defensive
        raise AccountingError("noise multiplier search did not converge")
    return math.exp(hi[0]), hi[1]


# ---------------------------------------------------------------------------
# Disk cache
# ---------------------------------------------------------------------------


def cache_dir() -> Path:
    env = os.environ.get("EMPRIV_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "empriv" / "accounting"


def _library_versions() -> dict:
    from importlib import metadata

    out = {}
    for dist in ("prv-accountant", "dp-accounting", "opacus"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


def _cache_key(payload: dict) -> str:
    blob = json.dumps(
        {"version": CACHE_VERSION, "libs": _library_versions(), **payload}, sort_keys=True
    )
    return hashlib.sha256(blob.encode()).hexdigest()


def _cache_load(key: str) -> Calibration | None:
    path = cache_dir() / f"{key}.json"
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
        cal = Calibration(**data)
        if not (isinstance(cal.noise_multiplier, float) and cal.noise_multiplier > 0):
            raise ValueError("bad noise_multiplier")
        if not (isinstance(cal.epsilon, float) and cal.epsilon <= cal.target_epsilon):
            raise ValueError("bad epsilon")
        return cal
    except FileNotFoundError:
        return None
    except Exception as exc:  # corrupt entry: ignore, recompute, overwrite
        logger.warning("ignoring corrupt accounting cache entry %s (%s)", path, exc)
        return None


def _cache_store(key: str, cal: Calibration) -> None:
    directory = cache_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{key}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(cal.to_dict(), fh, sort_keys=True)
            os.replace(tmp, directory / f"{key}.json")
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
    except OSError as exc:
        logger.warning("could not write accounting cache in %s (%s)", directory, exc)


# ---------------------------------------------------------------------------
# Public functions
# ---------------------------------------------------------------------------


def _with_fallback(name: str, call: Callable[[Accountant], float]) -> tuple[float, str, str | None]:
    acc = ACCOUNTANTS[name]
    try:
        return call(acc), name, None
    except AccountingError as exc:
        if acc.fallback is None:
            raise
        reason = f"{name} failed: {exc}"
        logger.warning("%s; falling back to the %s accountant", reason, acc.fallback)
        value, used, _ = _with_fallback(acc.fallback, call)
        return value, used, reason


def epsilon_for(noise_multiplier, sample_rate, steps, delta, accountant="prv") -> float:
    """ε upper bound of T-fold Poisson-subsampled Gaussian with noise multiplier σ at δ."""
    sigma = _check_sigma(noise_multiplier)
    q = _check_sample_rate(sample_rate)
    t = _check_steps(steps)
    d = _check_delta(delta)
    _check_accountant(accountant)
    value, _, _ = _with_fallback(accountant, lambda a: a.epsilon(sigma, q, t, d))
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
    value, _, _ = _with_fallback(accountant, lambda a: a.delta(sigma, q, t, e))
    return value


def _calibrate_with(acc: Accountant, target, delta, q, steps, tol) -> tuple[float, float]:
    guess, spread = acc.locate(target, delta, q, steps)
    return _solve_smallest_sigma(
        lambda s: acc.epsilon(s, q, steps, delta), target, tol, guess, spread
    )


def calibrate_noise_multiplier(
    epsilon,
    delta,
    sample_rate,
    steps,
    accountant="prv",
    *,
    tolerance=1e-3,
    cache=True,
) -> Calibration:
    """Smallest noise multiplier σ whose ε upper bound at δ is <= ``epsilon``.

    σ is found to relative precision ``tolerance``: the returned σ satisfies
    ε(σ) <= epsilon and ε(σ / (1 + tolerance)) > epsilon.  If the requested
    accountant cannot answer (e.g. PRV with a tiny δ or very many steps), the
    fallback accountant is used, a warning is logged on logger
    ``empriv.privacy`` and the fact is recorded in the result.
    """
    target = _check_epsilon(epsilon)
    d = _check_delta(delta)
    q = _check_sample_rate(sample_rate)
    t = _check_steps(steps)
    _check_accountant(accountant)
    tol = _check_tolerance(tolerance)

    key = None
    if cache:
        key = _cache_key(
            {"epsilon": target, "delta": d, "sample_rate": q, "steps": t,
             "accountant": accountant, "tolerance": tol}
        )
        hit = _cache_load(key)
        if hit is not None:
            logger.debug("accounting cache hit %s", key)
            return hit

    (sigma, eps), used, reason = _with_fallback(
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
    if cache:
        _cache_store(key, cal)
    return cal


__all__ = [
    "ACCOUNTANTS",
    "Accountant",
    "AccountingError",
    "Calibration",
    "cache_dir",
    "calibrate_noise_multiplier",
    "delta_for",
    "epsilon_for",
    "register",
]
