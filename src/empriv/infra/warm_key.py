"""Which warm server serves a process, and where it listens: the settings (environment variables, the modules it
pre-imports), the server's key and the socket's path. Standard library only: the client imports it
(:mod:`empriv.infra.warm` describes the whole)."""

from __future__ import annotations

import os
import sys

SWITCH_ENV = "EMPRIV_WARM"
DIR_ENV = "EMPRIV_WARM_DIR"
IDLE_ENV = "EMPRIV_WARM_IDLE"
START_TIMEOUT_ENV = "EMPRIV_WARM_START_TIMEOUT"
PRELOAD_ENV = "EMPRIV_WARM_PRELOAD"
DEFAULT_IDLE_S = 300.0
DEFAULT_START_TIMEOUT_S = 180.0
LOG_NAME = "server.log"
LOG_ROTATE_BYTES = 2_000_000
SOURCES = ("warm.py", "warm_key.py", "warm_server.py", "warm_worker.py")  # the warm worker's modules

#: Third-party modules the server imports once (what the train/score/audit stages use; transformers loads its
#: models lazily, so the model modules are named). Never empriv's own modules; never polars (threads at import).
PRELOAD = (
    "numpy", "numpy.lib.stride_tricks",
    "scipy", "scipy.special", "scipy.stats", "scipy.fft",
    "torch", "torch.nn.functional",
    "safetensors.torch",
    "tokenizers",
    "transformers", "transformers.modeling_utils", "transformers.pytorch_utils", "transformers.masking_utils",
    "transformers.models.gpt2.modeling_gpt2", "transformers.models.llama.modeling_llama",
    "transformers.generation.utils",
    "peft", "peft.utils.constants",
    "opacus", "opacus.optimizers", "opacus.grad_sample.utils", "opacus.accountants.analysis",
    "dp_accounting.pld",
    "ruamel.yaml", "yaml", "pydantic", "tqdm",
)

#: Environment variables that libraries or the interpreter read at start-up or import time: part of the key.
KEY_ENV_PREFIXES = ("PYTHON", "LC_", "LANG", "HOME", "TMPDIR", "TEMP", "TMP", "XDG_", "OMP_", "MKL_", "OPENBLAS_",
                    "GOTO", "KMP_", "GOMP_", "TORCH", "PYTORCH", "CUDA", "NVIDIA", "HF_", "HUGGINGFACE",
                    "TRANSFORMERS", "TOKENIZERS", "SAFETENSORS", "NUMPY", "SCIPY", "LD_", "MALLOC", "OPACUS",
                    "PEFT", "TQDM", "DP_", "ATEN_", "DNNL_", "ONEDNN_")


def preload_modules(environ=None) -> tuple[str, ...]:
    """The modules a server pre-imports: :data:`PRELOAD`, or the comma-separated list in ``EMPRIV_WARM_PRELOAD``
    (empty: none)."""
    env = os.environ if environ is None else environ
    if PRELOAD_ENV not in env:
        return PRELOAD
    return tuple(m.strip() for m in env[PRELOAD_ENV].split(",") if m.strip())


def interpreter_options() -> list[str]:
    """The interpreter's own options of this process (what came before ``-m``), to give the server the same."""
    orig = list(getattr(sys, "orig_argv", []) or [])
    if "-m" in orig[1:]:
        return orig[1:orig.index("-m", 1)]
    return []


def _site_dirs() -> list[str]:
    return sorted({p for p in sys.path if p and os.path.basename(p) in ("site-packages", "dist-packages")
                   and os.path.isdir(p)})


def server_key(environ=None) -> str:
    """16 hex digits naming the server that can serve this process: equal keys see the same imported libraries."""
    import hashlib

    env = os.environ if environ is None else environ
    h = hashlib.sha256()

    def add(*parts) -> None:
        for part in parts:
            h.update(repr(part).encode("utf-8", "surrogateescape"))
            h.update(b"\0")

    add(os.uname().nodename,  # a socket on a shared file system is reachable only from the host that bound it
        sys.version, sys.executable, os.path.realpath(sys.executable), sys.prefix, sys.base_prefix,
        tuple(sys.flags), sorted(sys.warnoptions), sorted(getattr(sys, "_xoptions", {}).items()),
        interpreter_options(), preload_modules(env))
    add(sorted((k, v) for k, v in env.items() if k.startswith(KEY_ENV_PREFIXES)))
    for site in _site_dirs():
        with os.scandir(site) as entries:
            add(site, sorted((e.name, e.stat(follow_symlinks=False).st_mtime_ns) for e in entries
                             if e.name.endswith((".dist-info", ".egg-info", ".pth", ".egg-link"))))
    for name in SOURCES:  # the warm worker's own code: an edit gets a new server
        try:
            with open(os.path.join(os.path.dirname(__file__), name), "rb") as fh:
                h.update(fh.read())
        except OSError:
            pass
    return h.hexdigest()[:16]


def warm_dir(cwd: str | None = None, environ=None) -> str:
    """Where the sockets, locks and log live: ``$EMPRIV_WARM_DIR``, else ``<repository>/.empriv/warm``."""
    env = os.environ if environ is None else environ
    if env.get(DIR_ENV):
        return os.path.abspath(env[DIR_ENV])
    start = os.path.abspath(cwd or os.getcwd())
    d = start
    while True:
        if os.path.isdir(os.path.join(d, ".dvc")) or os.path.exists(os.path.join(d, ".git")):
            return os.path.join(d, ".empriv", "warm")
        parent = os.path.dirname(d)
        if parent == d:
            return os.path.join(start, ".empriv", "warm")
        d = parent


def socket_path(cwd: str | None = None, environ=None) -> str:
    return os.path.join(warm_dir(cwd, environ), server_key(environ) + ".sock")


def short_address(path: str) -> tuple[str, int | None]:
    """A Unix socket address for ``path`` (at most 107 bytes): through ``/proc/self/fd`` when the path is longer."""
    if len(os.fsencode(path)) < 100:
        return path, None
    fd = os.open(os.path.dirname(path), os.O_RDONLY | getattr(os, "O_PATH", 0) | getattr(os, "O_DIRECTORY", 0))
    return f"/proc/self/fd/{fd}/{os.path.basename(path)}", fd
