"""A warm worker for stage processes: ``python -m empriv.infra.warm stages/<stage>.py [args...]`` runs
``python stages/<stage>.py [args...]`` (and ``python -m empriv.infra.warm <module> [args...]`` runs
``python -m <module> [args...]``) in a process forked from a server that has already imported the heavy third-party
libraries.

Every matrix item of ``dvc.yaml`` is its own stage process (so DVC caches each item on its own), and each of them
used to import torch, transformers, opacus and peft from scratch (~3.5 s on the 2-core machine). With this module
as the stage command's prefix the item is still its own process and its own DVC stage, but the imports are paid
once per server, not once per item.

How it works (Linux only; anything else runs the script or module directly, see below):

* The **client** (this module's ``main``) is small on purpose: it imports only the standard library modules it
  needs (no torch, nothing from empriv but the empty packages ``empriv`` and ``empriv.infra`` and
  :mod:`empriv.infra.warm_key`). It connects to a Unix socket ``.empriv/warm/<key>.sock`` in the repository (the
  nearest directory above the working directory holding ``.dvc`` or ``.git``; ``EMPRIV_WARM_DIR`` names another
  directory). ``<key>`` hashes the host name (a socket on a shared file system serves only the host that bound it)
  and what the imported libraries depend on: the interpreter, its options, the virtual environment, the name and
  mtime of every installed distribution, the environment variables read at import time (``PYTHON*``, ``LC_*``,
  ``HOME``, ``OMP_*``, ``HF_*``, ...) and the source of the warm modules (``warm*.py``). A client whose key differs
  gets a server of its own.
* If no server answers, the client starts one (``python -m empriv.infra.warm --serve``, detached in its own session,
  output appended to ``server.log`` beside the socket) and connects as soon as it listens.
* The client sends its script or module, arguments, working directory, environment, ``sys.path`` (for a script,
  the script's directory first, as ``python <script>`` has it) and umask, and its stdin/stdout/stderr file
  descriptors (``SCM_RIGHTS``), then waits. SIGINT, SIGTERM and SIGHUP it receives are
  forwarded to the worker; if the client disappears (SIGKILL), the server kills the worker. The client exits with
  the worker's status (a worker killed by a signal makes the client kill itself with the same signal, SIGKILL included).
* The **server** (:mod:`empriv.infra.warm_server`) imports the third-party libraries of
  :data:`~empriv.infra.warm_key.PRELOAD` once — never a module of empriv, so edited project code is read fresh by
  every run — and forks one worker per request. The worker (:mod:`empriv.infra.warm_worker`) takes the client's
  descriptors, directory, environment, ``sys.path`` and umask, forgets every ``empriv`` module the server had
  loaded, re-seeds the generators a fresh process would seed from entropy (numpy's global one, torch's default
  generator; Python's ``random`` re-seeds itself after a fork), adds the variables the pre-imports put in the
  environment where the client's lacks them (transformers sets ``TORCHINDUCTOR_CACHE_DIR`` on import, as it does in
  every model stage), runs the script (``runpy.run_path``) or module (``runpy.run_module``) as ``__main__`` and
  exits as ``python`` would: ``SystemExit`` codes kept, an uncaught exception printed with its traceback on the
  client's stderr and status 1, ``KeyboardInterrupt`` ends it by SIGINT.
* Fork safety: the server runs no torch operation, so torch's intra-op thread pool (OpenMP) does not exist when it
  forks; the worker creates it when the stage sets its thread count, as a fresh process does. Libraries that start
  threads at import which do not survive a fork (polars: jemalloc and spill-cleaning threads) are not pre-imported.
  The server logs its thread count after pre-importing.
* ``EMPRIV_WARM_PRELOAD`` (comma-separated modules; part of the key) replaces :data:`~empriv.infra.warm_key.PRELOAD`.
* The server exits after :data:`~empriv.infra.warm_key.DEFAULT_IDLE_S` seconds without a request
  (``EMPRIV_WARM_IDLE`` when it starts), when its socket file is removed or replaced, or on SIGTERM — after its
  running workers have finished. A worker dies with its server (``PR_SET_PDEATHSIG``); its client then reports one
  line and exits 1.

``EMPRIV_WARM=0`` makes the client run the script or module directly (``exec python <script> ...`` /
``exec python -m <module> ...``, one line on stderr saying why); so does anything that makes the warm path
unavailable before a worker started (not Linux, no Unix sockets, a directory that cannot be written, a server that
did not come up).

What differs from a fresh process: warnings emitted while the server imported the libraries go to
``server.log``, not to each run; the worker has the server's session (no controlling terminal), resource limits
and nice value; Python's string hash seed is the server's (fixed per server, random per server); a script's
``sys.argv[0]`` is its absolute path (``python <script>`` keeps the path as typed; ``__file__`` is absolute in both).
"""

