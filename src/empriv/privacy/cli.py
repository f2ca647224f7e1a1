"""``empriv privacy`` command line: calibrate, epsilon, profile, group.

Use ``add_privacy_parser(subparsers)`` to attach to a top-level parser, or run
``python -m empriv.privacy.cli privacy calibrate --epsilon 4 --delta 1e-6 ...``.
Plain text by default, JSON with ``--json``.  Errors: message on stderr, exit code 2.
"""

from __future__ import annotations

import argparse
import json
import sys

from empriv.privacy.accountants import ACCOUNTANT_NAMES


def _common(p: argparse.ArgumentParser, *, sigma: bool) -> None:
    if sigma:
        p.add_argument("--noise-multiplier", type=float, required=True, help="σ")
    p.add_argument("--sample-rate", type=float, required=True, help="q = batch size / n")
    p.add_argument("--steps", type=int, required=True, help="T")
    p.add_argument("--json", action="store_true", help="print JSON")


def add_privacy_parser(subparsers) -> argparse.ArgumentParser:
    """Register the ``privacy`` sub-command (with calibrate/epsilon/profile/group)."""
    privacy = subparsers.add_parser("privacy", help="DP-SGD privacy accounting")
    sub = privacy.add_subparsers(dest="privacy_command", required=True)

    p = sub.add_parser("calibrate", help="smallest noise multiplier for a target (ε, δ)")
    p.add_argument("--epsilon", type=float, required=True)
    p.add_argument("--delta", type=float, required=True)
    _common(p, sigma=False)
    p.add_argument("--accountant", default="prv", help=f"one of {', '.join(ACCOUNTANT_NAMES)} (default prv)")
    p.add_argument("--tolerance", type=float, default=1e-3, help="relative tolerance on σ")
    p.add_argument("--cache", metavar="DIR", default=None,
                   help="calibration cache directory (every hit re-verified; default: no cache)")
    p.add_argument("--no-cache", action="store_true", help="do not use a cache (the default; overrides --cache)")
    p.set_defaults(privacy_func=_cmd_calibrate)

    p = sub.add_parser("epsilon", help="ε at δ for a given σ, for every accountant")
    _common(p, sigma=True)
    p.add_argument("--delta", type=float, required=True)
    p.set_defaults(privacy_func=_cmd_epsilon)

    p = sub.add_parser("profile", help="ε(δ) profile for a given σ, per accountant")
    _common(p, sigma=True)
    p.add_argument("--deltas", type=float, nargs="+",
                   default=[1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3],
                   help="δ values (default 1e-8 .. 1e-3)")
    p.add_argument("--accountants", nargs="+", default=list(ACCOUNTANT_NAMES))
    p.set_defaults(privacy_func=_cmd_profile)

    p = sub.add_parser("group", help="user-level DP with k records per user (group privacy)")
    p.add_argument("--epsilon", type=float, required=True, help="example-level ε (or user-level with --tight)")
    p.add_argument("--delta", type=float, required=True)
    p.add_argument("--k", type=int, required=True, help="records per user")
    p.add_argument("--tight", action="store_true",
                   help="calibrate σ for user-level (ε, δ) with the tight mixture-of-Gaussians "
                        "accounting (needs --sample-rate, --steps); also shows the naive σ")
    p.add_argument("--sample-rate", type=float)
    p.add_argument("--steps", type=int)
    p.add_argument("--json", action="store_true")
    p.set_defaults(privacy_func=_cmd_group)
    return privacy


def _emit(args, data: dict, text: str) -> None:
    if args.json:
        print(json.dumps(data, indent=2, sort_keys=True))
    else:
        print(text)


def _all_eps(sigma, q, steps, delta) -> dict:
    from empriv.privacy.accounting import epsilon_for

    return {name: epsilon_for(sigma, q, steps, delta, name) for name in ACCOUNTANT_NAMES}


