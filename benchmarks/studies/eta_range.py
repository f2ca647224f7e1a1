"""Would a wider learning-rate (or steps, or batch-size) axis make the retention rule keep a strict subset at ε = 4
and 8 without losing the default's other results? Combines a finished default run with a probe that trained and
scored one more value of the axis.

    python benchmarks/studies/eta_range.py <default workspace> <probe workspace> [--axis learning_rate --value 0.02]
    python benchmarks/studies/eta_range.py <default workspace> <probe workspace> --axis steps --value 35
    python benchmarks/studies/eta_range.py <default workspace> <probe workspace> --axis batch_size --value 128

The probe: a clone of the default with ``cube.epsilon: [4, 8]`` and the axis at its one new value (e.g.
``cube.learning_rate: [0.02]``), run with ``empriv sweep --engine local --stages train,score`` (16 runs; the
default's own runs are deterministic, so they are read from the default workspace instead of being trained again).
For three axes — the default's low value and the new one, its high value and the new one, all three — and ε = 4
and 8 it prints: the configurations the retention rule keeps (≥ 90 % of the best
configuration's test-NLL gain over the base, the research's rule), the frequent secrets' searches found over all
configurations, the Table 8 ratio of ACR over successes over the kept configurations, and the OLS coefficients of
ACR over successes ~ log b + log T + log η over the kept configurations' runs; then each configuration's gain
fraction and finds. Nothing is written.
"""

import argparse
import collections
import glob
import json
import statistics

import numpy as np


def load(ws: str, keep) -> list[dict]:
    out = []
    for p in glob.glob(f"{ws}/records/score/record/full/*.json"):
        r = json.load(open(p))
        if keep(r):
            out.append(r)
    return out


def summarise(runs: list[dict], base: float, eps: int) -> None:
    g = collections.defaultdict(list)
    for r in runs:
        g[(r["batch_size"], r["steps"], r["learning_rate"])].append(r)
    nll = {k: statistics.fmean(x["test_nll"] for x in v) for k, v in g.items()}
    best = min(nll.values())
    kept = {k for k, v in nll.items() if v <= base - 0.9 * (base - best)}
    found, searched = sum(r["acr_n_success"] for r in runs), sum(r["acr_n_searched"] for r in runs)
    means = {k: statistics.fmean(x["acr_mean"] for x in v if x["acr_mean"] is not None)
             for k, v in g.items() if k in kept}
    stds = [statistics.stdev([x["acr_mean"] for x in v]) for k, v in g.items()
            if k in kept and all(x["acr_mean"] is not None for x in v)]
    t8 = statistics.stdev(means.values()) / statistics.fmean(stds) if len(means) > 1 and stds else float("nan")
    rows = [(k, r["acr_mean"]) for r in runs
            if (k := (r["batch_size"], r["steps"], r["learning_rate"])) in kept and r["acr_mean"] is not None]
    X = np.array([[1.0, np.log(k[0]), np.log(k[1]), np.log(k[2])] for k, _ in rows])
    coef = np.linalg.lstsq(X, np.array([y for _, y in rows]), rcond=None)[0]
    print(f" eps {eps}: kept {len(kept)}/{len(nll)}; found {found}/{searched} ({found / searched:.0%}); "
          f"Table 8 {t8:.2f}; coef b {coef[1]:+.2f} T {coef[2]:+.2f} eta {coef[3]:+.2f}")
    for k in sorted(nll):
        print(f"    {k} nll {nll[k]:.3f} gain {(base - nll[k]) / (base - best):.3f} found "
              f"{sum(x['acr_n_success'] for x in g[k])} / {sum(x['acr_n_searched'] for x in g[k])}")


# the default cube's two values of each axis a probe can add a third to
AXES = {"batch_size": (256, 512), "learning_rate": (0.005, 0.01), "steps": (50, 100)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("default")
    ap.add_argument("probe")
    ap.add_argument("--axis", choices=sorted(AXES), default="learning_rate")
    ap.add_argument("--value", type=float, default=0.02, help="the probe's one value of --axis")
    a = ap.parse_args(argv)
    base = json.load(open(f"{a.default}/records/base.json"))["test_nll"]
    lo, hi = AXES[a.axis]
    for values in ([lo, a.value], [hi, a.value], [lo, hi, a.value]):
        print(a.axis, "values", values)
        for eps in (4, 8):
            keep = lambda r: r["epsilon"] == eps and r[a.axis] in values  # noqa: E731
            summarise(load(a.default, keep) + load(a.probe, keep), base, eps)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
