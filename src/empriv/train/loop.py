"""The one DP training loop skeleton every training method runs in; a method supplies only its step.

What every DP loop shares lives here once:

- the **sampling strategy** (:mod:`empriv.train.sampling`: record-level Poisson over records, Group Privacy over the
  N·K bounded slots, User-wise over units): it draws step t's batch from the run's sampler generator when step t
  starts;
- the **step hook**: the method's ``step(t, batch)`` takes one step (DP-SGD's per-example clip + noise, DPZero's
  zeroth-order step, DP-Flat's perturbed step + KD, User-wise's per-unit clip + noise) and returns the step's
  values (curve name → value);
- the **curves**: one list per curve name, appended step by step, and the count of empty batches (a batch with no
  record — or no unit — is still noised and counted as a step);
- **checkpoint and resume** (:mod:`empriv.train.checkpoint`): after every ``checkpoint.every``-th step the method's
  tensors (trainable parameters, optimizer state, …), every random stream, the curves, the empty count, the train
  time and an optional ``extra_state`` (e.g. a record selection's generator) are saved; a re-run with the same
  fingerprint resumes after the last complete checkpoint, bit-identical to the uninterrupted run, and each step is
  taken (and accounted) once; the checkpoints are deleted when the loop completes;
- **progress**: a bar (or log lines) over the steps left.

The ε spent so far is a function of (σ, q, t, δ) only, so the loop's step count is all the accounting needs
(:func:`empriv.train.finetune.spent_epsilons` turns it into the ``train/epsilon`` curve).

Use::

    loop = DPLoop(sampling=RecordSampling(n, q), steps=T, curves=("losses", "batch_sizes"), checkpoint=ck,
                  facts={"loop": "record", ...})
    snapshot = loop.resume_point()          # None: start fresh; else restore the method's own tensors from it
    loop.run(step, generators={"sampler": g, "noise": h}, tensors=lambda: {...}, desc="train …")
    loop.curves["losses"], loop.empty, loop.resumed_from_step, loop.wall_time_s
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from empriv.checks import require_int
from empriv.train.checkpoint import Snapshot, capture_rng, restore_rng

log = logging.getLogger("empriv.train")


class DPLoop:
    """T steps of one DP training run over the batches of ``sampling`` (module docstring).

    ``curves``: the names of the per-step values the loop records; the first is the loss curve and has one value per
    step (a checkpoint is checked against it). ``checkpoint`` (:class:`~empriv.train.checkpoint.Checkpointer`) and
    ``facts`` (what identifies the run, joined to the checkpointer's identity): checkpoint and resume.
    ``extra_state``: an object with ``state_dict()`` (JSON-able) and ``load_state_dict(state)``, checkpointed with
    the rest (what a record selection draws from).
    """

    def __init__(self, *, sampling, steps: int, curves: Sequence[str], checkpoint=None, facts: dict | None = None,
                 extra_state=None):
        steps = require_int("steps", steps, 1)
        if not curves:
            raise ValueError("curves must name at least the loss curve")
        self.sampling, self.steps, self.checkpoint, self.extra_state = sampling, steps, checkpoint, extra_state
        self.curves: dict[str, list] = {name: [] for name in curves}
        self.empty = 0
        self.start = 0
        self.wall_time_s = 0.0
        self._time_before = 0.0
        self.fingerprint = None if checkpoint is None else checkpoint.fingerprint(facts or {})
        self.snapshot: Snapshot | None = None
        self._loaded = False

    @property
    def resumed_from_step(self) -> int | None:
        """The steps a checkpoint had done when this run resumed (None: it started from step 0)."""
        return self.snapshot.step if self.snapshot is not None else None

    def resume_point(self) -> Snapshot | None:
        """The latest intact checkpoint of this run (the caller restores its own tensors from it), or None."""
        if not self._loaded and self.checkpoint is not None:
            snapshot = self.checkpoint.load(self.fingerprint)
            if snapshot is not None:
                first = next(iter(self.curves))
                recorded = len(snapshot.state["curves"][first])
                if recorded != snapshot.step:
                    raise ValueError(f"checkpoint {snapshot.path} records {recorded} {first} for {snapshot.step} steps")
                extra = snapshot.state.get("extra")
                if (extra is None) != (self.extra_state is None):
                    raise ValueError(f"checkpoint {snapshot.path}: the extra state is "
                                     f"{'missing' if extra is None else 'present'}, the run "
                                     f"{'has' if self.extra_state is not None else 'has no'} extra_state")
            self.snapshot = snapshot
        self._loaded = True
        return self.snapshot

    def run(self, step: Callable[[int, Any], dict], *, generators: dict[str, torch.Generator | None],
            tensors: Callable[[], dict], state: Callable[[], dict] | None = None,
            on_step: Callable[[int, dict], None] | None = None, desc: str | None = None,
            logger: logging.Logger | None = None) -> DPLoop:
        """Take the steps left: for t = start..T-1, ``values = step(t, batch)``; the values of the loop's curves are
        appended (others are the method's, e.g. for ``on_step(t, values)``), then a checkpoint when due.

        ``generators``: every generator the run draws from, ``"sampler"`` the sampling strategy's (they and the
        global ones are checkpointed and restored). ``tensors()``: the method's tensors to checkpoint (trainable
        parameters, optimizer state, …); ``state()``: JSON-able facts to checkpoint beside them. ``desc``: a progress
        bar over the steps left (None: none)."""
        snapshot = self.resume_point()
        if snapshot is not None:
            self._restore(snapshot, generators)
        t0 = time.time()
        batches = self.sampling.batches(generators["sampler"], start=self.start, steps=self.steps)
        if desc is not None:
            from empriv.infra.progress import progress

            desc += f" (resumed at step {self.start})" if self.start else ""
            batches = progress(batches, total=self.steps - self.start, desc=desc, logger=logger or log)
        for t, batch in enumerate(batches, start=self.start):
            empty = batch.numel() == 0
            values = step(t, batch)
            self.empty += int(empty)
            for name, curve in self.curves.items():
                if name in values:
                    curve.append(values[name])
            if on_step is not None:
                on_step(t, values)
            if self.checkpoint is not None and self.checkpoint.due(t + 1, self.steps):
                self._save(t + 1, generators, tensors(), {} if state is None else state(),
                           self._time_before + time.time() - t0)
        self.wall_time_s = self._time_before + time.time() - t0
        if self.checkpoint is not None and self.checkpoint.clear_on_completion:
            self.checkpoint.clear()
        return self

    def _save(self, done: int, generators: dict, tensors: dict, state: dict, train_time_s: float) -> None:
        rng_tensors, rng_state = capture_rng(generators)
        self.checkpoint.save(done, self.fingerprint, {**tensors, "rng": rng_tensors}, {
            **state, "curves": self.curves, "empty": self.empty, "train_time_s": train_time_s, "rng": rng_state,
            "extra": self.extra_state.state_dict() if self.extra_state is not None else None})

    def _restore(self, snapshot: Snapshot, generators: dict) -> None:
        s = snapshot.state
        restore_rng(snapshot.tensors["rng"], s["rng"], generators)
        if self.extra_state is not None:
            self.extra_state.load_state_dict(s["extra"])
        self.curves = {name: list(s["curves"][name]) for name in self.curves}
        self.empty = int(s["empty"])
        self.start = snapshot.step
        self._time_before = float(s["train_time_s"])


__all__ = ["DPLoop"]
