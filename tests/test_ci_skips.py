"""Under CI=true a required test that skips fails the run (tests/conftest.py); an ``optional`` one may skip."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent

CASES = '''
import pytest

def test_required_but_skips():
    pytest.skip("the data is not beside the checkout")

@pytest.mark.optional(reason="a manual check")
def test_optional_and_skips():
    pytest.skip("not asked for")

@pytest.mark.skipif(True, reason="no cluster")
def test_required_skipif():
    pass

def test_passes():
    pass
'''


def _run(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess:
    (tmp_path / "test_cases.py").write_text(CASES)
    # the inner run's summary is parsed: options the outer run was given through PYTEST_ADDOPTS (e.g. --durations)
    # would change it
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS")}
    if ci is not None:
        env["CI"] = ci
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "conftest", "-p", "no:cacheprovider",
                           "--rootdir", str(tmp_path), "-c", os.devnull, str(tmp_path / "test_cases.py")],
                          capture_output=True, text=True, cwd=tmp_path, env=env)


def test_a_required_test_that_skips_fails_under_ci(tmp_path):
    proc = _run(tmp_path, "true")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    # a skip in the call fails the test; a skipif (decided at set-up) is a set-up error
    assert "1 failed, 1 passed, 1 skipped, 1 error" in proc.stdout
    assert "a required test skipped under CI=true (the data is not beside the checkout)" in proc.stdout
    assert "a required test skipped under CI=true (no cluster)" in proc.stdout


def test_outside_ci_skips_are_skips(tmp_path):
    proc = _run(tmp_path, None)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed, 3 skipped" in proc.stdout
