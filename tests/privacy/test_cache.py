"""The verified calibration cache: every hit is re-checked by forward accounting before it is used."""

import json
import logging

import pytest

from empriv.privacy.cache import CalibrationCache, code_versions, entry_key
from empriv.privacy.calibration import Calibration, calibrate_noise_multiplier, verify_calibration
from empriv.privacy.forward import epsilon_for

# (ε, δ, q, T): the "ε = 8" of the incident, at a size that calibrates in about a second
EPS, DELTA, Q, T = 8.0, 1e-5, 0.05, 32
TOL = 1e-3


def _request(**over):
    req = {"epsilon": EPS, "delta": DELTA, "sample_rate": Q, "steps": T, "accountant": "prv", "tolerance": TOL}
    return {**req, **over}


@pytest.fixture(scope="module")
def fresh():
    return calibrate_noise_multiplier(EPS, DELTA, Q, T, tolerance=TOL)


@pytest.fixture(scope="module")
def plausible(fresh):
    """A valid calibration that differs from what a recomputation returns: σ = σ*·(1 + tol/2), with σ* the
    smallest σ to 1e-7, so σ meets ε and σ/(1+tol) does not — verification accepts it, and a result equal
    to it can only have come from the cache."""
    root = calibrate_noise_multiplier(EPS, DELTA, Q, T, tolerance=1e-7).noise_multiplier
    sigma = root * (1 + TOL / 2)
    assert sigma != fresh.noise_multiplier
    cal = Calibration(noise_multiplier=sigma, epsilon=epsilon_for(sigma, Q, T, DELTA, "prv"), target_epsilon=EPS,
                      delta=DELTA, sample_rate=Q, steps=T, accountant="prv", requested_accountant="prv",
                      fallback_reason=None)
    assert verify_calibration(cal, TOL) is None
    return cal


def test_tampered_entry_is_detected_warned_and_recomputed(cache, cache_dir, fresh, caplog):
    calibrate_noise_multiplier(EPS, DELTA, Q, T, tolerance=TOL, cache=cache)
    (path,) = cache_dir.glob("*.json")
    entry = json.loads(path.read_text())
    entry["calibration"]["noise_multiplier"] = 0.05  # the hand edit: ε_PRV of σ = 0.05 is in the hundreds
    path.write_text(json.dumps(entry))
    with caplog.at_level(logging.WARNING, logger="empriv.privacy"):
        cal = calibrate_noise_multiplier(EPS, DELTA, Q, T, tolerance=TOL, cache=cache)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(str(path) in m and "failed verification" in m and "0.05" in m for m in warnings), warnings
    assert cal == fresh
    assert 0.5 < cal.noise_multiplier < 2 and epsilon_for(cal.noise_multiplier, Q, T, DELTA) <= EPS
    # the entry is overwritten with the right σ, and the next call uses it without a warning
    assert json.loads(path.read_text())["calibration"]["noise_multiplier"] == fresh.noise_multiplier
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="empriv.privacy"):
        assert calibrate_noise_multiplier(EPS, DELTA, Q, T, tolerance=TOL, cache=cache) == fresh
    assert not caplog.records


def test_tampered_epsilon_field_is_detected(cache, cache_dir, fresh, caplog):
    calibrate_noise_multiplier(EPS, DELTA, Q, T, tolerance=TOL, cache=cache)
    (path,) = cache_dir.glob("*.json")
    entry = json.loads(path.read_text())
    entry["calibration"]["epsilon"] = 1.0  # σ untouched, recorded ε falsified
    path.write_text(json.dumps(entry))
    with caplog.at_level(logging.WARNING, logger="empriv.privacy"):
        assert calibrate_noise_multiplier(EPS, DELTA, Q, T, tolerance=TOL, cache=cache) == fresh
    assert any("recorded epsilon" in r.getMessage() for r in caplog.records)


def test_too_large_sigma_is_not_accepted(fresh, plausible):
    """σ far above the smallest one meets ε but is not what calibration promises (it wastes utility)."""
    big = Calibration(**{**plausible.to_dict(), "noise_multiplier": plausible.noise_multiplier * 1.1,
                         "epsilon": epsilon_for(plausible.noise_multiplier * 1.1, Q, T, DELTA)})
    reason = verify_calibration(big, TOL)
    assert reason is not None and "not the smallest" in reason
    small = Calibration(**{**fresh.to_dict(), "noise_multiplier": fresh.noise_multiplier * 0.99})
    assert "above the target" in verify_calibration(small, TOL)


