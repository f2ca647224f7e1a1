"""DpEvents of training releases (empriv.privacy.events) and accountants that take events.

Each builder is checked against a hand computation or dp-accounting's own PLD accountant on the event; PRV and RDP
on an event equal their (σ, q, T) code bit for bit; an event an accountant does not take raises its own error."""

from __future__ import annotations

import json
import math

import pytest
from dp_accounting import dp_event as E
from scipy.stats import norm

from empriv.privacy import events as ev
from empriv.privacy.accountants import ACCOUNTANTS
from empriv.privacy.accounting import calibrate_noise_multiplier, delta_of, epsilon_of
from empriv.privacy.errors import AccountingError, UnsupportedEventError

SIGMA, Q, T, DELTA = 1.1, 0.02, 60, 1e-5


def dp_accounting_pld(event, vdi=1e-4):
    from dp_accounting.pld import pld_privacy_accountant

    return pld_privacy_accountant.PLDAccountant(value_discretization_interval=vdi).compose(event)


# ----------------------------------------------------------------------------- builders


def test_dp_sgd_event_is_self_composed_poisson_sampled_gaussian():
    event = ev.dp_sgd_event(SIGMA, Q, T)
    assert event == E.SelfComposedDpEvent(E.PoissonSampledDpEvent(Q, E.GaussianDpEvent(SIGMA)), T)
    assert ev.dp_sgd_event(None, Q, T) == E.NonPrivateDpEvent()
    with pytest.raises(ValueError, match="sample_rate"):
        ev.dp_sgd_event(SIGMA, 0.0, T)
    with pytest.raises(ValueError, match="steps"):
        ev.dp_sgd_event(SIGMA, Q, 0)


def gaussian_delta(sigma: float, eps: float) -> float:
    """δ(ε) of the Gaussian mechanism with sensitivity 1 and std σ (Balle & Wang 2018), by hand."""
    return norm.cdf(1 / (2 * sigma) - eps * sigma) - math.exp(eps) * norm.cdf(-1 / (2 * sigma) - eps * sigma)


def test_one_full_batch_step_is_the_gaussian_mechanism_by_hand():
    """q = 1, T = 1: the Gaussian mechanism. The accountants are upper bounds: PRV's reports δ at ε − eps_error
    (0.01), PLD's is pessimistic on a 1e-4 grid; both sit between the exact δ(ε) and δ(ε − 0.02)."""
    sigma, eps = 1.5, 1.0
    event = ev.dp_sgd_event(sigma, 1.0, 1)
    for name in ("prv", "pld"):
        assert gaussian_delta(sigma, eps) * (1 - 1e-6) <= ACCOUNTANTS[name].delta(event, eps) \
            <= gaussian_delta(sigma, eps - 0.02)
    assert ACCOUNTANTS["rdp"].delta(event, eps) >= gaussian_delta(sigma, eps)  # RDP is looser


def test_dp_sgd_event_matches_dp_accountings_own_pld():
    event = ev.dp_sgd_event(SIGMA, Q, T)
    theirs = dp_accounting_pld(event).get_epsilon(DELTA)
    assert ACCOUNTANTS["pld"].epsilon(event, DELTA) == pytest.approx(theirs, rel=1e-3)
    assert ACCOUNTANTS["prv"].epsilon(event, DELTA) == pytest.approx(theirs, rel=0.02)


def test_group_privacy_event_by_hand_and_against_dp_accounting():
    event = ev.group_privacy_event(2.0, 2, 0.1, 50)
    mog = event.event
    assert event.count == 50 and isinstance(mog, E.MixtureOfGaussiansDpEvent) and mog.standard_deviation == 2.0
    assert mog.sensitivities == [0.0, 1.0, 2.0]
    assert mog.sampling_probs == pytest.approx([0.81, 0.18, 0.01], abs=1e-15)
    # k = 1: the mixture (1 - q) N(0, σ²) + q N(1, σ²) is the Poisson-subsampled Gaussian
    one = ev.group_privacy_event(2.0, 1, 0.1, 50).event
    assert one.sensitivities == [0.0, 1.0] and one.sampling_probs == pytest.approx([0.9, 0.1])
    # the PLD accountant on the event = dp-accounting's own PLD accountant on it (same grid)
    ours = ACCOUNTANTS["pld"].epsilon(event, DELTA, vdi=1e-3)
    assert ours == pytest.approx(dp_accounting_pld(event, 1e-3).get_epsilon(DELTA), rel=1e-6)
    from empriv.privacy.user_level import group_privacy_epsilon

    assert group_privacy_epsilon(2.0, 2, 0.1, 50, DELTA) == ours  # the library function is the event's ε, exactly


