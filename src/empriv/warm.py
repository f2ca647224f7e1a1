"""A warm worker for stage processes: ``python -m empriv.warm <module> [args...]`` runs ``python -m <module> [args...]``
in a process forked from a server that has already imported the heavy third-party libraries.

Every matrix item of ``dvc.yaml`` is its own stage process (so DVC caches each item on its own), and each of them
used to import torch, transformers, opacus and peft from scratch (~3.5 s on the 2-core machine). With this module
as the stage command's prefix the item is still its own process and its own DVC stage, but the imports are paid
once per server, not once per item.

How it works (Linux only; anything else runs the module directly, see below):

* The **client** (this module's ``main``) is small on purpose: it imports only the standard library modules it
  needs (no torch, nothing from empriv but the empty package ``empriv/__init__.py``). It connects to a Unix socket
  ``.empriv/warm/<key>.sock`` in the repository (the nearest directory above the working directory holding
  ``.dvc`` or ``.git``; ``EMPRIV_WARM_DIR`` names another directory). ``<key>`` hashes the host name (a socket
  on a shared file system serves only the host that bound it) and what the imported libraries depend on: the
  interpreter, its options, the virtual environment, the name and mtime of every installed
  distribution, the environment variables read at import time (``PYTHON*``, ``LC_*``, ``HOME``, ``OMP_*``,
  ``HF_*``, ...) and this file's own source. A client whose key differs gets a server of its own.
* If no server answers, the client starts one (``python -m empriv.warm --serve``, detached in its own session,
  output appended to ``server.log`` beside the socket) and connects as soon as it listens.
* The client sends its module, arguments, working directory, environment, ``sys.path`` and umask, and its
  stdin/stdout/stderr file descriptors (``SCM_RIGHTS``), then waits. SIGINT, SIGTERM and SIGHUP it receives are
  forwarded to the worker; if the client disappears (SIGKILL), the server kills the worker. The client exits with
  the worker's status (a worker killed by a signal makes the client kill itself with the same signal).
* The **server** imports the third-party libraries of :data:`PRELOAD` once — never a module of empriv, so edited
  project code is read fresh by every run — and forks one worker per request. The worker takes the client's
  descriptors, directory, environment, ``sys.path`` and umask, forgets every ``empriv`` module the server had
  loaded, re-seeds the generators a fresh process would seed from entropy (numpy's global one, torch's default
  generator; Python's ``random`` re-seeds itself after a fork), adds the variables the pre-imports put in the
  environment where the client's lacks them (transformers sets ``TORCHINDUCTOR_CACHE_DIR`` on import, as it does in
  every model stage), runs the module as ``__main__`` (``runpy``) and
  exits as ``python -m`` would: ``SystemExit`` codes kept, an uncaught exception printed with its traceback on the
  client's stderr and status 1, ``KeyboardInterrupt`` ends it by SIGINT.
* Fork safety: the server runs no torch operation, so torch's intra-op thread pool (OpenMP) does not exist when it
  forks; the worker creates it when the stage sets its thread count, as a fresh process does. Libraries that start
  threads at import which do not survive a fork (polars: jemalloc and spill-cleaning threads) are not pre-imported.
  The server logs its thread count after pre-importing.
* ``EMPRIV_WARM_PRELOAD`` (comma-separated modules; part of the key) replaces :data:`PRELOAD`.
* The server exits after :data:`DEFAULT_IDLE_S` seconds without a request (``EMPRIV_WARM_IDLE`` when it starts),
  when its socket file is removed or replaced, or on SIGTERM — after its running workers have finished. A worker
  dies with its server (``PR_SET_PDEATHSIG``); its client then reports one line and exits 1.

``EMPRIV_WARM=0`` makes the client run the module directly (``exec python -m <module> ...``, one line on stderr
saying why); so does anything that makes the warm path unavailable before a worker started (not Linux, no Unix
sockets, a directory that cannot be written, a server that did not come up).

What differs from a fresh process: warnings emitted while the server imported the libraries go to
``server.log``, not to each run; the worker has the server's session (no controlling terminal), resource limits
and nice value; Python's string hash seed is the server's (fixed per server, random per server).
"""

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
PROG = "empriv.warm"

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
                    "PEFT", "TQDM", "DP_")

