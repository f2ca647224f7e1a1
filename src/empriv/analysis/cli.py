"""``empriv analyze select``: Algorithm 1 and the baselines on a user's own pool of runs.

    empriv analyze select --runs records/runs.csv --score acr_mean [--max-utility U] [--epsilon E] [--json]

Runs are averaged over seeds per configuration; the pool is the configurations with utility ≤ U
(``--max-utility``), at one ε (``--epsilon``; required when the table holds several finite ε), that have a
value of the score (a null score — e.g. ACR over successes where no search succeeded — cannot be judged: such
configurations are left out and counted).
Prints the configuration Algorithm 1 picks and the baselines' picks (best and worst utility),
with one line per discarded group saying why. Errors: one line on stderr, exit code 2.
"""

from __future__ import annotations

import argparse
import json
import sys


def add_analyze_parser(subparsers) -> argparse.ArgumentParser:
    analyze = subparsers.add_parser("analyze", help="analysis of a run table (selection)")
    sub = analyze.add_subparsers(dest="analyze_command", required=True)
    p = sub.add_parser("select", help="Algorithm 1's pick from a pool of runs, and the baselines'")
    p.add_argument("--runs", default="records/runs.csv", help="run table (CSV; the analyze stage writes records/runs.csv)")
    p.add_argument("--score", required=True, help="empirical privacy score column (higher = worse privacy), e.g. acr_mean")
    p.add_argument("--utility", default="test_nll", help="utility column (lower = better); default test_nll")
    p.add_argument("--max-utility", type=float, default=None, help="utility threshold u: pool = configurations with utility ≤ u")
    p.add_argument("--epsilon", default=None, help="ε of the pool (number or inf); needed if the table has several")
    p.add_argument("--method", default=None, help="adaptation method of the pool (full, lora …); needed if the table has several")
    p.add_argument("--json", action="store_true", help="print JSON")
    return analyze


def _parse_eps(text: str) -> float:
    from empriv.config import ConfigError, ParamError, parse_epsilon

    try:
        return parse_epsilon(text, text=True)
    except ParamError as err:
        raise ConfigError(f"--epsilon: {err.text()}") from None


def select_from_table(table, score: str, utility: str = "test_nll", max_utility: float | None = None,
                      epsilon: float | None = None, method: str | None = None) -> dict:
    """The CLI's computation: pool → Algorithm 1 pick + baselines + the oracle (when the score is known). A table
    with several adaptation methods needs ``method`` (Algorithm 1 compares hyperparameters of one method)."""
    import polars as pl

    from empriv.analysis.selection import best_utility, point_label, select_configuration, worst_utility
    from empriv.analysis.table import config_table, epsilon_label, require_columns, table_methods

    require_columns(table, [score], "score")
    require_columns(table, [utility], "utility")
    methods = table_methods(table)
    if method is not None:
        if method not in methods:
            raise ValueError(f"--method {method} is not in the table; it has {methods or ['(no method column)']}")
        table = table.filter(pl.col("method") == method)
    elif len(methods) > 1:
        raise ValueError(f"the table holds several methods {methods}: choose one with --method")
    eps_values = sorted(table["epsilon"].unique().to_list())
    if epsilon is None:
        if len(eps_values) > 1:
            raise ValueError(f"the table holds several ε {[epsilon_label(e) for e in eps_values]}: choose one with --epsilon")
        epsilon = eps_values[0]
    if not any(e == epsilon for e in eps_values):
        raise ValueError(f"--epsilon {epsilon_label(epsilon)} is not in the table; it has {[epsilon_label(e) for e in eps_values]}")
    configs = config_table(table.filter(pl.col("epsilon") == epsilon), [score, utility])
    configs = configs.filter(pl.col(utility).is_not_null())
    n_all = configs.height
    if max_utility is not None:
        configs = configs.filter(pl.col(utility) <= max_utility)
    if configs.height == 0:
        raise ValueError(f"no configuration at ε={epsilon_label(epsilon)} has {utility} ≤ {max_utility} "
                         f"({n_all} configuration(s) before the threshold)")
    has_score = pl.col(score).cast(pl.Float64).fill_nan(None).is_not_null()
    n_without = configs.filter(~has_score).height
    configs = configs.filter(has_score)
    if configs.height == 0:
        raise ValueError(f"no configuration at ε={epsilon_label(epsilon)} has a {score} value ({n_without} in the pool "
                         "have none): nothing to select on")
    sel = select_configuration(configs, utility)
    picks = {"algorithm1": sel.selected, "best_utility": best_utility(configs, utility),
             "worst_utility": worst_utility(configs, utility)}
    oracle = configs.row(int(configs[score].cast(pl.Float64).arg_min()), named=True)

    def view(p):
        return {"config": point_label(p), "batch_size": p["batch_size"], "steps": p["steps"],
                "learning_rate": p["learning_rate"], utility: p[utility], score: p.get(score)}

    return {"epsilon": epsilon_label(epsilon), "method": methods[0] if method is None and methods else method,
            "score": score, "utility": utility, "max_utility": max_utility,
            "n_pool": configs.height, "n_configs": n_all, "n_without_score": n_without,
            "picks": {m: view(p) for m, p in picks.items()}, "oracle": view(oracle) if oracle else None,
            "steps": sel.steps}


def _print(res: dict) -> None:
    u, s = res["utility"], res["score"]
    thr = f", {u} ≤ {res['max_utility']:g}" if res["max_utility"] is not None else ""
    missing = f" ({res['n_without_score']} without a {s} value left out)" if res.get("n_without_score") else ""
    print(f"pool: {res['n_pool']} of {res['n_configs']} configurations at ε = {res['epsilon']}{thr}{missing}")

    def line(name, p):
        sv = "n/a" if p[s] is None else f"{p[s]:.4g}"
        return f"{name:<24}{p['config']:<24}{u} {p[u]:.4g}   {s} {sv}"

    print(line("Algorithm 1:", res["picks"]["algorithm1"]))
    print(line("best utility:", res["picks"]["best_utility"]))
    print(line("worst utility:", res["picks"]["worst_utility"]))
    if res["oracle"]:
        print(line("oracle (lowest score):", res["oracle"]))
    print("discarded by Algorithm 1:" if res["steps"] else "Algorithm 1 discarded nothing (one point in the pool)")
    for st in res["steps"]:
        where = "" if st["discarded"] == [st["group"]] else f"{st['group']}: "
        print(f"  [{st['step']}] {where}{', '.join(st['discarded'])} — {st['reason']}")


def run(args) -> int:
    from empriv.analysis.table import read_run_table

    try:
        table = read_run_table(args.runs)
        eps = _parse_eps(args.epsilon) if args.epsilon is not None else None
        res = select_from_table(table, args.score, args.utility, args.max_utility, eps, getattr(args, "method", None))
    except ValueError as err:
        print(f"empriv analyze select: error: {err}", file=sys.stderr)
        return 2
    if args.json:
        from empriv.io import _jsonable

        print(json.dumps(_jsonable(res), indent=2))
    else:
        _print(res)
    return 0
