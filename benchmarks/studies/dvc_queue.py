"""Benchmark: what a queued DVC experiment costs on top of its own work, and what `dvc queue start -j 2` gives.

Run:  nice python benchmarks/studies/dvc_queue.py [--root PATH] [--n 4]

In a project whose pipeline is up to date and committed (`make repro`, then `git commit`), every experiment sets a
fresh ``analyze.seed`` (``-S``), so each one re-runs exactly the ``analyze`` stage (and ``validate``, ``inputs``)
and restores everything else from the cache. The peer is the same change run in the workspace,
``dvc exp run -S analyze.seed=…`` (no temporary copy, no worker); then ``--n`` experiments are queued and run with
one worker, and ``--n`` more with two (``dvc queue start -j 2``). It prints each wall time, the medians and the
ratios: queued per experiment / workspace, and one worker / two workers for the whole batch. The experiments are
removed afterwards. Nothing is asserted: machines here are shared, compare the ratios.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path


def dvc(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    import os

    bin_dir = Path(sys.executable).parent  # the stages' `python` is this environment's (as `make repro` arranges)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run([str(bin_dir / "dvc"), *args], cwd=root, capture_output=True, text=True, env=env)
    if check and proc.returncode != 0:
        raise SystemExit(f"dvc {' '.join(args)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return proc


def wait_for_queue(root: Path, timeout: float = 3600) -> str:
    deadline = time.time() + timeout
    while True:
        status = dvc(root, "queue", "status").stdout
        if not re.search(r"\b(Queued|Running)\b", status):
            return status
        if time.time() > deadline:
            raise SystemExit(f"the queue did not finish in {timeout:.0f} s:\n{status}")
        time.sleep(1)


def queued_batch(root: Path, seeds: list[int], jobs: int) -> float:
    for s in seeds:
        dvc(root, "exp", "run", "--queue", "-n", f"bench-q{jobs}-{s}", "-S", f"analyze.seed={s}")
    t0 = time.perf_counter()
    dvc(root, "queue", "start", "-j", str(jobs))
    status = wait_for_queue(root)
    wall = time.perf_counter() - t0
    if "Failed" in status:
        raise SystemExit(f"a queued experiment failed:\n{status}")
    return wall


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, default=Path("."))
    ap.add_argument("--n", type=int, default=4, help="experiments per batch (and workspace runs)")
    args = ap.parse_args(argv)
    root = args.root.resolve()
    if dvc(root, "status", "--json").stdout.strip() not in ('{"inputs": ["always changed"]}', "{}"):
        raise SystemExit("the pipeline is not up to date: run `make repro` and commit first")
    base_seed = 1000 + int(time.time()) % 1000
    workspace = []
    for i in range(args.n):
        t0 = time.perf_counter()
        dvc(root, "exp", "run", "-n", f"bench-ws-{base_seed + i}", "-S", f"analyze.seed={base_seed + i}")
        workspace.append(time.perf_counter() - t0)
    print("workspace `dvc exp run` (s):", " ".join(f"{w:.1f}" for w in workspace))
    j1 = queued_batch(root, [base_seed + 100 + i for i in range(args.n)], 1)
    j2 = queued_batch(root, [base_seed + 200 + i for i in range(args.n)], 2)
    subprocess.run(["git", "checkout", "--", "params.yaml", "dvc.lock"], cwd=root, capture_output=True)
    dvc(root, "exp", "remove", "--all-commits", check=False)
    ws = statistics.median(workspace)
    print(f"queued, 1 worker: {args.n} experiments in {j1:.1f} s = {j1 / args.n:.1f} s each")
    print(f"queued, 2 workers: {args.n} experiments in {j2:.1f} s = {j2 / args.n:.1f} s each")
    print(f"ratio queued (1 worker) per experiment / workspace median: {j1 / args.n / ws:.2f}  (workspace median {ws:.1f} s)")
    print(f"ratio 1 worker / 2 workers for the batch: {j1 / j2:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
