"""The accountants, one module each behind :class:`~empriv.privacy.accountants.base.Accountant`.

:data:`ACCOUNTANTS` is the single registry: every other list of accountant names (the CLI's choices,
``privacy.accountant`` in the typed config, the calibration cache's library versions) derives from it
or is checked against it by a test. Importing this package is cheap: numerical libraries load lazily.
"""

from __future__ import annotations

from empriv.privacy.accountants.base import MEMORY_LIMIT_BYTES, Accountant, AccountingError
from empriv.privacy.accountants.pld import PLDAccountant
from empriv.privacy.accountants.prv import PRVAccountant
from empriv.privacy.accountants.rdp import RDPAccountant

#: name -> accountant; the order is the order of documentation and of the CLI's output.
ACCOUNTANTS: dict[str, Accountant] = {a.name: a for a in (PRVAccountant(), RDPAccountant(), PLDAccountant())}

#: every accountant name, in registry order ("prv", "rdp", "pld").
ACCOUNTANT_NAMES: tuple[str, ...] = tuple(ACCOUNTANTS)

#: Bump when the numerical behaviour of any accountant changes (part of the calibration cache key).
NUMERICS_VERSION = "empriv-accounting-v3"  # v3: PRV characteristic function powered by squaring (σ moves ~1e-11)


def check_accountant_name(name) -> str:
    """``name`` if it names a registered accountant, else a one-line ``ValueError`` listing the known names."""
    if not isinstance(name, str) or name not in ACCOUNTANT_NAMES:
        known = ", ".join(sorted(ACCOUNTANT_NAMES))
        raise ValueError(f"accountant must be one of {known}, got {name!r}")
    return name


def get_accountant(name: str) -> Accountant:
    return ACCOUNTANTS[check_accountant_name(name)]


__all__ = [
    "ACCOUNTANTS",
    "ACCOUNTANT_NAMES",
    "MEMORY_LIMIT_BYTES",
    "NUMERICS_VERSION",
    "Accountant",
    "AccountingError",
    "PLDAccountant",
    "PRVAccountant",
    "RDPAccountant",
    "check_accountant_name",
    "get_accountant",
]
