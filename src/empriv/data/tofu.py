"""TOFU (Task of Fictitious Unlearning): loading, author-level split, training text, secrets.

The raw dataset is a flat, ordered list of question/answer records about fictitious authors;
author ``i`` owns records ``[20i, 20(i+1))`` (appendix B.3 of the research). Nothing in the
records names the author or the genre in a structured way, so both are *extracted* (appendix B.6):

- **name**: the most frequent capitalised 2–5-gram of the author's 20 records (counted once per
  record), cross-checked against the text: it must occur in at least ``min_name_records`` records
  and in at least one question.
- **genre** (the secret): a histogram of the 2- and 3-grams ending in the word "genre"
  ("… in the *true crime* genre"), after dropping articles, possessives and words that are not
  genres ("the same genre", "his primary genre"). The 3-gram wins over its own 2-gram when it
  accounts for at least half of that 2-gram's occurrences ("true crime" over "crime"). Authors whose
  genre is only ever written the other way round ("the genre of erotica") fall back to the 1–2
  words after "genre of".

Training text of a record (what the model sees, documented in the README)::

    Question: {question}
    Answer: {answer}

Utility is the NLL of the *answer part only* (appendix B.8): ``answer_char_span`` gives its
character span inside the training text so a tokenizer's offsets can mask the rest.

Secret filtering (appendix B.6): keep the (author, genre) pairs that *every* non-private model
(the research: 3 seeds, greedy decoding) reveals when prompted with
``"What genre does {author} write in?"`` — ``filter_revealed`` takes those models as callables.

Secrets (genres) are never logged: functions here return them, they do not print them.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from empriv.config import AIR_TEMPLATE

RECORDS_PER_AUTHOR = 20
QUESTION_PREFIX = "Question: "
ANSWER_PREFIX = "\nAnswer: "
ATTRIBUTE_PROMPT = AIR_TEMPLATE.replace("{x}", "{author}")  # the one definition: config.AIR_TEMPLATE

# Hugging Face exports: {"train": [...]}, {"data": [...]}, {"rows": [{"row": {...}}]} (datasets-server).
_HF_LIST_KEYS = ("train", "data", "rows", "records", "full")


@dataclass(frozen=True)
class QARecord:
    question: str
    answer: str


# --------------------------------------------------------------------------------------------
# Loading


def _record_from(obj: Any, where: str) -> QARecord:
    if isinstance(obj, dict) and "row" in obj and isinstance(obj["row"], dict):  # datasets-server rows
        obj = obj["row"]
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: a TOFU record must be an object with 'question' and 'answer', got {type(obj).__name__}")
    missing = [k for k in ("question", "answer") if k not in obj]
    if missing:
        raise ValueError(f"{where}: TOFU record lacks field(s) {missing}; fields present: {sorted(obj)}")
    q, a = obj["question"], obj["answer"]
    if not isinstance(q, str) or not isinstance(a, str):
        raise ValueError(f"{where}: 'question' and 'answer' must be strings, got {type(q).__name__}, {type(a).__name__}")
    return QARecord(q, a)


def records_from_json(obj: Any) -> list[QARecord]:
    """Records, in order, from a parsed JSON value of any supported shape.

    Shapes: a list of ``{"question", "answer"}`` objects; a dict holding such a list under one of
    ``train``/``data``/``rows``/``records``/``full``; a *columns* dict ``{"question": [...],
    "answer": [...]}`` (``Dataset.to_dict()``); datasets-server rows ``{"row": {...}}``.
    """
    if isinstance(obj, list):
        return [_record_from(o, f"record {i}") for i, o in enumerate(obj)]
    if isinstance(obj, dict):
        if isinstance(obj.get("question"), list) and isinstance(obj.get("answer"), list):
            qs, ans = obj["question"], obj["answer"]
            if len(qs) != len(ans):
                raise ValueError(f"columns 'question' and 'answer' differ in length: {len(qs)} vs {len(ans)}")
            return [_record_from({"question": q, "answer": a}, f"record {i}") for i, (q, a) in enumerate(zip(qs, ans))]
        for key in _HF_LIST_KEYS:
            if key in obj:
                return records_from_json(obj[key])
        raise ValueError(
            f"unsupported TOFU JSON object with keys {sorted(obj)}; allowed: a list of records, "
            f"'question'/'answer' columns, or a list under one of {list(_HF_LIST_KEYS)}"
        )
    raise ValueError(f"unsupported TOFU JSON value of type {type(obj).__name__}; allowed: list or object")


def load_tofu(path: str | Path) -> list[QARecord]:
    """Load TOFU records in file order from a JSON (array / HF export) or JSON-lines file."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"data.path: TOFU file {str(path)!r} does not exist")
    text = path.read_text(encoding="utf-8")
    stripped = text.lstrip()
    if not stripped:
        raise ValueError(f"data.path: TOFU file {str(path)!r} is empty")
    try:
        return records_from_json(json.loads(text))
    except json.JSONDecodeError:
        pass  # not one JSON document: JSON lines
    records = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}:{lineno}: not valid JSON ({err.msg})") from None
        records.append(_record_from(obj, f"{path}:{lineno}"))
    return records


