"""The whole of ``params.yaml``: :class:`Params`, its sections and the checks across them, and derived values."""

from __future__ import annotations

import os
from itertools import product
from typing import Any

from pydantic import model_validator

from empriv.config.auditing import AdaptationAuditParams, AuditParams, CanariesParams
from empriv.config.cube import CubeParams
from empriv.config.data import BaseParams, DataParams, RuntimeParams, SecretsParams, TokenizerParams
from empriv.config.errors import ConfigError, ParamError, _did_you_mean
from empriv.config.infra import SweepParams
from empriv.config.runs import RunConfig
from empriv.config.scoring import AnalyzeParams, ScoreParams
from empriv.config.methods import method_names, method_traits
from empriv.config.training import PrivacyParams, TrainParams, VariantParams
from empriv.config.values import RAW_INPUTS, _Section, expected_inputs


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
    # data.path, overrides = secrets.overrides, base = a local base.name, public = data.public_path; {} for the built-in
    # sources and bases
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
                if name not in method_names() and name not in t.variants:
                    known = method_names() + tuple(t.variants)
                    raise ParamError("unknown method" + _did_you_mean(name, known), name,
                                     f"{', '.join(method_names())}, or a train.variants name", key=f"{where}.method[{i}]")
        aa = self.adaptation_audit.cube
        for name in dict.fromkeys([*self.cube.method, *self.audit.cube.method, *(aa.method if aa.dataset else [])]):
            resolved = self.for_method(name).train
            traits = method_traits(resolved.method)
            if resolved.dpflat.enabled and "dpflat" not in traits.modes:
                what = "train.dpflat" if name in method_names() or self.train.variants[name].dpflat is None \
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
            virtual = traits.virtual_tokens(resolved)
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
        if name in method_names():
            return self.model_copy(update={"train": t.model_copy(update={"method": name, "variant": None})})
        if name not in t.variants:
            raise ConfigError(f"cube.method: unknown method {name!r} (allowed: {', '.join(method_names())}, or a "
                              "train.variants name)")
        v = t.variants[name]
        update = {"method": v.method, "variant": name}
        for section in (f for f in VariantParams.model_fields if f != "method"):  # the train sections it may replace
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
        return expected_inputs(self.data.path, self.secrets.overrides, self.base.name, self.data.public_path)

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
