"""Privacy accounting for DP-SGD (Poisson-subsampled Gaussian mechanism) and the DpEvents of training runs: the public
API in one import.

This module only re-exports; the code lives by concern:

* :mod:`empriv.privacy.events` -- builders of the DpEvent each kind of training run releases, their records;
* :mod:`empriv.privacy.accountants` -- the registry ``ACCOUNTANTS`` and one module per accountant
  (``prv``, ``rdp``, ``pld``) behind the :class:`~empriv.privacy.accountants.base.Accountant` interface
  (``epsilon(event, delta)``, ``delta(event, epsilon)``);
* :mod:`empriv.privacy.forward` -- ``epsilon_for`` / ``delta_for`` (ε(δ), δ(ε) of DP-SGD at a given σ) and
  ``epsilon_of`` / ``delta_of`` (of any DpEvent), with fallbacks;
* :mod:`empriv.privacy.calibration` -- ``calibrate_noise_multiplier`` (smallest σ for a target ε) and
  ``verify_calibration``;
* :mod:`empriv.privacy.cache` -- ``CalibrationCache``, the verified calibration cache (no default location);
* :mod:`empriv.privacy.search` -- the root finder; :mod:`empriv.privacy.checks` -- input checks (import them
  from there).

Heavy libraries (numpy, scipy, opacus, dp_accounting) are imported lazily, so importing this is cheap.
"""

from __future__ import annotations

from empriv.privacy.accountants import (
    ACCOUNTANT_NAMES,
    ACCOUNTANTS,
    MEMORY_LIMIT_BYTES,
    NUMERICS_VERSION,
    Accountant,
    get_accountant,
)
from empriv.privacy.accountants.prv import _PRV_ORDERS, _log_a_quadrature  # noqa: F401  (tests, benchmarks)
from empriv.privacy.cache import CalibrationCache, code_versions
from empriv.privacy.calibration import (
    MAX_EPSILON,
    Calibration,
    _calibrate_with,  # noqa: F401
    calibrate_noise_multiplier,
    verify_calibration,
)
from empriv.privacy.errors import AccountingError, UnsupportedEventError
from empriv.privacy.forward import delta_for, delta_of, epsilon_for, epsilon_of
from empriv.privacy.search import MAX_SIGMA, MIN_SIGMA, _analytic_guess, _solve_smallest_sigma  # noqa: F401

__all__ = [
    "ACCOUNTANTS",
    "ACCOUNTANT_NAMES",
    "MAX_EPSILON",
    "MEMORY_LIMIT_BYTES",
    "NUMERICS_VERSION",
    "Accountant",
    "AccountingError",
    "Calibration",
    "CalibrationCache",
    "calibrate_noise_multiplier",
    "code_versions",
    "UnsupportedEventError",
    "delta_for",
    "delta_of",
    "epsilon_for",
    "epsilon_of",
    "get_accountant",
    "verify_calibration",
]
