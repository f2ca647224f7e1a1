"""Checkpoints of a training run, so a run killed mid-way (SIGKILL, preemption) resumes where it stopped.

A :class:`Checkpointer` names a directory (one per run) and a cadence: the DP loop skeleton
(:class:`empriv.train.loop.DPLoop`) that every training loop runs in
(:func:`empriv.train.dp.dp_finetune`, :func:`empriv.train.userwise.userwise_dp_sgd` and through them the
user-level runs of :mod:`empriv.train.user_level`; :func:`empriv.train.dpzero.dpzero_prompt_tuning` with its
prompt and streams; :func:`empriv.train.dpflat.dpflat_train`) saves their whole state after every ``every``-th
step — the trainable parameters (the adapter alone when the rest is frozen: the frozen weights are
rebuilt identically from the base), the optimizer's state (Adam's moments; the state of the optimizer
that opacus' ``DPOptimizer`` wraps), the state of every random stream of the run (the Poisson sampler,
the DP noise, torch's global generator that dropout draws from, Python's and NumPy's global generators
and any generator the loop owns), the step count and what the run has recorded so far (losses, batch
sizes, empty batches). The sampler's position is its generator's state: after t steps it has drawn
exactly t batches. The privacy accounting needs nothing more: σ, q and the number of steps determine
it, and a resumed run continues from step t, so every step is counted exactly once.

Resuming reproduces the uninterrupted run bit for bit at a fixed thread count, because everything
random that the rest of the run draws comes from the saved generator states.

On disk, ``<directory>/step-<t>/`` holds

- ``tensors.pt``: parameters, optimizer state and generator states (``torch.save``; loaded with
  ``weights_only=True``),
- ``state.json``: the step, the recorded curves and the Python/NumPy generator states,
- ``meta.json``: the format, the step, the run's fingerprint and the SHA-256 of the two files above.

A checkpoint is written to ``<directory>/.tmp-step-<t>-<pid>/``, every file and the directory are
fsynced, and the directory is renamed to ``step-<t>``; only then are older checkpoints removed, so the
last complete checkpoint survives a kill at any moment. Loading verifies the checksums: a truncated or
corrupt checkpoint is ignored (with one warning line) and never loaded. The fingerprint says which run
wrote the checkpoint (run name, unit, method, a hash of the params keys that change training, n, σ,
the random streams' key, a hash of the training data, the trainable parameters' names and shapes);
a checkpoint whose fingerprint differs from the run's is refused with one warning line naming the
differing keys, and the run starts fresh. When the run completes, its checkpoints are deleted.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from empriv.checks import require_int
from empriv.io import file_digest

log = logging.getLogger("empriv.train")

FORMAT = 2  # 2: the DP loop skeleton's state (curves by name, empty count, extra state)
PREFIX = "step-"
TMP_PREFIX = ".tmp-step-"
FILES = ("tensors.pt", "state.json")
#: params.train keys that never change what training computes (logging and checkpoint cadence)
CADENCE_KEYS = ("log_every", "checkpoint_every")


@dataclass(frozen=True)
class Snapshot:
    """A loaded checkpoint: the number of steps done, its tensors and its JSON state, where it was read from."""

    step: int
    tensors: dict
    state: dict
    path: Path


@dataclass(frozen=True)
class Checkpointer:
    """Save a run's state every ``every`` steps into ``directory`` and resume from it (module docstring).

    ``identity``: facts about the run that the loop cannot know (e.g. the job type, what canaries were
    added), joined to the fingerprint the loop computes. ``clear_on_completion``: the loop deletes the
    checkpoints when it finishes (default); set it False to delete them yourself (:meth:`clear`) once the
    run's outputs are written, so a kill between the loop's end and the outputs' write loses nothing.
    """

    directory: Path
    every: int
    identity: dict = field(default_factory=dict)
    clear_on_completion: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "every", require_int("runtime.checkpoint_every", self.every, 1,
                                                      meaning="steps between checkpoints"))
        object.__setattr__(self, "directory", Path(self.directory))
        object.__setattr__(self, "identity", _plain(dict(self.identity)))

    def with_identity(self, **facts) -> "Checkpointer":
        """The same checkpointer with ``facts`` added to its identity (a caller passing it down a layer)."""
        return replace(self, identity={**self.identity, **_plain(facts)})

    def fingerprint(self, facts: dict) -> dict:
        """The fingerprint a checkpoint of this run carries: the loop's ``facts`` and the identity."""
        return {**_plain(facts), **self.identity, "format": FORMAT}

    def due(self, done: int, total: int) -> bool:
        """Whether to checkpoint after ``done`` of ``total`` steps (never after the last: the run completes)."""
        return done % self.every == 0 and done < total

    # ---------------------------------------------------------------------------------------- writing
    def save(self, step: int, fingerprint: dict, tensors: dict, state: dict) -> Path:
        """Write checkpoint ``step`` atomically and durably, then remove every other checkpoint."""
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = self.directory / f"{TMP_PREFIX}{step:09d}-{os.getpid()}"
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir()
        try:
            with open(tmp / "tensors.pt", "wb") as fh:
                torch.save(tensors, fh)
                _flush(fh)
            _write_text(tmp / "state.json", json.dumps({**state, "step": step}))
            meta = {"format": FORMAT, "step": step, "fingerprint": fingerprint,
                    "sha256": {name: file_digest(tmp / name) for name in FILES}}
            _write_text(tmp / "meta.json", json.dumps(meta, indent=1))
            _fsync_dir(tmp)
            final = self.directory / f"{PREFIX}{step:09d}"
            if final.exists():  # a refused (corrupt or foreign) checkpoint of the same step
                shutil.rmtree(final)
            os.replace(tmp, final)
            _fsync_dir(self.directory)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        for other in self._entries():
            if other != final:
                shutil.rmtree(other, ignore_errors=True)
        return final

    def clear(self) -> None:
        """Delete every checkpoint (complete or not) of this run, and the directory if nothing else is in it."""
        for entry in self._entries():
            shutil.rmtree(entry, ignore_errors=True)
        try:
            self.directory.rmdir()
        except OSError:
            pass

    def _entries(self) -> list[Path]:
        if not self.directory.is_dir():
            return []
        return sorted(p for p in self.directory.iterdir()
                      if p.is_dir() and (p.name.startswith(PREFIX) or p.name.startswith(TMP_PREFIX)))

    # ---------------------------------------------------------------------------------------- reading
    def checkpoints(self) -> list[Path]:
        """The complete-looking checkpoint directories (``step-<t>``), latest first (not yet verified)."""
        out = []
        for p in self._entries():
            if p.name.startswith(PREFIX) and p.name[len(PREFIX):].isdigit():
                out.append(p)
        return sorted(out, key=lambda p: int(p.name[len(PREFIX):]), reverse=True)

    def load(self, fingerprint: dict) -> Snapshot | None:
        """The latest intact checkpoint written by this run (same ``fingerprint``), or None (start fresh).

        A corrupt or incomplete checkpoint, or one written by another run, is logged in one line and skipped.
        """
        for path in self.checkpoints():
            try:
                meta = json.loads((path / "meta.json").read_text(encoding="utf-8"))
                if meta.get("format") != FORMAT:
                    raise ValueError(f"format {meta.get('format')!r}, this code reads {FORMAT}")
                for name in FILES:
                    if file_digest(path / name) != meta["sha256"][name]:
                        raise ValueError(f"{name} does not match its checksum")
            except (OSError, ValueError, KeyError, TypeError) as err:
                log.warning("checkpoint %s is incomplete or corrupt (%s): ignored", path, _one_line(err))
                continue
            stored = meta.get("fingerprint") or {}
            if stored != fingerprint:
                log.warning("checkpoint %s refused: written by a different run (%s); ignored, training starts fresh",
                            path, describe_difference(stored, fingerprint))
                continue
            try:
                tensors = torch.load(path / "tensors.pt", map_location="cpu", weights_only=True)
                state = json.loads((path / "state.json").read_text(encoding="utf-8"))
            except Exception as err:  # checksummed, so only an unreadable format gets here
                log.warning("checkpoint %s could not be read (%s): ignored", path, _one_line(err))
                continue
            log.info("resuming from checkpoint %s (%d steps done)", path, meta["step"])
            return Snapshot(int(meta["step"]), tensors, state, path)
        return None


