"""What W&B needs besides the runs' own directory: its working directories, how long it may take to start, and
how its failures read.

**Directories.** W&B writes outside ``<root>/wandb`` too: a staging copy of every table it logs
(``WANDB_DATA_DIR``, by default ``~/.local/share/wandb``), an artifact cache (``WANDB_CACHE_DIR``, ``~/.cache/wandb``),
its settings (``WANDB_CONFIG_DIR``, ``~/.config/wandb``) and downloaded artifacts (``WANDB_ARTIFACT_DIR``,
``./artifacts``). With a read-only or missing HOME the analyze stage failed on the staging directory (issue 43).
Each of these variables that the user has not set is pointed inside the project, under ``<root>/wandb/.service/``
(``wandb/`` is ignored by git and DVC); one the user set is left as it is. ``WANDB_CONFIG_DIR`` is moved only in
offline mode: online, the user's W&B settings (a custom host chosen by ``wandb login --host``) must still be read.
:func:`wandb_directories` says which directories a mode uses (``empriv validate`` checks that they are writable).

**Start.** ``wandb.init`` waits up to ``init_timeout`` (W&B's default: 90 s) for its service; a sweep retrying an
item made that minutes per item against an unreachable host. Here the limit is :data:`INIT_TIMEOUT_S`
(``WANDB_INIT_TIMEOUT`` overrides it).

**Failures a retry cannot fix** — online without an API key, a key W&B refuses, a host that does not resolve or
refuses the connection — become a :class:`~empriv.config.ConfigError` naming the mode and what is allowed: a stage
then ends with one ``error: …`` line and exit status 2, which the sweep does not retry.

**The service process** (``wandb-core``) is started by the first ``wandb.init`` of a process with that process's
pid, and ends when that process ends (it watches the pid), whatever ends it; :func:`end_service` ends it as soon as
a stage is done with W&B (a service inherited from a parent process is left to the parent).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

#: subdirectory of ``<root>/wandb`` holding W&B's own working directories
SERVICE_DIR = ".service"
#: seconds ``wandb.init`` may take (W&B's default is 90); the WANDB_INIT_TIMEOUT environment variable overrides it
INIT_TIMEOUT_S = 30.0

_DIRECTORIES = {"WANDB_DATA_DIR": "data", "WANDB_CACHE_DIR": "cache", "WANDB_ARTIFACT_DIR": "artifacts",
                "WANDB_CONFIG_DIR": "config"}
_ONLINE_KEEPS = ("WANDB_CONFIG_DIR",)  # online: the user's W&B settings (host) are read from there
_set_here: dict[str, str] = {}  # the variables this process pointed at a project (so that another root may move them)

# a wandb.init failure that the next attempt would meet again (matched against the exception's text)
_UNREACHABLE = re.compile(r"no such host|connection refused|network is unreachable|name or service not known|"
                          r"certificate", re.I)


def wandb_directories(root: str | Path, mode: str, environ=None) -> dict[str, Path]:
    """The directories W&B writes in ``mode`` (offline / online) with project root ``root``: ``WANDB_DIR`` (the runs,
    ``<root>/wandb``) and each working directory — the user's own value of its variable, or the project's."""
    environ = os.environ if environ is None else environ
    base = Path(root) / "wandb" / SERVICE_DIR
    out = {"WANDB_DIR": Path(root) / "wandb"}
    for var, name in _DIRECTORIES.items():
        if mode == "online" and var in _ONLINE_KEEPS:
            continue
        own = environ.get(var)
        out[var] = Path(own) if own and _set_here.get(var) != own else base / name
    return out


def unwritable_line(var: str, path: Path, root: Path, mode: str, reason: str) -> str:
    """The one line saying that W&B cannot write ``path`` (its directory ``var``) and what would do."""
    if var == "WANDB_DIR":
        fix = "a writable project directory, or EMPRIV_WANDB_DIR naming a writable directory for the runs"
    elif path.parent.name == SERVICE_DIR:
        fix = f"a writable {path.parent}, or {var} naming a writable directory"
    else:
        fix = f"a writable directory, or {var} unset (W&B then uses {Path(root) / 'wandb' / SERVICE_DIR})"
    return (f"runtime.wandb_mode: {mode}, but W&B cannot write {path} ({var}): {reason} (allowed: {fix}; or "
            "runtime.wandb_mode: disabled)")


def prepare_environment(root: str | Path, mode: str) -> dict[str, Path]:
    """Point W&B's working directories that the user has not set inside the project (module doc) and create them;
    returns :func:`wandb_directories`. Call before W&B starts its service (it inherits this environment). A
    directory that cannot be created raises a one-line ConfigError (:func:`unwritable_line`)."""
    from empriv.config import ConfigError

    dirs = wandb_directories(root, mode)
    for var, path in dirs.items():
        if var in _DIRECTORIES and (os.environ.get(var) in (None, "", _set_here.get(var))):
            os.environ[var] = _set_here[var] = str(path)
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise ConfigError(unwritable_line(var, path, Path(root), mode, err.strerror or type(err).__name__)) from err
    return dirs


def init_timeout(environ=None) -> float:
    """Seconds ``wandb.init`` may take: ``WANDB_INIT_TIMEOUT`` when set, else :data:`INIT_TIMEOUT_S`."""
    from empriv.config import ConfigError

    raw = (os.environ if environ is None else environ).get("WANDB_INIT_TIMEOUT")
    if raw in (None, ""):
        return INIT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not value > 0:
        raise ConfigError(f"WANDB_INIT_TIMEOUT must be a number of seconds > 0, got {raw!r}")
    return value


def settings(wandb, mode: str):
    """The ``wandb.Settings`` of every run: nothing but what the run logs (no git state, code, console, system
    statistics or machine metadata), and the start-up limit of :func:`init_timeout`."""
    return wandb.Settings(
        mode=mode, disable_git=True, save_code=False, console="off", silent=True, allow_val_change=True,
        x_disable_stats=True, x_disable_meta=True, x_disable_machine_info=True, x_save_requirements=False,
        init_timeout=init_timeout(),
    )


def deterministic_failure(err: BaseException, mode: str) -> str | None:
    """The one line of a ``wandb.init`` failure that another attempt would meet again, or None."""
    kind = type(err).__name__
    text = " ".join(str(err).split())
    module = type(err).__module__ or ""
    if not module.startswith("wandb"):
        return None
    if kind in ("UsageError", "AuthenticationError"):
        reason = text.split(". ")[0][:200]
    elif kind == "CommError" and _UNREACHABLE.search(text):
        host = re.search(r'"(https?://[^"/]+)', text)
        where = f"the W&B host {host.group(1)}" if host else "the W&B host"
        reason = f"{where} cannot be reached ({_UNREACHABLE.search(text).group(0).lower()})"
    else:
        return None
    return (f"runtime.wandb_mode: {mode}, but W&B could not start: {reason} (allowed: an API key — `wandb login` or "
            "WANDB_API_KEY — and a reachable host, or runtime.wandb_mode: offline / WANDB_MODE=offline, then "
            "`wandb sync` later)")


def end_service() -> None:
    """End this process's W&B service (``wandb-core``) now, if it runs; the next ``wandb.init`` starts another.
    Ending it makes it write and close the transaction log of every run it holds.

    A service *inherited* through ``WANDB_SERVICE`` (W&B puts its service's address there, so a child process
    started after a ``wandb.init`` connects to its parent's service) is not this process's to end — the parent's
    runs use it, and it ends with the parent: ``wandb.teardown()`` then closes the connection only, and returns
    without waiting for the logs of this process's runs. Code that needs a finished log waits for it
    (:func:`~empriv.infra.tracking.journal.retire_older_copies`), whoever's service writes it."""
    import sys

    wandb = sys.modules.get("wandb")
    if wandb is not None and hasattr(wandb, "teardown"):
        wandb.teardown()
