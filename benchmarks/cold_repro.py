"""Cold `make repro` of this checkout against a peer commit, back to back on one machine (issue 18).

    python benchmarks/cold_repro.py [--peer 3f98ffe] [--commit HEAD] [--workdir DIR] [--order new-first]
    python benchmarks/cold_repro.py --summarise NEW_DIR [OLD_DIR]    # read finished runs again (no peer: no ratio)
    python benchmarks/cold_repro.py … --out benchmarks/results/cold_repro.json

For each of the two commits: a fresh `git clone` into ``--workdir`` (no venv, no DVC cache: a cold start, the venv
bootstrap included, as a user's first `make repro`), then `make repro` under ``/usr/bin/time -v`` with
``EMPRIV_TIMING_LOG`` set, its output in ``<clone>.log``. Then per run: wall time, exit status, user/system CPU,
peak RSS, the stage work by kind from the timing log (train, score, audit, base, ...), and, for a run that went
through ``empriv sweep``, the jobs' command seconds (stage work plus the warm client and the module imports in the
job) — and the ratio peer / this commit of the wall times. The default peer, 3f98ffe, is the default pipeline as it
stood before issue 18's work (every stage its own `dvc repro` process importing torch, ~40 source files per stage
in dvc.lock, 3 audit runs).

The two runs share the machine one after the other, never at once (two cold runs at once would each take the other's
cores). Machines here are shared: read the ratio and the per-kind figures (CPU seconds), and repeat on a quiet
machine before relying on single totals. The last line is the goal's verdict: this commit's cold run within
``--goal-minutes`` of wall time (default 20, issue 41), and the stage work's CPU seconds over the machine's cores
beside it (what an idle machine's wall time approaches). ``--out`` writes the figures as JSON, with each clone named
by its folder only.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_PEER = "3f98ffe"


def cold_run(commit: str, where: Path) -> Path:
    """Clone ``commit`` into ``where`` and run `make repro` there, timed; returns the log's path."""
    if where.exists():
        raise SystemExit(f"error: --workdir: {where} exists (got {where}; allowed: a path that does not exist yet)")
    subprocess.run(["git", "clone", "-q", str(ROOT), str(where)], check=True)
    subprocess.run(["git", "checkout", "-q", commit], cwd=where, check=True)
    log = where.with_suffix(".log")
    # an empty uv cache of its own: the bootstrap downloads and unpacks as on a new machine (uv, from 622eb00,
    # would otherwise hard-link from the cache an earlier run filled)
    env = {**os.environ, "EMPRIV_TIMING_LOG": str(where / ".timing.jsonl"), "UV_CACHE_DIR": f"{where}.uv-cache"}
    env.pop("VIRTUAL_ENV", None)
    print(f"cold make repro of {commit} in {where} (log {log}) ...", flush=True)
    start = time.time()
    with open(log, "w") as fh:
        rc = subprocess.run(["/usr/bin/time", "-v", "make", "repro"], cwd=where, env=env, stdout=fh,
                            stderr=subprocess.STDOUT).returncode
    with open(log, "a") as fh:
        fh.write(f"rc={rc} wall={time.time() - start:.1f}\n")
    return log


def summarise(where: Path, log: Path | None = None) -> dict:
    """What one finished run took (see the module docstring)."""
    log = log or where.with_suffix(".log")
    text = log.read_text(errors="replace")
    out: dict = {"dir": where.name}
    m = re.search(r"^rc=(-?\d+) wall=([\d.]+)$", text, re.M)
    out["exit_status"], out["wall_s"] = (int(m.group(1)), float(m.group(2))) if m else (None, None)
    if m is None:  # a run made by hand: /usr/bin/time -v's own lines
        m = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?:(\d+):)?(\d+):([\d.]+)", text)
        if m:
            out["wall_s"] = round(int(m.group(1) or 0) * 3600 + int(m.group(2)) * 60 + float(m.group(3)), 1)
        m = re.search(r"Exit status: (\d+)", text)
        out["exit_status"] = int(m.group(1)) if m else None
    for key, name in (("user_s", "User time"), ("system_s", "System time")):
        m = re.search(rf"{name} \(seconds\): ([\d.]+)", text)
        out[key] = float(m.group(1)) if m else None
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
    out["peak_rss_mb"] = round(int(m.group(1)) / 1024, 1) if m else None
    kinds: dict = collections.defaultdict(lambda: {"n": 0, "wall_s": 0.0, "cpu_s": 0.0})
    timing = where / ".timing.jsonl"
    if timing.exists():
        for line in timing.read_text().splitlines():
            row = json.loads(line)
            kind = row["stage"].split("@")[0].split(" ")[0]
            kinds[kind]["n"] += 1
            kinds[kind]["wall_s"] += row["wall_s"]
            kinds[kind]["cpu_s"] += row.get("cpu_s") or 0.0
    out["stage_work"] = {k: {"n": v["n"], "wall_s": round(v["wall_s"], 1), "cpu_s": round(v["cpu_s"], 1)}
                         for k, v in sorted(kinds.items(), key=lambda kv: -kv[1]["cpu_s"])}
    out["stage_work_s"] = round(sum(v["wall_s"] for v in kinds.values()), 1)
    out["stage_work_cpu_s"] = round(sum(v["cpu_s"] for v in kinds.values()), 1)
    # the jobs' `done` lines: in the sweep's log file, which its first line names (before that log existed, in
    # make's output itself; reading both covers either)
    for name in re.findall(r"^sweep: engine .*; log (\S+/sweep\.log)$", text, re.M):
        if (where / name).exists():
            text += "\n" + re.sub(r"^\d\d:\d\d:\d\d ", "", (where / name).read_text(errors="replace"), flags=re.M)
    done = re.findall(r"^done (\S+) \(job \d+, ([\d.]+) s", text, re.M)
    jobs = [float(s) for _, s in done]
    if jobs:
        # the stage work of the stages that ran as jobs (the matrix items and filter, or every stage with --all)
        swept = {address.split("@")[0] for address, _ in done}
        matrix = sum(v["wall_s"] for k, v in kinds.items() if k in swept)
        out["sweep_jobs"] = {"n": len(jobs), "command_s": round(sum(jobs), 1), "stage_work_s": round(matrix, 1),
                             "outside_the_stage_s": round(sum(jobs) - matrix, 1)}
    out["dvc_lock_bytes"] = (where / "dvc.lock").stat().st_size if (where / "dvc.lock").exists() else None
    return out


