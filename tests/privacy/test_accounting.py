import json
import logging
import math
import warnings

import pytest

from empriv.privacy import accounting as A
from empriv.privacy.accounting import (
    ACCOUNTANTS,
    calibrate_noise_multiplier,
    delta_for,
    epsilon_for,
)

# (epsilon, delta, q, T)
CFG = (4.0, 1e-6, 0.0227, 300)
SMALL = (2.0, 1e-4, 0.05, 32)


def test_registry_names():
    assert A.ACCOUNTANT_NAMES == ("prv", "rdp", "pld") == tuple(ACCOUNTANTS)
    for name, acc in ACCOUNTANTS.items():
        assert isinstance(acc, A.Accountant) and acc.name == name and acc.description and acc.libraries
        assert acc.fallback is None or acc.fallback in ACCOUNTANTS


def test_config_accountant_choices_are_the_registry():
    """config may not import privacy, so it spells the names out; they must be the registry's."""
    import typing

    from empriv.config import PrivacyParams

    choices = typing.get_args(PrivacyParams.model_fields["accountant"].annotation)
    assert set(choices) == set(A.ACCOUNTANT_NAMES)
    assert PrivacyParams().accountant in A.ACCOUNTANT_NAMES


def test_cli_choices_are_the_registry():
    from empriv.privacy import cli

    assert cli.ACCOUNTANT_NAMES is A.ACCOUNTANT_NAMES


def test_fast_prv_matches_prv_accountant_library():
    from prv_accountant import PoissonSubsampledGaussianMechanism, PRVAccountant

    for sigma, q, steps, delta in [(1.0, 0.02, 200, 1e-5), (0.9, 0.1, 32, 1e-4), (3.0, 0.5, 20, 1e-6)]:
        lib = PRVAccountant(
            prvs=[PoissonSubsampledGaussianMechanism(noise_multiplier=sigma, sampling_probability=q)],
            max_self_compositions=[steps], eps_error=0.01, delta_error=delta / 1000)
        upper = lib.compute_epsilon(delta=delta, num_self_compositions=[steps])[2]
        ours = epsilon_for(sigma, q, steps, delta, "prv")
        # Same algorithm; typically equal to ~1e-8.  At (0.9, 0.1, 32) the library's
        # estimate sits 7e-4 above ours and above dp-accounting's pessimistic PLD
        # (an upper bound on the truth), i.e. ours is the more accurate one there.
        assert ours == pytest.approx(upper, abs=1e-3)
        assert ours <= upper + 1e-7


def test_rdp_domain_quadrature_matches_opacus():
    import numpy as np
    from opacus.accountants.analysis import rdp

    orders = A._PRV_ORDERS
    for sigma, q in [(0.9, 0.02), (0.5, 1.0), (2.0, 0.3)]:
        ref = np.array(rdp.compute_rdp(q=q, noise_multiplier=sigma, steps=1, orders=orders))
        a = np.array(orders)
        ours = A._log_a_quadrature(q, sigma, a) / (a - 1)
        assert np.allclose(ours, ref, rtol=1e-6)


def test_prv_and_pld_sigma_agree_within_1pct():
    p = calibrate_noise_multiplier(*CFG, accountant="prv", cache=False)
    d = calibrate_noise_multiplier(*CFG, accountant="pld", cache=False)
    assert p.accountant == "prv" and d.accountant == "pld"
    assert abs(p.noise_multiplier / d.noise_multiplier - 1) < 0.01


def test_rdp_sigma_not_smaller_than_prv():
    p = calibrate_noise_multiplier(*CFG, accountant="prv", cache=False)
    r = calibrate_noise_multiplier(*CFG, accountant="rdp", cache=False)
    assert r.noise_multiplier >= p.noise_multiplier
    assert r.noise_multiplier / p.noise_multiplier > 1.01  # RDP is visibly looser here


