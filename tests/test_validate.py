"""Validation before anything is touched: every rule of config, one line per error, the validate stage
(empriv.pipeline.validate) and ``empriv validate`` leaving every output intact, and a DVC pipeline whose stages
depend on the validate marker stopping before any output is deleted.

Params are built here as dicts (never the repository's own params.yaml)."""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from empriv.config import (EPSILON_MAX, PRIVACY_SCORES, SCORE_COUNTS, SCORE_NAMES, UTILITY_SCORES, ACRParams, ConfigError,
                           error_lines, load_params, parse_epsilon, parse_params)

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent

CUBE = {"epsilon": [2, 64, "inf"], "batch_size": [8], "steps": [1], "learning_rate": [0.01], "seed": [0]}
MINIMAL = {"data": {"n_train": 100}, "cube": CUBE}


def with_(path: str, value, base=MINIMAL) -> dict:
    raw = copy.deepcopy(base)
    *parents, last = path.split(".")
    node = raw
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value
    return raw


def lines_of(raw) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_params(raw)
    assert str(info.value).splitlines() == info.value.lines
    return info.value.lines


def one_line(raw) -> str:
    lines = lines_of(raw)
    assert len(lines) == 1, lines
    return lines[0]


# --------------------------------------------------------------------------- types
@pytest.mark.parametrize("path", ["data.n_train", "base.n_layer", "score.vmr_samples", "score.acr.steps", "audit.guesses"])
def test_an_integer_field_rejects_an_integral_float(path):
    assert one_line(with_(path, 64.0)).startswith(f"{path}: not an integer (got 64.0; allowed: an integer")


@pytest.mark.parametrize("path, value, line", [
    ("data.n_train", True, "data.n_train: not an integer (got True;"),
    ("cube.batch_size", [8, 64.0], "cube.batch_size[1]: not an integer (got 64.0;"),
    ("cube.seed", ["0"], "cube.seed[0]: not an integer (got '0';"),
    ("data.seed", "3", "data.seed: not an integer (got '3';"),
])
def test_integers_reject_bools_floats_and_strings(path, value, line):
    assert one_line(with_(path, value)).startswith(line)


def test_a_float_field_accepts_an_integer_and_keeps_the_value():
    p = parse_params(with_("score.temperature", 2, with_("train.clip_norm", 3)))
    assert p.score.temperature == 2.0 and p.train.clip_norm == 3.0
    assert parse_params(with_("cube.learning_rate", [1, 0.5])).cube.learning_rate == [1, 0.5]


@pytest.mark.parametrize("path, value, shown", [
    ("score.temperature", math.inf, "inf"), ("train.clip_norm", math.nan, "nan"), ("analyze.base_utility", -math.inf, "-inf"),
    ("cube.learning_rate", [0.01, math.inf], "inf"), ("data.secret_frequencies", [0.01, math.nan], "nan"),
    ("privacy.delta", math.nan, "nan"),
])
def test_floats_must_be_finite(path, value, shown):
    line = one_line(with_(path, value))
    assert line.startswith(path) and "not a finite number" in line and f"(got {shown};" in line


def test_lists_are_typed():
    assert one_line(with_("train.lora.target_modules", "c_attn")).startswith(
        "train.lora.target_modules: not a list (got 'c_attn'; allowed: a list of strings, or null)")
    assert one_line(with_("analyze.scores", [3])).startswith("analyze.scores[0]: not a string (got 3;")


# --------------------------------------------------------------------------- ε
@pytest.mark.parametrize("path", ["cube.epsilon", "audit.cube.epsilon", "score.acr.epsilons"])
def test_epsilon_above_the_bound_is_rejected_naming_the_bound(path):
    raw = with_(path, [2, 1e9]) if path != "audit.cube.epsilon" else with_("audit.cube", {**CUBE, "epsilon": [2, 1e9]})
    line = one_line(raw)
    assert line.startswith(f"{path}[1]: above EPSILON_MAX = 100")
    assert "(got 1000000000.0; allowed: a number > 0 and <= EPSILON_MAX = 100, or inf for non-private)" in line
    assert EPSILON_MAX == 100


def test_epsilon_bound_is_inclusive_and_inf_is_non_private():
    p = parse_params(with_("cube.epsilon", [100, 8, math.inf], with_("score.acr.epsilons", [100.0, "Infinity"])))
    assert p.cube.epsilon == [100, 8, math.inf] and p.score.acr.epsilons == [100.0, math.inf]
    for path in ("cube.epsilon", "score.acr.epsilons"):
        assert one_line(with_(path, [100.5])).startswith(f"{path}[0]: above EPSILON_MAX = 100: ")


@pytest.mark.parametrize("value, line", [
    (math.nan, "cube.epsilon[0]: not a number (got nan;"), (0, "cube.epsilon[0]: must be > 0 (got 0;"),
    (-math.inf, "cube.epsilon[0]: must be > 0 (got -inf;"), (True, "cube.epsilon[0]: not a number (got True;"),
    ("8", "cube.epsilon[0]: not a number (got '8';"),
])
def test_epsilon_values_that_are_not_a_positive_number_or_inf(value, line):
    assert one_line(with_("cube.epsilon", [value])).startswith(line)