_LEN = 4  # request length prefix: 4 bytes, big-endian


def preload_modules(environ=None) -> tuple[str, ...]:
    """The modules a server pre-imports: :data:`PRELOAD`, or the comma-separated list in ``EMPRIV_WARM_PRELOAD``
    (empty: none)."""
    env = os.environ if environ is None else environ
    if PRELOAD_ENV not in env:
        return PRELOAD
    return tuple(m.strip() for m in env[PRELOAD_ENV].split(",") if m.strip())


class WarmUnavailable(RuntimeError):
    """The warm path cannot be used for this call (the reason is its message); the module runs directly."""


# ----------------------------------------------------------------------------------------------------- the key

def _interpreter_options() -> list[str]:
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
        _interpreter_options(), preload_modules(env))
    add(sorted((k, v) for k, v in env.items() if k.startswith(KEY_ENV_PREFIXES)))
    for site in _site_dirs():
        with os.scandir(site) as entries:
            add(site, sorted((e.name, e.stat(follow_symlinks=False).st_mtime_ns) for e in entries
                             if e.name.endswith((".dist-info", ".egg-info", ".pth", ".egg-link"))))
    try:
        with open(__file__, "rb") as fh:
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


def _short_address(path: str) -> tuple[str, int | None]:
    """A Unix socket address for ``path`` (at most 107 bytes): through ``/proc/self/fd`` when the path is longer."""
    if len(os.fsencode(path)) < 100:
        return path, None
    fd = os.open(os.path.dirname(path), os.O_RDONLY | getattr(os, "O_PATH", 0) | getattr(os, "O_DIRECTORY", 0))
    return f"/proc/self/fd/{fd}/{os.path.basename(path)}", fd


# ---------------------------------------------------------------------------------------------------- the client

