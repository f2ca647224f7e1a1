"""stages/ (issue 27): one thin script per dvc.yaml stage, and dvc.yaml calling them.

Every stage's ``cmd`` (but the ``code`` stage, a tool) runs a script of ``stages/`` — directly,
``python stages/<x>.py …``, or in the warm worker, ``python -m empriv.infra.warm stages/<x>.py …`` — and every
script is run by a stage. A script is thin: a docstring, imports from empriv and the standard library, and under
``if __name__ == "__main__":`` one call of the library with its command line; at most :data:`MAX_LINES` lines. Its
name shadows no importable module (``python stages/x.py`` puts ``stages/`` first on ``sys.path``). The checks are
functions tried on broken fixtures below, so each can fail.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import import_closure as ic  # noqa: E402

MAX_LINES = 30
LAUNCHER = "empriv.infra.warm"


@pytest.fixture(scope="module")
def dvc() -> dict:
    from ruamel.yaml import YAML

    return YAML(typ="safe", pure=True).load((ROOT / "dvc.yaml").read_text())


def stage_bodies(dvc: dict) -> dict[str, dict]:
    """Stage name → its body (a foreach stage's ``do``), the code stage left out."""
    return {name: stage.get("do", stage) for name, stage in dvc["stages"].items() if name != ic.CODE_STAGE}


def command_problems(cmd: str, scripts: set[str]) -> list[str]:
    """What is wrong with a stage's command: it must be ``python stages/<x>.py …`` or ``python -m empriv.infra.warm
    stages/<x>.py …`` with an existing script."""
    words = " ".join(str(cmd).split()).split(" ")
    if words[:3] == ["python", "-m", LAUNCHER]:
        words = words[3:]
    elif words[:1] == ["python"]:
        words = words[1:]
    else:
        return [f"{cmd!r} does not start with python"]
    if not words or not words[0].startswith("stages/") or not words[0].endswith(".py"):
        return [f"{cmd!r} runs no stage script (python stages/<x>.py or python -m {LAUNCHER} stages/<x>.py)"]
    if words[0] not in scripts:
        return [f"{cmd!r}: {words[0]} does not exist"]
    return []


def script_problems(path: Path) -> list[str]:
    """What makes a stage script more than thin."""
    text = path.read_text(encoding="utf-8")
    problems = []
    if len(text.splitlines()) > MAX_LINES:
        problems.append(f"{len(text.splitlines())} lines (at most {MAX_LINES})")
    tree = ast.parse(text)
    body = list(tree.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    else:
        problems.append("no docstring")
    imported: dict[str, str] = {}  # local name -> the module it comes from
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for module in modules:
                top = module.split(".")[0]
                if top != "empriv" and top not in sys.stdlib_module_names:
                    problems.append(f"imports {module} (only empriv and the standard library)")
            for alias in node.names:
                imported[alias.asname or alias.name.split(".")[0]] = modules[0]
        elif not _is_main_guard(node):
            problems.append(f"line {node.lineno}: {type(node).__name__} outside `if __name__ == \"__main__\":`")
    guards = [node for node in body if _is_main_guard(node)]
    if len(guards) != 1:
        problems.append("needs exactly one `if __name__ == \"__main__\":` block")
        return problems
    guard = guards[0]
    if guard.orelse or len(guard.body) != 1 or not isinstance(guard.body[0], ast.Expr):
        problems.append("the `__main__` block must be one call")
        return problems
    call = guard.body[0].value
    if _is_call_of(call, "sys", "exit") and len(call.args) == 1:
        call = call.args[0]
    if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name) \
            or not imported.get(call.func.id, "").startswith("empriv"):
        problems.append("the `__main__` block must call a function imported from empriv")
    elif call.keywords or [ast.unparse(a) for a in call.args] not in ([], ["sys.argv[1:]"]):
        problems.append(f"the call passes {ast.unparse(call)}: only the command line, sys.argv[1:]")
    return problems


def _is_main_guard(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and ast.unparse(node.test) in ("__name__ == '__main__'", '__name__ == "__main__"')


def _is_call_of(node: ast.AST, owner: str, name: str) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == name \
        and isinstance(node.func.value, ast.Name) and node.func.value.id == owner


def shadowed_module(stem: str) -> str | None:
    """The module a script named ``stem`` would hide from everything its process imports, if any."""
    if stem in sys.stdlib_module_names or stem in sys.builtin_module_names:
        return f"the standard library's {stem}"
    saved = [p for p in sys.path if Path(p or ".").resolve() == (ROOT / "stages").resolve()]
    for p in saved:
        sys.path.remove(p)
    try:
        spec = importlib.util.find_spec(stem)
    finally:
        sys.path[:0] = saved
    if spec is None or spec.origin is None:  # nothing, or a namespace package (a bare directory such as tests/train)
        return None
    return f"{stem} from {spec.origin}"


# ------------------------------------------------------------------------------------------- the project itself

def test_every_stage_runs_a_stage_script_and_every_script_is_run(dvc):
    scripts = set(ic.stage_scripts())
    assert scripts, "no stages/*.py"
    problems = {name: command_problems(body["cmd"], scripts) for name, body in stage_bodies(dvc).items()}
    assert not {k: v for k, v in problems.items() if v}
    used = {ic.stage_entry(body["cmd"])[1] for body in stage_bodies(dvc).values()}
    assert scripts - used == set(), f"stage scripts no dvc.yaml stage runs: {sorted(scripts - used)}"
    # the code stage stays a tool: it reads the code as text, imports nothing of empriv
    assert dvc["stages"][ic.CODE_STAGE]["cmd"].startswith("python tools/import_closure.py --fingerprints")


def test_the_model_stages_run_their_script_in_the_warm_worker(dvc):
    warm = {name for name, body in stage_bodies(dvc).items()
            if str(body["cmd"]).split()[:3] == ["python", "-m", LAUNCHER]}
    assert warm == {"base", "record_scores", "train", "score", "canaries", "audit", "adaptation_audit"}


def test_every_stage_script_is_thin():
    problems = {script: script_problems(ROOT / script) for script in ic.stage_scripts()}
    assert not {k: v for k, v in problems.items() if v}, problems


def test_no_stage_script_shadows_an_importable_module():
    """``python stages/secrets.py`` would make every ``import secrets`` of the process (a library imports the
    standard library's) load the script: hence stages/mine_secrets.py and stages/validate_params.py."""
    shadows = {script: shadowed_module(Path(script).stem) for script in ic.stage_scripts()}
    assert not {k: v for k, v in shadows.items() if v}, shadows


def test_each_script_calls_the_cli_of_its_stage_module():
    for script in ic.stage_scripts():
        tree = ast.parse((ROOT / script).read_text(encoding="utf-8"))
        (module,) = [n.module for n in tree.body if isinstance(n, ast.ImportFrom) and n.module.startswith("empriv")]
        assert module.startswith("empriv.pipeline."), script
        assert callable(getattr(importlib.import_module(module), "cli", None)), f"{module} has no cli(argv)"


def test_a_stage_script_prints_its_usage():
    proc = subprocess.run([sys.executable, str(ROOT / "stages/train.py"), "--help"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: train.py") and "--learning-rate" in proc.stdout and "train@" in proc.stdout
    proc = subprocess.run([sys.executable, str(ROOT / "stages/prepare.py"), "--unexpected"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "unrecognized arguments: --unexpected" in proc.stderr


# ------------------------------------------------------------------------------------- the checks can fail

THIN = '''"""A stage."""

import sys

from empriv.pipeline.train import cli

if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:]))
'''


@pytest.mark.parametrize("text, expected", [
    (THIN, []),
    (THIN.replace("import sys\n", "import sys\nimport numpy\n"), ["imports numpy"]),
    (THIN.replace("if __name__", "for i in range(3):\n    print(i)\n\nif __name__"), ["line 7: For outside"]),
    (THIN.replace("cli(sys.argv[1:])", "cli(['--seed', '0'])"), ["the call passes cli(['--seed', '0'])"]),
    (THIN.replace("    sys.exit(cli(sys.argv[1:]))", "    args = sys.argv[1:]\n    cli(args)"),
     ["the `__main__` block must be one call"]),
    (THIN.replace("from empriv.pipeline.train import cli", "from json import loads as cli"),
     ["the `__main__` block must call a function imported from empriv"]),
    (THIN.replace('"""A stage."""\n', "") + "\n" * 30, ["lines (at most 30)", "no docstring"]),
])
def test_script_problems_names_what_is_not_thin(tmp_path, text, expected):
    path = tmp_path / "stage.py"
    path.write_text(text)
    problems = script_problems(path)
    assert len(problems) == len(expected) and all(e in p for p, e in zip(problems, expected)), problems


def test_command_problems_and_shadowing_fail_on_bad_fixtures():
    scripts = {"stages/train.py"}
    assert command_problems("python stages/train.py --seed 0", scripts) == []
    assert command_problems(f"python -m {LAUNCHER} stages/train.py --seed 0", scripts) == []
    assert "runs no stage script" in command_problems("python -m empriv.pipeline.train --seed 0", scripts)[0]
    assert "does not exist" in command_problems("python stages/score.py", scripts)[0]
    assert "does not start with python" in command_problems("dvc repro", scripts)[0]
    assert "standard library" in shadowed_module("secrets") and shadowed_module("mine_secrets") is None
    assert shadowed_module("pytest") is not None  # an installed package
