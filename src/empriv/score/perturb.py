"""Format-preserving perturbed controls of a secret, for the exposure-style gap.

A control keeps the secret's shape — punctuation, spacing, casing, word and digit counts — and
changes its content: every digit of a run of 4 or more digits is redrawn (line numbers, rooms,
extensions; short runs such as the area code and exchange in ``713-853-5620`` are shared by many
people and kept), and every word that is a person's name (first or
last name, in any case, e.g. ``Sara``, ``SHACKLETON``, ``sara.shackleton``) is swapped for another
name of the same kind. Other words (``Forwarded by``, ``HOU``, ``ECT``, ``phone``) are kept, so the
base model finds a control as likely as the secret: the gap measures what fine-tuning added.
"""

from __future__ import annotations

import random
import re

from empriv.data.synthetic import FIRST_NAMES, LAST_NAMES

_FIRST = {n.lower() for n in FIRST_NAMES}
_LAST = {n.lower() for n in LAST_NAMES}
_WORD = re.compile(r"[A-Za-z]+|\d{4,}")


def _recase(new: str, like: str) -> str:
    if like.isupper() and len(like) > 1:
        return new.upper()
    if like.islower():
        return new.lower()
    return new.capitalize()


def _perturb_once(text: str, rng: random.Random) -> str:
    mapping: dict[str, str] = {}  # the same name maps to the same replacement within one control

    def repl(m: re.Match) -> str:
        tok = m.group(0)
        if tok.isdigit():
            return "".join(rng.choice("0123456789") for _ in tok)
        low = tok.lower()
        pool = FIRST_NAMES if low in _FIRST else LAST_NAMES if low in _LAST else None
        if pool is None:
            return tok
        if low not in mapping:
            mapping[low] = rng.choice([p for p in pool if p.lower() != low])
        return _recase(mapping[low], tok)

    return _WORD.sub(repl, text)


def perturb(text: str, n: int, rng: random.Random, max_tries: int = 50) -> list[str]:
    """``n`` distinct controls of ``text``, none equal to it. Raises if the text has nothing to perturb."""
    out: list[str] = []
    seen = {text}
    tries = 0
    while len(out) < n:
        c = _perturb_once(text, rng)
        tries += 1
        if c not in seen:
            seen.add(c)
            out.append(c)
            tries = 0
        elif tries > max_tries:
            if not out:
                raise ValueError("secret has no digit or name to perturb, so no control can be made")
            out.append(rng.choice(out))  # few distinct variants exist: reuse one (keeps n fixed)
    return out
