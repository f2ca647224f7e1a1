"""The empriv source files a module imports, transitively — what a dvc.yaml stage must list under ``deps``.

Every ``import empriv…`` / ``from empriv… import …`` counts, at module level or inside functions (stages import
lazily), and a package's ``__init__.py`` counts wherever one of its modules is imported.

A stage that runs a stage script (``python stages/<x>.py``, or ``python -m empriv.infra.warm stages/<x>.py``: the
warm worker changes no result, so it is no dep) depends on one file, its *code fingerprint* ``.empriv/code/<x>.json``:
the md5 of the script and of every file of the closure of what it imports, written by the ``code`` stage (this
script with ``--fingerprints``), which depends on all of ``src/empriv`` and ``stages/``. An edit re-runs ``code``
(no torch, ~1 s); a fingerprint whose files did not change keeps its bytes, so DVC re-runs exactly the stages whose
code changed, as if each listed its files — but ``dvc.lock`` holds one entry per stage instead of ~40 (DVC re-reads
and rewrites the whole lock file after every stage, so its size is paid once per stage: docs/timing.md). Usage:

    python tools/import_closure.py empriv.pipeline.train      # prints the files, one per line
    python tools/import_closure.py stages/train.py            # the same for a stage script (the script first)
    python tools/import_closure.py --cycles [module]           # import cycles among packages (or modules)
    python tools/import_closure.py --write-dvc                 # rewrites every stage's code deps in dvc.yaml
    python tools/import_closure.py --fingerprints DIR          # writes DIR/<x>.json per stage script
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import sys
import tempfile
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
CODE_DIR = ".empriv/code"  # the code stage's output: one fingerprint per stage script
CODE_STAGE = "code"
STAGES_DIR = "stages"  # one thin script per dvc.yaml stage
WARM_LAUNCHERS = ("empriv.infra.warm",)  # `python -m <launcher> <script or module> …` runs the next word


def module_file(name: str) -> Path | None:
    base = SRC / Path(*name.split("."))
    if (base / "__init__.py").exists():
        return base / "__init__.py"
    if base.with_suffix(".py").exists():
        return base.with_suffix(".py")
    return None


def module_name(path: Path) -> str:
    rel = path.relative_to(SRC).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def direct_imports(name: str) -> frozenset[str]:
    """empriv modules ``name`` imports directly (including its parent packages' ``__init__``)."""
    path = module_file(name)
    if path is None:
        return frozenset()
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_pkg = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                pkg = name.split(".") if is_pkg else name.split(".")[:-1]
                pkg = pkg[: len(pkg) - (node.level - 1)]
                mod = ".".join(pkg + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            targets = [mod] + [f"{mod}.{a.name}" for a in node.names]
        for t in targets:
            if t == "empriv" or t.startswith("empriv."):
                if module_file(t) is not None:
                    found.add(t)
    parents = {".".join(name.split(".")[:i]) for i in range(1, len(name.split(".")))}
    return frozenset((found | parents) - {name})


def closure(name: str) -> set[str]:
    seen: set[str] = set()
    todo = [name]
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        todo.extend(direct_imports(m) - seen)
    return seen


def closure_files(name: str) -> list[str]:
    return sorted(str(module_file(m).relative_to(ROOT)) for m in closure(name))


def unit(name: str) -> str:
    """The layer a module belongs to: its sub-package of empriv (``empriv.data``), or itself (``empriv.config``)."""
    parts = name.split(".")
    return ".".join(parts[:2])


def cycles(level: str = "package") -> list[list[str]]:
    """Import cycles among empriv's packages (``level="package"``: empriv.data → empriv.models → empriv.data counts)
    or modules (``"module"``): strongly connected components of more than one node. Edges to a module's own parent
    package ``__init__`` are not counted."""
    modules = [module_name(p) for p in sorted((SRC / "empriv").rglob("*.py"))]
    edges = {m: {d for d in direct_imports(m) if not m.startswith(d + ".") and not d.startswith(m + ".")} for m in modules}
    if level == "module":
        graph = edges
    else:
        graph: dict[str, set[str]] = {}
        for m, ds in edges.items():
            graph.setdefault(unit(m), set()).update(unit(d) for d in ds if unit(d) != unit(m))
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for m in sorted(graph):
        if m not in index:
            visit(m)
    return out


def stage_entry(cmd: str) -> tuple[str | None, str | None]:
    """(module, script) a stage's command runs: ``python stages/x.py``, ``python -m empriv.infra.warm stages/x.py``
    (the warm worker runs the next word, a script or a module; it changes no result, so it is no dep) or
    ``python -m some.module``."""
    words = " ".join(str(cmd).split()).split(" ")
    if "-m" in words:
        i = words.index("-m") + 1
        if words[i] not in WARM_LAUNCHERS:
            return words[i], None
        i += 1
        return (None, words[i]) if words[i].endswith(".py") else (words[i], None)
    for w in words:
        if w.endswith(".py"):
            return None, w
    return None, None


def script_imports(script: str) -> set[str]:
    tree = ast.parse((ROOT / script).read_text(encoding="utf-8"))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("empriv"):
            found |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("empriv")}
    return {m for m in found if module_file(m) is not None}


def script_closure(script: str) -> set[str]:
    """The empriv modules a script runs: the closure of every empriv module it imports."""
    mods: set[str] = set()
    for r in script_imports(script):
        mods |= closure(r)
    return mods


def stage_code(cmd: str) -> list[str]:
    """The code files a stage's command runs: its script (if any) and the import closure inside src/empriv."""
    module, script = stage_entry(cmd)
    mods = closure(module) if module else (script_closure(script) if script else set())
    files = sorted(str(module_file(m).relative_to(ROOT)) for m in mods)
    return ([script] if script else []) + compact(files)


def is_code_dep(dep: str) -> bool:
    return dep.startswith(("src/empriv", "stages/", CODE_DIR + "/"))


def stage_scripts() -> list[str]:
    """Every stage script (``stages/<x>.py``, as dvc.yaml names it): the ones a fingerprint is written for."""
    return sorted(f"{STAGES_DIR}/{p.name}" for p in (ROOT / STAGES_DIR).glob("*.py"))


def fingerprint_path(script: str) -> str:
    return f"{CODE_DIR}/{Path(script).stem}.json"


def script_files(script: str) -> list[str]:
    """The files a stage script runs: itself and its import closure inside src/empriv (paths from the root)."""
    return [script] + sorted(str(module_file(m).relative_to(ROOT)) for m in script_closure(script))


def fingerprint(script: str) -> dict:
    """The code of ``script``: every file it runs with the md5 of its bytes (the file changes iff one of them does)."""
    return {"script": script,
            "files": {f: hashlib.md5((ROOT / f).read_bytes()).hexdigest() for f in script_files(script)}}


def write_fingerprints(out_dir: Path) -> list[str]:
    """One ``<x>.json`` per stage script in ``out_dir`` (each written atomically); files of scripts that no longer
    exist are removed."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for script in stage_scripts():
        target = out_dir / Path(fingerprint_path(script)).name
        text = json.dumps(fingerprint(script), indent=1, sort_keys=True) + "\n"
        fd, tmp = tempfile.mkstemp(dir=out_dir, prefix=".tmp-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, target)
        written.append(target.name)
    for stale in out_dir.glob("*.json"):
        if stale.name not in written:
            stale.unlink()
    return written


def stage_code_deps(cmd: str) -> list[str]:
    """What a stage lists for its code in dvc.yaml: its fingerprint when it runs a stage script, else its files."""
    _, script = stage_entry(cmd)
    if script in stage_scripts():
        return [fingerprint_path(script)]
    return stage_code(cmd)


def write_dvc(path: Path = ROOT / "dvc.yaml") -> list[str]:
    """Rewrite every stage's code deps from its import closure (other deps, comments and order kept)."""
    from ruamel.yaml import YAML

    yaml = YAML()
    yaml.preserve_quotes = True
    yaml.width = 4096
    yaml.indent(mapping=2, sequence=4, offset=2)
    doc = yaml.load(path.read_text(encoding="utf-8"))
    changed = []
    for name, stage in doc["stages"].items():
        if name == CODE_STAGE:  # its deps are all of src/empriv, stages/ and this script
            continue
        stage = stage.get("do", stage)  # a foreach stage's body
        deps = stage.get("deps")
        if deps is None:
            continue
        code = stage_code_deps(stage["cmd"])
        rest = [d for d in deps if not is_code_dep(str(d))]
        if [str(d) for d in deps] != code + [str(d) for d in rest]:
            changed.append(name)
            deps.clear()
            deps.extend(code + rest)
    if changed:
        with open(path, "w", encoding="utf-8") as fh:
            yaml.dump(doc, fh)
    return changed


def compact(files: list[str]) -> list[str]:
    """``files`` with every package whose modules are all listed replaced by its directory."""
    out = set(files)
    for pkg_init in sorted((SRC / "empriv").rglob("__init__.py"), key=lambda p: -len(p.parts)):
        pkg = pkg_init.parent
        if pkg == SRC / "empriv":
            continue
        members = {str(p.relative_to(ROOT)) for p in pkg.rglob("*.py")}
        if members and members <= out:
            out -= members
            out.add(str(pkg.relative_to(ROOT)))
    return sorted(out)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--fingerprints"] and len(sys.argv) == 3:
        names = write_fingerprints(Path(sys.argv[2]))
        print(f"code fingerprints: {len(names)} stage scripts in {sys.argv[2]}")
        raise SystemExit(0)
    if sys.argv[1:] == ["--write-dvc"]:
        print("updated:", ", ".join(write_dvc()) or "nothing")
        raise SystemExit(0)
    if sys.argv[1:2] == ["--cycles"]:
        for c in cycles(*sys.argv[2:3]):
            print(" ↔ ".join(c))
    else:
        for name in sys.argv[1:]:
            print("\n".join(script_files(name) if name.endswith(".py") else closure_files(name)))