def _cmd_calibrate(args) -> None:
    from empriv.privacy.accounting import calibrate_noise_multiplier

    cal = calibrate_noise_multiplier(args.epsilon, args.delta, args.sample_rate, args.steps,
                                     args.accountant, tolerance=args.tolerance,
                                     cache=None if args.no_cache else args.cache)
    eps = _all_eps(cal.noise_multiplier, cal.sample_rate, cal.steps, cal.delta)
    data = {**cal.to_dict(), "epsilons": eps}
    lines = [
        f"noise_multiplier = {cal.noise_multiplier:.6f}  (accountant {cal.accountant}, "
        f"target epsilon {cal.target_epsilon:g}, delta {cal.delta:g}, q {cal.sample_rate:g}, "
        f"T {cal.steps})",
    ]
    if cal.fallback_reason:
        lines.append(f"fallback: {cal.fallback_reason}")
    lines.append("epsilon at this noise multiplier:")
    lines += [f"  {k:<4} {v:.6f}" for k, v in eps.items()]
    _emit(args, data, "\n".join(lines))


def _cmd_epsilon(args) -> None:
    eps = _all_eps(args.noise_multiplier, args.sample_rate, args.steps, args.delta)
    data = {"noise_multiplier": args.noise_multiplier, "sample_rate": args.sample_rate,
            "steps": args.steps, "delta": args.delta, "epsilons": eps}
    lines = [f"noise_multiplier {args.noise_multiplier:g}, q {args.sample_rate:g}, "
             f"T {args.steps}, delta {args.delta:g}:"]
    lines += [f"  {k:<4} epsilon = {v:.6f}" for k, v in eps.items()]
    _emit(args, data, "\n".join(lines))


def _cmd_profile(args) -> None:
    from empriv.privacy.accountants import check_accountant_name
    from empriv.privacy.profiles import profiles

    for a in args.accountants:
        check_accountant_name(a)
    prof = profiles(args.noise_multiplier, args.sample_rate, args.steps, args.deltas,
                    args.accountants)
    data = {"noise_multiplier": args.noise_multiplier, "sample_rate": args.sample_rate,
            "steps": args.steps, "deltas": list(args.deltas), "epsilons": prof}
    names = list(prof)
    lines = ["delta     " + " ".join(f"{n:>9}" for n in names)]
    for i, d in enumerate(args.deltas):
        lines.append(f"{d:<9.1e} " + " ".join(f"{prof[n][i]:>9.4f}" for n in names))
    _emit(args, data, "\n".join(lines))


def _cmd_group(args) -> None:
    from empriv.privacy import user_level as ul

    user_eps, user_delta = ul.naive_group_privacy(args.epsilon, args.delta, args.k)
    data = {"k": args.k, "epsilon": args.epsilon, "delta": args.delta,
            "user_epsilon": user_eps, "user_delta": user_delta}
    lines = [f"example-level (eps={args.epsilon:g}, delta={args.delta:g}) with k={args.k} records/user"
             f" -> user-level (eps={user_eps:.6g}, delta={user_delta:.6g})  [naive group privacy]"]
    if args.tight:
        if args.sample_rate is None or args.steps is None:
            raise ValueError("--tight needs --sample-rate and --steps")
        tight = ul.calibrate_group_privacy(args.epsilon, args.delta, args.k, args.sample_rate,
                                           args.steps)
        naive = ul.calibrate_group_privacy_naive(args.epsilon, args.delta, args.k,
                                                 args.sample_rate, args.steps)
        data.update({
            "tight": tight.to_dict(),
            "noise_multiplier": tight.noise_multiplier,
            "naive_noise_multiplier": naive.noise_multiplier,
            "naive_example_epsilon": naive.target_epsilon,
            "naive_example_delta": naive.delta,
        })
        lines = [
            f"user-level (eps={args.epsilon:g}, delta={args.delta:g}), k={args.k}, "
            f"q={args.sample_rate:g}, T={args.steps}:",
            f"  tight (mixture of Gaussians, PLD): noise_multiplier = {tight.noise_multiplier:.6f}",
            f"  naive (example-level eps={naive.target_epsilon:.6g}, delta={naive.delta:.3g}): "
            f"noise_multiplier = {naive.noise_multiplier:.6f}",
        ]
    _emit(args, data, "\n".join(lines))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="empriv")
    add_privacy_parser(parser.add_subparsers(dest="command", required=True))
    return parser


def run(args) -> int:
    """Run a parsed ``privacy`` command; returns the exit code."""
    from empriv.privacy.accounting import AccountingError

    try:
        args.privacy_func(args)
    except (ValueError, AccountingError) as exc:
        print(f"empriv privacy {args.privacy_command}: error: {exc}", file=sys.stderr)
        return 2
    return 0


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
