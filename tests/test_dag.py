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
    """A stage-layer stage depends on its code fingerprint, whose files are its import closure; the code stage that
    writes the fingerprints depends on all of src/empriv; any other stage lists its files."""
    missing = {}
    stages = dvc["stages"]
    assert stages[ic.CODE_STAGE]["deps"] == ["tools/import_closure.py", "src/empriv"]
    assert stages[ic.CODE_STAGE]["outs"] == [ic.CODE_DIR]
    for name, stage in stages.items():
        if name == ic.CODE_STAGE:
            continue
        stage = stage.get("do", stage)  # a foreach stage's body
        deps = [str(d) for d in stage.get("deps", [])]
        module, _ = ic.stage_entry(stage["cmd"])
        code = ic.stage_code(stage["cmd"])
        assert code, f"stage {name}: cannot tell which code {stage['cmd']!r} runs"
        if module in ic.stage_layer_modules():
            fp = ic.fingerprint_path(module)
            assert fp in deps, f"stage {name}: no dep on its code fingerprint {fp}"
            assert not [d for d in deps if d.startswith("src/")], f"stage {name}: code files beside its fingerprint"
            assert set(ic.fingerprint(module)["files"]) == set(ic.closure_files(module))
            continue
        lost = [f for f in code if not covered(f, deps)]
        if lost:
            missing[name] = lost
    assert not missing, f"deps missing from dvc.yaml (run `python tools/import_closure.py --write-dvc`): {missing}"


def test_a_fingerprint_changes_exactly_when_a_file_of_its_closure_does(tmp_path):
    """The code stage's command in a copy of tools/ and src/empriv: same code, same bytes; an edit changes exactly
    the fingerprints whose closure holds the file."""
    import subprocess

    copy = tmp_path / "project"
    shutil.copytree(ROOT / "src/empriv", copy / "src/empriv", ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "tools").mkdir()
    shutil.copy2(ROOT / "tools/import_closure.py", copy / "tools/import_closure.py")
    out = copy / ".empriv/code"

    def run() -> dict[str, bytes]:
        proc = subprocess.run([sys.executable, "tools/import_closure.py", "--fingerprints", ".empriv/code"],
                              cwd=copy, capture_output=True, text=True, check=True)
        assert proc.stdout.startswith("code fingerprints: ")
        return {p.name: p.read_bytes() for p in sorted(out.glob("*.json"))}

    before = run()
    assert {"train.json", "score.json", "validate.json"} <= set(before)
    assert set(before) == {ic.fingerprint_path(m).rsplit("/", 1)[1] for m in ic.stage_layer_modules()}
    train = json.loads(before["train.json"])
    assert train["module"] == "empriv.pipeline.train"
    assert set(train["files"]) == set(ic.closure_files("empriv.pipeline.train"))
    assert train["files"]["src/empriv/train/dp.py"] == hashlib.md5((ROOT / "src/empriv/train/dp.py").read_bytes()).hexdigest()
    (out / "gone.json").write_text("{}")  # a module that no longer exists loses its fingerprint
    assert run() == before  # same code, same bytes: nothing downstream re-runs
    target = "src/empriv/score/vmr.py"
    users = {ic.fingerprint_path(m).rsplit("/", 1)[1] for m in ic.stage_layer_modules()
             if target in ic.closure_files(m)}
    assert "score.json" in users and "train.json" not in users and "validate.json" not in users
    with open(copy / target, "a") as fh:
        fh.write("\n# an edit\n")
    after = run()
    assert {n for n in before if after[n] != before[n]} == users


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
    assert "data/inputs/corpus" in stages["prepare"]["deps"]
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
    # config (a package) is the bottom layer: its modules import each other, privacy_unit (the unit-spec grammar,
    # pure Python) and data, nothing else of empriv
    for name, _ in _library_modules():
        if name == "empriv.config" or name.startswith("empriv.config."):
            assert not any(m.startswith("empriv.") and m != "empriv.privacy_unit"
                           and not m.startswith(("empriv.data", "empriv.config"))
                           for m in ic.direct_imports(name)), f"{name}: config is the bottom layer"
    assert not any(m.startswith("empriv.") for m in ic.direct_imports("empriv.privacy_unit")), "privacy_unit is a leaf"


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
