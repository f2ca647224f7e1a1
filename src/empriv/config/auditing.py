"""Sections of auditing: ``canaries``, ``audit`` and ``adaptation_audit`` with their cubes."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, field_validator

from empriv.config.cube import CubeParams, _CubeAxes
from empriv.config.errors import ParamError
from empriv.config.values import Epsilon, _Section


class CanariesParams(_Section):
    """Audit canaries (secrets/canaries.py): m = n_canaries, each a member with probability 1/2."""

    design: Literal["random", "unigram", "bigram", "model", "new_token"] = "new_token"
    n_canaries: int = Field(1000, ge=2)
    n_population: int = Field(200, ge=0)  # never-trained canaries: RMIA's population set Z
    prefix: Literal["random", "test"] = "random"
    prefix_length: int = Field(16, ge=1)
    secret_length: int = Field(1, ge=1, le=8)
    loss: Literal["sft", "nwp"] = "sft"
    pool_size: int = Field(256, ge=1)  # unigram/bigram/model: draw from the pool_size least likely tokens
    seed: int = 0


def _default_audit_cube() -> "CubeParams":
    return CubeParams(epsilon=[2, 64, math.inf], batch_size=[128], steps=[32], learning_rate=[0.01], seed=[0])


class AuditParams(_Section):
    """The audit cube (audit@<config>: train with canaries, then audit) and the audit's rules."""

    cube: CubeParams = Field(default_factory=_default_audit_cube)
    rule: Literal["top_r", "split_half"] = "top_r"
    guesses: int = Field(100, ge=1)  # r for top_r
    guess_side: Literal["members", "both"] = "members"
    r_grid: list[int] = [10, 20, 50, 100, 200]  # split_half chooses r here; also the (labelled) optimistic max
    score: Literal["loss", "zlib", "min_k", "reference", "rmia"] = "loss"  # the score the guesses use
    delta: float | None = 1e-5  # δ of the bound (Paper A: 1e-5); null: the run's own δ
    min_k: float = Field(0.2, gt=0, le=1)
    rmia_gamma: float = Field(1.0, gt=0)
    rmia_alpha: float = Field(0.0, ge=0, le=1)
    eval_batch_size: int = Field(256, ge=1)
    seed: int = 0
    # user-level audits (audit.cube.unit other than record): a canary unit's score from its k records' loss scores
    unit_score: Literal["mean", "median", "min", "max"] = "mean"

    @field_validator("delta")
    @classmethod
    def _audit_delta(cls, v: float | None) -> float | None:
        if v is not None and not 0 <= v < 1:
            raise ParamError("out of range", v, "a number in [0, 1), or null for the run's delta")
        return v

    @field_validator("r_grid")
    @classmethod
    def _r_grid(cls, v: list[int]) -> list[int]:
        if not v or any(r < 1 for r in v):
            raise ParamError("must list integers >= 1", v, "a non-empty list of integers >= 1")
        return v


class AdaptationAuditCube(_CubeAxes):
    """The adaptation-audit cube: one adaptation_audit@<item> per combination; no dataset = no such stage."""

    dataset: list[Literal["iid", "ood"]] = []  # [] for the default run
    epsilon: list[Epsilon] = [8]
    batch_size: list[int] = [32]
    steps: list[int] = [50]
    learning_rate: list[int | float] = [0.01]
    seed: list[int] = [0]
    method: list[str] = ["full"]

    @field_validator("dataset")
    @classmethod
    def _unique_datasets(cls, v: list) -> list:
        if len(set(v)) != len(v):
            raise ParamError("has duplicate values", v, "distinct values of iid, ood")
        return v


class AdaptationAuditParams(_Section):
    """Membership inference against DP adaptations on in- and out-of-distribution adaptation data (issue 17; research:
    auditing private adaptations): data from empriv.data.adaptation_sets, attacks from empriv.audit.adaptation."""

    cube: AdaptationAuditCube = AdaptationAuditCube()
    n_members: int = Field(300, ge=2)  # the adaptation's training set
    n_nonmembers: int = Field(300, ge=2)  # unseen texts of the same dataset
    n_shadow: int = Field(300, ge=2)  # the shadow adaptation's training set (RMIA's reference model)
    n_population: int = Field(300, ge=2)  # RMIA's population Z
    n_probe: int = Field(300, ge=2)  # pre-training probe: public-split texts and as many fresh ones
    ood_records_per_author: int = Field(1, ge=1, le=20)
    min_k: float = Field(0.2, gt=0, le=1)
    rmia_gamma: float = Field(1.0, gt=0)
    rmia_alpha: float = Field(0.0, ge=0, le=1)
    eval_batch_size: int = Field(64, ge=1)
    seed: int = 0
