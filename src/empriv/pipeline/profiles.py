"""profiles: ε(δ) privacy profiles of every finite (ε, b, T) of the cube → plots/profiles/.

Each configuration is calibrated to the run's (ε, δ) with q = b / data.n_train (through the project's
verified calibration cache, shared with train@), and its ε(δ) profile is drawn with the calibrated
accountant and with the closed-form moments accountant: ``profiles.csv`` (every row) and one
``eps<ε>.png`` per target ε, written together atomically (a failure leaves the old directory whole).

Params read: data.n_train, privacy.delta, privacy.delta_exponent, privacy.accountant, cube.epsilon,
cube.batch_size, cube.steps.
"""

from __future__ import annotations

import logging
from pathlib import Path

from empriv import paths
from empriv.config import Params

log = logging.getLogger("empriv.privacy")


def main(params: Params, out_dir: str | Path = paths.PROFILES_DIR,
         calibration_cache: str | Path | None = paths.CALIBRATION_CACHE) -> list[str]:
    """Write the cube's profiles into ``out_dir``; returns the file names written."""
    from empriv.io import atomic_dir
    from empriv.privacy.accounting import CalibrationCache
    from empriv.privacy.profiles import cube_profiles, profile_figures, profiles_csv

    n = params.data.n_train
    delta = params.delta_for(n)
    c = params.cube
    cache = CalibrationCache(calibration_cache) if calibration_cache is not None else None
    rows = cube_profiles(c.epsilon, c.batch_size, c.steps, n, delta, params.privacy.accountant, cache=cache)
    figures = profile_figures(rows, delta)
    with atomic_dir(out_dir) as tmp:
        (Path(tmp) / "profiles.csv").write_text(profiles_csv(rows), encoding="utf-8")
        for name, png in figures.items():
            (Path(tmp) / name).write_bytes(png)
    written = ["profiles.csv", *figures]
    log.info("profiles: %d configurations, %d rows, δ* = %.3g → %s", len({(r["target_epsilon"], r["config"])
             for r in rows}), len(rows), delta, out_dir)
    return written


def cli(argv: list[str] | None = None) -> None:
    """The stage's command line (``stages/profiles.py``, no arguments)."""
    from empriv.stage import run_without_arguments

    run_without_arguments(main, __doc__, argv)
