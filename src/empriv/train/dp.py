"""DP fine-tuning of one configuration of the cube (DP-Adam by default, or DP-SGD), with opacus.

Per step t = 1..T: a Poisson batch (rate q = b/n) is drawn and split into physical micro-batches;
opacus computes per-example gradients of each example's mean token NLL, clips each to norm C,
sums them across micro-batches, adds N(0, σ²C²) noise once per step, and divides by the expected
batch size b; then Adam (or SGD) applies the step. An empty Poisson batch still adds noise and
counts as a step. σ is calibrated so that T such steps meet the run's (ε, δ).

ε = ∞ is the non-private reference: the same Poisson batches, no clipping and no noise, the mean
loss over the batch.

``runtime.precision`` bf16 runs the forward passes under bfloat16 autocast; per-sample gradients are
cast to float32 before clipping, so clipping, noise and weights stay float32. ``train.micro_batch_size``
auto chooses the physical micro-batch to fit memory (:mod:`empriv.train.precision`); it changes
memory use only, never the Poisson batches, the noise (drawn once per logical step) or the accounting.

With a :class:`~empriv.train.checkpoint.Checkpointer` the loop saves its whole state every N steps and, re-run
after a kill, resumes from the last complete checkpoint of the same run: the rest of the run draws the same
batches, noise and dropout masks as the uninterrupted run would have, and each step is taken (and accounted)
once.
"""

from __future__ import annotations

import logging
import math
import warnings
from dataclasses import dataclass, field

import torch

from empriv.config import Params, RunConfig

log = logging.getLogger("empriv.train")


@dataclass
class TrainResult:
    losses: list[float] = field(default_factory=list)
    batch_sizes: list[int] = field(default_factory=list)
    empty_batches: int = 0
    wall_time_s: float = 0.0
    batches: list[list[int]] = field(default_factory=list)  # the Poisson batches' record indices, step by step
    micro_batch_size: int = 0  # the physical micro-batch used (train.micro_batch_size, or what auto chose)
    precision: str = "fp32"  # runtime.precision of the forward passes
    dp_step: str = "none"  # the private step taken: fast | opacus | none (non-private)
    dp_step_reason: str | None = None  # why train.dp_step auto took opacus
    resumed_from_step: int | None = None  # steps a checkpoint had done when this run resumed (None: from step 0)


def make_optimizer(name: str, parameters, lr: float) -> torch.optim.Optimizer:
    if name == "adam":
        return torch.optim.Adam(parameters, lr=lr)
    if name == "sgd":
        return torch.optim.SGD(parameters, lr=lr)
    raise ValueError(f"train.optimizer must be 'adam' or 'sgd', got {name!r}")


