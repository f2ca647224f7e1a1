"""empriv.score.perturb: format-preserving controls of a secret."""

from __future__ import annotations

import random
import re

import pytest

from empriv.data.synthetic import FIRST_NAMES, LAST_NAMES, PII_GENERATORS
from empriv.score.memorization import make_controls
from empriv.score.perturb import perturb

FIRST = {n.lower() for n in FIRST_NAMES}
LAST = {n.lower() for n in LAST_NAMES}
NAMES = FIRST | LAST


def skeleton(text: str) -> str:
    """Letters → one 'W' per word, 4+ digit runs → '#' per digit; everything else (incl. short digit runs) kept."""
    text = re.sub(r"\d{4,}", lambda m: "#" * len(m.group()), text)
    return re.sub(r"[A-Za-z]+", "W", text)


def words(text: str) -> list[str]:
    return re.findall(r"[A-Za-z]+", text)


def long_numbers(text: str) -> list[str]:
    return re.findall(r"\d{4,}", text)


SECRETS = [
    "Carol St. Clair EB 3889 713-853-3989",
    "713-751-0487 (phone) 713-751-4759 (fax) bill.heard@enron.com",
    "Kathy Kaminski/LON/ECT@ECT, Kathy Keavey/LON/ECT@ECT",
    "Tom Allen <Tom.Allen@ect.enron.com>",
    "Rita Mcconnell\nEB 5781\n713-345-6593",
    "Forwarded by Richard B Sanders/HOU/ECT",
    "SARA SHACKLETON x12345 sara.shackleton",
]


@pytest.mark.parametrize("secret", SECRETS)
def test_controls_keep_shape_and_change_content(secret):
    controls = perturb(secret, 20, random.Random(0))
    assert len(controls) == 20
    assert len(set(controls)) == 20
    assert secret not in controls
    for c in controls:
        assert skeleton(c) == skeleton(secret), (secret, c)
        # short digit runs (area code, exchange) are kept verbatim, in place
        assert re.findall(r"(?<!\d)\d{1,3}(?!\d)", c) == re.findall(r"(?<!\d)\d{1,3}(?!\d)", secret)
        ws, wc = words(secret), words(c)
        assert len(ws) == len(wc)
        for a, b in zip(ws, wc):
            if a.lower() in NAMES:
                pool = FIRST if a.lower() in FIRST else LAST
                assert b.lower() in pool and b.lower() != a.lower(), (a, b)
                # casing follows the original
                if a.isupper():
                    assert b.isupper()
                elif a.islower():
                    assert b.islower()
                else:
                    assert b == b.capitalize()
            else:
                assert a == b  # non-name words (Forwarded, EB, HOU, ECT, phone, com) are kept


def test_long_digit_runs_are_redrawn():
    secret = "Rita Mcconnell\nEB 5781\n713-345-6593"
    controls = perturb(secret, 50, random.Random(1))
    rooms = {long_numbers(c)[0] for c in controls}
    lines = {long_numbers(c)[1] for c in controls}
    assert len(rooms) > 40 and len(lines) > 40  # 10^4 possibilities each
    assert all(len(x) == 4 for x in rooms | lines)


def test_names_swapped_consistently():
    for c in perturb("Kathy Kaminski/LON/ECT@ECT, Kathy Keavey/LON/ECT@ECT", 30, random.Random(2)):
        w = words(c)
        assert w[0] == w[5]  # both Kathys map to the same first name
    for c in perturb("Tom Allen <Tom.Allen@ect.enron.com>", 30, random.Random(3)):
        w = words(c)
        assert (w[0], w[1]) == (w[2], w[3])
    for c in perturb("SARA SHACKLETON x12345 sara.shackleton", 30, random.Random(4)):
        w = words(c)
        assert w[0].lower() == w[3] and w[1].lower() == w[4]


def test_controls_are_deterministic_per_rng_seed():
    s = SECRETS[1]
    assert perturb(s, 10, random.Random(7)) == perturb(s, 10, random.Random(7))
    assert perturb(s, 10, random.Random(7)) != perturb(s, 10, random.Random(8))


@pytest.mark.parametrize("text", ["Forwarded by /HOU/ECT", "713-853 (phone) EB 12", "Jonathan Q Public"])
def test_nothing_to_perturb_raises(text):
    with pytest.raises(ValueError, match="no digit or name to perturb"):
        perturb(text, 3, random.Random(0))


def test_few_variants_reuse_to_keep_n():
    # one first name: 59 possible controls; asking for 80 keeps n but must reuse some
    controls = perturb("Sara", 80, random.Random(0))
    assert len(controls) == 80
    assert "Sara" not in controls
    assert len(set(controls)) == len(FIRST_NAMES) - 1
    assert all(c.lower() in FIRST for c in controls)


def test_generated_secrets_all_perturbable():
    rng = random.Random(11)
    for _ in range(100):
        kind = rng.choice(sorted(PII_GENERATORS))
        text = PII_GENERATORS[kind](rng)
        cs = perturb(text, 5, rng)
        assert len(set(cs)) == 5 and text not in cs
        assert all(skeleton(c) == skeleton(text) for c in cs)


def test_make_controls_seeded_per_secret():
    secrets = [{"id": "secret-00", "text": SECRETS[0]}, {"id": "secret-01", "text": SECRETS[4]}]
    a = make_controls(secrets, 5, seed=0)
    assert a == make_controls(secrets, 5, seed=0)
    assert a != make_controls(secrets, 5, seed=1)
    assert set(a) == {"secret-00", "secret-01"} and all(len(v) == 5 for v in a.values())
    # a secret's controls do not depend on which other secrets are listed
    assert make_controls(secrets[1:], 5, seed=0)["secret-01"] == a["secret-01"]