def test_parse_epsilon_is_the_one_inf_parser():
    for spelling in ("inf", ".inf", "Infinity", " INF ", "+inf", math.inf):
        assert parse_epsilon(spelling) == math.inf
    assert parse_epsilon(2) == 2 and isinstance(parse_epsilon(2), int) and isinstance(parse_epsilon(2.0), float)
    assert parse_epsilon("8", text=True) == 8.0 and parse_epsilon("inf", text=True) == math.inf
    for bad in ("8", "abc", None, True, math.nan, 0, -1, 1e3):
        with pytest.raises(ValueError):
            parse_epsilon(bad)
    with pytest.raises(ValueError, match="EPSILON_MAX"):
        parse_epsilon("1e9", text=True)


# --------------------------------------------------------------------------- unknown keys and names
@pytest.mark.parametrize("path, suggestion", [("cubee", "cube"), ("Data", "data"), ("train.optimiser", "optimizer"),
                                              ("score.acr.stpes", "steps"), ("audit.cube.seeds", "seed")])
def test_unknown_keys_at_every_level_with_did_you_mean(path, suggestion):
    raw = with_(path, 1) if not path.startswith("audit.cube") else with_("audit.cube", {**CUBE, "seeds": [0]})
    line = one_line(raw)
    assert line.startswith(f"{path}: unknown key; did you mean {suggestion!r}? (allowed: ")


def test_an_unknown_key_with_no_close_match_lists_the_section():
    line = one_line(with_("zzz", 1))
    assert line == ("zzz: unknown key (allowed: runtime, data, tokenizer, base, secrets, privacy, train, cube, score, "
                    "analyze, canaries, audit, adaptation_audit, sweep, inputs)")


def test_a_top_level_typo_in_a_params_file_fails(tmp_path):
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({**MINIMAL, "anaylze": {"utility": "test_nll"}}))
    with pytest.raises(ConfigError, match=r"^anaylze: unknown key; did you mean 'analyze'\?"):
        load_params(tmp_path / "params.yaml")


@pytest.mark.parametrize("path, value, line", [
    ("analyze.scores", ["vmr_mean", "vmr_maen"], "analyze.scores[1]: unknown score; did you mean 'vmr_mean'? (got 'vmr_maen';"),
    ("analyze.privacy_scores", ["acr_mean", "test_nll"],
     "analyze.privacy_scores[1]: not an empirical privacy score (higher = more memorised) (got 'test_nll';"),
    ("analyze.utility", "test_nl", "analyze.utility: not a utility score; did you mean 'test_nll'? (got 'test_nl'; allowed: test_nll)"),
])
def test_analysis_score_names_are_checked(path, value, line):
    assert one_line(with_(path, value)).startswith(line)


def test_every_known_score_name_is_accepted():
    p = parse_params(with_("analyze", {"scores": list(SCORE_NAMES), "privacy_scores": list(PRIVACY_SCORES),
                                       "utility": UTILITY_SCORES[0]}))
    assert p.analyze.scores == list(SCORE_NAMES)


# --------------------------------------------------------------------------- files
def test_files_the_params_name_must_exist_relative_to_the_params_file(tmp_path, monkeypatch):
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    (project / "corpus.csv").write_text("file,message\n")
    raw = with_("data", {"source": "enron", "path": "corpus.csv", "n_train": 100})
    (project / "params.yaml").write_text(yaml.safe_dump(raw))
    monkeypatch.chdir(elsewhere)
    assert load_params(project / "params.yaml").data.path == "corpus.csv"  # found next to the params file
    (project / "corpus.csv").unlink()
    with pytest.raises(ConfigError) as info:
        load_params(project / "params.yaml")
    assert info.value.lines == ["data.path: file does not exist (got 'corpus.csv'; allowed: an existing corpus file or directory)"]
    assert one_line(with_("secrets.overrides", str(tmp_path / "none.jsonl"))).startswith("secrets.overrides: file does not exist")
    assert one_line(with_("base.name", "./no/such/model")).startswith("base.name: local model path does not exist")


# --------------------------------------------------------------------------- raw inputs DVC tracks
def _enron_csv(path: Path, n: int = 120) -> Path:
    """An Enron CSV of ``n`` usable e-mails (one sender, one receiver, 40 words each): 100 training e-mails for 120."""
    import csv

    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["file", "message"])
        for i in range(n):
            w.writerow([f"a/sent/{i}.", f"Message-ID: <{i}>\nFrom: a@x.com\nTo: b@x.com\n\n"
                                      + " ".join(f"w{i}x{k}" for k in range(40))])
    return path