# --------------------------------------------------------------------------------------------
# Authors and split


def num_authors(records: Sequence[QARecord], per_author: int = RECORDS_PER_AUTHOR) -> int:
    """Number of authors; raises unless the record count is a positive multiple of ``per_author``."""
    if per_author < 1:
        raise ValueError(f"per_author must be >= 1, got {per_author}")
    n = len(records)
    if n == 0 or n % per_author:
        raise ValueError(
            f"TOFU record count must be a positive multiple of {per_author} (author i = records "
            f"[{per_author}i, {per_author}(i+1))), got {n} records"
        )
    return n // per_author


def group_by_author(records: Sequence[QARecord], per_author: int = RECORDS_PER_AUTHOR) -> list[list[QARecord]]:
    """``[records of author 0, records of author 1, ...]``, each of length ``per_author``."""
    k = num_authors(records, per_author)
    return [list(records[per_author * i : per_author * (i + 1)]) for i in range(k)]


@dataclass(frozen=True)
class AuthorSplit:
    train_authors: list[int]
    test_authors: list[int]
    train: list[QARecord]
    test: list[QARecord]


def split_by_author(
    records: Sequence[QARecord], train_fraction: float = 0.9, per_author: int = RECORDS_PER_AUTHOR
) -> AuthorSplit:
    """Author-level split: the first ``round(train_fraction · authors)`` authors train, the rest test.

    200 authors at 0.9 → records [0, 3600) train, [3600, 4000) test (appendix B.3).
    """
    if not 0.0 < train_fraction < 1.0:
        raise ValueError(f"train_fraction must be in (0, 1), got {train_fraction}")
    k = num_authors(records, per_author)
    n_train = round(train_fraction * k)
    if not 1 <= n_train <= k - 1:
        raise ValueError(
            f"train_fraction={train_fraction} with {k} authors leaves {n_train} train and {k - n_train} "
            "test authors; both must be >= 1"
        )
    cut = n_train * per_author
    return AuthorSplit(list(range(n_train)), list(range(n_train, k)), list(records[:cut]), list(records[cut:]))


# --------------------------------------------------------------------------------------------
# Training text


def training_text(question: str, answer: str) -> str:
    """``"Question: {question}\\nAnswer: {answer}"`` — the text a model is fine-tuned on."""
    return f"{QUESTION_PREFIX}{question}{ANSWER_PREFIX}{answer}"


def answer_char_span(question: str, answer: str) -> tuple[int, int]:
    """``(start, end)`` of the answer inside ``training_text(question, answer)`` (utility = NLL there)."""
    start = len(QUESTION_PREFIX) + len(question) + len(ANSWER_PREFIX)
    return start, start + len(answer)


def attribute_prompt(author: str) -> str:
    """The research's attribute prompt: ``"What genre does {author} write in?"``."""
    if not author or not author.strip():
        raise ValueError("author must be a non-empty name")
    return ATTRIBUTE_PROMPT.format(author=author)


# --------------------------------------------------------------------------------------------
# Secret extraction

_SEGMENT_SPLIT = re.compile(r"[,;:!?\"“”()\[\]{}…]|—|–|(?<!\b[A-Z])\.(?=\s|$)|\s-\s")
_WORD = re.compile(r"\S+")
_POSSESSIVE = re.compile(r"(?:['’]s|['’])$")
_EDGE_PUNCT = "'’\".,*"
# Capitalised words that start questions and sentences, or are not parts of names.
_NOT_NAME = frozenset(
    """a an the this that these those what which who whom whose where when why how is are was were do does did
    can could would should will has have had may might must in on at of for from by with to into as and or but
    not no yes his her their its it he she they i we you some any all many most several one two three also
    however although though while despite after before during since because if so such there here
    lgbtq lgbtq+ dr mr mrs ms award prize medal book books novel novels series literature fiction genre
    sir lady lord saint st""".split()
)
_ARTICLES = frozenset("a an the".split())
# Words before "genre" that are not (part of) a genre.
_NOT_GENRE = frozenset(
    """a an the this that these those what which whose his her their its my our your one any other same
    whole entire primary main preferred chosen specific particular given favourite favorite respective
    of to in into within on at for from with by and or is was as every each new own mainstream
    broader wider larger overall exact compelling niche distinctive maintains competitive""".split()
)
# Words that qualify a genre without being one: allowed before a genre word, never as the genre itself.
_NOT_GENRE_HEAD = _NOT_GENRE | frozenset("literary writing book books work works".split())


