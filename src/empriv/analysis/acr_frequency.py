"""ACR per ε by secret frequency: frequent secrets and rare ones apart.

Record-level DP bounds what one training record can leak, not what a string repeated in many records leaks: under
DP a secret in 8 % of the records can still be memorised while one in a single record is protected. Pooling them
hides both facts, so this module reads the ``per_secret`` rows of every run's score record and reports, per ε, each
searched secret (how many runs searched it, how many found a prompt, the ACR over those successes) and two groups:
the **frequent** secrets and the **rare** ones (frequency ≤ ``score.acr.rare_frequency``;
:func:`empriv.score.secret_frequency.is_rare_secret`, a secret of unknown frequency is frequent).

A failed search is censored (no value, only an upper bound): it counts in ``n_searched`` and nowhere else; every
ACR mean is over successes only and None when there is none. Numbers and secret ids only, never secret text.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from empriv.analysis.table import epsilon_label
from empriv.score.secret_frequency import DEFAULT_RARE_FREQUENCY, check_rare_frequency, is_rare_secret, secret_frequency

#: the columns of ``plots/analysis/acr_by_frequency.csv`` (:func:`plot_rows`)
PLOT_HEADER = ["epsilon", "secret", "occurrences", "frequency", "rare", "n_searched", "n_success", "success_rate",
               "acr_mean"]
GROUPS = ("frequent", "rare")


def acr_by_frequency(records: Sequence[dict], *, rare_frequency: float | None = None,
                     n_train: int | None = None) -> dict:
    """Per ε and per searched secret, the ACR searches of ``records`` (the score stage's JSON of each run: ``epsilon``,
    ``per_secret`` rows with ``id``, ``acr_success``, ``acr``, ``kind``, ``occurrences``, ``frequency``; a row without
    ``acr_success`` was not searched).

    ``rare_frequency``: the split; None takes the one the records' ``acr_protocol`` names (every record that names
    one must name the same, else ``ValueError``), else ``score.acr.rare_frequency``'s default. ``n_train``: for rows
    with ``occurrences`` but no ``frequency``.

    Returns ``rare_frequency``, ``epsilons`` (labels as :func:`empriv.analysis.table.epsilon_label` gives them,
    ascending, "inf" last), ``secrets`` (every secret searched at some ε: ``id``, ``kind``, ``occurrences``,
    ``frequency``, ``rare``; by frequency, highest first, unknown frequencies last) and ``per_epsilon``: per label,
    ``n_runs``, ``n_runs_searched``, ``secrets`` (those searched at that ε, in the same order, each with
    ``n_searched`` = runs that searched it, ``n_success``, ``success_rate``, ``acr_mean_over_successes``) and the
    totals ``frequent`` and ``rare`` (None when no secret of the group was searched at that ε): ``n_secrets``,
    ``n_searched`` (searches, pooled over runs and secrets), ``n_success``, ``success_rate``, ``acr_mean`` (over the
    successful searches), ``min_frequency`` / ``max_frequency`` (over its secrets of known frequency).
    """
    split = _rare_frequency(records, rare_frequency)
    info: dict[str, dict] = {}  # secret id → what is known of it (first record that says it)
    cells: dict[str, dict[str, list]] = {}  # ε label → secret id → [succeeded?, acr] per search
    runs: dict[str, list[int]] = {}  # ε label → [runs, runs that searched]
    for record in records:
        label = epsilon_label(float(record["epsilon"]))
        counts = runs.setdefault(label, [0, 0])
        per = cells.setdefault(label, {})
        counts[0] += 1
        searched = [r for r in record.get("per_secret") or [] if r.get("acr_success") is not None]
        counts[1] += bool(searched)
        for row in searched:
            if bool(row["acr_success"]) and row.get("acr") is None:
                raise ValueError(f"secret {row['id']}: an ACR record with acr_success true has no acr value")
            known = info.setdefault(row["id"], {"id": row["id"], "kind": None, "occurrences": None, "frequency": None})
            for key in ("kind", "occurrences"):
                if known[key] is None and row.get(key) is not None:
                    known[key] = row[key]
            if known["frequency"] is None:
                known["frequency"] = secret_frequency(row, n_train)
            per.setdefault(row["id"], []).append((bool(row["acr_success"]), row.get("acr")))
    for known in info.values():
        known["rare"] = is_rare_secret(known, split)
    order = sorted(info.values(), key=lambda s: (s["frequency"] is None, -(s["frequency"] or 0.0), str(s["id"])))
    per_epsilon = {}
    for label in sorted(runs, key=_label_order):
        rows = []
        for secret in order:
            searches = cells[label].get(secret["id"])
            if searches:
                hits = [float(a) for ok, a in searches if ok]
                rows.append({**secret, "n_searched": len(searches), "n_success": len(hits),
                             "success_rate": len(hits) / len(searches), "acr_mean_over_successes": _mean(hits)})
        per_epsilon[label] = {"n_runs": runs[label][0], "n_runs_searched": runs[label][1], "secrets": rows,
                              **{g: _group([r for r in rows if r["rare"] == (g == "rare")], cells[label]) for g in GROUPS}}
    return {"rare_frequency": split, "epsilons": list(per_epsilon), "secrets": order, "per_epsilon": per_epsilon}


def _rare_frequency(records: Sequence[dict], given: float | None) -> float:
    if given is not None:
        return check_rare_frequency(given)
    named = sorted({float(r["acr_protocol"]["rare_frequency"]) for r in records
                    if isinstance(r.get("acr_protocol"), dict) and r["acr_protocol"].get("rare_frequency") is not None})
    if len(named) > 1:
        raise ValueError(f"the score records were written with different score.acr.rare_frequency values {named}: "
                         "re-run the score stage so that every run uses one")
    return check_rare_frequency(named[0] if named else DEFAULT_RARE_FREQUENCY)


def _group(rows: list[dict], searches: dict[str, list]) -> dict | None:
    """The totals of one group's secrets at one ε (None without any)."""
    if not rows:
        return None
    hits = [float(a) for r in rows for ok, a in searches[r["id"]] if ok]
    n = sum(r["n_searched"] for r in rows)
    freqs = [r["frequency"] for r in rows if r["frequency"] is not None]
    return {"n_secrets": len(rows), "n_searched": n, "n_success": len(hits), "success_rate": len(hits) / n,
            "acr_mean": _mean(hits), "min_frequency": min(freqs) if freqs else None,
            "max_frequency": max(freqs) if freqs else None}


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _label_order(label: str) -> float:
    return math.inf if label == "inf" else float(label)


