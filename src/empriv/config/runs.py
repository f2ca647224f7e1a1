"""One point of the cube (:class:`RunConfig`) and its name as ``dvc.yaml`` builds it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


def format_number(x: float | int) -> str:
    """Format a cube value the way DVC interpolates it into ``dvc.yaml``: ``str`` of the YAML value
    (``2`` → "2", ``2.0`` → "2.0", ``1e-3`` → "0.001", ``inf``/``.inf`` → "inf")."""
    if isinstance(x, float) and math.isinf(x):
        return "inf"
    return str(x)


@dataclass(frozen=True)
class RunConfig:
    """One point of the cube: (ε, b, T, η, seed) and the privacy unit (``record`` unless user-level).

    For a user-level unit, b is the expected number of *records* per step over the bounded set (Group Privacy:
    q = b / (units · k)) or of *units* per step (User-wise DP-SGD: q = b / units)."""

    epsilon: float
    batch_size: int
    steps: int
    learning_rate: float
    seed: int
    unit: str = "record"
    method: str = "full"  # cube.method: an adaptation method or a train.variants name

    @property
    def private(self) -> bool:
        return math.isfinite(self.epsilon)

    @property
    def privacy_unit(self):
        """The parsed unit (:class:`empriv.privacy_unit.PrivacyUnit`)."""
        from empriv.privacy_unit import parse_unit

        return parse_unit(self.unit)

    @property
    def point_name(self) -> str:
        """``eps…-b…-T…-lr…-s…``: the name without the unit (file names under ``<dir>/<unit>/``)."""
        return config_name(self.epsilon, self.batch_size, self.steps, self.learning_rate, self.seed)

    @property
    def name(self) -> str:
        """The configuration's name: the point name, ``-<unit>`` for a user-level unit, and ``-<method>``."""
        return self.point_name + self.privacy_unit.suffix + f"-{self.method}"

    @property
    def file_stem(self) -> str:
        """Where the run's files live below a per-run directory: ``<unit>/<method>/<point name>`` (as dvc.yaml
        builds it)."""
        return f"{self.unit}/{self.method}/{self.point_name}"

    @property
    def group(self) -> str:
        """The configuration without its seed (runs that differ only by seed share a group)."""
        return self.point_name.rsplit("-s", 1)[0] + self.privacy_unit.suffix + f"-{self.method}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "epsilon": format_number(self.epsilon) if not self.private else self.epsilon,
            "batch_size": self.batch_size,
            "steps": self.steps,
            "learning_rate": self.learning_rate,
            "seed": self.seed,
            **({"unit": self.unit} if self.unit != "record" else {}),
            "method": self.method,
        }


def config_name(epsilon: float, batch_size: int, steps: int, learning_rate: float, seed: int) -> str:
    """Name of a run, identical to the one ``dvc.yaml`` builds from the matrix item."""
    return (
        f"eps{format_number(epsilon)}-b{batch_size}-T{steps}-lr{format_number(learning_rate)}-s{seed}"
    )
