"""Sections of training: ``privacy`` (δ, accountant, user-level accounting) and ``train`` with its methods'
settings (LoRA, prefix, prompt, head, DP-Flat, DPZero, variants). The methods' names: :mod:`empriv.config.methods`."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from empriv.config.errors import ParamError, _did_you_mean
from empriv.config.methods import BUILTIN, method_names
from empriv.config.values import _Section


class PrivacyParams(_Section):
    delta: float | None = None
    delta_exponent: float = Field(1.1, gt=0)
    accountant: Literal["prv", "rdp", "pld"] = "prv"
    # user-level units (cube.unit; empriv/privacy_unit.py): Group Privacy's accounting — tight (mixture-of-Gaussians
    # PLD, the research's) or naive (group-privacy conversion of a record-level guarantee) — and whether a unit with
    # fewer than k records is resampled with replacement (the research) or is an error.
    group_accounting: Literal["tight", "naive"] = "tight"
    user_resample: bool = True

    @field_validator("delta")
    @classmethod
    def _delta(cls, v: float | None) -> float | None:
        if v is not None and not 0 < v < 1:
            raise ParamError("out of range", v, "a number in (0, 1), or null for n^-delta_exponent")
        return v


class LoraParams(_Section):
    rank: int = Field(8, ge=1)
    alpha: float = Field(16.0, gt=0)
    dropout: float = Field(0.0, ge=0, lt=1)
    target_modules: list[str] | None = None  # null: the architecture's default (models/adapters.py LORA_TARGET_MODULES)


ADAPTATION_METHODS = tuple(BUILTIN)  # the shipped training methods (config.methods; method_names() adds registered ones)


def _check_method(v: str) -> str:
    """A training method's name must be declared (config.methods: shipped, or registered by empriv.train.methods)."""
    if v not in method_names():
        raise ParamError("unknown method" + _did_you_mean(v, method_names()), v, ", ".join(method_names()))
    return v


class PrefixParams(_Section):
    """Prefix tuning (models/adaptations.py): P key/value vectors per attention layer."""

    n_virtual: int = Field(10, ge=1)  # P
    layers: list[int] | None = None  # attention layers with a prefix (null: all)
    reparameterize: bool = False  # produce the prefix with an MLP (Li & Liang)
    hidden: int = Field(512, ge=1)  # the MLP's hidden width

    @field_validator("layers")
    @classmethod
    def _layers(cls, v: list[int] | None) -> list[int] | None:
        if v is not None:
            if not v:
                raise ParamError("must list at least one layer, or be null for all", v)
            if len(set(v)) != len(v) or any(x < 0 for x in v):
                raise ParamError("must list distinct layer indices >= 0", v, "distinct integers >= 0, or null")
        return v


class PromptParams(_Section):
    n_virtual: int = Field(10, ge=1)  # P soft-prompt embeddings


class HeadParams(_Section):
    target: Literal["lm_head", "last_block"] = "lm_head"  # the (untied) LM head, or the last block + final norm


class DPFlatParams(_Section):
    """DP-Flat (adapt/dpflat.py) on prefix tuning: three switches, each with a published and a strict variant."""

    awp: bool = False  # within-layer: adversarial weight perturbation in the first awp_steps steps
    awp_variant: Literal["published", "strict"] = "published"  # v from the un-noised batch gradient | the last noisy one
    awp_steps: int = Field(0, ge=0)  # E, in steps (<= T)
    gamma: float = Field(0.01, gt=0)  # AWP radius relative to each layer's weight norm
    layer_elimination: bool = False  # cross-layer: sharpness-guided greedy elimination of prefix layers
    target_layers: int | None = Field(None, ge=1)  # layers kept
    elimination_data: Literal["private", "public"] = "private"
    elimination_samples: int | None = Field(256, ge=1)  # records the sharpness is measured on (seeded subset; null: all)
    kd: bool = False  # cross-model: + lambda (w - w_nor)/||w - w_nor|| after privatisation
    kd_lambda: float = Field(0.01, ge=0)  # lambda
    kd_data: Literal["private", "public"] = "private"  # w_nor trained on the training data | the public split
    nor_steps: int = Field(50, ge=0)  # non-private SGD steps of w_nor
    nor_lr: float = Field(0.1, gt=0)
    nor_batch_size: int | None = Field(64, ge=1)  # null: full batch

    @property
    def enabled(self) -> bool:
        return self.awp or self.layer_elimination or self.kd

    @model_validator(mode="after")
    def _switches(self) -> "DPFlatParams":
        if self.layer_elimination and self.target_layers is None:
            raise ParamError("must be set when layer_elimination is on", None, "an integer >= 1 (layers kept)",
                             key="target_layers")
        return self


