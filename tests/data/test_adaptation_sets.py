"""empriv.data.adaptation_sets: sizes, sources, disjointness (by construction and checked), author-level
OOD split, collision replacement, determinism, one-line errors."""

from __future__ import annotations

import pytest

from empriv.data.adaptation_sets import (
    DATASETS,
    ROLES,
    build_adaptation_sets,
    check_disjoint,
    derived_seed,
    fresh_public_texts,
)
from empriv.data.synthetic import generate_public
from empriv.data.synthetic_tofu import generate_synthetic_tofu
from empriv.data.tofu import training_text

SIZES = dict(n_members=40, n_nonmembers=30, n_shadow=20, n_population=25, n_probe_members=15, n_probe_nonmembers=12)


@pytest.fixture(scope="module")
def public():
    return [e.text for e in generate_public(200, 0)]


@pytest.fixture(scope="module")
def sets(public):
    return build_adaptation_sets(public, **SIZES, seed=3)


def test_sizes_sources_and_counts(sets):
    expected = {"members": 40, "nonmembers": 30, "shadow": 20, "population": 25}
    for d in DATASETS:
        assert sets.split(d).counts() == expected
    assert sets.iid.source == "synthetic-public" and sets.ood.source == "synthetic-tofu"
    assert sets.pretraining.counts() == {"members": 15, "nonmembers": 12}
    counts = sets.counts()
    assert counts["ood"]["records_per_author"] == 1 and counts["seed"] == 3
    assert counts["iid"]["members"] == 40 and counts["pretraining"]["nonmembers"] == 12


def test_every_text_in_exactly_one_set_and_only_probe_members_in_public(sets, public):
    named = sets.named_sets()
    assert len(named) == 2 * len(ROLES) + 2
    everything = [t for texts in named.values() for t in texts]
    assert len(everything) == len(set(everything)) == 2 * (40 + 30 + 20 + 25) + 15 + 12
    pub = set(public)
    assert all(t in pub for t in sets.pretraining.members)
    outside = [t for name, texts in named.items() if name != "pretraining/members" for t in texts]
    assert not any(t in pub for t in outside)


def test_iid_and_probe_nonmembers_come_from_the_public_generator_with_a_fresh_seed(sets):
    stream = [e.text for e in generate_public(200, derived_seed(3, "public-like"))]
    iid = [*sets.iid.members, *sets.iid.nonmembers, *sets.iid.shadow, *sets.iid.population]
    assert iid + list(sets.pretraining.nonmembers) == stream[: 115 + 12]  # one stream, sliced in order
    assert derived_seed(3, "public-like") > 2**40  # far from any small data seed


def test_ood_records_are_tofu_text_one_author_each_by_default(sets):
    tofu = generate_synthetic_tofu(115, derived_seed(3, "tofu"))
    ood = [*sets.ood.members, *sets.ood.nonmembers, *sets.ood.shadow, *sets.ood.population]
    assert ood == [training_text(tofu.author_records(i)[0].question, tofu.author_records(i)[0].answer)
                   for i in range(115)]
    assert all(t.startswith("Question: ") and "\nAnswer: " in t for t in ood)


def test_ood_split_by_author_with_several_records_per_author(public):
    s = build_adaptation_sets(public, n_members=30, n_nonmembers=25, n_shadow=10, n_population=5, n_probe_members=2,
                              n_probe_nonmembers=2, seed=4, ood_records_per_author=20)
    # ceil(30/20) + ceil(25/20) + 1 + 1 = 6 authors; the cut authors' other records go nowhere
    tofu = generate_synthetic_tofu(6, derived_seed(4, "tofu"))
    owner = {}
    for i in range(6):
        for r in tofu.author_records(i):
            owner[training_text(r.question, r.answer)] = tofu.authors[i].name
    authors = {role: {owner[t] for t in getattr(s.ood, role)} for role in ROLES}
    assert [len(authors[r]) for r in ROLES] == [2, 2, 1, 1]
    for a in ROLES:
        for b in ROLES:
            if a != b:
                assert not authors[a] & authors[b], (a, b)
    assert s.ood.counts() == {"members": 30, "nonmembers": 25, "shadow": 10, "population": 5}


