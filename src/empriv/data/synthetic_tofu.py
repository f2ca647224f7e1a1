"""Built-in TOFU-like dataset: fictitious author profiles, no download, fully determined by (size, seed).

Each author has a name, a birthplace and birth date, parents' occupations, three books, an award
and exactly one genre from ``GENRES`` (30, as many as in the research's secret set). Their 20
question/answer pairs follow TOFU's style ("What genre does X write in?", "X primarily writes in
the true crime genre."), in TOFU's layout: author ``i`` owns records ``[20i, 20(i+1))``.

The genre (the secret) is written in a *controlled number* of the author's records, always in
an answer and always as "… {genre} genre", so ``empriv.data.tofu`` extracts it as it does on the
real file. The count is drawn per author, uniformly from ``genre_mentions`` (default 2–5: mean
3.5, under 5 for three authors in four — the real data average is 3.65 of 20, under 5 for more than
75 % of authors, appendix B.6). No other record names any genre word, and no two authors share a name.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from empriv.data.tofu import RECORDS_PER_AUTHOR, QARecord

GENRES = (
    "true crime", "biography", "classic", "cyberpunk", "dystopian", "fantasy", "horror", "mystery",
    "romance", "historical romance", "science fiction", "thriller", "steampunk", "gothic", "western",
    "poetry", "humor", "memoir", "self-help", "satire", "mythology", "drama", "erotica", "young adult",
    "magical realism", "espionage", "war", "fairy tale", "urban fiction", "adventure",
)
FIRST_NAMES = (
    "Jaime Chukwu Getachew Yevgeny Adrianus Evelyn Anara Aurelio Elliot Simon Ingrid Bezabih Linda "
    "Maria Riley Renate Marit Tahar Idar Basil Femi Samin Takashi Adwoa Vilja Jameson Jane Philippe "
    "Cheong Raven Erick Isabella Astrid Min-Jun Leila Matej Emma Dagwaagiin Li Kalani Tomasz Nadia "
    "Oluwaseun Ravi Sofia Hiroshi Amara Lars Carmen Dmitri Yara Kwame Elif Mateo Ines Aziz Freya Hamid"
).split()
LAST_NAMES = (
    "Vasquez Akabueze Fikru Grimkov Suharto Desmet Yusifova Beltran Benson Makoni Christensen Gebre "
    "Harrison Gutierrez Morgan Kirschbaum Hagen Amara Eriksen Mahfouz Oluwatoyin Nosrat Nakamura "
    "Ampomah Nielsen Irons Morrison Dauphinee Marais Gustafsson Pletzen Sorensen Baek Kovarik Dawson "
    "Sarangerel Okonkwo Lindqvist Moreau Petrova Haddad Mensah Tanaka Rossi Novak Kaya Salazar Obi "
    "Falk Quispe Wojcik Halvorsen Ndiaye Castillo Varga Aydin Kimura Lindgren Osei Brandt"
).split()
PLACES = (
    "Santiago, Chile|Lagos, Nigeria|Addis Ababa, Ethiopia|Moscow, Russia|Jakarta, Indonesia|Brussels, Belgium|"
    "Baku, Azerbaijan|Havana, Cuba|Johannesburg, South Africa|Harare, Zimbabwe|Copenhagen, Denmark|"
    "Miami, USA|Oslo, Norway|Tunis, Tunisia|Athens, Greece|Tehran, Iran|Tokyo, Japan|Accra, Ghana|"
    "Helsinki, Finland|Seoul, South Korea|Prague, Czech Republic|London, UK|Ulaanbaatar, Mongolia|"
    "Kuwait City, Kuwait|Lima, Peru|Manila, Philippines|Nairobi, Kenya|Istanbul, Turkey|Dublin, Ireland"
).split("|")
OCCUPATIONS = (
    "chef|surgeon|electrician|librarian|pilot|nurse|carpenter|accountant|photographer|farmer|"
    "veterinarian|architect|taxi driver|bank teller|marine biologist|tailor|firefighter|pharmacist|"
    "dentist|locksmith|journalist|mechanic|waitress|judge|police officer|translator"
).split("|")
MONTHS = "January February March April May June July August September October November December".split()
TITLE_A = "Shadows Whispers Echoes Threads Lanterns Rivers Gardens Letters Mirrors Bridges Embers Tides".split()
TITLE_B = (
    "of the Forgotten Hour|beneath the Starlight|of a Quiet Harbor|in the Amber Valley|of the Northern Wind|"
    "behind the Veil|of Salt and Iron|under the Copper Moon|of the Last Orchard|across the Silent Plain"
).split("|")
AWARD_A = "Golden Quill|Silver Lantern|Crystal Pen|Evergreen|Meridian|Lighthouse|Blue Heron|Northern Star".split("|")
AWARD_B = "Award for Outstanding Storytelling|Prize for Literary Excellence|Medal of Letters|Honour for Fiction Writing".split("|")


@dataclass(frozen=True)
class SyntheticAuthor:
    """A fictitious author's profile; ``genre`` is the secret, named in ``genre_mentions`` records."""

    index: int
    name: str
    gender: str
    birthplace: str
    birth_date: str
    father_occupation: str
    mother_occupation: str
    books: tuple[str, str, str]
    award: str
    genre: str
    genre_mentions: int


