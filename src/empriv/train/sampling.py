"""Batch samplers, and the privacy unit of a run as a sampling strategy the DP loop takes.

Poisson sampling is the default because the privacy accountants assume it. Every strategy draws its step's batch
from the run's sampler generator with one ``torch.rand`` per step, so the generator's state after t steps is the
sampler's position (a checkpoint needs nothing more):

- :class:`RecordSampling` — record-level DP: each of n records joins each step with probability q = b/n;
- :class:`GroupSampling` — user-level DP by Group Privacy: the same over the N·K slots of the K records every unit
  contributes (the records are bounded before training; σ comes from group-privacy accounting);
- :class:`UserSampling` — User-wise DP-SGD: each of N units joins each step with probability q = b/N, and the
  sampled units' records are then selected (:data:`RecordSelector`), one clipped gradient per unit.

A strategy's ``batches(generator, start=t0, steps=T)`` yields the batches of steps t0..T-1 lazily (the one of step t
is drawn when step t starts).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from empriv.checks import require_int, require_real

# (step, sampled unit indices) -> (ids [R, L], mask [R, L], unit id of every record [R])
RecordSelector = Callable[[int, torch.Tensor], tuple[torch.Tensor, torch.Tensor, torch.Tensor]]


def poisson_batches(n: int, sample_rate: float, steps: int, generator: torch.Generator) -> Iterator[torch.Tensor]:
    """Yield ``steps`` batches; each example joins each batch independently with prob. q = ``sample_rate``.

    Batch sizes vary (mean q·n) and may be empty: the DP step must still add noise and count.
    """
    require_real("sample_rate", sample_rate, gt=0, le=1)
    require_int("steps", steps, 1)
    for _ in range(steps):
        yield torch.nonzero(torch.rand(n, generator=generator) < sample_rate, as_tuple=False).flatten()


def poisson_unit_batches(n_units: int, unit_sample_rate: float, steps: int,
                         generator: torch.Generator) -> Iterator[torch.Tensor]:
    """Yield ``steps`` sets of unit indices; each of the ``n_units`` units joins each set independently
    with probability q = ``unit_sample_rate``, drawn from ``generator`` (one ``torch.rand(n_units)`` per step).

    Sizes vary around q·N and may be 0: the step must still be noised and counted.
    """
    require_real("unit_sample_rate", unit_sample_rate, gt=0, le=1, meaning="q")
    n_units, steps = require_int("n_units", n_units, 1), require_int("steps", steps, 1)
    if not isinstance(generator, torch.Generator):
        raise ValueError(f"generator must be a torch.Generator (a seeded stream), got {type(generator).__name__}")
    return poisson_batches(n_units, unit_sample_rate, steps, generator)


def check_records(ids: torch.Tensor, mask: torch.Tensor, unit_ids) -> torch.Tensor:
    """``unit_ids`` as a 1-D long tensor with one entry per record, or one ValueError saying what is wrong."""
    unit_ids = torch.as_tensor(unit_ids)
    if ids.dim() != 2:
        raise ValueError(f"ids must be [records, seq_len], got shape {tuple(ids.shape)}")
    if tuple(mask.shape) != tuple(ids.shape):
        raise ValueError(f"mask shape {tuple(mask.shape)} must equal ids shape {tuple(ids.shape)}")
    if unit_ids.dim() != 1 or unit_ids.shape[0] != ids.shape[0]:
        raise ValueError(f"unit_ids must have one entry per record ({ids.shape[0]}), got shape {tuple(unit_ids.shape)}")
    if unit_ids.dtype.is_floating_point or unit_ids.dtype == torch.bool:
        raise ValueError(f"unit_ids must be integers, got dtype {unit_ids.dtype}")
    return unit_ids.long()


def micro_batches(indices: torch.Tensor, size: int) -> list[torch.Tensor]:
    """Split a logical batch into physical micro-batches of at most ``size`` (an empty batch → [empty])."""
    require_int("micro batch size", size, 1)
    if indices.numel() == 0:
        return [indices]
    return list(torch.split(indices, size))


# -------------------------------------------------------------------------------------------- strategies
def _remaining(start: int, steps: int) -> int:
    require_int("start", start, 0, steps, meaning="at most steps")
    return steps - start


@dataclass(frozen=True)
class RecordSampling:
    """Record-level DP: Poisson sampling of the ``n`` records at rate q = ``sample_rate``; a batch is record indices."""

    n: int
    sample_rate: float

    unit = "record"

    @property
    def expected_batch_size(self) -> float:
        return self.sample_rate * self.n

    def batches(self, generator: torch.Generator, *, start: int, steps: int) -> Iterator[torch.Tensor]:
        left = _remaining(start, steps)
        return poisson_batches(self.n, self.sample_rate, left, generator) if left else iter(())


@dataclass(frozen=True)
class GroupSampling(RecordSampling):
    """User-level DP by Group Privacy: every one of ``n_units`` units contributes exactly ``k`` records (chosen before
    training), and the N·K slots are Poisson-sampled as records are (q = b / (N·K)); a batch is slot indices."""

    n_units: int = 0
    k: int = 1

    unit = "group"

    def __post_init__(self) -> None:
        if self.n != self.n_units * self.k:
            raise ValueError(f"n must be units × k = {self.n_units} × {self.k} = {self.n_units * self.k} slots, "
                             f"got {self.n}")

    @classmethod
    def of(cls, n_units: int, k: int, batch_size: int) -> GroupSampling:
        n = n_units * k
        return cls(n=n, sample_rate=batch_size / n, n_units=n_units, k=k)


@dataclass(frozen=True)
class UnitBatch:
    """One User-wise step's batch: the sampled unit indices and their selected records."""

    units: torch.Tensor
    ids: torch.Tensor
    mask: torch.Tensor
    unit_ids: torch.Tensor

    def numel(self) -> int:
        """The number of sampled units (0: an empty step, still noised and counted)."""
        return int(self.units.numel())


@dataclass(frozen=True)
class UserSampling:
    """User-wise DP-SGD: Poisson sampling of the ``n_units`` units at rate q = ``sample_rate``, then
    ``select_records(step, units)`` gives the sampled units' records (every record's unit must be a sampled one)."""

    n_units: int
    sample_rate: float
    select_records: RecordSelector

    unit = "user"

    def batches(self, generator: torch.Generator, *, start: int, steps: int) -> Iterator[UnitBatch]:
        left = _remaining(start, steps)
        units = poisson_unit_batches(self.n_units, self.sample_rate, left, generator) if left else iter(())
        return self._select(units, start)

    def _select(self, unit_batches: Iterator[torch.Tensor], start: int) -> Iterator[UnitBatch]:
        for step, units in enumerate(unit_batches, start=start):
            ids, mask, unit_ids = self.select_records(step, units)
            unit_ids = check_records(ids, mask, unit_ids)
            if unit_ids.numel() and not bool(torch.isin(unit_ids, units).all()):
                stray = sorted(set(unit_ids.tolist()) - set(units.tolist()))[:5]
                raise ValueError(f"select_records returned records of units that were not sampled at step {step}: "
                                 f"{stray}")
            yield UnitBatch(units, ids, mask, unit_ids)


__all__ = ["GroupSampling", "RecordSampling", "RecordSelector", "UnitBatch", "UserSampling", "check_records",
           "micro_batches",
           "poisson_batches", "poisson_unit_batches"]