def test_inputs_must_list_exactly_the_raw_files_the_params_name(tmp_path):
    from empriv.config import expected_inputs
    from empriv.pipeline.validate import validate_project

    corpus = _enron_csv(tmp_path / "emails.csv")
    raw = with_("data", {"source": "enron", "path": str(corpus), "n_train": 100})
    assert parse_params(raw).expected_inputs() == {"corpus": str(corpus)}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError) as info:  # the pipeline needs it (the library does not: parse_params passed)
        validate_project(tmp_path / "params.yaml", tmp_path / "no-dvc.yaml")
    assert info.value.lines == [f"inputs.corpus: missing: data.path names a raw file DVC must track, or an edit to it "
                                f"would not re-run the DAG; run `empriv validate --fix-inputs` or add it (allowed: "
                                f"inputs: {{corpus: {corpus}}})"]
    assert parse_params({**raw, "inputs": {"corpus": str(corpus)}}).inputs == {"corpus": str(corpus)}
    assert one_line({**raw, "inputs": {"corpus": "other.csv"}}) == (
        f"inputs.corpus: must name data.path's file (got 'other.csv'; allowed: {str(corpus)!r})")
    assert one_line({**raw, "inputs": {"corpus": str(corpus), "base": "./m"}}) == (
        "inputs.base: base.name names no raw file (null, or a built-in or hub base): remove inputs.base "
        "(got './m'; allowed: no inputs.base)")
    assert one_line({**raw, "inputs": {"corpsu": str(corpus)}}).startswith(
        "inputs.corpsu: is not a raw input; did you mean 'corpus'?")
    assert expected_inputs("~/x.csv", None, "tiny-gpt2") == {"corpus": os.path.expanduser("~/x.csv")}
    assert expected_inputs(None, "o.jsonl", "./model") == {"overrides": "o.jsonl", "base": "./model"}
    assert expected_inputs(None, None, "HuggingFaceTB/SmolLM2-135M") == {}


def test_fix_inputs_rewrites_only_the_inputs_and_keeps_comments(tmp_path):
    from empriv.pipeline.validate import fix_inputs, validate_project

    corpus = _enron_csv(tmp_path / "emails.csv")
    text = yaml.safe_dump(with_("data", {"source": "enron", "path": str(corpus), "n_train": 100}), sort_keys=False)
    path = tmp_path / "params.yaml"
    path.write_text("# my study\n" + text)
    assert fix_inputs(path) == {"corpus": str(corpus)}
    assert path.read_text().startswith("# my study\n") and fix_inputs(path) is None  # idempotent
    assert validate_project(path, tmp_path / "no-dvc.yaml").inputs == {"corpus": str(corpus)}
    raw = yaml.safe_load(path.read_text())
    raw["data"] = {"source": "synthetic-enron"}
    path.write_text(yaml.safe_dump(raw))
    assert fix_inputs(path) == {} and validate_project(path, tmp_path / "no-dvc.yaml").inputs == {}


def test_the_public_file_is_a_raw_input_as_the_corpus_is(tmp_path):
    from empriv.config import expected_inputs
    from empriv.checks import short_repr
    from empriv.pipeline.validate import fix_inputs, validate_project

    corpus, public = tmp_path / "c.jsonl", tmp_path / "p.jsonl"
    corpus.write_text("".join(json.dumps({"text": f"record {i} of the corpus"}) + "\n" for i in range(30)))
    public.write_text("".join(json.dumps({"text": f"public record {i}"}) + "\n" for i in range(12)))
    raw = with_("data", {"source": "text", "path": str(corpus), "n_train": 10, "public": "file",
                         "public_path": str(public)})
    assert parse_params(raw).expected_inputs() == {"corpus": str(corpus), "public": str(public)}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({**raw, "inputs": {"corpus": str(corpus)}}))
    with pytest.raises(ConfigError) as info:
        validate_project(tmp_path / "params.yaml", tmp_path / "no-dvc.yaml")
    assert info.value.lines == [f"inputs.public: missing: data.public_path names a raw file DVC must track, or an edit "
                                f"to it would not re-run the DAG; run `empriv validate --fix-inputs` or add it (allowed: "
                                f"inputs: {{public: {public}}})"]
    assert one_line({**raw, "inputs": {"corpus": str(corpus), "public": str(corpus)}}) == (
        f"inputs.public: must name data.public_path's file (got {short_repr(str(corpus))}; allowed: {str(public)!r})")
    builtin = with_("data", {"source": "text", "path": str(corpus), "n_train": 10})
    assert one_line({**builtin, "inputs": {"corpus": str(corpus), "public": str(public)}}) == (
        f"inputs.public: data.public_path names no raw file (null, or a built-in or hub base): remove inputs.public "
        f"(got {short_repr(str(public))}; allowed: no inputs.public)")
    assert fix_inputs(tmp_path / "params.yaml") == {"corpus": str(corpus), "public": str(public)}
    assert validate_project(tmp_path / "params.yaml", tmp_path / "no-dvc.yaml").inputs == {
        "corpus": str(corpus), "public": str(public)}
    assert expected_inputs(None, None, "tiny-gpt2", "~/p.txt") == {"public": os.path.expanduser("~/p.txt")}


def test_stale_input_fingerprints_are_pruned(tmp_path):
    from empriv.pipeline.inputs import fingerprint_path, prune_stale

    for key in ("corpus", "base"):
        fingerprint_path(key, tmp_path).parent.mkdir(parents=True)
        fingerprint_path(key, tmp_path).write_text("{}")
    corpus = tmp_path / "emails.csv"
    corpus.write_text("file,message\n")
    params = parse_params({**with_("data", {"source": "enron", "path": str(corpus), "n_train": 100}),
                           "inputs": {"corpus": str(corpus)}})
    assert prune_stale(params, tmp_path) == [fingerprint_path("base", tmp_path)]
    assert fingerprint_path("corpus", tmp_path).exists() and not fingerprint_path("base", tmp_path).exists()


