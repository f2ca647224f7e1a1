"""Every file location of the pipeline, in one place.

Only the stage layer (:mod:`empriv.pipeline`) and the project-level tools (CLI, studies) import this
module: library packages (data, secrets, privacy, train, score, audit, analysis, models) take and return
objects, never paths or params files. Paths are relative to the project root (DVC runs every stage there).

``metrics/`` holds only the DVC metrics (compact, numbers only, in git); every stage's own detail (per-run training
facts, scores per secret, audit settings, the run table) is a DVC-cached output under ``records/`` (git-ignored:
``dvc pull`` or ``dvc exp apply`` restores it; being cached also keeps every stage restorable from DVC's run cache,
which skips stages with uncached outputs other than metrics and plots).
"""

from __future__ import annotations

import os
from pathlib import Path

PARAMS = Path("params.yaml")

# prepare
PREPARED_DIR = Path("data/prepared")
SPLITS = ("train", "validation", "test", "public")
PLANTED_SECRETS = PREPARED_DIR / "planted_secrets.jsonl"  # synthetic-enron: the secrets the generator planted
TOFU_AUTHORS = PREPARED_DIR / "tofu_train_authors.jsonl"  # TOFU: original records of the training authors
PARAPHRASE_CACHE = Path("data/paraphrases.json")  # TOFU variants with paraphraser: llm
PREPARE_METRICS = Path("records/prepare.json")

# tokenizer, base
TOKENIZER_DIR = Path("models/tokenizer")
BASE_DIR = Path("models/base")
BASE_WEIGHTS = BASE_DIR / "model.safetensors"
BASE_METRICS = Path("records/base.json")
RECORD_SCORES = Path("data/record_scores.json")  # each training record's mean NLL under the initial base (perplexity strategies)

# secrets, filter
SECRETS = Path("data/secrets.jsonl")
HELDOUT_DIR = Path("data/heldout")  # validation/test without any sample that contains a secret
SECRETS_METRICS = Path("records/secrets.json")
FILTERED_SECRETS = Path("data/secrets_filtered.jsonl")
FILTER_METRICS = Path("records/filter.json")

# train, score
RUNS_DIR = Path("models/runs")
TRAIN_METRICS_DIR = Path("records/train")
SCORE_METRICS_DIR = Path("records/score")

# canaries, audit
CANARIES_DIR = Path("data/canaries")
CANARIES_METRICS = Path("records/canaries.json")
AUDIT_RUNS_DIR = Path("models/audit")
AUDIT_METRICS_DIR = Path("records/audit")

# the adaptation audit (issue 17): data/adaptation/<dataset>/ (the MIA sets and the pre-training probe), one record per
# run records/adaptation_audit/<dataset>/<method>/<point>.json, and per dataset a report directory
ADAPTATION_DATA_DIR = Path("data/adaptation")
ADAPTATION_AUDIT_DIR = Path("records/adaptation_audit")
ADAPTATION_AUDIT_TABLE = Path("records/adaptation_audit.csv")  # analyze: one row per adaptation-audit run and attack
ADAPTATION_REPORTS_DIR = Path("reports/adaptation_audit")

# profiles, analyze
PROFILES_DIR = Path("plots/profiles")
RUNS_TABLE = Path("records/runs.csv")  # one row per run: every hyperparameter, accounting fact and score
SCORES_BY_EPSILON = Path("records/scores_by_epsilon.json")  # per ε and score: mean, std, min, max, coverage (empriv summary)
ANALYSIS_DETAIL = Path("records/analysis.json")  # the research's whole analysis (the report's source)
# The DVC metrics: a few compact, numbers-only files made for `dvc metrics diff` and `dvc exp show`
METRICS_DIR = Path("metrics")
SUMMARY = Path("metrics/summary.json")  # headline per ε: mean/std/worst of the scores, utility, audit ε̂, counts
CONFIGS = Path("metrics/configs.json")  # per configuration (mean over seeds): primary score, utility, audit ε̂
ANALYSIS = Path("metrics/analysis.json")  # per finite ε, primary score: std configs/seeds, regression, heuristics, risks
ANALYSIS_PLOTS_DIR = Path("plots/analysis")
REPORT = Path("reports/report.html")

# the raw inputs outside the repository (input@<key> stages): data/inputs/<key>/fingerprint.json, one git-tracked
# directory per key (corpus, overrides, base, public) that the dependent stages depend on
INPUTS_DIR = Path("data/inputs")

# the DAG's guard (output of the validate stage; not in git)

PARAMS_OK = Path(".empriv/params.ok")  # validate stage: constant content "valid\n", written only for valid params

# project state that is not a DVC output
CALIBRATION_CACHE = Path(".empriv/calibration")  # σ calibrations (one JSON file per entry), re-verified on every hit
# training checkpoints (runtime.checkpoint_every): <job>/<unit>/<method>/<point>/, deleted once the run's outputs are
# written; an absolute $EMPRIV_CHECKPOINT_DIR for queued experiments (temporary workspaces) and clusters
CHECKPOINTS_DIR = Path(os.environ.get("EMPRIV_CHECKPOINT_DIR", ".empriv/checkpoints"))


def split_path(split: str, root: Path = PREPARED_DIR) -> Path:
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
    return Path(root) / f"{split}.jsonl"


def run_dir(stem: str) -> Path:
    """A cube run's model directory; ``stem`` = ``RunConfig.file_stem`` (``<unit>/<point>``)."""
    return RUNS_DIR / stem


def train_metrics(stem: str) -> Path:
    return TRAIN_METRICS_DIR / f"{stem}.json"


def score_metrics(stem: str) -> Path:
    return SCORE_METRICS_DIR / f"{stem}.json"


def audit_run_dir(stem: str) -> Path:
    return AUDIT_RUNS_DIR / stem


def audit_metrics(stem: str) -> Path:
    return AUDIT_METRICS_DIR / f"{stem}.json"
