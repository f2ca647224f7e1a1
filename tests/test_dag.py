"""dvc.yaml against the code: each stage depends on every file it imports, on its raw inputs, and on params keys
that exist; the stage layer alone knows paths; imports point one way (no cycles between packages)."""

from __future__ import annotations

import ast
import hashlib
import json
import re
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import import_closure as ic  # noqa: E402

# The stage layer and the project-level tools: the only modules that may know file locations.
STAGE_LAYER = ("empriv.pipeline", "empriv.paths", "empriv.stage", "empriv.cli", "empriv.study", "empriv.experiments")
CLI = ".cli"  # command-line tools (empriv.analysis.cli, …) are user-facing: their defaults name the files
PIPELINE_PATH = re.compile(r"""["'](data|models|metrics|plots|reports)/[\w./-]*["']""")


@pytest.fixture(scope="module")
def dvc() -> dict:
    from ruamel.yaml import YAML

    return YAML(typ="safe", pure=True).load((ROOT / "dvc.yaml").read_text())


def covered(path: str, deps: list[str]) -> bool:
    return any(path == d or path.startswith(d.rstrip("/") + "/") for d in deps)


def test_every_stage_depends_on_all_the_code_it_imports(dvc):
    """A stage that runs a stage script depends on its code fingerprint, whose files are the script and its import
    closure; the code stage that writes the fingerprints depends on all of src/empriv and stages/; any other stage
    lists its files."""
    missing = {}
    stages = dvc["stages"]
    assert stages[ic.CODE_STAGE]["deps"] == ["tools/import_closure.py", "src/empriv", ic.STAGES_DIR]
    assert stages[ic.CODE_STAGE]["outs"] == [ic.CODE_DIR]
    for name, stage in stages.items():
        if name == ic.CODE_STAGE:
            continue
        stage = stage.get("do", stage)  # a foreach stage's body
        deps = [str(d) for d in stage.get("deps", [])]
        _, script = ic.stage_entry(stage["cmd"])
        code = ic.stage_code(stage["cmd"])
        assert code, f"stage {name}: cannot tell which code {stage['cmd']!r} runs"
        if script in ic.stage_scripts():
            fp = ic.fingerprint_path(script)
            assert fp in deps, f"stage {name}: no dep on its code fingerprint {fp}"
            assert not [d for d in deps if d.startswith(("src/", "stages/"))], \
                f"stage {name}: code files beside its fingerprint"
            files = set(ic.fingerprint(script)["files"])
            assert files == set(ic.script_files(script)) and script in files
            imported = {str(ic.module_file(m).relative_to(ROOT)) for m in ic.script_imports(script)}
            assert imported and imported <= files, f"stage {name}: {script}'s imports not in its fingerprint"
            continue
        lost = [f for f in code if not covered(f, deps)]
        if lost:
            missing[name] = lost
    assert not missing, f"deps missing from dvc.yaml (run `python tools/import_closure.py --write-dvc`): {missing}"


def test_a_fingerprint_changes_exactly_when_a_file_of_its_closure_does(tmp_path):
    """The code stage's command in a copy of tools/, src/empriv and stages/: same code, same bytes; an edit changes
    exactly the fingerprints whose closure holds the file (a stage script: its own)."""
    import subprocess

    copy = tmp_path / "project"
    shutil.copytree(ROOT / "src/empriv", copy / "src/empriv", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "stages", copy / "stages", ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "tools").mkdir()
    shutil.copy2(ROOT / "tools/import_closure.py", copy / "tools/import_closure.py")
    out = copy / ".empriv/code"

    def run() -> dict[str, bytes]:
        proc = subprocess.run([sys.executable, "tools/import_closure.py", "--fingerprints", ".empriv/code"],
                              cwd=copy, capture_output=True, text=True, check=True)
        assert proc.stdout.startswith("code fingerprints: ")
        return {p.name: p.read_bytes() for p in sorted(out.glob("*.json"))}

    before = run()
    assert {"train.json", "score.json", "validate_params.json"} <= set(before)
    assert set(before) == {ic.fingerprint_path(s).rsplit("/", 1)[1] for s in ic.stage_scripts()}
    train = json.loads(before["train.json"])
    assert train["script"] == "stages/train.py"
    assert set(train["files"]) == {"stages/train.py", *ic.closure_files("empriv.pipeline.train")}
    assert train["files"]["src/empriv/train/dp.py"] == hashlib.md5((ROOT / "src/empriv/train/dp.py").read_bytes()).hexdigest()
    (out / "gone.json").write_text("{}")  # a script that no longer exists loses its fingerprint
    assert run() == before  # same code, same bytes: nothing downstream re-runs
    target = "src/empriv/score/vmr.py"
    users = {ic.fingerprint_path(s).rsplit("/", 1)[1] for s in ic.stage_scripts() if target in ic.script_files(s)}
    assert "score.json" in users and "train.json" not in users and "validate_params.json" not in users
    with open(copy / target, "a") as fh:
        fh.write("\n# an edit\n")
    after = run()
    assert {n for n in before if after[n] != before[n]} == users
    with open(copy / "stages/train.py", "a") as fh:  # a stage script is code of its stage alone
        fh.write("\n# an edit\n")
    assert {n for n, b in run().items() if b != after[n]} == {"train.json"}


