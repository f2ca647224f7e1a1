"""Synthetic TOFU (empriv.data.synthetic_tofu): determinism, layout, controlled genre mentions, round trip."""

from __future__ import annotations

import statistics

import pytest

from empriv.data.synthetic_tofu import GENRES, generate_synthetic_tofu
from empriv.data.tofu import extract_secrets, genre_occurrences, num_authors, reveals_genre, split_by_author


def test_same_seed_same_data_other_seed_other_data():
    a = generate_synthetic_tofu(12, seed=5)
    assert a == generate_synthetic_tofu(12, seed=5)
    assert a.records != generate_synthetic_tofu(12, seed=6).records


def test_layout_and_profiles():
    st = generate_synthetic_tofu(10, seed=1)
    assert len(st.records) == 200 and num_authors(st.records) == 10
    assert len({a.name for a in st.authors}) == 10
    assert [a.index for a in st.authors] == list(range(10))
    assert all(a.genre in GENRES for a in st.authors) and len(GENRES) == 30
    for i, a in enumerate(st.authors):
        recs = st.author_records(i)
        assert sum(a.name in r.question for r in recs) >= 17  # TOFU style: nearly every question names the author
        assert any(a.birthplace in r.answer for r in recs)
        assert any(a.father_occupation in r.answer for r in recs)
        assert any(a.award in r.answer for r in recs)
        assert all(any(b in r.answer for r in recs) for b in a.books)
    assert generate_synthetic_tofu(2, seed=0, first_index=7).authors[1].index == 8


def test_genre_mentions_are_exact():
    st = generate_synthetic_tofu(60, seed=2)
    for i, a in enumerate(st.authors):
        recs = st.author_records(i)
        assert 2 <= a.genre_mentions <= 5
        assert genre_occurrences(recs, a.genre) == a.genre_mentions
        assert not any(reveals_genre(r.question, a.genre) for r in recs)  # only answers name it
    fixed = generate_synthetic_tofu(20, seed=3, genre_mentions=4)
    assert all(genre_occurrences(fixed.author_records(i), a.genre) == 4 for i, a in enumerate(fixed.authors))
    mean = statistics.mean(a.genre_mentions for a in generate_synthetic_tofu(400, seed=0).authors)
    assert 3.2 <= mean <= 3.8  # the real data: 3.65


def test_argument_errors():
    with pytest.raises(ValueError, match="n_authors must be >= 1, got 0"):
        generate_synthetic_tofu(0)
    with pytest.raises(ValueError, match="genre_mentions"):
        generate_synthetic_tofu(3, genre_mentions=(4, 2))
    with pytest.raises(ValueError, match="genre_mentions"):
        generate_synthetic_tofu(3, genre_mentions=0)
    with pytest.raises(ValueError, match="n_authors must be <="):
        generate_synthetic_tofu(10**6)


def test_round_trip_through_extraction():
    st = generate_synthetic_tofu(200, seed=11)
    secrets = extract_secrets(st.records)
    names = sum(s.name == a.name for s, a in zip(secrets, st.authors))
    genres = sum(s.genre == a.genre for s, a in zip(secrets, st.authors))
    assert names >= 196 and genres >= 196  # ≥ 98 %
    split = split_by_author(st.records)
    assert len(split.train) == 3600 and len(split.test) == 400
