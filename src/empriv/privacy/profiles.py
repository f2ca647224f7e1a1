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

from empriv.privacy.accountants import ACCOUNTANT_NAMES, ACCOUNTANTS, check_accountant_name
from empriv.privacy.checks import (
    _check_delta,
    _check_epsilon,
    _check_sample_rate,
    _check_sigma,
    _check_steps,
)
from empriv.privacy.errors import AccountingError
from empriv.privacy.events import dp_sgd_event
from empriv.privacy.forward import with_fallback

#: default δ grid: 1e-10 .. 1e-1, 4 points per decade
DEFAULT_DELTAS: tuple[float, ...] = tuple(10.0 ** (-10 + i / 4) for i in range(37))


def epsilon_profile(noise_multiplier, sample_rate, steps, deltas: Sequence[float] = DEFAULT_DELTAS,
                    accountant: str = "prv") -> list[float]:
    """ε(δ) for each δ in ``deltas`` (upper bounds; PRV falls back to PLD where it cannot answer)."""
    s = _check_sigma(noise_multiplier)
    q = _check_sample_rate(sample_rate)
    t = _check_steps(steps)
    ds = [_check_delta(d, "deltas") for d in deltas]
    check_accountant_name(accountant)
    if not ds:
        return []
    event = dp_sgd_event(s, q, t)
    try:  # one call: PLD composes once for every δ
        return ACCOUNTANTS[accountant].epsilons(event, ds)
    except AccountingError:
        if ACCOUNTANTS[accountant].fallback is None:
            raise
    # the accountant cannot answer at some δ: per δ, with its fallback (logged)
    return [with_fallback(accountant, lambda a, d=d: a.epsilon(event, d))[0] for d in ds]


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


def calibrate_moments_accountant(epsilon, delta, sample_rate, steps) -> float:
    """σ at which the closed-form moments-accountant ε(δ) equals ``epsilon`` exactly.

    With L = log(1/δ), ε = a + 2·sqrt(a·L) gives sqrt(a) = sqrt(L + ε) − sqrt(L), and
    σ = q·sqrt(T / ((1 − q)·a)) (σ = sqrt(T / (2a)) when q = 1). Since the whole profile depends on
    (σ, q, T) only through a, every configuration calibrated to the same (ε, δ) has the same profile.
    """
    e = _check_epsilon(epsilon)
    q = _check_sample_rate(sample_rate)
    t = _check_steps(steps)
    d = _check_delta(delta)
    log_inv = math.log(1 / d)
    a = (math.sqrt(log_inv + e) - math.sqrt(log_inv)) ** 2
    return math.sqrt(t / (2 * a)) if q >= 1 else q * math.sqrt(t / ((1 - q) * a))


def profiles(noise_multiplier, sample_rate, steps, deltas: Sequence[float] = DEFAULT_DELTAS,
             accountants: Sequence[str] = ACCOUNTANT_NAMES, moments: bool = True) -> dict:
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


# ----------------------------------------------------------------------------- profiles of a cube
N_STAGE_DELTAS = 25  # δ grid of the cube's profiles: log-spaced over [δ*·1e-4, min(0.5, δ*·1e3)], plus δ*
#: columns of profiles.csv: the target (ε, δ*), the configuration (name, b, T, q = b/n), the accountant and its σ, and
#: one point (δ, ε(δ)) of the profile; the DVC plots split series by config and accountant and draw δ and σ on log axes
PROFILE_COLUMNS = ("target_epsilon", "target_delta", "config", "batch_size", "steps", "sample_rate", "accountant",
                   "noise_multiplier", "delta", "epsilon")


def cube_deltas(delta: float, n: int = N_STAGE_DELTAS) -> list[float]:
    """The δ grid of a cube's profiles around the target δ* (which it contains)."""
    d = _check_delta(delta)
    lo, hi = math.log10(d) - 4, math.log10(min(0.5, d * 1e3))
    return sorted({10 ** (lo + (hi - lo) * i / (n - 1)) for i in range(n)} | {d})


