"""What every figure of the analysis shares: matplotlib set up for files, atomic PNG and CSV writes, and how ε and a
variance group are labelled on an axis. Used by :mod:`empriv.analysis.figures`, :mod:`empriv.analysis.plot_data`
and :mod:`empriv.analysis.adaptation_audit`."""

from __future__ import annotations

import csv
from pathlib import Path


def pyplot():
    """matplotlib's pyplot on the Agg backend, with the figures' dpi and font size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"figure.dpi": 100, "font.size": 9})
    return plt


def save_figure(fig, path: Path) -> Path:
    """Write ``fig`` to ``path`` as PNG, atomically, and close it."""
    from empriv.io import atomic_path

    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", bbox_inches="tight")
    pyplot().close(fig)
    return path


def write_rows(path: Path, header: list[str], rows: list[list]) -> Path:
    """A CSV file of ``header`` and ``rows`` (None as empty), written atomically."""
    from empriv.io import atomic_path

    with atomic_path(path) as tmp, open(tmp, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        for r in rows:
            w.writerow(["" if v is None else v for v in r])
    return path


#: how the DVC plots name ε = ∞ (the CSVs keep ``epsilon`` as the analysis labels it: "2", "inf")
INFINITY_LABEL = "∞"


def epsilon_display(label: str) -> str:
    """ε as the plots show it: "∞" for the non-private reference (analysis label "inf"), else the label itself."""
    return INFINITY_LABEL if label == "inf" else label


def group_display(group: dict) -> str:
    """A variance group as one axis label: "ε=2", "ε=∞", and any other grouping column after it ("ε=8 · lora")."""
    parts = [f"ε={epsilon_display(group['epsilon'])}"] if "epsilon" in group else []
    parts += [str(v) for k, v in group.items() if k != "epsilon"]
    return " · ".join(parts)
