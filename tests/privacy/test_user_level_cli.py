import json
import math
import subprocess
import sys

import pytest

from empriv.privacy import user_level as ul
from empriv.privacy.cli import main
from empriv.privacy.profiles import moments_accountant_epsilon, profiles


def test_naive_group_privacy_roundtrip():
    ue, ud = ul.naive_group_privacy(0.5, 1e-6, 4)
    assert ue == pytest.approx(2.0)
    assert ud == pytest.approx(1e-6 * math.expm1(2.0) / math.expm1(0.5))
    ee, ed = ul.example_level_for_user_level(ue, ud, 4)
    assert (ee, ed) == (pytest.approx(0.5), pytest.approx(1e-6))
    assert ul.naive_group_privacy(1.0, 1e-5, 1) == (1.0, 1e-5)
    with pytest.raises(ValueError, match=r"k: out of range \(got 0; allowed: an integer >= 1\)"):
        ul.naive_group_privacy(1.0, 1e-5, 0)


def test_group_k1_equals_user_wise():
    q, steps = 0.02, 50
    g = ul.calibrate_group_privacy(2.0, 1e-5, 1, q, steps)
    u = ul.calibrate_user_wise(2.0, 1e-5, 20, 1000, steps, accountant="pld", cache=False)
    assert u.sample_rate == pytest.approx(q)
    assert g.noise_multiplier == pytest.approx(u.noise_multiplier, rel=5e-3)


@pytest.mark.slow
def test_tight_group_default_grid():
    s = ul.calibrate_group_privacy(2.0, 1e-5, 5, 0.01, 200)
    assert ul.group_privacy_epsilon(s.noise_multiplier, 5, 0.01, 200, 1e-5) <= 2.0


def test_tight_not_above_naive_and_grows_with_k():
    q, steps, eps, delta = 0.01, 20, 2.0, 1e-5
    tight = [ul.calibrate_group_privacy(eps, delta, k, q, steps, tolerance=5e-3,
                                        value_discretization_interval=5e-3).noise_multiplier
             for k in (1, 2, 4)]
    assert tight[0] < tight[1] < tight[2]
    for k, s in zip((2, 4), tight[1:]):
        naive = ul.calibrate_group_privacy_naive(eps, delta, k, q, steps, cache=False).noise_multiplier
        assert s <= naive
    # the calibrated σ meets the user-level target
    assert ul.group_privacy_epsilon(tight[2], 4, q, steps, delta,
                                    value_discretization_interval=5e-3) <= eps


def test_profiles_pass_through_calibration_point():
    from empriv.privacy.accounting import calibrate_noise_multiplier

    cal = calibrate_noise_multiplier(2.0, 1e-5, 0.05, 32, cache=False)
    prof = profiles(cal.noise_multiplier, 0.05, 32, [1e-6, 1e-5, 1e-4], ("prv", "rdp", "pld"))
    assert prof["prv"][1] == pytest.approx(2.0, abs=1e-2)
    assert prof["prv"][0] > prof["prv"][1] > prof["prv"][2]  # ε decreases with δ
    for i in range(3):
        assert prof["rdp"][i] >= prof["prv"][i]
        assert prof["pld"][i] == pytest.approx(prof["prv"][i], abs=0.03)
    # moments-accountant closed form has the same decreasing shape
    assert prof["moments"][0] > prof["moments"][1] > prof["moments"][2]
    e, valid = moments_accountant_epsilon(1.0, 0.01, 1000, 1e-5)
    a = 1000 * 1e-4 / 0.99
    assert e == pytest.approx(a + 2 * math.sqrt(a * math.log(1e5)))


def test_cli_calibrate_text_and_json(capsys):
    assert main(["privacy", "calibrate", "--epsilon", "2", "--delta", "1e-4",
                 "--sample-rate", "0.05", "--steps", "32"]) == 0
    out = capsys.readouterr().out
    assert "noise_multiplier = 0.95" in out and "rdp" in out
    assert main(["privacy", "calibrate", "--epsilon", "2", "--delta", "1e-4",
                 "--sample-rate", "0.05", "--steps", "32", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["accountant"] == "prv" and data["steps"] == 32
    assert 0.95 < data["noise_multiplier"] < 0.96
    assert data["epsilons"]["prv"] <= 2.0 < data["epsilons"]["rdp"]


def test_cli_epsilon_profile_group(capsys):
    assert main(["privacy", "epsilon", "--noise-multiplier", "1.0", "--sample-rate", "0.01",
                 "--steps", "1000", "--delta", "1e-5", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["epsilons"]["prv"] == pytest.approx(1.838, abs=2e-3)
    assert main(["privacy", "profile", "--noise-multiplier", "1.0", "--sample-rate", "0.01",
                 "--steps", "100", "--deltas", "1e-6", "1e-5", "--accountants", "prv", "rdp"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == ["delta", "prv", "rdp", "moments"]
    assert len(out.splitlines()) == 3
    assert main(["privacy", "group", "--epsilon", "1", "--delta", "1e-6", "--k", "3", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["user_epsilon"] == pytest.approx(3.0)
    assert data["user_delta"] == pytest.approx(1e-6 * math.expm1(3) / math.expm1(1))


def test_cli_errors_exit_2(capsys):
    assert main(["privacy", "calibrate", "--epsilon", "-1", "--delta", "1e-6",
                 "--sample-rate", "0.02", "--steps", "10"]) == 2
    err = capsys.readouterr().err
    assert "epsilon must be > 0" in err and "Traceback" not in err
    assert main(["privacy", "calibrate", "--epsilon", "1", "--delta", "1e-6",
                 "--sample-rate", "0.02", "--steps", "10", "--accountant", "xyz"]) == 2
    assert "pld, prv, rdp" in capsys.readouterr().err


def test_cli_subprocess(tmp_path):
    r = subprocess.run([sys.executable, "-m", "empriv.privacy.cli", "privacy", "calibrate",
                        "--epsilon", "8", "--delta", "1e-4", "--sample-rate", "0.1",
                        "--steps", "16", "--json"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["epsilon"] <= 8
    r = subprocess.run([sys.executable, "-m", "empriv.privacy.cli", "privacy", "epsilon",
                        "--noise-multiplier", "0", "--sample-rate", "0.1", "--steps", "16",
                        "--delta", "1e-5"], capture_output=True, text=True)
    assert r.returncode == 2 and "noise_multiplier" in r.stderr and "Traceback" not in r.stderr
