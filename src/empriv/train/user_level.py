"""User-level DP training of one cube run (``cube.unit`` other than ``record``; see docs/user-level.md).

- **Group Privacy** (``group-k<K>-<strategy>``): :func:`empriv.data.selection.select_k` bounds every unit to
  exactly K records (resampled with replacement when it has fewer, unless ``privacy.user_resample`` is off);
  the N·K slots are then trained on by the ordinary record-level DP-SGD (:func:`empriv.train.dp.dp_finetune`,
  Poisson rate q = b / (N·K)) with σ calibrated at the *user* level: the tight mixture-of-Gaussians PLD
  (:func:`empriv.privacy.user_level.calibrate_group_privacy`) or the naive group-privacy conversion.
- **User-wise DP-SGD** (``userwise-k<K>-<strategy>``): :func:`empriv.train.userwise.userwise_dp_sgd` with units
  Poisson-sampled at q = b / N; each sampled unit gives K records (fixed top-K for longest/shortest/perplexity;
  drawn anew each step for random; K random windows of its concatenated records for chunk), one clipped
  gradient per unit; σ from ordinary accounting over units.

ε = ∞ runs use the same selection with no clipping and no noise. δ is ``params.delta_for(N)`` with N the
number of units. Every random draw comes from the run's own streams (``sampler:selection`` for the
selection, ``sampler`` for Poisson sampling, ``noise`` for the noise).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from empriv.config import ConfigError, Params, RunConfig


@dataclass
class UnitData:
    """The training records of a user-level run: token ids/mask ([M, L], as encode_fixed makes them), the unit of
    each record as codes 0..N-1 (first appearance), the full token list of each record (length strategies and
    chunks), and each record's mean NLL under the initial base model (perplexity strategies; None if absent)."""

    ids: object
    mask: object
    codes: np.ndarray
    unit_names: list[str]
    record_tokens: Sequence[Sequence[int]] | None = None
    scores: np.ndarray | None = None

    @property
    def n_units(self) -> int:
        return len(self.unit_names)

    @property
    def n_records(self) -> int:
        return int(self.codes.shape[0])

    def by_unit(self) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {u: [] for u in range(self.n_units)}
        for i, u in enumerate(self.codes.tolist()):
            out[u].append(i)
        return out


def unit_codes(unit_ids: Sequence[str]) -> tuple[np.ndarray, list[str]]:
    """Codes 0..N-1 for a column of unit ids (numbered by first appearance) and the ids in code order."""
    order: dict[str, int] = {}
    codes = np.fromiter((order.setdefault(str(u), len(order)) for u in unit_ids), dtype=np.int64, count=len(unit_ids))
    return codes, list(order)


def make_unit_data(ids, mask, unit_ids, *, record_tokens=None, scores=None) -> UnitData:
    if unit_ids is None:
        raise ConfigError("a user-level unit needs the privacy unit of every training record, and the prepared "
                          "training split has none: re-run prepare (dvc repro prepare)")
    if len(unit_ids) != ids.shape[0]:
        raise ValueError(f"{len(unit_ids)} unit ids for {ids.shape[0]} training records")
    codes, names = unit_codes(unit_ids)
    if record_tokens is not None and len(record_tokens) != ids.shape[0]:
        raise ValueError(f"{len(record_tokens)} token lists for {ids.shape[0]} training records")
    if scores is not None:
        scores = np.asarray(scores, dtype=np.float64)
        if scores.shape != (ids.shape[0],):
            raise ValueError(f"{scores.shape[0]} record scores for {ids.shape[0]} training records")
    return UnitData(ids, mask, codes, names, record_tokens, scores)


