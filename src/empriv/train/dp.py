"""DP fine-tuning of one configuration of the cube (DP-Adam by default, or DP-SGD), with opacus.

Per step t = 1..T: a Poisson batch (rate q = b/n) is drawn and split into physical micro-batches;
opacus computes per-example gradients of each example's mean token NLL, clips each to norm C,
sums them across micro-batches, adds N(0, σ²C²) noise once per step, and divides by the expected
batch size b; then Adam (or SGD) applies the step. An empty Poisson batch still adds noise and
counts as a step. σ is calibrated so that T such steps meet the run's (ε, δ).

ε = ∞ is the non-private reference: the same Poisson batches, no clipping and no noise, the mean
loss over the batch.
"""

from __future__ import annotations

import logging
import math
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

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
) -> TrainResult:
    """Train ``model`` in place for exactly ``run.steps`` steps; returns the loss curve.

    ``noise_multiplier`` None means non-private (ε = ∞). ``on_step(step, loss, batch_size)`` is
    called after every step (for logging). ``streams`` (:class:`empriv.randomness.RunStreams`,
    default: the run's training streams for ``train.method``) seeds the Poisson sampler, the DP
    noise and dropout, each from its own stream, so no two configurations share a draw.
    """
    from tqdm import tqdm

    from empriv.models.lm import per_sample_mean_nll
    from empriv.train.sampling import micro_batches, poisson_batches

    tp = params.train
    n = ids.shape[0]
    q = run.batch_size / n
    from empriv.randomness import RunStreams

    if streams is None:
        streams = RunStreams.of(run, method=tp.method)
    gen = streams.generator("sampler")
    torch.manual_seed(streams.seed_of("dropout"))  # dropout (and anything else) draws from torch's global RNG
    model.to(device).train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = make_optimizer(tp.optimizer, trainable, run.learning_rate)
    private = noise_multiplier is not None
    if private:
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

    result = TrainResult()
    t0 = time.time()
    batches = poisson_batches(n, q, run.steps, gen)
    for step, batch in enumerate(tqdm(batches, total=run.steps, desc=run.name, mininterval=5, disable=None)):
        chunks = micro_batches(batch, tp.micro_batch_size)
        loss_sum = 0.0
        if private:
            for k, chunk in enumerate(chunks):
                last = k == len(chunks) - 1
                if chunk.numel() == 0:
                    # Empty Poisson batch: zero per-sample gradients, noise is still added below.
                    result.empty_batches += 1
                    for p in params_list:
                        p.grad_sample = torch.zeros((0, *p.shape), device=p.device, dtype=p.dtype)
                else:
                    losses = per_sample_mean_nll(module, ids[chunk].to(device), mask[chunk].to(device))
                    losses.sum().backward()
                    loss_sum += float(losses.detach().sum())
                if not last:
                    optimizer.signal_skip_step(do_skip=True)
                optimizer.step()  # clips + accumulates; on the last chunk also noises, scales, steps
                optimizer.zero_grad(set_to_none=True)
        else:
            optimizer.zero_grad(set_to_none=True)
            if batch.numel() == 0:
                result.empty_batches += 1
            for chunk in chunks:
                if chunk.numel() == 0:
                    continue
                losses = per_sample_mean_nll(module, ids[chunk].to(device), mask[chunk].to(device))
                (losses.sum() / batch.numel()).backward()
                loss_sum += float(losses.detach().sum())
            if batch.numel():
                optimizer.step()
        bsz = int(batch.numel())
        mean_loss = loss_sum / bsz if bsz else math.nan
        result.losses.append(mean_loss)
        result.batch_sizes.append(bsz)
        result.batches.append(batch.tolist())
        if on_step is not None:
            on_step(step, mean_loss, bsz)
    result.wall_time_s = time.time() - t0
    if private:
        # Leave a plain module behind (no hooks) for saving.
        module._close()
    model.eval()
    return result