def _unavailable_reason(environ=None) -> str | None:
    env = os.environ if environ is None else environ
    if env.get(SWITCH_ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        return f"{SWITCH_ENV}={env[SWITCH_ENV]}"
    if not sys.platform.startswith("linux"):
        return f"the warm worker needs Linux (this is {sys.platform})"
    import socket

    if not hasattr(socket, "AF_UNIX") or not hasattr(socket, "send_fds") or not hasattr(os, "fork"):
        return "no Unix sockets with descriptor passing or no fork() on this platform"
    return None


def run_directly(module: str, args: list[str], reason: str) -> int:
    """Replace this process by ``python -m module args`` (same interpreter and options), saying why on stderr."""
    print(f"{PROG}: running {module} directly ({reason})", file=sys.stderr, flush=True)
    sys.stdout.flush()
    argv = [sys.executable, *_interpreter_options(), "-m", module, *args]
    try:
        os.execv(sys.executable, argv)
    except OSError as err:
        print(f"{PROG}: cannot run {sys.executable}: {err}", file=sys.stderr)
    return 127


def _connect(path: str):
    """A connected socket, or None when nothing listens at ``path``."""
    import socket

    if not os.path.exists(path):
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dirfd = None
    try:
        address, dirfd = _short_address(path)
        sock.connect(address)
        return sock
    except (FileNotFoundError, ConnectionRefusedError, NotADirectoryError):
        sock.close()
        return None
    except OSError as err:
        sock.close()
        raise WarmUnavailable(f"cannot connect to {path}: {err.strerror or err}") from None
    finally:
        if dirfd is not None:
            os.close(dirfd)


def _start_server(path: str):
    """Start a detached server for ``path``; returns its Popen."""
    import subprocess

    directory = os.path.dirname(path)
    log = open(os.path.join(directory, LOG_NAME), "ab")
    try:
        return subprocess.Popen([sys.executable, *_interpreter_options(), "-m", "empriv.warm", "--serve", path],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=directory,
                                start_new_session=True, close_fds=True)
    finally:
        log.close()


def connect_or_start(path: str | None = None, timeout: float | None = None):
    """A socket connected to the server of this process's key, starting the server when none answers."""
    import time

    path = path or socket_path()
    sock = _connect(path)
    if sock is not None:
        return sock
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
    except OSError as err:
        raise WarmUnavailable(f"cannot create {os.path.dirname(path)}: {err.strerror}") from None
    if not os.access(os.path.dirname(path), os.W_OK):
        raise WarmUnavailable(f"{os.path.dirname(path)} is not writable")
    if timeout is None:
        timeout = float(os.environ.get(START_TIMEOUT_ENV) or DEFAULT_START_TIMEOUT_S)
    proc = _start_server(path)
    deadline = time.monotonic() + timeout
    delay = 0.005
    while time.monotonic() < deadline:
        sock = _connect(path)
        if sock is not None:
            return sock
        status = proc.poll()
        if status not in (None, 0):  # 0: another server won the lock and will listen
            raise WarmUnavailable(f"the warm server exited with status {status} before listening "
                                  f"(see {os.path.join(os.path.dirname(path), LOG_NAME)})")
        time.sleep(delay)
        delay = min(delay * 2, 0.05)
    raise WarmUnavailable(f"no warm server listened at {path} within {timeout:g} s")


def _std_fds() -> tuple[list[int], list[int]]:
    """Descriptors 0, 1, 2 to send (``/dev/null`` in place of a closed one) and the ones opened for that."""
    fds, opened = [], []
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
            fds.append(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            fds.append(null)
            opened.append(null)
    return fds, opened


def run_remote(sock, module: str, args: list[str]) -> int:
    """Send the request on ``sock``, forward signals, and return the worker's exit status (or die by its signal).
    Raises :class:`WarmUnavailable` when the server closed the connection before starting a worker."""
    import json
    import signal
    import socket
    import struct

    umask = os.umask(0o022)
    os.umask(umask)
    request = {"module": module, "args": list(args), "cwd": os.getcwd(), "env": dict(os.environ),
               "path": list(sys.path), "umask": umask, "client_pid": os.getpid(),
               "orig_argv": [sys.executable, *_interpreter_options(), "-m", module, *args]}
    payload = json.dumps(request).encode("utf-8", "surrogateescape")
    fds, opened = _std_fds()
    try:
        socket.send_fds(sock, [struct.pack("!I", len(payload))], fds)
        sock.sendall(payload)
    except OSError as err:
        raise WarmUnavailable(f"cannot send the request to the warm server: {err}") from None
    finally:
        for fd in opened:
            os.close(fd)

    state = {"pid": None}

    def forward(signum, _frame):
        try:
            sock.sendall((json.dumps({"signal": signum}) + "\n").encode())
        except OSError:
            pass

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, forward)

    buffer = b""
    while True:
        try:
            chunk = sock.recv(4096)
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            if state["pid"] is None:
                raise WarmUnavailable("the warm server closed the connection before starting the module")
            print(f"{PROG}: the warm server stopped while running {module} (worker pid {state['pid']}); "
                  f"no exit status, see {os.path.join(warm_dir(), LOG_NAME)}", file=sys.stderr, flush=True)
            return 1
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            message = json.loads(line)
            if "pid" in message:
                state["pid"] = message["pid"]
            elif "error" in message:
                if state["pid"] is None:
                    raise WarmUnavailable(f"the warm server refused the request: {message['error']}")
                print(f"{PROG}: {message['error']}", file=sys.stderr, flush=True)
                return 1
            elif "exit" in message:
                return int(message["exit"])
            elif "signal" in message:
                signum = int(message["signal"])
                sys.stdout.flush()
                signal.signal(signum, signal.SIG_DFL)
                os.kill(os.getpid(), signum)
                return 128 + signum


def stop_server(path: str | None = None, timeout: float = 30.0) -> int | None:
    """Stop the server of ``path`` (default: this process's key) by removing its socket; returns its pid when one
    was running (after it exited, or ``timeout`` passed), else None."""
    import time

    path = path or socket_path()
    pid = _server_pid(path)
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    if pid is None:
        return None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and _pid_alive(pid):
        time.sleep(0.05)
    return pid


def _server_pid(path: str) -> int | None:
    try:
        with open(path[:-len(".sock")] + ".lock", encoding="ascii") as fh:
            text = fh.read().strip()
        pid = int(text) if text else None
    except (OSError, ValueError):
        return None
    return pid if pid and _pid_alive(pid) else None


def _pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
            return True
        except OSError:
            return False


USAGE = f"""usage: python -m {PROG} <module> [args...]      run `python -m <module> args` in a warm worker
       python -m {PROG} --socket                     print this environment's server socket path
       python -m {PROG} --stop                       stop this environment's server (removes its socket)

{SWITCH_ENV}=0 runs the module directly; {IDLE_ENV} (seconds, default {DEFAULT_IDLE_S:g}) is the server's idle
timeout; {DIR_ENV} moves the sockets and the log (default: <repository>/.empriv/warm); {PRELOAD_ENV} (comma-separated
modules) replaces the list the server pre-imports."""


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    if argv[0] == "--serve":
        if len(argv) != 2:
            print(USAGE, file=sys.stderr)
            return 2
        status = Server(argv[1]).serve()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)  # skip the interpreter's teardown of thousands of modules (seconds with torch loaded)
    if argv[0] == "--socket":
        print(socket_path())
        return 0
    if argv[0] == "--stop":
        pid = stop_server()
        print(f"stopped warm server {pid}" if pid else "no warm server running")
        return 0
    if argv[0].startswith("-"):
        print(f"{PROG}: unknown option {argv[0]!r}\n{USAGE}", file=sys.stderr)
        return 2
    module, args = argv[0], argv[1:]
    reason = _unavailable_reason()
    if reason is not None:
        return run_directly(module, args, reason)
    try:
        sock = connect_or_start()
        return run_remote(sock, module, args)
    except WarmUnavailable as err:
        return run_directly(module, args, str(err))


