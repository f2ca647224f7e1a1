"""Sections of scoring and analysis: ``score`` (with ``score.acr``, the ACR search) and ``analyze``."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from empriv.config.errors import ParamError, _did_you_mean
from empriv.config.runs import RunConfig
from empriv.config.values import (
    AIR_TEMPLATE,
    PRIVACY_SCORES,
    SCORE_NAMES,
    UTILITY_SCORES,
    Epsilon,
    _epsilon_list,
    _known_names,
    _Section,
)


class ACRSearchParams(_Section):
    """The ACR search (score/acr.py): its strategy and budget — the keys of ``score.acr`` the search reads.

    The one definition of these settings (defaults, ranges, meaning): the scoring code takes this model as its
    settings (:class:`ACRParams`, the whole section, is one; :attr:`ACRParams.search` is the view of these keys alone).
    """

    strategy: Literal["fast", "published"] = "fast"
    top_k: int = Field(250, ge=1)
    candidates: int = Field(100, ge=1)
    steps: int = Field(200, ge=1)  # GCG steps at the first length tried
    step_growth: float = Field(1.2, ge=1.0)  # steps × this after each failure (published rule)
    start_length: int = Field(5, ge=1)
    grow: int = Field(5, ge=1)
    max_length: int = Field(30, ge=1)
    seeds: list[int] = Field([0, 1, 2], min_length=1)
    patience: int | None = Field(40, ge=1)  # fast only: steps without a real improvement before a length is given up
    patience_tolerance: float = Field(0.02, ge=0.0, lt=1.0)  # fast only: the relative improvement that resets patience
    fast_candidates: int | None = Field(48, ge=1)  # fast only: swaps per seed per step (null: candidates)
    # fast only: the tokens of a position a swap draws from, those with the most negative gradient (null: top_k)
    fast_top_k: int | None = Field(64, ge=1)
    # fast only, several seeds: every race_steps steps at a length, the half of the seeds still searching it with the
    # lowest loss so far (rounded up) go on, the others stop there (successive halving; null: every seed searches on)
    race_steps: int | None = Field(30, ge=1)
    # fast only: [steps, wrong] pairs — after that many steps at a length, the length is given up when no candidate
    # scored at it got fewer than that many target tokens wrong (greedy arg-max under teacher forcing; []: never)
    give_up: list[list[int]] = Field([[10, 4], [40, 2]])
    # fast only: the candidate a GCG step keeps — "loss" (the lowest target loss, as published) or "fewest_wrong" (the
    # fewest target tokens wrong under greedy teacher forcing, ties by loss: what a success needs)
    keep: Literal["loss", "fewest_wrong"] = "fewest_wrong"
    # fast only: in the loss whose gradient proposes the swaps, each target token the prompt gets wrong weighs
    # 1 + wrong_weight against 1 for the others (0: the plain mean loss, as published); scores are always the mean loss
    wrong_weight: float = Field(20.0, ge=0.0)
    # fast only: after the first success, the walk down to shorter prompts ends at its (skip + 1)-th failure in a row
    # (0: MiniPrompt's rule, as published — the first failure below a success ends the search)
    skip: int = Field(1, ge=0)

    @field_validator("give_up")
    @classmethod
    def _give_up(cls, v: list[list[int]]) -> list[list[int]]:
        for pair in v:
            if len(pair) != 2 or min(pair) < 1:
                raise ParamError("must be a list of [steps, wrong] pairs of integers >= 1", v,
                                 "e.g. [[10, 4], [40, 2]] or []", key="give_up")
        if [p[0] for p in v] != sorted({p[0] for p in v}):
            raise ParamError("its steps must increase", v, "e.g. [[10, 4], [40, 2]]", key="give_up")
        return v

    @model_validator(mode="after")
    def _lengths(self) -> "ACRSearchParams":
        if self.max_length < self.start_length:
            raise ParamError(f"must be >= start_length = {self.start_length}", self.max_length,
                             f"an integer >= {self.start_length}", key="max_length")
        return self


# ``score.acr.budget``: named bundles of the search keys. A key the section sets itself overrides its budget's value;
# the record of a score run keeps every resolved key, not the budget's name. "full" is the field defaults above.
ACR_BUDGETS: dict[str, dict[str, Any]] = {
    # the research's procedure exactly (MiniPrompt's GCG schedule; ~13x the sequences of "full", benchmarks/acr.py)
    "published": {"strategy": "published", "top_k": 250, "candidates": 100, "steps": 200, "step_growth": 1.2,
                  "start_length": 5, "grow": 5, "max_length": 30, "seeds": [0, 1, 2]},
    # the fast strategy at full strength: the published lengths, steps and seeds, early give-ups
    "full": {},
    # the default run's CPU budget: one search seed, 40 steps at the first length, no early give-up
    "cpu": {"top_k": 128, "candidates": 64, "steps": 40, "seeds": [0], "patience": 10, "fast_candidates": 32,
            "fast_top_k": None, "give_up": [], "keep": "loss", "wrong_weight": 0.0, "skip": 0},
    # a smoke test's budget: short prompts, few steps (a success here is real, a failure says little)
    "quick": {"top_k": 64, "candidates": 32, "steps": 8, "seeds": [0], "max_length": 15, "patience": 10,
              "fast_candidates": 32, "fast_top_k": None, "give_up": [], "keep": "loss", "wrong_weight": 0.0,
              "skip": 0},
}


class ACRParams(ACRSearchParams):
    """Adversarial compression ratio (score/acr.py): which runs and secrets get it, the search budget
    (:class:`ACRSearchParams`, whose keys this section shares; ``budget`` names a bundle of them,
    :data:`ACR_BUDGETS`, and a key set beside it overrides the bundle's value) and which searched secrets are
    reported as rare (``rare_frequency``, :func:`empriv.score.secret_frequency.is_rare_secret`)."""

    budget: Literal["quick", "cpu", "full", "published"] = "full"
    enabled: bool = True
    training_seeds: list[int] | None = [0]  # cube seeds whose runs get ACR (null: every run)
    epsilons: list[Epsilon] | None = None  # cube ε values whose runs get ACR (null: all); each in (0, EPSILON_MAX] or inf
    max_secrets: int | None = Field(None, ge=1)  # the first N secrets (null: all)
    # how the searches are reported, not searched: a searched secret in at most this fraction of the training records
    # (its frequency) is *rare* and reported apart (acr_rare_*); the others, and a secret of unknown frequency, are
    # frequent (acr_n_searched, acr_success_rate, acr_mean …). Not a search setting: not in :attr:`search`.
    rare_frequency: float = Field(0.01, ge=0.0, lt=1.0)

    @model_validator(mode="before")
    @classmethod
    def _budget(cls, data: Any) -> Any:
        """The budget's bundle under the keys the section sets (an unknown name is left to the field's check)."""
        if isinstance(data, dict) and isinstance(data.get("budget"), str) and data["budget"] in ACR_BUDGETS:
            return {**ACR_BUDGETS[data["budget"]], **data}
        return data

    @field_validator("epsilons", mode="before")
    @classmethod
    def _eps(cls, v: Any) -> Any:
        return None if v is None else _epsilon_list(v)

    @property
    def search(self) -> ACRSearchParams:
        """The search keys alone (what the search itself is given)."""
        return ACRSearchParams.model_validate({name: getattr(self, name) for name in ACRSearchParams.model_fields})

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
    # the score of the research's figures (Fig. 2, Table 8, Fig. 5); null: the first of privacy_scores whose
    # configuration means differ at some finite ε (analysis.stage.primary_score). Pin it to compare runs whose
    # first varying score differs (a re-seeded tiny cube), or to choose another score for the report.
    primary_score: str | None = None
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

    @model_validator(mode="after")
    def _primary(self) -> "AnalyzeParams":
        if self.primary_score is not None and self.primary_score not in self.privacy_scores:
            raise ParamError("must be one of analyze.privacy_scores" + _did_you_mean(self.primary_score,
                                                                                    self.privacy_scores),
                             self.primary_score, "null, or " + ", ".join(self.privacy_scores), key="primary_score")
        return self

    @field_validator("utility")
    @classmethod
    def _utility(cls, v: str) -> str:
        if v not in UTILITY_SCORES:
            raise ParamError("not a utility score" + _did_you_mean(v, UTILITY_SCORES), v, ", ".join(UTILITY_SCORES))
        return v