@pytest.mark.parametrize("accountant", ["prv", "rdp", "pld"])
def test_calibrated_sigma_is_smallest(accountant):
    tol = 1e-3
    eps, delta, q, steps = SMALL
    cal = calibrate_noise_multiplier(eps, delta, q, steps, accountant, tolerance=tol, cache=False)
    assert cal.epsilon <= eps
    assert epsilon_for(cal.noise_multiplier, q, steps, delta, accountant) <= eps
    assert epsilon_for(cal.noise_multiplier * (1 - 2 * tol), q, steps, delta, accountant) > eps
    assert (cal.target_epsilon, cal.delta, cal.sample_rate, cal.steps) == (eps, delta, q, steps)


def test_sigma_monotone_in_steps_and_epsilon():
    s = [calibrate_noise_multiplier(2.0, 1e-5, 0.02, t, cache=False).noise_multiplier
         for t in (50, 200, 800)]
    assert s[0] < s[1] < s[2]
    s = [calibrate_noise_multiplier(e, 1e-5, 0.02, 200, cache=False).noise_multiplier
         for e in (1.0, 2.0, 4.0, 8.0)]
    assert s[0] > s[1] > s[2] > s[3]


@pytest.mark.parametrize("eps,delta,q,steps", [(2.0, 1e-5, 0.0512, 200), (8.0, 1e-6, 0.0512, 100)])
def test_agrees_with_opacus_get_noise_multiplier(eps, delta, q, steps):
    from opacus.accountants.utils import get_noise_multiplier

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = get_noise_multiplier(target_epsilon=eps, target_delta=delta, sample_rate=q,
                                   steps=steps, accountant="prv",
                                   epsilon_tolerance=1e-4 * eps)
    ours = calibrate_noise_multiplier(eps, delta, q, steps, cache=False).noise_multiplier
    assert abs(ours / ref - 1) < 0.003


def test_delta_for_inverts_epsilon_for():
    sigma, q, steps, delta = 1.0, 0.02, 200, 1e-5
    for acc in ("prv", "pld", "rdp"):
        e = epsilon_for(sigma, q, steps, delta, acc)
        d = delta_for(sigma, q, steps, e, acc)
        assert d <= delta * 1.01
        assert d >= delta * 0.5
        assert delta_for(sigma, q, steps, e + 0.5, acc) < d


def test_fallback_when_prv_raises(monkeypatch, caplog):
    def boom(self, *a, **k):
        raise A.AccountingError("forced failure")

    monkeypatch.setattr(type(ACCOUNTANTS["prv"]), "epsilon", boom)
    with caplog.at_level(logging.WARNING, logger="empriv.privacy"):
        cal = calibrate_noise_multiplier(*SMALL, cache=False)
    assert cal.accountant == "pld" and cal.requested_accountant == "prv"
    assert "forced failure" in cal.fallback_reason
    assert any("falling back" in r.message for r in caplog.records)
    ref = calibrate_noise_multiplier(*SMALL, accountant="pld", cache=False)
    assert cal.noise_multiplier == pytest.approx(ref.noise_multiplier)


def test_fallback_for_tiny_delta(caplog):
    # δ = 1e-14: PRV's discretisation error exceeds δ, so PRV cannot answer.
    with caplog.at_level(logging.WARNING, logger="empriv.privacy"):
        cal = calibrate_noise_multiplier(4.0, 1e-14, 0.05, 20, cache=False)
    assert cal.accountant == "pld"
    assert "delta" in cal.fallback_reason
    assert caplog.records
    assert epsilon_for(cal.noise_multiplier, 0.05, 20, 1e-14, "pld") <= 4.0


def test_no_fallback_normally():
    cal = calibrate_noise_multiplier(*SMALL, cache=False)
    assert cal.accountant == "prv" and cal.fallback_reason is None