def test_a_public_text_equal_to_a_generated_one_is_replaced():
    first = fresh_public_texts(6, 9)
    public = first[:4] + [e.text for e in generate_public(20, 0)]  # the stream's first four are "pre-training" texts
    s = build_adaptation_sets(public, n_members=5, n_nonmembers=5, n_shadow=5, n_population=5, n_probe_members=3,
                              n_probe_nonmembers=3, seed=9)
    iid = [*s.iid.members, *s.iid.nonmembers, *s.iid.shadow, *s.iid.population, *s.pretraining.nonmembers]
    assert len(iid) == 23 and not set(first[:4]) & set(iid)
    assert iid[:2] == first[4:6]  # the stream continues after the dropped texts


def test_forbidden_strings_never_appear(public):
    s = build_adaptation_sets(public, **SIZES, seed=5, forbidden=("Dear", "Posted"))
    texts = [*s.iid.members, *s.iid.nonmembers, *s.iid.shadow, *s.iid.population, *s.pretraining.nonmembers]
    assert not any("Dear" in t or "Posted" in t for t in texts)
    unfiltered = [e.text for e in generate_public(127, derived_seed(5, "public-like"))]
    assert sum("Dear" in t or "Posted" in t for t in unfiltered) > 5  # the filter had something to remove


def test_deterministic_and_seed_dependent(public, sets):
    again = build_adaptation_sets(public, **SIZES, seed=3)
    assert again == sets
    other = build_adaptation_sets(public, **SIZES, seed=4)
    assert not set(other.iid.members) & set(sets.iid.members)
    assert not set(other.ood.members) & set(sets.ood.members)
    assert set(other.pretraining.members) != set(sets.pretraining.members)


def test_check_disjoint_names_sets_never_texts():
    secret = "a text that must not be printed"
    with pytest.raises(ValueError, match=r"in both iid/members and ood/shadow$") as err:
        check_disjoint({"iid/members": ["x", secret], "ood/shadow": [secret]})
    assert secret not in str(err.value)
    with pytest.raises(ValueError, match="twice in iid/members"):
        check_disjoint({"iid/members": ["x", "x"]})
    with pytest.raises(ValueError, match=r"public \(pre-training\) split: 1 text\(s\) of iid/shadow"):
        check_disjoint({"iid/shadow": ["p", "q"], "pretraining/members": ["p2"]}, ["p", "p2"],
                       allowed_public=("pretraining/members",))
    check_disjoint({"a": ["x"], "b": ["y"]}, ["z"])  # disjoint: no error


@pytest.mark.parametrize("change, message", [
    ({"n_members": 0}, r"n_members: out of range \(got 0; allowed: an integer >= 1\)"),
    ({"n_population": 2.5}, r"n_population: not an integer \(got 2.5; allowed: an integer >= 1\)"),
    ({"n_shadow": True}, r"n_shadow: not an integer \(got True; allowed: an integer >= 1\)"),
    ({"n_probe_members": 500},
     r"n_probe_members: more than the distinct public texts \(got 500; allowed: an integer in \[1, 200\]\)"),
    ({"ood_records_per_author": 21}, r"ood_records_per_author \(a synthetic-tofu author has 20 records\): "
                                     r"out of range \(got 21; allowed: an integer in \[1, 20\]\)"),
    ({"seed": "1"}, r"seed: not an integer \(got '1'; allowed: an integer\)"),
    ({"n_members": 4000}, "the ood sets need 4075 synthetic-tofu authors but the generator has 3480"),
])
def test_bad_input_is_a_one_line_error(public, change, message):
    with pytest.raises(ValueError, match=message) as err:
        build_adaptation_sets(public, **{**SIZES, "seed": 0, **change})
    assert "\n" not in str(err.value)


def test_unknown_dataset(sets):
    with pytest.raises(ValueError, match="dataset must be one of iid, ood, got 'test'"):
        sets.split("test")
