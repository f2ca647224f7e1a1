"""Independent, reproducible random streams per run.

Every random stream of a run — the Poisson sampler, the DP noise, the adapter initialisation,
dropout, sampling during scoring — gets its own seed, derived from a SHA-256 hash of the run's
*configuration* (what it is: purpose, method, ε, b, T, η), its *seed* and the *stream's name*.
So:

- two configurations never share a stream, even with the same seed: the noise of ε = 2 and of
  ε = 64 is independent (not one draw scaled twice), and the b = 64 batches are not subsets of
  the b = 128 batches, as they would be if both thresholded one shared uniform draw per step;
- the same configuration and seed give the same streams on every machine, so a run repeated at
  a fixed torch thread count reproduces bit-identically;
- an audit run (trained with canaries) and the cube run of the same hyperparameters are
  different runs: ``purpose`` keeps their streams apart.

The configuration enters by value (``float(ε)``, ``float(η)``), so ``2`` and ``2.0`` name the
same configuration, as they do for DVC's matrix after ``run_from_args``.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import torch

STREAMS = ("sampler", "noise", "init", "dropout", "generation")


def _number(x: float) -> str:
    x = float(x)
    return "inf" if math.isinf(x) else repr(x)


def configuration_key(run, *, method: str, purpose: str = "train") -> str:
    """Canonical text of a run's configuration without its seed (``run``: an :class:`empriv.config.RunConfig`)."""
    return (f"purpose={purpose}|method={method}|epsilon={_number(run.epsilon)}|batch_size={int(run.batch_size)}"
            f"|steps={int(run.steps)}|learning_rate={_number(run.learning_rate)}")


def stream_seed(key: str, seed: int, stream: str) -> int:
    """A 63-bit seed for ``stream`` of the run (``key``, ``seed``): the first 8 bytes of SHA-256."""
    if stream not in STREAMS and not stream.startswith(tuple(f"{s}:" for s in STREAMS)):
        raise ValueError(f"unknown random stream {stream!r}; known: {', '.join(STREAMS)} (optionally 'name:suffix')")
    digest = hashlib.sha256(f"{key}|seed={int(seed)}|stream={stream}".encode()).digest()
    return int.from_bytes(digest[:8], "big") & ((1 << 63) - 1)


@dataclass(frozen=True)
class RunStreams:
    """The seeds of one run's streams; :meth:`generator` makes a fresh ``torch.Generator`` for one."""

    key: str
    seed: int

    @classmethod
    def of(cls, run, *, method: str, purpose: str = "train") -> "RunStreams":
        return cls(configuration_key(run, method=method, purpose=purpose), int(run.seed))

    def seed_of(self, stream: str) -> int:
        return stream_seed(self.key, self.seed, stream)

    def generator(self, stream: str, device: str | torch.device = "cpu") -> torch.Generator:
        return torch.Generator(device=device).manual_seed(self.seed_of(stream))

    def record(self) -> dict:
        """What a run's metrics keep: the key and every stream's seed (reproducible by anyone)."""
        return {"key": self.key, "seed": self.seed, **{s: self.seed_of(s) for s in STREAMS}}
