"""The warm worker (``python -m empriv.infra.warm stages/<stage>.py ...`` or ``... <module> ...``): what a stage sees
and computes is what ``python <script>`` / ``python -m <module>`` gives.

Every server these tests start lives in a temporary ``EMPRIV_WARM_DIR`` and is stopped at the end by removing its
socket (then, if it lingers, by its pid from the lock file) — never by name.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
WARM = [PYTHON, "-m", "empriv.infra.warm"]
WARM_MODULES = ["empriv.infra.warm", "empriv.infra.warm_key", "empriv.infra.warm_server", "empriv.infra.warm_worker"]
LIGHT = "json"  # EMPRIV_WARM_PRELOAD of the servers that need no torch (fast to start)

PROBE = '''
import json, os, sys
if "--stdin" in sys.argv:
    print("stdin:", sys.stdin.read().strip())
print(json.dumps({"argv": sys.argv, "cwd": os.getcwd(), "x": os.environ.get("WARM_TEST_X"),
                  "gone": "WARM_TEST_GONE" in os.environ, "pid": os.getpid(), "path0": sys.path[0],
                  "file": __file__, "main": __name__, "umask": os.umask(0)}), flush=True)
print("to stderr", file=sys.stderr)
if "--exit" in sys.argv:
    sys.exit(int(sys.argv[sys.argv.index("--exit") + 1]))
if "--exit-message" in sys.argv:
    sys.exit("a message instead of a status")
if "--raise" in sys.argv:
    def deep():
        raise RuntimeError("raised inside the stage")
    deep()
'''

SLEEPER = '''
import os, sys, time
print(os.getpid(), flush=True)
time.sleep(float(sys.argv[1]) if len(sys.argv) > 1 else 60)
print("woke", flush=True)
'''

TORCH_RNG = '''
import os
import numpy, torch
import transformers.modeling_utils  # sets TORCHINDUCTOR_CACHE_DIR (when unset) on import, as every model stage does
torch.set_num_threads(2)
a = torch.randn(300, 300, generator=torch.Generator().manual_seed(1))
b = numpy.random.default_rng(1).standard_normal((300, 300))
print(float((a @ a).sum()), float((b @ b).sum()), torch.initial_seed(), numpy.random.randint(2**31),
      os.environ.get("TORCHINDUCTOR_CACHE_DIR"))
'''


def _stop_servers(warm_dir: Path) -> list[int]:
    """Stop every server of ``warm_dir``: remove its socket, wait for its pid (from the lock file) to go."""
    pids = []
    for lock in warm_dir.glob("*.lock"):
        text = lock.read_text().strip()
        pid = int(text) if text else None
        lock.with_suffix(".sock").unlink(missing_ok=True)
        if pid:
            pids.append(pid)
    deadline = time.monotonic() + 20
    for pid in pids:
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _alive(pid):  # last resort, by pid
            os.kill(pid, signal.SIGKILL)
    return pids


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _wait_gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


def _server_pids(warm_dir: Path) -> list[int]:
    out = []
    for lock in warm_dir.glob("*.lock"):
        text = lock.read_text().strip()
        if text and _alive(int(text)):
            out.append(int(text))
    return out


class Project:
    """A directory with probe modules, the environment to run them in, and its warm directory."""

    def __init__(self, root: Path, preload: str | None = None, **env):
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        (root / "warm_probe.py").write_text(PROBE)
        (root / "warm_sleeper.py").write_text(SLEEPER)
        (root / "warm_torch_rng.py").write_text(TORCH_RNG)
        self.warm_dir = root / "warm"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("EMPRIV_WARM")}
        self.env.update({"EMPRIV_WARM_DIR": str(self.warm_dir), "EMPRIV_WARM_IDLE": "120", "WANDB_MODE": "offline"})
        self.env.pop("PYTHONPATH", None)
        if preload is not None:
            self.env["EMPRIV_WARM_PRELOAD"] = preload
        self.env.update(env)

    def run(self, *args, env=None, input=None, timeout=300, warm=True, cwd=None) -> subprocess.CompletedProcess:
        """``python -m empriv.infra.warm args`` (``warm``), else the plain command: ``python <script> …`` when the
        first argument ends in ``.py``, ``python -m <module> …`` otherwise."""
        plain = [PYTHON] if str(args[0]).endswith(".py") else [PYTHON, "-m"]
        cmd = (WARM if warm else plain) + [str(a) for a in args]
        return subprocess.run(cmd, cwd=cwd or self.root, env={**self.env, **(env or {})}, input=input,
                              capture_output=True, text=True, timeout=timeout)

    def popen(self, *args, env=None) -> subprocess.Popen:
        return subprocess.Popen(WARM + [str(a) for a in args], cwd=self.root, env={**self.env, **(env or {})},
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def log(self) -> str:
        path = self.warm_dir / "server.log"
        return path.read_text() if path.exists() else ""


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    """A project served by a server with the default pre-import list (torch, transformers, opacus, ...)."""
    project = Project(tmp_path_factory.mktemp("warm") / "full")
    yield project
    _stop_servers(project.warm_dir)


@pytest.fixture
def light(tmp_path):
    """A project of its own whose server pre-imports only ``json`` (starts in a fraction of a second)."""
    project = Project(tmp_path / "light", preload=LIGHT)
    yield project
    _stop_servers(project.warm_dir)


def _probe(proc: subprocess.CompletedProcess) -> dict:
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")][-1]
    return json.loads(line)


# --------------------------------------------------------------------------------------------- what a run sees

def test_output_status_argv_cwd_env_and_umask_reach_the_worker(full):
    sub = full.root / "sub dir"
    sub.mkdir(exist_ok=True)
    (sub / "warm_probe.py").write_text(PROBE)
    plain = full.run("warm_probe", "a b", "--exit", "7", warm=False, env={"WARM_TEST_X": "1"}, cwd=sub)
    warm = full.run("warm_probe", "a b", "--exit", "7", env={"WARM_TEST_X": "1"}, cwd=sub)
    assert plain.returncode == warm.returncode == 7, warm.stderr
    p, w = _probe(plain), _probe(warm)
    assert w["argv"] == p["argv"] == [str(sub / "warm_probe.py"), "a b", "--exit", "7"]
    assert w["cwd"] == p["cwd"] == str(sub)
    assert w["x"] == p["x"] == "1" and w["main"] == "__main__"
    assert w["umask"] == p["umask"]
    assert w["pid"] != p["pid"]
    assert warm.stderr == plain.stderr == "to stderr\n"
    log = full.log()
    from empriv.infra.warm_key import PRELOAD

    # the server holds no empriv module but the warm worker's own (and their packages)
    served = sorted(["empriv", "empriv.infra", *WARM_MODULES[1:]])
    assert f"pre-imported {len(PRELOAD)}/{len(PRELOAD)} modules" in log and f"empriv modules {served}" in log, log

    # the next run has the environment of its own client, not the one before (a variable removed is gone)
    again = full.run("warm_probe", env={"WARM_TEST_GONE": "1"})
    assert _probe(again)["gone"] is True and _probe(again)["x"] is None
    assert _probe(full.run("warm_probe"))["gone"] is False
    assert len(_server_pids(full.warm_dir)) == 1  # one server served them all


def test_a_script_runs_as_python_script_runs_it(full):
    """``python -m empriv.infra.warm dir/script.py args`` (how dvc.yaml runs a stage script): the script is
    ``__main__`` with its arguments, its own directory first on ``sys.path``, the same ``__file__``, traceback, exit
    status and output as ``python dir/script.py args``; a missing script fails as python fails."""
    sub = full.root / "scripts"
    sub.mkdir(exist_ok=True)
    (sub / "warm_probe.py").write_text(PROBE)
    plain = full.run("scripts/warm_probe.py", "a b", "--exit", "5", warm=False, env={"WARM_TEST_X": "2"})
    warm = full.run("scripts/warm_probe.py", "a b", "--exit", "5", env={"WARM_TEST_X": "2"})
    assert plain.returncode == warm.returncode == 5, warm.stderr
    p, w = _probe(plain), _probe(warm)
    assert p["argv"] == ["scripts/warm_probe.py", "a b", "--exit", "5"]
    assert w["argv"] == [str(sub / "warm_probe.py"), "a b", "--exit", "5"]  # argv[0]: the absolute path
    for key in ("path0", "file", "main", "cwd", "x", "umask"):
        assert w[key] == p[key], key
    assert w["path0"] == str(sub) and w["main"] == "__main__" and w["pid"] != p["pid"]
    assert warm.stderr == plain.stderr == "to stderr\n"

    raised = full.run("scripts/warm_probe.py", "--raise")
    plain_raised = full.run("scripts/warm_probe.py", "--raise", warm=False)
    assert raised.returncode == plain_raised.returncode == 1
    assert raised.stderr == plain_raised.stderr, raised.stderr  # no frame of runpy or of the worker

    missing = full.run("scripts/no_such_script.py")
    plain_missing = full.run("scripts/no_such_script.py", warm=False)
    assert missing.returncode == plain_missing.returncode == 2
    assert missing.stderr.split(":", 1)[1] == plain_missing.stderr.split(":", 1)[1]  # after the interpreter's name
    assert "can't open file" in missing.stderr and "worker" in full.log()


def test_a_request_names_a_script_or_a_module_and_exits_as_python_would():
    from empriv.infra.warm import is_script, plain_command
    from empriv.infra.warm_worker import _exit_code, request_target

    assert is_script("stages/train.py") and not is_script("empriv.pipeline.train")
    assert plain_command("stages/train.py", ["--seed", "0"])[-3:] == ["stages/train.py", "--seed", "0"]
    assert plain_command("json.tool", [])[-2:] == ["-m", "json.tool"]
    assert request_target({"script": "stages/x.py"}) == "stages/x.py"
    assert request_target({"module": "m"}) == "m" and request_target({"module": 3}) is None
    assert [_exit_code(c) for c in (None, 0, 3, 256 + 4)] == [0, 0, 3, 4]


def test_stdin_reaches_the_worker_and_exit_statuses_follow_python(full):
    proc = full.run("warm_probe", "--stdin", input="hello from the client\n")
    assert proc.returncode == 0 and "stdin: hello from the client" in proc.stdout

    raised = full.run("warm_probe", "--raise")
    plain = full.run("warm_probe", "--raise", warm=False)
    assert raised.returncode == plain.returncode == 1
    tail = raised.stderr.strip().splitlines()
    assert tail[-1] == "RuntimeError: raised inside the stage"
    assert tail[0] == "to stderr" and tail[1] == "Traceback (most recent call last):"
    assert "empriv/infra/warm" not in raised.stderr  # the worker's own frames are not shown
    assert [ln for ln in raised.stderr.splitlines() if "warm_probe.py" in ln] == \
        [ln for ln in plain.stderr.splitlines() if "warm_probe.py" in ln]

    message = full.run("warm_probe", "--exit-message")
    assert message.returncode == 1 and message.stderr.endswith("a message instead of a status\n")

    missing = full.run("empriv_no_such_module")
    plain_missing = full.run("empriv_no_such_module", warm=False)
    assert missing.returncode == plain_missing.returncode == 1
    assert "No module named empriv_no_such_module" in missing.stderr


def test_an_edited_empriv_module_is_read_fresh_by_the_next_run(full, tmp_path):
    """The server imported the package ``empriv`` itself; a run must still see the package as it is on disk now."""
    proj = tmp_path / "edited"
    (proj / "empriv").mkdir(parents=True)
    shutil.copy2(ROOT / "src/empriv/__init__.py", proj / "empriv/__init__.py")
    (proj / "empriv/infra").mkdir()
    for name in ("__init__", "warm", "warm_key", "warm_server", "warm_worker"):  # same content: the same server
        shutil.copy2(ROOT / f"src/empriv/infra/{name}.py", proj / f"empriv/infra/{name}.py")
    probe = proj / "empriv" / "warm_edit_probe.py"
    probe.write_text("import empriv\nVALUE = 1\nprint(empriv.__version__, VALUE, empriv.__file__)\n")
    first = full.run("empriv.warm_edit_probe", cwd=proj)
    assert first.returncode == 0, first.stderr
    assert first.stdout.split() == ["0.1.0", "1", str(proj / "empriv/__init__.py")]

    init = proj / "empriv/__init__.py"
    init.write_text(init.read_text().replace('__version__ = "0.1.0"', '__version__ = "9.9.9-edited"'))
    probe.write_text("import empriv\nVALUE = 22\nprint(empriv.__version__, VALUE, empriv.__file__)\n")
    second = full.run("empriv.warm_edit_probe", cwd=proj)
    assert second.stdout.split()[:2] == ["9.9.9-edited", "22"], second.stderr
    assert len(_server_pids(full.warm_dir)) == 1


def test_workers_reseed_what_a_fresh_process_seeds_and_multithreaded_math_matches(full):
    """torch's and numpy's global generators are seeded from entropy in every fresh process: so in every worker;
    seeded computations with 2 torch threads (the pool created in the worker) equal the plain run's; what importing
    transformers puts in the environment (TORCHINDUCTOR_CACHE_DIR) is there as in a plain run."""
    runs = [full.run("warm_torch_rng").stdout.split() for _ in range(2)]
    plain = full.run("warm_torch_rng", warm=False).stdout.split()
    assert runs[0][:2] == runs[1][:2] == plain[:2]
    assert runs[0][2] != runs[1][2] and runs[0][3] != runs[1][3]
    assert runs[0][4] == runs[1][4] == plain[4] != "None"


# ---------------------------------------------------------------------------------------------------- signals

def _start_sleeper(project: Project, seconds: float = 60) -> tuple[subprocess.Popen, int]:
    proc = project.popen("warm_sleeper", seconds)
    line = proc.stdout.readline()
    assert line.strip().isdigit(), proc.stderr.read() if proc.poll() is not None else line
    return proc, int(line)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_the_client_reaches_the_worker_and_the_client_dies_of_it(full, signum):
    proc, worker = _start_sleeper(full)
    proc.send_signal(signum)
    assert proc.wait(timeout=20) == -signum
    assert _wait_gone(worker), f"worker {worker} still running after {signum!r}"
    out = proc.stdout.read()
    proc.stderr.close()
    proc.stdout.close()
    assert "woke" not in out


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM, signal.SIGSEGV])
def test_a_worker_killed_by_a_signal_ends_its_client_by_the_same_signal(light, signum):
    # SIGKILL has no handler to reset: the client once died of OSError (EINVAL) with status 1 and a traceback
    proc, worker = _start_sleeper(light)
    os.kill(worker, signum)
    assert proc.wait(timeout=20) == -signum
    err = proc.stderr.read()
    proc.stdout.close()
    proc.stderr.close()
    assert err == ""


def test_a_killed_client_takes_its_worker_with_it(full):
    proc, worker = _start_sleeper(full)
    proc.kill()
    proc.wait(timeout=10)
    proc.stdout.close()
    proc.stderr.close()
    assert _wait_gone(worker)


def test_a_server_that_dies_mid_request_is_reported_in_one_line(light):
    proc, worker = _start_sleeper(light)
    (server,) = _server_pids(light.warm_dir)
    os.kill(server, signal.SIGKILL)
    assert proc.wait(timeout=20) == 1
    err = proc.stderr.read()
    proc.stdout.close()
    proc.stderr.close()
    assert err.count("\n") == 1 and "the warm server stopped while running warm_sleeper" in err, err
    assert _wait_gone(worker)  # PR_SET_PDEATHSIG: no orphan keeps working


# ------------------------------------------------------------------------------------------ server life cycle

def test_two_concurrent_clients_start_one_server_and_run_in_parallel(light):
    started = time.monotonic()
    procs = [light.popen("warm_sleeper", 3) for _ in range(2)]
    outs = [p.communicate(timeout=60) for p in procs]
    elapsed = time.monotonic() - started
    assert [p.returncode for p in procs] == [0, 0], outs
    pids = {int(out.split()[0]) for out, _ in outs}
    assert len(pids) == 2 and all(out.split()[1] == "woke" for out, _ in outs)
    assert elapsed < 5.9, f"the two 3-second runs took {elapsed:.1f} s together: not parallel"  # serial: >= 6 s
    assert len(list(light.warm_dir.glob("*.sock"))) == 1
    assert light.log().count("listening at") == 1, light.log()


def test_the_server_exits_when_idle_and_when_its_socket_is_removed(light, tmp_path):
    idle = Project(tmp_path / "idle", preload=LIGHT, EMPRIV_WARM_IDLE="1")
    try:
        assert idle.run("warm_probe").returncode == 0
        (pid,) = _server_pids(idle.warm_dir)
        assert _wait_gone(pid, 10)
        assert "idle for 1 s: stopping" in idle.log()
        assert not list(idle.warm_dir.glob("*.sock"))
    finally:
        _stop_servers(idle.warm_dir)

    assert light.run("warm_probe").returncode == 0
    (pid,) = _server_pids(light.warm_dir)
    (sock,) = light.warm_dir.glob("*.sock")
    sock.unlink()
    assert _wait_gone(pid, 10)
    assert "removed or replaced: stopping" in light.log()
    assert light.run("warm_probe").returncode == 0  # the next client starts a new one
    assert len(_server_pids(light.warm_dir)) == 1 and _server_pids(light.warm_dir) != [pid]


def test_emprivwarm_0_and_an_unusable_directory_run_the_module_directly(light, tmp_path):
    proc = light.run("warm_probe", "--exit", "3", env={"EMPRIV_WARM": "0", "WARM_TEST_X": "y"})
    assert proc.returncode == 3 and _probe(proc)["x"] == "y"
    assert proc.stderr == "empriv.infra.warm: running warm_probe directly (EMPRIV_WARM=0)\nto stderr\n"
    assert not light.warm_dir.exists()

    blocker = tmp_path / "a file"
    blocker.write_text("")
    proc = light.run("warm_probe", env={"EMPRIV_WARM_DIR": str(blocker / "warm")})
    assert proc.returncode == 0 and _probe(proc)["argv"][1:] == []
    first = proc.stderr.splitlines()[0]
    assert first.startswith("empriv.infra.warm: running warm_probe directly (cannot create ") and "a file/warm" in first


def test_a_socket_path_longer_than_unix_sockets_allow_still_works(tmp_path):
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    project = Project(deep, preload=LIGHT)
    try:
        assert len(str(project.warm_dir)) > 120
        proc = project.run("warm_probe", "--exit", "4")
        assert proc.returncode == 4 and "directly" not in proc.stderr, proc.stderr
        assert len(_server_pids(project.warm_dir)) == 1
    finally:
        assert len(_stop_servers(project.warm_dir)) == 1


def test_the_client_imports_nothing_heavy(full):
    code = ("import sys, runpy; sys.argv = ['x', '--socket']\n"
            "try:\n    runpy.run_module('empriv.infra.warm', run_name='__main__')\nexcept SystemExit:\n    pass\n"
            "heavy = [m for m in ('torch', 'numpy', 'transformers', 'empriv.config', 'subprocess', "
            "'empriv.infra.warm_server', 'empriv.infra.warm_worker') if m in sys.modules]\n"
            "print(heavy)")
    proc = subprocess.run([PYTHON, "-c", code], env=full.env, capture_output=True, text=True, cwd=full.root, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "[]"
    sock = proc.stdout.splitlines()[0]
    assert sock.startswith(str(full.warm_dir)) and sock.endswith(".sock")


# ------------------------------------------------------------------------------- a real stage, bit for bit

TINY_OVERRIDES = {
    "runtime": {"threads": 2, "wandb_mode": "offline"},
    "data": {"n_train": 300, "n_validation": 20, "n_test": 40, "n_public": 300, "seed": 3},
    "tokenizer": {"vocab_size": 512},
    "base": {"n_layer": 1, "n_embd": 32, "n_head": 2, "seq_len": 64, "pretrain_steps": 10, "pretrain_batch_size": 16},
    "train": {"micro_batch_size": 16},
}
TRAIN_ARGS = ["--name", "eps8-b32-T3-lr0.01-s0", "--epsilon", "8", "--batch-size", "32", "--steps", "3",
              "--learning-rate", "0.01", "--seed", "0"]


def scratch_project(work: Path) -> None:
    """The repository's params.yaml with a tiny corpus, base and a one-point cube written into ``work``."""
    import yaml

    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    for section, values in TINY_OVERRIDES.items():
        params.setdefault(section, {}).update(values)
    cube = params["cube"]
    cube.update({"epsilon": [8], "batch_size": [32], "steps": [3], "learning_rate": [0.01], "seed": [0]})
    for axis in ("unit", "method"):
        if axis in cube:
            cube[axis] = cube[axis][:1]
    work.mkdir(parents=True, exist_ok=True)
    (work / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))


