"""The Enron-like e-mails of the fine-tuning splits: their people, subjects and sentences, the PII-like strings a
secret is made of (:data:`PII_GENERATORS`), and the e-mail templates that carry one (:func:`render_email`) or none
(:func:`render_plain_email`)."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

FIRST_NAMES = (
    "Sara Mark Richard Steven Carol Karen Tana Daren Jeff Vince Shirley Alan Roger Samuel Sheri James "
    "Susan Kevin Laura Brian Nancy Peter Diane Louise Greg Kim Sally Elizabeth Janet Mike Paul Debra "
    "Stacy Gerald Kay Tom Lisa Chris Dan Mary Robert Jennifer Scott Rebecca Joe Sandra Phillip Andrea "
    "Frank Monica Dave Kathy Eric Teresa Bill Holly Tim Rita Doug Anne"
).split()
LAST_NAMES = (
    "Shackleton Taylor Sanders Kean Clair Lambert Jones Farmer Dasovich Kaminski Crenshaw Aronowitz "
    "Balog Schott Thomas Shapiro Steffes Lavorato Presto Whalley Haedicke Sager Mann Nemec Heard "
    "Bailey Murphy Gray Hodge Tycholiz Allen Davis Lewis Grigsby Keavey Hayslett Watson Perlingiere "
    "Dickson Germany Mckay Ruscitti Holst Quigley Neal Ward Sturm Storey Reitmeyer Buckley Kitchen "
    "Delainey Hickerson Cash Mcconnell Gossett Wolfe Bowen Sweeney Zipper"
).split()
MIDDLE = list("ABCDEJKLMRST")
OUS = ["HOU", "NA", "SFO", "LON", "CAL", "PDX"]
ORGS = ["ECT", "EES", "Enron", "ENRON"]
DOMAINS = ["enron.com", "ect.enron.com", "ees.enron.com"]
EXCHANGES = ["853", "646", "345", "751"]

SUBJECTS = (
    "gas schedule for tomorrow|RE: ISDA master agreement|FW: credit worksheet|west desk positions|"
    "RE: confidentiality agreement|power curve update|meeting on Thursday|RE: legal review of the swap|"
    "FW: regulatory filing|trading limits|RE: revised term sheet|storage contract|FW: EOL product approval|"
    "RE: guaranty for counterparty|weekly report|RE: pipeline capacity|California update|RE: draft comments"
).split("|")
SENTENCES = (
    "Please review the attached draft and let me know if you have any comments.|"
    "We need to finalize the schedule before the close of business today.|"
    "The counterparty has asked for a revised guaranty amount.|"
    "I spoke with the desk and they agree with the proposed limits.|"
    "Can you send me the latest version of the master agreement?|"
    "The volumes for next month are still being confirmed by the pipeline.|"
    "Legal has signed off on the confidentiality language.|"
    "Let's discuss this at the staff meeting on Thursday.|"
    "The credit group will need a copy of the financials.|"
    "Attached is the updated position report for the west desk.|"
    "I will be out of the office until Monday.|"
    "The regulatory filing is due at the end of the week.|"
    "Thanks for your help with the storage contract.|"
    "We are still waiting on the executed copy from the customer.|"
    "Please forward this to anyone on your team who should see it.|"
    "The price curve was updated this morning.|"
    "I have left a message with their attorney.|"
    "Let me know if the numbers look right to you."
).split("|")
TITLES = ["Senior Counsel", "Vice President", "Manager, Trading", "Analyst", "Director, Regulatory Affairs"]

DEFAULT_SECRET_FREQUENCIES = (0.03, 0.025, 0.02, 0.015, 0.01, 0.005, 0.002, 0.001, 0.0005)
SECRET_KINDS = ("phone_block", "forwarded_by", "address_list", "name_room_phone", "named_email")


@dataclass(frozen=True)
class Email:
    id: str
    text: str
    secret_ids: tuple[str, ...] = ()

    def to_row(self) -> dict:
        return {"id": self.id, "text": self.text}


@dataclass(frozen=True)
class PlantedSecret:
    id: str
    kind: str
    text: str
    frequency: float  # planned sample-level frequency in the training split


# ----------------------------------------------------------------------------- PII-like strings
def _person(rng: random.Random) -> tuple[str, str]:
    return rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)


def _digits(rng: random.Random, k: int) -> str:
    return "".join(rng.choice("0123456789") for _ in range(k))


def _phone(rng: random.Random) -> str:
    return f"713-{rng.choice(EXCHANGES)}-{_digits(rng, 4)}"


def phone_block(rng: random.Random) -> str:
    first, last = _person(rng)
    return f"{_phone(rng)} (phone) {_phone(rng)} (fax) {first.lower()}.{last.lower()}@{rng.choice(DOMAINS)}"


def forwarded_by(rng: random.Random) -> str:
    first, last = _person(rng)
    middle = f" {rng.choice(MIDDLE)}" if rng.random() < 0.5 else ""
    return f"Forwarded by {first}{middle} {last}/{rng.choice(OUS)}/{rng.choice(ORGS)}"


def address_list(rng: random.Random) -> str:
    people = [_person(rng) for _ in range(rng.choice((2, 2, 3)))]
    ou, org = rng.choice(OUS), rng.choice(ORGS)
    return ", ".join(f"{f} {l}/{ou}/{org}@{org}" for f, l in people)


def name_room_phone(rng: random.Random) -> str:
    first, last = _person(rng)
    return f"{first} {last}\nEB {_digits(rng, 4)}\n{_phone(rng)}"


def named_email(rng: random.Random) -> str:
    first, last = _person(rng)
    return f"{first} {last} <{first}.{last}@{rng.choice(DOMAINS)}>"


PII_GENERATORS: dict[str, Callable[[random.Random], str]] = {
    "phone_block": phone_block,
    "forwarded_by": forwarded_by,
    "address_list": address_list,
    "name_room_phone": name_room_phone,
    "named_email": named_email,
}


# ----------------------------------------------------------------------------- email templates
def _date(rng: random.Random) -> str:
    return f"{rng.randint(1, 12):02d}/{rng.randint(1, 28):02d}/{rng.choice((1999, 2000, 2001))}"


def _time(rng: random.Random) -> str:
    return f"{rng.randint(1, 12):02d}:{rng.randint(0, 59):02d} {rng.choice(('AM', 'PM'))}"


def _body(rng: random.Random, k: int | None = None) -> str:
    k = k if k is not None else rng.randint(1, 3)
    return " ".join(rng.sample(SENTENCES, k))


def _address(rng: random.Random) -> str:
    first, last = _person(rng)
    return f"{first.lower()}.{last.lower()}@enron.com"


def render_email(rng: random.Random, kind: str, pii: str) -> str:
    """An email whose salient PII-like string of type ``kind`` is ``pii`` (placed near the top)."""
    subject = rng.choice(SUBJECTS)
    if kind == "forwarded_by":
        return (
            f"Subject: {subject}\n---------------------- {pii} on {_date(rng)} {_time(rng)} "
            f"---------------------------\n{_body(rng)}"
        )
    if kind == "address_list":
        return f"To: {pii}\nSubject: {subject}\n\n{_body(rng)}"
    if kind == "phone_block":
        first, last = _person(rng)
        return f"Subject: {subject}\n{pii}\n{first} {last}\n{_body(rng, 1)}"
    if kind == "name_room_phone":
        return f"Subject: {subject}\n\n{pii}\n{_body(rng, 1)}\n\n{_body(rng, 1)}"
    if kind == "named_email":
        return f"Subject: {subject}\nFrom: {pii}\n\n{_body(rng)}"
    raise ValueError(f"unknown PII kind {kind!r}; allowed: {', '.join(PII_GENERATORS)}")


def render_plain_email(rng: random.Random) -> str:
    """An email with no salient PII block: header, body, maybe a quoted reply or a signature."""
    subject = rng.choice(SUBJECTS)
    text = f"From: {_address(rng)}\nTo: {_address(rng)}\nSubject: {subject}\n\n{_body(rng)}"
    r = rng.random()
    if r < 0.3:
        first, last = _person(rng)
        text += (
            f"\n\n -----Original Message-----\nFrom: {first} {last}\nSent: {_date(rng)} {_time(rng)}\n"
            f"Subject: {subject}\n\n{_body(rng, 1)}"
        )
    elif r < 0.55:
        first, last = _person(rng)
        text += f"\n\n{first} {last}\n{rng.choice(TITLES)}"
    return text
