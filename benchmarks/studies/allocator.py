"""Benchmark: a training step under the allocator the stage processes set (empriv.infra.allocator) against glibc's
defaults, the same steps in fresh processes, interleaved.

Run:  OMP_NUM_THREADS=1 nice python benchmarks/studies/allocator.py [--rounds 7] [--steps 4]

Each round starts one child process per setting (``EMPRIV_MALLOC=default``, then ``tuned``); a child builds the tiny
GPT-2 of the default run (2 layers × 64, vocabulary 2,048) and the 64 records of 33–64 tokens of
benchmarks/dp_step.py, and times ``--steps`` steps of empriv's training loop (``dp_finetune``, micro-batches of 32,
q = 1) after one untimed step, non-private and then DP (σ = 1, C = 1, the default fast step), on the process' CPU
clock, with the minor page faults per step. Printed: per setting the medians over rounds, then tuned / default
per side (the peer: glibc's defaults) and the weights' digests, which must agree (the allocator changes where memory
comes from, not what is computed).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1]  # dp_step.py


def child(steps: int) -> dict:
    import hashlib
    import logging
    import resource
    import time
    import warnings

    import torch

    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    from empriv.infra.allocator import tune_malloc

    applied = tune_malloc()
    torch.set_num_threads(1)
    sys.path.insert(0, str(BENCHMARKS))
    import dp_step
    from empriv.config import RunConfig
    from empriv.train.dp import dp_finetune

    ids, mask = dp_step.batch(64, 2048)
    params = dp_step.params_for("full", 32)
    out = {"allocator": applied}
    for side, sigma in (("non-private", None), ("DP", 1.0)):
        model = dp_step.prepared(dp_step.tiny_gpt2, "full", params)
        run = RunConfig(8.0 if sigma is not None else float("inf"), ids.shape[0], steps + 1, 0.001, 0, method="full")
        stamps = []

        def on_step(*_):
            stamps.append((time.process_time(), resource.getrusage(resource.RUSAGE_SELF).ru_minflt))

        dp_finetune(model, ids, mask, run=run, noise_multiplier=sigma, params=params, device=torch.device("cpu"),
                    on_step=on_step)
        (c0, f0), (c1, f1) = stamps[0], stamps[-1]
        out[side] = {"cpu_s": (c1 - c0) / steps, "faults": (f1 - f0) / steps,
                     "digest": hashlib.sha256(b"".join(p.detach().numpy().tobytes()
                                                       for p in model.parameters())).hexdigest()[:16]}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.steps)))
        return 0
    runs: dict[str, list[dict]] = {"default": [], "tuned": []}
    for r in range(args.rounds):
        for setting in runs:
            env = {**os.environ, "EMPRIV_MALLOC": setting, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
            proc = subprocess.run([sys.executable, __file__, "--child", "--steps", str(args.steps)], env=env,
                                  capture_output=True, text=True)
            if proc.returncode:
                sys.exit(f"child ({setting}) failed:\n{proc.stderr[-3000:]}")
            runs[setting].append(json.loads(proc.stdout.strip().splitlines()[-1]))
        print(f"round {r + 1}/{args.rounds}, load average {os.getloadavg()[0]:.2f}", file=sys.stderr, flush=True)
    print(f"tiny GPT-2 (2 x 64, vocabulary 2,048), full fine-tuning, 64 records, micro-batches of 32, 1 thread; "
          f"medians over {args.rounds} rounds of {args.steps} steps; CPU seconds per step")
    for setting, rows in runs.items():
        print(f"  {setting:8} {rows[0]['allocator']}")
    print(f"{'side':12} {'default s':>10} {'tuned s':>9} {'tuned/default':>14} {'faults default':>15} {'tuned':>7}")
    digests_agree = True
    for side in ("non-private", "DP"):
        med = {s: statistics.median(r[side]["cpu_s"] for r in rows) for s, rows in runs.items()}
        flt = {s: statistics.median(r[side]["faults"] for r in rows) for s, rows in runs.items()}
        ratio = statistics.median(t[side]["cpu_s"] / d[side]["cpu_s"] for d, t in zip(runs["default"], runs["tuned"]))
        print(f"{side:12} {med['default']:>10.4f} {med['tuned']:>9.4f} {ratio:>14.2f} {flt['default']:>15.0f} "
              f"{flt['tuned']:>7.0f}")
        digests = {r[side]["digest"] for rows in runs.values() for r in rows}
        digests_agree &= len(digests) == 1
    dp_over_np = {s: statistics.median(r["DP"]["cpu_s"] / r["non-private"]["cpu_s"] for r in rows)
                  for s, rows in runs.items()}
    print(f"DP / non-private: default {dp_over_np['default']:.2f}, tuned {dp_over_np['tuned']:.2f}")
    print("weights after the steps:", "the same bits under both settings" if digests_agree else "DIFFER")
    return 0 if digests_agree else 1


if __name__ == "__main__":
    sys.exit(main())
