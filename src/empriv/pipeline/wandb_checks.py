"""W&B's prerequisites, checked by ``empriv validate`` before any output is touched (issue 43): one line per problem.

- **offline** (the default): every directory W&B writes must be writable — the runs' ``<root>/wandb`` and W&B's
  working directories (``empriv.infra.tracking.service``: inside the project unless the user set their variables);
  a read-only HOME no longer matters.
- **online**: an API key (``WANDB_API_KEY``, ``WANDB_IDENTITY_TOKEN_FILE``, or the host's entry in ``~/.netrc`` that
  ``wandb login`` writes) and a host that accepts a connection (``WANDB_BASE_URL``, the W&B settings file, or W&B's
  default; through ``HTTPS_PROXY`` when one is set) within :data:`CONNECT_TIMEOUT_S`. Each missing prerequisite is
  one line that suggests offline mode. The key's value is never printed.
- **disabled**: nothing.

The mode is ``WANDB_MODE`` when set (it wins, as in the stages), else ``runtime.wandb_mode``.
"""

from __future__ import annotations

import configparser
import os
import socket
from pathlib import Path
from urllib.parse import urlsplit

from empriv.config import Params
from empriv.io import unwritable_reason

#: seconds to wait for the W&B host (or the proxy) to accept a TCP connection
CONNECT_TIMEOUT_S = 3.0
MODES = ("offline", "online", "disabled")
_OFFLINE_HINT = "or runtime.wandb_mode: offline (WANDB_MODE=offline), then `wandb sync` the runs later"


def wandb_mode(params: Params, environ=None) -> tuple[str, str]:
    """(the mode the stages will use, where it comes from)."""
    environ = os.environ if environ is None else environ
    if environ.get("WANDB_MODE"):
        return environ["WANDB_MODE"], "WANDB_MODE"
    return params.runtime.wandb_mode, "runtime.wandb_mode"


def directory_errors(root: Path, mode: str, environ=None) -> list[str]:
    from empriv.infra.tracking.service import unwritable_line, wandb_directories

    errors, failed = [], []
    for var, path in wandb_directories(root, mode, environ).items():
        if any(path.is_relative_to(f) for f in failed):
            continue  # inside a directory already named
        reason = unwritable_reason(path)
        if reason is None:
            continue
        failed.append(path)
        errors.append(unwritable_line(var, path, root, mode, reason))
    return errors


def base_url(root: Path, environ=None) -> str:
    """The W&B host the stages would use: WANDB_BASE_URL, else the workspace's or the user's W&B settings file
    (``base_url`` of its ``[default]`` section), else W&B's default."""
    environ = os.environ if environ is None else environ
    if environ.get("WANDB_BASE_URL"):
        return environ["WANDB_BASE_URL"].rstrip("/")
    config_dir = environ.get("WANDB_CONFIG_DIR") or str(Path("~/.config/wandb").expanduser())
    for settings_file in (root / "wandb" / "settings", Path(config_dir) / "settings"):
        parser = configparser.ConfigParser()
        try:
            parser.read(settings_file)
        except (OSError, configparser.Error):
            continue
        if parser.get("default", "base_url", fallback=None):
            return parser.get("default", "base_url").rstrip("/")
    from wandb.sdk.lib.urls import DEFAULT_BASE_URL

    return DEFAULT_BASE_URL


def has_api_key(url: str, environ=None) -> bool:
    """Whether W&B would find credentials for ``url``: WANDB_API_KEY or WANDB_IDENTITY_TOKEN_FILE, or a password for
    the host in the .netrc file W&B reads (``$NETRC``, else ``~/.netrc``; also under W&B's upstream name of a host)."""
    import netrc

    from wandb.sdk.lib import urls

    environ = os.environ if environ is None else environ
    if environ.get("WANDB_API_KEY") or environ.get("WANDB_IDENTITY_TOKEN_FILE"):
        return True
    home = environ.get("HOME") or str(Path.home())
    path = Path(environ["NETRC"]).expanduser() if environ.get("NETRC") else Path(home) / ".netrc"
    try:
        entries = netrc.netrc(str(path))
    except (OSError, netrc.NetrcParseError):
        return False  # W&B, too, reads no key from a missing or unreadable file
    upstream = getattr(urls, "forge_upstream_url", lambda u: u)(url)
    for candidate in dict.fromkeys([url, upstream]):
        found = entries.authenticators(urlsplit(candidate).netloc)
        if found and found[2]:
            return True
    return False


def _proxy_for(url: str, environ) -> str | None:
    parts = urlsplit(url)
    no_proxy = [h.strip().lstrip(".") for h in (environ.get("no_proxy") or environ.get("NO_PROXY") or "").split(",")]
    if parts.hostname and any(h and (parts.hostname == h or parts.hostname.endswith("." + h)) for h in no_proxy):
        return None
    scheme = parts.scheme or "https"
    return environ.get(f"{scheme}_proxy") or environ.get(f"{scheme.upper()}_PROXY") or None


def unreachable(url: str, environ=None, timeout: float = CONNECT_TIMEOUT_S) -> str | None:
    """Why ``url``'s host (or the proxy in front of it) accepts no TCP connection within ``timeout``, or None."""
    environ = os.environ if environ is None else environ
    proxy = _proxy_for(url, environ)
    target = urlsplit(proxy if "://" in (proxy or "") else f"http://{proxy}") if proxy else urlsplit(url)
    host, port = target.hostname, target.port or (443 if target.scheme == "https" else 80)
    if not host:
        return f"{url!r} names no host"
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except socket.gaierror:
        return f"{host} does not resolve" + (" (the proxy)" if proxy else "")
    except TimeoutError:
        return f"{host}:{port} did not answer within {timeout:g} s" + (" (the proxy)" if proxy else "")
    except OSError as err:
        return f"{host}:{port}: {err.strerror or type(err).__name__}" + (" (the proxy)" if proxy else "")


def wandb_errors(params: Params, root: str | Path, environ=None) -> list[str]:
    """One line per missing W&B prerequisite of the mode the stages will use (module doc); ``root``: the project
    root whose ``wandb/`` keeps the runs ($EMPRIV_WANDB_DIR wins, as in the stages)."""
    environ = os.environ if environ is None else environ
    mode, source = wandb_mode(params, environ)
    if mode not in MODES:
        return [f"{source}: unknown W&B mode {mode!r} (allowed: {', '.join(MODES)})"]
    if mode == "disabled":
        return []
    root = Path(environ["EMPRIV_WANDB_DIR"]).expanduser() if environ.get("EMPRIV_WANDB_DIR") else Path(root)
    errors = directory_errors(root.resolve(), mode, environ)
    if mode == "online":  # what is missing, in one line
        url, missing = base_url(root, environ), []
        if not has_api_key(url, environ):
            missing.append(f"no W&B API key for {url} (no WANDB_API_KEY, no entry in ~/.netrc)")
        why = unreachable(url, environ)
        if why is not None:
            missing.append(f"the W&B host {url} cannot be reached ({why})")
        if missing:
            errors.append(f"{source}: online, but {' and '.join(missing)} (allowed: an API key from `wandb login` or "
                          f"WANDB_API_KEY and a reachable host, WANDB_BASE_URL naming your server; {_OFFLINE_HINT})")
    return errors
