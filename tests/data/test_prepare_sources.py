"""prepare → tokenizer → secrets on every data source (synthetic-tofu, and the real samples)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from empriv.config import ConfigError, parse_params
from empriv.io import read_jsonl
from empriv.pipeline.prepare import main as prepare
from empriv.pipeline.secrets import main as make_secrets
from empriv.pipeline.tokenizer import main as make_tokenizer
from empriv.score.memorization import make_controls

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"
CUBE = {"epsilon": [8, "inf"], "batch_size": [16], "steps": [2], "learning_rate": [0.01], "seed": [0]}


def _params(**data):
    return parse_params({"data": data, "cube": CUBE, "tokenizer": {"vocab_size": 1024},
                         "secrets": {"ngram": 10, "top_k": 100}})


def _run(tmp_path, monkeypatch, params) -> tuple[dict, list[dict], dict]:
    monkeypatch.chdir(tmp_path)
    prep = prepare(params)
    make_tokenizer(params)
    secrets = make_secrets(params)
    return prep, secrets, json.loads(Path("records/secrets.json").read_text())


def test_source_alias_and_variant_validation():
    assert _params(source="synthetic").data.source == "synthetic-enron"
    with pytest.raises(ConfigError, match=r"data.variant: applies to TOFU sources only.*'tofu-2'"):
        _params(source="synthetic-enron", variant="tofu-2")
    with pytest.raises(ConfigError, match=r"data.variant: .*tofu-3.*allowed: null or .*tofu-4"):
        _params(source="synthetic-tofu", variant="tofu-3")
    with pytest.raises(ConfigError, match="data.path: is required"):
        _params(source="tofu")


def test_synthetic_tofu_secrets_are_the_training_authors_genres(tmp_path, monkeypatch):
    params = _params(source="synthetic-tofu", n_authors=20, n_train=300, n_validation=10, n_test=20, n_public=200)
    prep, secrets, metrics = _run(tmp_path, monkeypatch, params)
    assert (prep["n_train"], prep["train_authors"], prep["n_validation"], prep["n_test"]) == (300, 18, 10, 20)
    # 300 of the 18 × 20 = 360 training records are used: authors 0..14 appear, the rest are cut off
    units = [r["unit"] for r in read_jsonl(tmp_path / "data/prepared/train.jsonl")]
    assert units == [f"author-{k // 20:03d}" for k in range(300)]  # privacy unit = author
    assert prep["train_units"]["n_units"] == 15 and prep["train_units"]["records_per_unit_median"] == 20.0
    assert [s["id"] for s in secrets] == [f"author-{i:03d}" for i in range(15)]
    assert metrics["in_training_split"] == 15 and metrics["how"] == "planted"
    planted = {p["id"]: p for p in read_jsonl(tmp_path / "data/prepared/planted_secrets.jsonl")}
    train = [r["text"] for r in read_jsonl(tmp_path / "data/prepared/train.jsonl")]
    for s in secrets:
        assert s["continuation"] == " " + planted[s["id"]]["genre"]
        assert s["prompt"] == f"Question: What genre does {planted[s['id']]['name']} write in?\nAnswer:"
        assert s["occurrences"] == sum(1 for t in train if s["name"] in t and s["genre"].lower() in t.lower()) >= 1
    # test authors' records are held out; their names never reach the training split
    test = [r["text"] for r in read_jsonl(tmp_path / "data/prepared/test.jsonl")]
    assert not set(test) & set(train)
    assert metrics["held_out_samples_with_a_secret"]["test"] == {"dropped": 0, "kept": 20}
    assert len(read_jsonl(tmp_path / "data/heldout/test.jsonl")) == 20
    controls = make_controls(secrets, 5, seed=0)
    for s in secrets:
        assert len(controls[s["id"]]) == 5
        assert all(c.startswith(s["prompt"] + " ") and c != s["text"] for c in controls[s["id"]])


def test_tofu_variant_doubles_the_training_records(tmp_path, monkeypatch):
    params = _params(source="synthetic-tofu", variant="tofu-2", n_authors=10, n_train=360, n_validation=5,
                     n_test=10, n_public=100)
    prep, secrets, _ = _run(tmp_path, monkeypatch, params)
    assert prep["variant"] == "tofu-2" and prep["variant_summary"]["samples"] == 2 * 9 * 20
    # a record and its paraphrase keep their author: 9 units of 40 records
    assert prep["train_units"]["n_units"] == 9 and prep["train_units"]["records_per_unit_min"] == 40
    assert len(secrets) == 9


@pytest.mark.slow
def test_real_enron_sample_is_cleaned_and_mined(tmp_path, monkeypatch):
    path = SHARED / "enron" / "emails.csv"
    if not path.exists():
        pytest.skip(f"real Enron sample not found at {path} (../shared/data is only beside the repo in development/CI)")
    params = _params(source="enron", path=str(path), n_train=2000, n_validation=100, n_test=100, n_public=500,
                     top_n_people=100)
    prep, secrets, metrics = _run(tmp_path, monkeypatch, params)
    assert prep["load"]["n_rows"] == 4904 and prep["load"]["n_malformed"] == 0
    assert prep["cleaning"]["deduplicated"] == 4846 and prep["cleaning"]["train"] == 2146
    assert prep["n_train"] == 2000
    texts = [s["text"] for s in secrets]
    assert any("Forwarded by" in t for t in texts)
    n_secrets = len(secrets)  # (compare counts only: an assertion message must never show secret text)
    assert metrics["mined"] >= n_secrets >= 3
    # mined secrets mostly past the 64-token window are dropped (never trained on): counted, and none kept is one
    assert metrics["outside_window"] > 0 and metrics["min_in_window_fraction"] == 0.5
    assert all(s["in_window_fraction"] >= 0.5 for s in secrets)
    assert not any(f["ran"] for f in metrics["filters"])  # model-based filters are recorded as not run
    held = metrics["held_out_samples_with_a_secret"]["test"]
    assert held["dropped"] > 0 and held["dropped"] + held["kept"] == 100
    kept = [r["text"] for r in read_jsonl(tmp_path / "data/heldout/test.jsonl")]
    assert len(kept) == held["kept"] and not any(t in k for t in texts for k in kept)
    assert prep["user_level"]["n_units"] > 100 and prep["user_level"]["records_per_unit_max"] >= 1
    # privacy unit = sender, under opaque ids: no address in the unit column
    units = [r["unit"] for r in read_jsonl(tmp_path / "data/prepared/train.jsonl")]
    assert len(units) == 2000 and all(u.startswith("user") and "@" not in u for u in units)
    tu = prep["train_units"]
    assert tu["n_records"] == 2000 and tu["records_per_unit_min"] >= 1 and tu["records_per_unit_max"] > 20
    assert tu["records_per_unit_mean"] > tu["records_per_unit_median"]  # heavy-tailed, as in the paper's Table 1
    with pytest.raises(ConfigError, match=r"data.n_train = 3000 but the corpus has only 2146 cleaned training emails"):
        prepare(_params(source="enron", path=str(path), n_train=3000, n_public=100))


@pytest.mark.slow
def test_real_tofu_secrets_are_extracted(tmp_path, monkeypatch):
    path = SHARED / "tofu" / "full.jsonl"
    if not path.exists():
        pytest.skip(f"real TOFU file not found at {path} (../shared/data is only beside the repo in development/CI)")
    params = _params(source="tofu", path=str(path), n_train=3600, n_validation=200, n_test=200, n_public=400)
    prep, secrets, metrics = _run(tmp_path, monkeypatch, params)
    assert (prep["authors"], prep["train_authors"], prep["n_train"]) == (200, 180, 3600)
    assert metrics["how"] == "extracted" and metrics["authors"] == 180
    assert len(secrets) >= 165  # the extractor finds a name and a genre for ~94 % of authors
    by_id = {s["id"]: s for s in secrets}
    assert by_id["author-000"]["name"] == "Jaime Vasquez" and by_id["author-000"]["genre"].lower() == "true crime"
    assert by_id["author-001"]["genre"].lower() == "biography"


def test_tofu_utility_scores_answer_tokens_only():
    from empriv.data.tofu import training_text
    from empriv.models.lm import conditional_nll
    from empriv.models.tokenizer import load_gpt2
    from empriv.score.utility import answer_nll
    from tiny_models import tiny_gpt2

    tok = load_gpt2()
    model = tiny_gpt2(vocab_size=tok.vocab_size, n_embd=16, n_head=2, n_layer=1, n_positions=64)
    texts = [training_text("Who wrote it?", "Jaime Vasquez wrote it."), training_text("Where?", "In Santiago.")]
    prompts = [[tok.eos_id, *tok.encode("Question: Who wrote it?\nAnswer:")], [tok.eos_id, *tok.encode("Question: Where?\nAnswer:")]]
    answers = [tok.encode(" Jaime Vasquez wrote it."), tok.encode(" In Santiago.")]
    expected = sum(conditional_nll(model, prompts, answers)) / sum(len(a) for a in answers)
    assert answer_nll(model, tok, texts, seq_len=64) == pytest.approx(expected, rel=1e-6)
    with pytest.raises(ValueError, match="no '\\\\nAnswer:' part"):
        answer_nll(model, tok, ["no answer here"], seq_len=64)


def test_the_secrets_stage_fails_on_a_secret_in_the_public_split_and_writes_nothing(tmp_path, monkeypatch):
    """The secrets stage re-checks what it will hand on (the public split, the held-out splits): a prepared
    split edited after prepare (or a corpus whose mining found a secret in public text) cannot slip through."""
    from empriv import paths
    from empriv.io import write_jsonl
    from empriv.secrets.leaks import LeakError

    params = _params(source="synthetic-enron", n_train=300, n_validation=10, n_test=20, n_public=200,
                     secret_frequencies=[0.05, 0.02])
    monkeypatch.chdir(tmp_path)
    prepare(params)
    make_tokenizer(params)
    planted = read_jsonl(paths.PLANTED_SECRETS)
    public = read_jsonl(paths.split_path("public"))
    public[5]["text"] += "\n" + planted[1]["text"]
    write_jsonl(paths.split_path("public"), public)
    with pytest.raises(LeakError) as err:
        make_secrets(params)
    assert str(err.value) == ("leak check failed: 1 secret/split pair found where no secret may occur: "
                              "secret-01 in 1 public sample")
    assert not paths.SECRETS.exists() and not paths.HELDOUT_DIR.exists() and not paths.SECRETS_METRICS.exists()
