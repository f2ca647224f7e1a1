"""The interface every training method implements, what it is given and returns, and the registry of methods by name.

A method (one module each in this package, as peft has one folder per tuner) is a :class:`TrainingMethod` registered
with :func:`register`:

- :meth:`~TrainingMethod.check` — the cross-field checks of a run that only this method has (before anything trains);
- :meth:`~TrainingMethod.prepare` — the trainable model built on the base (frozen parts frozen, adapters added);
- :meth:`~TrainingMethod.train` — its loop on a :class:`TrainingJob` (by default the standard DP-SGD loop of
  :mod:`empriv.train.dp`, or :mod:`empriv.train.user_level` for a user-level unit), returning :class:`Trained`;
- :meth:`~TrainingMethod.facts` — what a run records about the method; :meth:`~TrainingMethod.optimizer` the
  optimizer it records; :meth:`~TrainingMethod.needs_public_split` whether it reads the public split.

What config must know about a method without its code (its settings section, how it is saved, its virtual tokens…)
is its :class:`~empriv.config.methods.MethodTraits`: the shipped methods declare them in
:data:`empriv.config.methods.BUILTIN`; any other method passes them to :func:`register`.

No torch at import: the stages import the registry to ask a method what it is; the modules load torch when they train.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

from empriv.config import ConfigError, MethodTraits, Params, RunConfig, UnknownMethodError, method_traits
from empriv.config.methods import BUILTIN, declare, forget


@dataclass
class TrainingJob:
    """Everything a method's loop trains from: the prepared ``model``, the encoded records ``ids``/``mask`` [n, L]
    (canaries included), the run's ``privacy`` facts (σ, q, δ from calibration), its random ``streams``, the
    ``device``, ``on_step(step, loss, batch_size)`` for the curve, the encoded ``public`` split (ids, mask or
    Nones), the ``checkpoint`` (or None), and for a user-level unit its ``unit_data`` and the tokenizer's ``eos_id``."""

    params: Params
    run: RunConfig
    model: Any
    ids: Any
    mask: Any
    privacy: dict
    streams: Any
    device: Any
    on_step: Callable[[int, float, int], None]
    public: tuple = (None, None)
    checkpoint: Any = None
    unit_data: Any = None
    eos_id: int | None = None

    @property
    def noise_multiplier(self) -> float | None:
        """σ of a private run, None at ε = ∞."""
        return self.privacy["noise_multiplier"] if self.run.private else None


@dataclass
class Trained:
    """A method's loop's outcome: the trained ``model``, its :class:`~empriv.train.dp.TrainResult`, the user-level
    unit's facts, the method's own record entries (``extra``, recorded last), what touched private data without
    noise (``caveats``) and, when the model's trainable parameters are not what trained (DPZero's prompt beside a
    frozen base), the number that did."""

    model: Any
    result: Any
    unit_facts: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)
    caveats: list = field(default_factory=list)
    trainable_parameters: int | None = None


class TrainingMethod:
    """One training method. Subclasses implement :meth:`prepare`; the rest has defaults (the standard DP-SGD loop,
    the settings section recorded, ``train.optimizer``)."""

    name: ClassVar[str] = ""
    traits: ClassVar[MethodTraits] = MethodTraits()

    # ------------------------------------------------------------------ checks
    def check(self, params: Params, run: RunConfig, *, canaries=None) -> None:
        """Raise :class:`ConfigError` for a run this method cannot train (called before anything is computed)."""

    # ------------------------------------------------------------------ the trainable model
    def prepare(self, params: Params, base, *, init_seed: int):
        """The model to train, built on ``base`` (modified in place); ``init_seed`` seeds its initialisation."""
        raise NotImplementedError(f"training method {self.name!r} has no prepare()")

    # ------------------------------------------------------------------ the loop
    def train(self, job: TrainingJob) -> Trained:
        """The standard DP-SGD loop (:func:`empriv.train.dp.dp_finetune`), or the user-level one for a user unit."""
        if job.unit_data is None:
            from empriv.train.dp import dp_finetune

            result = dp_finetune(job.model, job.ids, job.mask, run=job.run, noise_multiplier=job.noise_multiplier,
                                 params=job.params, device=job.device, on_step=job.on_step, streams=job.streams,
                                 checkpoint=job.checkpoint)
            return Trained(job.model, result)
        from empriv.train.user_level import train_user_level

        result, unit_facts = train_user_level(job.params, job.run, job.model, job.unit_data, privacy=job.privacy,
                                              streams=job.streams, device=job.device, eos_id=job.eos_id,
                                              on_step=job.on_step, checkpoint=job.checkpoint)
        return Trained(job.model, result, unit_facts=unit_facts)

    # ------------------------------------------------------------------ what the run releases
    def release_event(self, params: Params, run: RunConfig, *, sigma: float | None, sample_rate: float, steps: int):
        """The DpEvent of a record-level run of this method (σ None: not private): DP-SGD, T Poisson-subsampled
        Gaussian steps. A method with other or un-noised parts overrides it (:mod:`empriv.privacy.events`)."""
        from empriv.privacy import events

        return events.dp_sgd_event(sigma, sample_rate, steps)

    # ------------------------------------------------------------------ what the run records
    def facts(self, params: Params) -> dict:
        """The method (cube name), its adaptation and its settings section (``<name>_settings``)."""
        t = params.train
        facts: dict = {"method": t.run_method, "adaptation": t.method}
        if self.traits.settings is not None:
            facts[f"{t.method}_settings"] = getattr(t, self.traits.settings).model_dump()
        return facts

    def optimizer(self, params: Params) -> str:
        """The optimizer the run records."""
        return params.train.optimizer

    def needs_public_split(self, params: Params) -> bool:
        """Whether the run reads the encoded public split (the stage encodes it only then)."""
        return False


