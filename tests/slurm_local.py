"""The localhost SLURM cluster the tests run (tools/slurm/cluster.sh): its paths, a free pair of ports for its
controller and node daemon, and why it cannot run here (None when it can). Shared by tests/test_slurm_cluster.py
(submitit on the cluster) and tests/infra/test_sweep.py (the sweep's SLURM engine)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import socket
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = ROOT / "tools" / "slurm" / "cluster.sh"
SHIM_DIR = ROOT / "tools" / "slurm" / "bin"  # the `sacct` stand-in (no accounting daemon runs)
DAEMONS = ("munged", "slurmctld", "slurmd")
BINARIES = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "srun", "squeue", "sinfo", "scontrol")


@contextlib.contextmanager
def one_cluster_at_a_time():
    """Hold a machine-wide lock while a test's cluster runs: under ``make test``'s two pytest-xdist workers the two
    modules that start a cluster would otherwise run theirs side by side (one slurmd per host is what the cluster
    script is written for). Without xdist nothing waits."""
    with open(Path(tempfile.gettempdir()) / "empriv-test-slurm-cluster.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def free_port_pair() -> int:
    """A port p with p and p + 1 both free on 127.0.0.1 (slurmctld and slurmd)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port >= 65534:
            continue
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("127.0.0.1", port))
                b.bind(("127.0.0.1", port + 1))
            return port
        except OSError:
            continue
    raise RuntimeError("no free pair of adjacent ports on 127.0.0.1")


def missing_reason() -> str | None:
    """Why the cluster cannot run on this machine (binaries, root, submitit), or None."""
    missing = [b for b in BINARIES if shutil.which(b) is None]
    if missing:
        return f"SLURM/munge binaries not installed ({', '.join(missing)}); run tools/slurm/cluster.sh install"
    if os.geteuid() != 0:
        return "the localhost SLURM test cluster runs its daemons as root"
    try:
        import submitit  # noqa: F401
    except ImportError:
        return "submitit is not installed in this environment"
    return None
