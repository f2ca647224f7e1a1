"""The default DVC remote (.dvc/config; docs/ci.md#the-dvc-remote): a directory beside the clone, and a real
``dvc push`` → fresh ``git clone`` → ``dvc pull`` round trip through it that restores byte-identical outputs."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
REMOTE_NAME = "local"
REMOTE_DIR = "empriv-dvc-remote"  # beside the clone: <clone>/../empriv-dvc-remote
pytestmark = pytest.mark.slow  # ~20 s of real dvc and git

GEN_PY = """\
import hashlib, pathlib, yaml
n = yaml.safe_load(open("params.yaml"))["size"]
out = pathlib.Path("models/run")
out.mkdir(parents=True, exist_ok=True)
block = b"".join(hashlib.sha256(str(i).encode()).digest() for i in range(n))
(out / "weights.bin").write_bytes(block)
(out / "config.json").write_text('{"n": %d}' % n)
pathlib.Path("data").mkdir(exist_ok=True)
pathlib.Path("data/table.csv").write_text("".join(f"{i},{i * i}\\n" for i in range(n)))
"""

DVC_YAML = """\
stages:
  gen:
    cmd: python gen.py
    deps: [gen.py]
    params: [size]
    outs: [models/run, data/table.csv]
"""


def env() -> dict:
    e = dict(os.environ)
    e["PATH"] = f"{VENV_BIN}{os.pathsep}{e.get('PATH', '')}"
    return e


def sh(cmd: list[str], cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=cwd, env=env(), capture_output=True, text=True, timeout=300)
    if check:
        assert proc.returncode == 0, f"{cmd} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def digests(repo: Path) -> dict[str, str]:
    return {p.relative_to(repo).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for d in ("models", "data") for p in sorted((repo / d).rglob("*")) if p.is_file() and p.name != ".gitignore"}


def remote_section(config: Path) -> dict[str, str]:
    """The default remote's name and url as written in a DVC config file (read with DVC's own parser)."""
    from configobj import ConfigObj

    conf = ConfigObj(str(config))
    name = conf.get("core", {}).get("remote")
    return {"name": name, "url": conf.get(f'remote "{name}"', {}).get("url")}


def test_the_project_has_a_default_remote_beside_the_clone():
    section = remote_section(ROOT / ".dvc" / "config")
    assert section["name"] == REMOTE_NAME
    # relative to the config file (.dvc/): the directory beside the clone, for any clone anywhere
    assert not Path(section["url"]).is_absolute()
    resolved = ((ROOT / ".dvc") / section["url"]).resolve()
    assert resolved == ROOT.resolve().parent / REMOTE_DIR
    assert not resolved.is_relative_to(ROOT.resolve())  # outside the repository


@pytest.fixture()
def pushed(tmp_path) -> tuple[Path, Path, dict[str, str]]:
    """A git + DVC repository at tmp/lab/empriv with the project's remote settings, a stage's outputs pushed."""
    repo = tmp_path / "lab" / "empriv"
    repo.mkdir(parents=True)
    sh(["git", "init", "-q"], repo)
    sh(["dvc", "init", "-q"], repo)
    # the documented command, run in the repository; it must write exactly what the project's .dvc/config holds
    sh(["dvc", "remote", "add", "-d", REMOTE_NAME, f"../{REMOTE_DIR}"], repo)
    assert remote_section(repo / ".dvc" / "config") == remote_section(ROOT / ".dvc" / "config")
    (repo / "gen.py").write_text(GEN_PY)
    (repo / "dvc.yaml").write_text(DVC_YAML)
    (repo / "params.yaml").write_text("size: 4000\n")
    sh(["dvc", "repro", "-q"], repo)
    sh(["git", "add", "-A"], repo)
    sh(["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qm", "outputs"], repo)
    before = digests(repo)
    assert set(before) == {"models/run/weights.bin", "models/run/config.json", "data/table.csv"}
    tracked = set(sh(["git", "ls-files", "models", "data"], repo).stdout.split())
    assert tracked == {"models/.gitignore", "data/.gitignore"}  # the outputs are DVC's, not git's
    sh(["dvc", "push", "-q"], repo)
    return repo, tmp_path / "lab" / REMOTE_DIR, before


def test_push_then_fresh_clone_then_pull_restores_identical_outputs(pushed):
    repo, remote, before = pushed
    stored = [p for p in remote.rglob("*") if p.is_file()]
    assert len(stored) == 4  # three files and the directory's manifest, content-addressed
    clone = repo.parent / "colleague"
    sh(["git", "clone", "-q", str(repo), str(clone)], repo.parent)
    assert digests(clone) == {}  # git alone does not bring them
    sh(["dvc", "pull", "-q"], clone)
    assert digests(clone) == before
    status = sh(["dvc", "status"], clone).stdout
    assert "up to date" in status
    assert "didn't change" in sh(["dvc", "repro"], clone).stdout  # nothing to recompute


def test_a_clone_elsewhere_points_its_remote_at_the_shared_directory(pushed, tmp_path):
    repo, remote, before = pushed
    clone = tmp_path / "elsewhere" / "deeper" / "empriv"
    clone.parent.mkdir(parents=True)
    sh(["git", "clone", "-q", str(repo), str(clone)], clone.parent)
    failed = sh(["dvc", "pull", "-q"], clone, check=False)  # ../empriv-dvc-remote does not exist beside this clone
    assert failed.returncode != 0 and not (clone / "models/run/weights.bin").exists()
    sh(["dvc", "remote", "modify", "--local", REMOTE_NAME, "url", str(remote)], clone)
    sh(["dvc", "pull", "-q"], clone)
    assert digests(clone) == before
    assert sh(["git", "status", "--porcelain"], clone).stdout == ""  # --local: .dvc/config.local, untracked by git
