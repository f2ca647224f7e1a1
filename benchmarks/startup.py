"""Process start-up of a stage: `python stages/<stage>.py` against `python -m empriv.infra.warm stages/<stage>.py`
(issue 18).

    python benchmarks/startup.py [--repeats 7] [--workdir DIR] [--keep] [--out FILE]

Builds a scratch project (the repository's params.yaml with a tiny corpus, base and one-point cube; prepare,
tokenizer and base run once), starts a warm server there (its cold start is reported on its own), then times, in
one run, interleaved (plain first in even rounds, warm first in odd ones), `--repeats` invocations of each of:

* ``startup``: a script that only imports what a stage process imports before its work (the interpreter plus
  :data:`empriv.infra.warm_key.PRELOAD`, the libraries the train/score/audit stages use) — the start-up itself;
* ``validate``: ``stages/validate_params.py`` (a light stage: params and pydantic, no torch);
* ``train``: ``stages/train.py`` on the tiny cube point (a real matrix-item command, 3 DP steps).

It prints medians, the plain/warm ratio, the start-up share of a train process (startup / train, plain and warm),
and what the saving per process comes to over the default cube's matrix items (train@, score@, audit@ of the
repository's params.yaml) next to the last measured cold `make repro`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
WARM = [PYTHON, "-m", "empriv.infra.warm"]
LAST_COLD_REPRO_S = 5506  # docs/timing.md: the default's last cold make repro, 91.8 min wall on a shared machine
GOAL_SHARE = 0.10  # start-up at most this share of a train process run through the warm worker

TINY_OVERRIDES = {
    "runtime": {"wandb_mode": "offline"},
    "data": {"n_train": 300, "n_validation": 20, "n_test": 40, "n_public": 300, "seed": 3},
    "tokenizer": {"vocab_size": 512},
    "base": {"n_layer": 1, "n_embd": 32, "n_head": 2, "seq_len": 64, "pretrain_steps": 10, "pretrain_batch_size": 16},
    "train": {"micro_batch_size": 16},
}
POINT = {"epsilon": 8, "batch_size": 32, "steps": 3, "learning_rate": 0.01, "seed": 0}

STARTUP_PROBE = """import importlib
from empriv.infra.warm_key import PRELOAD
for name in PRELOAD:
    try:
        importlib.import_module(name)
    except ImportError:
        pass
