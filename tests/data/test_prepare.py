"""The prepare stage (empriv.pipeline.prepare) and its library (empriv.data.prepare): the prepared splits on
disk, and the leak check that stops the stage before it writes anything."""

from __future__ import annotations

import pytest

from empriv import paths
from empriv.config import ConfigError, parse_params
from empriv.data import prepare as prep
from empriv.io import read_json, read_jsonl
from empriv.pipeline.common import load_texts
from empriv.pipeline.prepare import build, check_leaks, main as prepare
from empriv.secrets.leaks import LeakError

CUBE = {"epsilon": [8], "batch_size": [8], "steps": [1], "learning_rate": [0.1], "seed": [0]}
PLANTED = paths.PLANTED_SECRETS.name


def _params(**data):
    return parse_params({"data": {"n_train": 200, "n_validation": 10, "n_test": 12, "n_public": 30,
                                  "secret_frequencies": [0.05, 0.01], **data}, "cube": CUBE})


def test_prepare_writes_splits_secrets_and_metrics(tmp_path):
    out, metrics_path = tmp_path / "prepared", tmp_path / "metrics" / "prepare.json"
    m = prepare(_params(), out, metrics_path)
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["train.jsonl", "validation.jsonl", "test.jsonl", "public.jsonl", PLANTED]
    )
    assert m == read_json(metrics_path)
    assert m == {"source": "synthetic-enron", "n_train": 200, "n_validation": 10, "n_test": 12, "n_public": 30,
                 "n_secrets": 2, "train_emails_with_secret": 12,
                 "leak_check": {"n_checked": 2, "splits": {"public": 30, "validation": 10, "test": 12}, "n_leaks": 0},
                 "train_units": {"n_units": 43, "n_records": 200, "records_per_unit_mean": 200 / 43,
                                 "records_per_unit_max": 38, "records_per_unit_min": 1, "records_per_unit_median": 2.0}}
    secrets = read_jsonl(out / PLANTED)
    assert [s["planned_frequency"] for s in secrets] == [0.05, 0.01]
    train = load_texts("train", out)
    assert len(train) == 200 and [sum(s["text"] in t for t in train) for s in secrets] == [10, 2]
    for split in ("validation", "test", "public"):
        assert not any(s["text"] in t for s in secrets for t in load_texts(split, out))
    rows = read_jsonl(paths.split_path("test", out))
    assert set(rows[0]) == {"id", "text"} and rows[0]["id"] == "test-000000"
    # every training record has its privacy unit (synthetic users; heavy-tailed records per unit)
    train_rows = read_jsonl(paths.split_path("train", out))
    assert all(set(r) == {"id", "text", "unit"} for r in train_rows)
    per_unit = {}
    for r in train_rows:
        per_unit[r["unit"]] = per_unit.get(r["unit"], 0) + 1
    assert len(per_unit) == 43 and sum(per_unit.values()) == 200 and max(per_unit.values()) == 38
    # no secret text in the metrics
    assert not any(s["text"] in metrics_path.read_text() for s in secrets)


def test_prepare_is_deterministic_and_replaces_the_directory(tmp_path):
    out = tmp_path / "prepared"
    prepare(_params(), out, tmp_path / "m.json")
    first = (out / "train.jsonl").read_bytes()
    (out / "stale.jsonl").write_text("x")
    prepare(_params(), out, tmp_path / "m.json")
    assert (out / "train.jsonl").read_bytes() == first
    assert not (out / "stale.jsonl").exists()
    prepare(_params(seed=1), out, tmp_path / "m.json")
    assert (out / "train.jsonl").read_bytes() != first


