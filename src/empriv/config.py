"""Typed, validated view of ``params.yaml`` — the one place every stage loads its parameters from.

A bad value fails here, before any work starts, with a :class:`ConfigError` (a ``ValueError``)
naming the field, the value and what is allowed. ``params.yaml`` is read with ruamel.yaml, the
YAML 1.2 parser DVC itself uses, so ``1e-2`` means the same number to DVC and to empriv.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from itertools import product
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

KNOWN_BASES = ("tiny-gpt2", "smollm2-135m")
DATA_SOURCES = ("synthetic-enron", "enron", "synthetic-tofu", "tofu")
REAL_SOURCES = ("enron", "tofu")
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


class ConfigError(ValueError):
    """Invalid parameters: the message names every offending field, its value and what is allowed."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RuntimeParams(_Section):
    device: str = "auto"
    # fp32, or bf16 autocast of the training forward passes (DP clipping, noise and weights stay fp32);
    # whether the resolved device supports it is checked when the run starts (empriv.train.precision).
    precision: Literal["fp32", "bf16"] = "fp32"
    threads: int = Field(2, ge=1)
    wandb_mode: Literal["offline", "online", "disabled"] = "offline"
    wandb_project: str = "empriv"

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        if v not in ("auto", "cpu", "cuda", "mps") and not re.fullmatch(r"cuda:\d+", v):
            raise ValueError("must be one of auto, cpu, cuda, cuda:N, mps")
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
    secret_frequencies: list[float] = [0.03, 0.025, 0.02, 0.015, 0.01, 0.005, 0.002, 0.001, 0.0005]
    seed: int = 0

    @field_validator("secret_frequencies")
    @classmethod
    def _freqs(cls, v: list[float]) -> list[float]:
        for i, f in enumerate(v):
            if not 0 < f < 1:
                raise ValueError(f"[{i}] must be in (0, 1), got {f}")
        if sum(v) >= 1:
            raise ValueError(f"must sum to < 1, got {sum(v):g}")
        return v

    @field_validator("source")
    @classmethod
    def _source(cls, v: str) -> str:
        if v == "synthetic":  # the name before TOFU existed
            return "synthetic-enron"
        if v not in DATA_SOURCES:
            raise ValueError(f"must be one of {', '.join(DATA_SOURCES)}")
        return v

    @field_validator("variant")
    @classmethod
    def _variant(cls, v: str | None) -> str | None:
        from empriv.data.variants import VARIANTS

        if v is not None and v not in VARIANTS:
            raise ValueError(f"must be null or one of {', '.join(VARIANTS)}")
        return v

    @model_validator(mode="after")
    def _path(self) -> "DataParams":
        if self.variant is not None and not self.source.endswith("tofu"):
            raise ValueError(f"data.variant {self.variant!r} applies to TOFU sources only, not {self.source!r}")
        if self.source in REAL_SOURCES:
            if not self.path:
                raise ValueError(f"data.path is required when data.source is {self.source!r}")
            if not Path(self.path).expanduser().exists():
                raise ValueError(f"data.path {self.path!r} does not exist")
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
    pretrain_steps: int = Field(600, ge=0)
    pretrain_batch_size: int = Field(32, ge=1)
    pretrain_learning_rate: float = Field(3e-3, gt=0)
    seed: int = 0

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if v in KNOWN_BASES:
            return v
        if v.startswith(("/", ".", "~")):
            if not Path(v).expanduser().exists():
                raise ValueError(f"local model path does not exist; known bases: {', '.join(KNOWN_BASES)}")
            return v
        if _HUB_ID.match(v):
            return v
        raise ValueError(f"unknown base model; allowed: {', '.join(KNOWN_BASES)}, a local path, or a hub id org/name")

    @model_validator(mode="after")
    def _heads(self) -> "BaseParams":
        if self.n_embd % self.n_head:
            raise ValueError(f"base.n_embd ({self.n_embd}) must be divisible by base.n_head ({self.n_head})")
        return self


