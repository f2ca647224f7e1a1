"""What would a smaller design of the default cost, and which of issue 41's criteria would it keep? Reads one finished
cold run of the default (its records and its ``EMPRIV_TIMING_LOG``) and re-analyses subsets of its runs; nothing is
trained or written.

    python benchmarks/studies/design_cost.py <default workspace> [--timing <workspace>/.timing.jsonl]

Designs: the full product (the default) and the eight one-at-a-time designs the 2 × 2 × 2 cube holds (a centre and
the other value of each axis, the research's design; four configurations). Each is what the default's records give
when only that design's runs are kept: the runs are deterministic, so a smaller design run on its own reproduces
them. Per design it prints the measured CPU seconds of its train, score and audit stages (the timing log's own
per-run figures; the audits are the design's configurations at the audit cube's ε) plus the fixed stages, as
minutes of two cores; and per ε the configurations the retention rule keeps (≥ 90 % of the best configuration's
test-NLL gain over the base, applied to seed means), the frequent secrets' searches found over every configuration,
the Table 8 ratio and the Fig. 2 std over the kept configurations, and at ε = 8 the OLS coefficients of ACR over
successes on log b, log T and log η over the kept configurations' runs.
"""

import argparse
import collections
import glob
import json
import math
import statistics
import sys

import numpy as np

AXES = ("batch_size", "steps", "learning_rate")


def eps_key(e) -> float:
    return math.inf if e is None or e == "inf" or (isinstance(e, float) and math.isinf(e)) else float(e)


def load_runs(ws: str) -> dict:
    runs = collections.defaultdict(list)
    for path in glob.glob(f"{ws}/records/score/record/full/*.json"):
        with open(path) as f:
            r = json.load(f)
        runs[(eps_key(r["epsilon"]), tuple(r[a] for a in AXES))].append(r)
    if not runs:
        sys.exit(f"no score records under {ws}/records/score/record/full/: run the default first")
    return runs


def load_costs(path: str) -> tuple[dict, dict, float]:
    """Per-run CPU seconds of train and score (keyed like the records), of the audits, and the fixed stages."""
    per_run, audits, fixed = collections.defaultdict(float), {}, 0.0
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            stage, _, item = r["stage"].partition("@")
            if stage in ("train", "score"):
                per_run[(stage, item)] += r["cpu_s"]
            elif stage == "audit":
                audits[item] = r["cpu_s"]
            else:
                fixed += r["cpu_s"]
    return per_run, audits, fixed


def run_name(r: dict) -> str:
    e = eps_key(r["epsilon"])
    lab = "inf" if math.isinf(e) else f"{e:g}"
    return f"eps{lab}-b{r['batch_size']}-T{r['steps']}-lr{r['learning_rate']:g}-s{r['seed']}-{r.get('method', 'full')}"


def criteria(runs: dict, base: float, eps: float, design: list) -> dict | None:
    g = {k: runs.get((eps, k), []) for k in design}
    if any(not v for v in g.values()):
        return None
    nll = {k: statistics.fmean(x["test_nll"] for x in v) for k, v in g.items()}
    best = min(nll.values())
    kept = [k for k in design if nll[k] <= base - 0.9 * (base - best) + 1e-12]
    every = [x for v in g.values() for x in v]
    found, searched = sum(x["acr_n_success"] for x in every), sum(x["acr_n_searched"] for x in every)
    means = {k: statistics.fmean(x["acr_mean"] for x in g[k] if x["acr_mean"] is not None)
             for k in kept if any(x["acr_mean"] is not None for x in g[k])}
    stds = [statistics.stdev([x["acr_mean"] for x in g[k]]) for k in kept
            if len(g[k]) > 1 and all(x["acr_mean"] is not None for x in g[k])]
    spread = statistics.stdev(means.values()) if len(means) > 1 else math.nan
    ratio = spread / statistics.fmean(stds) if stds and len(means) > 1 else math.nan
    rows = [(k, x["acr_mean"]) for k in kept for x in g[k] if x["acr_mean"] is not None]
    X = np.array([[1.0, *(math.log(v) for v in k)] for k, _ in rows]) if rows else np.zeros((0, 4))
    coef = (np.linalg.lstsq(X, np.array([y for _, y in rows]), rcond=None)[0][1:]
            if len(rows) and np.linalg.matrix_rank(X) == 4 else [math.nan] * 3)
    return {"kept": len(kept), "n": len(design), "found": found, "searched": searched, "ratio": ratio,
            "spread": spread, "coef": [float(c) for c in coef]}


def designs(runs: dict) -> list[tuple[str, list]]:
    values = [sorted({k[i] for _, k in runs}) for i in range(3)]
    if any(len(v) != 2 for v in values):
        sys.exit(f"expects a 2 x 2 x 2 cube, got b {values[0]}, T {values[1]}, eta {values[2]}")
    full = sorted({k for _, k in runs})
    out = [("full product (8)", full)]
    other = [{v[0]: v[1], v[1]: v[0]} for v in values]
    for centre in full:
        d = [centre] + [tuple(other[i][c] if i == j else c for i, c in enumerate(centre)) for j in range(3)]
        out.append((f"one at a time, centre b {centre[0]} T {centre[1]} eta {centre[2]:g}", d))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("workspace")
    ap.add_argument("--timing", help="the cold run's EMPRIV_TIMING_LOG (default <workspace>/.timing.jsonl)")
    a = ap.parse_args()
    runs = load_runs(a.workspace)
    with open(f"{a.workspace}/records/base.json") as f:
        base = json.load(f)["test_nll"]
    per_run, audits, fixed = load_costs(a.timing or f"{a.workspace}/.timing.jsonl")
    eps_all = sorted({e for e, _ in runs})
    for label, d in designs(runs):
        names = [run_name(r) for e in eps_all for k in d for r in runs[(e, k)]]
        train = sum(per_run[("train", n)] for n in names)
        score = sum(per_run[("score", n)] for n in names)
        audit = sum(c for item, c in audits.items()
                    if any(f"-b{k[0]}-T{k[1]}-lr{k[2]:g}-" in item for k in d))
        total = train + score + audit + fixed
        print(f"{label}: {len(names)} runs, {sum(k[0] * k[1] for k in d)} examples per seed and eps; CPU s train "
              f"{train:,.0f}, score {score:,.0f}, audit {audit:,.0f}, rest {fixed:,.0f}; total {total:,.0f} "
              f"= {total / 120:.0f} min of 2 cores")
        spreads = []
        for e in eps_all:
            c = criteria(runs, base, e, d)
            if c is None:
                continue
            spreads.append(c["spread"])
            lab = "inf" if math.isinf(e) else f"{e:g}"
            coef = " ".join(f"{n} {v:+.2f}" for n, v in zip(("b", "T", "eta"), c["coef"]))
            print(f"   eps {lab:>3}: kept {c['kept']}/{c['n']}; frequent found {c['found']}/{c['searched']} "
                  f"({c['found'] / c['searched']:.0%}); Table 8 {c['ratio']:.2f}; Fig. 2 std {c['spread']:.2f}"
                  + (f"; Table 2 {coef}" if e == 8 else ""))
        mono = all(x < y for x, y in zip(spreads, spreads[1:]))
        print(f"   Fig. 2 std grows with eps: {'yes' if mono else 'no'}")


if __name__ == "__main__":
    main()