class DPZeroParams(_Section):
    """Black-box soft-prompt tuning with DPZero (adapt/dpzero.py); MeZO at ε = inf."""

    n_prompt: int = Field(10, ge=1)  # P soft-prompt embeddings
    mu: float = Field(1e-3, gt=0)  # perturbation scale of the finite difference
    kd: bool = False  # DP-Flat black-box: + lambda (theta - theta_nor)/||theta - theta_nor|| after privatisation
    kd_lambda: float = Field(0.01, ge=0)
    kd_data: Literal["private", "public"] = "private"  # theta_nor trained (MeZO) on the training data | public split
    nor_steps: int = Field(50, ge=0)  # MeZO steps of theta_nor


class VariantParams(_Section):
    """A named ``cube.method`` value: an adaptation method and the train sections it uses instead of the defaults."""

    method: str
    lora: LoraParams | None = None
    prefix: PrefixParams | None = None
    prompt: PromptParams | None = None
    head: HeadParams | None = None
    dpflat: DPFlatParams | None = None
    dpzero: DPZeroParams | None = None

    @field_validator("method")
    @classmethod
    def _method(cls, v: str) -> str:
        return _check_method(v)


class TrainParams(_Section):
    # The adaptation of the run being trained: set from the run's cube.method (Params.for_method), never in
    # params.yaml (the cube's axis is cube.method). ``variant``: the cube.method name when it is a train.variants entry.
    method: str = Field("full", exclude=True)
    variant: str | None = Field(None, exclude=True)
    optimizer: Literal["adam", "sgd"] = "adam"
    clip_norm: float = Field(1.0, gt=0)
    # Physical batch (memory only: the logical Poisson batch b and the accounting do not depend on it):
    # an int >= 1, or "auto" (CUDA: the largest power of two that fits, probed; CPU: an estimate).
    micro_batch_size: int | Literal["auto"] = 64
    sampler: Literal["poisson"] = "poisson"
    # the private step of the DP loop: fast (empriv.models.fast_dp: ghost norms / book-keeping, padding trimmed, one
    # backward), opacus (GradSampleModule + DPOptimizer), or auto (fast where every trainable module is supported,
    # else opacus; the run records which and why)
    dp_step: Literal["auto", "fast", "opacus"] = "auto"
    log_every: int = Field(1, ge=1)
    lora: LoraParams = LoraParams()
    prefix: PrefixParams = PrefixParams()
    prompt: PromptParams = PromptParams()
    head: HeadParams = HeadParams()
    dpflat: DPFlatParams = DPFlatParams()
    dpzero: DPZeroParams = DPZeroParams()
    variants: dict[str, VariantParams] = {}  # named cube.method values, e.g. {dpflat: {method: prefix, dpflat: {...}}}

    @property
    def run_method(self) -> str:
        """The cube.method name of the run being trained (its random streams and file names use it)."""
        return self.variant or self.method

    @field_validator("variants")
    @classmethod
    def _variant_names(cls, v: dict) -> dict:
        for name in v:
            if name in method_names():
                raise ParamError("a variant may not reuse a built-in method's name", name,
                                 f"a new name (built-in: {', '.join(method_names())})")
            if not re.fullmatch(r"[a-z][a-z0-9_]*(-[a-z0-9_]+)*", name):
                raise ParamError("not a valid method name (lower-case letters, digits, _ and -; it names files)",
                                 name, "e.g. dpflat-strict")
        return v

    @field_validator("method")
    @classmethod
    def _method(cls, v: str) -> str:
        return _check_method(v)

    @field_validator("micro_batch_size", mode="before")
    @classmethod
    def _micro_batch_size(cls, v: Any) -> Any:
        if v == "auto":
            return v
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ParamError("not an integer >= 1 or 'auto'", v, "an integer >= 1, or 'auto'")
        return v