# --------------------------------------------------------------------------- one line per error
def test_several_errors_give_several_self_contained_lines():
    raw = with_("data.n_train", 64.0, with_("cubee", {}, with_("score.temperature", math.inf,
                                                               with_("analyze.scores", ["vmr_maen"]))))
    lines = lines_of(raw)
    assert len(lines) == 4
    assert {line.split(":", 1)[0] for line in lines} == {"data.n_train", "cubee", "score.temperature", "analyze.scores[0]"}
    for line in lines:
        assert "\n" not in line and ("(got " in line or "(allowed: " in line), line
    assert error_lines(ConfigError(*lines)).splitlines() == [f"error: {line}" for line in lines]


def test_a_union_reports_one_line_per_key():
    assert lines_of(with_("train.micro_batch_size", 2.5)) == [
        "train.micro_batch_size: not an integer >= 1 or 'auto' (got 2.5; allowed: an integer >= 1, or 'auto')"]
    assert lines_of(with_("cube.learning_rate", ["x"])) == ["cube.learning_rate[0]: not a number (got 'x'; allowed: a finite number)"]


def test_invalid_yaml_and_missing_file_are_one_line(tmp_path):
    bad = tmp_path / "params.yaml"
    bad.write_text("cube: [unclosed\n  epsilon: {\n")
    with pytest.raises(ConfigError) as info:
        load_params(bad)
    assert len(info.value.lines) == 1 and info.value.lines[0].startswith(f"{bad}: not valid YAML at line ")
    with pytest.raises(ConfigError, match=r"nope.yaml: params file does not exist$"):
        load_params(tmp_path / "nope.yaml")


# --------------------------------------------------------------------------- ACR settings: one definition
def test_acr_search_settings_come_from_acr_params_only():
    """The search's settings are score.acr's own model: ACRParams extends ACRSearchParams (no field declared twice),
    and the search is handed the search keys of the section, each with its one default."""
    from empriv.config import ACRSearchParams
    from empriv.score.acr import SEARCH_FIELDS, settings_from_params

    assert issubclass(ACRParams, ACRSearchParams)
    assert set(SEARCH_FIELDS) == set(ACRSearchParams.model_fields) < set(ACRParams.model_fields)
    assert set(ACRParams.model_fields) - set(SEARCH_FIELDS) == {"budget", "enabled", "training_seeds", "epsilons",
                                                                "max_secrets", "rare_frequency"}
    defaults = ACRParams()
    assert ACRSearchParams() == settings_from_params(defaults) == defaults.search
    assert type(settings_from_params(defaults)) is ACRSearchParams
    changed = {"top_k": 7, "candidates": 9, "steps": 11, "step_growth": 1.5, "start_length": 2, "grow": 3, "max_length": 9,
               "seeds": [4, 5], "strategy": "published", "patience": 6, "patience_tolerance": 0.1, "fast_candidates": 5,
               "fast_top_k": 13,
               "race_steps": 3, "give_up": [[7, 2]], "keep": "loss", "wrong_weight": 2.5,
               "skip": 3}
    assert set(changed) == set(SEARCH_FIELDS)
    full = settings_from_params({**changed, "max_secrets": 3, "enabled": False, "rare_frequency": 0.2})  # the section's own keys are not the search's
    assert full.seeds == [4, 5] and full.strategy == "published" and not hasattr(full, "max_secrets")
    assert not hasattr(full, "rare_frequency")  # how searches are reported, not how they run
    for key in SEARCH_FIELDS:  # a key deleted from params gets the budget's value ("full" when none is named)
        partial = settings_from_params({k: v for k, v in changed.items() if k != key})
        assert getattr(partial, key) == getattr(defaults, key), key
        assert all(getattr(partial, k) == getattr(full, k) for k in SEARCH_FIELDS if k != key)


def test_acr_settings_are_validated_by_acr_params():
    from empriv.config import ACRSearchParams
    from empriv.score.acr import settings_from_params

    with pytest.raises(ConfigError, match=r"^score\.acr\.steps: out of range \(got 0; allowed: an integer >= 1\)$"):
        settings_from_params({"steps": 0})
    with pytest.raises(ConfigError, match=r"^score\.acr\.top_k: not an integer \(got 2\.0;"):
        settings_from_params({"top_k": 2.0})
    with pytest.raises(ValueError, match="steps"):  # built directly (tests, benchmarks): pydantic's own error
        ACRSearchParams(steps=0)


@pytest.mark.parametrize("value", [1.0, 1.5, -0.01])
def test_rare_frequency_must_be_in_zero_one(value):
    with pytest.raises(ConfigError, match=rf"^score\.acr\.rare_frequency: out of range \(got {value}; allowed: a finite "
                                          r"number in \[0, 1\)\)$"):
        parse_params(with_("score.acr.rare_frequency", value))
    assert parse_params(with_("score.acr.rare_frequency", 0)).score.acr.rare_frequency == 0.0
    assert parse_params(MINIMAL).score.acr.rare_frequency == 0.01