def test_prepare_empty_real_corpus_fails_clearly_and_writes_nothing(tmp_path):
    corpus = tmp_path / "emails.csv"
    corpus.write_text("file,message\n")
    with pytest.raises(ConfigError, match="data.n_train = 200 but the corpus has only 0 cleaned training emails"):
        prepare(_params(source="enron", path=str(corpus)), tmp_path / "prepared", tmp_path / "m.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["emails.csv"]


def test_load_texts_of_a_missing_split_says_to_run_prepare(tmp_path):
    with pytest.raises(ValueError, match="split must be one of train, validation, test, public, got 'dev'"):
        paths.split_path("dev", tmp_path)
    with pytest.raises(ConfigError, match="run the prepare stage first"):
        load_texts("train", tmp_path)


def test_public_split_is_general_english_for_enron_sources(tmp_path):
    """synthetic-enron's public split is the general-English generator, not the e-mails of training;
    real Enron runs get the same generator (another seed)."""
    from empriv.data.synthetic import generate_public, secret_values

    out = tmp_path / "prepared"
    prepare(_params(), out, tmp_path / "m.json")
    public = load_texts("public", out)
    secrets = [s["text"] for s in read_jsonl(out / PLANTED)]
    assert public == [e.text for e in generate_public(30, 0, secret_values(secrets))]
    assert not any("enron" in t.lower() for t in public)
    rows = prep.enron_public(_params().data)
    assert [r["id"] for r in rows] == [f"public-{i:06d}" for i in range(30)]
    assert [r["text"] for r in rows] == [e.text for e in generate_public(30, 1)]
    assert not any("enron" in r["text"].lower() for r in rows)


# ----------------------------------------------------------------------------- leak check
def _leaky(data: prep.PreparedData, split: str, secret_id: str, copies: int) -> prep.PreparedData:
    """``data`` with the private text of ``secret_id`` written into ``copies`` samples of ``split``."""
    text = data.private_texts()[secret_id]
    rows = data.splits[split]
    for row in rows[:copies]:
        row["text"] = f"{row['text']}\n{text}"
    return data


@pytest.mark.parametrize("source", ["synthetic-enron", "synthetic-tofu"])
def test_a_leak_stops_prepare_with_one_line_naming_id_split_and_count_and_writes_nothing(tmp_path, monkeypatch, source):
    params = _params(source=source, n_authors=20, n_train=300, n_public=60)
    data = build(params)
    sid = sorted(data.private_texts())[1]
    secret_text = data.private_texts()[sid]
    _leaky(data, "public", sid, 3)
    _leaky(data, "test", sid, 1)
    import empriv.pipeline.prepare as stage

    monkeypatch.setattr(stage, "build", lambda params, caches=None: data)
    out, metrics = tmp_path / "prepared", tmp_path / "m.json"
    with pytest.raises(LeakError) as err:
        prepare(params, out, metrics)
    message = str(err.value)
    assert "\n" not in message and secret_text not in message
    assert f"{sid} in 3 public samples" in message and f"{sid} in 1 test sample" in message
    assert message.startswith("leak check failed: 2 ")
    assert not out.exists() and not metrics.exists()


def test_leak_errors_reach_the_user_as_one_line_without_a_traceback(tmp_path, monkeypatch, capsys):
    from empriv.stage import run_stage

    params = _params()
    data = _leaky(build(params), "validation", "secret-00", 2)
    import empriv.pipeline.prepare as stage

    monkeypatch.setattr(stage, "build", lambda params, caches=None: data)
    monkeypatch.setattr("empriv.stage.load_params", lambda path: params)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        run_stage(stage.main)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == ("error: leak check failed: 1 secret/split pair found where no secret may occur: "
                       "secret-00 in 2 validation samples")
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize("source", ["synthetic-enron", "synthetic-tofu"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_generated_source_passes_the_leak_check_at_default_sizes(source, seed):
    params = parse_params({"data": {"source": source, "seed": seed, "n_train": 3000 if source == "synthetic-enron" else 3600},
                           "cube": CUBE})
    data = build(params)
    record = check_leaks(data)
    assert record["n_leaks"] == 0 and record["splits"] == {"public": 6000, "validation": 200,
                                                           "test": 300 if source == "synthetic-enron" else 200}
    assert record["n_checked"] == (9 if source == "synthetic-enron" else 180)


def test_synthetic_tofu_public_authors_are_named_apart_from_every_data_author():
    """Before the fix, 13 of the 180 private (training) authors' names also named public authors (seed 0)."""
    from empriv.data.synthetic_tofu import generate_synthetic_tofu
    from empriv.data.tofu import training_text
    from empriv.secrets.leaks import find_leaks

    data = generate_synthetic_tofu(200, 0)
    private = {f"author-{a.index:03d}": a.name for a in data.authors[:180]}
    unfiltered = generate_synthetic_tofu(300, 7, first_index=200)  # the old public draw
    old = find_leaks(private, {"public": [training_text(r.question, r.answer) for r in unfiltered.records]})
    assert len(old) == 13
    fixed = generate_synthetic_tofu(300, 7, first_index=200, exclude_names=[a.name for a in data.authors])
    assert not {a.name for a in fixed.authors} & {a.name for a in data.authors} and len(fixed.authors) == 300
    assert not find_leaks(private, {"public": [training_text(r.question, r.answer) for r in fixed.records]})
    # without exclusions the draw is the old one (the data's own authors are unchanged by the fix)
    assert generate_synthetic_tofu(200, 0, exclude_names=()).authors == data.authors
    with pytest.raises(ValueError, match=r"n_authors must be <= 3479 \(distinct synthetic names, after excluding 1\), got 3480"):
        generate_synthetic_tofu(3480, 0, exclude_names=[data.authors[0].name])


def test_opaque_unit_ids_number_keys_by_first_appearance_and_name_no_one():
    ids = prep.opaque_unit_ids(["b@enron.com", "a@enron.com", "b@enron.com", "c@enron.com"])
    assert ids == ["user0", "user1", "user0", "user2"]
    assert prep.opaque_unit_ids([f"x{i}" for i in range(11)])[10] == "user10"
    assert prep.opaque_unit_ids(["x"] * 3)[0] == "user0"
    with pytest.raises(ValueError, match="2 unit ids for 1 training records"):
        prep.with_units([{"id": "train-0", "text": "t"}], ["u0", "u1"])
