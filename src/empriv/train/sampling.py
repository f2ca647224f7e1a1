"""Batch samplers. Poisson sampling is the default because the privacy accountants assume it."""

from __future__ import annotations

from collections.abc import Iterator

import torch


def poisson_batches(n: int, sample_rate: float, steps: int, generator: torch.Generator) -> Iterator[torch.Tensor]:
    """Yield ``steps`` batches; each example joins each batch independently with prob. q = ``sample_rate``.

    Batch sizes vary (mean q·n) and may be empty: the DP step must still add noise and count.
    """
    if not 0 < sample_rate <= 1:
        raise ValueError(f"sample_rate must be in (0, 1], got {sample_rate}")
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    for _ in range(steps):
        yield torch.nonzero(torch.rand(n, generator=generator) < sample_rate, as_tuple=False).flatten()


def micro_batches(indices: torch.Tensor, size: int) -> list[torch.Tensor]:
    """Split a logical batch into physical micro-batches of at most ``size`` (an empty batch → [empty])."""
    if size < 1:
        raise ValueError(f"micro batch size must be >= 1, got {size}")
    if indices.numel() == 0:
        return [indices]
    return list(torch.split(indices, size))