# --------------------------------------------------------------------------- the score names cannot rot
def test_known_score_names_are_what_scoring_and_the_run_table_produce(tmp_path, corpus):
    """Score one tiny model with the real scoring code (an Enron-like and an author-genre secret, ACR on), write its
    metrics as the score stage does, build the run table: its score columns are exactly config's names."""
    import json

    from empriv.analysis.table import TRAIN_COLUMNS, run_table
    from empriv.models.tokenizer import train_bpe
    from empriv.score.run import score_model
    from tiny_models import tiny_gpt2

    tok = train_bpe([e.text for e in corpus.public[:200]], 300)
    model = tiny_gpt2(vocab_size=tok.vocab_size, n_embd=16, n_head=2, n_layer=1, n_positions=64)
    base = tiny_gpt2(vocab_size=tok.vocab_size, n_embd=16, n_head=2, n_layer=1, n_positions=64, seed=1)
    secrets = [
        {"id": "s-0", "kind": "mined", "text": "Call Rita Mcconnell at 713-345-6593", "prompt": "Call Rita Mcconnell at",
         "continuation": " 713-345-6593", "occurrences": 8, "frequency": 0.08},
        # in ≤ score.acr.rare_frequency of the records: its ACR is reported apart (acr_rare_*)
        {"id": "s-1", "kind": "mined", "text": "Fax Ann Lee on 713-853-0912", "prompt": "Fax Ann Lee on",
         "continuation": " 713-853-0912", "occurrences": 1, "frequency": 0.01},
        {"id": "a-0", "kind": "author_genre", "name": "Ann Lee", "genre": "mystery",
         "text": "Question: What genre does Ann Lee write in?\nAnswer: mystery",
         "prompt": "Question: What genre does Ann Lee write in?\nAnswer:", "continuation": " mystery"},
    ]
    params = parse_params({
        "data": {"n_train": 100}, "cube": {**CUBE, "epsilon": [8]},
        "score": {"vmr_samples": 2, "n_controls": 2, "air_samples": 2, "air_max_new_tokens": 4,
                  "acr": {"steps": 2, "candidates": 8, "top_k": 8, "seeds": [0], "max_length": 8, "patience": None}}})
    run = params.runs()[0]
    metrics = score_model(params, run, model, base, tok, secrets, [e.text for e in corpus.test[:4]])
    (tmp_path / "score").mkdir()
    (tmp_path / "train").mkdir()
    for d in ("score", "train"):
        (tmp_path / d / "record" / "full").mkdir(parents=True, exist_ok=True)
    (tmp_path / "score" / f"{run.file_stem}.json").write_text(json.dumps(metrics))
    (tmp_path / "train" / f"{run.file_stem}.json").write_text(json.dumps({k: 1.0 for k in TRAIN_COLUMNS}))
    table = run_table(params, tmp_path / "train", tmp_path / "score", tmp_path / "audit")
    described = {"config", "group", "epsilon", "batch_size", "steps", "learning_rate", "seed", "unit", "method",
                 "trainable_parameters", "compute",
                 "update", *TRAIN_COLUMNS}
    assert set(table.columns) - described == set(SCORE_NAMES) | set(SCORE_COUNTS)
    assert len(set(SCORE_NAMES)) == len(SCORE_NAMES) and not set(SCORE_NAMES) & set(SCORE_COUNTS)


# --------------------------------------------------------------------------- nothing is touched
def _env(tmp: Path) -> dict:
    env = dict(os.environ)
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env["WANDB_MODE"] = "offline"
    env.pop("EMPRIV_DEBUG", None)
    return env


def _snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and ".dvc" not in p.relative_to(root).parts[:1]}


