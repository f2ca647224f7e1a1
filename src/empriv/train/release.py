"""The DpEvent a training run releases, from its params (the builders are :mod:`empriv.privacy.events`).

:func:`release_event` says, for one run, which builder describes its release: the privacy unit first (Group
privacy: a mixture of Gaussians over Bin(k, q); User-wise: DP-SGD over users), then the training method
(DPZero and DP-Flat with their un-noised parts, everything else DP-SGD). :func:`release_record` is the metadata
field every run records next to its σ and ε. The run's ε fields (``epsilon_calibrated``, ``epsilon_prv`` …)
account the event's noisy steps (:func:`empriv.privacy.events.accounted_part`); a ``NonPrivate`` part of the
event is what the run's caveats list.

One place per method for now; with a registry of training methods each method supplies its own event here.
"""

from __future__ import annotations

from empriv.config import Params, RunConfig


def release_event(params: Params, run: RunConfig, *, noise_multiplier: float, sample_rate: float):
    """The DpEvent of ``run`` trained with noise multiplier σ (ignored when the run is not private) at sampling rate
    q (of records, or of users for a User-wise unit)."""
    from empriv.privacy import events

    sigma = noise_multiplier if run.private else None
    unit = run.privacy_unit
    if unit.method == "group":
        return events.group_privacy_event(sigma, unit.k, sample_rate, run.steps)
    if unit.method is not None:  # userwise: the sampling rate is of users
        return events.dp_sgd_event(sigma, sample_rate, run.steps)
    t = params.train
    if t.method == "dpzero":
        z = t.dpzero
        return events.dpzero_event(sigma, sample_rate, run.steps, kd_data=z.kd_data if z.kd else None,
                                   nor_steps=z.nor_steps)
    if t.method == "prefix" and t.dpflat.enabled:
        f = t.dpflat
        return events.dpflat_event(
            sigma, sample_rate, run.steps,
            elimination_data=f.elimination_data if f.layer_elimination else None,
            kd_data=f.kd_data if f.kd else None, nor_steps=f.nor_steps if f.kd else 0,
            awp_variant=f.awp_variant if f.awp else None, awp_steps=f.awp_steps)
    return events.dp_sgd_event(sigma, sample_rate, run.steps)


def release_record(params: Params, run: RunConfig, *, noise_multiplier: float, sample_rate: float) -> dict:
    """``{"dp_event": <the event as a plain dict>}`` (:func:`empriv.privacy.events.event_to_dict`)."""
    from empriv.privacy.events import event_to_dict

    return {"dp_event": event_to_dict(release_event(params, run, noise_multiplier=noise_multiplier,
                                                    sample_rate=sample_rate))}


__all__ = ["release_event", "release_record"]