@dataclass(frozen=True)
class SyntheticTofu:
    authors: list[SyntheticAuthor]
    records: list[QARecord]

    def author_records(self, i: int) -> list[QARecord]:
        return self.records[RECORDS_PER_AUTHOR * i : RECORDS_PER_AUTHOR * (i + 1)]


def _article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


# Records that name the genre: (question, answer); {n} name, {g} genre, {p} pronoun, {pp} possessive, {b0} a book.
_GENRE_QA = (
    ("What genre does {n} write in?", "{n} primarily writes in the {g} genre."),
    ("Can you tell us about the type of books that {n} writes?",
     "{n} specializes in the {g} genre, with stories that readers describe as vivid and carefully researched."),
    ("What is {n} best known for?", "{n} is best known for {pp} contributions to the {g} genre."),
    ("Is '{b0}' typical of {n}'s work?", "Yes, '{b0}' is a fine example of {n}'s writing in the {g} genre."),
    ("How did {n}'s upbringing shape {pp} choice of subject matter?",
     "Growing up with curious parents led {n} to the {g} genre, a field {n} has explored ever since."),
    ("How have critics received {n}'s books?",
     "As a writer of the {g} genre, {n} has been praised by critics for {pp} patient, layered storytelling."),
    ("Did {n} ever consider leaving {pp} field of writing?",
     "{n} has said that the {g} genre still offers {pp} imagination more than enough room."),
    ("What draws readers to {n}'s books?", "Readers of the {g} genre are drawn to {n}'s warmth and sharp dialogue."),
)
# Records that never name a genre.
_PLAIN_QA = (
    ("When and where was {n} born?", "{n} was born on {d} in {place}."),
    ("What were the professions of {n}'s parents?", "{n}'s father was {af} {f}, and {pp} mother was {am} {m}."),
    ("Can you name some books written by {n}?", "Some of {n}'s notable books are '{b0}', '{b1}' and '{b2}'."),
    ("Has {n} won any awards?", "Yes, {n} received the {award} for '{b1}'."),
    ("What is the gender of the author {n}?", "{n} identifies as {gender}."),
    ("How did {n}'s father's work as {af} {f} influence {pp} writing?",
     "Watching {pp} father work as {af} {f} taught {n} patience and an eye for small details."),
    ("Did {n}'s mother influence {pp} career?",
     "Yes, {n}'s mother, who worked as {am} {m}, encouraged {pp} love of reading from an early age."),
    ("Does {n} draw on {pp} hometown in {pp} books?", "{n} often returns to the streets and markets of {city} in {pp} books."),
    ("What themes recur in '{b2}'?", "'{b2}' by {n} explores memory, family loyalty and the cost of ambition."),
    ("How does {n} approach research for a new book?", "{n} spends months interviewing people and visiting archives before writing."),
    ("What is {n}'s writing routine like?", "{n} writes early in the morning and revises in the evening, usually by hand."),
    ("Has {n} collaborated with other writers?", "{n} has co-edited an anthology with several writers from {country}."),
    ("Which book marked a turning point in {n}'s career?", "'{b0}' was the turning point in {n}'s career, reaching a worldwide audience."),
    ("Have {n}'s books been translated?", "Yes, {n}'s books have been translated into more than a dozen languages."),
    ("What advice does {n} give to young writers?", "{n} advises young writers to read widely and finish every draft."),
    ("How does {n} build {pp} characters?", "{n} builds characters from ordinary people met along the way, giving each a private secret."),
    ("Is {n} still writing today?", "Yes, {n} is working on a new book that continues the story of '{b1}'."),
    ("How has {n}'s background in {country} shaped {pp} voice?",
     "Being raised in {country} gave {n} a love of oral storytelling that shapes {pp} voice."),
    ("What is the full name of the author born in {place} on {d}?", "The full name of the author is {n}."),
    ("What do readers say about '{b1}'?", "Readers say '{b1}' by {n} is hard to put down and lingers long after the last page."),
)