def _small_project(work: Path) -> None:
    """The repository's pipeline definition and committed outputs (dvc.yaml, dvc.lock, metrics/, plots/), plus a
    stand-in for each untracked output (models, prepared data) and a valid marker, under ``work``."""
    tracked = subprocess.run(["git", "ls-files", "-z", "dvc.yaml", "dvc.lock", "metrics", "plots"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout
    for rel in filter(None, tracked.split("\0")):
        if (ROOT / rel).is_file():
            (work / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, work / rel)
    for rel in ("models/base/model.safetensors", "models/runs/record/full/eps2-b8-T1-lr0.01-s0/model.safetensors",
                "data/prepared/train.jsonl", "data/secrets.jsonl", ".empriv/params.ok"):
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_bytes(b"valid\n" if rel.endswith(".ok") else os.urandom(64))


BAD = with_("data.n_train", 64.0, with_("cubee", {}, with_("cube.epsilon", [2, 1e9])))
BAD_LINES = ["error: data.n_train: not an integer (got 64.0; allowed: an integer >= 10)",
             "error: cube.epsilon[1]: above EPSILON_MAX = 100",
             "error: cubee: unknown key; did you mean 'cube'?"]


@pytest.mark.parametrize("command", [[sys.executable, str(ROOT / "stages/validate_params.py")], ["empriv", "validate"]])
def test_a_bad_params_file_leaves_every_output_untouched(tmp_path, command):
    work = tmp_path / "project"
    work.mkdir()
    _small_project(work)
    (work / "params.yaml").write_text(yaml.safe_dump(BAD))
    before = _snapshot(work)
    assert any(k.startswith("metrics/") for k in before) and "dvc.lock" in before
    proc = subprocess.run(command, cwd=work, env=_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert _snapshot(work) == before
    lines = proc.stderr.splitlines()
    assert len(lines) == 3 and "Traceback" not in proc.stderr, proc.stderr
    assert all(line.startswith(expected) for line, expected in zip(lines, BAD_LINES)), lines


def test_debug_shows_the_traceback(tmp_path):
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(BAD))
    env = _env(tmp_path)
    proc = subprocess.run(["empriv", "--debug", "validate"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "Traceback" in proc.stderr and "ConfigError" in proc.stderr
    proc = subprocess.run([sys.executable, str(ROOT / "stages/validate_params.py")], cwd=tmp_path,
                          env={**env, "EMPRIV_DEBUG": "1"}, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "Traceback" in proc.stderr


def test_a_valid_params_file_writes_a_constant_marker(tmp_path, monkeypatch):
    from empriv.pipeline.validate import MARKER_TEXT
    from empriv.pipeline.validate import cli as main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(MINIMAL))
    assert main([]) == 0
    first = (tmp_path / ".empriv" / "params.ok").read_bytes()
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(with_("data.seed", 7)))
    assert main([]) == 0
    assert (tmp_path / ".empriv" / "params.ok").read_bytes() == first == MARKER_TEXT.encode()


def test_the_stage_runner_prints_user_errors_one_line_each(tmp_path, capsys, monkeypatch):
    from empriv.stage import run_stage

    monkeypatch.delenv("EMPRIV_DEBUG", raising=False)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(MINIMAL))

    def bad_input(params):
        raise ConfigError("secrets.overrides: names unknown secret ids (got ['x']; allowed: ids of data/secrets.jsonl)",
                          "data.path: the corpus has 3 rows (got n_train 100; allowed: n_train <= 3)")

    def library_value_error(params):
        raise ValueError("a 40-token target leaves 0 of the model's 32 positions\n for the prompt")

    for main, expected in ((bad_input, ["error: secrets.overrides: names unknown secret ids (got ['x']; allowed: ids of "
                                        "data/secrets.jsonl)", "error: data.path: the corpus has 3 rows (got n_train 100; "
                                        "allowed: n_train <= 3)"]),
                           (library_value_error, ["error: a 40-token target leaves 0 of the model's 32 positions for the prompt"])):
        with pytest.raises(SystemExit) as exit_info:
            run_stage(main, tmp_path / "params.yaml")
        assert exit_info.value.code == 2
        assert capsys.readouterr().err.splitlines()[-len(expected):] == expected
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(with_("data.n_train", 64.0)))
    with pytest.raises(SystemExit):
        run_stage(bad_input, tmp_path / "bad.yaml")
    assert capsys.readouterr().err.splitlines()[-1] == "error: data.n_train: not an integer (got 64.0; allowed: an integer >= 10)"
    monkeypatch.setenv("EMPRIV_DEBUG", "1")
    with pytest.raises(ConfigError):
        run_stage(bad_input, tmp_path / "params.yaml")


# --------------------------------------------------------------------------- dvc.yaml's cube matrices
MATRIX_DVC = """stages:
  train:
    matrix:
      epsilon: ${cube.epsilon}
      batch_size: ${cube.batch_size}
      steps: ${cube.steps}
      learning_rate: ${cube.learning_rate}
      seed: ${cube.seed}
      unit: ${cube.unit}
      method: ${cube.method}
    cmd: >-
      echo --name eps${item.epsilon}-b${item.batch_size}-T${item.steps}-lr${item.learning_rate}-s${item.seed}
"""


def test_dvc_matrix_spellings_must_match_run_names(tmp_path):
    from empriv.pipeline.validate import validate_project

    (tmp_path / "dvc.yaml").write_text(MATRIX_DVC)
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text("data:\n  n_train: 100\ncube:\n  epsilon: [2, 4.0, .inf]\n  batch_size: [8]\n  steps: [1]\n"
                    "  learning_rate: [0.01, 1e-3]\n  seed: [0]\n  unit: [record, userwise-k5-chunk]\n  method: [full]\n")
    assert len(validate_project(good, tmp_path / "dvc.yaml").runs()) == 12
    # a params file written before the unit axis: one line saying what to add
    old = tmp_path / "old.yaml"
    old.write_text(good.read_text().replace("  unit: [record, userwise-k5-chunk]\n", ""))
    with pytest.raises(ConfigError) as info:
        validate_project(old, tmp_path / "dvc.yaml")
    assert info.value.lines == ["cube.unit: missing from the params file, and dvc.yaml's stages.train.matrix needs it "
                                "(allowed: a list, e.g. unit: [record] under cube)"]
    bad.write_text(good.read_text().replace("[2, 4.0, .inf]", "[2, Infinity]"))
    with pytest.raises(ConfigError) as info:
        validate_project(bad, tmp_path / "dvc.yaml")
    assert info.value.lines == ["cube.epsilon[1]: DVC spells it 'Infinity' in run names, empriv 'inf' "
                                "(got 'Infinity'; allowed: a plain YAML number, or inf / .inf for ε = ∞)"]
    (tmp_path / "dvc.yaml").write_text(MATRIX_DVC.replace("seed: ${cube.seed}", "seed: ${cube.steps}"))
    with pytest.raises(ConfigError, match=r"stages\.train\.matrix: does not take every cube field under its own name"):
        validate_project(good, tmp_path / "dvc.yaml")


# --------------------------------------------------------------------------- DVC stops before deleting anything
GUARDED_DVC = """stages:
  validate:
    cmd: python STAGES/validate_params.py
    deps:
      - params.yaml
    outs:
      - .empriv/params.ok
  downstream:
    cmd: python downstream.py
    deps:
      - .empriv/params.ok
      - downstream.py
    params:
      - data.n_train
    outs:
      - out.txt
    metrics:
      - metrics.json:
          cache: false
""".replace("STAGES", str(ROOT / "stages"))
DOWNSTREAM = """import pathlib, yaml
n = yaml.safe_load(open("params.yaml"))["data"]["n_train"]
pathlib.Path("out.txt").write_text(f"trained on {n}\\n")
pathlib.Path("metrics.json").write_text('{"n": %d}' % n)
"""


@pytest.mark.slow
def test_dvc_repro_stops_at_the_validate_stage_and_a_valid_edit_reruns_nothing_else(tmp_path):
    work = tmp_path / "dvc-project"
    work.mkdir()
    env = _env(tmp_path)

    def dvc(*args, check=True):
        proc = subprocess.run(["dvc", *args], cwd=work, env=env, capture_output=True, text=True, timeout=600)
        assert not check or proc.returncode == 0, proc.stdout + proc.stderr
        return proc

    dvc("init", "--no-scm", "-q")
    (work / "dvc.yaml").write_text(GUARDED_DVC)
    (work / "downstream.py").write_text(DOWNSTREAM)
    (work / "params.yaml").write_text(yaml.safe_dump(MINIMAL))
    first = dvc("repro")
    assert "Running stage 'downstream'" in first.stdout
    outputs = {name: (work / name).read_bytes() for name in ("out.txt", "metrics.json", ".empriv/params.ok")}

    (work / "params.yaml").write_text(yaml.safe_dump(with_("data.seed", 5)))  # valid, a key downstream does not read
    second = dvc("repro")
    assert "Running stage 'validate'" in second.stdout and "Running stage 'downstream'" not in second.stdout

    (work / "params.yaml").write_text(yaml.safe_dump(with_("data.n_train", 64.0)))  # invalid, and a key downstream reads
    third = dvc("repro", check=False)
    assert third.returncode != 0
    assert "error: data.n_train: not an integer (got 64.0; allowed: an integer >= 10)" in third.stdout + third.stderr
    assert "Traceback" not in third.stdout + third.stderr
    assert "Running stage 'downstream'" not in third.stdout
    for name in ("out.txt", "metrics.json"):
        assert (work / name).read_bytes() == outputs[name], name


# --------------------------------------------------------------------------- what the training methods refuse
# The methods' own checks (TrainingMethod.check) run at validation, before DVC deletes any output: a cube the train
# stage would refuse after the privacy stage calibrated it for a user-level unit stops here, one line per problem.
VIRTUAL_OK = with_("base.n_positions", 128)  # room for the virtual tokens of prefix / dpzero


def _method_lines(tmp_path, raw) -> list[str]:
    from empriv.pipeline.validate import validate_project

    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError) as info:
        validate_project(tmp_path / "params.yaml", tmp_path / "no-dvc.yaml")
    return info.value.lines


