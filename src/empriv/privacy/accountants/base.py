"""The interface every accountant implements, and the memory guard they share.

An accountant bounds the privacy of T-fold composition of the Poisson-subsampled Gaussian mechanism
(DP-SGD with noise multiplier σ and sampling rate q). It is stateless: every call gets (σ, q, T).
Upper bounds only; when the method cannot answer it raises :class:`AccountingError` (one line),
never returns a silently wrong number, and ``fallback`` names the accountant to ask instead.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Sequence
from typing import ClassVar

from empriv.privacy.errors import AccountingError

#: Largest working memory an accountant may allocate for one evaluation (bytes). Every numerical
#: accountant estimates its arrays before allocating them and refuses beyond this bound.
MEMORY_LIMIT_BYTES = 2 * 2**30


class Accountant(abc.ABC):
    """ε(δ) and δ(ε) upper bounds of T-fold Poisson-subsampled Gaussian composition."""

    #: registry name (``privacy.accountant`` in params.yaml)
    name: ClassVar[str] = ""
    #: one line for metrics and docs: the method and its settings
    description: ClassVar[str] = ""
    #: accountant used when this one raises AccountingError (None: the error propagates)
    fallback: ClassVar[str | None] = None
    #: distributions whose code computes the numbers (their versions key the calibration cache)
    libraries: ClassVar[tuple[str, ...]] = ()

    @abc.abstractmethod
    def epsilon(self, sigma: float, q: float, steps: int, delta: float) -> float:
        """ε upper bound at δ."""

    @abc.abstractmethod
    def delta(self, sigma: float, q: float, steps: int, epsilon: float) -> float:
        """δ upper bound at ε."""

    def epsilons(self, sigma: float, q: float, steps: int, deltas: Sequence[float]) -> list[float]:
        """ε at each δ (a privacy profile); accountants that compose once for all δ override it."""
        return [self.epsilon(sigma, q, steps, d) for d in deltas]

    def locate(self, target: float, delta: float, q: float, steps: int, tol: float):
        """Cheap accurate estimate (σ*, d log ε / d log σ) of the calibration root, or None."""
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


__all__ = ["MEMORY_LIMIT_BYTES", "Accountant", "AccountingError", "finite_or_raise", "guard_memory"]