from __future__ import annotations

import os
import sys

from empriv.infra.warm_key import (DEFAULT_IDLE_S, DEFAULT_START_TIMEOUT_S, DIR_ENV, IDLE_ENV, LOG_NAME, PRELOAD_ENV,
                                   START_TIMEOUT_ENV, SWITCH_ENV, interpreter_options, short_address, socket_path,
                                   warm_dir)

PROG = "empriv.infra.warm"


class WarmUnavailable(RuntimeError):
    """The warm path cannot be used for this call (the reason is its message); the module runs directly."""


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


def is_script(target: str) -> bool:
    """A target ending in ``.py`` is a script (``python <script>``); anything else a module (``python -m <module>``)."""
    return target.endswith(".py")


def plain_command(target: str, args: list[str]) -> list[str]:
    """The command the warm worker stands in for: ``python [options] <script> args`` or ``python [options] -m <module>
    args``, with this process's interpreter and options."""
    return [sys.executable, *interpreter_options(), *([] if is_script(target) else ["-m"]), target, *args]


def worker_path(target: str) -> list[str]:
    """The ``sys.path`` the plain command would start with: this client's (``python -m`` put the working directory
    first), but for a script its own directory (symlinks resolved) first, as ``python <script>`` does."""
    path = list(sys.path)
    if is_script(target) and not sys.flags.safe_path and path:
        path[0] = os.path.dirname(os.path.realpath(target))
    return path


def run_directly(target: str, args: list[str], reason: str) -> int:
    """Replace this process by the plain command (:func:`plain_command`), saying why on stderr."""
    print(f"{PROG}: running {target} directly ({reason})", file=sys.stderr, flush=True)
    sys.stdout.flush()
    argv = plain_command(target, args)
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
        address, dirfd = short_address(path)
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
        return subprocess.Popen([sys.executable, *interpreter_options(), "-m", PROG, "--serve", path],
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


def run_remote(sock, target: str, args: list[str]) -> int:
    """Send the request on ``sock``, forward signals, and return the worker's exit status (or die by its signal).
    Raises :class:`WarmUnavailable` when the server closed the connection before starting a worker."""
    import json
    import signal
    import socket
    import struct

    umask = os.umask(0o022)
    os.umask(umask)
    request = {("script" if is_script(target) else "module"): target, "args": list(args), "cwd": os.getcwd(),
               "env": dict(os.environ), "path": worker_path(target), "umask": umask, "client_pid": os.getpid(),
               "orig_argv": plain_command(target, args)}
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
                raise WarmUnavailable(f"the warm server closed the connection before starting {target}")
            print(f"{PROG}: the warm server stopped while running {target} (worker pid {state['pid']}); "
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
                return die_by_signal(int(message["signal"]))


def die_by_signal(signum: int) -> int:
    """End this process by signal ``signum``, as its worker ended, so that whoever waits for it (the shell of a stage
    command, the sweep) reads the same status as from a plain process (-signum). A signal that can be caught gets
    its default action back first; SIGKILL and SIGSTOP have no handler to reset (``signal.signal`` refuses them with
    EINVAL) and are sent as they are. Returns ``128 + signum`` (the shell's status for a signalled child) in the rare
    case that this process is still alive after sending it (a signal whose default action is not to end)."""
    import signal

    sys.stdout.flush()
    sys.stderr.flush()
    if signum not in (signal.SIGKILL, signal.SIGSTOP):
        try:
            signal.signal(signum, signal.SIG_DFL)
        except (OSError, ValueError):  # not a signal this platform lets a process handle: exit with its status
            return 128 + signum
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


USAGE = f"""usage: python -m {PROG} <script.py> [args...]  run `python <script.py> args` in a warm worker
       python -m {PROG} <module> [args...]     run `python -m <module> args` in a warm worker
       python -m {PROG} --socket               print this environment's server socket path
       python -m {PROG} --stop                 stop this environment's server (removes its socket)

{SWITCH_ENV}=0 runs the script or module directly; {IDLE_ENV} (seconds, default {DEFAULT_IDLE_S:g}) is the server's idle
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
        from empriv.infra.warm_server import Server

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
    target, args = argv[0], argv[1:]
    reason = _unavailable_reason()
    if reason is not None:
        return run_directly(target, args, reason)
    try:
        sock = connect_or_start()
        return run_remote(sock, target, args)
    except WarmUnavailable as err:
        return run_directly(target, args, str(err))


if __name__ == "__main__":
    sys.exit(main())