def append_canary_units(ids, mask, unit_ids, record_tokens, record_scores, canaries, *, eos_id: int, seq_len: int):
    """The training records plus the *member* canary units' records of a user-level audit (``canaries``: an
    :class:`empriv.audit.user_level.UserCanaries`): each canary unit is a unit of its own (``canary-u00007``) with
    its k records, encoded as every canary is (the canary set's loss: the secret under ``sft``). A canary unit has
    exactly k records, so every selection strategy keeps all of them; their token lists (length strategies,
    chunks) are prefix + secret, and their perplexity scores (perplexity strategies, which do not choose among
    them) are 0. Returns ``(ids, mask, unit_ids, record_tokens, record_scores)``."""
    import torch

    from empriv.secrets.canaries import encode_canaries

    if unit_ids is None:
        raise ConfigError("a user-level audit needs the privacy unit of every training record, and the prepared "
                          "training split has none: re-run prepare (dvc repro prepare)")
    records, units = [], []
    for i in canaries.member_units:
        for c in canaries.unit_records(i):
            records.append(c)
            units.append(f"canary-{c.id.rsplit('-r', 1)[0]}")
    taken = {str(u) for u in unit_ids}
    clash = sorted(taken.intersection(units))
    if clash:
        raise ValueError(f"a corpus unit is named like a canary unit ({clash[0]!r}): rename it")
    c_ids, c_mask = encode_canaries(records, eos_id, seq_len, canaries.canary_set.loss)
    ids = torch.cat([ids, c_ids.to(ids.dtype)])
    mask = torch.cat([mask, c_mask.to(mask.dtype)])
    tokens = None if record_tokens is None else [*record_tokens, *(list(c.tokens) for c in records)]
    scores = None if record_scores is None else np.concatenate([np.asarray(record_scores, dtype=np.float64),
                                                               np.zeros(len(records))])
    return ids, mask, [*unit_ids, *units], tokens, scores


# --------------------------------------------------------------------------- checks and accounting
def check_user_level(params: Params, run: RunConfig, data: UnitData) -> None:
    """Everything about the run and its data that can be wrong, before any accounting or training: one line each."""
    unit = run.privacy_unit
    n, k = data.n_units, unit.k
    if unit.method == "userwise" and params.runtime.precision != "fp32":
        raise ConfigError(f"runtime.precision {params.runtime.precision!r}: User-wise DP-SGD (cube.unit {run.unit!r}) "
                          "trains in fp32 only (allowed: fp32)")
    if unit.needs_perplexity and data.scores is None:
        raise ConfigError(f"cube.unit {run.unit!r}: a perplexity strategy needs each record's perplexity under the "
                          "initial base model (records/record_scores.json from the record_scores stage)")
    if unit.strategy in ("longest", "shortest", "chunk") and data.record_tokens is None:
        raise ConfigError(f"cube.unit {run.unit!r}: strategy {unit.strategy!r} needs the records' token lists")
    if not params.privacy.user_resample:
        short = [u for u, rows in data.by_unit().items() if len(rows) < k]
        if short:
            smallest = min(len(r) for r in data.by_unit().values())
            raise ConfigError(f"cube.unit {run.unit!r}: {len(short)} unit(s) have fewer than k={k} records (e.g. "
                              f"{data.unit_names[short[0]]!r}) and privacy.user_resample is false (allowed: k <= "
                              f"{smallest}, or privacy.user_resample: true)")
    if unit.method == "group" and run.batch_size > n * k:
        raise ConfigError(f"cube.batch_size {run.batch_size} must be <= units × k = {n} × {k} = {n * k} for "
                          f"cube.unit {run.unit!r} (b counts records per step over the bounded set)")
    if unit.method == "userwise" and run.batch_size > n:
        raise ConfigError(f"cube.batch_size {run.batch_size} must be <= the number of units ({n}) for cube.unit "
                          f"{run.unit!r} (b counts units per step)")