def test_user_wise_event_is_dp_sgd_over_users():
    assert ev.user_wise_event(SIGMA, 5, 250, T) == ev.dp_sgd_event(SIGMA, 5 / 250, T)
    with pytest.raises(ValueError, match="n_users"):
        ev.user_wise_event(SIGMA, 5, 4, T)


def test_dpzero_event_kd_parts():
    steps = ev.dp_sgd_event(SIGMA, Q, T)
    assert ev.dpzero_event(SIGMA, Q, T) == steps  # the scalar per step: Gaussian(σ) (sensitivity C, std σC)
    assert ev.dpzero_event(SIGMA, Q, T, kd_data="private", nor_steps=5) == E.ComposedDpEvent(
        [E.NonPrivateDpEvent(), steps])
    assert ev.dpzero_event(SIGMA, Q, T, kd_data="public", nor_steps=5) == E.ComposedDpEvent([E.NoOpDpEvent(), steps])
    assert ev.dpzero_event(SIGMA, Q, T, kd_data="private", nor_steps=0) == E.ComposedDpEvent(
        [E.NoOpDpEvent(), steps])
    with pytest.raises(ValueError, match="kd_data"):
        ev.dpzero_event(SIGMA, Q, T, kd_data="secret", nor_steps=5)


NP, NO = E.NonPrivateDpEvent(), E.NoOpDpEvent()


@pytest.mark.parametrize("switches, parts", [
    ({}, []),
    ({"elimination_data": "private"}, [NP]),
    ({"elimination_data": "public"}, [NO]),
    ({"kd_data": "private", "nor_steps": 50}, [NP]),
    ({"kd_data": "public", "nor_steps": 50}, [NO]),
    ({"kd_data": "private", "nor_steps": 0}, [NO]),
    ({"awp_variant": "published", "awp_steps": 3}, [NP]),
    ({"awp_variant": "published", "awp_steps": 0}, [NO]),
    ({"awp_variant": "strict", "awp_steps": 3}, [NO]),
    ({"elimination_data": "public", "kd_data": "private", "nor_steps": 50, "awp_variant": "strict", "awp_steps": 3},
     [NO, NP, NO]),
])
def test_dpflat_event_parts(switches, parts):
    steps = ev.dp_sgd_event(SIGMA, Q, T)
    event = ev.dpflat_event(SIGMA, Q, T, **switches)
    assert event == (E.ComposedDpEvent([*parts, steps]) if parts else steps)
    assert ev.accounted_part(event) == steps
    private = NP in parts
    assert ev.has_non_private_part(event) is private
    for acc in ACCOUNTANTS.values():
        value = acc.epsilon(event, DELTA)
        assert (value == math.inf) if private else (value == acc.epsilon(steps, DELTA))


def test_non_private_release_has_infinite_epsilon_for_every_accountant():
    event = ev.non_private_event()
    assert dp_accounting_pld(event).get_epsilon(DELTA) == math.inf
    for acc in ACCOUNTANTS.values():
        assert acc.epsilon(event, DELTA) == math.inf and acc.delta(event, 1.0) == 1.0
        assert acc.epsilons(event, [DELTA, 1e-3]) == [math.inf, math.inf]
    assert ev.accounted_part(ev.dpflat_event(None, Q, T, kd_data="public", nor_steps=5)) is None
    assert ACCOUNTANTS["prv"].epsilon(E.NoOpDpEvent(), DELTA) == 0.0  # nothing released


# ----------------------------------------------------------------------------- accountants take events