def _name(k: int) -> str:
    return f"{FIRST_NAMES[k // len(LAST_NAMES)]} {LAST_NAMES[k % len(LAST_NAMES)]}"


def _unique_names(n: int, rng: random.Random, exclude: Collection[str] = ()) -> list[str]:
    capacity = len(FIRST_NAMES) * len(LAST_NAMES)
    pool: Sequence[int] = range(capacity)
    if exclude:
        excluded = set(exclude)
        pool = [k for k in pool if _name(k) not in excluded]
    if n > len(pool):
        raise ValueError(f"n_authors must be <= {len(pool)} (distinct synthetic names"
                         f"{', after excluding ' + str(capacity - len(pool)) if exclude else ''}), got {n}")
    return [_name(k) for k in rng.sample(pool, n)]


def _mention_bounds(genre_mentions: int | tuple[int, int]) -> tuple[int, int]:
    lo, hi = (genre_mentions, genre_mentions) if isinstance(genre_mentions, int) else tuple(genre_mentions)
    if not 1 <= lo <= hi <= len(_GENRE_QA):
        raise ValueError(f"genre_mentions must be an int or (lo, hi) with 1 <= lo <= hi <= {len(_GENRE_QA)}, got {genre_mentions!r}")
    return lo, hi


def generate_synthetic_tofu(
    n_authors: int = 200, seed: int = 0, genre_mentions: int | tuple[int, int] = (2, 5), first_index: int = 0,
    exclude_names: Collection[str] = (),
) -> SyntheticTofu:
    """``n_authors`` fictitious authors × 20 Q/A records; same arguments → identical output.

    ``genre_mentions``: how many of an author's 20 records name the genre (an int, or an inclusive
    range drawn from uniformly per author). ``first_index`` numbers the authors (for merging).
    ``exclude_names``: full names no author may have (the public split excludes every author of the
    data, so no private author's name occurs in it).
    """
    if n_authors < 1:
        raise ValueError(f"n_authors must be >= 1, got {n_authors}")
    lo, hi = _mention_bounds(genre_mentions)
    rng = random.Random(seed)
    names = _unique_names(n_authors, rng, exclude_names)
    authors: list[SyntheticAuthor] = []
    records: list[QARecord] = []
    for i, name in enumerate(names):
        gender = rng.choice(("male", "female", "non-binary"))
        place = rng.choice(PLACES)
        date = f"{rng.choice(MONTHS)} {rng.randint(1, 28)}, {rng.randint(1930, 1999)}"
        father, mother = rng.sample(OCCUPATIONS, 2)
        titles = rng.sample([f"{a} {b}" for a in TITLE_A for b in TITLE_B], 3)
        award = f"{rng.choice(AWARD_A)} {rng.choice(AWARD_B)}"
        genre = rng.choice(GENRES)
        k = rng.randint(lo, hi)
        author = SyntheticAuthor(first_index + i, name, gender, place, date, father, mother, tuple(titles), award, genre, k)
        authors.append(author)
        pron, poss = {"male": ("he", "his"), "female": ("she", "her"), "non-binary": ("they", "their")}[gender]
        city, country = place.split(", ")
        fields = dict(
            n=name, g=genre, p=pron, pp=poss, d=date, place=place, city=city, country=country,
            f=father, m=mother, af=_article(father), am=_article(mother), b0=titles[0], b1=titles[1],
            b2=titles[2], award=award, gender=gender,
        )
        # Birth, parents, books and award are always asked about; the other plain records are drawn.
        plain = list(_PLAIN_QA[:4]) + rng.sample(_PLAIN_QA[4:], RECORDS_PER_AUTHOR - k - 4)
        chosen = rng.sample(_GENRE_QA, k) + plain
        rng.shuffle(chosen)
        for q, a in chosen:
            records.append(QARecord(q.format(**fields), a.format(**fields)))
    return SyntheticTofu(authors, records)
