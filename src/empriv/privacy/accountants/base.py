"""The interface every accountant implements, and the memory guard they share.

An accountant takes a dp-accounting ``DpEvent`` (what a run released, :mod:`empriv.privacy.events`):
``epsilon(event, delta)``, ``delta(event, epsilon)``, ``epsilons(event, deltas)``. Every accountant accounts
T-fold composition of the Poisson-subsampled Gaussian mechanism (DP-SGD with noise multiplier σ and sampling
rate q, :func:`~empriv.privacy.events.dp_sgd_event`; ``NoOp`` parts release nothing, a ``NonPrivate`` part gives
ε = ∞ and δ = 1): the base class maps such an event onto the accountant's (σ, q, T) code
(``epsilon_dp_sgd`` …), so the numbers are those of (σ, q, T), bit for bit. An accountant that takes more
events says so in ``supported_events`` and overrides the three methods; any other event raises
:class:`UnsupportedEventError` naming the accountant and what it takes. Accountants are stateless.
Upper bounds only; when the method cannot answer it raises :class:`AccountingError` (one line),
never returns a silently wrong number, and ``fallback`` names the accountant to ask instead.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Sequence
from typing import ClassVar

from empriv.privacy.errors import AccountingError, UnsupportedEventError
from empriv.privacy.events import NotSubsampledGaussian, SubsampledGaussian, as_subsampled_gaussian

#: Largest working memory an accountant may allocate for one evaluation (bytes). Every numerical
#: accountant estimates its arrays before allocating them and refuses beyond this bound.
MEMORY_LIMIT_BYTES = 2 * 2**30


class Accountant(abc.ABC):
    """ε(δ) and δ(ε) upper bounds of a DpEvent; every accountant takes T-fold Poisson-subsampled Gaussian
    composition."""

    #: registry name (``privacy.accountant`` in params.yaml)
    name: ClassVar[str] = ""
    #: one line for metrics and docs: the method and its settings
    description: ClassVar[str] = ""
    #: the DpEvents it accounts, in words (its UnsupportedEventError quotes it)
    supported_events: ClassVar[str] = (
        "T-fold compositions of one Poisson-subsampled Gaussian (SelfComposed(PoissonSampled(Gaussian))), "
        "with NoOp and NonPrivate parts")
    #: accountant used when this one raises AccountingError (None: the error propagates)
    fallback: ClassVar[str | None] = None
    #: distributions whose code computes the numbers (their versions key the calibration cache)
    libraries: ClassVar[tuple[str, ...]] = ()

    # ------------------------------------------------------------------ events
    def subsampled_gaussian(self, event) -> SubsampledGaussian | None:
        """(σ, q, T) of an event this accountant can account as DP-SGD, None if it has a NonPrivate part;
        :class:`UnsupportedEventError` otherwise."""
        try:
            return as_subsampled_gaussian(event)
        except NotSubsampledGaussian as exc:
            raise self.unsupported(event, str(exc)) from None

    def unsupported(self, event, what: str | None = None) -> UnsupportedEventError:
        return UnsupportedEventError(
            f"the {self.name} accountant does not support {what or type(event).__name__} "
            f"(in {type(event).__name__}); it accounts {self.supported_events}")

    def epsilon(self, event, delta: float) -> float:
        """ε upper bound at δ of the DpEvent (∞ with a NonPrivate part, 0 if nothing is released)."""
        m = self.subsampled_gaussian(event)
        if m is None:
            return math.inf
        if m.steps == 0:
            return 0.0
        return self.epsilon_dp_sgd(m.noise_multiplier, m.sample_rate, m.steps, delta)

    def delta(self, event, epsilon: float) -> float:
        """δ upper bound at ε of the DpEvent (1 with a NonPrivate part, 0 if nothing is released)."""
        m = self.subsampled_gaussian(event)
        if m is None:
            return 1.0
        if m.steps == 0:
            return 0.0
        return self.delta_dp_sgd(m.noise_multiplier, m.sample_rate, m.steps, epsilon)

    def epsilons(self, event, deltas: Sequence[float]) -> list[float]:
        """ε at each δ (a privacy profile) of the DpEvent."""
        m = self.subsampled_gaussian(event)
        if m is None or m.steps == 0:
            return [math.inf if m is None else 0.0 for _ in deltas]
        return self.epsilons_dp_sgd(m.noise_multiplier, m.sample_rate, m.steps, deltas)

    # ------------------------------------------------------------------ T-fold Poisson-subsampled Gaussian
    @abc.abstractmethod
    def epsilon_dp_sgd(self, sigma: float, q: float, steps: int, delta: float) -> float:
        """ε upper bound at δ of T-fold Poisson-subsampled Gaussian (σ, q)."""

    @abc.abstractmethod
    def delta_dp_sgd(self, sigma: float, q: float, steps: int, epsilon: float) -> float:
        """δ upper bound at ε of T-fold Poisson-subsampled Gaussian (σ, q)."""

    def epsilons_dp_sgd(self, sigma: float, q: float, steps: int, deltas: Sequence[float]) -> list[float]:
        """ε at each δ; accountants that compose once for all δ override it."""
        return [self.epsilon_dp_sgd(sigma, q, steps, d) for d in deltas]

    def locate(self, target: float, delta: float, q: float, steps: int, tol: float):
        """Cheap accurate estimate (σ*, d log ε / d log σ) of the calibration root of the DP-SGD family
        σ → T-fold Poisson-subsampled Gaussian (σ, q), or None."""
        return None


def guard_memory(accountant: str, what: str, points: float, bytes_per_point: float,
                 sigma: float, q: float, steps: int) -> None:
    """Raise AccountingError (one line) if ``points`` grid points would need more than
    :data:`MEMORY_LIMIT_BYTES`; call before allocating."""
    need = points * bytes_per_point
    if not math.isfinite(need) or need > MEMORY_LIMIT_BYTES:
        raise AccountingError(
            f"{accountant} accountant: {what} would need {points:.3g} grid points (~{need / 2**30:.3g} GiB, "
            f"limit {MEMORY_LIMIT_BYTES / 2**30:.3g} GiB) at noise_multiplier={sigma:.4g}, sample_rate={q:.4g}, "
            f"steps={steps}; a noise multiplier this small means an enormous epsilon"
        )


def finite_or_raise(accountant: str, value) -> float:
    if value is None or math.isnan(value):
        raise AccountingError(f"{accountant} accountant returned NaN")
    return float(value)


__all__ = ["MEMORY_LIMIT_BYTES", "Accountant", "AccountingError", "UnsupportedEventError", "finite_or_raise",
           "guard_memory"]
