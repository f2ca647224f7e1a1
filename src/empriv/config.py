"""Typed, validated view of ``params.yaml`` — the one place every stage loads its parameters from.

A bad value fails here, before any work starts, with a :class:`ConfigError` (a ``ValueError``) whose
message has one self-contained line per problem: ``<key>: <what is wrong> (got <value>; allowed: …)``.
Validation is strict: an integer field rejects ``64.0`` and ``true``, a float field accepts an integer,
numbers must be finite (ε may be ``inf``: non-private), unknown keys are rejected at every level with a
"did you mean" suggestion, and files the params name must exist. ``params.yaml`` is read with
ruamel.yaml, the YAML 1.2 parser DVC itself uses, so ``1e-2`` means the same number to DVC and to empriv.
"""

from __future__ import annotations

import difflib
import math
import os
import re
import types
from dataclasses import dataclass
from itertools import product
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import (AllowInfNan, BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator,
                      model_validator)


KNOWN_BASES = ("tiny-gpt2", "smollm2-135m")
DATA_SOURCES = ("synthetic-enron", "enron", "synthetic-tofu", "tofu")
REAL_SOURCES = ("enron", "tofu")
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")

EPSILON_MAX = 100
"""The largest finite ε a params file may ask for (cube.epsilon, audit.cube.epsilon, score.acr.epsilons).

Beyond it the calibrated noise multiplier σ tends to 0 and the accountants lose precision (PRV overflows near
ε ≈ 700 and reports nonsense; ε = 1e9 made it try to allocate 24 GB): a run that should not be private is
written ``inf`` (no noise, no clipping guarantee claimed)."""

INF_SPELLINGS = ("inf", "+inf", ".inf", "infinity", "+infinity")  # any case; YAML's .inf is already a float
EPSILON_ALLOWED = f"a number > 0 and <= EPSILON_MAX = {EPSILON_MAX}, or inf for non-private"

AIR_TEMPLATE = "What genre does {x} write in?"
# data.variant: the TOFU variants (built by empriv.data.variants; named here so that config imports no library package)
VARIANTS = ("tofu-1", "tofu-2", "tofu-4", "tofu-1:7", "tofu-2:6", "tofu-3:5", "tofu-2*")
"""The research's attribute question P(x) of AIR ({x}: the author's name): the default of ``score.air_template``."""

# Score columns of the run table (empriv.analysis.table builds it from every top-level numeric scalar of
# records/score/<config>.json, which empriv.score.run writes from empriv.score.memorization.aggregate);
# tests/test_validate.py checks these names against what that code produces.
PRIVACY_SCORES = ("acr_success_rate", "acr_mean", "acr_max", "acr_bound_max", "air_mean", "air_max",
                  "exposure_gap_mean", "exposure_gap_worst", "exposure_gap_vs_base_mean", "exposure_gap_vs_base_worst",
                  "vmr_mean", "vmr_worst", "vmr_max", "vmr_greedy_mean", "vmr_greedy_max")  # higher = more memorised
UTILITY_SCORES = ("test_nll",)  # lower = better
OTHER_SCORES = ("continuation_nll_mean", "continuation_nll_worst")  # lower = more memorised
SCORE_NAMES = PRIVACY_SCORES + UTILITY_SCORES + OTHER_SCORES
SCORE_COUNTS = ("acr_n_searched", "acr_n_success", "n_secrets", "n_controls")  # numeric columns that are not scores


class ConfigError(ValueError):
    """Invalid parameters or inputs. Each line of the message is one self-contained problem,
    ``<key>: <what is wrong> (got <value>; allowed: …)``; :func:`error_lines` prefixes them with ``error:``."""

    def __init__(self, *messages: Any):
        self.lines = [line for m in messages for line in str(m).splitlines() if line.strip()] or ["invalid parameters"]
        super().__init__("\n".join(self.lines))


def error_lines(err: BaseException) -> str:
    """The one-line-per-problem text a user sees: every line ``error: …`` (a ConfigError's lines, or any other
    exception's message folded onto one line)."""
    if isinstance(err, ConfigError):
        return "\n".join(f"error: {line}" for line in err.lines)
    text = " ".join(str(err).split()) or type(err).__name__
    if isinstance(err, FileNotFoundError) and not text.startswith("missing input"):
        text = f"missing input: {text}"
    return f"error: {text}"


_NOTHING = object()


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class ParamError(ValueError):
    """A validator's finding: what is wrong, the value, what is allowed; ``key`` (absolute, dotted) when the
    problem belongs to another field than the one validated, ``index`` for an item of a list field."""

    def __init__(self, what: str, got: Any = _NOTHING, allowed: str | None = None, *, key: str | None = None,
                 index: int | None = None):
        self.what, self.got, self.allowed, self.key, self.index = what, got, allowed, key, index
        super().__init__(self.text())

    def text(self) -> str:
        extra = []
        if self.got is not _NOTHING:
            extra.append(f"got {_short(self.got)}")
        if self.allowed:
            extra.append(f"allowed: {self.allowed}")
        return self.what + (f" ({'; '.join(extra)})" if extra else "")


def parse_epsilon(value: Any, *, text: bool = False) -> int | float:
    """ε of a params file or command line: a number in (0, EPSILON_MAX], or ``math.inf`` (non-private) spelled
    ``inf``, ``.inf``, ``Infinity`` (any case). The one place ``inf`` is parsed: every reader of an ε uses it.

    Numbers keep their type (2 stays int, 2.0 float: run names are built from them as DVC builds them);
    ``text=True`` also accepts numeric strings (command-line arguments). Raises :class:`ParamError`."""
    if isinstance(value, str):
        t = value.strip().lower()
        if t in INF_SPELLINGS:
            return math.inf
        if not text:
            raise ParamError("not a number", value, EPSILON_ALLOWED)
        try:
            value = float(t)
        except ValueError:
            raise ParamError("not a number", value, EPSILON_ALLOWED) from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (isinstance(value, float) and math.isnan(value)):
        raise ParamError("not a number", value, EPSILON_ALLOWED)
    if math.isinf(value) and value > 0:
        return math.inf
    if not value > 0:
        raise ParamError("must be > 0", value, EPSILON_ALLOWED)
    if value > EPSILON_MAX:
        raise ParamError(f"above EPSILON_MAX = {EPSILON_MAX}: σ → 0 and the accountants lose precision; "
                         "write inf for a non-private run", value, EPSILON_ALLOWED)
    return value


