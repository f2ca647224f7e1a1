"""A warm worker: the child the server forks for one request becomes the client's process — its descriptors,
directory, environment, ``sys.path`` and umask, fresh empriv modules and random seeds — runs the client's script or
module as ``__main__`` and exits as ``python`` would (:mod:`empriv.infra.warm` describes the whole)."""

from __future__ import annotations

import os
import sys


def request_target(request: dict) -> str | None:
    """The script (``python <script>``) or module (``python -m <module>``) a request asks to run; None if neither."""
    for kind in ("script", "module"):
        if isinstance(request.get(kind), str):
            return request[kind]
    return None


def run_worker(request: dict, fds: list[int], server_fds: list[int], imported_env: dict[str, str]) -> None:
    """In the forked child: become the client's ``python <script>`` / ``python -m <module>`` process, run it, exit
    with its status."""
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
    return _run_as_main(request_target(request), list(request.get("args", [])), script="script" in request)


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


def _run_as_main(target: str, args: list[str], script: bool = False) -> int:
    """Run ``target`` as ``__main__``: a script with ``runpy.run_path`` (``__file__``, the traceback's file names and
    ``sys.argv[0]`` its path joined to the working directory: ``python <script>`` keeps ``sys.argv[0]`` as typed), a
    module with ``runpy.run_module`` (``sys.argv[0]`` its file, as ``python -m`` gives)."""
    import runpy
    import signal

    sys.argv = [target, *args]
    if script:
        try:
            open(target, "rb").close()
        except OSError as err:  # as `python missing.py` says it, status 2
            prog = (getattr(sys, "orig_argv", None) or [sys.executable])[0]
            print(f"{prog}: can't open file {os.path.abspath(target)!r}: [Errno {err.errno}] {err.strerror}",
                  file=sys.stderr)
            return _finalize(2)
    interrupted = False
    try:
        if script:
            runpy.run_path(os.path.join(os.getcwd(), target), run_name="__main__")
        else:
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as stop:
        code = _exit_code(stop.code)
    except KeyboardInterrupt:
        _print_exception(*sys.exc_info(), script=script)
        code, interrupted = 1, True
    except BaseException:
        _print_exception(*sys.exc_info(), script=script)
        code = 1
    code = _finalize(code)
    if interrupted:  # as CPython does for an uncaught KeyboardInterrupt: die by SIGINT
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    return code


def _print_exception(etype, value, tb, script: bool = False) -> None:
    """The traceback as ``python -m`` prints it, without this module's own frames (and, for a script, without
    ``runpy``'s, as ``python <script>`` prints it)."""
    import runpy

    hidden = {__file__} | ({runpy.__file__, "<frozen runpy>"} if script else set())
    while tb is not None and tb.tb_frame.f_code.co_filename in hidden:
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
