"""empriv.pipeline.wandb_checks (issue 43): what `empriv validate` says about W&B before any output is touched —
offline needs writable W&B directories (HOME does not matter any more), online an API key and a host that accepts
a connection; one line each, suggesting offline. Real directories and sockets."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from empriv.config import parse_params
from empriv.infra.tracking.service import SERVICE_DIR
from empriv.pipeline.wandb_checks import unreachable, wandb_errors

CUBE = {"epsilon": [8], "batch_size": [8], "steps": [1], "learning_rate": [0.01], "seed": [0]}
PARAMS = parse_params({"cube": CUBE})


def unwritable(tmp_path: Path) -> Path:
    """A path nothing can be created under: below a regular file (root ignores permissions)."""
    blocker = tmp_path / "a-file"
    blocker.write_text("x\n")
    return blocker / "dir"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_offline_needs_only_the_project(tmp_path):
    env = {"HOME": str(unwritable(tmp_path)), "WANDB_MODE": "offline"}
    assert wandb_errors(PARAMS, tmp_path, env) == []
    assert (tmp_path / "wandb" / SERVICE_DIR / "data").is_dir()  # created, as W&B would
    assert wandb_errors(PARAMS, tmp_path, {"WANDB_MODE": "disabled", "EMPRIV_WANDB_DIR": str(unwritable(tmp_path))}) == []


def test_offline_names_each_unwritable_directory(tmp_path):
    bad = unwritable(tmp_path)
    (line,) = wandb_errors(PARAMS, tmp_path, {"EMPRIV_WANDB_DIR": str(bad)})
    assert line.startswith(f"runtime.wandb_mode: offline, but W&B cannot write {bad.resolve() / 'wandb'} (WANDB_DIR): "
                           "Not a directory (allowed: a writable project directory, or EMPRIV_WANDB_DIR naming a "
                           "writable directory for the runs; or runtime.wandb_mode: disabled)"), line
    (line,) = wandb_errors(PARAMS, tmp_path, {"WANDB_DATA_DIR": str(bad)})
    assert line == (f"runtime.wandb_mode: offline, but W&B cannot write {bad} (WANDB_DATA_DIR): Not a directory "
                    f"(allowed: a writable directory, or WANDB_DATA_DIR unset (W&B then uses "
                    f"{tmp_path / 'wandb' / SERVICE_DIR}); or runtime.wandb_mode: disabled)")


def test_online_without_key_or_host_is_one_line_suggesting_offline(tmp_path):
    url = f"http://127.0.0.1:{closed_port()}"
    env = {"WANDB_MODE": "online", "WANDB_BASE_URL": url, "NETRC": str(tmp_path / "no-netrc")}
    (line,) = wandb_errors(PARAMS, tmp_path, env)
    assert line == (f"WANDB_MODE: online, but no W&B API key for {url} (no WANDB_API_KEY, no entry in ~/.netrc) and "
                    f"the W&B host {url} cannot be reached (127.0.0.1:{url.rsplit(':', 1)[1]}: Connection refused) "
                    "(allowed: an API key from `wandb login` or WANDB_API_KEY and a reachable host, WANDB_BASE_URL "
                    "naming your server; or runtime.wandb_mode: offline (WANDB_MODE=offline), then `wandb sync` the "
                    "runs later)")
    online = parse_params({"cube": CUBE, "runtime": {"wandb_mode": "online"}})
    (line,) = wandb_errors(online, tmp_path, {**env, "WANDB_MODE": "", "WANDB_API_KEY": "k" * 40})
    assert line.startswith(f"runtime.wandb_mode: online, but the W&B host {url} cannot be reached (")


def test_online_with_a_netrc_key_and_a_listening_host_passes(tmp_path):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        url = f"http://127.0.0.1:{server.getsockname()[1]}"
        netrc = tmp_path / "netrc"
        netrc.write_text(f"machine 127.0.0.1:{server.getsockname()[1]}\n  login user\n  password {'k' * 40}\n")
        netrc.chmod(0o600)
        assert wandb_errors(PARAMS, tmp_path, {"WANDB_MODE": "online", "WANDB_BASE_URL": url,
                                               "NETRC": str(netrc)}) == []
        # through a proxy: the proxy is what must answer
        proxied = {"https_proxy": f"http://127.0.0.1:{closed_port()}"}
        assert "(the proxy)" in unreachable("https://api.example.invalid", proxied)
        assert unreachable("https://api.example.invalid", {"https_proxy": url}) is None


def test_an_unknown_mode_is_named(tmp_path):
    assert wandb_errors(PARAMS, tmp_path, {"WANDB_MODE": "sometimes"}) == [
        "WANDB_MODE: unknown W&B mode 'sometimes' (allowed: offline, online, disabled)"]


@pytest.mark.optional(reason="root writes through permissions; the Not a directory cases cover it")
@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through permissions; the Not a directory cases cover it")
def test_a_read_only_directory(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    (line,) = wandb_errors(PARAMS, tmp_path, {"WANDB_CACHE_DIR": str(ro / "cache")})
    assert "Permission denied" in line
