"""What the project controls in a no-op `dvc repro`: the same workspace with one change each, timed side by side.

    python benchmarks/studies/noop_variants.py --workspace WS [--variants as-is,params-file-dep,...] [--repeats 5]

WS must be an up-to-date workspace of the default pipeline (`dvc status`: up to date) with the DVC it is measured
with on PATH (its `.venv`). Each variant is a copy of WS in a temporary directory (its own git repository of WS's
tracked files, its own copy of WS's DVC cache: nothing is written into WS or its cache) with one change applied:
to dvc.yaml (then `dvc commit -f` there records the new stage definitions in the copy's dvc.lock without running
anything), to DVC's config, or to the command. Every copy must then be up to date, or the script stops. Rounds are
interleaved (every variant once per round, then the next round), with a project of as many *trivial* stages as the
default has (one file dep, one output and one key of the same params.yaml each: DVC's own floor) as the peer;
the script prints, per variant, the median wall and CPU time (user + system) of `dvc repro`, and both as ratios to
`as-is` and to the floor. CPU time is what an idle machine's wall time approaches (a no-op waits for nothing but
the disk under DVC's rwlock rewrites); the shared machine's load inflates wall times far more.

The variants (stage-definition changes apply to every stage that lists params, the matrix items included; per-item
caching is unchanged by all of them: each item stays its own stage):

- ``as-is``: the workspace unchanged.
- ``params-json``: each stage reads its params keys from ``.empriv/params.json`` (params.yaml as JSON, as the
  validate stage could write it) instead of params.yaml: DVC parses JSON with the C json module.
- ``params-stage-json``: the same keys from one small JSON file per stage definition, holding only those keys
  (``.empriv/params/<stage>.json``): also makes DVC's per-key walks (``dpath.get`` walks the whole document) short.
- ``params-file-dep``: no ``params:`` section; the stage depends on its ``.empriv/params/<stage>.json`` as a file
  (as on its code fingerprint): no parse and no walk, and no params values in dvc.lock (one md5 instead).
- ``no-params``: no ``params:`` section and nothing in its place (a bound, not a proposal: the stages would no
  longer re-run when their params change).
- ``no-params-ok``: the matrix items (``train``, ``score``, ``audit``) without their ``.empriv/params.ok`` dep (they
  depend on validate's outputs through their other deps already).
- ``file-dep+no-params-ok``: both of the above.
- ``no-scm``: ``core.no_scm = true`` in the copy's config.local (DVC does not open git).
- ``no-run-cache``: ``dvc repro --no-run-cache``.
- ``rwlock-tmpfs``: ``.dvc/tmp/rwlock`` and its guard file as symlinks into /dev/shm (not a project change: the
  share of the disk in DVC's rwlock rewrites).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MATRIX_STAGES = ("train", "score", "audit")
VARIANTS = ("as-is", "params-json", "params-stage-json", "params-file-dep", "no-params", "no-params-ok",
            "file-dep+no-params-ok", "no-scm", "no-run-cache", "rwlock-tmpfs")
DEFAULT_VARIANTS = ("as-is", "params-json", "params-stage-json", "params-file-dep", "no-params",
                    "file-dep+no-params-ok", "no-scm", "no-run-cache")
_SKIP_ROOT = {".venv", ".git", "wandb", ".studies"}
_SKIP_IN = {".dvc": {"tmp", "cache", "config.local"}, ".empriv": {"warm", "sweep"}}


def _env(venv_bin: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{venv_bin}:{env['PATH']}"
    env.pop("PYTHONPATH", None)
    env.setdefault("GIT_AUTHOR_NAME", "noop-bench")
    env.setdefault("GIT_AUTHOR_EMAIL", "noop-bench@localhost")
    env["GIT_COMMITTER_NAME"], env["GIT_COMMITTER_EMAIL"] = env["GIT_AUTHOR_NAME"], env["GIT_AUTHOR_EMAIL"]
    return env


def _sh(args: list[str], cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(args)} in {cwd} failed ({done.returncode}):\n{(done.stdout + done.stderr)[-2000:]}")
    return done.stdout + done.stderr


def _ignorer(root: Path):
    def ignore(src: str, names: list[str]) -> set[str]:
        rel = os.path.relpath(src, root)
        skip = _SKIP_ROOT if rel == "." else _SKIP_IN.get(rel, set())
        return skip & set(names)

    return ignore


def _copy(ws: Path, dest: Path, cache: Path, env: dict[str, str]) -> None:
    """``dest``: WS's files (no venv, no git, no DVC cache or tmp) as a git repository of WS's tracked files, whose
    DVC cache is ``cache``."""
    shutil.copytree(ws, dest, symlinks=True, ignore=_ignorer(ws))
    tracked = [p for p in _sh(["git", "ls-files", "-z"], ws, env).split("\0") if p and (dest / p).exists()]
    _sh(["git", "init", "-q"], dest, env)
    for i in range(0, len(tracked), 500):
        _sh(["git", "add", "-f", "--", *tracked[i:i + 500]], dest, env)
    _sh(["git", "commit", "-q", "-m", "copy"], dest, env)
    (dest / ".dvc" / "config.local").write_text(f"[cache]\n    dir = {cache}\n")


def _keys_doc(params: dict, keys: list[str]) -> dict:
    """The nested document of ``keys`` (dotted paths) of ``params``: what a stage reads, and nothing else."""
    out: dict = {}
    for key in keys:
        parts = key.split(".")
        node, target = params, out
        for part in parts[:-1]:
            node = node[part]
            target = target.setdefault(part, {})
        target[parts[-1]] = node[parts[-1]]
    return out


def _edit_stages(root: Path, variant: str) -> None:
    import yaml

    dvc_yaml = yaml.safe_load((root / "dvc.yaml").read_text())
    params = yaml.safe_load((root / "params.yaml").read_text())
    gen = root / ".empriv" / "params"
    gen.mkdir(parents=True, exist_ok=True)
    if variant == "params-json":
        (root / ".empriv" / "params.json").write_text(json.dumps(params, sort_keys=True))
    for name, stage in dvc_yaml["stages"].items():
        keys = [k for k in stage.get("params", []) if isinstance(k, str)]
        others = [k for k in stage.get("params", []) if not isinstance(k, str)]
        if keys:
            doc_path = f".empriv/params/{name}.json"
            if variant != "params-json":
                (root / doc_path).write_text(json.dumps(_keys_doc(params, keys), sort_keys=True))
            if variant == "params-json":
                stage["params"] = others + [{".empriv/params.json": keys}]
            elif variant == "params-stage-json":
                stage["params"] = others + [{doc_path: keys}]
            elif variant in ("params-file-dep", "file-dep+no-params-ok"):
                stage["params"] = others
                stage["deps"] = [*stage.get("deps", []), doc_path]
            elif variant == "no-params":
                stage["params"] = others
            if not stage["params"]:
                del stage["params"]
        if variant in ("no-params-ok", "file-dep+no-params-ok") and name in MATRIX_STAGES:
            stage["deps"] = [d for d in stage["deps"] if d != ".empriv/params.ok"]
    (root / "dvc.yaml").write_text(yaml.safe_dump(dvc_yaml, sort_keys=False, width=1000))


def _prepare_variant(ws: Path, root: Path, variant: str, cache: Path, env: dict[str, str]) -> list[str]:
    """Copy, apply ``variant``, bring the copy up to date without running a stage; the `dvc repro` command to time."""
    _copy(ws, root, cache, env)
    command = ["dvc", "repro"]
    if variant in ("params-json", "params-stage-json", "params-file-dep", "no-params", "no-params-ok",
                   "file-dep+no-params-ok"):
        _edit_stages(root, variant)
        _sh(["dvc", "commit", "-f", "-q"], root, env)
    elif variant == "no-scm":
        with open(root / ".dvc" / "config.local", "a") as f:
            f.write("[core]\n    no_scm = true\n")
    elif variant == "no-run-cache":
        command.append("--no-run-cache")
    elif variant == "rwlock-tmpfs":
        shm = Path(tempfile.mkdtemp(prefix="noop-rwlock-", dir="/dev/shm"))
        (root / ".dvc" / "tmp").mkdir(exist_ok=True)
        for name in ("rwlock", "rwlock.lock"):
            (root / ".dvc" / "tmp" / name).symlink_to(shm / name)
    elif variant != "as-is":
        sys.exit(f"unknown variant {variant!r}; known: {', '.join(VARIANTS)}")
    status = _sh(["dvc", "status"], root, env)
    if "up to date" not in status:
        sys.exit(f"variant {variant}: the copy is not up to date after the change:\n{status[-2000:]}")
    return command


def _floor(root: Path, n: int, params_yaml: Path, env: dict[str, str]) -> Path:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/noop_repro.py
    from noop_repro import _floor_project

    saved = os.environ["PATH"]
    os.environ["PATH"] = env["PATH"]
    try:
        return _floor_project(root, n, params_yaml)
    finally:
        os.environ["PATH"] = saved


def _time(command: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = done.stdout + done.stderr
    if done.returncode != 0 or "Running stage" in out:
        sys.exit(f"{' '.join(command)} in {cwd} was not a no-op ({done.returncode}):\n{out[-2000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workspace", type=Path, required=True, help="an up-to-date workspace of the default")
    ap.add_argument("--variants", default=",".join(DEFAULT_VARIANTS), help=f"comma-separated, of: {', '.join(VARIANTS)}")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--tmp", type=Path, default=None, help="where the copies go (default: a new temporary directory)")
    ap.add_argument("--keep", action="store_true", help="keep the copies")
    ap.add_argument("--reuse", type=Path, default=None,
                    help="time the copies kept by an earlier --keep run in this directory (no new copies)")
    args = ap.parse_args(argv)
    ws = args.workspace.resolve()
    venv_bin = ws / ".venv" / "bin"
    env = _env(venv_bin)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    if args.tmp is not None and not args.reuse:
        args.tmp.mkdir(parents=True, exist_ok=True)
    tmp = args.reuse.resolve() if args.reuse else Path(tempfile.mkdtemp(prefix="noop-variants-", dir=args.tmp))
    try:
        cache = tmp / "cache"
        if not args.reuse:
            cache_src = Path(_sh(["dvc", "cache", "dir"], ws, env).strip().splitlines()[-1])
            shutil.copytree(cache_src, cache, symlinks=True)
        version = _sh(["dvc", "--version"], ws, env).strip()
        plan: list[tuple[str, list[str], Path]] = []
        for v in variants:
            root = tmp / v
            if args.reuse:
                command = ["dvc", "repro", *(["--no-run-cache"] if v == "no-run-cache" else [])]
                if "up to date" not in _sh(["dvc", "status"], root, env):
                    sys.exit(f"{root} is not up to date")
            else:
                command = _prepare_variant(ws, root, v, cache, env)
            plan.append((v, command, root))
            print(f"prepared {v}: dvc.yaml {(root / 'dvc.yaml').stat().st_size:,} B, "
                  f"dvc.lock {(root / 'dvc.lock').stat().st_size:,} B", flush=True)
        import yaml

        lock = yaml.load((ws / "dvc.lock").read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        n_stages = len(lock["stages"])
        floor = tmp / "floor" if args.reuse else _floor(tmp / "floor", n_stages, ws / "params.yaml", env)
        plan.append((f"floor: {n_stages} trivial stages", ["dvc", "repro"], floor))
        times: dict[str, list[tuple[float, float]]] = {label: [] for label, _, _ in plan}
        print(f"{version}; {len(plan)} projects, {args.repeats} rounds; load average {os.getloadavg()[0]:.2f}",
              flush=True)
        for r in range(args.repeats):
            for label, command, root in plan:
                times[label].append(_time(command, root, env))
            print(f"round {r + 1}/{args.repeats}, load average {os.getloadavg()[0]:.2f}", flush=True)
        med = {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v)) for k, v in times.items()}
        base = med.get("as-is")
        fl = med[plan[-1][0]]
        width = max(map(len, med))
        print(f"\n{'variant':<{width}}  {'wall':>6}  {'CPU':>6}  {'CPU / as-is':>11}  {'CPU / floor':>11}")
        for label, (w, c) in med.items():
            rel = f"{c / base[1]:.2f}" if base else "-"
            print(f"{label:<{width}}  {w:>5.2f}s  {c:>5.2f}s  {rel:>11}  {c / fl[1]:>11.2f}")
        print(f"load average at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    finally:
        if args.keep or args.reuse:
            print(f"copies kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