def calibrate_user_level(params: Params, run: RunConfig, n_units: int, cache=None) -> dict:
    """σ for the run's user-level (ε, δ) and the facts of its accounting (what the metrics record)."""
    unit = run.privacy_unit
    delta = params.delta_for(n_units)
    if unit.method == "group":
        n_slots = n_units * unit.k
        q = run.batch_size / n_slots
    else:
        n_slots = None
        q = run.batch_size / n_units
    out = {"delta": delta, "sample_rate": q, "steps": run.steps, "n_units": n_units, "privacy_unit": "user",
           **({"n_bounded_records": n_slots} if n_slots is not None else {})}
    from empriv.train.release import release_record

    if not run.private:
        out.update(noise_multiplier=0.0, accountant=None, epsilon_prv=math.inf, epsilon_rdp=math.inf,
                   user_accounting=None, **release_record(params, run, noise_multiplier=0.0, sample_rate=q))
        return out
    from empriv.privacy.accounting import calibrate_noise_multiplier, epsilon_of
    from empriv.privacy.events import dp_sgd_event

    if unit.method == "group" and params.privacy.group_accounting == "tight":
        cal = cached_group_calibration(run.epsilon, delta, unit.k, q, run.steps, cache)
        out.update(user_accounting="group-tight (mixture-of-Gaussians PLD over Bin(k, q) sensitivities)")
    elif unit.method == "group":
        from empriv.privacy.user_level import calibrate_group_privacy_naive, example_level_for_user_level

        record_eps, record_delta = example_level_for_user_level(run.epsilon, delta, unit.k)
        cal = calibrate_group_privacy_naive(run.epsilon, delta, unit.k, q, run.steps,
                                            accountant=params.privacy.accountant)
        out.update(user_accounting="group-naive (record-level guarantee converted by group privacy)",
                   record_level_epsilon=record_eps, record_level_delta=record_delta)
    else:
        cal = calibrate_noise_multiplier(run.epsilon, delta, q, run.steps, accountant=params.privacy.accountant,
                                         **({"cache": cache} if cache is not None else {}))
        out.update(user_accounting="userwise (DP-SGD accounting over units, one clipped gradient per unit)")
    out.update(noise_multiplier=cal.noise_multiplier, accountant=cal.accountant,
               requested_accountant=cal.requested_accountant, accountant_fallback_reason=cal.fallback_reason,
               epsilon_calibrated=cal.epsilon,
               **release_record(params, run, noise_multiplier=cal.noise_multiplier, sample_rate=q))
    steps_event = dp_sgd_event(cal.noise_multiplier, q, run.steps)  # record-level DP-SGD (over units if userwise)
    if unit.method == "group":
        # Group Privacy has no PRV/RDP ε of its own unit: the user-level ε is the tight PLD's (or the naive
        # conversion of the record-level PRV ε); the record-level ε of the same σ, q, T is kept for comparison.
        record_prv = epsilon_of(steps_event, delta, "prv")
        if params.privacy.group_accounting == "tight":
            user_eps = cal.epsilon
        else:
            from empriv.privacy.user_level import naive_group_privacy

            record_delta = out["record_level_delta"]
            user_eps = naive_group_privacy(epsilon_of(steps_event, record_delta, params.privacy.accountant),
                                           record_delta, unit.k)[0]
        out.update(epsilon_user_level=user_eps, epsilon_record_level_prv=record_prv, epsilon_prv=None,
                   epsilon_rdp=None)
    else:
        out.update(epsilon_prv=epsilon_of(steps_event, delta, "prv"), epsilon_rdp=epsilon_of(steps_event, delta, "rdp"))
        out.update(epsilon_user_level=out["epsilon_prv"])
    return out


def cached_group_calibration(epsilon, delta, k, q, steps, cache=None):
    """:func:`empriv.privacy.user_level.calibrate_group_privacy` through the project's calibration cache: a hit is
    used only after its σ is re-accounted (one PLD) and meets the target; else it is recomputed and replaced."""
    import logging

    from empriv.privacy.calibration import Calibration
    from empriv.privacy.user_level import MOG_VALUE_DISCRETIZATION, calibrate_group_privacy, group_privacy_epsilon

    log = logging.getLogger("empriv.train")
    key = None
    if cache is not None:
        from empriv.privacy.cache import code_versions, entry_key

        key = entry_key({"kind": "group-privacy-mog", "epsilon": float(epsilon), "delta": float(delta), "k": int(k),
                         "sample_rate": float(q), "steps": int(steps), "vdi": MOG_VALUE_DISCRETIZATION},
                        code_versions())
        hit = cache.load(key)
        if hit and hit.get("key") == key:
            cal = Calibration(**hit["calibration"])
            eps = group_privacy_epsilon(cal.noise_multiplier, k, q, steps, delta)
            if eps <= float(epsilon) * (1 + 1e-9):
                return cal
            log.warning("calibration cache entry %s: σ=%.4g gives ε=%.4g > %.4g; recomputing",
                        cache.path(key).name, cal.noise_multiplier, eps, epsilon)
    cal = calibrate_group_privacy(epsilon, delta, k, q, steps)
    if cache is not None:
        cache.store(key, cal.to_dict())
    return cal