def plot_rows(result: dict) -> list[list]:
    """The DVC plot data, one row per ε and secret searched at it, in the columns of :data:`PLOT_HEADER` (``rare``
    as 1/0, ``acr_mean`` over successes, empty where none)."""
    return [[label, s["id"], s["occurrences"], s["frequency"], int(s["rare"]), s["n_searched"], s["n_success"],
             s["success_rate"], s["acr_mean_over_successes"]]
            for label, entry in result["per_epsilon"].items() for s in entry["secrets"]]


# ------------------------------------------------------------------------------------------ text of the summary
def percent(fraction: float | None) -> str:
    """A frequency as a percentage of the training records: 0.04 → "4 %", 0.005 → "0.5 %", None → "?"."""
    return "?" if fraction is None else f"{100 * fraction:.3g} %"


def _group_text(name: str, group: dict | None, rare: bool) -> str:
    if group is None:
        return f"{name} not searched"
    if rare:
        span = f"≤ {percent(group['max_frequency'])}"
    else:
        span = f"≥ {percent(group['min_frequency'])}" if group["min_frequency"] is not None else "frequency unknown"
    n = group["n_secrets"]
    text = f"{name} ({span}, {n} secret{'s' if n != 1 else ''}) {group['n_success']}/{group['n_searched']} found"
    if group["acr_mean"] is not None:
        text += f", ACR {group['acr_mean']:.2f}"
    return text