@pytest.mark.parametrize("name", ["prv", "rdp", "pld"])
def test_accountants_on_the_event_equal_sigma_q_t_bit_for_bit(name):
    acc = ACCOUNTANTS[name]
    event = ev.dp_sgd_event(SIGMA, Q, T)
    assert acc.epsilon(event, DELTA) == acc.epsilon_dp_sgd(SIGMA, Q, T, DELTA)
    assert acc.delta(event, 2.0) == acc.delta_dp_sgd(SIGMA, Q, T, 2.0)
    assert acc.epsilons(event, [1e-6, DELTA]) == acc.epsilons_dp_sgd(SIGMA, Q, T, [1e-6, DELTA])
    # the same mechanism written other ways: nested counts multiply, equal parts add, NoOp parts release nothing
    split = E.ComposedDpEvent([E.NoOpDpEvent(), E.SelfComposedDpEvent(ev.dp_sgd_event(SIGMA, Q, T // 2), 2)])
    assert acc.epsilon(split, DELTA) == acc.epsilon_dp_sgd(SIGMA, Q, T, DELTA)
    halves = E.ComposedDpEvent([ev.dp_sgd_event(SIGMA, Q, T // 2), ev.dp_sgd_event(SIGMA, Q, T - T // 2)])
    assert acc.epsilon(halves, DELTA) == acc.epsilon_dp_sgd(SIGMA, Q, T, DELTA)


def test_calibration_round_trips_through_the_event():
    cal = calibrate_noise_multiplier(3.0, DELTA, Q, T, "prv")
    event = ev.dp_sgd_event(cal.noise_multiplier, Q, T)
    # the search reports ε as exp(log(ε/target))·target: equal to the last bits
    assert epsilon_of(event, DELTA, "prv") == pytest.approx(cal.epsilon, rel=1e-13) and cal.epsilon <= 3.0
    assert epsilon_of(ev.dp_sgd_event(cal.noise_multiplier / 1.001, Q, T), DELTA, "prv") > 3.0
    assert delta_of(event, cal.epsilon, "prv") == pytest.approx(DELTA, rel=0.01)


@pytest.mark.parametrize("name", ["prv", "rdp"])
def test_an_unsupported_event_raises_the_accountants_error_without_fallback(name, caplog):
    mog = ev.group_privacy_event(2.0, 2, 0.1, 10)
    with pytest.raises(UnsupportedEventError, match=f"the {name} accountant does not support "
                                                    "MixtureOfGaussiansDpEvent.*Poisson-subsampled Gaussian"):
        ACCOUNTANTS[name].epsilon(mog, DELTA)
    with pytest.raises(UnsupportedEventError):  # prv's fallback (pld) is not asked: the caller's mistake
        epsilon_of(mog, DELTA, name)
    assert not issubclass(UnsupportedEventError, AccountingError)
    mixed = E.ComposedDpEvent([ev.dp_sgd_event(SIGMA, Q, T), ev.dp_sgd_event(2 * SIGMA, Q, T)])
    with pytest.raises(UnsupportedEventError, match="2 different"):
        ACCOUNTANTS[name].delta(mixed, 1.0)


def test_pld_takes_other_events_through_dp_accounting_and_refuses_the_rest():
    pld = ACCOUNTANTS["pld"]
    mixed = E.ComposedDpEvent([ev.dp_sgd_event(SIGMA, Q, T), ev.dp_sgd_event(2 * SIGMA, Q, T)])
    assert pld.epsilon(mixed, DELTA) == dp_accounting_pld(mixed).get_epsilon(DELTA)
    with pytest.raises(UnsupportedEventError, match="the pld accountant does not support"):
        pld.epsilon(E.UnsupportedDpEvent(), DELTA)


# ----------------------------------------------------------------------------- records


@pytest.mark.parametrize("event", [
    ev.dp_sgd_event(SIGMA, Q, T),
    ev.group_privacy_event(2.0, 3, 0.05, 20),
    ev.dpflat_event(SIGMA, Q, T, elimination_data="private", kd_data="public", nor_steps=4, awp_variant="strict"),
    ev.non_private_event(),
], ids=["dp-sgd", "group", "dpflat", "non-private"])
def test_records_are_plain_json_and_round_trip(event):
    record = ev.event_to_dict(event)
    assert json.loads(json.dumps(record)) == record
    assert record["module_name"] == ev.EVENT_MODULE
    assert ev.event_from_dict(json.loads(json.dumps(record))) == event


def test_a_record_rebuilds_only_dp_accounting_events():
    record = ev.event_to_dict(ev.dp_sgd_event(SIGMA, Q, T))
    record["event"]["module_name"] = "os"
    with pytest.raises(ValueError, match="must name a class of dp_accounting.dp_event"):
        ev.event_from_dict(record)
    with pytest.raises(ValueError, match="must name a class"):
        ev.event_from_dict({"module_name": ev.EVENT_MODULE, "class_name": "attr"})
