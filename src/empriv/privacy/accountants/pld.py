"""PLD accountant: privacy loss distributions with connect-the-dots discretisation (dp-accounting).

Memory guard: the single-step distribution has about (z/σ + 1/(2σ²) + |log(1-q)|)/Δ points
(z = 10 standard deviations of dp-accounting's default tail truncation, Δ the value discretisation
interval; twice that for q = 1), and the T-fold composition's length is what dp-accounting's own
Chernoff bound on the composed tails gives; both are checked before anything that size is built.
"""

from __future__ import annotations

import math

from empriv.privacy.accountants.base import Accountant, AccountingError, finite_or_raise, guard_memory
from empriv.privacy.search import _analytic_guess, _solve_smallest_sigma

_PLD_BYTES_PER_POINT = 96  # float64 pmf + complex128 FFT buffers (about 6 arrays of 16 bytes)
_TAIL_Z = 10.0  # dp-accounting truncates each step's Gaussian at log-mass -50, i.e. ~10 σ
_COMPOSE_TAIL_MASS = 1e-15  # dp-accounting's self_compose default


def single_step_points(sigma: float, q: float, vdi: float) -> float:
    """Upper estimate of the number of points of one step's PLD (within ~25% above dp-accounting's)."""
    if q >= 1:
        width = 2 * _TAIL_Z / sigma + 1 / (sigma * sigma)
    else:
        width = _TAIL_Z / sigma + 1 / (2 * sigma * sigma) + abs(math.log1p(-q))
    return 1.25 * width / vdi


def composed_points(base, steps: int) -> int:
    """Length of the T-fold composition of ``base`` (a dp-accounting PrivacyLossDistribution)."""
    from dp_accounting.pld import common
    from scipy import fft

    pmfs = [base._pmf_remove] if base._symmetric else [base._pmf_remove, base._pmf_add]
    most = 0
    for pmf in pmfs:
        probs = pmf.to_dense_pmf()._probs
        lo, hi = common.compute_self_convolve_bounds(probs, steps, _COMPOSE_TAIL_MASS)
        most = max(most, fft.next_fast_len(max(hi - lo + 1, len(probs))))
    return most


def mixture_of_gaussians_pld(event, steps: int, vdi: float):
    """T-fold composition of a ``MixtureOfGaussiansDpEvent`` (connect-the-dots, pessimistic; Group privacy's
    tight accounting, :func:`empriv.privacy.events.group_privacy_event`)."""
    from dp_accounting.pld import privacy_loss_distribution as P

    try:
        return P.from_mixture_gaussian_mechanism(
            standard_deviation=event.standard_deviation,
            sensitivities=list(event.sensitivities),
            sampling_probs=list(event.sampling_probs),
            value_discretization_interval=vdi,
            use_connect_dots=True,
        ).self_compose(steps)
    except (ValueError, RuntimeError, FloatingPointError, MemoryError) as exc:
        raise AccountingError(f"mixture-of-Gaussians PLD failed: {exc}") from exc


class _AccountantView:
    """A composed dp-accounting PLDAccountant seen through a PrivacyLossDistribution's two queries."""

    def __init__(self, accountant):
        self._accountant = accountant

    def get_epsilon_for_delta(self, delta):
        return self._accountant.get_epsilon(delta)

    def get_delta_for_epsilon(self, epsilon):
        return self._accountant.get_delta(epsilon)


