"""The GitHub Actions workflow of the pull-request report (.github/workflows/pr.yml), checked without GitHub.

Structural checks, always: the YAML parses; it runs on pull requests with the permissions the comment needs; the
checkout has full history; Python 3.11 with a pip cache keyed on files that exist; the install-and-test step is the
README's command; every file, make target and ``${{ steps.<id> }}`` it names exists; every ``pr_report.py``
command line parses with the script's own parser; the preset it runs validates and is a 2-4 configuration cube;
the comment is posted with the gh CLI as one comment edited in place, after the artifact it links to is uploaded.
actionlint, where installed, lints it too.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from test_docs import README, _makefile, _setup_section, make_invocations

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / ".github" / "workflows" / "pr.yml"
sys.path.insert(0, str(ROOT / "tools"))
import pr_report  # noqa: E402

EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")
CONTEXTS = {"github", "env", "steps", "runner", "secrets", "vars", "job", "matrix", "inputs", "needs", "strategy"}


@pytest.fixture(scope="module")
def workflow() -> dict:
    data = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    assert isinstance(data, dict), "pr.yml is not a YAML mapping"
    if True in data:  # YAML 1.1 reads the bare key `on` as the boolean true
        data["on"] = data.pop(True)
    return data


@pytest.fixture(scope="module")
def steps(workflow) -> list[dict]:
    (job,) = workflow["jobs"].values()
    return job["steps"]


def _runs(steps: list[dict]) -> list[str]:
    return [s["run"] for s in steps if "run" in s]


def _commands(run: str) -> list[str]:
    """The shell commands of a ``run`` block, continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n\s*", " ", run)
    return [line.split(" #", 1)[0].strip() for line in joined.splitlines() if line.strip() and not line.strip().startswith("#")]


def _step(steps: list[dict], uses: str) -> dict:
    found = [s for s in steps if s.get("uses", "").split("@")[0] == uses]
    assert len(found) == 1, f"pr.yml must use {uses} exactly once, uses it {len(found)} times"
    return found[0]


def test_runs_on_pull_requests_with_the_permissions_the_comment_needs(workflow):
    assert "pull_request" in workflow["on"]
    assert workflow["permissions"] == {"contents": "read", "pull-requests": "write"}
    (job,) = workflow["jobs"].values()
    assert 0 < job["timeout-minutes"] <= 360  # GitHub's own ceiling for a job on a hosted runner


def test_checkout_has_full_history_and_python_has_a_pip_cache(steps):
    assert _step(steps, "actions/checkout")["with"]["fetch-depth"] == 0
    setup = _step(steps, "actions/setup-python")["with"]
    assert str(setup["python-version"]) == "3.11" and setup["cache"] == "pip"
    keyed = setup["cache-dependency-path"].split()
    assert keyed == ["requirements.lock", "pyproject.toml"]
    assert all((ROOT / f).is_file() for f in keyed)


def test_every_action_is_pinned_to_a_version(steps):
    for s in steps:
        if "uses" in s:
            assert re.fullmatch(r"[\w.-]+/[\w.-]+@(v\d+(\.\d+)*|[0-9a-f]{40})", s["uses"]), s["uses"]


def test_torch_spec_is_the_makefiles_torch_from_the_cpu_wheels(workflow):
    """TORCH_SPEC (a Makefile variable, `?=`: the environment wins) keeps the Makefile's torch version."""
    _, variables = _makefile()
    (job,) = workflow["jobs"].values()
    spec = job["env"]["TORCH_SPEC"]
    assert "TORCH_SPEC" in variables
    default = re.search(r"^TORCH_SPEC\s*\?=\s*(\S+)", (ROOT / "Makefile").read_text(), flags=re.M).group(1)
    assert spec.split()[0] == default and spec.split()[1:3] == ["--index-url", "https://download.pytorch.org/whl/cpu"]


def test_install_and_test_step_is_the_readmes_command(steps):
    setup = _setup_section(README.read_text(encoding="utf-8"))
    readme_lines = {line.split("#", 1)[0].strip() for block in re.findall(r"```[^\n]*\n(.*?)```", setup, flags=re.S)
                    for line in block.splitlines()}
    install = [s for s in steps if "run" in s and "make" in s["run"]]
    assert install, "no step runs make"
    assert _commands(install[0]["run"]) == ["make test"] and "make test" in readme_lines
    # it comes right after the checkout and the Python set-up, before anything uses .venv
    names = [s.get("uses", "").split("@")[0] or s.get("run", "") for s in steps]
    assert names.index("make test") == 2 and names[:2] == ["actions/checkout", "actions/setup-python"]
    assert not any(".venv/" in r for r in names[:2])


