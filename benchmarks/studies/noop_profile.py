"""Where a no-op `dvc repro` of the default spends its time (issue 30): DVC's parts, each timed alone, and a profile.

    python benchmarks/studies/noop_profile.py --workspace WS [--py-spy PATH/TO/py-spy] [--repeats 5]

WS must be an up-to-date workspace (`dvc status`: up to date); it is only read (the rwlock part writes its JSON
file in a temporary directory). Part 1 times, in this process and as CPU time (medians of ``--repeats``), what a
no-op `dvc repro` does once per stage or once per run, with DVC's own functions and this project's files: parsing
params.yaml once per params dependency, DVC's per-key ``dpath.get`` walks, loading dvc.lock (twice per run:
the index and the reproduction each load the stages), building the index, and the rwlock file rewrites (four
acquire/release pairs per stage). With ``--py-spy`` (``pip install py-spy`` into any venv: it is not a project
dependency), part 2 samples one real `dvc repro` (main thread only, 200 Hz, non-blocking) and sorts the samples
into the same parts; the shares include waits (the rwlock rewrites wait for the disk on a busy machine).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# A stack goes to the first part whose marker it contains (markers are py-spy's "function (file:line)" frames).
PARTS = [
    ("DVC's rwlock (acquire/release: .dvc/tmp/rwlock rewritten)", ["dvc/rwlock.py"]),
    ("params deps: per-key dpath walks", ["dpath/"]),
    ("params deps: parse params.yaml (once per stage)", ["read_param_file"]),
    ("params deps: compare with dvc.lock", ["dvc/dependency/param.py"]),
    ("stage status: other deps (stat, state db, directory trees)", ["_changed_deps", "changed_deps"]),
    ("stage status: outputs", ["changed_outs"]),
    ("stage status: definition against dvc.lock", ["changed_stage", "stage/__init__.py"]),
    ("dvc.lock load + schema", ["Lockfile", "lockfile"]),
    ("dvc.yaml load + matrix resolution", ["dvc/parsing", "ProjectFile", "dvcfile.py", "stage/loader.py"]),
    ("index and graph (the rest)", ["repo/index.py", "repo/graph.py", "collect_stages", "networkx"]),
    ("repo open, config, git", ["Repo.__init__", "dvc/config.py", "scmrepo"]),
    ("imports and start-up", ["_find_and_load", "<module> (dvc:"]),
]


def _cpu(fn, repeats: int, n: int = 1) -> float:
    times = []
    for _ in range(repeats):
        start = time.process_time()
        for _ in range(n):
            fn()
        times.append(time.process_time() - start)
    return statistics.median(times)


def parts_alone(ws: Path, repeats: int) -> list[tuple[str, float, str]]:
    """(part, median CPU seconds, what was timed) for the per-run and per-stage work of a no-op `dvc repro`."""
    import dpath
    from dvc.repo import Repo
    from dvc.rwlock import _edit_rwlock
    from dvc.schema import COMPILED_LOCKFILE_SCHEMA
    from dvc.utils.serialize import load_json, load_yaml
    from dvc.utils.strictyaml import load as strict_load

    os.chdir(ws)
    repo = Repo(".")
    stages = list(repo.index.stages)
    params_deps = [d for s in stages for d in s.deps if hasattr(d, "params") and hasattr(d, "read_params")]
    keys = [list(d.params) for d in params_deps]
    n_files = len(params_deps)
    params = load_yaml("params.yaml")
    tmp = Path(tempfile.mkdtemp(prefix="noop-profile-"))
    (tmp / "params.json").write_text(json.dumps(params))

    def walks(doc):
        for ks in keys:
            for k in ks:
                dpath.get(doc, k, separator=".")

    def rwlock_pairs(n):
        for i in range(n):
            with _edit_rwlock(str(tmp), repo.fs, False) as lock:
                lock["read"][f"p{i % 3}"] = [{"pid": 1, "cmd": "dvc repro"}]
            with _edit_rwlock(str(tmp), repo.fs, False) as lock:
                lock["read"].pop(f"p{i % 3}", None)

    n_pairs = 4 * len(stages)
    start = time.perf_counter()
    rw_cpu = _cpu(lambda: rwlock_pairs(n_pairs), repeats)
    rw_wall = (time.perf_counter() - start) / repeats
    out = [
        ("params.yaml parsed once per params dependency", _cpu(lambda: load_yaml("params.yaml"), repeats, n_files),
         f"{n_files} x DVC's load_yaml of params.yaml ({os.path.getsize('params.yaml'):,} B)"),
        ("  the same document as JSON (for comparison)", _cpu(lambda: load_json(str(tmp / "params.json")), repeats,
                                                             n_files), f"{n_files} x DVC's load_json"),
        ("per-key dpath walks", _cpu(lambda: walks(params), repeats),
         f"{sum(map(len, keys))} dpath.get over the whole params document"),
        ("dvc.lock loaded and schema-checked, twice", _cpu(
            lambda: strict_load("dvc.lock", COMPILED_LOCKFILE_SCHEMA, fs=repo.fs), repeats, 2),
         f"dvc.lock {os.path.getsize('dvc.lock'):,} B"),
        ("index of a fresh Repo (dvc.yaml + matrices + dvc.lock once)",
         _cpu(lambda: list(Repo(".").index.stages), repeats), f"{len(stages)} stages"),
        ("rwlock rewrites", rw_cpu, f"{n_pairs} acquire/release pairs ({2 * n_pairs} rewrites); "
                                    f"wall {rw_wall:.2f} s here (the disk's share)"),
    ]
    return out


def py_spy_parts(ws: Path, py_spy: str) -> tuple[list[tuple[str, float]], int]:
    raw = Path(tempfile.mkdtemp(prefix="noop-spy-")) / "repro.txt"
    dvc = str(Path(sys.executable).parent / "dvc")
    subprocess.run([py_spy, "record", "--nonblocking", "-r", "200", "-f", "raw", "-o", str(raw), "--", dvc, "repro"],
                   cwd=ws, check=True, capture_output=True)
    totals: collections.Counter = collections.Counter()
    n = 0
    for line in raw.read_text().splitlines():
        if not line.startswith(("<module> (dvc:", "_find_and_load")):
            continue  # tqdm's monitor thread and the like
        stack, _, count = line.rpartition(" ")
        n += int(count)
        part = next((name for name, marks in PARTS if any(m in stack for m in marks)), "other")
        totals[part] += int(count)
    return [(name, c / n) for name, c in totals.most_common()], n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workspace", type=Path, required=True)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--py-spy", default=None, help="a py-spy executable: also sample one real `dvc repro`")
    args = ap.parse_args(argv)
    ws = args.workspace.resolve()
    import dvc

    print(f"dvc {dvc.__version__}; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}\n")
    print("Part 1: each part alone, CPU seconds (median of %d)" % args.repeats)
    for name, seconds, what in parts_alone(ws, args.repeats):
        print(f"  {name:<62} {seconds:6.3f} s   {what}")
    if args.py_spy:
        shares, n = py_spy_parts(ws, args.py_spy)
        print(f"\nPart 2: one `dvc repro` sampled by py-spy ({n} samples at 200 Hz, main thread)")
        for name, share in shares:
            print(f"  {share * 100:5.1f} %  {name}")
    print(f"\nload average at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