def cube_profiles(epsilons, batch_sizes, steps_list, n: int, delta: float, accountant: str = "prv", *,
                  cache=None) -> list[dict]:
    """ε(δ) rows for every finite (ε, b, T) of a cube, each calibrated to (ε, δ) with q = b/n.

    Rows: target_epsilon, target_delta, config, batch_size, steps, sample_rate, accountant, delta, epsilon,
    noise_multiplier. With the numerical
    accountant (``accountant``), all profiles of one target ε pass through (ε, δ) and cross there:
    same guarantee at δ, different curves elsewhere. Rows with accountant ``moments`` calibrate σ with
    the closed-form moments accountant instead: those profiles coincide (the research's Fig. 11).
    ``cache``: a calibration cache (see :func:`empriv.privacy.calibration.calibrate_noise_multiplier`).
    """
    from empriv.privacy.calibration import calibrate_noise_multiplier

    deltas = cube_deltas(delta)
    rows = []
    for eps in epsilons:
        if not math.isfinite(eps):
            continue
        for b in batch_sizes:
            for t in steps_list:
                q = min(1.0, b / n)
                cal = calibrate_noise_multiplier(eps, delta, q, t, accountant, cache=cache)
                config = {"target_epsilon": eps, "target_delta": delta, "config": f"b{b}-T{t}", "batch_size": b,
                          "steps": t, "sample_rate": q}
                for d, e in zip(deltas, epsilon_profile(cal.noise_multiplier, q, t, deltas, cal.accountant)):
                    rows.append({**config, "accountant": cal.accountant, "delta": d, "epsilon": e,
                                 "noise_multiplier": cal.noise_multiplier})
                sigma_ma = calibrate_moments_accountant(eps, delta, q, t)
                for d, e in zip(deltas, moments_accountant_profile(sigma_ma, q, t, deltas)):
                    rows.append({**config, "accountant": "moments", "delta": d, "epsilon": e, "noise_multiplier": sigma_ma})
    return rows


def profiles_csv(rows: list[dict]) -> str:
    """The rows as CSV text (columns :data:`PROFILE_COLUMNS`; δ, δ*, q, σ and ε in fixed formats)."""
    import csv
    import io

    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(PROFILE_COLUMNS), lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({**r, "delta": f"{r['delta']:.6e}", "epsilon": f"{r['epsilon']:.6f}",
                    "noise_multiplier": f"{r['noise_multiplier']:.6f}", "target_delta": f"{r['target_delta']:.6e}",
                    "sample_rate": f"{r['sample_rate']:.6e}"})
    return buf.getvalue()


def profile_figures(rows: list[dict], delta: float) -> dict[str, bytes]:
    """One PNG per target ε, ``{"eps<ε>.png": bytes}`` (left: the calibrated accountant's profiles, crossing
    at the target; right: the closed-form moments accountant's, which coincide)."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figures = {}
    for eps in sorted({r["target_epsilon"] for r in rows}):
        fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
        mine = [r for r in rows if r["target_epsilon"] == eps]
        numerical = next(r["accountant"] for r in mine if r["accountant"] != "moments")
        for ax, acc in zip(axes, (numerical, "moments")):
            sel = [r for r in mine if r["accountant"] == acc]
            for i, config in enumerate(sorted({r["config"] for r in sel})):
                pts = [r for r in sel if r["config"] == config]
                ax.plot([p["delta"] for p in pts], [p["epsilon"] for p in pts], color=f"C{i % 10}",
                        linewidth=3.5 - 0.6 * i if acc == "moments" else 1.6,
                        label=f"{config} (σ {pts[0]['noise_multiplier']:.3f})")
            ax.plot([delta], [eps], "k*", markersize=11, label=f"target (ε={eps:g}, δ={delta:.2g})")
            ax.set_xscale("log")
            ax.set_xlabel("δ")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=7)
            ax.set_title(f"{acc} accountant: profiles cross at the target" if acc != "moments"
                         else "closed-form moments accountant: profiles coincide", fontsize=9)
        axes[0].set_ylabel("ε(δ)")
        fig.suptitle(f"Privacy profiles of the configurations calibrated to ε = {eps:g}", fontsize=10)
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=120, bbox_inches="tight")
        plt.close(fig)
        figures[f"eps{eps:g}.png"] = buf.getvalue()
    return figures


__all__ = [
    "DEFAULT_DELTAS",
    "PROFILE_COLUMNS",
    "cube_deltas",
    "cube_profiles",
    "profile_figures",
    "profiles_csv",
    "epsilon_profile",
    "calibrate_moments_accountant",
    "moments_accountant_epsilon",
    "moments_accountant_profile",
    "profiles",
]
