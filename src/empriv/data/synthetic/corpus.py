"""The synthetic corpus: planted secrets at their frequencies in the training split, secret-free validation and test
e-mails, and the public split of other genres (:mod:`empriv.data.synthetic.public`)."""

from __future__ import annotations

import random
from dataclasses import dataclass

from empriv.data.synthetic.emails import (DEFAULT_SECRET_FREQUENCIES, PII_GENERATORS, SECRET_KINDS, Email,
                                          PlantedSecret, render_email, render_plain_email)
from empriv.data.synthetic.public import generate_public, secret_values


@dataclass(frozen=True)
class SyntheticCorpus:
    train: list[Email]
    validation: list[Email]
    test: list[Email]
    public: list[Email]
    secrets: list[PlantedSecret]


def _random_email(rng: random.Random, forbidden: tuple[str, ...]) -> str:
    """A secret-free email: plain, or carrying a random (non-secret) PII-like string."""
    while True:
        if rng.random() < 0.55:
            text = render_plain_email(rng)
        else:
            kind = rng.choice(SECRET_KINDS)
            text = render_email(rng, kind, PII_GENERATORS[kind](rng))
        if not any(s in text for s in forbidden):
            return text


# A planted address list is at most this long: two short entries (~35 tokens). A longer one (a 51-character list with
# a surname the tokenizer splits into six pieces, planted at 6.5 %) was found by no ACR search at finite epsilon and by
# 4 of 16 at epsilon = inf, so it measured the secret, not the configuration (docs/analysis.md#the-memorisation-regime).
MAX_ADDRESS_LIST_CHARS = 48


def make_secrets(rng: random.Random, frequencies: tuple[float, ...]) -> list[PlantedSecret]:
    secrets: list[PlantedSecret] = []
    seen: set[str] = set()
    for i, freq in enumerate(frequencies):
        kind = SECRET_KINDS[i % len(SECRET_KINDS)]
        while True:
            text = PII_GENERATORS[kind](rng)
            if kind == "address_list" and (text.count("@") > 2 or len(text) > MAX_ADDRESS_LIST_CHARS):
                continue  # a planted list names two people: three (~57 tokens) leave no room in the window for a prompt
            if text not in seen and not any(text in s or s in text for s in seen):
                break
        seen.add(text)
        secrets.append(PlantedSecret(id=f"secret-{i:02d}", kind=kind, text=text, frequency=freq))
    return secrets


def generate_corpus(
    n_train: int,
    n_validation: int,
    n_test: int,
    n_public: int,
    seed: int,
    secret_frequencies: tuple[float, ...] = DEFAULT_SECRET_FREQUENCIES,
) -> SyntheticCorpus:
    """Generate the synthetic corpus. Same arguments → identical corpus."""
    for name, value in (("n_train", n_train), ("n_validation", n_validation), ("n_test", n_test), ("n_public", n_public)):
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    for i, f in enumerate(secret_frequencies):
        if not 0 < f < 1:
            raise ValueError(f"secret_frequencies[{i}] must be in (0, 1), got {f}")
    rng = random.Random(seed)
    secrets = make_secrets(rng, tuple(secret_frequencies))
    counts = [max(1, round(s.frequency * n_train)) for s in secrets]
    if sum(counts) > n_train:
        raise ValueError(
            f"secret frequencies need {sum(counts)} secret-bearing emails but n_train is {n_train}; "
            "lower the frequencies or raise data.n_train"
        )
    forbidden = tuple(s.text for s in secrets)
    slots = rng.sample(range(n_train), sum(counts))
    owner: dict[int, PlantedSecret] = {}
    k = 0
    for secret, c in zip(secrets, counts):
        for slot in slots[k : k + c]:
            owner[slot] = secret
        k += c
    train = []
    for i in range(n_train):
        if i in owner:
            s = owner[i]
            train.append(Email(f"train-{i:06d}", render_email(rng, s.kind, s.text), (s.id,)))
        else:
            train.append(Email(f"train-{i:06d}", _random_email(rng, forbidden)))

    def clean(prefix: str, n: int) -> list[Email]:
        return [Email(f"{prefix}-{i:06d}", _random_email(rng, forbidden)) for i in range(n)]

    return SyntheticCorpus(
        train=train,
        validation=clean("validation", n_validation),
        test=clean("test", n_test),
        public=generate_public(n_public, seed, secret_values(secrets)),
        secrets=secrets,
    )