@pytest.mark.parametrize("field,value,reason", [
    ("accountant", "rdp", "not 'prv' or one of its fallbacks"),  # a looser accountant's σ is not this calibration
    ("accountant", "xyz", "unknown accountant"),
    ("noise_multiplier", "0.5", "not a finite number"),
    ("epsilon", None, "not a finite number"),
    ("noise_multiplier", 0.0, "not > 0"),
])
def test_malformed_calibration_is_rejected(plausible, field, value, reason):
    bad = Calibration(**{**plausible.to_dict(), field: value})
    assert reason in verify_calibration(bad, TOL)


def test_good_entry_is_used(cache, plausible, caplog):
    key = entry_key(_request(), code_versions())
    cache.store(key, plausible.to_dict())
    with caplog.at_level(logging.WARNING, logger="empriv.privacy"):
        cal = calibrate_noise_multiplier(EPS, DELTA, Q, T, tolerance=TOL, cache=cache)
    assert cal == plausible  # the cached σ, not a recomputed one
    assert not caplog.records


def test_entry_of_other_library_versions_is_not_used(cache, cache_dir, fresh, plausible, caplog):
    versions = code_versions()
    assert {"empriv", "numerics", "opacus", "dp-accounting", "numpy", "scipy"} <= set(versions)
    other = {**versions, "opacus": "0.0.1"}
    current, foreign = entry_key(_request(), versions), entry_key(_request(), other)
    assert cache.path(current) != cache.path(foreign)  # versions are part of the key
    for name in ("empriv", "numerics", "dp-accounting"):
        assert cache.path(entry_key(_request(), {**versions, name: "x"})) != cache.path(current)
    # an entry made with other versions, even when found under the current key's file name, is not used
    cache.store(foreign, plausible.to_dict())
    cache.path(foreign).rename(cache.path(current))
    with caplog.at_level(logging.WARNING, logger="empriv.privacy"):
        cal = calibrate_noise_multiplier(EPS, DELTA, Q, T, tolerance=TOL, cache=cache)
    assert cal == fresh and cal != plausible
    assert any(str(cache.path(current)) in r.getMessage() and "opacus" in r.getMessage() for r in caplog.records)
    stored = json.loads(cache.path(current).read_text())
    assert stored["key"]["versions"] == versions and stored["calibration"] == fresh.to_dict()


def test_entry_for_another_request_is_not_used(cache, fresh, plausible, caplog):
    """A file copied under another request's name is refused by its recorded key."""
    key = entry_key(_request(), code_versions())
    other = entry_key(_request(epsilon=4.0), code_versions())
    cache.store(key, plausible.to_dict())
    cache.path(key).rename(cache.path(other))
    with caplog.at_level(logging.WARNING, logger="empriv.privacy"):
        cal = calibrate_noise_multiplier(4.0, DELTA, Q, T, tolerance=TOL, cache=cache)
    assert cal.target_epsilon == 4.0 and cal.noise_multiplier > fresh.noise_multiplier
    assert any("epsilon" in r.getMessage() and str(cache.path(other)) in r.getMessage() for r in caplog.records)


def test_fallback_calibration_is_verified_with_the_accountant_that_made_it(cache, cache_dir):
    # δ = 1e-14: PRV cannot answer, PLD calibrates; the hit is re-accounted with PLD (it passes)
    a = calibrate_noise_multiplier(4.0, 1e-14, 0.05, 20, cache=cache)
    assert a.accountant == "pld" and a.requested_accountant == "prv"
    assert verify_calibration(a, 1e-3) is None
    assert calibrate_noise_multiplier(4.0, 1e-14, 0.05, 20, cache=cache) == a


def test_unwritable_cache_is_a_warning(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with caplog.at_level(logging.WARNING, logger="empriv.privacy"):
        cal = calibrate_noise_multiplier(2.0, 1e-4, 0.05, 32, cache=CalibrationCache(blocker / "cache"))
    assert cal.epsilon <= 2.0
    assert any("could not write calibration cache entry" in r.getMessage() for r in caplog.records)


def test_cache_directory_must_be_a_path():
    with pytest.raises(ValueError, match="cache directory must be a path"):
        CalibrationCache(3)
