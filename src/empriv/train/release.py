"""The DpEvent a training run releases, from its params (the builders are :mod:`empriv.privacy.events`).

:func:`release_event` says, for one run, which builder describes its release: the privacy unit first (Group
privacy: a mixture of Gaussians over Bin(k, q); User-wise: DP-SGD over users), then the training method
(its ``release_event``: DPZero and DP-Flat with their un-noised parts, every other method DP-SGD). :func:`release_record` is the metadata
field every run records next to its σ and ε. The run's ε fields (``epsilon_calibrated``, ``epsilon_prv`` …)
account the event's noisy steps (:func:`empriv.privacy.events.accounted_part`); a ``NonPrivate`` part of the
event is what the run's caveats list.
"""

from __future__ import annotations

from empriv.config import Params, RunConfig


def release_event(params: Params, run: RunConfig, *, noise_multiplier: float, sample_rate: float, method=None):
    """The DpEvent of ``run`` trained with noise multiplier σ (ignored when the run is not private) at sampling rate
    q (of records, or of users for a User-wise unit). ``method``: the run's registered training method
    (:func:`empriv.train.methods.get_method`), which says what a record-level run releases; a run with a user-level
    unit needs none (the caller passes it: this module does not import the registry, whose loops import it)."""
    from empriv.privacy import events

    sigma = noise_multiplier if run.private else None
    unit = run.privacy_unit
    if unit.method == "group":
        return events.group_privacy_event(sigma, unit.k, sample_rate, run.steps)
    if unit.method is not None:  # userwise: the sampling rate is of users
        return events.dp_sgd_event(sigma, sample_rate, run.steps)
    if method is None:
        raise ValueError(f"release_event: run {run.name!r} has a record-level unit: pass its training method")
    return method.release_event(params, run, sigma=sigma, sample_rate=sample_rate, steps=run.steps)


def release_record(params: Params, run: RunConfig, *, noise_multiplier: float, sample_rate: float,
                   method=None) -> dict:
    """``{"dp_event": <the event as a plain dict>}`` (:func:`empriv.privacy.events.event_to_dict`)."""
    from empriv.privacy.events import event_to_dict

    return {"dp_event": event_to_dict(release_event(params, run, noise_multiplier=noise_multiplier,
                                                    sample_rate=sample_rate, method=method))}


__all__ = ["release_event", "release_record"]