def _epsilon_list(v: Any) -> list:
    if not isinstance(v, list):
        raise ParamError("not a list", v, f"a list of ε values, each {EPSILON_ALLOWED}")
    out = []
    for i, e in enumerate(v):
        try:
            out.append(parse_epsilon(e))
        except ParamError as err:
            err.index = i
            raise
    return out


def _existing_path(value: str, info: ValidationInfo) -> Path:
    """``value`` as a path, relative to the params file's directory when loaded from a file (else the cwd)."""
    path = Path(value).expanduser()
    root = (info.context or {}).get("root") if info is not None else None
    return path if path.is_absolute() or root is None else Path(root) / path


# the raw inputs a params file can name (Params.inputs keys) and the params key naming each
RAW_INPUTS = {"corpus": "data.path", "overrides": "secrets.overrides", "base": "base.name"}


def is_local_base(name: str) -> bool:
    """``base.name`` names a local model directory (rather than a built-in base or a hub id)."""
    return name.startswith(("/", ".", "~"))


def expected_inputs(data_path: str | None, overrides: str | None, base_name: str | None) -> dict[str, str]:
    """The ``inputs`` mapping of params with these values: each raw file a params key names (``~`` expanded)."""
    named = {"corpus": data_path, "overrides": overrides,
             "base": base_name if isinstance(base_name, str) and is_local_base(base_name) else None}
    return {k: os.path.expanduser(v) for k, v in named.items() if isinstance(v, str)}


Epsilon = Union[int, Annotated[float, AllowInfNan(True)]]


class _Section(BaseModel):
    # strict: 64.0 is not an int, true is not a number, "3" is not a number; a float field accepts an int.
    # allow_inf_nan False: every float must be finite (ε fields opt in to inf).
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class RuntimeParams(_Section):
    device: str = "auto"
    # fp32, or bf16 autocast of the training forward passes (DP clipping, noise and weights stay fp32);
    # whether the resolved device supports it is checked when the run starts (empriv.train.precision).
    precision: Literal["fp32", "bf16"] = "fp32"
    threads: int = Field(2, ge=1)
    wandb_mode: Literal["offline", "online", "disabled"] = "offline"
    wandb_project: str = "empriv"
    # steps between checkpoints of a training run (resumed after a kill, bit-identical); null: none. Outputs do not
    # depend on it (no stage re-runs when it changes); checkpoints live in .empriv/checkpoints ($EMPRIV_CHECKPOINT_DIR)
    checkpoint_every: int | None = Field(None, ge=1)

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        if v not in ("auto", "cpu", "cuda", "mps") and not re.fullmatch(r"cuda:\d+", v):
            raise ParamError("unknown device", v, "auto, cpu, cuda, cuda:N, mps")
        return v


class DataParams(_Section):
    source: str = "synthetic-enron"
    path: str | None = None
    variant: str | None = None  # TOFU variants: tofu-2, tofu-4, tofu-1:7, tofu-2:6, tofu-3:5, tofu-2*
    top_n_people: int = Field(100, ge=1)  # Enron cleaning: top-N senders and receivers
    n_authors: int = Field(200, ge=2)  # synthetic TOFU: number of fictitious authors
    paraphraser: Literal["offline", "llm"] = "offline"  # TOFU variants: how paraphrases are made
    paraphraser_model: str = "meta-llama/Llama-3.1-8B-Instruct"  # for paraphraser: llm (GPU)
    n_train: int = Field(3000, ge=10)
    n_validation: int = Field(200, ge=1)
    n_test: int = Field(300, ge=1)
    n_public: int = Field(6000, ge=10)
    secret_frequencies: list[float] = [0.08, 0.07, 0.06, 0.05, 0.04, 0.01, 0.005, 0.002, 0.001]
    seed: int = 0

    @field_validator("secret_frequencies")
    @classmethod
    def _freqs(cls, v: list[float]) -> list[float]:
        for i, f in enumerate(v):
            if not 0 < f < 1:
                raise ParamError("out of range", f, "a number in (0, 1)", index=i)
        if sum(v) >= 1:
            raise ParamError(f"must sum to < 1 (they sum to {sum(v):g})", v)
        return v

    @field_validator("source")
    @classmethod
    def _source(cls, v: str) -> str:
        if v == "synthetic":  # the name before TOFU existed
            return "synthetic-enron"
        if v not in DATA_SOURCES:
            raise ParamError("unknown data source" + _did_you_mean(v, DATA_SOURCES), v, ", ".join(DATA_SOURCES))
        return v

    @field_validator("variant")
    @classmethod
    def _variant(cls, v: str | None) -> str | None:
        if v is not None and v not in VARIANTS:
            raise ParamError("unknown TOFU variant" + _did_you_mean(v, VARIANTS), v, "null or " + ", ".join(VARIANTS))
        return v

    @model_validator(mode="after")
    def _path(self, info: ValidationInfo) -> "DataParams":
        if self.variant is not None and not self.source.endswith("tofu"):
            raise ParamError(f"applies to TOFU sources only, not data.source {self.source!r}", self.variant,
                             "null", key="variant")
        if self.source in REAL_SOURCES:
            if not self.path:
                raise ParamError(f"is required when data.source is {self.source!r}", self.path,
                                 "the path of the corpus file or directory", key="path")
            if not _existing_path(self.path, info).exists():
                raise ParamError("file does not exist", self.path, "an existing corpus file or directory", key="path")
        return self


class TokenizerParams(_Section):
    # auto: the BPE for tiny-gpt2, the base's own tokenizer for a pre-trained base
    kind: Literal["auto", "bpe", "gpt2"] = "auto"
    vocab_size: int = Field(2048, ge=300, le=100_000)


