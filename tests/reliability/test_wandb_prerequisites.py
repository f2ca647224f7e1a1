"""Issue 43, the W&B rows: `empriv validate` (the first step of `make repro`) stops on W&B online without an API key
or a reachable host, and on an unwritable W&B directory, in one line and before any output is touched; offline with
an unwritable HOME passes."""

from __future__ import annotations

import socket

from reliability_project import snapshot


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_online_without_a_reachable_host_stops_validate(project, tmp_path):
    url = f"http://127.0.0.1:{_closed_port()}"
    before = snapshot(project.root)
    line = project.fails_with_one_line(project.validate(WANDB_MODE="online", WANDB_API_KEY="k" * 40,
                                                        WANDB_BASE_URL=url, HOME=str(tmp_path)), before)
    assert line.startswith(f"error: WANDB_MODE: online, but the W&B host {url} cannot be reached (")
    assert line.endswith("or runtime.wandb_mode: offline (WANDB_MODE=offline), then `wandb sync` the runs later)")
    assert "k" * 40 not in line


def test_offline_with_an_unwritable_home_passes_and_an_unwritable_run_directory_stops(project, tmp_path):
    home = tmp_path / "home-is-a-file"
    home.write_text("x\n")
    proc = project.validate(HOME=str(home))
    assert proc.returncode == 0, proc.stderr
    before = snapshot(project.root)
    line = project.fails_with_one_line(project.validate(EMPRIV_WANDB_DIR=str(home / "runs")), before)
    assert line.startswith(f"error: runtime.wandb_mode: offline, but W&B cannot write {home / 'runs' / 'wandb'} "
                           "(WANDB_DIR): Not a directory")
