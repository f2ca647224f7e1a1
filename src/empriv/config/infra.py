"""Sections of where jobs run: ``sweep`` (local or SLURM) and ``slurm``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from empriv.config.values import _Section


class SlurmParams(_Section):
    """Per-job resources of ``empriv sweep --engine slurm`` (submitit's SlurmExecutor parameters)."""

    partition: str | None = None  # null: the cluster's default partition
    timeout_min: int = Field(60, ge=1)
    cpus_per_task: int = Field(2, ge=1)
    gpus_per_node: int = Field(0, ge=0)
    mem_gb: float = Field(8.0, gt=0)
    signal_delay_s: int = Field(120, ge=0)  # SIGUSR2 this long before the limit: the job checkpoints and requeues
    additional: dict[str, str] = {}  # slurm_additional_parameters, e.g. {account: ..., qos: ...}


class SweepParams(_Section):
    """``empriv sweep``: one job per matrix item of the named stages, through submitit (docs/cluster.md)."""

    engine: Literal["local", "slurm"] = "local"
    stages: list[str] = ["train", "score", "audit"]  # matrix stages whose items become jobs
    jobs: int = Field(2, ge=1)  # local engine: items run at once
    max_retries: int = Field(2, ge=0)  # re-submissions of a preempted or failed job (it resumes from its checkpoint)
    # `empriv validate` refuses a cube (+ audit cube) of more runs unless --yes (make repro YES=1); see pipeline/cube_size
    max_runs: int = Field(2000, ge=1)
    folder: str = ".empriv/sweep"  # submitit's job folder (scripts, logs, results); shared with the nodes on a cluster
    slurm: SlurmParams = SlurmParams()
    # per-stage overrides of the slurm resources, e.g. {train: {gpus_per_node: 1, timeout_min: 120}}
    resources: dict[str, SlurmParams] = {}