def test_the_closure_follows_lazy_imports_and_package_inits(tmp_path):
    files = ic.closure_files("empriv.pipeline.train")
    # train imports the fine-tuning loop inside a function; that module imports the DP loop inside a function
    assert "src/empriv/train/finetune.py" in files and "src/empriv/train/dp.py" in files
    assert "src/empriv/train/__init__.py" in files and "src/empriv/paths.py" in files
    assert "src/empriv/analysis/report.py" not in files and "src/empriv/analysis/figures.py" not in files


def test_raw_inputs_are_dependencies_through_one_input_stage_each(dvc):
    """One input@<key> stage per entry of params' inputs (none by default: nothing always re-runs), its raw file a
    DVC dep; the dependents depend on the git-tracked directory the stage writes into, which exists when empty."""
    stages = dvc["stages"]
    assert not any(stage.get("always_changed") for stage in stages.values())
    body = stages["input"]["do"]
    assert stages["input"]["foreach"] == "${inputs}" and "${item}" in body["deps"]
    # persist: a file failing its content check (empriv.pipeline.input_checks) keeps the last good fingerprint
    assert body["outs"] == [{"data/inputs/${key}/fingerprint.json": {"persist": True}}]
    assert "data/inputs/corpus" in stages["prepare"]["deps"] and "data/inputs/public" in stages["prepare"]["deps"]
    assert "data/inputs/overrides" in stages["secrets"]["deps"]
    assert "data/inputs/base" in stages["base"]["deps"] and "data/inputs/base" in stages["tokenizer"]["deps"]
    from empriv.config import RAW_INPUTS

    import subprocess

    tracked = set(subprocess.run(["git", "ls-files", "data/inputs"], cwd=ROOT, capture_output=True, text=True,
                                 check=True).stdout.split())
    assert tracked == {f"data/inputs/{key}/.keep" for key in RAW_INPUTS}


def test_params_are_listed_by_keys_that_exist(dvc):
    from empriv.config import Params

    def exists(key: str) -> bool:
        model = Params
        for part in key.split("."):
            fields = getattr(model, "model_fields", None)
            if fields is None or part not in fields:
                return False
            model = fields[part].annotation
        return True

    bad = {name: [k for k in stage.get("params", []) if isinstance(k, str) and not exists(k)]
           for name, stage in dvc["stages"].items()}
    assert not any(bad.values()), f"params keys that config.Params does not have: {bad}"
    # runtime settings that change results are dependencies of every stage that trains or scores
    for name in ("train", "score", "audit"):
        assert {"runtime.threads", "runtime.device"} <= set(dvc["stages"][name]["params"]), name
    # a score key must not retrain: train and audit do not depend on the score section
    assert not any(k == "score" or str(k).startswith("score.") for k in dvc["stages"]["train"]["params"])


def test_no_import_cycles_between_packages():
    assert ic.cycles("package") == []


# ----------------------------------------------------------------------------- module-level import cycles