def test_every_make_target_file_and_step_output_named_exists(steps):
    targets, _ = _makefile()
    named_files: set[str] = set()
    for run in _runs(steps):
        for command in _commands(run):
            if command.startswith("make"):
                for ts, _ in make_invocations(command):
                    assert set(ts) <= targets, f"pr.yml runs make targets the Makefile lacks: {set(ts) - targets}"
            for word in shlex.split(EXPRESSION.sub("X", command)):
                if re.fullmatch(r"(\.?[\w-]+/)+[\w.-]+\.(py|yaml|yml|sh|lock|toml)|\.ci/run", word):
                    named_files.add(word)
    assert {"tools/pr_report.py", "presets/ci-small.yaml"} <= named_files
    missing = sorted(f for f in named_files if not (ROOT / f).is_file())
    assert not missing, f"pr.yml names files that do not exist: {missing}"
    ids = {s["id"] for s in steps if "id" in s}
    text = WORKFLOW.read_text(encoding="utf-8")
    expressions = EXPRESSION.findall(text)
    assert expressions
    for expr in expressions:
        assert re.split(r"[.(\s]", expr, maxsplit=1)[0] in CONTEXTS, f"unknown context in ${{{{ {expr} }}}}"
        for step_id in re.findall(r"\bsteps\.([\w-]+)\.outputs\.", expr):
            assert step_id in ids, f"${{{{ {expr} }}}} names step id {step_id!r}; the steps' ids are {sorted(ids)}"


def test_every_pr_report_command_parses_with_the_scripts_own_parser(steps):
    parser = pr_report.build_parser()
    commands = [c.removeprefix("if ! ").removesuffix("; then")  # a command run as an `if` condition
                for run in _runs(steps) for c in _commands(run) if "tools/pr_report.py" in c]
    assert {shlex.split(c)[2] for c in commands} == {"cube", "report", "run-cache"}
    for command in commands:
        words = shlex.split(re.sub(r"\$\{?(\w+)\}?", r"\1", command))
        assert words[:2] == [".venv/bin/python", "tools/pr_report.py"], command
        args = parser.parse_args(words[2:])  # exits (SystemExit) on an option the script does not have
        if args.command == "cube":
            assert args.preset == Path("presets/ci-small.yaml") and args.record.parts[0] == "pr-report"


def test_report_files_are_uploaded_before_the_comment_is_posted(steps):
    names = [s.get("uses", "").split("@")[0] or s.get("run", "") for s in steps]
    upload = names.index("actions/upload-artifact")
    report = next(i for i, n in enumerate(names) if "tools/pr_report.py report" in n)
    comment = next(i for i, n in enumerate(names) if "gh pr comment" in n)
    assert report < upload < comment == len(steps) - 1
    assert _step(steps, "actions/upload-artifact")["with"]["path"].rstrip("/") == "pr-report"
    assert "--out pr-report" in names[report]


def test_the_comment_is_one_comment_edited_in_place_with_the_gh_cli(steps):
    post = steps[-1]
    (command,) = _commands(post["run"])
    words = shlex.split(command)
    assert words[:3] == ["gh", "pr", "comment"]
    assert {"--edit-last", "--create-if-none"} <= set(words)
    assert words[words.index("--body-file") + 1] == "pr-report/comment.md"
    assert post["env"]["GH_TOKEN"] == "${{ github.token }}"
    assert post["env"]["PR"] == "${{ github.event.pull_request.number }}"


def test_the_cube_preset_validates_and_is_small():
    from empriv.config import parse_params
    from empriv.study import resolve_preset

    params = parse_params(resolve_preset("ci-small", ROOT))
    runs = list(params.runs())
    assert 2 <= len(runs) <= 4, f"presets/ci-small.yaml is a cube of {len(runs)} configurations; CI wants 2-4"
    assert params.base.name == "tiny-gpt2" and params.data.source.startswith("synthetic")  # nothing downloaded
    assert max(r.steps for r in runs) <= 8 and params.base.pretrain_steps <= 50
    assert len(list(params.audit_runs())) <= 2


@pytest.mark.optional(reason="actionlint: its PyPI sdist downloads the binary from GitHub at build time")
@pytest.mark.skipif(shutil.which("actionlint") is None,
                    reason="actionlint is not installed (no PyPI wheel or Debian package ships its binary)")
def test_actionlint_finds_nothing():
    proc = subprocess.run(["actionlint", str(WORKFLOW)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