# ---------------------------------------------------------------------------------------------------- the server

class Server:
    """Pre-imports :data:`PRELOAD`, listens at ``path`` and forks one worker per request (see the module doc)."""

    def __init__(self, path: str, idle_s: float | None = None):
        self.path = os.path.abspath(path)
        self.idle_s = float(os.environ.get(IDLE_ENV) or DEFAULT_IDLE_S) if idle_s is None else idle_s
        self.jobs: dict[int, dict] = {}      # worker pid -> {"conn", "pidfd", "module", "started"}
        self.by_conn: dict[int, int] = {}    # conn fd -> worker pid
        self.stopping = False
        self.listener = None
        self.selector = None
        self.lock_fd = None
        self.inode = None
        self.imported_env: dict[str, str] = {}  # variables the pre-imports set (a fresh process's imports set them too)

    # -- logging
    def log(self, message: str) -> None:
        import time

        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        print(f"{stamp} warm[{os.getpid()}] {message}", file=sys.stderr, flush=True)

    # -- life cycle
    def serve(self) -> int:
        import fcntl
        import selectors
        import signal
        import socket
        import time

        directory = os.path.dirname(self.path)
        os.makedirs(directory, exist_ok=True)
        ignore = os.path.join(directory, ".gitignore")
        if not os.path.exists(ignore):
            with open(ignore, "w", encoding="ascii") as fh:
                fh.write("*\n")
        self._rotate_log(os.path.join(directory, LOG_NAME))
        self.lock_fd = os.open(self.path[:-len(".sock")] + ".lock" if self.path.endswith(".sock") else self.path + ".lock",
                               os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self.lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self.log(f"another server holds the lock of {self.path}: exiting")
            return 0
        os.ftruncate(self.lock_fd, 0)
        os.write(self.lock_fd, f"{os.getpid()}\n".encode())
        try:
            os.unlink(self.path)  # a stale socket of a server that died
        except FileNotFoundError:
            pass
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        address, dirfd = _short_address(self.path)
        try:
            self.listener.bind(address)
        finally:
            if dirfd is not None:
                os.close(dirfd)
        self.listener.listen(64)
        self.inode = os.stat(self.path).st_ino
        signal.signal(signal.SIGTERM, self._on_term)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        self.log(f"listening at {self.path} (python {sys.executable}, idle timeout {self.idle_s:g} s)")

        started = time.monotonic()
        preload = preload_modules()
        env_before = dict(os.environ)
        failed = self._preload(preload)
        self.imported_env = {k: v for k, v in os.environ.items() if env_before.get(k) != v}
        threads = _thread_names()
        empriv_modules = sorted(m for m in sys.modules if m == "empriv" or m.startswith("empriv."))
        self.log(f"pre-imported {len(preload) - len(failed)}/{len(preload)} modules in "
                 f"{time.monotonic() - started:.2f} s ({len(sys.modules)} modules loaded); "
                 f"{len(threads)} threads {sorted(threads)}; empriv modules {empriv_modules}"
                 + (f"; not importable: {failed}" if failed else "")
                 + (f"; set by the imports: {sorted(self.imported_env)}" if self.imported_env else ""))

        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ, ("accept", None))
        last_activity = time.monotonic()
        try:
            while True:
                for key, _ in self.selector.select(timeout=1.0):
                    kind, pid = key.data
                    if kind == "accept":
                        self._accept()
                        last_activity = time.monotonic()
                    elif kind == "conn":
                        self._client_message(key.fileobj, pid)
                    elif kind == "pidfd":
                        self._reap()
                self._reap()
                if self.jobs:
                    last_activity = time.monotonic()
                if self.stopping and self.listener is not None:
                    self.log("SIGTERM: stopping")
                    self._stop_listening()
                if not self.stopping and not self._socket_is_ours():
                    self.log(f"socket {self.path} removed or replaced: stopping")
                    self._stop_listening()
                if not self.stopping and time.monotonic() - last_activity > self.idle_s:
                    self.log(f"idle for {self.idle_s:g} s: stopping")
                    self._stop_listening()
                if self.stopping and not self.jobs:
                    break
        finally:
            self._stop_listening()
            self.log("exited")
        return 0

    def _rotate_log(self, log_path: str) -> None:
        try:
            if os.path.getsize(log_path) > LOG_ROTATE_BYTES:
                os.replace(log_path, log_path + ".1")
                fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                os.dup2(fd, 1)
                os.dup2(fd, 2)
                os.close(fd)
        except OSError:
            pass

    @staticmethod
    def _preload(names) -> list[str]:
        import importlib

        failed = []
        for name in names:
            try:
                importlib.import_module(name)
            except Exception as err:  # a missing optional library: the worker imports it (or fails) itself
                failed.append(f"{name} ({type(err).__name__})")
        return failed

    def _on_term(self, _signum, _frame) -> None:
        self.stopping = True

    def _socket_is_ours(self) -> bool:
        try:
            return os.stat(self.path).st_ino == self.inode
        except FileNotFoundError:
            return False

    def _stop_listening(self) -> None:
        self.stopping = True
        if self.listener is not None:
            if self.selector is not None:
                try:
                    self.selector.unregister(self.listener)
                except (KeyError, ValueError):
                    pass
            if self._socket_is_ours():
                try:
                    os.unlink(self.path)
                except FileNotFoundError:
                    pass
            self.listener.close()
            self.listener = None

    # -- requests
    def _accept(self) -> None:
        import json
        import selectors
        import socket
        import struct
        import time

        try:
            conn, _ = self.listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        fds: list[int] = []
        try:
            conn.settimeout(30.0)
            head, fds, _flags, _addr = socket.recv_fds(conn, _LEN, 3)
            while len(head) < _LEN:
                more = conn.recv(_LEN - len(head))
                if not more:
                    raise ConnectionError("short request")
                head += more
            (size,) = struct.unpack("!I", head)
            payload = bytearray()
            while len(payload) < size:
                more = conn.recv(min(1 << 20, size - len(payload)))
                if not more:
                    raise ConnectionError("short request")
                payload += more
            request = json.loads(payload.decode("utf-8", "surrogateescape"))
            if len(fds) != 3 or not isinstance(request.get("module"), str):
                raise ValueError(f"bad request: {len(fds)} descriptors, module {request.get('module')!r}")
        except Exception as err:
            self.log(f"rejected a request: {type(err).__name__}: {err}")
            for fd in fds:
                os.close(fd)
            try:
                conn.sendall((json.dumps({"error": f"bad request ({err})"}) + "\n").encode())
            except OSError:
                pass
            conn.close()
            return
        conn.settimeout(None)
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            pid = os.fork()
        except OSError as err:
            self.log(f"fork failed: {err}")
            for fd in fds:
                os.close(fd)
            conn.sendall((json.dumps({"error": f"fork failed: {err}"}) + "\n").encode())
            conn.close()
            return
        if pid == 0:  # the worker: never returns
            _worker(request, fds, self._server_fds(conn), self.imported_env)
        for fd in fds:
            os.close(fd)
        job = {"conn": conn, "pidfd": None, "module": request["module"], "started": time.monotonic()}
        self.jobs[pid] = job
        self.by_conn[conn.fileno()] = pid
        try:
            conn.sendall((json.dumps({"pid": pid}) + "\n").encode())
        except OSError:
            pass
        self.selector.register(conn, selectors.EVENT_READ, ("conn", pid))
        if hasattr(os, "pidfd_open"):
            try:
                job["pidfd"] = os.pidfd_open(pid)
                self.selector.register(job["pidfd"], selectors.EVENT_READ, ("pidfd", pid))
            except OSError:
                job["pidfd"] = None
        self.log(f"worker {pid}: {request['module']} {' '.join(request.get('args', []))} "
                 f"(client {request.get('client_pid')}, cwd {request.get('cwd')})")

    def _server_fds(self, own_conn) -> list[int]:
        """Every descriptor of the server a worker must close (the listener, the lock, other connections, ...)."""
        fds = [self.lock_fd, own_conn.fileno()]
        if self.listener is not None:
            fds.append(self.listener.fileno())
        if self.selector is not None and hasattr(self.selector, "fileno"):
            fds.append(self.selector.fileno())
        for job in self.jobs.values():
            if job["conn"] is not None:
                fds.append(job["conn"].fileno())
            if job["pidfd"] is not None:
                fds.append(job["pidfd"])
        return [fd for fd in fds if fd is not None and fd >= 0]

    def _client_message(self, conn, pid: int) -> None:
        import json
        import signal

        try:
            data = conn.recv(4096)
        except OSError:
            data = b""
        job = self.jobs.get(pid)
        if not data:  # the client is gone (killed): its worker must not run on unwatched
            self.selector.unregister(conn)
            self.by_conn.pop(conn.fileno(), None)
            conn.close()
            if job is not None:
                job["conn"] = None
                self.log(f"worker {pid}: client gone, killing the worker")
                _kill(pid, signal.SIGKILL)
            return
        for line in data.splitlines():
            try:
                signum = int(json.loads(line)["signal"])
            except (ValueError, KeyError, TypeError):
                continue
            if job is not None:  # not reaped yet: the pid is still this worker's
                self.log(f"worker {pid}: forwarding signal {signum}")
                _kill(pid, signum)

    def _reap(self) -> None:
        import json
        import time

        for pid in list(self.jobs):
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done, status = pid, 0x7F00  # someone else reaped it: report a failure
            if done == 0:
                continue
            job = self.jobs.pop(pid)
            code = os.waitstatus_to_exitcode(status)
            message = {"signal": -code} if code < 0 else {"exit": code}
            self.log(f"worker {pid}: {job['module']} -> {message} in {time.monotonic() - job['started']:.2f} s")
            if job["pidfd"] is not None:
                try:
                    self.selector.unregister(job["pidfd"])
                except (KeyError, ValueError):
                    pass
                os.close(job["pidfd"])
            conn = job["conn"]
            if conn is not None:
                try:
                    conn.sendall((json.dumps(message) + "\n").encode())
                except OSError:
                    pass
                try:
                    self.selector.unregister(conn)
                except (KeyError, ValueError):
                    pass
                self.by_conn.pop(conn.fileno(), None)
                conn.close()