class SecretsParams(_Section):
    # mining (real Enron): token n-grams of length ngram, the top_k most frequent, merged
    ngram: int = Field(50, ge=2)
    filter: bool = False  # model-based filters after the non-private runs (see secrets/filtering.py)
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
    def _overrides(cls, v: str | None) -> str | None:
        if v is not None and not Path(v).exists():
            raise ValueError("overrides file does not exist")
        return v


class PrivacyParams(_Section):
    delta: float | None = None
    delta_exponent: float = Field(1.1, gt=0)
    accountant: Literal["prv", "rdp", "pld"] = "prv"

    @field_validator("delta")
    @classmethod
    def _delta(cls, v: float | None) -> float | None:
        if v is not None and not 0 < v < 1:
            raise ValueError("must be in (0, 1) or null for n^-delta_exponent")
        return v


class LoraParams(_Section):
    rank: int = Field(8, ge=1)
    alpha: float = Field(16.0, gt=0)
    dropout: float = Field(0.0, ge=0, lt=1)
    target_modules: list[str] | None = None  # null: the architecture's default (models/adapters.py LORA_TARGET_MODULES)


class TrainParams(_Section):
    method: Literal["full", "lora"] = "full"
    optimizer: Literal["adam", "sgd"] = "adam"
    clip_norm: float = Field(1.0, gt=0)
    # Physical batch (memory only: the logical Poisson batch b and the accounting do not depend on it):
    # an int >= 1, or "auto" (CUDA: the largest power of two that fits, probed; CPU: an estimate).
    micro_batch_size: int | Literal["auto"] = 64
    sampler: Literal["poisson"] = "poisson"
    log_every: int = Field(1, ge=1)
    lora: LoraParams = LoraParams()

    @field_validator("micro_batch_size", mode="before")
    @classmethod
    def _micro_batch_size(cls, v: Any) -> Any:
        if v == "auto":
            return v
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError("must be an integer >= 1 or 'auto'")
        return v


def _parse_epsilon(v: Any) -> int | float:
    if isinstance(v, str) and v.strip().lower() in ("inf", ".inf", "infinity"):
        return math.inf
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"must be a number > 0 or 'inf', got {v!r}")
    return v


class CubeParams(_Section):
    # Numbers keep their YAML type (2 stays int, 2.0 stays float): run names are built with str()
    # exactly as DVC interpolates the matrix values into dvc.yaml.
    epsilon: list[int | float]
    batch_size: list[int]
    steps: list[int]
    learning_rate: list[int | float]
    seed: list[int]

    @field_validator("epsilon", mode="before")
    @classmethod
    def _eps_parse(cls, v: Any) -> Any:
        if not isinstance(v, list):
            raise ValueError("must be a list")
        out = []
        for i, e in enumerate(v):
            try:
                e = _parse_epsilon(e)
            except ValueError as err:
                raise ValueError(f"[{i}] {err}") from None
            if not e > 0:
                raise ValueError(f"[{i}] must be > 0 (or 'inf'), got {e:g}")
            out.append(e)
        return out

    @field_validator("batch_size", "steps")
    @classmethod
    def _positive_ints(cls, v: list[int]) -> list[int]:
        for i, x in enumerate(v):
            if x < 1:
                raise ValueError(f"[{i}] must be >= 1, got {x}")
        return v

    @field_validator("learning_rate")
    @classmethod
    def _lr(cls, v: list[float]) -> list[float]:
        for i, x in enumerate(v):
            if not (x > 0 and math.isfinite(x)):
                raise ValueError(f"[{i}] must be a finite number > 0, got {x}")
        return v

    @field_validator("epsilon", "batch_size", "steps", "learning_rate", "seed")
    @classmethod
    def _nonempty_unique(cls, v: list) -> list:
        if not v:
            raise ValueError("must list at least one value")
        if len(set(v)) != len(v):
            raise ValueError(f"has duplicate values {v}")
        return v


