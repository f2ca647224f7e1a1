"""Print the research's headline tables from a study's (or the default run's) analysis, as Markdown rows.

    python benchmarks/studies/reproduction_tables.py results/research-cpu/records/analysis.json

Per ε: ACR searches found for the frequent and the rare secrets (apart), ACR over successes, the std of configuration
means (Fig. 2), seed std vs configuration std and their ratio (Table 8, kept configurations and all), the
regression coefficients of log b, log T, log η with p-values (Table 2, individual), and Fig. 5 (a–c): the primary
score's seed mean along each axis at the reference. Numbers only; docs/analysis.md puts them beside the research's.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _f(x, digits: int = 2) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def _eps_key(e: str) -> float:
    return float("inf") if e == "inf" else float(e)


def searches(freq: dict, eps: str) -> tuple[str, str, str]:
    """(frequent found/searched, rare found/searched, ACR over successes of the frequent ones) at ``eps``."""
    row = (freq.get("per_epsilon") or {}).get(eps) or {}
    out = []
    for rare in (False, True):
        s = [x for x in row.get("secrets", []) if x["rare"] is rare]
        out.append(f"{sum(x['n_success'] for x in s)}/{sum(x['n_searched'] for x in s)}")
    found = [x for x in row.get("secrets", []) if not x["rare"] and x["n_success"]]
    total = sum(x["n_success"] for x in found)
    mean = sum(x["acr_mean_over_successes"] * x["n_success"] for x in found) / total if total else None
    return out[0], out[1], _f(mean)


def main(path: str) -> None:
    a = json.loads(Path(path).read_text())
    score = a["primary_score"]
    eps_all = sorted({*a.get("table8", {}).get("per_epsilon", {}), *a.get("retention", {})}, key=_eps_key)
    print(f"primary score: {score}; runs {a['n_runs']}, configurations {a['n_configs']}\n")
    print("| ε | kept | frequent found | rare found | ACR over successes (frequent) | Fig. 2 std of config means |"
          " Table 8 seed | config | ratio | ratio, all configs |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    variance = {v["group"]["epsilon"]: v for v in a["variance"].get(score, [])}
    for e in eps_all:
        t8 = a["table8"]["per_epsilon"].get(e, {})
        ret = a["retention"].get(e, {})
        fr, ra, acr = searches(a.get("acr_by_frequency") or {}, e)
        print(f"| {e} | {ret.get('n_kept')}/{ret.get('n_configs')} | {fr} | {ra} | {acr} | "
              f"{_f(variance.get(e, {}).get('std'))} | {_f(t8.get('randomness'))} | {_f(t8.get('hyperparameter'))} | "
              f"{_f(t8.get('ratio'))} | {_f((t8.get('all') or {}).get('ratio'))} |")
    svc = a.get("seed_vs_configuration") or {}
    others = [k for k in ("acr_success_rate", "exposure_gap_mean", "vmr_mean") if k in svc]
    if others:
        print("\nTable 8 on other scores: configuration std / seed std = ratio (kept configurations):\n")
        print("| ε | " + " | ".join(others) + " |")
        print("|---|" + "---|" * len(others))
        for e in eps_all:
            cells = []
            for k in others:
                t = svc[k].get(e) or {}
                cells.append(f"{_f(t.get('hyperparameter'))} / {_f(t.get('randomness'))} = {_f(t.get('ratio'))}"
                             if t else "–")
            print(f"| {e} | " + " | ".join(cells) + " |")
    print("\nTable 2 (individual; kept configurations' runs):\n")
    print("| ε | n | R² | log b | log T | log η |")
    print("|---|---|---|---|---|---|")
    for e in sorted(a["regression"], key=_eps_key):
        r = (a["regression"][e].get(score) or {}).get("individual") or {}
        if not r.get("fitted"):
            print(f"| {e} | {r.get('n')} | – | {r.get('reason')} | | |")
            continue
        terms = r["terms"]
        cells = [f"{terms[k]['coef']:+.2f} (p {terms[k]['p']:.2g})" if k in terms else "–"
                 for k in ("log_b", "log_T", "log_eta")]
        print(f"| {e} | {r['n']} | {r['r2']:.2f} | " + " | ".join(cells) + " |")
    fig5 = a.get("one_at_a_time") or {}
    print(f"\nFig. 5 (a–c), reference {fig5.get('reference')}:\n")
    for p in fig5.get("panels", []):
        for e, pts in sorted(p["lines"].items(), key=lambda kv: _eps_key(kv[0])):
            line = " → ".join(f"{pt['value']:g}: {pt['mean']:.2f}±{(pt['seed_std'] or 0):.2f}" for pt in pts)
            print(f"- vary {p['vary']}, ε {e}: {line}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "records/analysis.json")
