"""User-wise DP-SGD (Algorithm 2 of "Mind the Privacy Unit!"): one clipped gradient per privacy unit.

Per step t = 1..T:

1. Poisson-sample units: each of the N units joins 𝓤_t independently with probability q (the
   expected number of units per step is q·N; 𝓤_t may be empty, and the step is still noised).
2. For every sampled unit u, the caller's record selection gives its k'_u records (token ids + loss
   mask; any strategy — fixed top-k, random k, random chunk — lives outside this module).
3. The unit's gradient is that of the MEAN loss over its records,
   g_u = (1/k'_u) Σ_j ∇ℓ_j, and it is clipped ONCE to norm C over all trainable parameters together:
   ĝ_u = g_u · min(1, C/‖g_u‖₂). Records are never clipped one by one.
4. ĝ_t = (Σ_u ĝ_u + N(0, σ²C² I)) / (q·N) is set as ``.grad`` of the trainable parameters and the
   optimizer steps.

A unit's whole data therefore moves the sum by at most C, whatever k'_u is: the sensitivity the
user-level accountant (:func:`empriv.privacy.user_level.calibrate_user_wise`) assumes.

How the per-unit gradients are computed (``strategy``; both give the same numbers):

- ``per_unit`` (default): one forward and backward per unit over its records (plain autograd), the
  unit's gradient accumulated over micro-batches of its records when it has more than
  ``micro_batch_records``, then clipped and added. Memory: one gradient copy beyond the model's.
  Fastest on the CPU in ``benchmarks/studies/userwise_step.py`` (units of k = 4 records: full fine-tuning in
  about half the time of ``per_record``, which materialises every record's gradient of every
  parameter; LoRA in 10–25 % less time).
- ``per_record``: opacus' per-sample gradients (its fast hooks for ``nn.Linear`` — GPT-2's ``Conv1D``
  converted by :func:`empriv.models.adapters.prepare_for_finetuning` — embeddings and layer norms;
  peft's LoRA layers are ``nn.Linear`` too) of the weighted loss Σ_j ℓ_j / k'_{u(j)},
  so record j's per-sample gradient is already ∇ℓ_j / k'_{u(j)}; they are summed per unit with
  ``index_add_``. One forward and one backward serve all units of a micro-batch (runs of at most
  ``micro_batch_records`` records, sorted by unit); a unit split across two micro-batches has its
  partial gradient carried over, so clipping always sees the whole unit. Worth it where many units
  have one or two records, or on accelerators.

Micro-batching changes memory use only — never the Poisson batch, the clipping, the noise (drawn once
per step) or the accounting.

Noise is drawn after all micro-batches, for each trainable parameter in ``model.parameters()`` order,
as ``torch.normal(0, σC, p.shape, generator=noise_generator)``; σ = 0 draws nothing.

``noise_multiplier=None`` is the non-private reference (ε = ∞, the research's "bypass aggregation and
noise"): the same units and records, no clipping, no noise, the mean over the realised units of each
unit's mean-loss gradient (plain autograd, no per-sample gradients); an empty step is a counted no-op.

The pipeline's User-wise units (``cube.unit: userwise-k<K>-<strategy>``) train through it, by way of
:func:`empriv.train.user_level.train_user_level` (docs/user-level.md).

:func:`userwise_dp_sgd` takes a :class:`~empriv.train.checkpoint.Checkpointer`: it saves its state every N steps
(trainable parameters, optimizer, sampler/noise/global generators, the record selection's own state through
``extra_state``, the recorded curves) and resumes from the last complete checkpoint of the same run.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from empriv.checks import require_int, require_real
from empriv.train.sampling import RecordSelector, UserSampling, check_records

STRATEGIES = ("per_unit", "per_record")  # how per-unit gradients are computed (module docstring)


# --------------------------------------------------------------------------- validation


def check_clip_norm(clip_norm) -> float:
    return require_real("clip_norm", clip_norm, gt=0, meaning="C")


def check_noise_multiplier(noise_multiplier) -> float:
    return require_real("noise_multiplier", noise_multiplier, ge=0, meaning="σ")


def check_unit_sample_rate(q) -> float:
    return require_real("unit_sample_rate", q, gt=0, le=1, meaning="q")


def check_expected_units(expected_units) -> float:
    return require_real("expected_units", expected_units, gt=0, meaning="q·N")


# --------------------------------------------------------------------------- sampling


def fixed_records_per_unit(ids: torch.Tensor, mask: torch.Tensor, unit_of_record) -> RecordSelector:
    """A selector giving every sampled unit all of its records (units are 0..N-1 in ``unit_of_record``).

    Use it after bounding each unit to k records (or for units that already have few); strategies that
    draw per step (random k, random chunk) supply their own selector with the same signature.
    """
    unit_of_record = check_records(ids, mask, unit_of_record)
    if unit_of_record.numel() and int(unit_of_record.min()) < 0:
        raise ValueError(f"unit_of_record must be >= 0, got {int(unit_of_record.min())}")
    n_units = int(unit_of_record.max()) + 1 if unit_of_record.numel() else 0
    order = torch.argsort(unit_of_record, stable=True)
    counts = torch.bincount(unit_of_record, minlength=n_units)
    per_unit = list(torch.split(order, counts.tolist()))

    def select(step: int, units: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if units.numel() == 0:
            rows = torch.zeros(0, dtype=torch.long)
        else:
            rows = torch.cat([per_unit[u] for u in units.tolist()])
        return ids[rows], mask[rows], unit_of_record[rows]

    select.n_units = n_units  # type: ignore[attr-defined]
    return select


# --------------------------------------------------------------------------- one step's gradient


@dataclass(frozen=True)
class UnitStepStats:
    """What one user-wise step saw: realised units and records, the mean over units of each unit's mean
    loss (NaN for an empty step), and each unit's gradient norm before clipping (in ``unit_order``)."""

    units: int
    records: int
    mean_unit_loss: float
    unit_order: tuple[int, ...] = ()
    unit_grad_norms: tuple[float, ...] = ()


