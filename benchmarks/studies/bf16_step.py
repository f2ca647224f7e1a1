"""Study: is bf16 autocast a lever for the default model's DP step on a CPU? (issue 41's 20-min cold run)

Run:  OMP_NUM_THREADS=1 python benchmarks/studies/bf16_step.py [--rounds 5]

The fast DP step (:func:`empriv.models.fast_dp.fast_dp_step`, σ = 1, C = 1, micro-batches of 64) on the tiny GPT-2 of
the default run and the batch of ``benchmarks/train_kernels.py`` (256 records of 33–64 tokens), one thread: fp32,
and the same step with the forward pass under ``torch.autocast("cpu", torch.bfloat16)`` (what ``runtime.precision:
bf16`` does). Interleaved rounds; printed: the median CPU ms per example of each and their ratio (> 1: bf16 slower).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the model and batch of train_kernels


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    torch.set_num_threads(1)
    from train_kernels import batch, models

    from empriv.models.fast_dp import fast_dp_step

    _, model = models()
    ids, mask = batch(256)

    def step(context) -> float:
        for param in model.parameters():
            param.grad = None
        start = time.process_time()
        fast_dp_step(model, ids, mask, clip_norm=1.0, noise_multiplier=1.0, expected_batch_size=256,
                     generator=torch.Generator().manual_seed(0), micro_batch_size=64, forward_context=context)
        return (time.process_time() - start) / 256 * 1000

    def bf16():
        return torch.autocast("cpu", dtype=torch.bfloat16)

    step(None), step(bf16)  # warm-up
    fp32_ms, bf16_ms = [], []
    for _ in range(args.rounds):
        fp32_ms.append(step(None))
        bf16_ms.append(step(bf16))
    a, b = statistics.median(fp32_ms), statistics.median(bf16_ms)
    print(f"fp32 {a:.3f} ms/ex, bf16 autocast {b:.3f} ms/ex, bf16/fp32 {b / a:.2f} (> 1: bf16 slower)")


if __name__ == "__main__":
    main()