class ACRParams(_Section):
    """Adversarial compression ratio (score/acr.py): which runs and secrets get it, and the search budget."""

    enabled: bool = True
    training_seeds: list[int] | None = [0]  # cube seeds whose runs get ACR (null: every run)
    epsilons: list[float] | None = None  # cube ε values whose runs get ACR (null: all)
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

    @field_validator("epsilons", mode="before")
    @classmethod
    def _eps(cls, v):
        return None if v is None else [math.inf if str(e).strip().lower() in ("inf", ".inf", "infinity") else e for e in v]

    @model_validator(mode="after")
    def _lengths(self) -> "ACRParams":
        if self.max_length < self.start_length:
            raise ValueError(f"max_length ({self.max_length}) must be >= start_length ({self.start_length})")
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
    air_template: str = "What genre does {x} write in?"  # {x}: the author's name
    air_samples: int = Field(10, ge=1)
    air_max_new_tokens: int = Field(20, ge=1)
    acr: ACRParams = ACRParams()

    @field_validator("air_template")
    @classmethod
    def _air_template(cls, v: str) -> str:
        if "{x}" not in v:
            raise ValueError("must contain {x} (where the author's name goes)")
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
    base_utility: float | None = None  # null: metrics/base.json's test_nll
    monte_carlo_trials: int = Field(5000, ge=0)
    seed: int = 0


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
    method: Literal["full", "lora"] | None = None  # null: train.method (LoRA audits also train the embeddings)
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

    @field_validator("delta")
    @classmethod
    def _audit_delta(cls, v: float | None) -> float | None:
        if v is not None and not 0 <= v < 1:
            raise ValueError("must be in [0, 1) or null for the run's delta")
        return v

    @field_validator("r_grid")
    @classmethod
    def _r_grid(cls, v: list[int]) -> list[int]:
        if not v or any(r < 1 for r in v):
            raise ValueError("must list values >= 1")
        return v


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

    @model_validator(mode="after")
    def _tokenizer_base(self) -> "Params":
        if self.base.name != "tiny-gpt2" and self.tokenizer.kind != "auto":
            raise ValueError(f"tokenizer.kind {self.tokenizer.kind!r} cannot be used with base.name {self.base.name!r}: "
                             "a pre-trained base brings its own tokenizer; set tokenizer.kind: auto")
        return self

    @model_validator(mode="after")
    def _cross(self) -> "Params":
        n = self.data.n_train
        for i, b in enumerate(self.cube.batch_size):
            if b > n:
                raise ValueError(f"cube.batch_size[{i}] = {b} must be <= data.n_train = {n}")
        return self

    @model_validator(mode="after")
    def _audit_cross(self) -> "Params":
        c, a = self.canaries, self.audit
        if a.rule == "top_r" and a.guesses > c.n_canaries:
            raise ValueError(f"audit.guesses = {a.guesses} must be <= canaries.n_canaries = {c.n_canaries}")
        if c.design == "bigram" and c.secret_length < 2:
            raise ValueError(f"canaries.secret_length must be >= 2 for design 'bigram' (a token pair), got {c.secret_length}")
        if 1 + c.prefix_length + c.secret_length > self.base.seq_len:
            raise ValueError(f"a canary (1 + canaries.prefix_length {c.prefix_length} + canaries.secret_length "
                             f"{c.secret_length} tokens) must fit base.seq_len = {self.base.seq_len}")
        # audit.cube.batch_size <= data.n_train is checked by the audit run itself (as train@ does), so a
        # small data set that never audits is not rejected for the default audit cube.
        return self

    def audit_runs(self) -> list["RunConfig"]:
        """The audit cube's configurations (each trained with canaries by audit@<config>)."""
        c = self.audit.cube
        return [RunConfig(e, b, t, lr, s) for e, b, t, lr, s in product(c.epsilon, c.batch_size, c.steps, c.learning_rate, c.seed)]

    # ----------------------------------------------------------------- derived values
    def delta_for(self, n: int) -> float:
        """δ of the guarantee: params' δ, or n^-delta_exponent (the research's δ = n^-1.1)."""
        return self.privacy.delta if self.privacy.delta is not None else float(n) ** (-self.privacy.delta_exponent)

    def runs(self) -> list["RunConfig"]:
        c = self.cube
        return [RunConfig(e, b, t, lr, s) for e, b, t, lr, s in product(c.epsilon, c.batch_size, c.steps, c.learning_rate, c.seed)]