def _trainable(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    from empriv.train.checkpoint import trainable_named

    return [p for _, p in trainable_named(model, what="nothing to privatise")]


class UserwiseAggregator:
    """Computes the User-wise DP-SGD gradient of one step and sets it as ``.grad`` of the model's
    trainable parameters. ``strategy`` "per_unit" (default) or "per_record" (module docstring); the
    latter wraps the model once with opacus' per-sample-gradient hooks — use the aggregator as a
    context manager (or call :meth:`close`) to remove them. Gradients are computed in training mode
    (the model's mode is restored afterwards).

    ``micro_batch_records``: at most this many records per forward/backward (None: all at once;
    "auto": from a quarter of physical RAM over the float32 per-record gradients, ≤ 64).
    """

    def __init__(self, model: torch.nn.Module, *, clip_norm: float, noise_multiplier: float, expected_units: float,
                 micro_batch_records: int | str | None = None, strategy: str = "per_unit"):
        if strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
        self.strategy = strategy
        self.clip_norm = check_clip_norm(clip_norm)
        self.noise_multiplier = check_noise_multiplier(noise_multiplier)
        self.expected_units = check_expected_units(expected_units)
        self.model = model
        self.params = _trainable(model)
        self.micro_batch_records = resolve_micro_batch_records(micro_batch_records, self.params)
        self.module = None
        self._closed = False
        if strategy == "per_record":
            # opacus' hooks fire on the first layer although token ids need no gradient: harmless.
            warnings.filterwarnings("ignore", message="Full backward hook is firing", category=UserWarning)
            from opacus import GradSampleModule

            self.module = GradSampleModule(model, batch_first=True, loss_reduction="sum")

    def __enter__(self) -> UserwiseAggregator:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Remove opacus' hooks (leaves a plain model, e.g. for saving)."""
        if not self._closed:
            for p in self.params:
                p.grad_sample = None
            if self.module is not None:
                self.module._close()
            self._closed = True

    def __call__(self, ids: torch.Tensor, mask: torch.Tensor, unit_ids, *, noise_generator: torch.Generator | None,
                 sampled_units: int | None = None) -> UnitStepStats:
        """Set ``p.grad`` = (Σ_u clip_C(∇ mean_{j∈u} ℓ_j) + N(0, σ²C²)) / (q·N) for every trainable p.

        ``unit_ids[j]`` names record j's unit; records of one unit need not be adjacent. ``sampled_units``
        is the number of units Poisson sampling drew (default: the distinct ids), which may exceed the
        units with records. ``noise_generator`` seeds the noise (required when σ > 0).
        """
        if self._closed:
            raise ValueError("this UserwiseAggregator is closed (its hooks were removed)")

        unit_ids = check_records(ids, mask, unit_ids)
        if self.noise_multiplier > 0 and not isinstance(noise_generator, torch.Generator):
            raise ValueError(f"noise_generator must be a torch.Generator when noise_multiplier > 0, "
                             f"got {type(noise_generator).__name__}")
        device = self.params[0].device
        uniq, codes = torch.unique(unit_ids, sorted=True, return_inverse=True)
        counts = torch.bincount(codes, minlength=uniq.numel())
        order = torch.argsort(codes, stable=True)
        codes_sorted = codes[order]
        weights = (1.0 / counts.double())[codes_sorted].float()  # 1/k'_u for every record, in sorted order
        n_records = int(ids.shape[0])
        was_training = self.model.training
        self.model.train()  # opacus captures activations in training mode only; the mode is restored below
        try:
            clipped_sum = self._clipped_sum if self.strategy == "per_record" else self._clipped_sum_per_unit
            total, norms, loss_sum = clipped_sum(ids, mask, order, codes_sorted, weights, uniq.numel(), n_records, device)
        finally:
            self.model.train(was_training)
            for p in self.params:
                p.grad_sample = None

        std = self.noise_multiplier * self.clip_norm
        for p, t in zip(self.params, total):
            if std > 0:
                t += torch.normal(0.0, std, size=p.shape, generator=noise_generator, device=noise_generator.device).to(t.device)
            p.grad = (t / self.expected_units).to(p.dtype)
        n_units = int(uniq.numel()) if sampled_units is None else int(sampled_units)
        if n_units < uniq.numel():
            raise ValueError(f"sampled_units ({n_units}) is smaller than the distinct unit ids of the records ({uniq.numel()})")
        return UnitStepStats(
            units=n_units,
            records=n_records,
            mean_unit_loss=loss_sum / uniq.numel() if uniq.numel() else math.nan,
            unit_order=tuple(int(u) for u in uniq.tolist()),
            unit_grad_norms=tuple(float(x) for x in norms.tolist()),
        )

    def _clipped_sum_per_unit(self, ids, mask, order, codes_sorted, weights, n_units, n_records, device):
        """``per_unit``: one forward/backward per unit (its records in micro-batches), plain autograd."""
        from empriv.models.lm import per_sample_mean_nll

        m = self.micro_batch_records or max(n_records, 1)
        total = [torch.zeros_like(p, dtype=torch.float32) for p in self.params]
        norms = torch.zeros(n_units, dtype=torch.float64)
        loss_sum = 0.0
        bounds = torch.searchsorted(codes_sorted, torch.arange(n_units + 1)).tolist()
        for u in range(n_units):
            acc = None
            for start in range(bounds[u], bounds[u + 1], m):
                stop = min(start + m, bounds[u + 1])
                rows = order[start:stop]
                losses = per_sample_mean_nll(self.model, ids[rows].to(device), mask[rows].to(device))
                loss = (losses * weights[start:stop].to(losses.device)).sum()
                grads = torch.autograd.grad(loss, self.params)
                loss_sum += float(loss.detach())
                acc = [g.float() for g in grads] if acc is None else [a + g.float() for a, g in zip(acc, grads)]
            norm = torch.sqrt(sum((g.double() ** 2).sum() for g in acc))
            norms[u] = float(norm)
            factor = float(clip_factors(norm.reshape(1), self.clip_norm)[0])
            for t, g in zip(total, acc):
                t.add_(g, alpha=factor)
        return total, norms, loss_sum

    def _clipped_sum(self, ids, mask, order, codes_sorted, weights, n_units, n_records, device):
        """Σ_u clip_C(g_u) in float32 per trainable parameter, the units' norms, Σ_u mean loss."""
        from empriv.models.lm import per_sample_mean_nll

        m = self.micro_batch_records or max(n_records, 1)
        total = [torch.zeros_like(p, dtype=torch.float32) for p in self.params]
        norms = torch.zeros(n_units, dtype=torch.float64)
        loss_sum = 0.0
        carry: list[torch.Tensor] | None = None  # partial gradient of the unit that continues into the next chunk
        for start in range(0, n_records, m):
            stop = min(start + m, n_records)
            rows = order[start:stop]
            chunk_codes = codes_sorted[start:stop]
            first_code = int(chunk_codes[0])
            local = chunk_codes - first_code  # codes are dense (every code has a record), so a sorted run is contiguous
            n_local = int(chunk_codes[-1]) - first_code + 1
            for p in self.params:
                p.grad_sample = None
            losses = per_sample_mean_nll(self.module, ids[rows].to(device), mask[rows].to(device))
            weighted = losses * weights[start:stop].to(losses.device)
            weighted.sum().backward()
            loss_sum += float(weighted.detach().sum())
            unit_grads = []
            for p in self.params:
                gs = p.grad_sample
                if isinstance(gs, list):  # accumulated over several backward passes: never expected here
                    raise RuntimeError("opacus returned a list of per-sample gradients; one backward per chunk expected")
                g = torch.zeros((n_local, *p.shape), dtype=torch.float32, device=gs.device)
                g.index_add_(0, local.to(gs.device), gs.float())
                unit_grads.append(g)
                p.grad_sample = None
                p.grad = None
            if carry is not None:
                for g, c in zip(unit_grads, carry):
                    g[0] += c
                carry = None
            last_complete = n_local
            if stop < n_records and int(codes_sorted[stop]) == int(chunk_codes[-1]):
                carry = [g[-1].clone() for g in unit_grads]
                last_complete = n_local - 1
            if last_complete == 0:
                continue
            sq = torch.zeros(last_complete, dtype=torch.float64, device=unit_grads[0].device)
            for g in unit_grads:
                sq += g[:last_complete].reshape(last_complete, -1).double().pow(2).sum(1)
            chunk_norms = sq.sqrt()
            norms[first_code:first_code + last_complete] = chunk_norms.cpu()
            factors = clip_factors(chunk_norms, self.clip_norm).float()
            for t, g in zip(total, unit_grads):
                t += torch.tensordot(factors, g[:last_complete], dims=1)
        return total, norms, loss_sum


def clip_factors(norms: torch.Tensor, clip_norm: float) -> torch.Tensor:
    """min(1, C/‖g‖) for every norm (1 for a zero gradient): the paper's g / max(1, ‖g‖/C)."""
    return torch.where(norms > clip_norm, clip_norm / norms.clamp_min(torch.finfo(norms.dtype).tiny), torch.ones_like(norms))


def resolve_micro_batch_records(setting, params: Sequence[torch.Tensor]) -> int | None:
    if setting is None:
        return None
    if setting == "auto":
        from empriv.train.precision import CPU_DEFAULT, cpu_micro_batch_size, physical_memory_bytes

        n = sum(p.numel() for p in params)
        ram = physical_memory_bytes()
        # per record: its float32 per-sample gradient plus (at most) one unit row of the same size
        return cpu_micro_batch_size(CPU_DEFAULT, 8 * n, ram // 4 if ram else None)
    return require_int("micro_batch_records", setting, 1)


def userwise_noised_gradient(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor, unit_ids, *,
                             clip_norm: float, noise_multiplier: float, expected_units: float,
                             noise_generator: torch.Generator | None,
                             micro_batch_records: int | str | None = None, strategy: str = "per_unit") -> UnitStepStats:
    """One step's User-wise DP-SGD gradient set as ``.grad`` (wraps and unwraps the model; for many
    steps keep one :class:`UserwiseAggregator`)."""
    with UserwiseAggregator(model, clip_norm=clip_norm, noise_multiplier=noise_multiplier,
                            expected_units=expected_units, micro_batch_records=micro_batch_records,
                            strategy=strategy) as agg:
        return agg(ids, mask, unit_ids, noise_generator=noise_generator)


def nonprivate_unit_mean_gradient(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor, unit_ids) -> UnitStepStats:
    """ε = ∞ reference: ``.grad`` = mean over the realised units of each unit's mean-loss gradient
    (no clipping, no noise; plain autograd). No records: gradients set to None (the caller skips the step)."""
    from empriv.models.lm import per_sample_mean_nll

    unit_ids = check_records(ids, mask, unit_ids)
    params = _trainable(model)
    for p in params:
        p.grad = None
    if unit_ids.numel() == 0:
        return UnitStepStats(units=0, records=0, mean_unit_loss=math.nan)
    uniq, codes = torch.unique(unit_ids, return_inverse=True)
    counts = torch.bincount(codes).double()
    device = params[0].device
    losses = per_sample_mean_nll(model, ids.to(device), mask.to(device))
    weighted = losses * (1.0 / counts)[codes].float().to(losses.device)
    (weighted.sum() / uniq.numel()).backward()
    return UnitStepStats(units=int(uniq.numel()), records=int(ids.shape[0]),
                         mean_unit_loss=float(weighted.detach().sum()) / uniq.numel(),
                         unit_order=tuple(int(u) for u in uniq.tolist()))


# --------------------------------------------------------------------------- T steps


@dataclass
class UserwiseRunResult:
    """Per step: realised units and records, mean unit loss; the sampled unit indices; counts."""

    units_per_step: list[int] = field(default_factory=list)
    records_per_step: list[int] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    unit_batches: list[list[int]] = field(default_factory=list)
    clipped_units_per_step: list[int] = field(default_factory=list)
    empty_steps: int = 0
    expected_units: float = 0.0
    wall_time_s: float = 0.0
    resumed_from_step: int | None = None  # steps a checkpoint had done when this run resumed (None: from step 0)

    _CURVES = ("units_per_step", "records_per_step", "losses", "unit_batches", "clipped_units_per_step")


def userwise_dp_sgd(model: torch.nn.Module, optimizer: torch.optim.Optimizer, select_records: RecordSelector, *,
                    n_units: int, unit_sample_rate: float, steps: int, clip_norm: float,
                    noise_multiplier: float | None, sampler_generator: torch.Generator,
                    noise_generator: torch.Generator | None = None, micro_batch_records: int | str | None = None,
                    strategy: str = "per_unit",
                    on_step: Callable[[int, UnitStepStats], None] | None = None,
                    checkpoint=None, extra_state=None, desc: str | None = None) -> UserwiseRunResult:
    """Run exactly ``steps`` steps of User-wise DP-SGD on ``model`` (in place) with ``optimizer``.

    Units 0..``n_units``-1 are Poisson-sampled with rate q from ``sampler_generator``;
    ``select_records(step, units)`` returns the sampled units' records (ids, mask, unit id per record —
    every id must be one of ``units``): together the :class:`~empriv.train.sampling.UserSampling` strategy of the
    loop (:class:`empriv.train.loop.DPLoop`). Every step — empty ones included — sets the noised gradient
    and calls ``optimizer.step()``; σ is the caller's (calibrated for (q, T) by
    :func:`empriv.privacy.user_level.calibrate_user_wise`). ``noise_multiplier=None``: non-private
    reference (see the module docstring). ``on_step(step, stats)`` is called after every step; ``desc``: a progress
    bar over the steps.

    ``checkpoint`` (:class:`empriv.train.checkpoint.Checkpointer`; its identity should name the run, e.g. through
    :func:`empriv.train.checkpoint.run_facts`): save the loop's state after every ``checkpoint.every``-th step and
    resume from the latest checkpoint with the same fingerprint (this loop adds N, q, T, C, σ, the strategy, the
    micro-batch and the trainable parameters to it); the checkpoints are deleted when the loop completes (unless
    ``checkpoint.clear_on_completion`` is False). ``extra_state``: an object with ``state_dict()`` (JSON-able) and
    ``load_state_dict(state)`` holding what ``select_records`` draws from (e.g. its NumPy generator), checkpointed
    with the rest. ``result.resumed_from_step`` is the step the run resumed from.
    """
    from empriv.train.checkpoint import load_trainable_state, trainable_digest, trainable_state
    from empriv.train.loop import DPLoop

    q = check_unit_sample_rate(unit_sample_rate)
    require_int("n_units", n_units, 1)
    require_int("steps", steps, 1)
    private = noise_multiplier is not None
    if private:
        check_clip_norm(clip_norm)
        check_noise_multiplier(noise_multiplier)
    expected = q * n_units
    model.train()
    agg = (UserwiseAggregator(model, clip_norm=clip_norm, noise_multiplier=noise_multiplier, expected_units=expected,
                              micro_batch_records=micro_batch_records, strategy=strategy) if private else None)
    loop = DPLoop(sampling=UserSampling(n_units, q, select_records), steps=steps,
                  curves=("losses", *(c for c in UserwiseRunResult._CURVES if c != "losses")),
                  checkpoint=checkpoint, extra_state=extra_state, facts={
                      "loop": "userwise", "n_units": n_units, "unit_sample_rate": q, "steps": steps,
                      "clip_norm": float(clip_norm) if private else None,
                      "sigma": float(noise_multiplier) if private else None, "strategy": strategy,
                      "micro_batch_records": agg.micro_batch_records if agg is not None else None,
                      "trainable": trainable_digest(model)})

    def step(t: int, batch) -> dict:
        optimizer.zero_grad(set_to_none=True)
        if private:
            stats = agg(batch.ids, batch.mask, batch.unit_ids, noise_generator=noise_generator,
                        sampled_units=batch.numel())
            clipped = sum(1 for x in stats.unit_grad_norms if x > clip_norm)
            optimizer.step()
        else:
            stats = nonprivate_unit_mean_gradient(model, batch.ids, batch.mask, batch.unit_ids)
            stats = UnitStepStats(units=batch.numel(), records=stats.records, mean_unit_loss=stats.mean_unit_loss,
                                  unit_order=stats.unit_order)
            clipped = 0
            if stats.records:
                optimizer.step()
        return {"units_per_step": stats.units, "records_per_step": stats.records, "losses": stats.mean_unit_loss,
                "unit_batches": batch.units.tolist(), "clipped_units_per_step": clipped, "stats": stats}

    try:
        snapshot = loop.resume_point()
        if snapshot is not None:
            load_trainable_state(model, snapshot.tensors["trainable"])
            optimizer.load_state_dict(snapshot.tensors["optimizer"])
        loop.run(step, generators={"sampler": sampler_generator, "noise": noise_generator},
                 tensors=lambda: {"trainable": trainable_state(model), "optimizer": optimizer.state_dict()},
                 on_step=None if on_step is None else (lambda t, v: on_step(t, v["stats"])), desc=desc)
    finally:
        if agg is not None:
            agg.close()
        optimizer.zero_grad(set_to_none=True)
    result = UserwiseRunResult(**loop.curves, empty_steps=loop.empty, expected_units=expected,
                               wall_time_s=loop.wall_time_s, resumed_from_step=loop.resumed_from_step)
    model.eval()
    return result
