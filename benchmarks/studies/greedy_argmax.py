"""Does the ACR search's arg-max through ``max(-1)`` (``empriv.score.gcg.greedy_tokens``) save CPU time against torch's
``argmax(-1)`` (the peer) and leave every search result unchanged? Run in a workspace after ``make repro``:

    python benchmarks/studies/greedy_argmax.py [eps8-b512-T100-lr0.01-s0] [--rounds 3]

1. The kernel alone: median CPU time of the two on [512, n, 2,048] float32 logits (the search's batch and the
   default's vocabulary; n = 8 and 24 target tokens), one thread.
2. The score stage's ACR search on one trained model: every secret of ``data/secrets_filtered.jsonl`` with
   ``score.acr``'s settings, once with each arg-max per round, the two alternating; the median CPU time of each, and
   whether every secret's record (success, ACR, prompt length, passes) is the same. Nothing is written.
"""

import argparse
import json
import statistics
import sys
import time

import torch

from empriv.score import gcg


def argmax_peer(logits: torch.Tensor) -> torch.Tensor:
    return logits.argmax(-1)


def cpu(f, repeats: int = 7) -> float:
    f()
    times = []
    for _ in range(repeats):
        t = time.process_time()
        f()
        times.append(time.process_time() - t)
    return statistics.median(times)


def kernel() -> None:
    g = torch.Generator().manual_seed(0)
    for n in (8, 24):
        x = torch.randn(512, n, 2048, generator=g)
        a, b = cpu(lambda: argmax_peer(x)), cpu(lambda: gcg.greedy_tokens(x))
        same = torch.equal(argmax_peer(x), gcg.greedy_tokens(x))
        print(f"kernel [512, {n}, 2048]: argmax {1e3 * a:.1f} ms, max(-1) {1e3 * b:.1f} ms, ratio {a / b:.2f}; "
              f"same indices: {same}", flush=True)


def search(run: str, rounds: int) -> None:
    from empriv.config import load_params
    from empriv.models.adapters import load_finetuned
    from empriv.pipeline.common import load_tokenizer
    from empriv.score.acr import acr_of_secrets, settings_from_params

    params = load_params("params.yaml")
    tok = load_tokenizer()
    with open("data/secrets_filtered.jsonl") as f:
        secrets = [json.loads(line) for line in f]
    model = load_finetuned(f"models/runs/record/full/{run}", "models/base")
    settings = settings_from_params(params.score.acr)
    new = gcg.greedy_tokens
    times, results = {"argmax": [], "max(-1)": []}, {}
    for r in range(rounds):
        for name, fn in (("argmax", argmax_peer), ("max(-1)", new)) if r % 2 == 0 else (("max(-1)", new),
                                                                                        ("argmax", argmax_peer)):
            gcg.greedy_tokens = fn
            t = time.process_time()
            res = acr_of_secrets(model, tok, secrets, settings, progress=False)
            times[name].append(time.process_time() - t)
            kept = {k: {f: v for f, v in rec.items() if "time" not in f} for k, rec in res.items()}
            results.setdefault(name, kept)
            print(f"round {r}: {name} {times[name][-1]:.1f} CPU-s, found "
                  f"{sum(bool(v.get('acr_success')) for v in kept.values())}/{len(kept)}", flush=True)
    gcg.greedy_tokens = new
    a, b = statistics.median(times["argmax"]), statistics.median(times["max(-1)"])
    print(f"ACR search of {len(secrets)} secrets on {run}, {rounds} rounds: median CPU argmax {a:.1f} s, max(-1) "
          f"{b:.1f} s, ratio {a / b:.3f}; every secret's record the same: {results['argmax'] == results['max(-1)']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", nargs="?", default="eps8-b512-T100-lr0.01-s0")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    torch.set_num_threads(1)
    kernel()
    search(a.run, a.rounds)


if __name__ == "__main__":
    sys.exit(main())
