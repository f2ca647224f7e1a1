"""The hyperparameter cube's axes (ε × b × T × η × seed × unit × method): ``cube`` and the audit cubes' base."""

from __future__ import annotations

from typing import Any

from pydantic import field_validator

from empriv.config.errors import ParamError
from empriv.config.values import Epsilon, _epsilon_list, _Section


class _CubeAxes(_Section):
    """The checks every cube's axes share (the main, audit and adaptation-audit cubes): ε values parsed, b and T
    integers >= 1, η > 0, and each listed axis non-empty and free of duplicates."""

    @field_validator("epsilon", mode="before", check_fields=False)
    @classmethod
    def _eps_parse(cls, v: Any) -> Any:
        return _epsilon_list(v)

    @field_validator("batch_size", "steps", check_fields=False)
    @classmethod
    def _positive_ints(cls, v: list[int]) -> list[int]:
        for i, x in enumerate(v):
            if x < 1:
                raise ParamError("out of range", x, "an integer >= 1", index=i)
        return v

    @field_validator("learning_rate", check_fields=False)
    @classmethod
    def _lr(cls, v: list[float]) -> list[float]:
        for i, x in enumerate(v):
            if not x > 0:
                raise ParamError("must be > 0", x, "a finite number > 0", index=i)
        return v

    @field_validator("epsilon", "batch_size", "steps", "learning_rate", "seed", "unit", "method", check_fields=False)
    @classmethod
    def _nonempty_unique(cls, v: list) -> list:
        if not v:
            raise ParamError("must list at least one value", v)
        if len(set(v)) != len(v):
            raise ParamError("has duplicate values", v, "distinct values")
        return v


class CubeParams(_CubeAxes):
    # Numbers keep their YAML type (2 stays int, 2.0 stays float): run names are built with str()
    # exactly as DVC interpolates the matrix values into dvc.yaml.
    epsilon: list[Epsilon]  # each in (0, EPSILON_MAX] or inf
    batch_size: list[int]
    steps: list[int]
    learning_rate: list[int | float]
    seed: list[int]
    unit: list[str] = ["record"]  # privacy units (empriv/privacy_unit.py): record, group-k5-longest, userwise-k10-chunk
    method: list[str] = ["full"]  # training methods (config.methods) or train.variants names

    @field_validator("unit")
    @classmethod
    def _units(cls, v: list[str]) -> list[str]:
        from empriv.privacy_unit import ALLOWED, parse_unit

        for i, x in enumerate(v):
            try:
                parse_unit(x)
            except ValueError as err:
                raise ParamError(str(err).split(" (")[0], x, ALLOWED, index=i) from None
        return v