def report(new: dict, old: dict | None, goal_minutes: float) -> bool:
    """Print both runs, the ratio and the goal's verdict; True when the goal is met."""
    for label, run in (("this commit", new), ("peer", old)):
        if run is None:
            continue
        print(f"{label}: {run['dir']}: exit {run['exit_status']}, wall {run['wall_s']} s, user {run['user_s']} s, "
              f"system {run['system_s']} s, peak RSS {run['peak_rss_mb']} MB, dvc.lock {run['dvc_lock_bytes']} bytes")
        print("  stage work (timing log, CPU s): " + ", ".join(f"{k} {v['cpu_s']} ({v['n']})"
                                                                  for k, v in run["stage_work"].items())
              + f"; total {run['stage_work_cpu_s']} CPU s, {run['stage_work_s']} s wall")
        if "sweep_jobs" in run:
            j = run["sweep_jobs"]
            print(f"  sweep jobs: {j['n']}, command seconds {j['command_s']}, of which stage work {j['stage_work_s']}, "
                  f"outside it {j['outside_the_stage_s']} ({100 * j['outside_the_stage_s'] / j['command_s']:.1f} %)")
    if old and new["wall_s"] and old["wall_s"]:
        print(f"cold make repro: peer {old['wall_s']:.0f} s / this commit {new['wall_s']:.0f} s = "
              f"{old['wall_s'] / new['wall_s']:.2f}x")
    else:
        print("cold make repro: no peer run (give OLD_DIR, or run without --summarise), no ratio")
    cores = os.cpu_count() or 1
    ok = bool(new["wall_s"]) and new["exit_status"] == 0 and new["wall_s"] <= 60 * goal_minutes
    print(f"goal (cold make repro <= {goal_minutes:g} min wall): {'met' if ok else 'NOT met'} "
          f"({(new['wall_s'] or 0) / 60:.1f} min; stage work {new['stage_work_cpu_s'] / 60 / cores:.1f} min of CPU "
          f"on {cores} cores)")
    return ok


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--peer", default=DEFAULT_PEER, help=f"the commit to compare with (default {DEFAULT_PEER})")
    ap.add_argument("--commit", default="HEAD", help="this side's commit (default HEAD)")
    ap.add_argument("--workdir", default=None, help="where the two clones go (default: a new directory beside the "
                                                    "repository; the clones need its ../shared to exist for nothing)")
    ap.add_argument("--order", choices=("new-first", "peer-first"), default="new-first")
    ap.add_argument("--summarise", nargs="+", metavar="DIR", help="report finished runs: this commit's clone, then "
                    "optionally the peer's (each with its <clone>.log beside it)")
    ap.add_argument("--goal-minutes", type=float, default=20.0, help="the goal for this commit's cold run (wall)")
    ap.add_argument("--out", type=Path, default=None, help="also write the figures to this JSON file")
    args = ap.parse_args(argv)
    if args.summarise:
        if len(args.summarise) > 2:
            ap.error(f"--summarise: {len(args.summarise)} directories given; allowed: NEW_DIR [OLD_DIR]")
        runs = [summarise(Path(d).resolve()) for d in args.summarise]
        new, old = runs[0], (runs[1] if len(runs) == 2 else None)
    else:
        work = Path(args.workdir or ROOT.parent / f"cold-repro-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
        work.mkdir(parents=True, exist_ok=False)
        commit = subprocess.run(["git", "rev-parse", "--short", args.commit], cwd=ROOT, capture_output=True,
                                text=True, check=True).stdout.strip()
        order = [("new", commit), ("old", args.peer)]
        if args.order == "peer-first":
            order.reverse()
        runs = {}
        for label, c in order:
            cold_run(c, work / label)
            runs[label] = summarise(work / label)
        new, old = runs["new"], runs["old"]
    ok = report(new, old, args.goal_minutes)
    figures = {"this_commit": new, "peer": old, "goal_minutes": args.goal_minutes, "goal_met": ok,
               "cpu_count": os.cpu_count()}
    print(json.dumps(figures, indent=1))
    if args.out:
        args.out.write_text(json.dumps(figures, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
