"""Study: is GCG's success monotone in the prompt length? Cold searches of one secret at fixed lengths.

The MiniPrompt schedule behind ACR (start short, +5 after a failure, −1 after a success, stop at the first
failure below a success) reads a failure at length L as ruling out every shorter length. This script tests that
on a fine-tuned model: for each length it runs ``--starts`` independent GCG searches of one secret from random
tokens (the fast strategy's step — ``fast_candidates`` swaps, ``keep``, ``wrong_weight`` — for ``--steps`` steps,
no patience, no give-up, one seed each) and prints how many reproduced the secret, the steps the successes
needed and the sequences scored. Lengths where a search wins in most starts next to lengths where none does say
the schedule's stop rule can end a search above a length that works (``score.acr.skip``, docs/scoring.md).

Run (the default's memorisation-regime models; one torch thread):
      OMP_NUM_THREADS=1 nice python benchmarks/studies/acr_lengths.py --root <workspace> \
        --model models/runs/record/full/eps64-b32-T200-lr0.01-s0 --secret secret-01 --lengths 12,11,10,9,8,7,6,5

No speed goal: this is a measurement of the search itself, printed as a table (``--json`` also writes it).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/acr.py

import acr as bench  # noqa: E402  (the ACR benchmark's model and secret loading)

from empriv.score import gcg  # noqa: E402
from empriv.score.acr import ACRSearchParams, PassCount  # noqa: E402


def cold_searches(model, target: list[int], length: int, starts: int, settings: ACRSearchParams) -> list[dict]:
    """``starts`` one-seed GCG searches at ``length`` from random tokens: each one's success, steps and sequences."""
    out = []
    for start in range(starts):
        counts = PassCount()
        obj = gcg._Objective(model, target, counts)
        search = gcg._LengthSearch(obj, settings)
        gen = torch.Generator().manual_seed(1000 + 7 * start + length)
        member = gcg._Member(gcg._random_prompt(length, obj.embed.shape[0], gen, obj.device), settings.steps, gen,
                             candidates=settings.fast_candidates or settings.candidates)
        ok, _, loss = search.run_batch([member])[0]
        out.append({"success": bool(ok), "steps": member.step, "fewest_wrong": member.fewest_wrong,
                    "loss": round(float(loss), 4), "sequences": counts.sequences})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", required=True, help="the pipeline output tree (models/, data/)")
    ap.add_argument("--model", required=True, help="a fine-tuned run directory, relative to --root or absolute")
    ap.add_argument("--secret", required=True, help="a secret id of the pipeline, e.g. secret-01")
    ap.add_argument("--lengths", required=True, help="comma-separated prompt lengths, e.g. 12,11,10,9")
    ap.add_argument("--starts", type=int, default=4, help="independent random starts per length")
    ap.add_argument("--steps", type=int, default=240, help="GCG steps per search (the published budget at length 10)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", help="also write the table to this file")
    args = ap.parse_args(argv)
    try:
        lengths = [int(x) for x in args.lengths.split(",")]
    except ValueError:
        ap.error(f"--lengths must be comma-separated integers, got {args.lengths!r}")
    if min(lengths) < 1 or args.starts < 1 or args.steps < 1:
        ap.error("--lengths, --starts and --steps must be >= 1")
    torch.set_num_threads(args.threads)
    models, tok, secrets = bench.pipeline_models(Path(args.root), [args.model], None, [args.secret])
    models.pop("base", None)
    (name, model), = models.items()
    model = model() if callable(model) and not isinstance(model, torch.nn.Module) else model
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    target = bench._target(secrets[0], tok)
    settings = ACRSearchParams(steps=args.steps, seeds=[0], patience=None, give_up=[])  # the fast step's defaults
    print(f"{name} {args.secret} ({len(target)} target tokens): {args.starts} cold searches per length, "
          f"{args.steps} steps, {settings.fast_candidates} swaps a step from the top {settings.fast_top_k}, keep={settings.keep}, "
          f"wrong_weight={settings.wrong_weight}")
    print(f"{'length':>6}  {'won':>5}  {'steps of the wins':<24} {'fewest wrong (fails)':<22} {'sequences':>9}  {'s':>5}")
    rows = []
    for length in lengths:
        t0 = time.time()
        runs = cold_searches(model, target, length, args.starts, settings)
        wins = [r["steps"] for r in runs if r["success"]]
        fails = [r["fewest_wrong"] for r in runs if not r["success"]]
        seqs = sum(r["sequences"] for r in runs)
        rows.append({"length": length, "wins": len(wins), "starts": args.starts, "runs": runs})
        print(f"{length:>6}  {len(wins):>2}/{args.starts:<2}  {str(sorted(wins)):<24} {str(sorted(fails)):<22} "
              f"{seqs:>9}  {time.time() - t0:>5.0f}", flush=True)
    won = [r["length"] for r in rows if r["wins"]]
    gaps = [r["length"] for r in rows if not r["wins"] and won and r["length"] > min(won)]
    print(f"lengths won in some start: {won}; lengths above the shortest of them won in none: {gaps or 'none'}"
          f" ({'not monotone' if gaps else 'monotone'} on these lengths)")
    if args.json:
        Path(args.json).write_text(json.dumps({"model": name, "secret": args.secret, "target_tokens": len(target),
                                               "steps": args.steps, "argv": sys.argv[1:], "rows": rows,
                                               "median_win_steps": statistics.median(
                                                   [s for r in rows for s in (x["steps"] for x in r["runs"] if x["success"])]
                                               ) if won else None}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