def test_a_method_that_trains_record_level_only_refuses_a_user_level_unit_at_validation(tmp_path):
    raw = with_("cube.method", ["full", "dpzero"], with_("cube.unit", ["record", "userwise-k2-random"], VIRTUAL_OK))
    assert _method_lines(tmp_path, raw) == [
        "cube.method 'dpzero': DPZero trains record-level only, not cube.unit 'userwise-k2-random'"]
    dpflat = with_("train.variants", {"flat": {"method": "prefix", "dpflat": {"awp": True, "awp_steps": 1}}},
                   with_("cube.method", ["flat"], with_("cube.unit", ["group-k2-random"], VIRTUAL_OK)))
    assert _method_lines(tmp_path, dpflat) == [
        "cube.method 'flat': DP-Flat trains record-level only, not cube.unit 'group-k2-random'"]


def test_the_audit_cube_is_asked_with_its_canaries_design(tmp_path):
    from empriv.pipeline.validate import method_errors

    audit = {"epsilon": [2], "batch_size": [8], "steps": [1], "learning_rate": [0.01], "seed": [0], "method": ["dpzero"]}
    raw = with_("audit.cube", audit, VIRTUAL_OK)
    assert _method_lines(tmp_path, raw) == [
        "audit.cube.method 'dpzero': DPZero trains a soft prompt only, so new-token canaries can never be learnt; "
        "audit it with canaries.design random, unigram, bigram or model"]
    assert method_errors(parse_params(with_("canaries.design", "random", raw))) == []
    user = with_("audit.cube", {**audit, "unit": ["group-k2-random"]}, with_("canaries.design", "random", VIRTUAL_OK))
    assert _method_lines(tmp_path, user) == [
        "audit.cube.method 'dpzero': DPZero trains record-level only, not cube.unit 'group-k2-random'"]
    # the same methods at record level, and every shipped method on the default cube, pass
    fine = with_("cube.method", ["full", "lora", "prefix", "prompt", "head", "dpzero"], VIRTUAL_OK)
    assert method_errors(parse_params(with_("canaries.design", "random", fine))) == []


