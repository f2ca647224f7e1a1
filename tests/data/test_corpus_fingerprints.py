"""The built-in corpora, byte for byte: sha256 of what the prepare stage's generators return for the default data
settings and for small fixed configurations.

The hashes were computed from the code before issue 27's restructuring (commit ca02fd2) and are meant to stay: a
refactoring of the generators must leave every one of them unchanged. A deliberate change of the corpus updates the
hash here, and says so in its commit (every downstream result changes with it). Changed so far: the synthetic Enron
corpus of the pinned default and the small corpus, when planted address lists were capped at 48 characters (053dab7;
both drew a longer list before; the public split and TOFU are unchanged)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import pytest

from empriv.config import load_params
from empriv.data import prepare as prep
from empriv.data.synthetic import generate_corpus, generate_public
from empriv.data.synthetic_tofu import generate_synthetic_tofu

ROOT = Path(__file__).resolve().parents[2]

# params.yaml's data section at ca02fd2, pinned so that a new default does not read as a code change
DEFAULT_DATA = {"variant": None, "n_authors": 200, "n_train": 3000, "n_validation": 200, "n_test": 300,
                "n_public": 6000, "secret_frequencies": [0.08, 0.07, 0.06, 0.05, 0.04, 0.01, 0.005, 0.002, 0.001],
                "seed": 0}

EXPECTED = {
    "default_synthetic_enron": "c8ddc449502eec88fead37fc14dd5e433ce3cc453e03a5d19b3244e1c914d723",
    "default_enron_public": "5383fc133266f05ed056175d796366548c2c1c894fd35cb54d465bbfd14e5174",
    "default_synthetic_tofu": "52e756992fc94c99295629da953136dcfc76e246ec684da23b6ea10b2dc8b951",
    "small_corpus": "013a380503e9a4a6710b8feea684bded98e41c7d1a12b7aff14d61099f34d0e4",
    "small_public": "073191be7a6129c70294aac6a2bec18f49bae44ba902f7b731c0c8ba400ea367",
    "small_tofu": "becfdcac1ff35db7c74308eb68ee1b87fcd0115774d87285dc9a2b07ec9ecc80",
}


def _sha(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=repr).encode()).hexdigest()


def _prepared(p) -> str:
    return _sha({"splits": p.splits, "planted": p.planted, "counts": p.counts})


@pytest.fixture(scope="module")
def data():
    return load_params(ROOT / "params.yaml").data.model_copy(update={**DEFAULT_DATA, "source": "synthetic-enron"})


def test_the_default_corpora_are_unchanged(data):
    got = {
        "default_synthetic_enron": _prepared(prep.synthetic_enron(data)),
        "default_enron_public": _sha(prep.enron_public(data)),
        "default_synthetic_tofu": _prepared(prep.tofu(data.model_copy(update={"source": "synthetic-tofu"}))),
    }
    assert got == {k: EXPECTED[k] for k in got}


def test_small_corpora_are_unchanged():
    c = generate_corpus(60, 12, 12, 80, 3, (0.1, 0.05, 0.02))
    splits = [[dataclasses.asdict(e) for e in getattr(c, s)] for s in ("train", "validation", "test", "public")]
    tofu = generate_synthetic_tofu(12, 1)
    got = {
        "small_corpus": _sha(splits + [[dataclasses.asdict(s) for s in c.secrets]]),
        "small_public": _sha([dataclasses.asdict(e) for e in generate_public(50, 5, ("x",))]),
        "small_tofu": _sha([[dataclasses.asdict(a) for a in tofu.authors],
                            [dataclasses.asdict(r) for r in tofu.records]]),
    }
    assert got == {k: EXPECTED[k] for k in got}
