"""``empriv diff [REV_A] [REV_B]``: the DVC metrics of two revisions, each row with a verdict.

``dvc metrics diff`` lists every value that differs in any digit, in file order: float drift from another machine
and seed noise look like change. Here every metric gets the uncertainty :mod:`empriv.analysis.precision` defines
(``se_seed``/``se`` beside a mean, ``<key>_se`` beside a coefficient, …) on each side, and one verdict:

- **unchanged**: the same value on both sides (exactly: the written digits are equal);
- **changed**: ``|Δ| > max(z·σ, rel_tol·max(|old|, |new|))`` with ``σ = √(u_old² + u_new²)`` (:data:`Z` = 3: a
  difference of pure noise is called changed about once in 370 rows); a side without an uncertainty takes the
  other side's (a file written before its ``_se`` keys existed); a metric without one on either side (design
  counts, ε, the base model's utility, …) is changed when ``|Δ|`` exceeds the relative tolerance :data:`REL_TOL`
  alone, above the float drift that the written precision (4 significant digits) leaves;
- **within noise**: every other pair of values, and every pair of an *uncertainty* (``<x>_se`` beside ``<x>``,
  ``se``/``se_seed`` beside ``mean``): it is the σ that judges its metric, not a finding, and with two or three
  seeds behind it it moves by a large factor when the seeds change (issue 42);
- **new** / **gone**: a value only at REV_B / only at REV_A (a missing key or null on the other side).

A p-value (``p_<x>`` beside ``rho_<x>``, ``<x>_p`` beside ``<x>``) takes the verdict of its statistic. Rows are
sorted changed, new, gone, within noise, unchanged, and within each by significance ``|Δ|/σ`` (or ``|Δ|`` over the
tolerance). The text and markdown forms lead with the counts of each verdict and list the changed, new and gone rows
only, as ``dvc metrics diff`` lists only what differs; ``show_all`` lists every row.

The metrics files are those dvc.yaml declares at either revision (DVC lists them); each is read with
``git show REV:path`` (a revision) or from the working tree (no revision), or through DVC when git does not hold
it. A file declared at a revision but missing or unreadable there is an error naming it and the revision (exit
status 2), never a column of "gone" rows; a file declared at one revision only has its metrics new or gone.
Nothing here knows empriv's file names.
"""

from __future__ import annotations

import json
import math
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from empriv.analysis.precision import is_number, uncertainty

Z = 3.0
REL_TOL = 2e-3
ORDER = {"changed": 0, "new": 1, "gone": 2, "within noise": 3, "unchanged": 4}
LOUD = ("changed", "new", "gone")  # the verdicts shown by default


