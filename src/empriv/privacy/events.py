"""What a training run released, as a dp-accounting ``DpEvent`` (the mechanism documented by data).

One builder per kind of release; every run records its event (:func:`event_to_dict`) next to its σ and ε, and
the accountants (:mod:`empriv.privacy.accountants`) take events. The events are stated for the run's privacy
unit under add/remove adjacency, with clip norm C = 1 (σ is the noise multiplier: noise std / sensitivity):

* **DP-SGD, record level** (:func:`dp_sgd_event`): T steps of the Gaussian mechanism on a Poisson sample of
  rate q, ``SelfComposed(PoissonSampled(q, Gaussian(σ)), T)``.
* **Group privacy** (:func:`group_privacy_event`): the same record-level DP-SGD seen by a user with k records:
  the user's records in a step are Bin(k, q), so one step is a mixture of Gaussians with sensitivities 0..k
  (probabilities Bin(k, q)); ``SelfComposed(MixtureOfGaussians(σ, 0..k, Bin(k, q)), T)``. Recorded for the tight
  and the naive accounting alike (the naive one bounds the same release more loosely, by group privacy).
* **User-wise DP-SGD** (:func:`user_wise_event`): users are sampled (q = users per step / users) and each
  contributes one clipped gradient: DP-SGD's event over users.
* **DPZero** (:func:`dpzero_event`): per step one scalar Σ clip_C(d_i) + N(0, σ²C²) over the Poisson sample,
  sensitivity C: ``Gaussian(σ)`` (a Gaussian's privacy depends on std / sensitivity only, not on dimension),
  so the steps are DP-SGD's event. The direction z is public randomness (no event). With KD, θ_nor trained by
  MeZO without noise: ``NonPrivate`` on the private data, ``NoOp`` on the public split.
* **DP-Flat** (:func:`dpflat_event`): the T noisy DP-Adam steps (DP-SGD's event) composed with one part per
  enabled component, each ``NonPrivate`` when it reads the private data without noise and ``NoOp`` when it
  does not: layer elimination (sharpness from un-noised gradients of the elimination data), KD (w_nor trained
  without noise on the KD data; ``NoOp`` with zero steps: w_nor is the public initialisation), AWP (published:
  v from the un-noised batch gradient, ``NonPrivate``; strict: v from the last released gradient, post-
  processing, ``NoOp``). The KD gradient λ(w − w_nor)/‖w − w_nor‖ reads w and w_nor only (no part of its own).
* **Non-private runs** (ε = ∞): ``NonPrivate`` for the steps.

Monitoring outputs computed from the records without noise (the loss curve, the realised batch sizes, DPZero's
clipped fractions) are not part of a model's release and not in its event: each run lists them under
``unnoised_outputs``. A ``NonPrivate`` part makes the whole event's ε infinite (every accountant returns ε = ∞,
δ = 1 for it, as dp-accounting's do); the run's ε fields account :func:`accounted_part` — the event without its
``NoOp``/``NonPrivate`` parts — and its ``caveats`` name what the guarantee leaves out.

σ calibration searches over an event family (σ → event, e.g. ``lambda s: dp_sgd_event(s, q, T)``) with
empriv's own root finder (:mod:`empriv.privacy.calibration`). dp-accounting's ``mechanism_calibration``
(Brent's method over the same kind of family) was measured against it on the same PRV accountant: 8× slower
at the median (docs/timing.md, ``benchmarks/calibration.py`` column ``dpa``), so it is not used.

dp_accounting is imported lazily (inside the builders).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from empriv.checks import require_int
from empriv.privacy.checks import _check_sample_rate, _check_sigma, _check_steps

#: the only module whose classes :func:`event_from_dict` rebuilds (a record names classes; nothing else is imported)
EVENT_MODULE = "dp_accounting.dp_event"
#: where a part of a release may read the data: the private training records or the public split
DATA_SOURCES = ("private", "public")


def _events():
    from dp_accounting import dp_event

    return dp_event


def _check_source(name: str, value) -> str:
    if value not in DATA_SOURCES:
        raise ValueError(f"{name} must be one of {', '.join(DATA_SOURCES)}, got {value!r}")
    return value


# ----------------------------------------------------------------------------- builders


def non_private_event():
    """A release that is not differentially private (ε = ∞)."""
    return _events().NonPrivateDpEvent()


def dp_sgd_event(noise_multiplier, sample_rate, steps):
    """T steps of the Poisson-subsampled Gaussian mechanism (DP-SGD, noise multiplier σ, rate q); ``noise_multiplier``
    None: a non-private run."""
    if noise_multiplier is None:
        return non_private_event()
    e = _events()
    step = e.PoissonSampledDpEvent(_check_sample_rate(sample_rate), e.GaussianDpEvent(_check_sigma(noise_multiplier)))
    return e.SelfComposedDpEvent(step, _check_steps(steps))


def group_privacy_event(noise_multiplier, k, sample_rate, steps):
    """Record-level DP-SGD (rate q) seen by a user with k records: T-fold mixture of Gaussians with sensitivities
    0..k weighted Bin(k, q) (Ganesh 2024; the paper's App. B.3). Zero-probability sensitivities are dropped and the
    rest renormalised (what :func:`empriv.privacy.user_level.group_privacy_epsilon` has always accounted)."""
    import numpy as np
    from scipy.stats import binom

    k = require_int("k", k, 1)
    q = _check_sample_rate(sample_rate)
    t = _check_steps(steps)
    if noise_multiplier is None:
        return non_private_event()
    sigma = _check_sigma(noise_multiplier)
    probs = binom.pmf(np.arange(k + 1), k, q)
    keep = probs > 0
    sens = [float(s) for s, m in zip(range(k + 1), keep) if m]
    probs = [float(p) for p, m in zip(probs, keep) if m]
    probs = [p / sum(probs) for p in probs]
    e = _events()
    return e.SelfComposedDpEvent(e.MixtureOfGaussiansDpEvent(sigma, sens, probs), t)


def user_wise_event(noise_multiplier, users_per_step, n_users, steps):
    """User-wise DP-SGD: users sampled at rate users_per_step / n_users, one clipped gradient each (DP-SGD's
    event with the user as the unit)."""
    b = require_int("users_per_step", users_per_step, 1)
    n = require_int("n_users", n_users, b)
    return dp_sgd_event(noise_multiplier, b / n, steps)


def _with_parts(parts: list, steps_event):
    if not parts:
        return steps_event
    return _events().ComposedDpEvent([*parts, steps_event])


def _reads(source: str):
    e = _events()
    return e.NonPrivateDpEvent() if source == "private" else e.NoOpDpEvent()


def dpzero_event(noise_multiplier, sample_rate, steps, *, kd_data: str | None = None, nor_steps: int = 0):
    """DPZero: T noised scalars over Poisson samples (DP-SGD's event), after θ_nor for KD when ``kd_data`` is set
    (``NonPrivate`` if MeZO trained it on the private records for ``nor_steps`` > 0 steps, else ``NoOp``)."""
    parts = []
    if kd_data is not None:
        _check_source("kd_data", kd_data)
        parts.append(_reads(kd_data) if require_int("nor_steps", nor_steps, 0) > 0 else _events().NoOpDpEvent())
    return _with_parts(parts, dp_sgd_event(noise_multiplier, sample_rate, steps))


def dpflat_event(noise_multiplier, sample_rate, steps, *, elimination_data: str | None = None,
                 kd_data: str | None = None, nor_steps: int = 0, awp_variant: str | None = None,
                 awp_steps: int = 0):
    """DP-Flat: the T noisy DP-Adam steps (DP-SGD's event) composed, in this order, with a part for each enabled
    component (None: off): layer elimination on ``elimination_data``; KD's w_nor trained ``nor_steps`` steps on
    ``kd_data``; AWP (``awp_variant`` "published" or "strict") in the first ``awp_steps`` steps."""
    e = _events()
    parts = []
    if elimination_data is not None:
        parts.append(_reads(_check_source("elimination_data", elimination_data)))
    if kd_data is not None:
        _check_source("kd_data", kd_data)
        parts.append(_reads(kd_data) if require_int("nor_steps", nor_steps, 0) > 0 else e.NoOpDpEvent())
    if awp_variant is not None:
        if awp_variant not in ("published", "strict"):
            raise ValueError(f"awp_variant must be one of published, strict, got {awp_variant!r}")
        unnoised = awp_variant == "published" and require_int("awp_steps", awp_steps, 0) > 0
        parts.append(e.NonPrivateDpEvent() if unnoised else e.NoOpDpEvent())
    return _with_parts(parts, dp_sgd_event(noise_multiplier, sample_rate, steps))


# ----------------------------------------------------------------------------- reading events


def accounted_part(event):
    """``event`` without its ``NoOp`` and ``NonPrivate`` parts (a composition of one part is that part): what a run's
    ε fields account. None if nothing is left."""
    e = _events()
    if isinstance(event, (e.NoOpDpEvent, e.NonPrivateDpEvent)):
        return None
    if isinstance(event, e.ComposedDpEvent):
        kept = [p for p in (accounted_part(x) for x in event.events) if p is not None]
        if not kept:
            return None
        return kept[0] if len(kept) == 1 else e.ComposedDpEvent(kept)
    return event


def has_non_private_part(event) -> bool:
    e = _events()
    if isinstance(event, e.NonPrivateDpEvent):
        return True
    if isinstance(event, e.ComposedDpEvent):
        return any(has_non_private_part(x) for x in event.events)
    if isinstance(event, e.SelfComposedDpEvent):
        return event.count > 0 and has_non_private_part(event.event)
    return False


@dataclass(frozen=True)
class SubsampledGaussian:
    """T-fold composition of the Poisson-subsampled Gaussian mechanism: what the PRV and RDP accountants compute."""

    noise_multiplier: float  # σ
    sample_rate: float  # q (1: the Gaussian mechanism itself)
    steps: int  # T (0: nothing released)


class NotSubsampledGaussian(ValueError):
    """The event is not a composition of one Poisson-subsampled Gaussian (the accountant names itself when it
    re-raises this as :class:`~empriv.privacy.errors.UnsupportedEventError`)."""


def _name(event) -> str:
    return type(event).__name__


def as_subsampled_gaussian(event) -> SubsampledGaussian | None:
    """(σ, q, T) if ``event`` is T-fold composition of one Poisson-subsampled Gaussian mechanism — nested self-
    compositions multiply their counts, compositions of the same (σ, q) add them, ``NoOp`` parts release nothing, a
    bare ``Gaussian(σ)`` is q = 1 — or None if it has a ``NonPrivate`` part (ε = ∞). Anything else raises
    :class:`NotSubsampledGaussian`. Builds no new floats: σ and q are the event's own."""
    e = _events()
    if has_non_private_part(event):
        return None
    found: dict[tuple[float, float], int] = {}

    def walk(ev, count: int) -> None:
        if isinstance(ev, e.NoOpDpEvent):
            return
        if isinstance(ev, e.SelfComposedDpEvent):
            walk(ev.event, count * ev.count)
        elif isinstance(ev, e.ComposedDpEvent):
            for part in ev.events:
                walk(part, count)
        elif isinstance(ev, e.PoissonSampledDpEvent) and isinstance(ev.event, e.GaussianDpEvent):
            key = (ev.event.noise_multiplier, ev.sampling_probability)
            found[key] = found.get(key, 0) + count
        elif isinstance(ev, e.GaussianDpEvent):
            key = (ev.noise_multiplier, 1.0)
            found[key] = found.get(key, 0) + count
        elif isinstance(ev, e.PoissonSampledDpEvent):
            raise NotSubsampledGaussian(f"PoissonSampledDpEvent of {_name(ev.event)}")
        else:
            raise NotSubsampledGaussian(_name(ev))

    walk(event, 1)
    counted = {k: v for k, v in found.items() if v > 0}
    if len(counted) > 1:
        raise NotSubsampledGaussian(f"a composition of {len(counted)} different (noise multiplier, sampling "
                                    "probability) pairs")
    if not counted:
        return SubsampledGaussian(math.nan, math.nan, 0)
    (sigma, q), steps = next(iter(counted.items()))
    return SubsampledGaussian(sigma, q, steps)


# ----------------------------------------------------------------------------- records


def event_to_dict(event) -> dict:
    """A plain JSON-friendly dict of the event (dp-accounting's ``to_named_tuple()`` with its tuples as dicts and
    its sequences as lists): ``{"module_name": …, "class_name": …, <fields>}``."""

    def plain(value):
        if hasattr(value, "_asdict") and hasattr(value, "class_name"):
            return {k: plain(v) for k, v in value._asdict().items()}
        if isinstance(value, (list, tuple)):
            return [plain(v) for v in value]
        return value

    return plain(event.to_named_tuple())


def event_from_dict(record: dict):
    """The event of :func:`event_to_dict`'s dict; only classes of ``dp_accounting.dp_event`` are rebuilt."""
    e = _events()

    def build(value):
        if isinstance(value, dict):
            module, name = value.get("module_name"), value.get("class_name")
            cls = getattr(e, name, None) if module == EVENT_MODULE and isinstance(name, str) else None
            if not (isinstance(cls, type) and issubclass(cls, e.DpEvent)):
                raise ValueError(f"a DpEvent record must name a class of {EVENT_MODULE}, got {module!r}.{name!r}")
            return cls(**{k: build(v) for k, v in value.items() if k not in ("module_name", "class_name")})
        if isinstance(value, list):
            return [build(v) for v in value]
        return value

    return build(record)


__all__ = [
    "DATA_SOURCES",
    "EVENT_MODULE",
    "NotSubsampledGaussian",
    "SubsampledGaussian",
    "accounted_part",
    "as_subsampled_gaussian",
    "dp_sgd_event",
    "dpflat_event",
    "dpzero_event",
    "event_from_dict",
    "event_to_dict",
    "group_privacy_event",
    "has_non_private_part",
    "non_private_event",
    "user_wise_event",
]