def test_no_cache_by_default_and_cache_true_rejected(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    calibrate_noise_multiplier(*SMALL)
    assert list(tmp_path.rglob("*.json")) == []  # the library writes no cache anywhere unless given one
    with pytest.raises(ValueError, match="cache must be a CalibrationCache, a directory or None"):
        calibrate_noise_multiplier(*SMALL, cache=True)


def test_cache_stores_one_entry_and_hit_is_identical(cache, cache_dir):
    a = calibrate_noise_multiplier(*CFG, cache=cache)
    files = list(cache_dir.glob("*.json"))
    assert len(files) == 1
    entry = json.loads(files[0].read_text())
    assert entry["calibration"]["noise_multiplier"] == a.noise_multiplier
    assert entry["key"]["request"] == {"epsilon": 4.0, "delta": 1e-6, "sample_rate": 0.0227, "steps": 300,
                                       "accountant": "prv", "tolerance": 1e-3}
    assert entry["key"]["versions"] == A.code_versions()
    b = calibrate_noise_multiplier(*CFG, cache=str(cache_dir))  # a directory works as well
    assert a == b
    assert list(cache_dir.glob("*.json")) == files


def test_cache_key_depends_on_inputs(cache, cache_dir):
    calibrate_noise_multiplier(*SMALL, cache=cache)
    calibrate_noise_multiplier(*SMALL, accountant="rdp", cache=cache)
    calibrate_noise_multiplier(SMALL[0], SMALL[1], SMALL[2], SMALL[3] + 1, cache=cache)
    calibrate_noise_multiplier(*SMALL, tolerance=2e-3, cache=cache)
    assert len(list(cache_dir.glob("*.json"))) == 4


def test_corrupt_cache_entry_is_recomputed(cache, cache_dir, caplog):
    a = calibrate_noise_multiplier(*SMALL, cache=cache)
    (f,) = cache_dir.glob("*.json")
    f.write_text("{not json")
    with caplog.at_level(logging.WARNING, logger="empriv.privacy"):
        b = calibrate_noise_multiplier(*SMALL, cache=cache)
    assert a == b
    assert any(str(f) in r.getMessage() and "unreadable" in r.getMessage() for r in caplog.records)
    assert json.loads(f.read_text())["calibration"]["noise_multiplier"] == a.noise_multiplier


@pytest.mark.parametrize("kwargs,field", [
    (dict(epsilon=-1), "epsilon"),
    (dict(epsilon=0), "epsilon"),
    (dict(epsilon=math.inf), "epsilon"),
    (dict(delta=0), "delta"),
    (dict(delta=1), "delta"),
    (dict(sample_rate=0), "sample_rate"),
    (dict(sample_rate=1.5), "sample_rate"),
    (dict(steps=0), "steps"),
    (dict(steps=2.5), "steps"),
    (dict(accountant="foo"), "accountant"),
    (dict(tolerance=0), "tolerance"),
])
def test_invalid_inputs_rejected(kwargs, field):
    args = dict(epsilon=2.0, delta=1e-5, sample_rate=0.01, steps=100, accountant="prv")
    tol = kwargs.pop("tolerance", None)
    args.update(kwargs)
    with pytest.raises(ValueError, match=field) as info:
        if tol is None:
            calibrate_noise_multiplier(**args, cache=False)
        else:
            calibrate_noise_multiplier(**args, tolerance=tol, cache=False)
    if field == "accountant":
        assert "pld, prv, rdp" in str(info.value)


def test_invalid_sigma_rejected():
    with pytest.raises(ValueError, match="noise_multiplier must be > 0"):
        epsilon_for(-1.0, 0.01, 10, 1e-5)
    with pytest.raises(ValueError, match="delta"):
        epsilon_for(1.0, 0.01, 10, 2.0)


def test_module_import_is_lean():
    import subprocess
    import sys

    code = ("import sys, empriv.privacy.accounting, empriv.privacy.cli; "
            "bad = [m for m in ('numpy', 'scipy', 'opacus', 'dp_accounting', 'prv_accountant', 'torch') "
            "if m in sys.modules]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