class BaseParams(_Section):
    name: str = "tiny-gpt2"
    n_layer: int = Field(2, ge=1)
    n_embd: int = Field(64, ge=8)
    n_head: int = Field(2, ge=1)
    seq_len: int = Field(64, ge=8, le=4096)
    # tiny-gpt2's learned position table; null: seq_len. Prompt tuning (prompt, dpzero) puts its P virtual tokens
    # before the sequence, so it needs n_positions >= seq_len + P
    n_positions: int | None = Field(None, ge=8, le=8192)
    pretrain_steps: int = Field(600, ge=0)
    pretrain_batch_size: int = Field(32, ge=1)
    pretrain_learning_rate: float = Field(3e-3, gt=0)
    seed: int = 0
    # torch threads of the base stage (null: runtime.threads): pre-training runs alone, before any other model stage,
    # so it can take every core while the sweep's parallel jobs take runtime.threads each
    threads: int | None = Field(None, ge=1)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str, info: ValidationInfo) -> str:
        allowed = f"{', '.join(KNOWN_BASES)}, an existing local path, or a hub id org/name"
        if v in KNOWN_BASES:
            return v
        if is_local_base(v):
            if not _existing_path(v, info).exists():
                raise ParamError("local model path does not exist", v, allowed)
            return v
        if _HUB_ID.match(v):
            return v
        raise ParamError("unknown base model" + _did_you_mean(v, KNOWN_BASES), v, allowed)

    @model_validator(mode="after")
    def _heads(self) -> "BaseParams":
        if self.n_embd % self.n_head:
            raise ParamError(f"must be divisible by base.n_head = {self.n_head}", self.n_embd,
                             f"a multiple of {self.n_head}", key="n_embd")
        return self


