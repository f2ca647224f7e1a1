"""A small auditing study on the tiny model (issue 6's closing note; not a test).

For each canary design (random, unigram, bigram, model, new_token), each loss (SFT: secret only;
NWP: whole canary) and each ε (∞ and one finite value), train the tiny GPT-2 on the synthetic
training split plus the member canaries (m = 1000, each a member with probability ½) and audit it:
TPR at 1 % FPR, AUC, and the one-run ε̂ (top-100 loss guesses, 95 % / 99 %). Training is calibrated
and the audit bounded at the same δ (``--delta``, default 1e-5 as in Paper A).

    nice -n 19 python benchmarks/studies/audit_study.py --workdir /tmp/audit-study [--epsilon 8] [--steps 64]

The work directory gets its own prepared data, tokenizer and base model (built once with the
default params except ``--n-train``), so the repository's DVC outputs are never touched. Results:
``<workdir>/audit_study.json`` and a table on stdout.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", default="/tmp/audit-study")
    ap.add_argument("--epsilon", type=float, default=8.0, help="the finite ε (besides ∞)")
    ap.add_argument("--n-train", type=int, default=1000, help="training emails (plus the member canaries)")
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--learning-rate", type=float, default=0.01)
    ap.add_argument("--canaries", type=int, default=1000)
    ap.add_argument("--guesses", type=int, default=100)
    ap.add_argument("--designs", nargs="+", default=["random", "unigram", "bigram", "model", "new_token"])
    ap.add_argument("--losses", nargs="+", default=["sft", "nwp"])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0], help="canary draw and training seed (one run each)")
    ap.add_argument("--epsilons", nargs="+", default=None, help="override: the ε values to run (default: inf and --epsilon)")
    ap.add_argument("--delta", type=float, default=1e-5, help="δ of training and of the audit (Paper A: 1e-5)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="audit_study.json", help="results file, relative to --workdir")
    args = ap.parse_args()

    os.environ.setdefault("WANDB_MODE", "disabled")
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    os.chdir(work)

    import torch

    from empriv.audit.canary_audit import audit_canaries, reference_model
    from empriv.config import parse_params, read_yaml
    from empriv.config import RunConfig
    from empriv.models.lm import encode_fixed
    from empriv.models.tokenizer import Tokenizer
    from empriv.pipeline import base as base_stage, prepare as prepare_stage, tokenizer as tokenizer_stage
    from empriv.pipeline.common import load_texts
    from empriv.secrets.canaries import _generate_from_params
    from empriv.models.registry import load_model
    from empriv.train.finetune import TrainingRecords, TrainRequest, train_model

    torch.set_num_threads(args.threads)
    raw = read_yaml(ROOT / "params.yaml")
    raw["data"]["n_train"] = args.n_train
    raw["privacy"]["delta"] = args.delta
    raw["audit"]["delta"] = args.delta
    raw["runtime"]["threads"] = args.threads
    raw["runtime"]["wandb_mode"] = "disabled"
    raw["canaries"]["n_canaries"] = args.canaries
    raw["audit"]["guesses"] = args.guesses
    params = parse_params(raw)
    t0 = time.time()
    if not Path("models/base/model.safetensors").exists():
        prepare_stage.main(params)
        tokenizer_stage.main(params)
        base_stage.main(params)
        print(f"prepared data, tokenizer and base in {time.time() - t0:.0f} s", file=sys.stderr)
    tok = Tokenizer.load("models/tokenizer")
    train_lists = tok.encode_batch(load_texts("train"))
    base = load_model("models/base")
    train_ids, train_mask = encode_fixed(train_lists, tok.eos_id, params.base.seq_len)

    results = []
    out_path = work / args.out
    epsilons = [math.inf, args.epsilon] if args.epsilons is None else [float(e) for e in args.epsilons]
    for seed, loss in [(sd, ls) for sd in args.seeds for ls in args.losses]:
        for design in args.designs:
            # a bigram canary's secret is a token pair (x, y); every other design keeps the 1-token default
            length = max(2, params.canaries.secret_length) if design == "bigram" else params.canaries.secret_length
            cp = params.canaries.model_copy(update={"design": design, "loss": loss, "secret_length": length, "seed": seed})
            cs = _generate_from_params(cp, tok.vocab_size, tok.eos_id, train_lists, None, base, params.base.seq_len)
            for eps in epsilons:
                run = RunConfig(eps, args.batch_size, args.steps, args.learning_rate, seed)
                t = time.time()
                model, tm = train_model(TrainRequest(params, run, load_model("models/base"),
                                                     TrainingRecords(train_ids, train_mask), canaries=cs, tokenizer=tok,
                                                     job_type="audit-study"))
                m, _ = audit_canaries(model, reference_model(load_model("models/base"), cs), cs, eos_id=tok.eos_id, seq_len=params.base.seq_len,
                                      delta=args.delta, tokenizer=tok, guesses=args.guesses)
                row = {"design": design, "loss": loss, "secret_length": length, "seed": seed, "epsilon": "inf" if math.isinf(eps) else eps,
                       "sigma": tm["noise_multiplier"], "q": tm["sample_rate"], "n": tm["n"], "delta": tm["delta"],
                       "tpr_at_fpr_0.01": m["audit_tpr_at_fpr_0.01"], "auc": m["audit_auc"],
                       "eps_lb_95": m["audit_eps_lb_95"], "eps_lb_99": m["audit_eps_lb_99"],
                       "correct": m["audit_n_correct"], "guesses": m["audit_n_guesses"],
                       "members_loss": m["audit_loss_members_mean"], "nonmembers_loss": m["audit_loss_nonmembers_mean"],
                       "mia_auc": {k: v["auc"] for k, v in m["audit_mia"].items()},
                       "mia_tpr_at_fpr_0.01": {k: v["tpr_at_fpr_0.01"] for k, v in m["audit_mia"].items()},
                       "seconds": time.time() - t}
                results.append(row)
                print(f"s{seed} {loss:4s} {design:10s} eps={row['epsilon']!s:4s} TPR@1%={row['tpr_at_fpr_0.01']:.3f} "
                      f"AUC={row['auc']:.3f} eps_lb={row['eps_lb_95']:.3f}/{row['eps_lb_99']:.3f} "
                      f"({row['correct']}/{row['guesses']}) {row['seconds']:.0f}s", file=sys.stderr, flush=True)
                out_path.write_text(json.dumps({"args": vars(args), "results": results}, indent=2))

    print(f"\n| seed | loss | design | ε | TPR@1%FPR | AUC | ε̂ 95% | ε̂ 99% | correct/guesses |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['seed']} | {r['loss'].upper()} | {r['design']} | {r['epsilon']} | {r['tpr_at_fpr_0.01']:.3f} | {r['auc']:.3f} | "
              f"{r['eps_lb_95']:.2f} | {r['eps_lb_99']:.2f} | {r['correct']}/{r['guesses']} |")
    print(f"\n(q = {results[0]['q']:.4f}, T = {args.steps}, δ = {results[0]['delta']:.2e}; "
          f"σ: {sorted({round(r['sigma'], 3) for r in results})}; total {time.time() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