def module_import_graph(src: Path, top: str) -> dict[str, set[str]]:
    """Module → the modules of package ``top`` (the directory ``src/top``) it imports, read from the AST.

    - Every ``import`` counts, at module level or inside a function (or under ``if TYPE_CHECKING``): a lazy import
      does not fail at import time, but the two modules still need each other (neither can be read, tested, moved or
      fingerprinted alone), and the code fingerprints follow lazy imports too.
    - ``import a.b.c`` and ``from a.b.c import x`` are edges to ``a.b.c`` and to the packages ``a.b``, ``a`` whose
      ``__init__`` runs first — except the packages that contain the importing module: those are being imported
      already (a module's implicit edge to its own parent package is no dependency).
    - ``from p import n`` where ``p.n`` is a submodule is an edge to ``p.n``; reading any other name from ``p`` is an
      edge to ``p``'s ``__init__``, even from inside ``p`` (a submodule that imports its package's face while the
      ``__init__`` imports that submodule is a cycle).
    - A package's ``__init__`` importing its submodules counts like any module (``p`` → ``p.sub``).
    """
    root = src / top
    files = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        files[".".join(parts)] = path
    modules = set(files)

    def packages(name: str) -> list[str]:  # a.b.c -> [a, a.b]
        parts = name.split(".")
        return [".".join(parts[:i]) for i in range(1, len(parts))]

    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        is_pkg = path.name == "__init__.py"
        own = set(packages(name)) | ({name} if is_pkg else set())  # packages this module is inside of
        edges: set[str] = set()

        def target(mod: str) -> None:
            for m in [*packages(mod), mod]:
                if m in modules and m not in own:
                    edges.add(m)

        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    target(alias.name)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = name.split(".") if is_pkg else name.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    mod = ".".join(base + ([node.module] if node.module else []))
                else:
                    mod = node.module or ""
                target(mod)
                for alias in node.names:
                    sub = f"{mod}.{alias.name}"
                    if sub in modules:
                        edges.add(sub)
                    elif mod in modules:  # a name defined by the package's __init__ (or the module itself)
                        edges.add(mod)
        edges.discard(name)
        graph[name] = edges
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan, iterative), as the path
    ``[m0, m1, …, m0]`` of imports that closes it, the component's smallest module first."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = set()
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.add(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    components.append(comp)
    cycles = []
    for comp in components:  # the shortest path back to the start inside the component (breadth first)
        start = min(comp)
        previous: dict[str, str] = {}
        frontier = [start]
        while start not in previous:
            nxt = []
            for v in frontier:
                for w in sorted(graph[v] & comp):
                    if w not in previous:
                        previous[w] = v
                        nxt.append(w)
            frontier = nxt
        path = [start]
        while path[-1] != start or len(path) == 1:
            path.append(previous[path[-1]])
        cycles.append(path[::-1])
    return sorted(cycles)


def assert_no_import_cycles(src: Path, top: str) -> None:
    cycles = import_cycles(module_import_graph(src, top))
    assert not cycles, "module-level import cycles (cut each by moving what both need into a module of its own):\n" + \
        "\n".join(" → ".join(c) for c in cycles)


def test_no_import_cycles_between_modules():
    assert_no_import_cycles(ROOT / "src", "empriv")


def _write_package(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_the_module_cycle_check_fails_on_a_cycle(tmp_path):
    """A tiny package in tmp_path: the check passes on the normal package patterns and fails, printing the cycle, on
    a circle through a lazy import, through ``from pkg import submodule`` and through a package's face."""
    base = {"toy/__init__.py": "",
            "toy/a.py": "from toy.b import helper\n",
            "toy/b.py": "def helper():\n    return 1\n",
            # a package's __init__ importing its submodules, the submodules importing each other one way
            "toy/pkg/__init__.py": "from toy.pkg.inner import VALUE\nfrom . import outer\n",
            "toy/pkg/inner.py": "VALUE = 1\n",
            "toy/pkg/outer.py": "from . import inner\nfrom .inner import VALUE\n"}
    src = _write_package(tmp_path / "clean", base)
    assert_no_import_cycles(src, "toy")
    graph = module_import_graph(src, "toy")
    assert graph["toy.a"] == {"toy.b"} and graph["toy.pkg"] == {"toy.pkg.inner", "toy.pkg.outer"}
    assert graph["toy.pkg.outer"] == {"toy.pkg.inner"}  # its own package's __init__ is no edge

    lazy = _write_package(tmp_path / "lazy", {**base,
                                              "toy/b.py": "def helper():\n    from toy import a\n    return a\n"})
    assert import_cycles(module_import_graph(lazy, "toy")) == [["toy.a", "toy.b", "toy.a"]]
    with pytest.raises(AssertionError, match="toy.a → toy.b → toy.a"):
        assert_no_import_cycles(lazy, "toy")

    submodule = _write_package(tmp_path / "submodule", {**base, "toy/c.py": "from toy.pkg import inner\n",
                                                        "toy/pkg/inner.py": "import toy.c\nVALUE = 1\n"})
    cycles = import_cycles(module_import_graph(submodule, "toy"))
    assert ["toy.c", "toy.pkg.inner", "toy.c"] in cycles

    face = _write_package(tmp_path / "face", {**base, "toy/pkg/inner.py": "from toy.pkg import outer\nVALUE = 1\n",
                                              "toy/pkg/outer.py": "def f():\n    from toy.pkg import VALUE\n"})
    with pytest.raises(AssertionError, match=r"toy\.pkg → toy\.pkg\.outer → toy\.pkg"):
        assert_no_import_cycles(face, "toy")


# ----------------------------------------------------------------------------- module size

MAX_MODULE_LINES = 500  # a module over this holds two concerns (docs: ARCHITECTURE.md)
OVERSIZED = {  # issue 27: to split — remove a module from this list once it is under the limit; never add one
}


def test_no_module_is_over_500_lines_but_those_still_to_split():
    sizes = {str(p.relative_to(ROOT)): len(p.read_text(encoding="utf-8").splitlines())
             for p in sorted((ROOT / "src").rglob("*.py"))}
    over = {path: n for path, n in sizes.items() if n > MAX_MODULE_LINES}
    new = {path: n for path, n in over.items() if path not in OVERSIZED}
    assert not new, f"modules over {MAX_MODULE_LINES} lines (split them by concern): {new}"
    done = sorted(path for path in OVERSIZED if sizes.get(path, 0) <= MAX_MODULE_LINES)
    assert not done, f"under {MAX_MODULE_LINES} lines now (or gone): remove them from OVERSIZED: {done}"


def _library_modules():
    for path in sorted((ROOT / "src/empriv").rglob("*.py")):
        name = ic.module_name(path)
        if not name.startswith(STAGE_LAYER) and not name.endswith(CLI):
            yield name, path


def test_library_packages_do_not_know_the_stage_layer_or_file_locations():
    offenders = {}
    for name, path in _library_modules():
        imports = ic.direct_imports(name)
        bad = sorted(m for m in imports if m.startswith(("empriv.pipeline", "empriv.paths", "empriv.stage")))
        literals = sorted({n.value for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Constant)
                           and isinstance(n.value, str) and PIPELINE_PATH.fullmatch(repr(n.value))})
        if bad or literals:
            offenders[name] = bad + literals
    assert not offenders, f"library modules that import the stage layer or name pipeline paths: {offenders}"


def test_privacy_and_data_know_nothing_of_training_or_scoring():
    for name, _ in _library_modules():
        if name.startswith(("empriv.privacy", "empriv.data", "empriv.config")):
            deps = ic.closure(name)
            assert not {m for m in deps if m.startswith(("empriv.train", "empriv.score", "empriv.audit"))}, name
    # config (a package) is the bottom layer: its modules import each other, the leaves privacy_unit (the unit-spec
    # grammar, pure Python) and checks (the bad-input format and argument checks), and data, nothing else of empriv
    leaves = ("empriv.privacy_unit", "empriv.checks")
    for name, _ in _library_modules():
        if name == "empriv.config" or name.startswith("empriv.config."):
            assert not any(m.startswith("empriv.") and m not in leaves
                           and not m.startswith(("empriv.data", "empriv.config"))
                           for m in ic.direct_imports(name)), f"{name}: config is the bottom layer"
    for leaf in leaves:
        assert not any(m.startswith("empriv.") for m in ic.direct_imports(leaf)), f"{leaf} is a leaf"


def test_the_inputs_fingerprint_changes_exactly_when_the_file_does(tmp_path):
    from empriv.pipeline.inputs import fingerprint

    f = tmp_path / "emails.csv"
    f.write_text("a,b\n1,2\n")
    one, same = fingerprint(f), fingerprint(f)
    f.write_text("a,b\n1,3\n")
    assert one == same and fingerprint(f)["sha256"] != one["sha256"]
    d = tmp_path / "base"
    d.mkdir()
    (d / "config.json").write_text("{}")
    first = fingerprint(d)
    (d / "config.json").rename(d / "other.json")  # same bytes, another name: another input
    assert fingerprint(d)["sha256"] != first["sha256"] and fingerprint(None) == {"path": None}
