"""Privacy profiles ε(δ) of DP-SGD for given (σ, q, T).

``epsilon_profile`` evaluates one accountant over a δ grid; ``moments_accountant_profile``
is the closed form of the moments accountant (Abadi et al. 2016): with the
second-order bound on the log moment, α(λ) <= T q² λ(λ+1) / ((1-q) σ²), minimising
(α(λ) + log(1/δ))/λ over λ gives

    ε_MA(δ) = a + 2 sqrt(a log(1/δ)),   a = T q² / ((1-q) σ²)   (a = T/(2σ²) if q = 1),

valid while the optimal λ = sqrt(log(1/δ)/a) satisfies λ <= σ² log(1/(qσ)) (Abadi's
Lemma 3 condition; ``valid`` flags it).  It has the same ~sqrt(log 1/δ) shape as the
numerical profiles but sits above them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from empriv.privacy.accounting import (
    ACCOUNTANTS,
    AccountingError,
    _check_accountant,
    _check_delta,
    _check_sample_rate,
    _check_sigma,
    _check_steps,
    epsilon_for,
)

#: default δ grid: 1e-10 .. 1e-1, 4 points per decade
DEFAULT_DELTAS: tuple[float, ...] = tuple(10.0 ** (-10 + i / 4) for i in range(37))


def epsilon_profile(noise_multiplier, sample_rate, steps, deltas: Sequence[float] = DEFAULT_DELTAS,
                    accountant: str = "prv") -> list[float]:
    """ε(δ) for each δ in ``deltas`` (upper bounds; PRV falls back to PLD where needed)."""
    s = _check_sigma(noise_multiplier)
    q = _check_sample_rate(sample_rate)
    t = _check_steps(steps)
    ds = [_check_delta(d, "deltas") for d in deltas]
    _check_accountant(accountant)
    if accountant == "pld":
        # One PLD serves every δ.
        pld = ACCOUNTANTS["pld"]._pld(s, q, t)
        return [float(pld.get_epsilon_for_delta(d)) for d in ds]
    return [epsilon_for(s, q, t, d, accountant) for d in ds]


def moments_accountant_epsilon(noise_multiplier, sample_rate, steps, delta) -> tuple[float, bool]:
    """Closed-form moments-accountant ε(δ) and whether Abadi's λ condition holds."""
    s = _check_sigma(noise_multiplier)
    q = _check_sample_rate(sample_rate)
    t = _check_steps(steps)
    d = _check_delta(delta)
    a = t / (2 * s * s) if q >= 1 else t * q * q / ((1 - q) * s * s)
    log_inv = math.log(1 / d)
    lam = math.sqrt(log_inv / a)
    valid = q >= 1 or (q * s < 1 and lam <= s * s * math.log(1 / (q * s)))
    return a + 2 * math.sqrt(a * log_inv), valid


def moments_accountant_profile(noise_multiplier, sample_rate, steps,
                               deltas: Sequence[float] = DEFAULT_DELTAS) -> list[float]:
    return [moments_accountant_epsilon(noise_multiplier, sample_rate, steps, d)[0] for d in deltas]


def profiles(noise_multiplier, sample_rate, steps, deltas: Sequence[float] = DEFAULT_DELTAS,
             accountants: Sequence[str] = ("prv", "rdp", "pld"), moments: bool = True) -> dict:
    """{accountant: [ε(δ) ...]} for several accountants (+ "moments" closed form)."""
    out: dict[str, list[float]] = {}
    for name in accountants:
        try:
            out[name] = epsilon_profile(noise_multiplier, sample_rate, steps, deltas, name)
        except AccountingError:  # pragma: no cover - reported by the caller
            out[name] = [math.nan] * len(deltas)
    if moments:
        out["moments"] = moments_accountant_profile(noise_multiplier, sample_rate, steps, deltas)
    return out


__all__ = [
    "DEFAULT_DELTAS",
    "epsilon_profile",
    "moments_accountant_epsilon",
    "moments_accountant_profile",
    "profiles",
]
