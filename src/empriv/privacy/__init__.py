"""Privacy accounting for DP fine-tuning (see docs/privacy.md).

Importing this package is cheap: numerical libraries are imported lazily.
"""

from empriv.privacy.accounting import (
    ACCOUNTANTS,
    AccountingError,
    Calibration,
    calibrate_noise_multiplier,
    delta_for,
    epsilon_for,
)

__all__ = [
    "ACCOUNTANTS",
    "AccountingError",
    "Calibration",
    "calibrate_noise_multiplier",
    "delta_for",
    "epsilon_for",
]
