"""Numeric precision and physical micro-batch size of a training run (``runtime.precision``,
``train.micro_batch_size``).

Precision. ``fp32`` runs everything in float32. ``bf16`` runs the *forward passes* of training
under ``torch.autocast(device_type, dtype=torch.bfloat16)``: matrix products take bfloat16 inputs,
the weights stay float32 (master weights), the loss is computed in float32. Under DP the per-sample
gradients opacus collects are then partly bfloat16 (a layer's gradient takes the dtype of its
autocast output); :func:`grad_samples_to_fp32` casts every ``p.grad_sample`` to float32 before the
DPOptimizer computes per-sample norms, clips and sums them, so clipping, the Gaussian noise (opacus
draws it with the dtype of the clipped sum, i.e. of the parameter) and the update are float32. bf16
where the device cannot run it is an error, never a silent fallback (:func:`check_precision`).

Micro-batch. The logical batch of a step is the Poisson batch (expected size b); it is processed in
physical micro-batches whose size changes memory use only — the clipped per-sample gradients are
summed over micro-batches and noised once per logical step, so the result and the privacy
accounting do not depend on it. ``auto`` picks the size: on CUDA by probing (:func:`probe_micro_batch_size`
with a real forward + backward, :func:`auto_start`), on the CPU by an estimate
(:func:`cpu_micro_batch_size`).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
from collections.abc import Callable, Iterable

import torch

from empriv.checks import require_int

log = logging.getLogger("empriv.train")

PRECISIONS = ("fp32", "bf16")
AUTO_CAP = 256  # the largest micro-batch ``auto`` tries
CPU_DEFAULT = 64  # ``auto`` on the CPU: at most this many examples per micro-batch


def check_precision(precision: str, device: torch.device) -> None:
    """Raise a one-line ``ValueError`` naming runtime.precision, its value and the device if the
    device cannot run it. bf16: the CPU always can (autocast bf16 on CPU); CUDA when
    ``torch.cuda.is_bf16_supported()`` (Ampere or newer); no other device type here."""
    device = torch.device(device)
    if precision not in PRECISIONS:
        raise ValueError(f"runtime.precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if precision == "fp32":
        return
    if device.type == "cpu":
        return
    if device.type == "cuda":
        if torch.cuda.is_available() and torch.cuda.is_bf16_supported():
            return
        why = "torch.cuda.is_bf16_supported() is False (bf16 needs an Ampere or newer GPU)"
    else:
        why = "bf16 autocast is supported here on cpu and cuda only"
    raise ValueError(f"runtime.precision {precision!r} is not supported on device {str(device)!r}: {why}; "
                     "use runtime.precision: fp32")


def autocast(precision: str, device: torch.device):
    """The context the training forward passes run in: nothing for fp32 (bit-identical to no
    context at all), ``torch.autocast(device.type, dtype=torch.bfloat16)`` for bf16."""
    if precision == "fp32":
        return contextlib.nullcontext()
    if precision == "bf16":
        return torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16)
    raise ValueError(f"runtime.precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")


def grad_samples_to_fp32(params: Iterable[torch.nn.Parameter]) -> None:
    """Cast every ``p.grad_sample`` (a tensor, or opacus' list of them) to float32, in place on ``p``.

    Called after each backward and before the DPOptimizer's step, so per-sample norms, clipping,
    the clipped sum and hence the noise (drawn like the sum) are float32. Already-float32 tensors
    are kept as they are (no copy): fp32 runs are unchanged bit for bit.
    """
    for p in params:
        gs = getattr(p, "grad_sample", None)
        if gs is None:
            continue
        if isinstance(gs, list):
            p.grad_sample = [g if g.dtype == torch.float32 else g.float() for g in gs]
        elif gs.dtype != torch.float32:
            p.grad_sample = gs.float()


# --------------------------------------------------------------------------- micro-batch size
def auto_start(batch_size: int, cap: int = AUTO_CAP) -> int:
    """The first size ``auto`` tries: the smallest power of two ≥ b, at most ``cap``
    (b = 100 → 128: a typical Poisson batch of ~100 ± 10 is one micro-batch)."""
    require_int("batch_size", batch_size, 1)
    return min(cap, 1 << math.ceil(math.log2(batch_size)))


def probe_micro_batch_size(try_batch: Callable[[int], None], start: int, *, device: str = "cuda") -> int:
    """The largest of ``start, start // 2, …, 1`` for which ``try_batch(m)`` returns without
    ``torch.OutOfMemoryError``; raises ``torch.OutOfMemoryError`` with a clear message if even 1 fails.

    ``try_batch(m)`` must run what training does with a micro-batch of ``m`` examples (a forward and
    backward with the same per-sample-gradient module, plus the step's extra buffers) and leave no
    state behind. Between tries the CUDA cache is emptied (when CUDA is in use). Any other exception
    propagates unchanged.
    """
    require_int("start", start, 1)
    tried: list[int] = []
    m = start
    while m >= 1:
        tried.append(m)
        fits = True
        try:
            try_batch(m)
        except torch.OutOfMemoryError:
            fits = False  # leave the except block first: the traceback holds the failed try's tensors
        if fits:
            log.info("train.micro_batch_size auto: %d fits on %s (tried %s)", m, device, ", ".join(map(str, tried)))
            return m
        if torch.cuda.is_initialized():
            torch.cuda.empty_cache()
        m //= 2
    raise torch.OutOfMemoryError(
        f"train.micro_batch_size auto: even a micro-batch of 1 example does not fit in memory on {device} "
        f"(tried {', '.join(map(str, tried))}); use runtime.precision bf16, train.method lora, a shorter "
        "base.seq_len, a smaller base or a larger GPU"
    )


def physical_memory_bytes() -> int | None:
    """Physical RAM of this machine (None where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def cpu_micro_batch_size(start: int, bytes_per_example: int, budget_bytes: int | None) -> int:
    """``auto`` on the CPU, from an estimate (no probing: the CPU allocator does not fail cleanly).

    The size is min(start, 64), halved while ``m × bytes_per_example`` exceeds ``budget_bytes``
    (the caller uses a quarter of physical RAM and, for DP, the float32 per-sample gradients of the
    trainable parameters — the term that grows with m). At least 1.
    """
    m = max(1, min(start, CPU_DEFAULT))
    if budget_bytes is not None:
        while m > 1 and m * bytes_per_example > budget_bytes:
            m //= 2
    return m
