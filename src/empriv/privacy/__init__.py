"""Privacy accounting for DP fine-tuning (see docs/accounting.md).

Importing this package is cheap: numerical libraries are imported lazily.
"""

from empriv.privacy.accounting import (
    ACCOUNTANT_NAMES,
    ACCOUNTANTS,
    AccountingError,
    Calibration,
    CalibrationCache,
    calibrate_noise_multiplier,
    delta_for,
    epsilon_for,
)

__all__ = [
    "ACCOUNTANTS",
    "ACCOUNTANT_NAMES",
    "AccountingError",
    "Calibration",
    "CalibrationCache",
    "calibrate_noise_multiplier",
    "delta_for",
    "epsilon_for",
]
