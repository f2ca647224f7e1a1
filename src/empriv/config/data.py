"""Sections of the data and the model it starts from: ``runtime``, ``data``, ``tokenizer``, ``base``, ``secrets``."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from empriv.config.errors import ParamError, _did_you_mean
from empriv.config.values import (
    _HUB_ID,
    DATA_SOURCES,
    KNOWN_BASES,
    REAL_SOURCES,
    VARIANTS,
    _existing_path,
    _Section,
    is_local_base,
)


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
    # data.source text (your own corpus at data.path; docs/data.md "Your own corpus"). text_format auto: by the
    # extension (.jsonl/.json, .csv, .parquet; .txt = one record per line) or a directory (one record per file)
    text_format: Literal["auto", "jsonl", "csv", "parquet", "lines", "files"] = "auto"
    text_field: str = "text"  # the field (column) holding a record's text
    user_field: str | None = None  # the privacy unit of user-level DP (e.g. a sender); null: each record its own
    split_field: str | None = None  # train / validation / test (and public) per record; null: a seeded 90/5/5 split
    # the tiny base's public split: built-in English, the corpus's records of split 'public', or data.public_path
    public: Literal["builtin", "split", "file"] = "builtin"
    public_path: str | None = None  # data.public: file: a second file of public records (data.path's format and field)
    max_tokens: int | None = Field(None, ge=1)  # GPT-2 tokens a record may have (null: any; the window cuts it)
    long_records: Literal["truncate", "drop"] = "truncate"  # what prepare does with a record over max_tokens
    secret_kind: Literal["mined", "patterns", "given", "canaries"] = "mined"  # which strings are scored as secrets

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
        if self.source != "text":
            for key, default in TEXT_ONLY_DEFAULTS.items():
                if getattr(self, key) != default:
                    raise ParamError(f"applies to data.source text only, not data.source {self.source!r}",
                                     getattr(self, key), repr(default), key=key)
        elif self.public == "split" and self.split_field is None:
            raise ParamError("needs data.split_field (the records whose split is 'public')", self.public,
                             "builtin, split with data.split_field set, or file with data.public_path set", key="public")
        elif self.public == "file" and self.public_path is None:
            raise ParamError("needs data.public_path (the file of public records)", self.public,
                             "builtin, split with data.split_field set, or file with data.public_path set", key="public")
        elif self.public != "file" and self.public_path is not None:
            raise ParamError(f"applies to data.public: file only, not data.public {self.public!r}", self.public_path,
                             "null, or data.public: file", key="public_path")
        elif self.public_path is not None and not _existing_path(self.public_path, info).exists():
            raise ParamError("file does not exist", self.public_path, "an existing file or directory of public records",
                             key="public_path")
        if self.source in REAL_SOURCES:
            if not self.path:
                raise ParamError(f"is required when data.source is {self.source!r}", self.path,
                                 "the path of the corpus file or directory", key="path")
            if not _existing_path(self.path, info).exists():
                raise ParamError("file does not exist", self.path, "an existing corpus file or directory", key="path")
        return self


TEXT_ONLY_DEFAULTS = {"text_format": "auto", "text_field": "text", "user_field": None, "split_field": None,
                      "public": "builtin", "public_path": None, "max_tokens": None, "long_records": "truncate", "secret_kind": "mined"}


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