def describe_difference(stored: dict, expected: dict, limit: int = 4) -> str:
    """``key: stored != expected`` for the first ``limit`` differing keys, on one line."""
    keys = sorted(set(stored) | set(expected))
    diffs = [f"{k}: {_short(stored.get(k, '<missing>'))} != {_short(expected.get(k, '<missing>'))}"
             for k in keys if stored.get(k, "<missing>") != expected.get(k, "<missing>")]
    more = f", and {len(diffs) - limit} more" if len(diffs) > limit else ""
    return "; ".join(diffs[:limit]) + more


# -------------------------------------------------------------------------------------------- fingerprints
def params_digest(params) -> str:
    """SHA-256 (16 hex digits) of the params keys that change what a training run computes: ``train``
    (without the logging/checkpoint cadence), ``privacy``, ``base`` and ``runtime`` precision/threads/device."""
    train = params.train.model_dump(mode="json")
    for key in CADENCE_KEYS:
        train.pop(key, None)
    relevant = {"train": train, "privacy": params.privacy.model_dump(mode="json"),
                "base": params.base.model_dump(mode="json"),
                "runtime": {k: getattr(params.runtime, k) for k in ("precision", "threads", "device")}}
    return hashlib.sha256(json.dumps(relevant, sort_keys=True).encode()).hexdigest()[:16]


