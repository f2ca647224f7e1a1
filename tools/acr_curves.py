"""ACR success and ACR over successes against ε and T, from a finished study's score records.

    python tools/acr_curves.py results/memorisation      # writes acr_curves.csv and acr_curves.png there

One row per (ε, T): the searches pooled over seeds and secrets (a failed search counts in the denominator and has no
ACR value: it is never averaged as one), ACR over the successes (mean, std, max), and the run count. The figure has
two panels against ε (categorical, ∞ last), one line per T: success rate, and ACR over successes with its std.
"""

from __future__ import annotations

import csv
import json
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path


def collect(records: Path) -> list[dict]:
    cells: dict[tuple[float, int], dict] = defaultdict(lambda: {"runs": 0, "searched": 0, "success": 0, "acr": []})
    for path in sorted(records.glob("score/*/*/*.json")):
        m = json.loads(path.read_text())
        eps, steps = float(m["epsilon"]), int(m["steps"])  # "inf" parses to math.inf
        cell = cells[(eps, steps)]
        cell["runs"] += 1
        for s in m.get("per_secret") or []:
            if s.get("acr_success") is None:
                continue  # not searched
            cell["searched"] += 1
            if s["acr_success"]:
                cell["success"] += 1
                cell["acr"].append(float(s["acr"]))
    rows = []
    for (eps, steps), c in sorted(cells.items()):
        acr = c["acr"]
        rows.append({"epsilon": "inf" if math.isinf(eps) else f"{eps:g}", "steps": steps, "runs": c["runs"],
                     "searched": c["searched"], "success": c["success"],
                     "success_rate": c["success"] / c["searched"] if c["searched"] else None,
                     "acr_mean": statistics.mean(acr) if acr else None,
                     "acr_std": statistics.stdev(acr) if len(acr) > 1 else None,
                     "acr_max": max(acr) if acr else None})
    return rows


def plot(rows: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    eps_order = sorted({r["epsilon"] for r in rows}, key=lambda e: math.inf if e == "inf" else float(e))
    x = {e: i for i, e in enumerate(eps_order)}
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
    for steps in sorted({r["steps"] for r in rows}):
        sub = [r for r in rows if r["steps"] == steps and r["searched"]]
        a.plot([x[r["epsilon"]] for r in sub], [r["success_rate"] for r in sub], "o-", label=f"T = {steps}")
        ok = [r for r in sub if r["acr_mean"] is not None]
        b.errorbar([x[r["epsilon"]] + 0.04 * (steps / 100 - 1.5) for r in ok], [r["acr_mean"] for r in ok],
                   yerr=[r["acr_std"] or 0 for r in ok], fmt="o-", capsize=3, label=f"T = {steps}")
    for ax, title, ylab in ((a, "ACR search success", "searches with a prompt / searched"),
                            (b, "ACR over successes (failures have no value)", "ACR (mean ± std over successes)")):
        ax.set_xticks(range(len(eps_order)), [("∞" if e == "inf" else e) for e in eps_order])
        ax.set_xlabel("ε")
        ax.set_ylabel(ylab)
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=8)
    b.axhline(1.0, color="grey", lw=0.8, ls=":")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python tools/acr_curves.py RESULTS_DIR (with records/score/ inside)", file=sys.stderr)
        return 2
    root = Path(argv[0])
    if not (root / "records" / "score").is_dir():
        print(f"error: {root / 'records' / 'score'} does not exist (allowed: a study's results directory)", file=sys.stderr)
        return 2
    rows = collect(root / "records")
    with open(root / "acr_curves.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    plot(rows, root / "acr_curves.png")
    for r in rows:
        print(r)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
