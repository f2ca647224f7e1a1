"""The DpEvent each training run records (empriv.train.release), and that a run's privacy metadata carries it."""

from __future__ import annotations

import math

import pytest
from dp_accounting import dp_event as E

from empriv.config import RunConfig, parse_params
from empriv.privacy import events as ev
from empriv.train.methods import get_method
from empriv.train.release import release_event

SIGMA, Q, T = 1.3, 0.05, 8


def _params(method=None, **train):
    return parse_params({
        "runtime": {"device": "cpu", "threads": 1, "wandb_mode": "disabled"},
        "data": {"n_train": 200},
        "base": {"n_positions": 128},
        "privacy": {"delta": 1e-5},
        "train": {"micro_batch_size": 32, "log_every": 1, **train},
        "cube": {"epsilon": [8, "inf"], "batch_size": [10], "steps": [T], "learning_rate": [0.01], "seed": [0],
                 "unit": ["record", "group-k3-random", "userwise-k3-random"], **({"method": [method]} if method else {})},
    })


def _flat(switches):
    """The params of a DP-Flat run (a train.variants entry: prefix tuning with these DP-Flat switches)."""
    return _params("flat", variants={"flat": {"method": "prefix", "dpflat": switches}}).for_method("flat")


def _event(params, unit="record", epsilon=8):
    return release_event(params, RunConfig(epsilon, 10, T, 0.01, 0, unit), noise_multiplier=SIGMA, sample_rate=Q,
                         method=get_method(params.train.method))


def test_record_level_methods_release_dp_sgd():
    for method in ("full", "lora", "prefix"):
        assert _event(_params().for_method(method)) == ev.dp_sgd_event(SIGMA, Q, T)


def test_a_non_private_run_releases_a_non_private_event():
    assert _event(_params(), epsilon=math.inf) == E.NonPrivateDpEvent()


def test_user_level_units():
    assert _event(_params(), "group-k3-random") == ev.group_privacy_event(SIGMA, 3, Q, T)
    assert _event(_params(), "userwise-k3-random") == ev.dp_sgd_event(SIGMA, Q, T)  # q is of users


def test_dpzero_and_its_kd():
    assert _event(_params().for_method("dpzero")) == ev.dp_sgd_event(SIGMA, Q, T)
    kd = _params("dpzero", dpzero={"kd": True, "kd_data": "private", "nor_steps": 5}).for_method("dpzero")
    assert _event(kd) == E.ComposedDpEvent([E.NonPrivateDpEvent(), ev.dp_sgd_event(SIGMA, Q, T)])


def test_dpflat_parts_follow_its_switches():
    strict = {"awp": True, "awp_variant": "strict", "awp_steps": 2, "layer_elimination": True, "target_layers": 1,
              "elimination_data": "public", "kd": True, "kd_data": "public", "nor_steps": 3}
    event = _event(_flat(strict))
    assert event == E.ComposedDpEvent([E.NoOpDpEvent()] * 3 + [ev.dp_sgd_event(SIGMA, Q, T)])
    published = {**strict, "awp_variant": "published", "elimination_data": "private"}
    event = _event(_flat(published))
    assert event == E.ComposedDpEvent([E.NonPrivateDpEvent(), E.NoOpDpEvent(), E.NonPrivateDpEvent(),
                                       ev.dp_sgd_event(SIGMA, Q, T)])
    assert ev.accounted_part(event) == ev.dp_sgd_event(SIGMA, Q, T)


def test_a_training_record_carries_its_event():
    """calibrate(...) is what train_model splats into the run's metrics: its dp_event is the calibrated σ's event."""
    from empriv.privacy.accounting import epsilon_of
    from empriv.train.finetune import calibrate

    params = _params()
    private = calibrate(params, RunConfig(8, 10, T, 0.01, 0, "record"), 200)
    event = ev.event_from_dict(private["dp_event"])
    assert event == ev.dp_sgd_event(private["noise_multiplier"], 10 / 200, T)
    assert epsilon_of(event, private["delta"], "prv") == private["epsilon_prv"]
    assert epsilon_of(event, private["delta"], "rdp") == private["epsilon_rdp"]
    public = calibrate(params, RunConfig(math.inf, 10, T, 0.01, 0, "record"), 200)
    assert ev.event_from_dict(public["dp_event"]) == E.NonPrivateDpEvent()


def test_user_level_calibration_records_the_users_event():
    from empriv.train.user_level import calibrate_user_level

    params = _params()
    out = calibrate_user_level(params, RunConfig(8, 10, T, 0.01, 0, "userwise-k3-random"), 40)
    assert ev.event_from_dict(out["dp_event"]) == ev.dp_sgd_event(out["noise_multiplier"], 10 / 40, T)


def test_spent_epsilons_come_from_the_event():
    from empriv.privacy.accounting import epsilon_for
    from empriv.train.finetune import spent_epsilons

    spent = spent_epsilons(SIGMA, Q, 1e-5, [1, 4, T], "rdp")
    assert spent == {t: epsilon_for(SIGMA, Q, t, 1e-5, "rdp") for t in (1, 4, T)}
    doubled = spent_epsilons(SIGMA, Q, 1e-5, [4], "rdp", event_at=lambda t: ev.dp_sgd_event(SIGMA, Q, 2 * t))
    assert doubled[4] == pytest.approx(spent[T])


def test_a_record_level_run_needs_its_method():
    params = _params()
    with pytest.raises(ValueError, match="pass its training method"):
        release_event(params, RunConfig(8, 10, T, 0.01, 0, "record"), noise_multiplier=SIGMA, sample_rate=Q)


def test_the_audit_ceiling_is_infinite_when_the_release_has_a_non_private_part():
    """audit_upper_bound reads the run's recorded dp_event: a DP-Flat run with published AWP (private data, no noise)
    has no finite ε, so the audit's ε̂ has no ceiling; the strict switches and plain DP-SGD keep the PRV ε of (σ, q, T)."""
    from empriv.pipeline.audit import audit_upper_bound
    from empriv.privacy.accounting import epsilon_for
    from empriv.privacy.events import event_to_dict

    run = RunConfig(8, 10, T, 0.01, 0, "record")
    strict = {"awp": True, "awp_variant": "strict", "awp_steps": 2, "layer_elimination": True, "target_layers": 1,
              "elimination_data": "public", "kd": True, "kd_data": "public", "nor_steps": 3}
    published = {**strict, "awp_variant": "published", "elimination_data": "private"}
    facts = {"noise_multiplier": SIGMA, "sample_rate": Q}
    finite = epsilon_for(SIGMA, Q, T, 1e-5, "prv")
    for params, expected in ((_params(), finite), (_flat(strict), finite), (_flat(published), math.inf)):
        metrics = {**facts, "dp_event": event_to_dict(_event(params))}
        assert audit_upper_bound(params, run, metrics, 1e-5) == expected
