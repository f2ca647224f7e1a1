"""Benchmark: the DP step of each adaptation (empriv.models.adaptations.dp_step: opacus per-sample gradients, clip,
sum, noise) against the same adaptation's non-private step on the same batch — and every method against full
fine-tuning's DP step.

Run:  OMP_NUM_THREADS=1 nice python benchmarks/studies/adaptation_step.py [--repeats 5] [--batch 32] [--large]

Per method (full, lora, prefix, prefix+MLP, prompt, head): a GPT-2 of the given size (random weights: cost does not
depend on them), a fixed batch of ``--batch`` records of length 64; the non-private step is one forward/backward of
the mean loss (plain autograd, the peer); the DP step is ``dp_step`` (σ = 1, C = 1). Printed: trainable parameters,
the median seconds per step over ``--repeats`` interleaved measurements (after a warm-up), DP / non-private of the
same method, and the method's DP step / full fine-tuning's DP step; exit status 0.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
import warnings

import torch

CONFIGS = {
    "tiny": dict(n_layer=2, n_embd=64, n_head=2, vocab_size=2048),
    "large": dict(n_layer=6, n_embd=256, n_head=4, vocab_size=8192),
}
METHODS = {  # label: (method, prepare_adaptation keyword arguments)
    "full": ("full", {}),
    "lora": ("lora", {}),
    "prefix": ("prefix", {"n_virtual": 10}),
    "prefix+mlp": ("prefix", {"n_virtual": 10, "reparameterize": True, "hidden": 128}),
    "prompt": ("prompt", {"n_virtual": 10}),
    "head": ("head", {}),
}
SEQ_LEN = 64


def build(model_kw: dict, label: str):
    from transformers import GPT2Config, GPT2LMHeadModel

    from empriv.models.adaptations import prepare_adaptation

    torch.manual_seed(0)
    config = GPT2Config(n_positions=SEQ_LEN + 16, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, **model_kw)
    method, kw = METHODS[label]
    return prepare_adaptation(GPT2LMHeadModel(config), method, init_seed=0, **kw)


def batch(n: int, vocab: int):
    from empriv.models.lm import encode_fixed

    g = torch.Generator().manual_seed(0)
    lists = [torch.randint(0, vocab - 1, (int(torch.randint(SEQ_LEN // 2, SEQ_LEN, (1,), generator=g)),),
                           generator=g).tolist() for _ in range(n)]
    return encode_fixed(lists, vocab - 1, SEQ_LEN)


def nonprivate_step(model, ids, mask) -> float:
    from empriv.models.lm import per_sample_mean_nll

    model.train()
    t0 = time.perf_counter()
    model.zero_grad(set_to_none=True)
    per_sample_mean_nll(model, ids, mask).mean().backward()
    return time.perf_counter() - t0


def dp_step_time(model, ids, mask) -> float:
    from empriv.models.adaptations import dp_step

    model.zero_grad(set_to_none=True)
    t0 = time.perf_counter()
    dp_step(model, ids, mask, clip_norm=1.0, noise_multiplier=1.0, generator=torch.Generator().manual_seed(1),
            expected_batch_size=float(ids.shape[0]))
    return time.perf_counter() - t0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--large", action="store_true", help="also a 6-layer, 256-dim GPT-2")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    torch.set_num_threads(args.threads)
    print(f"torch threads {args.threads}; batch {args.batch} × {SEQ_LEN} tokens; median s/step over {args.repeats} "
          "interleaved measurements (after a warm-up)")
    print(f"{'model':6} {'method':11} {'trainable':>10} {'non-private':>11} {'DP step':>8} {'DP/non-private':>14} "
          f"{'DP/full DP':>10}")
    for name in (["tiny", "large"] if args.large else ["tiny"]):
        model_kw = CONFIGS[name]
        ids, mask = batch(args.batch, model_kw["vocab_size"])
        models = {label: build(model_kw, label) for label in METHODS}
        times = {label: {"np": [], "dp": []} for label in METHODS}
        for label, model in models.items():  # warm-up
            nonprivate_step(model, ids, mask)
            dp_step_time(model, ids, mask)
        for _ in range(args.repeats):  # interleaved: load changes hit every method alike
            for label, model in models.items():
                times[label]["np"].append(nonprivate_step(model, ids, mask))
                times[label]["dp"].append(dp_step_time(model, ids, mask))
        med = {label: {k: statistics.median(v) for k, v in t.items()} for label, t in times.items()}
        for label, model in models.items():
            n = sum(p.numel() for p in model.parameters() if p.requires_grad)
            m = med[label]
            print(f"{name:6} {label:11} {n:>10,} {m['np']:>11.4f} {m['dp']:>8.4f} {m['dp'] / m['np']:>14.2f} "
                  f"{m['dp'] / med['full']['dp']:>10.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
