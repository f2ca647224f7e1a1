"""Root finding for σ calibration: the smallest noise multiplier whose ε is at most a target.

The accountants use :func:`_solve_smallest_sigma` for a cheap coarse root (``locate``) and
:mod:`empriv.privacy.calibration` for the final one.
"""

from __future__ import annotations

import math
from typing import Callable

from empriv.privacy.errors import AccountingError

#: the σ range searched: below MIN_SIGMA no accountant answers within memory, above MAX_SIGMA ε ~ 0.
MIN_SIGMA = 1e-3
MAX_SIGMA = 1e4


def _analytic_guess(target: float, delta: float, q: float, steps: int) -> float:
    """Rough σ from the moments-accountant/Gaussian approximation (only a starting point)."""
    # ε ≈ q sqrt(T) sqrt(2 log(1.25/δ)) / σ for small q; full-batch Gaussian if q = 1.
    s = q * math.sqrt(steps) * math.sqrt(2 * math.log(1.25 / delta)) / target
    return min(max(s, 0.5), MAX_SIGMA / 2)


def _solve_smallest_sigma(
    eps_fn: Callable[[float], float],
    target: float,
    tol: float,
    guess: float,
    *,
    slope: float = -1.5,
    precise: bool = False,
) -> tuple[float, float, float, float]:
    """Smallest σ with eps_fn(σ) <= target, to relative tolerance ``tol``.

    ``eps_fn`` must be non-increasing in σ.  Works in x = log σ, y = log(ε/target),
    where y is nearly linear (``slope`` = initial guess of dy/dx).  Each new point is
    placed 0.45·log(1+tol) beyond the predicted root on the side not yet bracketed,
    so an accurate start (``precise=True``) finishes in two evaluations.

    Returns (σ_hi, ε(σ_hi), root estimate σ*, slope dy/dx) where ε(σ_hi) <= target and
    ε(σ_hi / (1 + tol)) > target, both evaluated.
    """
    H = math.log1p(tol)
    d = 0.45 * H
    log_t = math.log(target)
    lo: tuple[float, float] | None = None  # (x, y) with ε > target
    hi: tuple[float, float] | None = None  # (x, y) with ε <= target
    pts: list[tuple[float, float]] = []
    x_min, x_max = math.log(MIN_SIGMA), math.log(MAX_SIGMA)
    x_floor = -math.inf  # the largest log σ the accountant failed to answer (probes stay above it)

    def ev(x: float) -> float:
        nonlocal lo, hi
        e = eps_fn(math.exp(x))
        if e > 0 and math.isfinite(e):
            y = math.log(e) - log_t
        else:
            y = 50.0 if e > 0 else -50.0
        if e <= target:
            if hi is None or x < hi[0]:
                hi = (x, y)
        elif lo is None or x > lo[0]:
            lo = (x, y)
        pts.append((x, y))
        return y

    def secant_slope(p1, p2, default):
        if abs(p1[1]) < 40 and abs(p2[1]) < 40 and p1[0] != p2[0]:
            k = (p2[1] - p1[1]) / (p2[0] - p1[0])
            if k < 0:
                return min(max(k, -20.0), -0.1)
        return default

    x = math.log(guess) + (d if precise else 0.0)
    y = ev(x)
    k = slope
    # Phase A: bracket the root.
    while lo is None or hi is None:
        if len(pts) >= 2:
            k = secant_slope(pts[-2], pts[-1], k)
        r = x - y / k if abs(y) < 40 else x + (1.0 if y > 0 else -1.0)
        nx = r + d if y > 0 else r - d
        step = nx - x
        if abs(step) > 1.5:
            step = math.copysign(1.5, step)
        if y > 0:
            step = max(step, d)
        else:
            step = min(step, -d)
        x = max(x + step, 0.5 * (x + x_floor))  # never at or below a σ the accountant could not answer
        if x > x_max:
            raise AccountingError(
                f"target epsilon {target:g} not reached even with noise_multiplier {MAX_SIGMA:g}"
            )
        if x < x_min:
            # Even a tiny σ meets the target: report the smallest σ supported.
            return math.exp(hi[0]), math.exp(hi[1]) * target, math.exp(hi[0]), k
        try:
            y = ev(x)
        except AccountingError:
            # A probe below every σ known to meet the target that the accountant cannot answer (PRV: the privacy-loss
            # domain of a small σ outgrows float64) says nothing about the root, which lies above it: probe halfway
            # up to the smallest σ that met the target instead, and never below the failed one again. The result is
            # still bracketed by two answered evaluations. A failure with nothing answered above it is the
            # accountant's to report (the caller falls back).
            if hi is None:
                raise
            x_floor = x
            while True:
                x = 0.5 * (x_floor + hi[0])
                if hi[0] - x < H:
                    raise
                try:
                    y = ev(x)
                    break
                except AccountingError:
                    x_floor = x
    # Phase B: shrink the bracket [lo, hi] to width log(1+tol).
    same_side = 0
    last_hi = pts[-1][1] <= 0 if pts else True
    for _ in range(100):
        (xl, yl), (xh, yh) = lo, hi
        width = xh - xl
        if width <= H:
            break
        # Secant slope from the two most recent points (closest to the root), root
        # predicted from the bracket end nearest to it.
        k = secant_slope(pts[-2], pts[-1], k) if len(pts) >= 2 else k
        bx, by = lo if abs(yl) < abs(yh) else hi
        r = bx - by / k if abs(by) < 40 else 0.5 * (xl + xh)
        if width <= 2 * H:
            # Either outcome leaves a bracket <= H (kept off the ends for progress).
            c = min(max(r, xh - H, xl + 0.1 * width), xl + H, xh - 0.1 * width)
        elif same_side >= 3:
            c = 0.5 * (xl + xh)
        else:
            c = r - d if last_hi else r + d
            m = min(d / 4, width / 4)
            c = min(max(c, xl + m), xh - m)
        went_hi = ev(c) <= 0
        same_side = same_side + 1 if went_hi == last_hi else 0
        last_hi = went_hi
    else:  # pragma: no cover - defensive
        raise AccountingError("noise multiplier search did not converge")
    (xl, yl), (xh, yh) = lo, hi
    k = secant_slope(lo, hi, k)
    root = xl - yl / k if abs(yl) < 40 else xh
    return math.exp(xh), math.exp(yh) * target, math.exp(min(max(root, xl), xh)), k

