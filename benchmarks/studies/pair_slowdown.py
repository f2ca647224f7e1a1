"""How much slower is one training process when a second one runs beside it (the way `make repro` runs two jobs on
two cores)?

Run on an otherwise idle machine:  python benchmarks/studies/pair_slowdown.py [--rounds 3] [--steps 6] [--out F.json]

Each worker is a fresh process at one torch thread with the stage processes' allocator: the default's tiny GPT-2
(2 × 64, vocabulary 2,048, tied, fused kernels), a batch of 256 records that fill the 64-token window (as 92 % of the
default corpus' records do), micro-batches of 64, the fast DP step (σ = 1, C = 1). A worker builds its model, says it
is ready, waits for the go, takes one untimed step and then ``--steps`` timed ones. Rounds alternate: one worker
alone, then two at once (both start their timed steps together). Printed per round and as medians: CPU and wall ms
per example, alone and paired, and the pair's throughput over one process alone (2 × alone / paired per-example
wall: 2.0 would be two independent cores). Nothing in the workspace is written (``--out`` aside).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def worker(args) -> int:
    import torch
    import transformers

    from empriv.infra.allocator import tune_malloc

    transformers.logging.set_verbosity_error()  # GPT2Config's default bos/eos ids lie outside the 2,048 vocabulary

    tune_malloc()
    torch.set_num_threads(1)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from train_kernels import models

    from empriv.models.fast_dp import fast_dp_step
    from empriv.models.lm import per_sample_mean_nll

    _, model = models()
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 2048, (256, 64), generator=g)
    mask = torch.ones(256, 64)
    mask[:, 0] = 0

    def step():
        model.zero_grad(set_to_none=True)
        fast_dp_step(model, ids, mask, clip_norm=1.0, noise_multiplier=1.0, expected_batch_size=256,
                     generator=torch.Generator().manual_seed(0), micro_batch_size=64, per_sample_loss=per_sample_mean_nll)

    Path(args.ready).touch()
    while not Path(args.go).exists():
        time.sleep(0.01)
    step()
    c, w = time.process_time(), time.perf_counter()
    for _ in range(args.steps):
        step()
    n = 256 * args.steps
    print(json.dumps({"cpu_ms_per_ex": 1000 * (time.process_time() - c) / n,
                      "wall_ms_per_ex": 1000 * (time.perf_counter() - w) / n}), flush=True)
    return 0


def run_together(k: int, steps: int) -> list[dict]:
    with tempfile.TemporaryDirectory() as d:
        go = Path(d) / "go"
        ready = [Path(d) / f"ready{i}" for i in range(k)]
        procs = [subprocess.Popen([sys.executable, __file__, "--worker", "--steps", str(steps), "--ready", str(r),
                                   "--go", str(go)], stdout=subprocess.PIPE, text=True) for r in ready]
        while not all(r.exists() for r in ready):
            if any(p.poll() is not None for p in procs):
                raise SystemExit("a worker exited before it was ready")
            time.sleep(0.05)
        go.touch()
        out = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit("a worker failed")
    return out


def _cpu_wall(x: dict) -> str:
    return f"{x['cpu_ms_per_ex']:.2f} / {x['wall_ms_per_ex']:.2f}"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--out", type=Path)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--ready", help=argparse.SUPPRESS)
    p.add_argument("--go", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        return worker(args)
    rows = []
    for r in range(args.rounds):
        alone = run_together(1, args.steps)[0]
        pair = run_together(2, args.steps)
        row = {"round": r, "alone": alone, "paired": pair,
               "throughput_pair_over_alone": 2 * alone["wall_ms_per_ex"] / statistics.fmean(
                   x["wall_ms_per_ex"] for x in pair)}
        rows.append(row)
        print(f"round {r}: alone {alone['cpu_ms_per_ex']:.2f} CPU / {alone['wall_ms_per_ex']:.2f} wall ms per example; "
              f"paired {' and '.join(_cpu_wall(x) for x in pair)}; "
              f"pair throughput {row['throughput_pair_over_alone']:.2f}x one process", flush=True)
    med = {"alone_cpu_ms_per_ex": statistics.median(x["alone"]["cpu_ms_per_ex"] for x in rows),
           "paired_cpu_ms_per_ex": statistics.median(y["cpu_ms_per_ex"] for x in rows for y in x["paired"]),
           "throughput_pair_over_alone": statistics.median(x["throughput_pair_over_alone"] for x in rows)}
    print(f"median: alone {med['alone_cpu_ms_per_ex']:.2f} CPU ms per example, paired "
          f"{med['paired_cpu_ms_per_ex']:.2f} ({med['paired_cpu_ms_per_ex'] / med['alone_cpu_ms_per_ex']:.2f}x); two "
          f"processes do {med['throughput_pair_over_alone']:.2f}x the work of one")
    if args.out:
        args.out.write_text(json.dumps({"rounds": rows, "median": med}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