# --------------------------------------------------------------------------- selection
def _lengths(data: UnitData) -> np.ndarray | None:
    return None if data.record_tokens is None else np.fromiter((len(t) for t in data.record_tokens), dtype=np.int64,
                                                             count=data.n_records)


def fixed_selection(run: RunConfig, data: UnitData, rng, *, resample: bool):
    """The K records of every unit for the fixed strategies (:func:`empriv.data.selection.select_k`)."""
    from empriv.data.selection import select_k

    unit = run.privacy_unit
    return select_k(data.by_unit(), unit.k, unit.selection_strategy, rng, n_tokens=_lengths(data),
                    scores=data.scores, resample=resample)


@dataclass
class SelectionStats:
    records_per_step: list[int] = field(default_factory=list)
    resampled_units: int = 0


class SelectionState:
    """What a User-wise run's record selection carries from step to step — its NumPy generator (random records,
    random chunks) and the records it selected so far — as the ``extra_state`` of a checkpoint."""

    def __init__(self, rng: np.random.Generator, stats: SelectionStats):
        self.rng, self.stats = rng, stats

    def state_dict(self) -> dict:
        return {"rng": self.rng.bit_generator.state, "records_per_step": list(self.stats.records_per_step)}

    def load_state_dict(self, state: dict) -> None:
        self.rng.bit_generator.state = state["rng"]
        self.stats.records_per_step[:] = [int(x) for x in state["records_per_step"]]


def userwise_selector(run: RunConfig, data: UnitData, rng, *, eos_id: int, seq_len: int, resample: bool,
                      stats: SelectionStats):
    """``select_records(step, units)`` for :func:`empriv.train.userwise.userwise_dp_sgd`: K records (or K chunks) of
    every sampled unit, as ``(ids, mask, unit code per row)``."""
    import torch

    from empriv.data.selection import random_window, unit_stream
    from empriv.models.lm import encode_fixed

    unit = run.privacy_unit
    k = unit.k
    by_unit = data.by_unit()
    stats.resampled_units = sum(1 for rows in by_unit.values() if len(rows) < k)
    if unit.strategy == "chunk":
        streams = {u: unit_stream([data.record_tokens[i] for i in rows]) for u, rows in by_unit.items()}

        def select(step, units):
            windows, owners = [], []
            for u in units.tolist():
                for _ in range(k):
                    windows.append(random_window(streams[u], seq_len - 1, rng))  # encode_fixed puts EOS first
                    owners.append(u)
            stats.records_per_step.append(len(windows))
            if not windows:
                return data.ids[:0], data.mask[:0], torch.zeros(0, dtype=torch.long)
            ids, mask = encode_fixed(windows, eos_id, seq_len)
            return ids, mask, torch.tensor(owners, dtype=torch.long)
        return select

    if unit.strategy == "random":
        def pick(u):
            rows = by_unit[u]
            if len(rows) >= k:
                return [rows[j] for j in rng.choice(len(rows), size=k, replace=False).tolist()]
            return rows + [rows[j] for j in rng.integers(0, len(rows), size=k - len(rows)).tolist()]
    else:
        chosen = fixed_selection(run, data, rng, resample=resample).by_unit()

        def pick(u):
            return chosen[u]

    codes = torch.as_tensor(data.codes)

    def select(step, units):
        rows = [r for u in units.tolist() for r in pick(u)]
        stats.records_per_step.append(len(rows))
        idx = torch.tensor(rows, dtype=torch.long)
        return data.ids[idx], data.mask[idx], codes[idx]
    return select


