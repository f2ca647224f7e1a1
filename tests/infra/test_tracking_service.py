"""empriv.infra.tracking.service (issue 43): W&B offline works without a writable HOME, wandb.init gives up quickly
on a host it cannot reach and says so in one line the sweep does not retry, and W&B's service process ends with
the process that started it. Real wandb in subprocesses, no mocks."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from empriv.config import ConfigError
from empriv.infra.sweep.faults import deterministic_cause
from empriv.infra.tracking.service import (INIT_TIMEOUT_S, SERVICE_DIR, end_service, init_timeout, settings,
                                          wandb_directories)

wandb = pytest.importorskip("wandb")

WANDB_VARS = ("WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR", "WANDB_ARTIFACT_DIR",
              "WANDB_API_KEY", "WANDB_BASE_URL", "WANDB_INIT_TIMEOUT", "XDG_DATA_HOME", "XDG_CACHE_HOME",
              "XDG_CONFIG_HOME", "NETRC", "EMPRIV_WANDB_LIVE")


def unwritable_home(tmp_path: Path) -> Path:
    """A HOME nothing can be created under: a read-only directory, or (root ignores permissions) a regular file."""
    if os.geteuid() != 0:
        home = tmp_path / "home"
        home.mkdir()
        home.chmod(0o555)
        return home
    home = tmp_path / "home-is-a-file"
    home.write_text("not a directory\n")
    return home


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_python(code: str, tmp_path: Path, **env_extra) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in WANDB_VARS and not k.startswith(("EMPRIV_", "DVC_"))}
    env.update(WANDB_SILENT="true", EMPRIV_WANDB_GROUP="g", **env_extra)
    return subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=180)


WRITE_RUN = """
from empriv.infra.tracking import SecretScrubber, open_run, write_offline_runs
with open_run(project="p", group="g", name="n", section="analysis", mode="{mode}", scrub=SecretScrubber(),
              root="{root}") as t:
    t.table("analysis/runs", ["config", "acr"], [["eps8", 1.5], ["eps4", 0.5]])
    t.summary({{"n_runs": 2}})
print(write_offline_runs("{root}"))
"""


def test_offline_run_with_a_table_needs_no_writable_home(tmp_path):
    """A logged table is staged in W&B's data directory, by default under HOME: with HOME unwritable that failed the
    analyze stage (issue 43). Now W&B's working directories are inside the project's wandb/."""
    root = tmp_path / "project"
    proc = run_python(WRITE_RUN.format(mode="offline", root=root), tmp_path, HOME=str(unwritable_home(tmp_path)),
                      WANDB_MODE="offline")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir,) = (root / "wandb").glob("offline-run-*")
    assert list(run_dir.glob("*.wandb")) and (root / "wandb" / SERVICE_DIR / "data").is_dir()
    assert sorted(p.name for p in (root / "wandb" / SERVICE_DIR).iterdir()) == ["artifacts", "cache", "config", "data"]


def test_directories_the_user_set_are_kept_and_config_stays_online(tmp_path):
    dirs = wandb_directories(tmp_path, "offline", {"WANDB_CACHE_DIR": "/elsewhere/cache"})
    assert dirs == {"WANDB_DIR": tmp_path / "wandb", "WANDB_DATA_DIR": tmp_path / "wandb" / SERVICE_DIR / "data",
                    "WANDB_CACHE_DIR": Path("/elsewhere/cache"),
                    "WANDB_ARTIFACT_DIR": tmp_path / "wandb" / SERVICE_DIR / "artifacts",
                    "WANDB_CONFIG_DIR": tmp_path / "wandb" / SERVICE_DIR / "config"}
    assert "WANDB_CONFIG_DIR" not in wandb_directories(tmp_path, "online", {})  # the user's host settings are read


def test_init_timeout_is_short_and_can_be_set(monkeypatch):
    monkeypatch.delenv("WANDB_INIT_TIMEOUT", raising=False)
    assert settings(wandb, "offline").init_timeout == INIT_TIMEOUT_S == 30.0  # W&B's own default: 90 s
    monkeypatch.setenv("WANDB_INIT_TIMEOUT", "5")
    assert settings(wandb, "online").init_timeout == 5.0
    monkeypatch.setenv("WANDB_INIT_TIMEOUT", "soon")
    with pytest.raises(ConfigError, match=r"WANDB_INIT_TIMEOUT must be a number of seconds > 0, got 'soon'"):
        init_timeout()


@pytest.fixture
def online(tmp_path, monkeypatch):
    """W&B online in this process, with nothing of the user's: HOME, the W&B directories and the runs in tmp_path."""
    for var in WANDB_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{closed_port()}")
    end_service()  # W&B keeps a service and the session's credentials per process: none from an earlier test
    yield tmp_path / "project"
    end_service()


def _open_online(root: Path, name: str) -> str:
    """The line a stage dies of when it opens a run online (as its traceback's last line prints it)."""
    from empriv.infra.tracking import SecretScrubber, open_run

    with pytest.raises(ConfigError) as info:
        open_run(project="p", group="g", name=name, section="score", mode="online", scrub=SecretScrubber(), root=root)
    return f"{type(info.value).__module__}.{type(info.value).__qualname__}: {info.value}"