def adapt(params: Params, base, method: str, *, init_seed: int, **options):
    """``base`` adapted for ``method`` by :func:`empriv.models.adaptations.prepare_adaptation` with ``options``; an
    architecture the adaptation cannot take is a one-line :class:`ConfigError` (:func:`adaptation_error`)."""
    from empriv.models.adaptations import prepare_adaptation

    try:
        return prepare_adaptation(base, method, init_seed=init_seed, **options)
    except ValueError as err:
        raise adaptation_error(params, base, err) from None


def adaptation_error(params: Params, base, err: ValueError) -> ConfigError:
    """A method the base's architecture cannot take, as a one-line :class:`ConfigError`."""
    t = params.train
    model_type = getattr(getattr(base, "config", None), "model_type", None)
    return ConfigError(f"cube.method {t.run_method!r} ({t.method}) cannot adapt this base (model_type {model_type!r}): "
                       + " ".join(str(err).split()))


def public_or_fail(public, what: str):
    """The encoded public split (ids, mask), or a :class:`ConfigError` when the stage gave none."""
    ids, mask = public
    if ids is None or mask is None or ids.shape[0] == 0:
        raise ConfigError(f"{what} is 'public' but no public split was given (the train stage encodes "
                          "data/prepared/public.jsonl)")
    return ids, mask


# ---------------------------------------------------------------------------------------------------- the registry
_REGISTRY: dict[str, type[TrainingMethod]] = {}


def register(name: str, traits: MethodTraits | None = None):
    """Class decorator: register a :class:`TrainingMethod` under ``name``. A shipped method takes its traits from
    :data:`empriv.config.methods.BUILTIN`; any other passes ``traits``, which declares the name to config (params may
    name it from then on)."""
    if traits is None:
        traits = method_traits(name)  # UnknownMethodError: a new method must say what it is
    elif name in BUILTIN and BUILTIN[name] != traits:
        raise ValueError(f"training method {name!r} is shipped: its traits are config.methods.BUILTIN's")

    def decorate(cls: type[TrainingMethod]) -> type[TrainingMethod]:
        if not (isinstance(cls, type) and issubclass(cls, TrainingMethod)):
            raise TypeError(f"register({name!r}) decorates a TrainingMethod subclass, got {cls!r}")
        if name in _REGISTRY and _REGISTRY[name] is not cls:
            raise ValueError(f"training method {name!r} is registered already ({_REGISTRY[name].__qualname__})")
        declare(name, traits)
        cls.name, cls.traits = name, traits
        _REGISTRY[name] = cls
        return cls

    return decorate


def unregister(name: str) -> None:
    """Remove a method registered outside the package (tests); the shipped ones stay."""
    if name in BUILTIN:
        raise ValueError(f"training method {name!r} is shipped and stays registered")
    _REGISTRY.pop(name, None)
    forget(name)


def get_method(name: str) -> TrainingMethod:
    """An instance of the method registered under ``name`` (:class:`~empriv.config.UnknownMethodError`, a
    :class:`ConfigError` listing the registered ones, for any other name)."""
    try:
        return _REGISTRY[name]()
    except KeyError:
        raise UnknownMethodError(name, known=_REGISTRY) from None


def registered_names() -> tuple[str, ...]:
    return tuple(_REGISTRY)


__all__ = ["Trained", "TrainingJob", "TrainingMethod", "UnknownMethodError", "adapt", "adaptation_error",
           "get_method", "public_or_fail", "register", "registered_names", "unregister"]