def tensors_digest(*tensors: torch.Tensor) -> str:
    """SHA-256 (16 hex digits) of tensors' shapes, dtypes and bytes (the training data a checkpoint belongs to)."""
    h = hashlib.sha256()
    for t in tensors:
        t = torch.as_tensor(t).detach().cpu().contiguous()
        h.update(f"{tuple(t.shape)}|{t.dtype}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()[:16]


def trainable_digest(model: torch.nn.Module) -> str:
    """SHA-256 (16 hex digits) of the trainable parameters' names, shapes and dtypes."""
    text = "|".join(f"{n}:{tuple(p.shape)}:{p.dtype}" for n, p in trainable_named(model))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def run_facts(params, run, *, n: int, noise_multiplier: float | None, streams, data: tuple, model) -> dict:
    """The fingerprint facts of one run that :func:`~empriv.train.dp.dp_finetune` and the user-level loop share."""
    return {"run": run.name, "unit": run.unit, "method": params.train.method, "params": params_digest(params),
            "n": int(n), "sigma": None if noise_multiplier is None else float(noise_multiplier),
            "streams": f"{streams.key}|seed={streams.seed}", "data": tensors_digest(*data),
            "trainable": trainable_digest(model)}


# -------------------------------------------------------------------------------------------- state helpers
def trainable_named(model: torch.nn.Module, *, what: str | None = None) -> list[tuple[str, torch.nn.Parameter]]:
    """The trainable parameters (``requires_grad``) by name, in ``named_parameters`` order (tied ones once);
    ``what``: raise ``ValueError`` when there are none, saying what needed them."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if not named and what is not None:
        raise ValueError(f"the model has no trainable parameters (requires_grad): {what}")
    return named


def trainable_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Copies of the trainable parameters by name (tied parameters once)."""
    return {n: p.detach().to("cpu", copy=True) for n, p in trainable_named(model)}


def load_trainable_state(model: torch.nn.Module, saved: dict[str, torch.Tensor]) -> None:
    """Copy ``saved`` into the model's trainable parameters (the names must be exactly the model's)."""
    named = dict(trainable_named(model))
    if set(named) != set(saved):
        missing, extra = sorted(set(named) - set(saved)), sorted(set(saved) - set(named))
        raise ValueError(f"checkpoint parameters do not match the model's trainable parameters "
                         f"(missing {missing[:3]}, unexpected {extra[:3]})")
    with torch.no_grad():
        for n, p in named.items():
            p.copy_(saved[n].to(p.device))


def capture_rng(generators: dict[str, torch.Generator | None]) -> tuple[dict, dict]:
    """(tensors, JSON) of the random state: torch's global generator (and CUDA's), the named generators,
    Python's ``random`` and NumPy's global generator."""
    tensors = {"torch": torch.get_rng_state(),
               **{f"gen:{k}": g.get_state() for k, g in generators.items() if g is not None}}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        tensors["cuda"] = torch.cuda.get_rng_state_all()
    version, internal, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state()
    state = {"python_random": [version, list(internal), gauss],
             "numpy_random": [name, keys.tolist(), int(pos), int(has_gauss), float(cached)]}
    return tensors, state


def restore_rng(tensors: dict, state: dict, generators: dict[str, torch.Generator | None]) -> None:
    """Undo :func:`capture_rng`: every generator gets its saved state back."""
    torch.set_rng_state(tensors["torch"])
    if "cuda" in tensors and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(tensors["cuda"])
    for k, g in generators.items():
        if g is not None:
            g.set_state(tensors[f"gen:{k}"])
    version, internal, gauss = state["python_random"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = state["numpy_random"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))


# -------------------------------------------------------------------------------------------- internals
def _plain(obj: Any) -> Any:
    """JSON round-trip, so a fingerprint compares equal to what is read back (tuples become lists, etc.)."""
    return json.loads(json.dumps(obj))


def _short(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split()) or type(err).__name__


def _flush(fh) -> None:
    fh.flush()
    os.fsync(fh.fileno())


def _write_text(path: Path, text: str) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
        _flush(fh)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


__all__ = ["Checkpointer", "Snapshot", "capture_rng", "describe_difference", "load_trainable_state", "params_digest",
           "restore_rng", "run_facts", "tensors_digest", "trainable_digest", "trainable_named", "trainable_state"]
