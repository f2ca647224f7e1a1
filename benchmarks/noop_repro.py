"""No-op runs: `dvc repro` and `make repro` on a workspace where nothing is left to do (issue 30).

    python benchmarks/noop_repro.py --workspace WS [--peer-workspace OLD] [--repeats 5]

WS must be an up-to-date workspace of the default pipeline (e.g. a copy of a finished cold run with its own .venv).
Every round runs, one after another in this order: `dvc status` (the peer of `dvc repro`: DVC's own check of every
stage, without reproducing), `dvc repro`, then each step of `make -n repro` on its own, then `make repro` itself; with
--peer-workspace, the same steps and `make repro` again there (the previous code and Makefile, the peer of the new
`make repro`). Rounds are interleaved so that the shared machine's load falls on all of them alike; the script prints,
per command, the median wall time and the median CPU time (user + system of the command's processes, which the
load inflates far less), the ratios against the peers, and the load average before and after. A command that finds
something to do (DVC reproduces a stage, the sweep runs an item) is an error: the figures would not be no-op times.
The last line is the goal's verdict: a no-op `make repro` within ``--goal`` seconds of wall time (default 5).
"""

from __future__ import annotations

import argparse
import os
import resource
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path


def _env(ws: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{ws / '.venv' / 'bin'}:{env['PATH']}"
    env.setdefault("WANDB_MODE", "offline")
    env.pop("PYTHONPATH", None)  # the workspace's own editable install decides which empriv runs
    return env


def _run(command: str, ws: Path) -> tuple[float, float, str]:
    """(wall s, CPU s of the command's processes, output) of one shell command in ``ws``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, shell=True, cwd=ws, env=_env(ws), capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    out = done.stdout + done.stderr
    if done.returncode != 0:
        sys.exit(f"{command!r} in {ws} failed (exit status {done.returncode}):\n{out[-2000:]}")
    return wall, cpu, out


def _check_no_op(label: str, out: str) -> None:
    if "Running stage" in out or ("sweep:" in out and "nothing to run" not in out):
        sys.exit(f"{label}: found something to do; bring the workspace up to date first:\n{out[-2000:]}")


def _make_steps(ws: Path) -> list[str]:
    """The commands of `make repro` (``make -n``), in order; '#' comments dropped."""
    out = subprocess.run(["make", "-n", "repro"], cwd=ws, env=_env(ws), capture_output=True, text=True, check=True)
    steps = [line.split("  #")[0].strip() for line in out.stdout.splitlines() if line.strip()]
    if any("pip install" in s or "-m venv" in s for s in steps):
        sys.exit(f"make repro in {ws} would (re)install the venv first: `make venv` there, then measure")
    return steps


def _floor_project(root: Path, n_stages: int, params: Path | None) -> Path:
    """A DVC project of ``n_stages`` trivial stages (one file dep, one output each; with ``params``, that params file
    and one key read by every stage), reproduced once: DVC's own cost per stage, without this project's code."""
    import yaml

    root.mkdir(parents=True)
    subprocess.run(["dvc", "init", "--no-scm", "-q"], cwd=root, check=True)
    (root / "in.txt").write_text("x\n")
    key = None
    if params is not None:
        (root / "params.yaml").write_bytes(params.read_bytes())
        key = next(iter(yaml.safe_load(params.read_text())))
    stages = {f"s{i}": {"cmd": f"mkdir -p out && cp in.txt out/{i}.txt", "deps": ["in.txt"], "outs": [f"out/{i}.txt"],
                        **({"params": [key]} if key else {})} for i in range(n_stages)}
    (root / "dvc.yaml").write_text(yaml.safe_dump({"stages": stages}, sort_keys=False))
    subprocess.run(["dvc", "repro", "-q"], cwd=root, check=True)
    return root


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workspace", type=Path, required=True, help="an up-to-date workspace of the default")
    ap.add_argument("--peer-workspace", type=Path, default=None,
                    help="the same workspace at the previous code (its make repro is the peer of the new one)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--floor", default="", metavar="N[,N]",
                    help="also time a no-op `dvc repro` of DVC projects of N trivial stages each (in a temporary "
                    "directory, with the workspace's params.yaml and one key per stage): what DVC costs per stage")
    ap.add_argument("--goal", type=float, default=5.0, help="seconds of wall time a no-op `make repro` may take")
    args = ap.parse_args(argv)
    spaces = {"new": args.workspace.resolve()}
    if args.peer_workspace:
        spaces["old"] = args.peer_workspace.resolve()
    steps = {name: _make_steps(ws) for name, ws in spaces.items()}
    plan: list[tuple[str, str, Path]] = [("dvc status", "dvc status", spaces["new"]),
                                         ("dvc repro", "dvc repro", spaces["new"])]
    for name, ws in spaces.items():
        plan += [(f"{name}: {step}", step, ws) for step in steps[name]]
        plan.append((f"{name}: make repro", "make repro", ws))
    if args.floor:
        import tempfile

        tmp = Path(tempfile.mkdtemp(prefix="noop-floor-"))
        os.environ["PATH"] = f"{spaces['new'] / '.venv' / 'bin'}:{os.environ['PATH']}"
        for n in (int(x) for x in args.floor.split(",")):
            ws = _floor_project(tmp / f"n{n}", n, spaces["new"] / "params.yaml")
            plan.append((f"floor: dvc repro, {n} trivial stages", "dvc repro", ws))
    times: dict[str, list[tuple[float, float]]] = {label: [] for label, _, _ in plan}
    print(f"workspaces: {', '.join(f'{k} {v}' for k, v in spaces.items())}; {args.repeats} rounds; "
          f"load average at the start {_load()}", flush=True)
    for r in range(args.repeats):
        for label, command, ws in plan:
            wall, cpu, out = _run(command, ws)
            _check_no_op(label, out)
            times[label].append((wall, cpu))
        print(f"round {r + 1}/{args.repeats} done, load average {_load()}", flush=True)
    print(f"load average at the end {_load()}\n")
    width = max(len(label) for label in times)
    print(f"{'command':<{width}}  {'median wall':>11}  {'min–max wall':>13}  {'median CPU':>10}")
    med = {}
    for label, values in times.items():
        walls = [w for w, _ in values]
        cpus = [c for _, c in values]
        med[label] = (statistics.median(walls), statistics.median(cpus))
        print(f"{label:<{width}}  {med[label][0]:>10.2f}s  {min(walls):>6.2f}–{max(walls):<5.2f}s  {med[label][1]:>9.2f}s")
    print()
    status, repro = med["dvc status"], med["dvc repro"]
    print(f"dvc repro / dvc status: {repro[0] / status[0]:.2f}x wall, {repro[1] / status[1]:.2f}x CPU")
    if "old" in spaces:
        new, old = med["new: make repro"], med["old: make repro"]
        print(f"make repro new / old: {new[0] / old[0]:.2f}x wall ({old[0] / new[0]:.1f}x faster), "
              f"{new[1] / old[1]:.2f}x CPU ({old[1] / new[1]:.1f}x less)")
    print("commands: " + "; ".join(f"{k}: {' && '.join(shlex.quote(s) for s in v)}" for k, v in steps.items()))
    make = med["new: make repro"]
    print(f"goal (no-op make repro <= {args.goal:g} s wall): {'met' if make[0] <= args.goal else 'NOT met'} "
          f"({make[0]:.2f} s; {make[0] / status[0]:.2f}x dvc status, DVC's own check of every stage)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