@dataclass(frozen=True)
class Row:
    path: str
    metric: str
    old: Any
    new: Any
    delta: float | None
    sigma: float | None  # √(u_old² + u_new²), None without an uncertainty
    significance: float  # |Δ|/σ, or |Δ| over the tolerance / z; inf for new and gone
    verdict: str


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` → ``{"a.b": 1}`` (leaves only; an empty object has none)."""
    if not isinstance(obj, dict):
        return {prefix: obj}
    out: dict[str, Any] = {}
    for k, v in obj.items():
        out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def _siblings(flat: dict[str, Any], key: str) -> tuple[dict[str, Any], str]:
    parent, _, leaf = key.rpartition(".")
    start = f"{parent}." if parent else ""
    sib = {k[len(start):]: v for k, v in flat.items() if k.startswith(start) and "." not in k[len(start):]}
    return sib, leaf


def _u(flat: dict[str, Any], key: str) -> float | None:
    sib, leaf = _siblings(flat, key)
    parent = key.rpartition(".")[0]
    return uncertainty(sib, leaf, parent=_siblings(flat, parent)[0] if parent else None)


def _statistic_of_p_value(flat: dict[str, Any], key: str) -> str | None:
    """``…rho_score`` for ``…p_score``, ``…coef_x`` for ``…coef_x_p``: the key whose verdict a p-value takes."""
    parent, _, leaf = key.rpartition(".")
    start = f"{parent}." if parent else ""
    for other in ([f"rho_{leaf[2:]}"] if leaf.startswith("p_") else []) + ([leaf[:-2]] if leaf.endswith("_p") else []):
        if start + other in flat:
            return start + other
    return None


def _row(path: str, key: str, old: dict, new: dict, z: float, rel_tol: float) -> Row | None:
    a, b = old.get(key), new.get(key)
    if a is None and b is None:
        return None
    if a is None:
        return Row(path, key, None, b, None, None, math.inf, "new")
    if b is None:
        return Row(path, key, a, None, None, None, math.inf, "gone")
    if not (is_number(a) and is_number(b)):
        same = a == b
        return Row(path, key, a, b, None, None, 0.0 if same else math.inf, "unchanged" if same else "changed")
    delta = float(b) - float(a)
    u_a, u_b = _u(old, key), _u(new, key)
    # a side without an uncertainty (a file written before its `_se` keys) takes the other side's
    sigma = None if u_a is None and u_b is None else math.hypot(u_a if u_a is not None else u_b,
                                                                 u_b if u_b is not None else u_a)
    if delta == 0:
        return Row(path, key, a, b, 0.0, sigma, 0.0, "unchanged")
    floor = rel_tol * max(abs(float(a)), abs(float(b)))
    threshold = max(z * sigma if sigma else 0.0, floor)
    if sigma:
        significance = abs(delta) / sigma
    elif threshold > 0:
        significance = abs(delta) / (threshold / z)
    else:
        significance = math.inf if delta else 0.0
    verdict = "changed" if abs(delta) > threshold and not _is_uncertainty_of_another(old, new, key) else "within noise"
    return Row(path, key, a, b, delta, sigma, significance, verdict)


def _is_uncertainty_of_another(old: dict[str, Any], new: dict[str, Any], key: str) -> bool:
    """``…x_se`` beside ``…x``, ``…se``/``…se_seed`` beside ``…mean``: a row that is the σ of another row. It judges
    that row and is never a finding of its own, so it is at most "within noise" (docs/sweeps.md)."""
    parent, _, leaf = key.rpartition(".")
    start = f"{parent}." if parent else ""
    others = [leaf[:-3]] if leaf.endswith("_se") else ["mean"] if leaf in ("se", "se_seed") else []
    return any(start + o in old or start + o in new for o in others)


def compare(old_files: dict[str, dict], new_files: dict[str, dict], *, z: float = Z,
            rel_tol: float = REL_TOL) -> list[Row]:
    """One :class:`Row` per metric of either side (``{path: metrics object}`` each), sorted (module docstring)."""
    if z <= 0:
        raise ValueError(f"z must be > 0, got {z}")
    if rel_tol < 0:
        raise ValueError(f"rel_tol must be >= 0, got {rel_tol}")
    rows: list[Row] = []
    for path in sorted(set(old_files) | set(new_files)):
        old, new = flatten(old_files.get(path) or {}), flatten(new_files.get(path) or {})
        by_key = {}
        for key in dict.fromkeys([*old, *new]):
            row = _row(path, key, old, new, z, rel_tol)
            if row is not None:
                by_key[key] = row
        for key, row in by_key.items():  # a p-value follows its statistic
            stat = _statistic_of_p_value(new if key in new else old, key)
            if stat in by_key and row.verdict in ("changed", "within noise"):
                s = by_key[stat]
                if s.verdict in ("changed", "within noise", "unchanged"):  # (a moved p of an unchanged ρ: noise)
                    by_key[key] = Row(row.path, key, row.old, row.new, row.delta, None, s.significance,
                                      "within noise" if s.verdict == "unchanged" else s.verdict)
        rows.extend(by_key.values())
    return sorted(rows, key=lambda r: (ORDER[r.verdict], -r.significance, r.path, r.metric))


# ----------------------------------------------------------------------------- reading two revisions
def _run(cmd: list[str], root: Path) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=root, capture_output=True, text=True)


def _where(rev: str | None) -> str:
    return "in the working tree" if rev is None else f"at {rev}"


def declared_metrics(root: Path, rev: str | None) -> list[str]:
    """The metrics files dvc.yaml declares at ``rev`` (None: the working tree). Every one of them must be readable
    there: a ConfigError has one line per file that is missing or unreadable, naming it and the revision (its
    metrics would otherwise all read as gone, and a CI gate pass)."""
    from empriv.infra.dvc_adapter import metrics_files

    files = metrics_files(root, rev)
    problems = [f"{path} {_where(rev)}: {why}, though dvc.yaml declares it there"
                + (" (run `make repro`, or `dvc checkout` it)" if rev is None and why == "does not exist" else "")
                for path, why in files.items() if why is not None]
    if problems:
        from empriv.config import ConfigError

        raise ConfigError(*problems)
    return sorted(files)


def read_metrics_file(root: Path, path: str, rev: str | None) -> dict | None:
    """A metrics file at ``rev`` (None: the working tree); None where it does not exist there. A file that is not
    JSON is a ValueError naming it and the revision."""
    if rev is None:
        f = root / path
        text = f.read_text(encoding="utf-8") if f.is_file() else None
    else:
        proc = _run(["git", "show", f"{rev}:{path}"], root)
        text = proc.stdout if proc.returncode == 0 else None
        if text is None:
            try:  # a metrics file kept in DVC's cache rather than in git
                from empriv.infra.dvc_adapter import read_at_revision

                text = read_at_revision(root, path, rev)
            except Exception:  # noqa: BLE001 - absent at that revision
                return None
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} {_where(rev)}: not JSON ({err})") from None


def diff_revisions(root: Path, rev_a: str | None = "HEAD", rev_b: str | None = None, *, z: float = Z,
                   rel_tol: float = REL_TOL) -> list[Row]:
    """:func:`compare` of the metrics files at ``rev_a`` and ``rev_b`` (None: the working tree). A file that dvc.yaml
    declares at a side must be there and readable (:func:`declared_metrics`); a file declared at one side only (a
    stage added or dropped) counts as empty at the other: its metrics are new, or gone."""
    root = Path(root).resolve()
    if rev_a is None and rev_b is not None:
        raise ValueError("the working tree can only be the second side: give REV_A as a revision")
    old_paths, new_paths = declared_metrics(root, rev_a), declared_metrics(root, rev_b)
    old = {p: m for p in old_paths if (m := read_metrics_file(root, p, rev_a)) is not None}
    new = {p: m for p in new_paths if (m := read_metrics_file(root, p, rev_b)) is not None}
    return compare(old, new, z=z, rel_tol=rel_tol)


# ----------------------------------------------------------------------------- output
def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def _sig(r: Row) -> str:
    if r.delta is None or r.verdict in ("new", "gone", "unchanged"):
        return "-"
    return f"{r.significance:.1f}σ" if r.sigma else "-"  # "-": no uncertainty, the relative tolerance applies


def _cells(r: Row) -> list[str]:
    return [r.path, r.metric, _fmt(r.old), _fmt(r.new), "-" if r.delta is None else f"{r.delta:+.3g}", _sig(r),
            r.verdict]


def counts(rows: list[Row]) -> dict[str, int]:
    return {v: sum(r.verdict == v for r in rows) for v in ORDER}


def markdown_table(rows: list[Row], old_label: str, new_label: str) -> str:
    """One markdown table (header, rule, a line per row), "" without rows."""
    if not rows:
        return ""
    header = ["Path", "Metric", old_label, new_label, "Δ", "Δ/σ", "verdict"]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in _cells(r)) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def summary_line(rows: list[Row], z: float = Z, rel_tol: float = REL_TOL) -> str:
    """``2 changed, 0 new, 0 gone, 180 within noise, 60 unchanged (…)``: the counts of every verdict and the rule."""
    c = counts(rows)
    return (f"{c['changed']} changed, {c['new']} new, {c['gone']} gone, {c['within noise']} within noise, "
            f"{c['unchanged']} unchanged (changed: |Δ| > {z:g}σ, σ the combined standard error of both sides, or > "
            f"{rel_tol:.1%} of the value for a metric without one)")


def loud_rows(rows: list[Row]) -> list[Row]:
    """The rows shown by default: changed, new and gone."""
    return [r for r in rows if r.verdict in LOUD]


def format_markdown(rows: list[Row], old_label: str, new_label: str, z: float = Z, *, show_all: bool = False,
                    rel_tol: float = REL_TOL) -> str:
    """The summary line, then the changed, new and gone rows as a table; with ``show_all`` also the rows within
    noise and the unchanged ones, each folded in ``<details>``."""
    loud = loud_rows(rows)
    parts = [summary_line(rows, z, rel_tol) + "\n"]
    if loud:
        parts.append("\n" + markdown_table(loud, old_label, new_label))
    if show_all:
        for verdict in ("within noise", "unchanged"):
            quiet = [r for r in rows if r.verdict == verdict]
            if quiet:
                parts.append(f"\n<details><summary>{len(quiet)} metrics {verdict}</summary>\n\n"
                             + markdown_table(quiet, old_label, new_label) + "\n</details>\n")
    return "".join(parts)


def format_text(rows: list[Row], old_label: str, new_label: str, z: float = Z, *, show_all: bool = False,
                rel_tol: float = REL_TOL) -> str:
    """The summary line, then a table of the changed, new and gone rows (every row with ``show_all``); the summary
    alone when there is nothing to show."""
    shown = rows if show_all else loud_rows(rows)
    lines = [summary_line(rows, z, rel_tol)]
    if shown:
        table = [["Path", "Metric", old_label, new_label, "Δ", "Δ/σ", "verdict"], *map(_cells, shown)]
        widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
        lines += ["", *("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in table)]
    return "\n".join(lines) + "\n"


def to_json(rows: list[Row]) -> list[dict]:
    out = []
    for r in rows:
        d = asdict(r)
        d["significance"] = None if math.isinf(r.significance) else r.significance
        out.append(d)
    return out