class PLDAccountant(Accountant):
    """Privacy loss distributions with connect-the-dots discretisation (dp-accounting)."""

    name = "pld"
    description = (
        "privacy loss distributions, connect-the-dots, pessimistic (dp-accounting, "
        "value_discretization_interval=1e-4)"
    )
    supported_events = (
        "T-fold compositions of one Poisson-subsampled Gaussian (empriv's guarded construction), T-fold mixtures "
        "of Gaussians (Group privacy) and every other event dp-accounting's PLD accountant supports, with NoOp "
        "and NonPrivate parts")
    fallback = None
    libraries = ("dp-accounting", "numpy", "scipy")
    value_discretization_interval = 1e-4

    def _pld(self, sigma, q, steps, vdi=None):
        from dp_accounting.pld import privacy_loss_distribution as P

        vdi = vdi or self.value_discretization_interval
        guard_memory("pld", "one step's privacy loss distribution", single_step_points(sigma, q, vdi),
                     _PLD_BYTES_PER_POINT, sigma, q, steps)
        try:
            base = P.from_gaussian_mechanism(
                standard_deviation=sigma,
                sampling_prob=q,
                value_discretization_interval=vdi,
                use_connect_dots=True,
                pessimistic_estimate=True,
            )
            if steps > 1:
                guard_memory("pld", f"the {steps}-fold composition", composed_points(base, steps),
                             _PLD_BYTES_PER_POINT, sigma, q, steps)
            return base.self_compose(steps)
        except (ValueError, RuntimeError, FloatingPointError, MemoryError, OverflowError) as exc:
            if isinstance(exc, AccountingError):
                raise
            raise AccountingError(f"dp-accounting PLD failed: {exc}") from exc

    def epsilon_dp_sgd(self, sigma, q, steps, delta, vdi=None):
        return finite_or_raise("pld", self._pld(sigma, q, steps, vdi).get_epsilon_for_delta(delta))

    def epsilons_dp_sgd(self, sigma, q, steps, deltas):
        pld = self._pld(sigma, q, steps)  # one composition serves every δ
        return [finite_or_raise("pld", pld.get_epsilon_for_delta(d)) for d in deltas]

    def delta_dp_sgd(self, sigma, q, steps, epsilon):
        d = finite_or_raise("pld", self._pld(sigma, q, steps).get_delta_for_epsilon(epsilon))
        return min(1.0, max(0.0, d))

    # ------------------------------------------------------------------ other events
    def _event_pld(self, event, vdi):
        """The composed privacy loss of an event that is not DP-SGD (no NonPrivate part): T-fold mixture of
        Gaussians (empriv's own construction, unchanged) or, for anything else, dp-accounting's PLD accountant at
        the same grid. Returns an object with ``get_epsilon_for_delta`` and ``get_delta_for_epsilon``."""
        from dp_accounting import dp_event as E

        from empriv.privacy.events import accounted_part

        vdi = vdi or self.value_discretization_interval
        core = accounted_part(event)  # without its NoOp parts
        if isinstance(core, E.SelfComposedDpEvent) and isinstance(core.event, E.MixtureOfGaussiansDpEvent):
            return mixture_of_gaussians_pld(core.event, core.count, vdi)
        from dp_accounting.pld import pld_privacy_accountant

        acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=vdi)
        if not acc.supports(event):
            raise self.unsupported(event)
        try:
            acc.compose(event)
        except (ValueError, RuntimeError, FloatingPointError, MemoryError, OverflowError) as exc:
            raise AccountingError(f"dp-accounting PLD failed: {exc}") from exc
        return _AccountantView(acc)

    def _dispatch(self, event):
        """``(σ, q, T)`` if the event is DP-SGD's (or None: non-private), else ``False`` (another event)."""
        from empriv.privacy.events import NotSubsampledGaussian, as_subsampled_gaussian

        try:
            return as_subsampled_gaussian(event)
        except NotSubsampledGaussian:
            return False

    def epsilon(self, event, delta, vdi=None):
        m = self._dispatch(event)
        if m is False:
            return float(self._event_pld(event, vdi).get_epsilon_for_delta(delta))
        if m is None:
            return math.inf
        return 0.0 if m.steps == 0 else self.epsilon_dp_sgd(m.noise_multiplier, m.sample_rate, m.steps, delta, vdi)

    def epsilons(self, event, deltas):
        m = self._dispatch(event)
        if m is False:
            pld = self._event_pld(event, None)
            return [float(pld.get_epsilon_for_delta(d)) for d in deltas]
        if m is None or m.steps == 0:
            return [math.inf if m is None else 0.0 for _ in deltas]
        return self.epsilons_dp_sgd(m.noise_multiplier, m.sample_rate, m.steps, deltas)

    def delta(self, event, epsilon):
        m = self._dispatch(event)
        if m is False:
            return min(1.0, max(0.0, float(self._event_pld(event, None).get_delta_for_epsilon(epsilon))))
        if m is None:
            return 1.0
        return 0.0 if m.steps == 0 else self.delta_dp_sgd(m.noise_multiplier, m.sample_rate, m.steps, epsilon)

    def locate(self, target, delta, q, steps, tol):
        # A 10x coarser PLD grid is ~10x cheaper and within ~1e-3 in ε.
        _, _, root, slope = _solve_smallest_sigma(
            lambda s: self.epsilon_dp_sgd(s, q, steps, delta, vdi=1e-3), target, tol / 2,
            _analytic_guess(target, delta, q, steps),
        )
        return root, slope