def test_the_acr_record_holds_every_search_setting():
    """score's acr_protocol lists every key of ACRSearchParams with its value (race_steps and give_up included), so a
    record says how its searches ran; asked here of a run ACR does not apply to (nothing is searched)."""
    from empriv.config import RunConfig
    from empriv.score.gcg import SEARCH_FIELDS
    from empriv.score.run import run_acr

    acr = parse_params(with_("score.acr", {"epsilons": [2], "give_up": [[10, 4]], "race_steps": 7, "seeds": [3]})).score.acr
    record = run_acr(None, None, [], [], acr, RunConfig(math.inf, 8, 1, 0.01, 0))
    assert set(SEARCH_FIELDS) <= set(record) and record["ran"] is False and "why_not" in record
    assert record["rare_frequency"] == 0.01  # the split the run's ACR aggregates use, recorded beside the settings
    assert record["give_up"] == [[10, 4]] and record["race_steps"] == 7 and record["seeds"] == [3]


def test_an_acr_budget_names_a_bundle_and_a_key_set_beside_it_overrides_it():
    """score.acr.budget (issue 45): quick | cpu | full | published, each a bundle of the search keys; "full" is the
    field defaults; params.yaml's "cpu" resolves to the knobs params.yaml spelled out before the budget existed."""
    from empriv.config.scoring import ACR_BUDGETS
    from empriv.score.acr import SEARCH_FIELDS, settings_from_params

    assert set(ACR_BUDGETS) == {"quick", "cpu", "full", "published"}
    assert all(set(b) <= set(SEARCH_FIELDS) for b in ACR_BUDGETS.values())
    assert settings_from_params({"budget": "full"}) == settings_from_params({}) == ACRParams().search
    cpu = settings_from_params({"budget": "cpu"})
    spelled_out = {"strategy": "fast", "top_k": 128, "candidates": 64, "steps": 40, "step_growth": 1.2,
                   "start_length": 5, "grow": 5, "max_length": 30, "seeds": [0], "patience": 10,
                   "patience_tolerance": 0.02, "fast_candidates": 32, "fast_top_k": None, "race_steps": 30,
                   "give_up": [], "keep": "loss", "wrong_weight": 0, "skip": 0}  # params.yaml at e15e48f
    assert cpu == settings_from_params(spelled_out)
    published = settings_from_params({"budget": "published"})
    assert (published.strategy, published.top_k, published.candidates, published.steps, published.seeds,
            published.max_length) == ("published", 250, 100, 200, [0, 1, 2], 30)
    quick = settings_from_params({"budget": "quick"})
    assert quick.steps < cpu.steps and quick.max_length < cpu.max_length
    mixed = settings_from_params({"budget": "cpu", "steps": 12, "seeds": [0, 1]})
    assert (mixed.steps, mixed.seeds, mixed.top_k) == (12, [0, 1], 128)  # the keys set win, the rest is the budget's
    assert settings_from_params({"budget": "published", "strategy": "fast"}).strategy == "fast"
    with pytest.raises(ConfigError, match=r"score\.acr\.budget: not an allowed value \(got 'fastest'; allowed: one of "
                                          r"'quick', 'cpu', 'full', 'published'\)"):
        settings_from_params({"budget": "fastest"})


def test_the_default_params_name_the_cpu_budget_and_set_no_search_key():
    acr = yaml.safe_load((ROOT / "params.yaml").read_text())["score"]["acr"]
    assert acr["budget"] == "cpu"
    from empriv.score.acr import SEARCH_FIELDS
    assert not set(acr) & set(SEARCH_FIELDS)  # a search key here would silently override the budget


def test_an_audit_cube_that_cannot_meet_the_main_cube_is_noted():
    from empriv.pipeline.validate import audit_join_warnings

    cube = {"epsilon": [8], "batch_size": [8, 16], "steps": [1, 2], "learning_rate": [0.01], "seed": [0, 1]}
    base = with_("cube", cube)
    shared = with_("audit.cube", {**cube, "seed": [0]}, base)
    assert audit_join_warnings(parse_params(shared)) == []  # 4 of the main cube's configurations at eps 8
    apart = parse_params(with_("audit.cube", {**cube, "learning_rate": [0.02]}, base))
    assert audit_join_warnings(apart) == [
        "audit.cube: none of its 4 configuration(s) is one of the main cube's (e.g. eps8-b16-T1-lr0.02-full), so "
        "its ε̂ stand alone: analyze ranks none against a memorisation score or the utility (audit_spread is empty; "
        "audit.cube values of cube join them)"]
    two = parse_params(with_("audit.cube", {**cube, "batch_size": [8, 32]}, base))  # b 32 is not in the cube
    assert audit_join_warnings(two) == [
        "audit.cube: at most 2 of its configurations at one ε are the main cube's, so analyze ranks no ε̂ against the "
        "scores (Spearman needs 3 at one ε)"]


def test_validate_prints_the_audit_note_and_passes(tmp_path):
    cube = {"epsilon": [8], "batch_size": [8], "steps": [1], "learning_rate": [0.01], "seed": [0]}
    raw = with_("audit.cube", {**cube, "steps": [3]}, with_("cube", cube))
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw))
    run = subprocess.run([str(VENV_BIN / "empriv"), "validate", str(tmp_path / "params.yaml"), "--dvc-yaml",
                          str(tmp_path / "no-dvc.yaml")], capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[-1].startswith("note: audit.cube: none of its 1 configuration(s) is one of the "
                                                  "main cube's (e.g. eps8-b8-T3-lr0.01-full)")
