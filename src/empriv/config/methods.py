"""The training methods' names, written once, and what config and the stages know about each without its code.

A training method (``cube.method``, or the ``method`` of a ``train.variants`` entry) is implemented in
:mod:`empriv.train.methods` (one module per method, one interface). Config is the bottom layer and must not import
it (nor torch), so what validation, saving and the study plan need to know about a method is declared here as its
:class:`MethodTraits`: a property of the method instead of a list of names per question.

:data:`BUILTIN` declares the shipped methods (the one list of names: ``ADAPTATION_METHODS``, the settings'
validation, ``models.adaptations.METHODS`` and ``models.adapters.VIRTUAL_TOKEN_METHODS`` all derive from it).
A method defined elsewhere (a test, a plugin) is declared by :func:`empriv.train.methods.register` with its traits,
which calls :func:`declare`; from then on params may name it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from empriv.config.errors import ConfigError


@dataclass(frozen=True)
class MethodTraits:
    """What a training method *is*, as config, saving and planning need to know it (no torch, no training code).

    ``settings``: the ``train`` section holding its settings (a ``train.variants`` entry may replace it; the run
    records it as ``<name>_settings``), None for none. ``saved_as``: how a trained model is saved — ``model`` (the
    whole model, Hugging Face format), ``peft`` (a peft adapter) or ``virtual_tokens`` (an empriv adapter of a
    prefix or soft prompt beside the base). ``virtual_positions``: ``"<section>.<field>"`` of the number of virtual
    tokens it puts before the real ones, which take learned positions of the base (None: none).
    ``trains_all_weights``: every weight trains (new-token canaries need nothing extra; the DP step costs a full
    model's). ``black_box``: it queries the model only (zeroth order), no per-sample gradients of its weights.
    ``modes``: the train sections that switch it into a variant of itself (prefix: ``dpflat``).
    """

    settings: str | None = None
    saved_as: Literal["model", "peft", "virtual_tokens"] = "model"
    virtual_positions: str | None = None
    trains_all_weights: bool = False
    black_box: bool = False
    modes: tuple[str, ...] = ()

    def virtual_tokens(self, train) -> int:
        """The virtual tokens before the real ones under the ``train`` params (0 when it adds none)."""
        if self.virtual_positions is None:
            return 0
        section, field = self.virtual_positions.split(".")
        return getattr(getattr(train, section), field)


# The shipped methods: one line each.
BUILTIN: dict[str, MethodTraits] = {
    "full": MethodTraits(trains_all_weights=True),
    "lora": MethodTraits(settings="lora", saved_as="peft"),
    "prefix": MethodTraits(settings="prefix", saved_as="virtual_tokens", modes=("dpflat",)),
    "prompt": MethodTraits(settings="prompt", saved_as="virtual_tokens", virtual_positions="prompt.n_virtual"),
    "head": MethodTraits(settings="head"),
    "dpzero": MethodTraits(settings="dpzero", saved_as="virtual_tokens", virtual_positions="dpzero.n_prompt",
                           black_box=True),
}

_DECLARED: dict[str, MethodTraits] = dict(BUILTIN)


class UnknownMethodError(ConfigError):
    """A training method name that is not declared (or, from the registry, not registered): names the known ones."""

    def __init__(self, name: str, known=None):
        self.name = name
        super().__init__(f"unknown training method {name!r} (known: {', '.join(_DECLARED if known is None else known)})")


def declare(name: str, traits: MethodTraits) -> MethodTraits:
    """Make ``name`` a training method params may name (idempotent for the same traits)."""
    if name in _DECLARED and _DECLARED[name] != traits:
        raise ValueError(f"training method {name!r} is declared already, with other traits")
    _DECLARED[name] = traits
    return traits


def forget(name: str) -> None:
    """Undo :func:`declare` for a method that is not shipped (tests)."""
    if name in BUILTIN:
        raise ValueError(f"training method {name!r} is shipped and stays declared")
    _DECLARED.pop(name, None)


def method_names() -> tuple[str, ...]:
    """Every declared training method, the shipped ones first."""
    return tuple(_DECLARED)


def method_traits(name: str) -> MethodTraits:
    try:
        return _DECLARED[name]
    except KeyError:
        raise UnknownMethodError(name) from None