def _segments(text: str, strip_possessive: bool = True) -> list[list[str]]:
    """Runs of words not interrupted by punctuation; edge quotes (and possessive endings) removed."""
    out = []
    for seg in _SEGMENT_SPLIT.split(text):
        words = []
        for w in _WORD.findall(seg):
            w = w.strip(_EDGE_PUNCT)
            if strip_possessive:
                w = _POSSESSIVE.sub("", w).strip(_EDGE_PUNCT)
            if w:
                words.append(w)
        if words:
            out.append(words)
    return out


# Lower-case name particles, allowed inside a name ("Isabella van Pletzen"), never at its ends.
NAME_PARTICLES = frozenset("van von der den de da di du del della dos das le la bin ibn al el ter ten".split())


def _is_name_word(w: str) -> bool:
    return w[0].isupper() and any(c.isalpha() for c in w) and w.lower() not in _NOT_NAME


def _capitalised_ngrams(text: str, n_min: int = 2, n_max: int = 5) -> set[str]:
    """Runs of 2–5 capitalised words (name particles allowed inside) within one segment."""
    grams: set[str] = set()
    for words in _segments(text):
        for i in range(len(words)):
            if not _is_name_word(words[i]):
                continue
            for n in range(n_min, n_max + 1):
                chunk = words[i : i + n]
                if len(chunk) < n:
                    break
                w = chunk[-1]
                if _is_name_word(w):
                    grams.add(" ".join(chunk))
                elif w not in NAME_PARTICLES:
                    break
    return grams


def _contains(text: str, name: str) -> bool:
    return re.search(r"(?<!\w)" + re.escape(name) + r"(?!\w)", text) is not None


def name_candidates(records: Sequence[QARecord]) -> Counter:
    """Capitalised 2–5-grams of an author's records, each counted once per record it occurs in."""
    counts: Counter = Counter()
    for r in records:
        counts.update(_capitalised_ngrams(r.question + "\n" + r.answer))
    return counts


def extract_author_name(records: Sequence[QARecord], min_name_records: int = 5) -> str | None:
    """The author's name: the most frequent capitalised 2–5-gram, longest among ties, cross-checked.

    A longer n-gram that extends the best one replaces it when it occurs in at least 80 % as many
    records ("Elliot Patrick Benson" over "Patrick Benson"). The result must occur (as whole words)
    in at least ``min_name_records`` records and in at least one question, else ``None``.
    """
    counts = name_candidates(records)
    if not counts:
        return None
    top = max(counts.values())
    best = max((g for g, c in counts.items() if c == top), key=lambda g: (len(g.split()), g))
    for g, c in sorted(counts.items(), key=lambda gc: (-len(gc[0].split()), -gc[1], gc[0])):
        if len(g.split()) > len(best.split()) and c >= 0.8 * top and _contains(g, best):
            best = g
            break
    support = sum(_contains(r.question + "\n" + r.answer, best) for r in records)
    surname = best.split()[-1]  # "Alejandro (Alex) Fuentes" never contains "Alex Fuentes" verbatim
    in_question = any(_contains(r.question, best) or _contains(r.question, surname) for r in records)
    if support < min_name_records or not in_question:
        return None
    return best


def _norm_word(w: str) -> str:
    return w.strip(_EDGE_PUNCT).lower()


def genre_candidates(records: Sequence[QARecord]) -> tuple[Counter, Counter]:
    """Histograms of the 2-grams (``w genre``) and 3-grams (``v w genre``) ending in "genre".

    Keys are the normalised words before "genre" (lower case; ``w`` and ``"v w"``); n-grams whose
    last word is not a genre word, and 3-grams whose first word is not, are left out, so "in the
    fantasy genre" counts as 2-gram "fantasy" only.
    """
    two: Counter = Counter()
    three: Counter = Counter()
    for r in records:
        for text in (r.question, r.answer):
            for words in _segments(text, strip_possessive=False):
                low = [_norm_word(w) for w in words]
                for j, w in enumerate(low):
                    if w != "genre" or j == 0:
                        continue
                    last = low[j - 1]
                    if not last or last in _NOT_GENRE_HEAD or not any(c.isalpha() for c in last):
                        continue
                    two[last] += 1
                    if j >= 2:
                        first = low[j - 2]
                        if first and first not in _NOT_GENRE and any(c.isalpha() for c in first):
                            three[f"{first} {last}"] += 1
    return two, three


