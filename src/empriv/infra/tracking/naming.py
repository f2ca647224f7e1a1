"""Where the runs go, which group and id a run has, its tags and config."""

from __future__ import annotations

import hashlib
import math
import os
import re
import subprocess
from pathlib import Path

from empriv.infra.tracking.scrub import numeric


def project_root(start: str | Path | None = None) -> Path:
    """The project directory whose ``wandb/`` keeps the runs, from inside any copy DVC runs a stage in.

    The directory to start from is ``$DVC_ROOT`` (DVC sets it for every stage command; for a queued
    experiment it names the *original* repository, not the temporary copy), else ``start``, else the
    working directory. Inside a DVC temporary copy (``<repo>/.dvc/tmp/exps/…``) the repository is the
    part before ``.dvc``; otherwise git's common directory (shared by every worktree, such as the
    preset studies under ``.studies/``) gives the main checkout. Without git: the start directory.
    """
    base = Path(os.environ.get("DVC_ROOT") or start or os.getcwd()).resolve()
    parts = base.parts
    for i in range(1, len(parts) - 3):
        if parts[i : i + 3] == (".dvc", "tmp", "exps"):
            return Path(*parts[:i])
    try:
        out = subprocess.run(["git", "-C", str(base), "rev-parse", "--path-format=absolute", "--git-common-dir"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return base
    common = Path(out.stdout.strip()) if out.returncode == 0 and out.stdout.strip() else None
    if common is not None and common.name == ".git":
        return common.parent
    return base


def tracking_root() -> Path:
    """``$EMPRIV_WANDB_DIR`` if set, else :func:`project_root`: W&B writes its runs into ``<this>/wandb/``."""
    env = os.environ.get("EMPRIV_WANDB_DIR")
    return Path(env).expanduser().resolve() if env else project_root()


def study_group() -> str:
    """The W&B group of this pipeline's runs: ``$EMPRIV_WANDB_GROUP``; else the DVC experiment's name
    (``dvc exp run``, queued or not); else the preset study's name (a worktree ``.studies/<name>``);
    else ``workspace``."""
    for var in ("EMPRIV_WANDB_GROUP", "DVC_EXP_NAME"):
        if os.environ.get(var):
            return os.environ[var]
    here = Path(os.environ.get("DVC_ROOT") or os.getcwd()).resolve()
    if here.parent.name == ".studies":
        return here.name
    return "workspace"


def run_id(project: str, group: str, name: str) -> str:
    """The W&B run id of ``name`` in ``group`` of ``project``: readable, W&B-safe and unique (a hash of all three)."""
    digest = hashlib.sha256(f"{project}\0{group}\0{name}".encode()).hexdigest()[:10]
    slug = re.sub(r"[^A-Za-z0-9_-]+", "_", f"{group}--{name}")[:80]
    return f"{slug}-{digest}"


def epsilon_tags(epsilon: float, method: str | None) -> list[str]:
    """``eps=8`` (``eps=inf`` and ``non-private`` for ∞) and ``method=<method>``; 8 and 8.0 give the same tag."""
    tags = [f"eps={float(epsilon):g}" if math.isfinite(epsilon) else "eps=inf"]
    if not math.isfinite(epsilon):
        tags.append("non-private")
    if method:
        tags.append(f"method={method}")
    return tags


def configuration_config(params, run, *, method: str | None = None) -> dict:
    """The config of a configuration's run: the point of the cube (ε numeric, ∞ as None) and every params
    section but the cubes, as resolved for this run."""
    dump = params.model_dump()
    dump.pop("cube", None)
    if isinstance(dump.get("audit"), dict):
        dump["audit"].pop("cube", None)
    return numeric({
        "configuration": run.name,
        "seed_group": run.group,
        "epsilon": run.epsilon,
        "private": run.private,
        "batch_size": run.batch_size,
        "steps": run.steps,
        "learning_rate": run.learning_rate,
        "seed": run.seed,
        "method": method or getattr(run, "method", None) or params.train.run_method,
        **dump,
    })
