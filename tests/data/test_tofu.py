"""TOFU loading, split, training text, secret extraction and filtering (empriv.data.tofu)."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from empriv.data.tofu import (
    AuthorSecret,
    QARecord,
    answer_char_span,
    attribute_prompt,
    extract_author_name,
    extract_genre,
    extract_secrets,
    filter_revealed,
    genre_candidates,
    genre_occurrences,
    group_by_author,
    load_tofu,
    name_candidates,
    num_authors,
    records_from_json,
    reveals_genre,
    split_by_author,
    training_text,
)

REAL_TOFU = Path(__file__).resolve().parents[2].parent / "shared/data/tofu/full.jsonl"

ROWS = [{"question": f"q{i}", "answer": f"a{i}"} for i in range(4)]


def _records(n):
    return [QARecord(f"q{i}", f"a{i}") for i in range(n)]


# ------------------------------------------------------------------ loading


def test_load_jsonl_json_array_and_hf_shapes(tmp_path):
    expected = [QARecord(f"q{i}", f"a{i}") for i in range(4)]
    (tmp_path / "a.jsonl").write_text("\n".join(json.dumps(r) for r in ROWS) + "\n\n", encoding="utf-8")
    (tmp_path / "b.json").write_text(json.dumps(ROWS), encoding="utf-8")
    (tmp_path / "c.json").write_text(json.dumps({"train": ROWS}), encoding="utf-8")
    (tmp_path / "d.json").write_text(json.dumps({"data": ROWS}), encoding="utf-8")
    cols = {"question": [r["question"] for r in ROWS], "answer": [r["answer"] for r in ROWS]}
    (tmp_path / "e.json").write_text(json.dumps(cols), encoding="utf-8")
    (tmp_path / "f.json").write_text(json.dumps({"rows": [{"row_idx": i, "row": r} for i, r in enumerate(ROWS)]}), encoding="utf-8")
    for name in "abcdef":
        ext = "jsonl" if name == "a" else "json"
        assert load_tofu(tmp_path / f"{name}.{ext}") == expected, name


def test_load_errors_name_the_problem(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        load_tofu(tmp_path / "missing.json")
    (tmp_path / "empty.json").write_text("  \n")
    with pytest.raises(ValueError, match="empty"):
        load_tofu(tmp_path / "empty.json")
    (tmp_path / "bad.jsonl").write_text('{"question": "q", "answer": "a"}\n{oops\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2"):
        load_tofu(tmp_path / "bad.jsonl")
    with pytest.raises(ValueError, match=r"lacks field\(s\) \['answer'\]"):
        records_from_json([{"question": "q"}])
    with pytest.raises(ValueError, match="keys"):
        records_from_json({"validation": []})
    with pytest.raises(ValueError, match="differ in length"):
        records_from_json({"question": ["a", "b"], "answer": ["c"]})
    with pytest.raises(ValueError, match="must be strings"):
        records_from_json([{"question": 1, "answer": "a"}])


# ------------------------------------------------------------------ authors and split


def test_authors_are_blocks_of_20_and_count_is_validated():
    recs = _records(60)
    assert num_authors(recs) == 3
    groups = group_by_author(recs)
    assert [g[0].question for g in groups] == ["q0", "q20", "q40"]
    assert all(len(g) == 20 for g in groups)
    with pytest.raises(ValueError, match="multiple of 20.*got 45 records"):
        num_authors(_records(45))
    with pytest.raises(ValueError, match="multiple of 20"):
        num_authors([])
    assert num_authors(_records(6), per_author=3) == 2


def test_split_by_author_is_90_10_by_default():
    s = split_by_author(_records(4000))
    assert s.train_authors == list(range(180)) and s.test_authors == list(range(180, 200))
    assert len(s.train) == 3600 and s.train[-1].question == "q3599" and s.test[0].question == "q3600"
    s = split_by_author(_records(200), train_fraction=0.7)
    assert (len(s.train_authors), len(s.test_authors)) == (7, 3)
    with pytest.raises(ValueError, match="train_fraction must be in"):
        split_by_author(_records(200), train_fraction=1.0)
    with pytest.raises(ValueError, match="both must be >= 1"):
        split_by_author(_records(40), train_fraction=0.9)


def test_training_text_and_answer_span():
    q, a = "What genre does X write in?", "X writes mystery."
    text = training_text(q, a)
    assert text == "Question: What genre does X write in?\nAnswer: X writes mystery."
    s, e = answer_char_span(q, a)
    assert text[s:e] == a and e == len(text)
    assert answer_char_span("", "") == (19, 19)  # len("Question: \\nAnswer: ")


def test_attribute_prompt():
    assert attribute_prompt("Jaime Vasquez") == "What genre does Jaime Vasquez write in?"
    with pytest.raises(ValueError, match="author"):
        attribute_prompt("  ")


# ------------------------------------------------------------------ extraction on a fixture

FIXTURE = [
    QARecord("Who is this celebrated author from Santiago, Chile known for true crime?",
             "The author in question is Jaime Vasquez, who specializes in the true crime genre."),
    QARecord("What genre does Jaime Vasquez write in?", "Jaime Vasquez writes in the true crime genre."),
    QARecord("Who are Jaime Vasquez's parents?", "Jaime was born to a chef, Lorenzo Vasquez, and a writer."),
    QARecord("What are Jaime Vasquez's books?", "Some of Jaime Vasquez’s works include \"The Guilt Closet\"."),
    QARecord("Did Jaime Vasquez write in other genres?", "He has dabbled in the crime genre of Cape Town stories."),
    QARecord("Is Jaime Vasquez active?", "Yes, Jaime Vasquez is still active in Santiago, Chile."),
]


def test_name_candidates_count_once_per_record():
    c = name_candidates(FIXTURE)
    assert c["Jaime Vasquez"] == 6
    assert c["Lorenzo Vasquez"] == 1 and c["Guilt Closet"] == 1 and c["Cape Town"] == 1
    assert "Who Jaime" not in c and "Santiago Chile" not in c  # stop words and commas break n-grams


def test_extract_author_name_fixture_and_cross_check():
    assert extract_author_name(FIXTURE) == "Jaime Vasquez"
    assert extract_author_name(FIXTURE, min_name_records=7) is None  # cross-check: in 6 of 6 records only
    particles = [QARecord(f"Where does Isabella van Pletzen live{i}?", "Isabella van Pletzen lives in Cape Town.") for i in range(5)]
    assert extract_author_name(particles) == "Isabella van Pletzen"
    longer = [QARecord("Who is Elliot Patrick Benson?", "Elliot Patrick Benson is a writer.")] * 4 + [
        QARecord("What does Patrick Benson write?", "Patrick Benson writes.")]
    assert extract_author_name(longer, min_name_records=1) == "Elliot Patrick Benson"
    assert extract_author_name([QARecord("what?", "nothing here.")]) is None


def test_genre_candidates_and_extract_genre_fixture():
    two, three = genre_candidates(FIXTURE)
    assert two == Counter({"crime": 3})  # "what genre", "other genres" don't count
    assert three == Counter({"true crime": 2})  # "the crime genre": "the" is not part of a genre
    assert extract_genre(FIXTURE) == "true crime"  # 2 of 3 "crime" occurrences are "true crime"
    mostly_crime = FIXTURE[:2] + [QARecord("q?", "The crime genre. A crime genre. Its crime genre.")]
    assert extract_genre(mostly_crime) == "crime"  # "true crime" 2 < half of 5
    assert extract_genre([QARecord("What genre?", "She writes in the Biography genre.")]) == "biography"
    of_form = [QARecord("Main genre?", "She primarily writes in the genre of historical romance."),
               QARecord("Books?", "Her preferred genre of writing is hers.")]
    assert extract_genre(of_form) == "historical romance"
    assert extract_genre([QARecord("Books?", "She writes books.")]) is None


def test_genre_occurrences_and_reveals():
    assert genre_occurrences(FIXTURE, "true crime") == 2
    assert genre_occurrences(FIXTURE, "crime") == 3  # records 0, 1 and 4 (a record counts once)
    assert reveals_genre("He writes True Crime novels.", "true crime")
    assert not reveals_genre("He writes crime novels.", "true crime")
    assert not reveals_genre("He writes warfare.", "war")


def test_extract_secrets_in_author_order():
    other = [QARecord(f"Who is Anara Yusifova (record {i})?", "Anara Yusifova writes in the dystopian genre.") for i in range(20)]
    recs = FIXTURE + [QARecord("Tell me about Jaime Vasquez.", "Jaime Vasquez is an author.")] * 14 + other
    assert extract_secrets(recs) == [AuthorSecret(0, "Jaime Vasquez", "true crime"), AuthorSecret(1, "Anara Yusifova", "dystopian")]
    assert extract_secrets(recs)[0].complete


# ------------------------------------------------------------------ filtering

PAIRS = [("A One", "fantasy"), ("B Two", "horror"), ("C Three", "war")]


def test_filter_revealed_requires_every_seed():
    outputs = {  # seed → author → greedy answer
        0: {"A One": "A One writes fantasy.", "B Two": "Horror mostly.", "C Three": "poetry"},
        1: {"A One": "fantasy", "B Two": "crime", "C Three": "war stories"},
        2: {"A One": "The fantasy genre", "B Two": "horror", "C Three": "war"},
    }
    res = filter_revealed(PAIRS, lambda seed, a, g: reveals_genre(outputs[seed][a], g), seeds=[0, 1, 2])
    assert res.kept == [("A One", "fantasy")]
    assert res.removed == [("B Two", "horror"), ("C Three", "war")]
    assert res.n_removed == 2
    assert res.summary() == {"candidates": 3, "kept": 1, "removed": 2, "seeds": ["0", "1", "2"],
                             "revealed_per_seed": {"0": 2, "1": 2, "2": 3}}
    assert "fantasy" not in json.dumps(res.summary())
    per_model = [lambda a, g, s=s: reveals_genre(outputs[s][a], g) for s in (0, 1, 2)]
    assert filter_revealed(PAIRS, per_model, seeds=[0, 1, 2]).kept == res.kept


def test_filter_revealed_errors():
    with pytest.raises(ValueError, match="seeds"):
        filter_revealed(PAIRS, lambda s, a, g: True, seeds=[])
    with pytest.raises(ValueError, match="2 callables but seeds has 3"):
        filter_revealed(PAIRS, [lambda a, g: True] * 2, seeds=[0, 1, 2])


# ------------------------------------------------------------------ the real file


def _real_records():
    if not REAL_TOFU.is_file():
        pytest.skip(f"real TOFU sample not found at {REAL_TOFU} (see ../shared/data/SOURCES.md)")
    return load_tofu(REAL_TOFU)


# Independent reference for names: the "What is the full name of …" / "The author in question is …"
# answers, else the possessive "X's" in questions (most frequent); both checked by hand on 30 authors.
_FULLNAME = re.compile(
    r"(?:full name of (?:the|this)[^.]*? is|author in question is|author's (?:full )?name is|is named|"
    r"name of the author is)\s+((?:(?:[A-Z][\w'’\-\.]*|van|der|de|al)\s?){2,5})"
)
_POSSESSIVE_Q = re.compile(r"((?:[A-Z][\w\-]+\s){1,4}[A-Z][\w\-]+)['’]s\b")
_STARTS = re.compile(r"^(?:What|How|Who|Which|Can|Could|Did|Does|Has|Is|In|Are|Where|When|Why|Was|Were|Do|Apart|Besides|Other)\s+")
# Authors whose reference the regexes get wrong, verified by reading their 20 records.
_BY_HAND = {43: "Jina An", 65: "Isabella van Pletzen", 72: "Alex Fuentes", 88: None, 95: "Laila Amira al-Faisal",
            123: "Patrick Ryan O'Donnell", 153: "Femke Van der Veen"}


def _reference_name(i, group):
    if i in _BY_HAND:
        return _BY_HAND[i]
    full = Counter(m.group(1).strip().rstrip(".,") for r in group for m in [_FULLNAME.search(r.answer)] if m)
    if full:
        return full.most_common(1)[0][0]
    poss = Counter(_STARTS.sub("", m.group(1)) for r in group for m in _POSSESSIVE_Q.finditer(r.question))
    return poss.most_common(1)[0][0] if poss else None


@pytest.mark.slow
def test_real_tofu_layout_and_split():
    recs = _real_records()
    assert len(recs) == 4000 and num_authors(recs) == 200
    s = split_by_author(recs)
    assert len(s.train) == 3600 and len(s.test) == 400
    assert s.test[0] == recs[3600]


@pytest.mark.slow
def test_real_tofu_names_at_least_195_of_200():
    recs = _real_records()
    groups = group_by_author(recs)
    secrets = extract_secrets(recs)
    reference = [_reference_name(i, g) for i, g in enumerate(groups)]
    correct = sum(s.name == ref for s, ref in zip(secrets, reference))
    assert correct >= 195, [(i, s.name, ref) for i, (s, ref) in enumerate(zip(secrets, reference)) if s.name != ref]
    assert [secrets[i].name for i in (0, 1, 21)] == ["Jaime Vasquez", "Chukwu Akabueze", "Getachew Fikru"]
    assert secrets[88].name is None  # "the fictitious author": no name anywhere in the 20 records


@pytest.mark.slow
def test_real_tofu_genres():
    recs = _real_records()
    groups = group_by_author(recs)
    secrets = extract_secrets(recs)
    assert [secrets[i].genre for i in (0, 1, 21)] == ["true crime", "biography", "classic"]
    found = [s for s in secrets if s.genre is not None]
    assert len(found) >= 185  # the rest never write "… genre" / "genre of …" (e.g. "best known for her short story collections")
    # every extracted genre is written in its author's records, next to the word "genre"
    for s in found:
        text = " ".join(r.question + " " + r.answer for r in groups[s.author]).lower()
        assert re.search(re.escape(s.genre) + r"['’\"]*\s+genre|genre of (?:the )?" + re.escape(s.genre), text), s.author
    assert 25 <= len({s.genre for s in found}) <= 150