def _kill(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def _thread_names() -> list[str]:
    try:
        names = []
        for tid in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{tid}/comm", encoding="utf-8", errors="replace") as fh:
                names.append(fh.read().strip())
        return names
    except OSError:
        return []


# ---------------------------------------------------------------------------------------------------- the worker

def _worker(request: dict, fds: list[int], server_fds: list[int], imported_env: dict[str, str]) -> None:
    """In the forked child: become the client's ``python -m <module>`` process, run it, exit with its status."""
    code = 1
    try:
        code = _become_client(request, fds, server_fds, imported_env)
    except BaseException:  # a failure of this function itself: report it where the client sees it
        try:
            import traceback

            traceback.print_exc()
            sys.stderr.flush()
        except BaseException:
            pass
    os._exit(code)


def _become_client(request: dict, fds: list[int], server_fds: list[int], imported_env: dict[str, str]) -> int:
    import signal

    _die_with_parent()
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
        signal.signal(signum, signal.SIG_DFL)
    for fd in set(server_fds):
        try:
            os.close(fd)
        except OSError:
            pass
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in set(fds):
        if fd > 2:
            os.close(fd)
    os.chdir(request["cwd"])
    os.umask(int(request.get("umask", 0o022)))
    os.environ.clear()
    os.environ.update(request["env"])
    for name, value in imported_env.items():  # e.g. torch sets TORCHINDUCTOR_CACHE_DIR when absent
        os.environ.setdefault(name, value)
    sys.path[:] = request["path"]
    for name in [m for m in sys.modules if m == "empriv" or m.startswith("empriv.")]:
        del sys.modules[name]
    import importlib

    importlib.invalidate_caches()
    for stream, fd in ((sys.stdout, 1), (sys.stderr, 2)):
        if stream is not None:
            try:
                stream.reconfigure(line_buffering=fd == 2 or os.isatty(fd))
            except (AttributeError, ValueError, OSError):
                pass
    _reseed()
    sys.orig_argv = list(request.get("orig_argv") or [])
    return _run_as_main(request["module"], list(request.get("args", [])))


def _die_with_parent() -> None:
    """PR_SET_PDEATHSIG: the worker is killed (SIGKILL) when the server dies."""
    import signal

    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the server died between fork and prctl
        os._exit(1)


def _reseed() -> None:
    """Seed from fresh entropy what a new process seeds from entropy (a forked worker would share the server's)."""
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()
    torch = sys.modules.get("torch")
    if torch is not None:  # the CPU generator (accelerators' generators are created in the worker, not the server)
        torch.default_generator.seed()


def _exit_code(code) -> int:
    """What Python makes of ``SystemExit(code)``: None → 0, an int → itself, anything else printed → 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    try:
        print(code, file=sys.stderr)
    except Exception:
        pass
    return 1


def _run_as_main(module: str, args: list[str]) -> int:
    import runpy
    import signal

    sys.argv = [module, *args]  # runpy puts the module's file in argv[0], as `python -m` does
    interrupted = False
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as stop:
        code = _exit_code(stop.code)
    except KeyboardInterrupt:
        _print_exception(*sys.exc_info())
        code, interrupted = 1, True
    except BaseException:
        _print_exception(*sys.exc_info())
        code = 1
    code = _finalize(code)
    if interrupted:  # as CPython does for an uncaught KeyboardInterrupt: die by SIGINT
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    return code


def _print_exception(etype, value, tb) -> None:
    """The traceback as `python -m` prints it, without this module's own frames."""
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    if value is not None:
        value.__traceback__ = tb  # the interpreter's hook prints the exception's own traceback
    try:
        sys.excepthook(etype, value, tb)
    except BaseException:
        import traceback

        traceback.print_exception(etype, value, tb)


def _finalize(code: int) -> int:
    """What the interpreter does at exit: wait for non-daemon threads, run atexit handlers, flush the streams."""
    import atexit
    import threading

    try:
        threading._shutdown()  # noqa: SLF001 (the interpreter's own exit step)
    except BaseException:
        pass
    try:
        atexit._run_exitfuncs()  # noqa: SLF001
    except SystemExit as stop:
        code = _exit_code(stop.code)
    except BaseException:
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except BaseException:
            if stream is sys.stdout:
                code = code or 120  # CPython's status when flushing stdout fails at exit
    return code


if __name__ == "__main__":
    sys.exit(main())