def dp_finetune(
    model: torch.nn.Module,
    ids: torch.Tensor,
    mask: torch.Tensor,
    *,
    run: RunConfig,
    noise_multiplier: float | None,
    params: Params,
    device: torch.device,
    on_step=None,
    streams=None,
    probe_memory: bool | None = None,
    inspect_dp_step=None,
    checkpoint=None,
    sampling=None,
) -> TrainResult:
    """Train ``model`` in place for exactly ``run.steps`` steps; returns the loss curve.

    ``noise_multiplier`` None means non-private (ε = ∞). ``on_step(step, loss, batch_size)`` is
    called after every step (for logging). ``streams`` (:class:`empriv.randomness.RunStreams`,
    default: the run's training streams for ``train.method``) seeds the Poisson sampler, the DP
    noise and dropout, each from its own stream, so no two configurations share a draw.

    ``params.runtime.precision`` (fp32 | bf16) sets the forward passes' precision; an unsupported
    precision/device pair raises ``ValueError`` before any work. ``train.micro_batch_size`` auto:
    probed with real forward + backward passes when ``probe_memory`` (default: on CUDA), else the
    CPU estimate of :func:`empriv.train.precision.cpu_micro_batch_size`; the probe draws nothing from
    the run's random streams and sees no training record (it runs on all-zero token ids).
    ``inspect_dp_step(optimizer, phase)`` (diagnostics, tests) is called around every DPOptimizer step:
    phase "before" with the micro-batch's per-sample gradients in ``p.grad_sample`` (already float32),
    "after" once the step ran (after a step's last micro-batch ``p.grad`` holds the noised gradient).

    ``checkpoint`` (:class:`empriv.train.checkpoint.Checkpointer`): save the trainable parameters, the optimizer's
    state, every random stream (sampler, noise, torch's global generator for dropout, Python's and NumPy's), the
    recorded curves and the step count after every ``checkpoint.every``-th step; start from the latest checkpoint
    this run wrote (same fingerprint: run, unit, method, params, n, σ, streams, data, trainable parameters), and
    delete the checkpoints when the loop completes (unless ``checkpoint.clear_on_completion`` is False).
    ``result.resumed_from_step`` is the step it resumed from. With ``train.micro_batch_size`` auto a resumed run
    keeps the micro-batch the checkpoint used (summation order, hence bit-identity, depends on it).

    ``sampling``: the privacy unit's sampling strategy over the ``ids`` rows (:mod:`empriv.train.sampling`; default
    :class:`~empriv.train.sampling.RecordSampling` at q = b/n; Group Privacy passes its
    :class:`~empriv.train.sampling.GroupSampling` over the N·K bounded slots). The loop itself is
    :class:`empriv.train.loop.DPLoop`; this function supplies the DP step.
    """
    from empriv.models.lm import per_sample_mean_nll
    from empriv.randomness import RunStreams
    from empriv.train.checkpoint import load_trainable_state, run_facts, trainable_state
    from empriv.train.loop import DPLoop
    from empriv.train.precision import autocast, check_precision, grad_samples_to_fp32
    from empriv.train.sampling import RecordSampling, micro_batches

    tp = params.train
    precision = params.runtime.precision
    device = torch.device(device)
    check_precision(precision, device)
    n = ids.shape[0]
    if sampling is None:
        sampling = RecordSampling(n, run.batch_size / n)
    elif sampling.n != n:
        raise ValueError(f"the sampling strategy samples {sampling.n} records, the run has {n}")
    if streams is None:
        streams = RunStreams.of(run, method=tp.method)
    gen = streams.generator("sampler")
    torch.manual_seed(streams.seed_of("dropout"))  # dropout (and anything else) draws from torch's global RNG
    model.to(device).train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    if precision != "fp32" and any(p.dtype != torch.float32 for p in trainable):
        raise ValueError(f"runtime.precision {precision!r} keeps float32 master weights, but the trainable parameters "
                         f"are {sorted({str(p.dtype) for p in trainable})}: load the base in float32")
    private = noise_multiplier is not None
    step_kind, step_reason = dp_step_kind(tp.dp_step, model, private)
    loop = DPLoop(sampling=sampling, steps=run.steps, curves=("losses", "batch_sizes", "batches"),
                  checkpoint=checkpoint, facts=None if checkpoint is None else {
                      "loop": "record", **run_facts(params, run, n=n, noise_multiplier=noise_multiplier,
                                                    streams=streams, data=(ids, mask), model=model),
                      "device": device.type, "dp_step": step_kind})
    snapshot = loop.resume_point()
    if snapshot is not None:
        load_trainable_state(model, snapshot.tensors["trainable"])
    optimizer = make_optimizer(tp.optimizer, trainable, run.learning_rate)
    fast = step_kind == "fast"
    if step_reason:
        log.info("%s: DP step %s (%s)", run.name, step_kind, step_reason)
    if fast:
        module = model
        noise_gen = streams.generator("noise", device=device)
    elif private:
        # opacus' hooks fire on the first layer although token ids need no gradient: harmless.
        warnings.filterwarnings("ignore", message="Full backward hook is firing", category=UserWarning)
        from opacus import GradSampleModule
        from opacus.optimizers import DPOptimizer

        module = GradSampleModule(model, batch_first=True, loss_reduction="sum")
        noise_gen = streams.generator("noise", device=device)
        optimizer = DPOptimizer(
            optimizer,
            noise_multiplier=noise_multiplier,
            max_grad_norm=tp.clip_norm,
            expected_batch_size=run.batch_size,
            loss_reduction="mean",  # only scales the noised sum by 1/b; per-sample losses are summed
            generator=noise_gen,
        )
        params_list = optimizer.params
    else:
        module = model
        noise_gen = None

    result = TrainResult(precision=precision, dp_step=step_kind, dp_step_reason=step_reason)
    if snapshot is not None and tp.micro_batch_size == "auto":
        result.micro_batch_size = int(snapshot.state["micro_batch_size"])
    else:
        result.micro_batch_size = resolve_micro_batch_size(
            tp.micro_batch_size, run=run, module=module, trainable=trainable, private=private,
            optimizer_name=tp.optimizer, seq_len=ids.shape[1], precision=precision, device=device, probe=probe_memory,
        )
    if snapshot is not None:
        optimizer.load_state_dict(snapshot.tensors["optimizer"])  # a DPOptimizer loads into the optimizer it wraps

    def step(t: int, batch: torch.Tensor) -> dict:
        chunks = micro_batches(batch, result.micro_batch_size)
        loss_sum = 0.0
        if fast:
            from empriv.models.fast_dp import fast_dp_step

            optimizer.zero_grad(set_to_none=True)
            stats = fast_dp_step(model, ids[batch], mask[batch], clip_norm=tp.clip_norm,
                                 noise_multiplier=noise_multiplier, expected_batch_size=run.batch_size,
                                 generator=noise_gen, micro_batch_size=result.micro_batch_size,
                                 forward_context=lambda: autocast(precision, device))
            if inspect_dp_step is not None:
                inspect_dp_step(stats, "fast")
            loss_sum = float(stats.losses.sum())
            optimizer.step()
        elif private:
            for k, chunk in enumerate(chunks):
                last = k == len(chunks) - 1
                if chunk.numel() == 0:
                    # Empty Poisson batch: zero per-sample gradients, noise is still added below.
                    for p in params_list:
                        p.grad_sample = torch.zeros((0, *p.shape), device=p.device, dtype=p.dtype)
                else:
                    with autocast(precision, device):
                        losses = per_sample_mean_nll(module, ids[chunk].to(device), mask[chunk].to(device))
                    losses.sum().backward()
                    grad_samples_to_fp32(params_list)  # clip, sum and noise in float32 (no-op under fp32)
                    loss_sum += float(losses.detach().sum())
                if not last:
                    optimizer.signal_skip_step(do_skip=True)
                if inspect_dp_step is not None:
                    inspect_dp_step(optimizer, "before")
                optimizer.step()  # clips + accumulates; on the last chunk also noises, scales, steps
                if inspect_dp_step is not None:
                    inspect_dp_step(optimizer, "after")
                optimizer.zero_grad(set_to_none=True)
        else:
            optimizer.zero_grad(set_to_none=True)
            for chunk in chunks:
                if chunk.numel() == 0:
                    continue
                with autocast(precision, device):
                    losses = per_sample_mean_nll(module, ids[chunk].to(device), mask[chunk].to(device))
                (losses.sum() / batch.numel()).backward()
                loss_sum += float(losses.detach().sum())
            if batch.numel():
                optimizer.step()
        bsz = int(batch.numel())
        return {"losses": loss_sum / bsz if bsz else math.nan, "batch_sizes": bsz, "batches": batch.tolist()}

    loop.run(step, generators={"sampler": gen, "noise": noise_gen},
             tensors=lambda: {"trainable": trainable_state(model), "optimizer": optimizer.state_dict()},
             state=lambda: {"micro_batch_size": result.micro_batch_size},
             on_step=None if on_step is None else (lambda t, v: on_step(t, v["losses"], v["batch_sizes"])),
             desc=f"train {run.name}", logger=log)
    result.losses, result.batch_sizes, result.batches = (loop.curves[k] for k in ("losses", "batch_sizes", "batches"))
    result.empty_batches, result.wall_time_s, result.resumed_from_step = loop.empty, loop.wall_time_s, \
        loop.resumed_from_step
    if private and not fast:
        # Leave a plain module behind (no hooks) for saving.
        module._close()
    model.eval()
    return result