def epsilon_lines(result: dict, labels: Sequence[str] | None = None) -> list[str]:
    """One line per ε (``labels``: those of the summary table; default the result's own) with the frequent and the
    rare secrets' searches, 'not searched' where no run of that ε searched, then how to read them."""
    lines = []
    for label in labels if labels is not None else result["epsilons"]:
        entry = result["per_epsilon"].get(label)
        if not entry or not entry["n_runs_searched"]:
            lines.append(f"ACR at ε = {label}: not searched")
            continue
        runs = entry["n_runs_searched"]
        lines.append(f"ACR at ε = {label}, {runs} run{'s' if runs != 1 else ''}: "
                     f"{_group_text('frequent secrets', entry['frequent'], False)}; "
                     f"{_group_text('rare', entry['rare'], True)}")
    lines += [f"  frequent / rare: in > / ≤ score.acr.rare_frequency = {percent(result['rare_frequency'])} of the training "
              "records, apart because record-level ε bounds one record,",
              "  not a string repeated in many; k/m: searches that found a prompt; ACR: mean over the successes only (a "
              "failed search has no value,",
              "  only an upper bound); 'not searched': no run of that ε searched such a secret (score.acr.epsilons / "
              "training_seeds / max_secrets)"]
    return lines


def _cell(n_success: int, n_searched: int, acr_mean: float | None) -> str:
    return f"{n_success}/{n_searched}" + (f" {acr_mean:.2f}" if acr_mean is not None else "")


def secret_table(result: dict) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of the per-secret table: one row per searched secret (id, kind, training records containing it,
    frequency, group), one column per ε with "k/m" (runs whose search found a prompt / runs that searched it) and the
    ACR over those successes, "–" where no run of that ε searched the secret; then a total row per group searched
    (its searches pooled over runs and secrets). Shared by the terminal and the report."""
    header = ["secret", "kind", "records", "frequency", "group", *[f"ε = {label}" for label in result["epsilons"]]]
    rows = []
    for secret in result["secrets"]:
        row = [str(secret["id"]), str(secret["kind"] or ""), "?" if secret["occurrences"] is None else str(secret["occurrences"]),
               percent(secret["frequency"]), "rare" if secret["rare"] else "frequent"]
        for label in result["epsilons"]:
            cell = next((s for s in result["per_epsilon"][label]["secrets"] if s["id"] == secret["id"]), None)
            row.append("–" if cell is None else _cell(cell["n_success"], cell["n_searched"], cell["acr_mean_over_successes"]))
        rows.append(row)
    for group in GROUPS:
        members = [s["frequency"] for s in result["secrets"] if s["rare"] == (group == "rare")]
        if not members:
            continue
        known = [f for f in members if f is not None]
        span = ("?" if not known else f"≤ {percent(max(known))}" if group == "rare" else f"≥ {percent(min(known))}")
        row = [f"all {group}", "", "", span, group]
        for label in result["epsilons"]:
            g = result["per_epsilon"][label][group]
            row.append("–" if g is None else _cell(g["n_success"], g["n_searched"], g["acr_mean"]))
        rows.append(row)
    return header, rows


def format_secret_table(result: dict) -> str:
    """The per-secret table (:func:`secret_table`) for the terminal, under its heading; "" without searched secrets."""
    header, rows = secret_table(result)
    if not rows:
        return ""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["ACR by secret frequency (per ε: k/m runs found a prompt, then the mean ACR of those successes; – not "
             "searched;", "all: searches pooled over the group's secrets)"]
    for i, r in enumerate([header, *rows]):
        lines.append("  ".join(c.ljust(w) if j < 2 or j == 4 else c.rjust(w) for j, (c, w) in enumerate(zip(r, widths))))
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)