def format_number(x: float | int) -> str:
    """Format a cube value the way DVC interpolates it into ``dvc.yaml``: ``str`` of the YAML value
    (``2`` → "2", ``2.0`` → "2.0", ``1e-3`` → "0.001", ``inf``/``.inf`` → "inf")."""
    if isinstance(x, float) and math.isinf(x):
        return "inf"
    return str(x)


@dataclass(frozen=True)
class RunConfig:
    """One point of the cube: (ε, b, T, η, seed)."""

    epsilon: float
    batch_size: int
    steps: int
    learning_rate: float
    seed: int

    @property
    def private(self) -> bool:
        return math.isfinite(self.epsilon)

    @property
    def name(self) -> str:
        return config_name(self.epsilon, self.batch_size, self.steps, self.learning_rate, self.seed)

    @property
    def group(self) -> str:
        """The configuration without its seed (runs that differ only by seed share a group)."""
        return self.name.rsplit("-s", 1)[0]

    def as_dict(self) -> dict[str, Any]:
        return {
            "epsilon": format_number(self.epsilon) if not self.private else self.epsilon,
            "batch_size": self.batch_size,
            "steps": self.steps,
            "learning_rate": self.learning_rate,
            "seed": self.seed,
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


def _format_errors(err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        loc = ""
        for part in e["loc"]:
            loc += f"[{part}]" if isinstance(part, int) else (f".{part}" if loc else str(part))
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = "unknown key (not a parameter of this section)"
        elif e["type"] == "missing":
            msg = "is required"
        value = e.get("input")
        shown = "" if e["type"] in ("missing",) or isinstance(value, dict) else f" (got {value!r})"
        lines.append(f"  {loc or '<root>'}: {msg}{shown}")
    return "invalid parameters:\n" + "\n".join(lines)


def parse_params(raw: Any) -> Params:
    if not isinstance(raw, dict):
        raise ConfigError(f"params must be a mapping of sections, got {type(raw).__name__}")
    try:
        return Params.model_validate(raw)
    except ValidationError as err:
        raise ConfigError(_format_errors(err)) from None


def load_params(path: str | Path = "params.yaml") -> Params:
    """Load and validate ``params.yaml``; raises :class:`ConfigError` on any invalid value."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"params file {str(path)!r} does not exist")
    try:
        raw = read_yaml(path)
    except Exception as err:  # ruamel raises many kinds
        raise ConfigError(f"params file {str(path)!r} is not valid YAML: {err}") from None
    return parse_params(raw)


def run_from_args(params: Params, args) -> RunConfig:
    """The cube point named on a stage's command line; it must belong to the current cube."""
    try:
        text = str(args.epsilon).strip()
        epsilon = math.inf if text.lower() in ("inf", ".inf", "infinity") else float(text)
    except ValueError:
        raise ConfigError(f"--epsilon must be a number or 'inf', got {args.epsilon!r}") from None
    wanted = RunConfig(epsilon, int(args.batch_size), int(args.steps), float(args.learning_rate), int(args.seed))
    matches = [r for r in params.runs() if r == wanted]  # 2 == 2.0: compare values, then take the cube's own run
    if not matches:
        given = f"eps{args.epsilon}-b{args.batch_size}-T{args.steps}-lr{args.learning_rate}-s{args.seed}"
        raise ConfigError(f"configuration {given} is not in params.yaml's cube")
    run = matches[0]
    if args.name != run.name:
        raise ConfigError(f"--name {args.name!r} does not match the configuration's name {run.name!r}")
    return run
