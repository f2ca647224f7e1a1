"""Does averaging ACR over more frequent secrets separate configurations from training seeds (the research's Table 8)?

Run in a workspace whose score stages ran with more frequent secrets than the default had (the probe behind this
study: the default's params with ``data.secret_frequencies`` of ten frequent secrets, 10 % down to 5.5 %, then the
five rare ones; ``cube.epsilon: [8]``, ``cube.seed: [0, 1, 2]``; ``empriv sweep --engine local --stages train,score``):

    python benchmarks/studies/secret_count.py <workspace> [--out <file.json>]

Per run, ACR over successes (a failed search censored, never averaged) is taken over three sets of the frequent
secrets (those above ``score.acr.rare_frequency``): all of them, the first half and the second half (the secrets
are planted one kind after another, so each half holds one secret of each kind). For every set and every pair of
training seeds (and all seeds together) it prints the Table 8 line: the std of the configuration means over the mean
within-configuration std of the seeds, with the searches found; then the same for the success rate, and each
secret's successes. Nothing in the workspace is written.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
from collections import defaultdict
from pathlib import Path


def load_runs(workspace: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((workspace / "records" / "score").rglob("*.json"))]


def frequent_ids(runs: list[dict]) -> list[str]:
    cut = runs[0]["acr_protocol"].get("rare_frequency", 0.01)
    return sorted({s["id"] for r in runs for s in r["per_secret"] if s.get("frequency", 1.0) > cut})


def config_of(run: dict) -> tuple:
    return run["batch_size"], run["steps"], run["learning_rate"], run.get("method")


def table8(runs: list[dict], ids: set[str], seeds: tuple[int, ...], score: str) -> dict:
    groups: dict[tuple, list[float]] = defaultdict(list)
    found = searched = 0
    for r in runs:
        if r["seed"] not in seeds:
            continue
        searches = [s for s in r["per_secret"] if s["id"] in ids]
        hits = [s["acr"] for s in searches if s.get("acr_success")]
        found, searched = found + len(hits), searched + len(searches)
        if score == "acr_mean" and hits:
            groups[config_of(r)].append(statistics.fmean(hits))
        elif score == "acr_success_rate" and searches:
            groups[config_of(r)].append(len(hits) / len(searches))
    means = [statistics.fmean(v) for v in groups.values()]
    stds = [statistics.stdev(v) for v in groups.values() if len(v) >= 2]
    out = {"n_configs": len(means), "found": found, "searched": searched}
    if len(means) >= 2 and stds:
        config_std, seed_std = statistics.stdev(means), statistics.fmean(stds)
        out.update(config_std=config_std, seed_std=seed_std, ratio=config_std / seed_std if seed_std else None)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("workspace", type=Path)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    runs = load_runs(a.workspace)
    if not runs:
        raise SystemExit(f"no score records under {a.workspace}/records/score")
    ids = frequent_ids(runs)
    half = len(ids) // 2
    sets = {f"all {len(ids)}": ids, f"first {half}": ids[:half], f"last {len(ids) - half}": ids[half:]}
    seeds = sorted({r["seed"] for r in runs})
    seed_sets = [*itertools.combinations(seeds, 2), tuple(seeds)] if len(seeds) > 2 else [tuple(seeds)]
    eps = sorted({str(r["epsilon"]) for r in runs})
    print(f"{len(runs)} runs at eps {', '.join(eps)}; frequent secrets {', '.join(ids)}")
    result: dict = {"runs": len(runs), "epsilon": eps, "frequent": ids, "table8": {}}
    for score in ("acr_mean", "acr_success_rate"):
        print(f"\nTable 8 on {score}: configuration std / mean seed std = ratio (searches found)")
        for ss in seed_sets:
            cells = []
            for name, subset in sets.items():
                t = table8(runs, set(subset), ss, score)
                result["table8"].setdefault(score, {}).setdefault(name, {})[",".join(map(str, ss))] = t
                cells.append(f"{name}: " + (f"{t['config_std']:.2f} / {t['seed_std']:.2f} = {t['ratio']:.2f}"
                                            if t.get("ratio") is not None else "-") + f" ({t['found']}/{t['searched']})")
            print(f"  seeds {','.join(map(str, ss))}  " + "  |  ".join(cells))
    per_secret: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for r in runs:
        for s in r["per_secret"]:
            per_secret[s["id"]][0] += bool(s.get("acr_success"))
            per_secret[s["id"]][1] += 1
    freq = {s["id"]: s.get("frequency") for r in runs for s in r["per_secret"]}
    result["per_secret"] = {k: {"frequency": freq[k], "found": v[0], "searched": v[1]} for k, v in sorted(per_secret.items())}
    print("\nsearches found per secret: " + ", ".join(f"{k} ({freq[k]:.3g}) {v[0]}/{v[1]}" for k, v in sorted(per_secret.items())))
    if a.out:
        a.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
