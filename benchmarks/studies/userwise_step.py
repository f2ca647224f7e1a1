"""Benchmark: one User-wise DP-SGD step vs one record-level DP-SGD step of train/dp.py on the same records.

Run:  OMP_NUM_THREADS=1 nice python benchmarks/studies/userwise_step.py [--large] [--repeats 5] [--steps 3]

Both sides see the same R = units × k records every step: q = 1 (every unit / every record is in
every Poisson batch), so the step sizes are equal and fixed. The record-level side is
``empriv.train.dp.dp_finetune`` itself (opacus GradSampleModule + DPOptimizer, clip per record);
the user-wise side is ``empriv.train.userwise.userwise_dp_sgd`` (clip per unit) with each of its two
strategies: ``per_unit`` (default: one forward/backward per unit, plain autograd) and ``per_record``
(opacus per-record gradients summed per unit). All run σ = 1, C = 1, SGD, the same physical
micro-batch (``--micro`` records), on the CPU. Printed: the median seconds per step over ``--repeats``
runs of ``--steps`` steps (after one warm-up run) and the ratios user-wise / record-level; exit status 0.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import warnings

import torch

# name, GPT-2 config, units, records per unit (k), sequence length
CONFIGS = {
    "tiny": (dict(n_layer=2, n_embd=64, n_head=2, vocab_size=2048), 32, 4, 64),
    "large": (dict(n_layer=6, n_embd=256, n_head=4, vocab_size=8192), 16, 4, 64),
}


def build(model_kw: dict, seq_len: int, method: str, micro: int = 32):
    from transformers import GPT2Config, GPT2LMHeadModel

    from empriv.config import parse_params
    from empriv.models.adapters import prepare_for_finetuning

    config = GPT2Config(n_positions=seq_len, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, **model_kw)
    torch.manual_seed(0)
    params = parse_params({"data": {"n_train": 1000}, "train": {"optimizer": "sgd", "clip_norm": 1.0, "method": method,
                                                               "micro_batch_size": micro},
                           "cube": {"epsilon": [8], "batch_size": [8], "steps": [1], "learning_rate": [0.01], "seed": [0]}})
    model = prepare_for_finetuning(GPT2LMHeadModel(config), method, params.train.lora, init_seed=0)
    return model, params


def records(n_records: int, seq_len: int, vocab: int):
    from empriv.models.lm import encode_fixed

    g = torch.Generator().manual_seed(0)
    lists = [torch.randint(0, vocab - 1, (int(torch.randint(seq_len // 2, seq_len, (1,), generator=g)),), generator=g).tolist()
             for _ in range(n_records)]
    return encode_fixed(lists, vocab - 1, seq_len)


def time_record_level(model_kw, seq_len, method, ids, mask, steps, micro) -> float:
    from empriv.config import RunConfig
    from empriv.train.dp import dp_finetune

    model, params = build(model_kw, seq_len, method, micro)
    run = RunConfig(8.0, ids.shape[0], steps, 0.01, 0)  # b = n: q = 1, every record every step
    res = dp_finetune(model, ids, mask, run=run, noise_multiplier=1.0, params=params, device=torch.device("cpu"))
    assert res.batch_sizes == [ids.shape[0]] * steps
    return res.wall_time_s / steps


def time_userwise(model_kw, seq_len, method, ids, mask, unit_of_record, n_units, steps, micro, strategy) -> float:
    from empriv.train.userwise import fixed_records_per_unit, userwise_dp_sgd

    model, _ = build(model_kw, seq_len, method)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.01)
    res = userwise_dp_sgd(model, opt, fixed_records_per_unit(ids, mask, unit_of_record), n_units=n_units,
                          unit_sample_rate=1.0, steps=steps, clip_norm=1.0, noise_multiplier=1.0,
                          sampler_generator=torch.Generator().manual_seed(0), noise_generator=torch.Generator().manual_seed(1),
                          micro_batch_records=micro, strategy=strategy)
    assert res.records_per_step == [ids.shape[0]] * steps
    return res.wall_time_s / steps


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--large", action="store_true", help="also a 6-layer, 256-dim GPT-2")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--methods", default="full,lora")
    parser.add_argument("--micro", type=int, default=32, help="records per physical micro-batch, both sides")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    torch.set_num_threads(args.threads)

    names = ["tiny", "large"] if args.large else ["tiny"]
    print(f"torch threads {args.threads}; micro-batch {args.micro} records; median s/step over {args.repeats} runs of {args.steps} steps (after a warm-up run)")
    print(f"{'model':6} {'method':6} {'params':>9} {'units×k':>8} {'records':>7} {'record-level':>12} "
          f"{'uw per_unit':>11} {'uw per_record':>13} {'per_unit/record':>15} {'per_record/record':>17}")
    for name in names:
        model_kw, n_units, k, seq_len = CONFIGS[name]
        ids, mask = records(n_units * k, seq_len, model_kw["vocab_size"])
        unit_of_record = torch.arange(n_units).repeat_interleave(k)
        for method in args.methods.split(","):
            model, _ = build(model_kw, seq_len, method)
            n_trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
            runs = {
                "record": lambda: time_record_level(model_kw, seq_len, method, ids, mask, args.steps, args.micro),
                "per_unit": lambda: time_userwise(model_kw, seq_len, method, ids, mask, unit_of_record, n_units, args.steps,
                                                  args.micro, "per_unit"),
                "per_record": lambda: time_userwise(model_kw, seq_len, method, ids, mask, unit_of_record, n_units,
                                                    args.steps, args.micro, "per_record"),
            }
            times = {key: [] for key in runs}
            for key, fn in runs.items():
                fn()  # warm-up
            for _ in range(args.repeats):  # interleaved, so load changes hit all of them alike
                for key, fn in runs.items():
                    times[key].append(fn())
            med = {key: statistics.median(v) for key, v in times.items()}
            print(f"{name:6} {method:6} {n_trainable:>9,} {f'{n_units}×{k}':>8} {n_units * k:>7} {med['record']:>12.3f} "
                  f"{med['per_unit']:>11.3f} {med['per_record']:>13.3f} {med['per_unit'] / med['record']:>15.2f} "
                  f"{med['per_record'] / med['record']:>17.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
