"""profiles: ε(δ) privacy profiles of every calibrated cube configuration.

Reads params.yaml (cube.epsilon/batch_size/steps, privacy.delta/accountant,
data.n_train), calibrates σ for every finite (ε, b, T) with q = b/n, and writes
  plots/profiles/eps<ε>.png  -- profiles of all configs calibrated to that ε
                               (they all pass through (target ε, δ) and cross there)
  plots/profiles/profiles.csv -- columns target_epsilon, config, accountant, delta, epsilon
All outputs are written atomically (temp file + os.replace).
"""

from __future__ import annotations

import csv
import io
import math
import os
import sys
import tempfile
from pathlib import Path

OUT_DIR = Path("plots/profiles")
N_DELTAS = 25  # δ grid: log-spaced over [δ*·1e-4, min(0.5, δ*·1e3)]


def read_params(path: str | Path = "params.yaml") -> dict:
    """The only place that knows the params.yaml layout."""
    import yaml

    with open(path, encoding="utf-8") as fh:
        p = yaml.safe_load(fh)
    n = int(p["data"]["n_train"])
    priv = p.get("privacy", {}) or {}
    delta = priv.get("delta")
    if delta is None:
        delta = n ** (-float(priv.get("delta_exponent", 1.1)))
    eps = [e for e in p["cube"]["epsilon"] if not (isinstance(e, str) and e.strip().lower() in ("inf", "infinity", ".inf"))]
    eps = [float(e) for e in eps if math.isfinite(float(e))]
    return {
        "n": n,
        "delta": float(delta),
        "accountant": priv.get("accountant", "prv"),
        "epsilons": eps,
        "batch_sizes": [int(b) for b in p["cube"]["batch_size"]],
        "steps": [int(t) for t in p["cube"]["steps"]],
    }


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def compute(cfg: dict) -> list[dict]:
    from empriv.privacy.accounting import calibrate_noise_multiplier
    from empriv.privacy.profiles import epsilon_profile

    d0 = cfg["delta"]
    lo, hi = math.log10(d0) - 4, math.log10(min(0.5, d0 * 1e3))
    deltas = sorted({10 ** (lo + (hi - lo) * i / (N_DELTAS - 1)) for i in range(N_DELTAS)} | {d0})
    rows = []
    for eps in cfg["epsilons"]:
        for b in cfg["batch_sizes"]:
            for t in cfg["steps"]:
                q = min(1.0, b / cfg["n"])
                cal = calibrate_noise_multiplier(eps, d0, q, t, cfg["accountant"])
                name = f"b{b}_T{t}_sigma{cal.noise_multiplier:.4f}"
                prof = epsilon_profile(cal.noise_multiplier, q, t, deltas, cal.accountant)
                for d, e in zip(deltas, prof):
                    rows.append({"target_epsilon": eps, "config": name, "accountant": cal.accountant,
                                 "delta": d, "epsilon": e})
                print(f"eps={eps:g} b={b} T={t} q={q:.4g}: sigma={cal.noise_multiplier:.5f} "
                      f"({cal.accountant}{'; ' + cal.fallback_reason if cal.fallback_reason else ''})")
    return rows


def write_outputs(rows: list[dict], cfg: dict, out_dir: Path = OUT_DIR) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=["target_epsilon", "config", "accountant", "delta", "epsilon"],
                       lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({**r, "delta": f"{r['delta']:.6e}", "epsilon": f"{r['epsilon']:.6f}"})
    _atomic_write_bytes(out_dir / "profiles.csv", buf.getvalue().encode())

    for eps in cfg["epsilons"]:
        fig, ax = plt.subplots(figsize=(6, 4))
        configs = sorted({r["config"] for r in rows if r["target_epsilon"] == eps})
        for c in configs:
            pts = [(r["delta"], r["epsilon"]) for r in rows if r["target_epsilon"] == eps and r["config"] == c]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], label=c)
        ax.plot([cfg["delta"]], [eps], "k*", markersize=10, label=f"target (eps={eps:g}, delta={cfg['delta']:.2g})")
        ax.set_xscale("log")
        ax.set_xlabel("delta")
        ax.set_ylabel("epsilon")
        ax.set_title(f"privacy profiles calibrated to eps={eps:g} ({cfg['accountant']})")
        ax.legend(fontsize=7)
        ax.grid(True, which="both", alpha=0.3)
        png = io.BytesIO()
        fig.savefig(png, format="png", dpi=120, bbox_inches="tight")
        plt.close(fig)
        _atomic_write_bytes(out_dir / f"eps{eps:g}.png", png.getvalue())


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    cfg = read_params(argv[0] if argv else "params.yaml")
    rows = compute(cfg)
    write_outputs(rows, cfg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