class SecretsParams(_Section):
    # mining (real Enron): token n-grams of length ngram, the top_k most frequent, merged
    ngram: int = Field(50, ge=2)
    filter: bool = False  # model-based filters after the non-private runs (see secrets/filtering.py)
    # which ε = ∞ runs the filters ask (secrets/filtering.py::select_filter_runs): every one of the cube; the seeds of
    # the non-private configuration with the most compute (largest b·T, then η); or only its first seed (the
    # research's Enron filter: one non-private fine-tune)
    filter_runs: Literal["all", "most_compute", "most_compute_first_seed"] = "all"
    top_k: int = Field(500, ge=1)
    min_count: int = Field(2, ge=2)
    split_rule: Literal["last_word", "half"] = "last_word"
    # ACR filters (Enron-like secrets, with filter: true): keep ACR >= acr_min_finetuned under the
    # first non-private run and ACR <= acr_max_base under the base model (search: score.acr)
    acr_min_finetuned: float = Field(1.5, ge=0)
    acr_max_base: float = Field(0.5, ge=0)
    min_continuation_chars: int = Field(4, ge=1)
    # mined secrets (real Enron): keep those with at least this fraction of their occurrences inside base.seq_len
    min_in_window_fraction: float = Field(0.5, ge=0, le=1)
    overrides: str | None = None

    @field_validator("overrides")
    @classmethod
    def _overrides(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is not None and not _existing_path(v, info).exists():
            raise ParamError("file does not exist", v, "null or an existing JSONL file of secret overrides")
        return v


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


ADAPTATION_METHODS = ("full", "lora", "prefix", "prompt", "head", "dpzero")
"""``cube.method`` values that need no definition (``train.variants`` names more): every weight, LoRA adapters,
key/value prefixes, a soft input prompt, the output layer, and black-box soft-prompt tuning with DPZero."""


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

    method: Literal["full", "lora", "prefix", "prompt", "head", "dpzero"]
    lora: LoraParams | None = None
    prefix: PrefixParams | None = None
    prompt: PromptParams | None = None
    head: HeadParams | None = None
    dpflat: DPFlatParams | None = None
    dpzero: DPZeroParams | None = None


class TrainParams(_Section):
    # The adaptation of the run being trained: set from the run's cube.method (Params.for_method), never in
    # params.yaml (the cube's axis is cube.method). ``variant``: the cube.method name when it is a train.variants entry.
    method: Literal["full", "lora", "prefix", "prompt", "head", "dpzero"] = Field("full", exclude=True)
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
            if name in ADAPTATION_METHODS:
                raise ParamError("a variant may not reuse a built-in method's name", name,
                                 f"a new name (built-in: {', '.join(ADAPTATION_METHODS)})")
            if not re.fullmatch(r"[a-z][a-z0-9_]*(-[a-z0-9_]+)*", name):
                raise ParamError("not a valid method name (lower-case letters, digits, _ and -; it names files)",
                                 name, "e.g. dpflat-strict")
        return v

    @field_validator("micro_batch_size", mode="before")
    @classmethod
    def _micro_batch_size(cls, v: Any) -> Any:
        if v == "auto":
            return v
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ParamError("not an integer >= 1 or 'auto'", v, "an integer >= 1, or 'auto'")
        return v


class _CubeAxes(_Section):
    """The checks every cube's axes share (the main, audit and adaptation-audit cubes): ε values parsed, b and T
    integers >= 1, η > 0, and each listed axis non-empty and free of duplicates."""

    @field_validator("epsilon", mode="before", check_fields=False)
    @classmethod
    def _eps_parse(cls, v: Any) -> Any:
        return _epsilon_list(v)

    @field_validator("batch_size", "steps", check_fields=False)
    @classmethod
    def _positive_ints(cls, v: list[int]) -> list[int]:
        for i, x in enumerate(v):
            if x < 1:
                raise ParamError("out of range", x, "an integer >= 1", index=i)
        return v

    @field_validator("learning_rate", check_fields=False)
    @classmethod
    def _lr(cls, v: list[float]) -> list[float]:
        for i, x in enumerate(v):
            if not x > 0:
                raise ParamError("must be > 0", x, "a finite number > 0", index=i)
        return v

    @field_validator("epsilon", "batch_size", "steps", "learning_rate", "seed", "unit", "method", check_fields=False)
    @classmethod
    def _nonempty_unique(cls, v: list) -> list:
        if not v:
            raise ParamError("must list at least one value", v)
        if len(set(v)) != len(v):
            raise ParamError("has duplicate values", v, "distinct values")
        return v


class CubeParams(_CubeAxes):
    # Numbers keep their YAML type (2 stays int, 2.0 stays float): run names are built with str()
    # exactly as DVC interpolates the matrix values into dvc.yaml.
    epsilon: list[Epsilon]  # each in (0, EPSILON_MAX] or inf
    batch_size: list[int]
    steps: list[int]
    learning_rate: list[int | float]
    seed: list[int]
    unit: list[str] = ["record"]  # privacy units (empriv/privacy_unit.py): record, group-k5-longest, userwise-k10-chunk
    method: list[str] = ["full"]  # adaptation methods (ADAPTATION_METHODS) or train.variants names

    @field_validator("unit")
    @classmethod
    def _units(cls, v: list[str]) -> list[str]:
        from empriv.privacy_unit import ALLOWED, parse_unit

        for i, x in enumerate(v):
            try:
                parse_unit(x)
            except ValueError as err:
                raise ParamError(str(err).split(" (")[0], x, ALLOWED, index=i) from None
        return v



class ACRParams(_Section):
    """Adversarial compression ratio (score/acr.py): which runs and secrets get it, and the search budget."""

    enabled: bool = True
    training_seeds: list[int] | None = [0]  # cube seeds whose runs get ACR (null: every run)
    epsilons: list[Epsilon] | None = None  # cube ε values whose runs get ACR (null: all); each in (0, EPSILON_MAX] or inf
    max_secrets: int | None = Field(None, ge=1)  # the first N secrets (null: all)
    strategy: Literal["fast", "published"] = "fast"
    top_k: int = Field(250, ge=1)
    candidates: int = Field(100, ge=1)
    steps: int = Field(200, ge=1)
    step_growth: float = Field(1.2, ge=1.0)
    start_length: int = Field(5, ge=1)
    grow: int = Field(5, ge=1)
    max_length: int = Field(30, ge=1)
    seeds: list[int] = Field([0, 1, 2], min_length=1)
    patience: int | None = Field(40, ge=1)
    patience_tolerance: float = Field(0.02, ge=0.0, lt=1.0)
    fast_candidates: int | None = Field(64, ge=1)  # fast only: swaps per seed per step (null: candidates)

    @field_validator("epsilons", mode="before")
    @classmethod
    def _eps(cls, v: Any) -> Any:
        return None if v is None else _epsilon_list(v)

    @model_validator(mode="after")
    def _lengths(self) -> "ACRParams":
        if self.max_length < self.start_length:
            raise ParamError(f"must be >= start_length = {self.start_length}", self.max_length,
                             f"an integer >= {self.start_length}", key="max_length")
        return self

    def applies_to(self, run: "RunConfig") -> bool:
        if not self.enabled:
            return False
        if self.training_seeds is not None and run.seed not in self.training_seeds:
            return False
        return self.epsilons is None or any(float(e) == float(run.epsilon) for e in self.epsilons)


class ScoreParams(_Section):
    vmr_samples: int = Field(10, ge=1)
    temperature: float = Field(1.0, gt=0)
    top_k: int = Field(50, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    n_controls: int = Field(20, ge=1)
    eval_batch_size: int = Field(64, ge=1)
    seed: int = 0
    air_template: str = AIR_TEMPLATE  # {x}: the author's name
    air_samples: int = Field(10, ge=1)
    air_max_new_tokens: int = Field(20, ge=1)
    acr: ACRParams = ACRParams()

    @field_validator("air_template")
    @classmethod
    def _air_template(cls, v: str) -> str:
        if "{x}" not in v:
            raise ParamError("must contain {x} (where the author's name goes)", v, "a question with {x} in it")
        return v


class AnalyzeParams(_Section):
    scores: list[str] = ["acr_success_rate", "acr_mean", "acr_max", "exposure_gap_mean", "exposure_gap_vs_base_mean", "continuation_nll_mean",
                         "vmr_mean", "test_nll"]
    # Empirical privacy scores (higher = more memorised) for variance, regression, heuristics and selection;
    # the first available one is the report's primary score. Absent or all-null columns are skipped (noted).
    privacy_scores: list[str] = ["acr_success_rate", "acr_mean", "acr_max", "air_mean", "air_max", "exposure_gap_mean", "exposure_gap_worst",
                                 "vmr_mean", "vmr_worst", "vmr_max", "vmr_greedy_mean", "vmr_greedy_max"]
    utility: str = "test_nll"  # lower = better
    retention_fraction: float = Field(0.9, ge=0, le=1)  # keep configurations with >= this share of the best utility gain
    base_utility: float | None = None  # null: records/base.json's test_nll
    monte_carlo_trials: int = Field(5000, ge=0)
    seed: int = 0

    @field_validator("scores")
    @classmethod
    def _scores(cls, v: list[str]) -> list[str]:
        return _known_names(v, SCORE_NAMES)

    @field_validator("privacy_scores")
    @classmethod
    def _privacy_scores(cls, v: list[str]) -> list[str]:
        return _known_names(v, PRIVACY_SCORES, "not an empirical privacy score (higher = more memorised)")

    @field_validator("utility")
    @classmethod
    def _utility(cls, v: str) -> str:
        if v not in UTILITY_SCORES:
            raise ParamError("not a utility score" + _did_you_mean(v, UTILITY_SCORES), v, ", ".join(UTILITY_SCORES))
        return v


def _known_names(v: list[str], known: tuple[str, ...], what: str = "unknown score") -> list[str]:
    for i, name in enumerate(v):
        if name not in known:
            raise ParamError(what + _did_you_mean(name, known), name, ", ".join(known), index=i)
    return v


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
    folder: str = ".empriv/sweep"  # submitit's job folder (scripts, logs, results); shared with the nodes on a cluster
    slurm: SlurmParams = SlurmParams()
    # per-stage overrides of the slurm resources, e.g. {train: {gpus_per_node: 1, timeout_min: 120}}
    resources: dict[str, SlurmParams] = {}


class Params(_Section):
    runtime: RuntimeParams = RuntimeParams()
    data: DataParams = DataParams()
    tokenizer: TokenizerParams = TokenizerParams()
    base: BaseParams = BaseParams()
    secrets: SecretsParams = SecretsParams()
    privacy: PrivacyParams = PrivacyParams()
    train: TrainParams = TrainParams()
    cube: CubeParams
    score: ScoreParams = ScoreParams()
    analyze: AnalyzeParams = AnalyzeParams()
    canaries: CanariesParams = CanariesParams()
    audit: AuditParams = AuditParams()
    adaptation_audit: AdaptationAuditParams = AdaptationAuditParams()
    sweep: SweepParams = SweepParams()
    # the raw files outside the repository that params name, as DVC deps (dvc.yaml's input@<key> stages): corpus =
    # data.path, overrides = secrets.overrides, base = a local base.name; {} for the built-in sources and bases
    inputs: dict[str, str] = {}

    @model_validator(mode="before")
    @classmethod
    def _moved_keys(cls, raw: Any) -> Any:
        if isinstance(raw, dict):
            train, audit = raw.get("train"), raw.get("audit")
            for section, key, where in ((train, "method", "cube.method"), (train, "variant", "cube.method"),
                                        (audit, "method", "audit.cube.method")):
                if isinstance(section, dict) and key in section:
                    prefix = "train" if section is train else "audit"
                    raise ParamError(f"moved to {where}: the adaptation method is an axis of the cube now (a list)",
                                     section[key], f"{where}: [{section[key] or 'full'}]", key=f"{prefix}.{key}")
        return raw

    @model_validator(mode="after")
    def _methods(self) -> "Params":
        t = self.train
        for where, cube in (("cube", self.cube), ("audit.cube", self.audit.cube),
                            ("adaptation_audit.cube", self.adaptation_audit.cube)):
            for i, name in enumerate(cube.method):
                if name not in ADAPTATION_METHODS and name not in t.variants:
                    known = ADAPTATION_METHODS + tuple(t.variants)
                    raise ParamError("unknown method" + _did_you_mean(name, known), name,
                                     f"{', '.join(ADAPTATION_METHODS)}, or a train.variants name", key=f"{where}.method[{i}]")
        aa = self.adaptation_audit.cube
        for name in dict.fromkeys([*self.cube.method, *self.audit.cube.method, *(aa.method if aa.dataset else [])]):
            resolved = self.for_method(name).train
            if resolved.dpflat.enabled and resolved.method != "prefix":
                what = "train.dpflat" if name in ADAPTATION_METHODS or self.train.variants[name].dpflat is None \
                    else f"train.variants.{name}.dpflat"
                raise ParamError(f"DP-Flat switches (awp, layer_elimination, kd) need prefix tuning, but cube method "
                                 f"{name!r} trains {resolved.method!r}", resolved.method,
                                 "method prefix, or every DP-Flat switch off", key=what)
            steps = self.cube.steps if name in self.cube.method else []
            steps = [*steps, *(self.audit.cube.steps if name in self.audit.cube.method else []),
                     *(aa.steps if aa.dataset and name in aa.method else [])]
            if resolved.dpflat.awp and steps and resolved.dpflat.awp_steps > min(steps):
                raise ParamError(f"E (AWP steps) must be <= T = {min(steps)}, the fewest steps of a cube run with "
                                 f"method {name!r}", resolved.dpflat.awp_steps, f"an integer in [0, {min(steps)}]",
                                 key="train.dpflat.awp_steps")
            virtual = {"prompt": resolved.prompt.n_virtual, "dpzero": resolved.dpzero.n_prompt}.get(resolved.method)
            b = self.base
            if virtual and b.name == "tiny-gpt2" and b.seq_len + virtual > (b.n_positions or b.seq_len):
                raise ParamError(f"cube method {name!r} puts {virtual} virtual tokens before base.seq_len = {b.seq_len} "
                                 f"tokens, more than the tiny-gpt2 base's {b.n_positions or b.seq_len} learned positions",
                                 b.n_positions, f"an integer >= {b.seq_len + virtual}", key="base.n_positions")
            layers = resolved.prefix.layers
            if resolved.dpflat.layer_elimination and resolved.dpflat.target_layers is not None and layers is not None \
                    and resolved.dpflat.target_layers > len(layers):
                raise ParamError(f"cannot keep more layers than train.prefix.layers has ({len(layers)})",
                                 resolved.dpflat.target_layers, f"an integer in [1, {len(layers)}]",
                                 key="train.dpflat.target_layers")
        return self

    def for_method(self, name: str) -> "Params":
        """These params with ``train`` set up for the cube method ``name``: ``train.method`` is its adaptation and a
        ``train.variants`` entry replaces the train sections it names. Every stage trains, scores and audits a run
        through ``params.for_method(run.method)``, so library code reads ``params.train.method``."""
        t = self.train
        if name in ADAPTATION_METHODS:
            return self.model_copy(update={"train": t.model_copy(update={"method": name, "variant": None})})
        if name not in t.variants:
            raise ConfigError(f"cube.method: unknown method {name!r} (allowed: {', '.join(ADAPTATION_METHODS)}, or a "
                              "train.variants name)")
        v = t.variants[name]
        update = {"method": v.method, "variant": name}
        for section in ("lora", "prefix", "prompt", "head", "dpflat", "dpzero"):
            if getattr(v, section) is not None:
                update[section] = getattr(v, section)
        return self.model_copy(update={"train": t.model_copy(update=update)})

    @model_validator(mode="after")
    def _inputs(self) -> "Params":
        expected = self.expected_inputs()
        for key, value in self.inputs.items():
            if key not in RAW_INPUTS:
                raise ParamError(f"is not a raw input{_did_you_mean(key, RAW_INPUTS)}", value,
                                 f"keys {', '.join(RAW_INPUTS)}", key=f"inputs.{key}")
            if key not in expected:
                raise ParamError(f"{RAW_INPUTS[key]} names no raw file (null, or a built-in or hub base): remove "
                                 f"inputs.{key}", value, f"no inputs.{key}", key=f"inputs.{key}")
            if "~" in value.split("/")[0]:
                raise ParamError("DVC does not expand ~", value, f"{expected[key]!r}", key=f"inputs.{key}")
            if os.path.normpath(value) != os.path.normpath(expected[key]):
                raise ParamError(f"must name {RAW_INPUTS[key]}'s file", value, f"{expected[key]!r}",
                                 key=f"inputs.{key}")
        return self

    def missing_inputs(self) -> list[str]:
        """One error line per raw file that params name but ``inputs`` does not list. The pipeline needs each (an
        ``input@`` stage is what makes DVC notice an edit to the file); the library does not, so only the
        pipeline's validation (``empriv validate``, the validate stage) asks for them."""
        return [f"inputs.{key}: missing: {RAW_INPUTS[key]} names a raw file DVC must track, or an edit to it would not "
                f"re-run the DAG; run `empriv validate --fix-inputs` or add it (allowed: inputs: {{{key}: {value}}})"
                for key, value in self.expected_inputs().items() if key not in self.inputs]

    def expected_inputs(self) -> dict[str, str]:
        """The ``inputs`` mapping these params need (:func:`expected_inputs`)."""
        return expected_inputs(self.data.path, self.secrets.overrides, self.base.name)

    @model_validator(mode="after")
    def _tokenizer_base(self) -> "Params":
        if self.base.name != "tiny-gpt2" and self.tokenizer.kind != "auto":
            raise ParamError(f"tokenizer.kind {self.tokenizer.kind!r} cannot be used with base.name {self.base.name!r}: "
                             "a pre-trained base brings its own tokenizer; set tokenizer.kind: auto",
                             key="tokenizer.kind")
        return self

    @model_validator(mode="after")
    def _cross(self) -> "Params":
        n = self.data.n_train
        for i, b in enumerate(self.cube.batch_size):
            if b > n:
                raise ParamError(f"must be <= data.n_train = {n}", b, f"an integer in [1, {n}]", key=f"cube.batch_size[{i}]")
        return self

    @model_validator(mode="after")
    def _audit_cross(self) -> "Params":
        c, a = self.canaries, self.audit
        if a.rule == "top_r" and a.guesses > c.n_canaries:
            raise ParamError(f"audit.guesses = {a.guesses} must be <= canaries.n_canaries = {c.n_canaries}",
                             allowed=f"an integer in [1, {c.n_canaries}]", key="audit.guesses")
        if c.design == "bigram" and c.secret_length < 2:
            raise ParamError("must be >= 2 for canaries.design 'bigram' (a token pair)", c.secret_length,
                             "an integer in [2, 8]", key="canaries.secret_length")
        if 1 + c.prefix_length + c.secret_length > self.base.seq_len:
            raise ParamError(f"a canary (1 + canaries.prefix_length {c.prefix_length} + canaries.secret_length "
                             f"{c.secret_length} tokens) must fit base.seq_len = {self.base.seq_len}",
                             allowed=f"prefix_length + secret_length <= {self.base.seq_len - 1}",
                             key="canaries.prefix_length")
        # audit.cube.batch_size <= data.n_train is checked by the audit run itself (as train@ does), so a
        # small data set that never audits is not rejected for the default audit cube.
        for i, u in enumerate(a.cube.unit):
            if u == "record":
                continue
            # a user-level audit (empriv.audit.user_level): k canary records per canary unit, top-r guesses over the
            # units' loss scores; it has no population set, no split_half and no other membership score
            if a.rule != "top_r":
                raise ParamError(f"a user-level audit (audit.cube.unit {u!r}) guesses top_r only", a.rule, "top_r",
                                 key="audit.rule")
            if a.score != "loss":
                raise ParamError(f"a user-level audit (audit.cube.unit {u!r}) scores units by the loss score only",
                                 a.score, "loss", key="audit.score")
            if c.prefix != "random":
                raise ParamError(f"a user-level audit (audit.cube.unit {u!r}) draws k random prefixes per canary unit",
                                 c.prefix, "random", key="canaries.prefix")
        return self

    def audit_runs(self) -> list["RunConfig"]:
        """The audit cube's configurations (each trained with canaries by audit@<config>)."""
        c = self.audit.cube
        return [RunConfig(e, b, t, lr, s, u, m) for e, b, t, lr, s, u, m
                in product(c.epsilon, c.batch_size, c.steps, c.learning_rate, c.seed, c.unit, c.method)]

    def adaptation_audit_runs(self) -> list[tuple[str, "RunConfig"]]:
        """The adaptation-audit cube: (dataset, configuration) pairs (record-level runs)."""
        c = self.adaptation_audit.cube
        return [(d, RunConfig(e, b, t, lr, s, "record", m)) for d, e, b, t, lr, s, m
                in product(c.dataset, c.epsilon, c.batch_size, c.steps, c.learning_rate, c.seed, c.method)]

    def user_audit_ks(self) -> list[int]:
        """The distinct k of the audit cube's user-level units: the canaries stage draws one set of canary units
        (k records each) per k."""
        return sorted({r.privacy_unit.k for r in self.audit_runs() if r.privacy_unit.user_level})

    # ----------------------------------------------------------------- derived values
    def delta_for(self, n: int) -> float:
        """δ of the guarantee: params' δ, or n^-delta_exponent (the research's δ = n^-1.1)."""
        return self.privacy.delta if self.privacy.delta is not None else float(n) ** (-self.privacy.delta_exponent)

    def runs(self) -> list["RunConfig"]:
        c = self.cube
        return [RunConfig(e, b, t, lr, s, u, m) for e, b, t, lr, s, u, m
                in product(c.epsilon, c.batch_size, c.steps, c.learning_rate, c.seed, c.unit, c.method)]


def format_number(x: float | int) -> str:
    """Format a cube value the way DVC interpolates it into ``dvc.yaml``: ``str`` of the YAML value
    (``2`` → "2", ``2.0`` → "2.0", ``1e-3`` → "0.001", ``inf``/``.inf`` → "inf")."""
    if isinstance(x, float) and math.isinf(x):
        return "inf"
    return str(x)


@dataclass(frozen=True)
class RunConfig:
    """One point of the cube: (ε, b, T, η, seed) and the privacy unit (``record`` unless user-level).

    For a user-level unit, b is the expected number of *records* per step over the bounded set (Group Privacy:
    q = b / (units · k)) or of *units* per step (User-wise DP-SGD: q = b / units)."""

    epsilon: float
    batch_size: int
    steps: int
    learning_rate: float
    seed: int
    unit: str = "record"
    method: str = "full"  # cube.method: an adaptation method or a train.variants name

    @property
    def private(self) -> bool:
        return math.isfinite(self.epsilon)

    @property
    def privacy_unit(self):
        """The parsed unit (:class:`empriv.privacy_unit.PrivacyUnit`)."""
        from empriv.privacy_unit import parse_unit

        return parse_unit(self.unit)

    @property
    def point_name(self) -> str:
        """``eps…-b…-T…-lr…-s…``: the name without the unit (file names under ``<dir>/<unit>/``)."""
        return config_name(self.epsilon, self.batch_size, self.steps, self.learning_rate, self.seed)

    @property
    def name(self) -> str:
        """The configuration's name: the point name, ``-<unit>`` for a user-level unit, and ``-<method>``."""
        return self.point_name + self.privacy_unit.suffix + f"-{self.method}"

    @property
    def file_stem(self) -> str:
        """Where the run's files live below a per-run directory: ``<unit>/<method>/<point name>`` (as dvc.yaml
        builds it)."""
        return f"{self.unit}/{self.method}/{self.point_name}"

    @property
    def group(self) -> str:
        """The configuration without its seed (runs that differ only by seed share a group)."""
        return self.point_name.rsplit("-s", 1)[0] + self.privacy_unit.suffix + f"-{self.method}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "epsilon": format_number(self.epsilon) if not self.private else self.epsilon,
            "batch_size": self.batch_size,
            "steps": self.steps,
            "learning_rate": self.learning_rate,
            "seed": self.seed,
            **({"unit": self.unit} if self.unit != "record" else {}),
            "method": self.method,
        }


def config_name(epsilon: float, batch_size: int, steps: int, learning_rate: float, seed: int) -> str:
    """Name of a run, identical to the one ``dvc.yaml`` builds from the matrix item."""
    return (
        f"eps{format_number(epsilon)}-b{batch_size}-T{steps}-lr{format_number(learning_rate)}-s{seed}"
    )


# --------------------------------------------------------------------------- loading
def read_yaml(path: str | Path) -> Any:
    from ruamel.yaml import YAML

    yaml = YAML(typ="safe", pure=True)
    with open(path, encoding="utf-8") as fh:
        return yaml.load(fh)


def _did_you_mean(word: str, known) -> str:
    close = difflib.get_close_matches(str(word), [str(k) for k in known], n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _model_of(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if get_origin(annotation) in (Union, types.UnionType):
        for a in get_args(annotation):
            if isinstance(a, type) and issubclass(a, BaseModel):
                return a
    return None


def _unwrap(annotation: Any, metadata: list) -> tuple[Any, list]:
    while get_origin(annotation) is Annotated:
        annotation, *more = get_args(annotation)
        metadata = [*metadata, *more]
    return annotation, metadata


def _list_item(annotation: Any) -> Any:
    annotation, _ = _unwrap(annotation, [])
    if get_origin(annotation) in (Union, types.UnionType):
        for a in get_args(annotation):
            if get_origin(a) is list:
                return get_args(a)[0]
    return get_args(annotation)[0] if get_origin(annotation) is list else annotation


def _bounds(metadata: list) -> str:
    lo = hi = None
    for m in metadata:
        for attr, sym in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
            value = getattr(m, attr, None)
            if value is not None:
                if attr in ("ge", "gt"):
                    lo = (sym, value)
                else:
                    hi = (sym, value)
    if lo and hi:
        return f" in {'[' if lo[0] == '>=' else '('}{lo[1]:g}, {hi[1]:g}{']' if hi[0] == '<=' else ')'}"
    bound = lo or hi
    return f" {bound[0]} {bound[1]:g}" if bound else ""


_PLURAL = {int: "integers", float: "numbers", str: "strings", bool: "true/false values"}


def describe(annotation: Any, metadata: list | tuple = ()) -> str:
    """What a field with this annotation (and Field constraints) accepts, in words."""
    annotation, metadata = _unwrap(annotation, list(metadata))
    origin, args = get_origin(annotation), get_args(annotation)
    if origin in (Union, types.UnionType):
        parts = [describe(a, metadata) for a in args if a is not type(None)]
        parts = list(dict.fromkeys(p for p in parts if p))
        if annotation == Epsilon or set(parts) == {"an integer", "a finite number"}:
            parts = [EPSILON_ALLOWED] if annotation == Epsilon else ["a finite number" + _bounds(metadata)]
        return " or ".join(parts) + (", or null" if type(None) in args else "")
    if origin is Literal:
        return ("one of " if len(args) > 1 else "") + ", ".join(repr(a) for a in args)
    if origin is list:
        item, _ = _unwrap(args[0], [])
        if item == Epsilon:
            return f"a list of ε values ({EPSILON_ALLOWED})"
        if get_origin(item) in (Union, types.UnionType) and set(get_args(item)) <= {int, float}:
            return "a list of numbers"
        return "a list of " + _PLURAL.get(item, "values")
    if annotation is bool:
        return "true or false"
    if annotation is int:
        return "an integer" + _bounds(metadata)
    if annotation is float:
        return "a finite number" + _bounds(metadata)
    if annotation is str:
        return "a string"
    model = _model_of(annotation)
    if model is not None:
        return "a mapping with keys " + ", ".join(model.model_fields)
    return ""


_WHAT = {"int_type": "not an integer", "int_from_float": "not an integer", "int_parsing": "not an integer",
         "float_type": "not a number", "float_parsing": "not a number", "finite_number": "not a finite number",
         "bool_type": "not true or false", "string_type": "not a string", "list_type": "not a list",
         "literal_error": "not an allowed value", "model_type": "not a mapping", "dict_type": "not a mapping",
         "model_attributes_type": "not a mapping", "too_short": "too few values", "too_long": "too many values",
         "greater_than": "out of range", "greater_than_equal": "out of range", "less_than": "out of range",
         "less_than_equal": "out of range", "missing": "is required", "none_required": "must be null"}


def _error_line(e: dict, root: type[BaseModel], prefix: str) -> tuple[str, str, bool]:
    """(key, line, from a union branch) of one pydantic error, its location walked along the models' fields.

    A union (``int | float``) reports one error per branch: ``branch`` is then True and the caller keeps one."""
    model: type[BaseModel] | None = root
    annotation: Any = root
    metadata: list = []
    key = prefix
    branch = False
    unknown = None
    for part in e["loc"]:
        if isinstance(part, int):
            key += f"[{part}]"
            annotation, metadata = _list_item(annotation), []
        elif get_origin(annotation) is dict and isinstance(part, str):  # a key of a dict[str, X] field
            key = f"{key}.{part}"
            annotation, metadata = get_args(annotation)[1], []
            model = _model_of(annotation)
        elif model is not None and part in model.model_fields:
            field = model.model_fields[part]
            key = f"{key}.{part}" if key else part
            annotation, metadata = field.annotation, list(field.metadata)
            model = _model_of(annotation)
        elif model is not None and e["type"] == "extra_forbidden":
            key = f"{key}.{part}" if key else str(part)
            unknown = (part, model)
        else:  # the branch of a union (int | 'auto', int | float …): not part of the key
            branch = True
    err = (e.get("ctx") or {}).get("error")
    if isinstance(err, ParamError):
        if err.key:
            key = f"{key}.{err.key}" if key else err.key
        if err.index is not None:
            key += f"[{err.index}]"
        return key, f"{key}: {err.text()}", branch
    got = e.get("input", _NOTHING)
    if unknown is not None:
        name, section = unknown
        allowed = ", ".join(section.model_fields)
        what = "unknown key" + _did_you_mean(name, section.model_fields)
        return key, f"{key}: {ParamError(what, allowed=allowed).text()}", branch
    if e["type"] == "missing":
        return key, f"{key}: {ParamError('is required', allowed=describe(annotation, metadata)).text()}", branch
    if isinstance(err, ValueError):  # a validator's own message
        text = " ".join(str(err).split()) + (f" (got {_short(got)})" if got is not _NOTHING and not isinstance(got, dict) else "")
        return key, f"{key}: {text}" if key else text, branch
    what = _WHAT.get(e["type"], e["msg"].removeprefix("Value error, "))
    if isinstance(got, dict):
        got = _NOTHING
    return key, f"{key}: {ParamError(what, got, describe(annotation, metadata) or None).text()}", branch


def _format_errors(err: ValidationError, root: type[BaseModel] = None, prefix: str = "") -> list[str]:
    """One self-contained line per problem; a union's several branch errors for one key become one line."""
    lines: dict[str, str] = {}
    kinds: dict[str, str] = {}
    for e in err.errors():
        key, line, branch = _error_line(e, root or Params, prefix)
        slot = key if branch else f"{key}#{len(lines)}"
        # of a union's branch errors, keep the most telling: "not a finite number" beats "not an integer"
        if slot not in lines or kinds.get(slot) == "int_type":
            lines[slot], kinds[slot] = line, e["type"]
    return list(lines.values())


def parse_section(model: type[BaseModel], raw: Any, key: str, root: str | Path | None = None):
    """Validate ``raw`` as the params section ``key`` (e.g. ``ACRParams`` at ``score.acr``): missing keys get the
    section's documented defaults; raises :class:`ConfigError` with one line per problem."""
    if isinstance(raw, model):
        return raw
    if not isinstance(raw, dict):
        raise ConfigError(ParamError("not a mapping", raw, describe(model)).text() if not key else
                          f"{key}: {ParamError('not a mapping', raw, describe(model)).text()}")
    try:
        return model.model_validate(raw, context={"root": root})
    except ValidationError as err:
        raise ConfigError(*_format_errors(err, model, key)) from None


def parse_params(raw: Any, root: str | Path | None = None) -> Params:
    """Validate a params mapping (as read from ``params.yaml``); relative paths in it are relative to ``root``
    (default: the working directory). Raises :class:`ConfigError` with one line per problem."""
    if not isinstance(raw, dict):
        raise ConfigError(f"params: not a mapping of sections (got {type(raw).__name__}; allowed: a mapping with keys "
                          f"{', '.join(Params.model_fields)})")
    return parse_section(Params, raw, "", root)


def load_params(path: str | Path = "params.yaml") -> Params:
    """Load and validate ``params.yaml``; raises :class:`ConfigError` on any invalid value (one line each)."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{path}: params file does not exist")
    try:
        raw = read_yaml(path)
    except Exception as err:  # ruamel raises many kinds
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err)
        raise ConfigError(f"{path}: not valid YAML{where}: {' '.join(str(problem).split())}") from None
    return parse_params(raw, root=path.resolve().parent)


def run_from_args(params: Params, args, *, audit: bool = False) -> RunConfig:
    """The point named on a stage's command line; it must belong to the current ``cube`` (``audit.cube`` for the
    audit stage)."""
    try:
        epsilon = parse_epsilon(args.epsilon, text=True)
    except ParamError as err:
        raise ConfigError(f"--epsilon: {err.text()}") from None
    unit = getattr(args, "unit", None) or "record"
    method = getattr(args, "method", None) or "full"
    wanted = RunConfig(epsilon, int(args.batch_size), int(args.steps), float(args.learning_rate), int(args.seed), unit,
                       method)
    runs = params.audit_runs() if audit else params.runs()
    matches = [r for r in runs if r == wanted]  # 2 == 2.0: compare values, then take the cube's own run
    if not matches:
        given = f"eps{args.epsilon}-b{args.batch_size}-T{args.steps}-lr{args.learning_rate}-s{args.seed}"
        given += ("" if unit == "record" else f" (unit {unit})") + ("" if method == "full" else f" (method {method})")
        raise ConfigError(f"configuration {given} is not in params.yaml's {'audit.cube' if audit else 'cube'}")
    run = matches[0]
    if args.name not in (run.name, run.point_name):
        raise ConfigError(f"--name {args.name!r} does not match the configuration's name {run.name!r}")
    return run
