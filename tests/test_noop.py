"""No-op runs (issue 30): ``make repro`` does not repeat the sweep's staleness check through ``dvc repro``, and the
``empriv`` commands of ``make repro`` do not import the libraries of the others. That the sweep's check asks DVC's own
per-stage questions once for the whole pipeline (``empriv.infra.dvc_adapter.changed_stages``) is tested against DVC's
``Stage.changed`` in tests/infra/test_dvc_adapter.py.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable


def test_make_repro_runs_no_dvc_repro_after_the_sweep():
    """The sweep checks every stage with DVC's Stage.changed and commits with a status check: make repro's
    steps are validate, the sweep, the warm worker's stop and the summary."""
    text = (ROOT / "Makefile").read_text()
    recipe = text[text.index("\nrepro: ") + 1:].split("\n\n")[0].splitlines()[1:]
    commands = [re.sub(r"^@?\$\(BIN\)/", "", line.strip().split("  #")[0]) for line in recipe]
    assert commands == ["empriv validate --fill-defaults $(if $(filter-out 0 no false,$(YES)),--yes)",
                        "empriv sweep --engine local --all",
                        "python -m empriv.infra.warm --stop", "empriv summary"]


@pytest.mark.parametrize("command, imported", [("summary --help", False), ("validate --help", False),
                                               ("sweep --help", False), ("privacy --help", True),
                                               ("--help", True), ("diff --help", True)])
def test_make_repros_commands_leave_the_other_commands_modules_unimported(command, imported):
    code = ("import sys; from empriv.cli import main\n"
            "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
            "print(json.dumps(sorted(m for m in sys.modules if m in ('empriv.diff', 'empriv.privacy.cli', "
            "'empriv.audit.cli', 'empriv.analysis.cli'))))")
    run = subprocess.run([PY, "-c", "import json\n" + code, *command.split()], capture_output=True, text=True,
                         cwd=ROOT)
    assert run.returncode == 0, run.stderr
    loaded = json.loads(run.stdout.strip().splitlines()[-1])
    assert (loaded == ["empriv.analysis.cli", "empriv.audit.cli", "empriv.diff", "empriv.privacy.cli"]) is imported, \
        loaded