def test_online_without_a_reachable_host_fails_once_in_one_line(online, monkeypatch):
    """A dummy key and a host that refuses the connection: W&B's own default waits 90 s per attempt and the sweep
    retried it 3 times. Now the start-up limit ends it, as a ConfigError the sweep does not retry."""
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    monkeypatch.setenv("WANDB_INIT_TIMEOUT", "3")
    url = os.environ["WANDB_BASE_URL"]
    start = time.monotonic()
    line = _open_online(online, "unreachable")
    assert time.monotonic() - start < 30
    assert line == (f"empriv.config.errors.ConfigError: runtime.wandb_mode: online, but W&B could not start: the W&B "
                    f"host {url} cannot be reached (connection refused) (allowed: an API key — `wandb login` or "
                    "WANDB_API_KEY — and a reachable host, or runtime.wandb_mode: offline / WANDB_MODE=offline, then "
                    "`wandb sync` later)")
    cause = deterministic_cause("RuntimeError: score@x: command failed (exit status 1) on attempt 1", [line])
    assert cause is not None and "W&B could not start" in cause  # failed once, not retried


def test_online_without_an_api_key_fails_in_one_line(online):
    assert _open_online(online, "no-key").startswith("empriv.config.errors.ConfigError: runtime.wandb_mode: online, but W&B "
                                           "could not start: No API key configured")


def _service_of(pid: int) -> int | None:
    """The pid of the wandb-core started by process ``pid`` (it is given ``--pid <pid>``), or None."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            args = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if args and args[0].endswith(b"wandb-core") and b"--pid" in args and \
                args[args.index(b"--pid") + 1] == str(pid).encode():
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            if state != "Z":
                return int(entry.name)
    return None


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="needs /proc")
def test_wandb_core_ends_with_a_killed_stage_and_with_the_offline_writing(tmp_path):
    """A stage writing a run live (online, or EMPRIV_WANDB_LIVE) has W&B's service running beside it: a SIGKILL of
    the stage — what the sweep does to a command that will not stop — must not leave the service behind. And the
    offline writing of the analyze stage ends its service when it is done, not when the process exits."""
    root = tmp_path / "project"
    code = ("import os, sys, time\n"
            "from empriv.infra.tracking import SecretScrubber, open_run\n"
            f"t = open_run(project='p', group='g', name='n', section='train', mode='offline', scrub=SecretScrubber(), "
            f"root='{root}')\n"
            "t.log({'train/step': 1})\n"
            "print('ready', flush=True)\n"
            "time.sleep(120)\n")
    env = {k: v for k, v in os.environ.items() if k not in WANDB_VARS and not k.startswith(("EMPRIV_", "DVC_"))}
    env.update(WANDB_SILENT="true", WANDB_MODE="offline", EMPRIV_WANDB_LIVE="1", HOME=str(tmp_path))
    stage = subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert stage.stdout.readline().strip() == "ready"
        service = _service_of(stage.pid)
        assert service is not None
        stage.send_signal(signal.SIGKILL)
        stage.wait(timeout=30)
        deadline = time.monotonic() + 20
        while _service_of(stage.pid) is not None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _service_of(stage.pid) is None, f"wandb-core {service} outlived the killed stage"
    finally:
        if stage.poll() is None:
            stage.kill()
    code = WRITE_RUN.format(mode="offline", root=root) + "import sys\nprint('written', flush=True)\nsys.stdin.readline()\n"
    env.pop("EMPRIV_WANDB_LIVE")
    writer = subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, env=env, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        out = [writer.stdout.readline().strip(), writer.stdout.readline().strip()]
        assert out[1] == "written" and out[0].startswith("["), out
        assert _service_of(writer.pid) is None  # the process lives on; its W&B service does not
    finally:
        writer.communicate("\n", timeout=60)


INHERITING_CHILD = """
import os
from empriv.infra.tracking import SecretScrubber, local_copies, open_run, write_offline_runs
from empriv.infra.tracking.transaction_log import finished_records, transaction_log_of
inherited = os.environ["WANDB_SERVICE"]
copies, finished = [], []
for section in ("train", "score"):
    with open_run(project="p", group="g", name="child", section=section, mode="offline", scrub=SecretScrubber(),
                  root="{root}") as t:
        t.summary({{section: 1.0}})
    (rid,) = write_offline_runs("{root}")
    # what this process wrote is finished when write_offline_runs returns, though the service was not its own to end
    (copy,) = local_copies("{root}", rid)
    finished.append(finished_records(transaction_log_of(copy)) is not None)
    copies.append(copy)
print(copies[0] != copies[1], copies[0].exists(), finished, os.environ.get("WANDB_SERVICE") == inherited)
"""


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="needs /proc")
def test_offline_writing_with_a_service_inherited_from_the_parent_leaves_finished_copies(tmp_path):
    """W&B names its service in WANDB_SERVICE, so a process started by one that runs W&B connects to its parent's
    service. ``end_service`` cannot end that service (the parent's runs use it): it returns without W&B having
    written this process's logs. write_offline_runs waits for each new copy all the same: when it returns, the copy
    is finished and the older one gone; and the parent's service lives on."""
    root = tmp_path / "project"
    parent = ("import os, subprocess, sys\n"
              "from empriv.infra.tracking import SecretScrubber, open_run\n"
              f"t = open_run(project='p', group='g', name='parent', section='train', mode='offline', "
              f"scrub=SecretScrubber(), root='{root}')\n"
              "t.log({'train/step': 1})\n"
              "assert os.environ.get('WANDB_SERVICE')\n"
              "env = {k: v for k, v in os.environ.items() if k != 'EMPRIV_WANDB_LIVE'}\n"
              f"child = subprocess.run([sys.executable, '-c', {INHERITING_CHILD.format(root=root)!r}], env=env, "
              "capture_output=True, text=True)\n"
              "print(child.stdout.strip() or child.stderr[-2000:])\n"
              "t.finish()\n"
              "print('parent finished', flush=True)\n")
    proc = run_python(parent, tmp_path, WANDB_MODE="offline", EMPRIV_WANDB_LIVE="1", HOME=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines() == ["True False [True, True] True", "parent finished"], proc.stdout