# --------------------------------------------------------------------------- training
def train_user_level(params: Params, run: RunConfig, model, data: UnitData, *, privacy: dict, streams, device,
                     eos_id: int, on_step=None, checkpoint=None):
    """Train ``model`` in place for the run's user-level unit; returns ``(TrainResult, unit facts)``.

    ``checkpoint`` (:class:`empriv.train.checkpoint.Checkpointer`): checkpoint and resume the training loop
    (Group Privacy: :func:`empriv.train.dp.dp_finetune` on the bounded records; User-wise:
    :func:`empriv.train.userwise.userwise_dp_sgd`, with the record selection's generator in the checkpoint).
    The selection made before training is drawn again from the run's own stream, identically.
    """
    import torch

    from empriv.train.dp import TrainResult, dp_finetune, make_optimizer

    unit = run.privacy_unit
    rng = np.random.default_rng(streams.seed_of("sampler:selection"))
    resample = params.privacy.user_resample
    sigma = privacy["noise_multiplier"] if run.private else None
    facts: dict = {**unit.as_dict(), "n_units": data.n_units, "n_unit_records": data.n_records}
    if unit.method == "group":
        sel = fixed_selection(run, data, rng, resample=resample)
        idx = torch.tensor(sel.records, dtype=torch.long)
        from empriv.train.sampling import GroupSampling

        result = dp_finetune(model, data.ids[idx], data.mask[idx], run=run, noise_multiplier=sigma, params=params,
                             device=device, on_step=on_step, streams=streams,
                             sampling=GroupSampling.of(data.n_units, unit.k, run.batch_size),
                             checkpoint=None if checkpoint is None else checkpoint.with_identity(
                                 loop_unit="group", n_units=data.n_units))
        facts.update(n_bounded_records=len(sel), distinct_records_used=len(set(sel.records)),
                     resampled_units=len(sel.resampled_units), max_records_per_unit=unit.k,
                     mean_records_per_step=float(np.mean(result.batch_sizes)) if result.batch_sizes else 0.0)
        return result, facts

    from empriv.train.userwise import resolve_micro_batch_records, userwise_dp_sgd

    torch.manual_seed(streams.seed_of("dropout"))
    model.to(device).train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = make_optimizer(params.train.optimizer, trainable, run.learning_rate)
    stats = SelectionStats()
    select = userwise_selector(run, data, rng, eos_id=eos_id, seq_len=data.ids.shape[1], resample=resample,
                               stats=stats)
    micro = resolve_micro_batch_records(params.train.micro_batch_size, trainable)
    if checkpoint is not None:
        import hashlib
        import json

        from empriv.train.checkpoint import run_facts

        tokens = None if data.record_tokens is None else [list(map(int, t)) for t in data.record_tokens]
        scores = None if data.scores is None else data.scores.tolist()
        checkpoint = checkpoint.with_identity(
            **run_facts(params, run, n=data.n_units, noise_multiplier=sigma, streams=streams,
                        data=(data.ids, data.mask, torch.as_tensor(data.codes)), model=model),
            selection_inputs=hashlib.sha256(json.dumps([tokens, scores]).encode()).hexdigest()[:16],
            device=torch.device(device).type)

    def hook(step, s):
        if on_step is not None:
            on_step(step, s.mean_unit_loss, s.units)

    out = userwise_dp_sgd(model, optimizer, select, n_units=data.n_units, unit_sample_rate=privacy["sample_rate"],
                          steps=run.steps, clip_norm=params.train.clip_norm, noise_multiplier=sigma,
                          sampler_generator=streams.generator("sampler"),
                          noise_generator=streams.generator("noise", device=device) if sigma is not None else None,
                          micro_batch_records=micro, on_step=hook, checkpoint=checkpoint,
                          extra_state=SelectionState(rng, stats), desc=f"train {run.name}")
    result = TrainResult(losses=[float(x) for x in out.losses], batch_sizes=list(out.units_per_step),
                         empty_batches=out.empty_steps, wall_time_s=out.wall_time_s,
                         micro_batch_size=micro or 0, precision=params.runtime.precision,
                         resumed_from_step=out.resumed_from_step)
    facts.update(mean_units_per_step=float(np.mean(out.units_per_step)), expected_units_per_step=out.expected_units,
                 mean_records_per_step=float(np.mean(stats.records_per_step)) if stats.records_per_step else 0.0,
                 max_records_per_unit_per_step=unit.k, clipped_units_per_step_mean=float(np.mean(
                     out.clipped_units_per_step)) if out.clipped_units_per_step else 0.0,
                 resampled_units=stats.resampled_units)
    return result, facts


__all__ = ["SelectionState", "UnitData", "append_canary_units", "calibrate_user_level", "check_user_level", "fixed_selection", "make_unit_data",
           "train_user_level", "unit_codes", "userwise_selector"]