"""


def scratch_project(work: Path, threads: int) -> list[str]:
    """Write the tiny params into ``work``; returns the train stage's arguments for its one cube point."""
    import yaml

    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    for section, values in TINY_OVERRIDES.items():
        params.setdefault(section, {}).update(values)
    params["runtime"]["threads"] = threads
    cube = params["cube"]
    cube.update({k: [v] for k, v in POINT.items()})
    extra = []
    for axis in ("unit", "method"):
        if axis in cube:
            cube[axis] = cube[axis][:1]
            extra += [f"--{axis}", str(cube[axis][0])]
    work.mkdir(parents=True, exist_ok=True)
    (work / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    (work / "startup_probe.py").write_text(STARTUP_PROBE)
    name = "eps{epsilon}-b{batch_size}-T{steps}-lr{learning_rate}-s{seed}".format(**POINT)
    return ["--name", name, "--epsilon", str(POINT["epsilon"]), "--batch-size", str(POINT["batch_size"]),
            "--steps", str(POINT["steps"]), "--learning-rate", str(POINT["learning_rate"]),
            "--seed", str(POINT["seed"]), *extra]


def timed(cmd: list[str], cwd: Path, env: dict) -> float:
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return elapsed


def matrix_items() -> int | None:
    """train@ + score@ items of the cube and audit@ items of the audit cube in the repository's params.yaml."""
    try:
        sys.path.insert(0, str(ROOT / "src"))
        from empriv.config import load_params

        params = load_params(ROOT / "params.yaml")
        return 2 * len(params.runs()) + len(params.audit_runs())
    except Exception:  # config under change: say so rather than guess
        return None


def load_average() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2, help="runtime.threads of the scratch project (default: 2, "
                    "as the default params)")
    ap.add_argument("--workdir", type=Path, default=None, help="scratch directory (default: a new temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    ap.add_argument("--out", type=Path, default=None, help="also write the report to this file")
    args = ap.parse_args()

    work = args.workdir or Path(tempfile.mkdtemp(prefix="empriv-startup-"))
    train_args = scratch_project(work, args.threads)
    env = {k: v for k, v in os.environ.items() if not k.startswith("EMPRIV_WARM")}
    env.update({"WANDB_MODE": "offline", "EMPRIV_WARM_DIR": str(work / "warm"), "EMPRIV_WARM_IDLE": "600"})
    lines = [f"benchmarks/startup.py: {args.repeats} interleaved repeats, threads {args.threads}, "
             f"{os.cpu_count()} CPUs, load average at start {load_average()}"]
    try:
        setup = {}
        for stage in ("prepare", "tokenizer", "base"):
            setup[stage] = timed([PYTHON, str(ROOT / f"stages/{stage}.py")], work, env)
        lines.append("setup (plain, once): " + ", ".join(f"{k} {v:.1f} s" for k, v in setup.items()))

        client = [timed([*WARM, "--socket"], work, env) for _ in range(5)]
        bare = [timed([PYTHON, "-c", "pass"], work, env) for _ in range(5)]
        cold = timed([*WARM, "startup_probe.py"], work, env)
        lines.append(f"warm client alone (python -m empriv.infra.warm --socket): median "
                     f"{statistics.median(client):.3f} s; python -c pass {statistics.median(bare):.3f} s")
        lines.append(f"first warm call (starts the server, which pre-imports): {cold:.2f} s")

        commands = {"startup": ["startup_probe.py"], "validate": [str(ROOT / "stages/validate_params.py")],
                    "train": [str(ROOT / "stages/train.py"), *train_args]}
        times = {name: {"plain": [], "warm": []} for name in commands}
        for r in range(args.repeats):
            for name, cmd in commands.items():
                for mode in (("plain", "warm") if r % 2 == 0 else ("warm", "plain")):
                    prefix = [PYTHON] if mode == "plain" else WARM
                    times[name][mode].append(timed(prefix + cmd, work, env))
            print(f"round {r + 1}/{args.repeats}: " + ", ".join(
                f"{n} {t['plain'][-1]:.2f}/{t['warm'][-1]:.2f} s" for n, t in times.items()), file=sys.stderr)

        med = {n: {m: statistics.median(v) for m, v in t.items()} for n, t in times.items()}
        lines.append("")
        lines.append(f"{'command':<10} {'plain (median)':>15} {'warm (median)':>14} {'plain/warm':>11} {'saved':>8}"
                     f"   all plain | all warm (s)")
        for name, m in med.items():
            lines.append(f"{name:<10} {m['plain']:>13.2f} s {m['warm']:>12.2f} s {m['plain'] / m['warm']:>10.2f}x "
                         f"{m['plain'] - m['warm']:>6.2f} s   "
                         f"{' '.join(f'{x:.2f}' for x in times[name]['plain'])} | "
                         f"{' '.join(f'{x:.2f}' for x in times[name]['warm'])}")
        share_plain = med["startup"]["plain"] / med["train"]["plain"]
        share_warm = med["startup"]["warm"] / med["train"]["warm"]
        lines.append("")
        lines.append(f"start-up share of a tiny train process: plain {share_plain:.0%} "
                     f"({med['startup']['plain']:.2f} of {med['train']['plain']:.2f} s), "
                     f"warm {share_warm:.0%} ({med['startup']['warm']:.2f} of {med['train']['warm']:.2f} s)")
        saved = med["startup"]["plain"] - med["startup"]["warm"]
        items = matrix_items()
        if items:
            total = items * saved
            lines.append(f"default cube: {items} matrix items (train@ + score@ + audit@) x {saved:.2f} s saved = "
                         f"{total:.0f} s, {total / LAST_COLD_REPRO_S:.0%} of the last cold make repro "
                         f"({LAST_COLD_REPRO_S} s, docs/timing.md), at this machine load")
        else:
            lines.append(f"saved per stage process: {saved:.2f} s (the repository's params could not be loaded to "
                         "count the matrix items)")
        lines.append(f"load average at end {load_average()}")
        lines.append(f"goal (start-up < {GOAL_SHARE:.0%} of a train process, warm worker): "
                     f"{'met' if share_warm < GOAL_SHARE else 'NOT met'} (warm {share_warm:.0%}, plain {share_plain:.0%}; "
                     f"start-up plain / warm {med['startup']['plain'] / med['startup']['warm']:.1f}x)")
    finally:
        sock = work / "warm"
        for s in sock.glob("*.sock"):  # stop the server this run started: remove its socket
            s.unlink(missing_ok=True)
        if not args.keep and args.workdir is None:
            time.sleep(1.5)  # let the server notice and exit before its directory goes
            shutil.rmtree(work, ignore_errors=True)
    report = "\n".join(lines)
    print(report)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(report + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