def dp_step_kind(setting: str, model: torch.nn.Module, private: bool) -> tuple[str, str | None]:
    """(which private step the loop takes, why when it is not the one asked for): ``train.dp_step`` fast or opacus;
    auto = fast unless a trainable module is one the fast step cannot record (then opacus, and the reason). A
    non-private run takes neither ("none")."""
    if not private:
        return "none", None
    if setting == "opacus":
        return "opacus", None
    from empriv.models.fast_dp import unsupported_modules

    missing = unsupported_modules(model)
    if not missing:
        return "fast", None
    if setting == "fast":
        raise ValueError(f"train.dp_step 'fast' cannot record {', '.join(missing[:3])}"
                         f"{' …' if len(missing) > 3 else ''}: use train.dp_step auto or opacus")
    return "opacus", f"train.dp_step auto: the fast step cannot record {', '.join(missing[:3])}" \
                     f"{' …' if len(missing) > 3 else ''}; opacus' per-sample hooks instead"


def resolve_micro_batch_size(setting, *, run: RunConfig, module, trainable, private: bool, optimizer_name: str,
                             seq_len: int, precision: str, device: torch.device, probe: bool | None = None) -> int:
    """The physical micro-batch: ``setting`` when it is an int; for "auto" the largest power of two
    from :func:`~empriv.train.precision.auto_start` (≤ 256) that a real forward + backward fits
    (``probe``; default: on CUDA), else the CPU estimate (a quarter of RAM for the DP per-sample gradients)."""
    from empriv.train.precision import auto_start, cpu_micro_batch_size, physical_memory_bytes, probe_micro_batch_size

    if setting != "auto":
        return int(setting)
    start = auto_start(run.batch_size)
    if probe is None:
        probe = device.type == "cuda"
    if not probe:
        n_trainable = sum(p.numel() for p in trainable)
        ram = physical_memory_bytes()
        m = cpu_micro_batch_size(start, 4 * n_trainable if private else 0, ram // 4 if ram else None)
        log.info("train.micro_batch_size auto: %d on %s (estimate, not probed)", m, device)
        return m
    try_batch = memory_probe(module, trainable, private=private, optimizer_name=optimizer_name, seq_len=seq_len,
                             precision=precision, device=device)
    # The probe's dropout draws must not shift the run's streams: fork the RNGs it could touch.
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        return probe_micro_batch_size(try_batch, start, device=str(device))


def memory_probe(module, trainable, *, private: bool, optimizer_name: str, seq_len: int, precision: str,
                 device: torch.device):
    """``try_batch(m)`` for :func:`~empriv.train.precision.probe_micro_batch_size`: what one training
    micro-batch of m examples allocates — a forward (under the run's precision) and backward through
    ``module`` (the GradSampleModule under DP), per-sample gradients cast to float32 — while a
    reserve of the buffers the optimizer step adds later is held (DP: clipped sum and noised gradient;
    Adam: two moments; 4 bytes per trainable parameter each). Inputs are all-zero token ids (memory
    depends on shapes only, so no private record is touched); every gradient and opacus activation is
    cleared afterwards, whether the try fit or not."""
    from empriv.models.lm import per_sample_mean_nll
    from empriv.train.precision import autocast, grad_samples_to_fp32

    n_trainable = sum(p.numel() for p in trainable)
    extra_buffers = (2 if private else 0) + (2 if optimizer_name == "adam" else 0)

    def clear() -> None:
        for p in trainable:
            p.grad = None
            if hasattr(p, "grad_sample"):
                p.grad_sample = None
        for sub in module.modules():
            for attr in ("activations", "max_batch_len"):
                if hasattr(sub, attr):
                    delattr(sub, attr)

    def try_batch(m: int) -> None:
        try:
            reserve = torch.empty(extra_buffers * n_trainable, dtype=torch.float32, device=device)
            x = torch.zeros((m, seq_len), dtype=torch.long, device=device)
            with autocast(precision, device):
                losses = per_sample_mean_nll(module, x, torch.ones((m, seq_len), device=device))
            losses.sum().backward()
            if private:
                grad_samples_to_fp32(trainable)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            del reserve, x, losses
        finally:
            clear()

    return try_batch