def _digest(directory: Path) -> dict:
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.mark.alone  # 2 torch threads: run with the machine to itself (Makefile, `make test`)
def test_a_train_stage_in_a_worker_is_bit_identical_to_a_plain_run(full, tmp_path):
    work = tmp_path / "project"
    scratch_project(work)
    for stage in ("prepare", "tokenizer", "base"):  # the stage scripts, as dvc.yaml runs them
        proc = full.run(ROOT / f"stages/{stage}.py", cwd=work)
        assert proc.returncode == 0, proc.stderr[-3000:]
    cube = __import__("yaml").safe_load((work / "params.yaml").read_text())["cube"]
    args = TRAIN_ARGS + [a for axis in ("unit", "method") if axis in cube for a in (f"--{axis}", str(cube[axis][0]))]
    outputs = {}
    for mode in ("plain", "warm"):
        proc = full.run(ROOT / "stages/train.py", *args, cwd=work, warm=mode == "warm")
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs, records = work / "models/runs", work / "records/train"
        metrics = {p.name: json.loads(p.read_text()) for p in records.rglob("*.json")}
        print(mode, {k: v for m in metrics.values() for k, v in m.items() if k.endswith(("time_s", "_mb"))})
        metrics = {name: {k: v for k, v in m.items() if not k.endswith(("time_s", "_mb")) and k != "peak_memory"}
                   for name, m in metrics.items()}
        outputs[mode] = (_digest(runs), metrics)
        shutil.rmtree(runs)
        shutil.rmtree(records)
    assert any(name.endswith("model.safetensors") for name in outputs["plain"][0])
    assert outputs["warm"][0] == outputs["plain"][0]
    (plain_metrics,), (warm_metrics,) = outputs["plain"][1].values(), outputs["warm"][1].values()
    assert {k: v for k, v in warm_metrics.items() if v != plain_metrics.get(k)} == {}


def test_the_cpu_kernels_torch_picks_at_import_are_part_of_the_server_key():
    """ATEN_CPU_CAPABILITY (and oneDNN's ISA cap) choose torch's kernels when it is imported, i.e. in the server: a
    client that sets them must not be served by a server that imported torch without them (other float results)."""
    from empriv.infra.warm_key import server_key

    base = {"PATH": "/usr/bin"}
    keys = {server_key(base), server_key({**base, "ATEN_CPU_CAPABILITY": "default"}),
            server_key({**base, "ATEN_CPU_CAPABILITY": "avx2"}), server_key({**base, "ONEDNN_MAX_CPU_ISA": "AVX2"}),
            server_key({**base, "DNNL_MAX_CPU_ISA": "AVX2"})}
    assert len(keys) == 5
    assert server_key({**base, "UNRELATED": "1"}) == server_key(base)