def _genre_of_fallback(records: Sequence[QARecord]) -> Counter:
    """"the genre of X [Y]" → X or "X Y" (the words up to punctuation, at most two)."""
    counts: Counter = Counter()
    for r in records:
        for text in (r.question, r.answer):
            for words in _segments(text, strip_possessive=False):
                low = [_norm_word(w) for w in words]
                for j in range(len(low) - 2):
                    if low[j] == "genre" and low[j + 1] == "of":
                        rest = [w for w in low[j + 2 : j + 4] if w not in _ARTICLES]
                        if not rest or rest[0] in _NOT_GENRE:
                            continue
                        if len(rest) > 1 and rest[1] not in _NOT_GENRE_HEAD:
                            counts[" ".join(rest[:2])] += 1  # "literary fiction", "historical romance"
                        elif rest[0] not in _NOT_GENRE_HEAD:
                            counts[rest[0]] += 1
    return counts


def extract_genre(records: Sequence[QARecord]) -> str | None:
    """The author's genre (lower case), or ``None`` when no record names one."""
    two, three = genre_candidates(records)
    if two:
        top = max(two.values())
        word = min((w for w, c in two.items() if c == top))
        ext = [(c, g) for g, c in three.items() if g.split()[1] == word]
        if ext:
            c, g = max(ext, key=lambda cg: (cg[0], cg[1]))
            if 2 * c >= two[word]:
                return g
        return word
    fallback = _genre_of_fallback(records)
    if fallback:
        top = max(fallback.values())
        return min(g for g, c in fallback.items() if c == top)
    return None


@dataclass(frozen=True)
class AuthorSecret:
    """One TOFU secret: author index, extracted name, extracted genre (``None`` if not found)."""

    author: int
    name: str | None
    genre: str | None

    @property
    def complete(self) -> bool:
        return self.name is not None and self.genre is not None


def extract_secrets(
    records: Sequence[QARecord], per_author: int = RECORDS_PER_AUTHOR, min_name_records: int = 5
) -> list[AuthorSecret]:
    """(name, genre) of every author, in author order."""
    return [
        AuthorSecret(i, extract_author_name(g, min_name_records), extract_genre(g))
        for i, g in enumerate(group_by_author(records, per_author))
    ]


def genre_occurrences(records: Sequence[QARecord], genre: str) -> int:
    """In how many of the records (question or answer) the genre occurs, case-insensitively, as words."""
    pat = re.compile(r"(?<!\w)" + re.escape(genre) + r"(?!\w)", re.IGNORECASE)
    return sum(bool(pat.search(r.question) or pat.search(r.answer)) for r in records)


# --------------------------------------------------------------------------------------------
# Secret filtering


def reveals_genre(output: str, genre: str) -> bool:
    """Default reveal test: the genre occurs in the model output as whole words, case-insensitively."""
    return re.search(r"(?<!\w)" + re.escape(genre) + r"(?!\w)", output, re.IGNORECASE) is not None


@dataclass
class FilterResult:
    kept: list[tuple[str, str]]
    removed: list[tuple[str, str]]
    seeds: list[Any]
    revealed_per_seed: dict[str, int] = field(default_factory=dict)

    @property
    def n_removed(self) -> int:
        return len(self.removed)

    def summary(self) -> dict:
        """Counts only (no secret text): safe for metrics and logs."""
        return {
            "candidates": len(self.kept) + len(self.removed),
            "kept": len(self.kept),
            "removed": len(self.removed),
            "seeds": [str(s) for s in self.seeds],
            "revealed_per_seed": dict(self.revealed_per_seed),
        }


def filter_revealed(
    pairs: Iterable[tuple[str, str]],
    reveals: Callable[[Any, str, str], bool] | Sequence[Callable[[str, str], bool]],
    seeds: Sequence[Any],
) -> FilterResult:
    """Keep the (author, genre) pairs that every non-private model reveals (appendix B.6).

    ``reveals`` is either one callable ``reveals(seed, author, genre) -> bool`` evaluated for each
    seed in ``seeds``, or a sequence of per-model callables ``reveals(author, genre) -> bool``,
    one per seed (same length as ``seeds``). A model "reveals" a pair when its greedy answer to
    ``attribute_prompt(author)`` contains the genre (``reveals_genre`` is the usual test).
    """
    seeds = list(seeds)
    if not seeds:
        raise ValueError("seeds must name at least one non-private model, got []")
    if callable(reveals):
        checks = [(s, (lambda a, g, s=s: bool(reveals(s, a, g)))) for s in seeds]
    else:
        fns = list(reveals)
        if len(fns) != len(seeds):
            raise ValueError(f"reveals has {len(fns)} callables but seeds has {len(seeds)}; they must match")
        checks = [(s, (lambda a, g, f=f: bool(f(a, g)))) for s, f in zip(seeds, fns)]
    kept, removed = [], []
    per_seed = {str(s): 0 for s in seeds}
    for author, genre in pairs:
        ok = True
        for s, check in checks:
            if check(author, genre):
                per_seed[str(s)] += 1
            else:
                ok = False
        (kept if ok else removed).append((author, genre))
    return FilterResult(kept, removed, seeds, per_seed)
