"""The warm server: pre-imports the heavy third-party libraries once, listens on its Unix socket and forks one worker
per client request (:mod:`empriv.infra.warm` describes the whole; :mod:`empriv.infra.warm_worker` is the worker)."""

from __future__ import annotations

import os
import sys

from empriv.infra.warm_key import DEFAULT_IDLE_S, IDLE_ENV, LOG_NAME, LOG_ROTATE_BYTES, preload_modules, short_address
from empriv.infra.warm_worker import request_target, run_worker

_LEN = 4  # a request's length prefix: 4 bytes, big-endian (the client packs it with struct "!I")


class Server:
    """Pre-imports :data:`PRELOAD`, listens at ``path`` and forks one worker per request (see the module doc)."""

    def __init__(self, path: str, idle_s: float | None = None):
        self.path = os.path.abspath(path)
        self.idle_s = float(os.environ.get(IDLE_ENV) or DEFAULT_IDLE_S) if idle_s is None else idle_s
        self.jobs: dict[int, dict] = {}      # worker pid -> {"conn", "pidfd", "target", "started"}
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
        address, dirfd = short_address(self.path)
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
            target = request_target(request)
            if len(fds) != 3 or target is None:
                raise ValueError(f"bad request: {len(fds)} descriptors, script {request.get('script')!r}, "
                                 f"module {request.get('module')!r}")
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
            run_worker(request, fds, self._server_fds(conn), self.imported_env)
        for fd in fds:
            os.close(fd)
        job = {"conn": conn, "pidfd": None, "target": target, "started": time.monotonic()}
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
        self.log(f"worker {pid}: {target} {' '.join(request.get('args', []))} "
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
            self.log(f"worker {pid}: {job['target']} -> {message} in {time.monotonic() - job['started']:.2f} s")
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
