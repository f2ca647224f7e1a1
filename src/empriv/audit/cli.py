"""``empriv audit`` command line: ε lower bounds from audit counts.

    empriv audit epsilon --canaries 1000 --guesses 100 --correct 100 --delta 1e-5 --confidence 0.99 [--json]
    empriv audit clopper-pearson --tp 90 --fn 10 --fp 5 --tn 95 --delta 1e-5 --confidence 0.95 [--json]

Plain text by default, JSON with ``--json``. Invalid input: one-line message on stderr, exit code 2.
"""

from __future__ import annotations

import argparse
import json
import sys


def add_audit_parser(subparsers) -> argparse.ArgumentParser:
    audit = subparsers.add_parser("audit", help="privacy auditing: empirical ε lower bounds")
    sub = audit.add_subparsers(dest="audit_command", required=True)

    p = sub.add_parser("epsilon", help="one-run audit lower bound (Steinke, Nasr & Jagielski 2023)")
    p.add_argument("--canaries", type=int, required=True, help="m: canaries, each included with probability 1/2")
    p.add_argument("--guesses", type=int, required=True, help="r: guesses made (the rest abstained)")
    p.add_argument("--correct", type=int, required=True, help="v: correct guesses")
    p.add_argument("--delta", type=float, required=True)
    p.add_argument("--confidence", type=float, default=0.95, help="e.g. 0.95 or 0.99 (default 0.95)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(audit_func=_cmd_epsilon)

    p = sub.add_parser("clopper-pearson", help="multi-run audit lower bound from one threshold's confusion counts")
    for name in ("tp", "fn", "fp", "tn"):
        p.add_argument(f"--{name}", type=int, required=True)
    p.add_argument("--delta", type=float, required=True)
    p.add_argument("--confidence", type=float, default=0.95)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(audit_func=_cmd_clopper_pearson)
    return audit


def _cmd_epsilon(args) -> None:
    from empriv.audit.epsilon import one_run_epsilon_lower_bound, one_run_p_value

    eps = one_run_epsilon_lower_bound(args.canaries, args.guesses, args.correct, args.delta, args.confidence)
    data = {"epsilon_lower_bound": eps, "canaries": args.canaries, "guesses": args.guesses, "correct": args.correct,
            "delta": args.delta, "confidence": args.confidence,
            "p_value_at_bound": one_run_p_value(args.canaries, args.guesses, args.correct, eps, args.delta)}
    _print_bound(args, data, f"{args.correct}/{args.guesses} correct guesses, {args.canaries} canaries")


def _cmd_clopper_pearson(args) -> None:
    from empriv.audit.epsilon import clopper_pearson_epsilon_lower_bound

    eps = clopper_pearson_epsilon_lower_bound(args.tp, args.fn, args.fp, args.tn, args.delta, args.confidence)
    data = {"epsilon_lower_bound": eps, "tp": args.tp, "fn": args.fn, "fp": args.fp, "tn": args.tn,
            "delta": args.delta, "confidence": args.confidence}
    _print_bound(args, data, f"Clopper-Pearson, TP {args.tp} FN {args.fn} FP {args.fp} TN {args.tn}")


def _print_bound(args, data: dict, evidence: str) -> None:
    """``data`` as JSON with ``--json``, else one line: the bound, then ``evidence``, δ and the confidence."""
    if args.json:
        print(json.dumps(data, indent=2, sort_keys=True))
    else:
        print(f"epsilon lower bound = {data['epsilon_lower_bound']:.4f}  ({evidence}, delta {args.delta:g}, "
              f"confidence {args.confidence:g})")


def run(args) -> int:
    try:
        args.audit_func(args)
    except ValueError as exc:
        print(f"empriv audit {args.audit_command}: error: {exc}", file=sys.stderr)
        return 2
    return 0
