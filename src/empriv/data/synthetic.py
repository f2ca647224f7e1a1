"""Built-in Enron-like email corpus: no download, fully determined by (sizes, seed).

Every email has a short header block, a body, and sometimes a quoted reply or a signature.
A fixed set of PII-like *secrets* — phone/fax blocks, ``Forwarded by Name/OU/ORG`` lines,
Notes-style address lists, name/room/phone blocks, named e-mail addresses — recurs in the
training split at controlled sample-level frequencies (by default 0.05 %–3 % of emails, the
range of the real corpus, appendix B.6 of the research). Emails without a secret carry *random*
strings of the same formats, so a secret stands out only by its repetition, as in the real data.

The validation and test splits are e-mails of the same family and contain no secret: every
generated text is checked against the secret list. Each secret is placed so that it starts within
the first ~120 characters of its email, which keeps it inside a short training window
(``base.seq_len`` tokens of the tokenizer trained on the public split).

The *public* split (used only to pre-train the base model and to train the tokenizer) comes from a
different distribution (:func:`generate_public`): general English of other genres — e-mails of
everyday life and of other industries (shops, clinics, schools, builders, software) with other
header styles, letters, news, forum threads, recipes, travel notes, chat, reviews, notices, ads,
listings — over a grammar of everyday words, names disjoint from the e-mails' and made-up places
and brands. So the base model learns English-ish structure but not the fine-tuning e-mails, and
fine-tuning has something to learn. It holds no secret and no value inside one (phone number,
address, room, name pair) in any format, none of the e-mails' subjects or sentences, and no
``enron``; it depends only on (n_public, seed), from its own random stream.
"""

from __future__ import annotations

import random
import re
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


# ----------------------------------------------------------------------------- corpus
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


def make_secrets(rng: random.Random, frequencies: tuple[float, ...]) -> list[PlantedSecret]:
    secrets: list[PlantedSecret] = []
    seen: set[str] = set()
    for i, freq in enumerate(frequencies):
        kind = SECRET_KINDS[i % len(SECRET_KINDS)]
        while True:
            text = PII_GENERATORS[kind](rng)
            if kind == "address_list" and text.count("@") > 2:
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


# ----------------------------------------------------------------------------- public split
# General English of other genres — news, forum threads, recipes, travel notes, chat logs, reviews,
# encyclopedia-style notes, and letters and newsletters of other industries (clinics, schools,
# shops, software, builders, insurers) — so that the base model learns English-ish structure and the
# tokenizer sensible merges, but not the fine-tuning distribution: no Enron-style From/To/Subject
# block, no quoted reply or signature of the e-mail generator, no desk, contract or trading sentence,
# no name pair or domain of the e-mail generator, no 713 phone number, EB room or Notes address.
# Sentences come from a small grammar over a few hundred everyday words, so the text has the
# variety of prose rather than of a handful of templates.

PUBLIC_FIRST_NAMES = (
    "Olivia Ethan Maria Lucas Sofia Noah Grace Henry Chloe Oliver Emma Daniel Hannah Leo Amelia Isaac "
    "Zoe Adrian Nora Felix Priya Omar Lena Marco Aisha Tobias Ingrid Hugo Yuki Mateo Clara Victor "
    "Fatima Jonas Elena Rafael Mei Gabriel Julia Simon Ava Theo Lucia Ivan Rosa Kofi Alice Nathan "
    "Ruth Oscar Leila Martin Helen Arjun Nadia Pablo Erin Malik Iris Stefan Beatriz Colin Ella Rohan"
).split()
PUBLIC_LAST_NAMES = (
    "Chen Patel Garcia Nguyen Okafor Rossi Schmidt Novak Kowalski Fischer Moreau Silva Andersen Tanaka "
    "Brennan Walsh Ortiz Haddad Lindqvist Byrne Costa Mendes Ivanova Yamamoto Sandoval Larsen Dubois "
    "Romero Hughes Bianchi Sato Kaur Mensah Petrov Herrera Jansen Doyle Ferreira Nakamura Quinn Alvarez "
    "Weber Fitzgerald Morrison Castillo Oyelaran Svensson Wright Harper Coleman Fraser Russo Duarte"
).split()


def _words(text: str) -> list[str]:
    return text.split("|")


_W = {  # word lists of the slots of the public grammar and templates
    "city": "Lisbon|Portland|Kyoto|Edinburgh|Cape Town|Montreal|Valencia|Krakow|Melbourne|Oslo|Santiago|"
            "Dublin|Austin|Seville|Hanoi|Bologna|Vancouver|Porto|Nairobi|Tallinn|Bergen|Galway|Cusco|Ljubljana",
    "day": "Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday",
    "month": "January|February|March|April|May|June|July|August|September|October|November|December",
    # nouns: (singular, plural)
    "noun": "garden,gardens|window,windows|teacher,teachers|student,students|kitchen,kitchens|recipe,recipes|"
            "phone,phones|car,cars|road,roads|bridge,bridges|river,rivers|movie,movies|song,songs|book,books|"
            "article,articles|photo,photos|game,games|team,teams|coach,coaches|doctor,doctors|nurse,nurses|"
            "customer,customers|shop,shops|ticket,tickets|train,trains|flight,flights|hotel,hotels|room,rooms|"
            "dinner,dinners|cake,cakes|dog,dogs|cat,cats|bike,bikes|laptop,laptops|website,websites|app,apps|"
            "problem,problems|question,questions|idea,ideas|class,classes|lesson,lessons|exam,exams|map,maps|"
            "village,villages|park,parks|beach,beaches|mountain,mountains|lake,lakes|weekend,weekends|"
            "holiday,holidays|party,parties|gift,gifts|package,packages|neighbour,neighbours|friend,friends|"
            "child,children|parent,parents|museum,museums|library,libraries|festival,festivals|concert,concerts|"
            "menu,menus|market,markets|farmer,farmers|storm,storms|season,seasons|street,streets|house,houses|"
            "roof,roofs|door,doors|floor,floors|wall,walls|tool,tools|engine,engines|battery,batteries|"
            "screen,screens|camera,cameras|story,stories|chapter,chapters|painting,paintings|artist,artists|"
            "player,players|match,matches|field,fields|boat,boats|island,islands|forest,forests|tree,trees|"
            "flower,flowers|bird,birds|shirt,shirts|jacket,jackets|chair,chairs|table,tables|bottle,bottles|"
            "letter,letters|volunteer,volunteers|visitor,visitors|guide,guides|course,courses|lecture,lectures|"
            "patient,patients|bakery,bakeries|restaurant,restaurants|playground,playgrounds|station,stations|"
            "report,reports|schedule,schedules|meeting,meetings|draft,drafts|budget,budgets|invoice,invoices|"
            "deadline,deadlines|proposal,proposals|survey,surveys|newsletter,newsletters|account,accounts|"
            "password,passwords|delivery,deliveries|warehouse,warehouses|supplier,suppliers|receipt,receipts|"
            "form,forms|list,lists|message,messages|office,offices|printer,printers|folder,folders|"
            "spreadsheet,spreadsheets|customer survey,customer surveys|staff room,staff rooms|"
            "umbrella,umbrellas|sandwich,sandwiches|blanket,blankets|lamp,lamps|puzzle,puzzles|"
            "violin,violins|tractor,tractors|helmet,helmets|ladder,ladders|bucket,buckets|rabbit,rabbits|"
            "horse,horses|candle,candles|notebook,notebooks|cup,cups|sofa,sofas|mirror,mirrors",
    "adj": "small|large|old|new|quiet|busy|bright|cheap|expensive|friendly|simple|difficult|easy|strange|"
           "beautiful|local|fresh|early|late|warm|cold|long|short|useful|careful|noisy|lovely|tiny|huge|"
           "famous|empty|crowded|wooden|modern|comfortable|broken|colourful|delicious|boring|brilliant|"
           "popular|rare|quick|slow|clean|dirty|safe|wild|gentle",
    # verbs: base|past
    "verb": "fix,fixed|visit,visited|open,opened|buy,bought|sell,sold|read,read|write,wrote|find,found|"
            "lose,lost|build,built|paint,painted|cook,cooked|bake,baked|finish,finished|start,started|"
            "move,moved|clean,cleaned|check,checked|order,ordered|share,shared|watch,watched|"
            "book,booked|change,changed|try,tried|enjoy,enjoyed|recommend,recommended|borrow,borrowed|"
            "carry,carried|repair,repaired|plant,planted|explore,explored|cancel,cancelled|photograph,photographed|"
            "decorate,decorated|wash,washed|test,tested|sketch,sketched|rebuild,rebuilt|discover,discovered",
    "adv": "really|quickly|slowly|finally|probably|usually|always|almost|quite|suddenly|carefully|honestly|"
           "happily|rarely|nearly|simply",
    "prep": "near|behind|next to|across from|inside|outside|above|below|around|past|beside|opposite",
    "subject": "I|we|they|my sister|my brother|our neighbour|the teacher|the team|my parents|a friend of mine|"
               "the kids|my cousin|the old man next door|the volunteers|our guide|the new owner",
    "time": "yesterday|last week|this morning|last night|two days ago|after lunch|on the way home|"
            "before breakfast|last summer|over the weekend|earlier today|a while ago|at the weekend",
    "future": "tomorrow|next week|this weekend|next month|later today|after the holidays|in the spring|soon",
    "feeling": "glad|surprised|tired|happy|worried|excited|relieved|curious|grateful|annoyed",
    "relative": "mum|dad|sister|brother|aunt|uncle|grandmother|cousin|flatmate|partner",
    "unit": "minutes|hours|days|weeks",
    "body": "city council|school board|county commission|transit authority|parks department|"
            "hospital board|university senate|water district|library board|harbour committee",
    "action": "approve|delay|reject|expand|review|fund|cancel|study",
    "plan": "a new bike lane on Main Street|the plan to rebuild the old bridge|a budget for next year|"
            "longer opening hours at the public library|a new bus route to the airport|repairs to the harbour wall|"
            "a park on the site of the former factory|free school meals for younger children|"
            "a ban on cars in the old town|a second runway at the regional airport|the renovation of the town hall",
    "concern": "traffic|noise|the cost|parking|flooding|the loss of trees|rising rents|safety at night|"
               "the timeline|the impact on small shops",
    "verdict": "long overdue|difficult but necessary|a good first step|disappointing|widely expected",
    "topic": "my laptop fan is very loud|best way to fix a leaking tap|sourdough starter not rising|"
             "bike chain keeps slipping|tomato leaves turning yellow|phone battery drains overnight|"
             "which hiking boots for wet weather|cat will not eat new food|router drops the connection|"
             "learning guitar as an adult|paint peeling in the bathroom|first marathon training plan|"
             "cheap flights in winter|how to keep basil alive|squeaky floorboards|best board games for four",
    "dish": "Lemon garlic chicken|Tomato and lentil soup|Banana bread|Vegetable curry|Potato salad|Apple crumble|"
            "Mushroom risotto|Spiced pumpkin muffins|Black bean tacos|Pea and mint pasta|Carrot cake|Fish pie",
    "ingredient": "2 cups of flour|1 onion, chopped|3 cloves of garlic|a pinch of salt|200 g of butter|2 eggs|"
                  "1 tin of tomatoes|a handful of fresh herbs|1 tablespoon of olive oil|half a lemon|"
                  "1 teaspoon of cumin|500 ml of stock|100 g of sugar|2 ripe bananas|a cup of rice|4 carrots",
    "transport": "tram|train|ferry|night bus|bike|old funicular|coach|boat",
    "place": "castle|market|cathedral|harbour|botanical garden|museum|old bridge|beach|lighthouse|square",
    "activity": "walking around the old town|tasting the local cheese|looking at the boats|reading in the park|"
                "taking far too many photos|trying to speak the language|hunting for postcards",
    "weather": "grey and windy|hot and sunny|cold but clear|rainy all day|perfect|foggy in the morning",
    "century": "12th|14th|16th|18th|19th",
    "product": "The hotel|This coffee grinder|The restaurant|This backpack|The phone case|The guided tour|"
               "This novel|The new bakery on the corner|These headphones|The kettle|This tent",
    "quality": "better than expected|just okay|excellent|not worth the money|solid|lovely|a bit flimsy",
    "size": "small|mid-sized|large|historic",
    "geo": "north coast|banks of a wide river|edge of a national park|southern plain|shore of a lake",
    "feature": "narrow streets|seafood|university|bridges|music scene|painted houses|markets",
    "industry": "fishing|farming|shipbuilding|software|wine|textiles|ceramics",
    "climate": "cold and wet|short|long and dark|mild",
    "festival": "film|jazz|food|book|folk music|lantern|kite",
    "company": "Brightwater Dental|Northside Primary School|Maple Lane Books|Cloudberry Software|"
               "Harbour View Builders|Greenleaf Insurance|Riverside Veterinary Clinic|Sunrise Bakery|"
               "Oakridge Library|Bluefin Travel|Pinecrest Garden Centre|Silverline Fitness|Copperleaf Cafe",
    "role": "Office Manager|Customer Support|Head Teacher|Practice Nurse|Store Manager|Project Coordinator|"
            "Membership Team|Claims Adviser|Events Team|Front Desk",
    "closing": "Kind regards|Best wishes|Many thanks|Warm regards|Sincerely|Cheers|See you soon",
    "tld": "org|net|co.uk|io|com.au|ca|ie",
    "acronym": "UK|EU|FAQ|PDF|USB|TV|DIY|BBQ|CEO|IT|HR|PTA|NHS|GP|MOT|NGO|UN|BBC|RSVP|ASAP|PIN|GPS|DVD",
    "rule": "--|---|-----|----------|--------------------|* * *|=====|___",
    "doc": "quote|invoice|floor plan|lesson plan|staff rota|menu|price list|brochure|estimate|timetable|"
           "purchase order|slide deck|project plan|budget sheet|tender|press release|newsletter draft|contract",
    "dept": "marketing|sales|accounts|facilities|admissions|design|kitchen|pharmacy|IT support|HR|warehouse|front office",
    "client": "customer|client|patient|landlord|supplier|school|contractor|publisher|venue",
}
_W = {k: _words(v) for k, v in _W.items()}
_NOUNS = [tuple(x.split(",")) for x in _W.pop("noun")]
_VERBS = [tuple(x.split(",")) for x in _W.pop("verb")]


_ONSETS = "b br c ch cl d dr f fl g gl gr h j k l m n p pl pr r s sh sk st t th tr v w y z".split()
_VOWELS = "a e i o u a e i o ai ea ou io ey".split()
_CODAS = [""] * 6 + "n r l s t m nd rk st ck ll th x ng".split()


def _pseudo(rng: random.Random, lo: int = 2, hi: int = 3) -> str:
    """A made-up word (place, surname, brand): many rare sub-word pieces, as names in real text."""
    return "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS)
                   for _ in range(rng.randint(lo, hi))).capitalize()


def _surname(rng: random.Random) -> str:
    return rng.choice(PUBLIC_LAST_NAMES) if rng.random() < 0.5 else _pseudo(rng)


def _email(rng: random.Random) -> str:
    user = rng.choice((f"{rng.choice(PUBLIC_FIRST_NAMES)}.{_surname(rng)}", f"{rng.choice(PUBLIC_FIRST_NAMES)}{rng.randint(1, 99)}",
                       rng.choice(("info", "hello", "support", "office", "bookings", "admin"))))
    return f"{user.lower()}@{_pseudo(rng, 1, 2).lower()}{rng.choice(('', 'mail', 'web', 'post'))}.{rng.choice(_W['tld'])}"


def _phone_public(rng: random.Random) -> str:  # fictional 555 numbers, never the e-mails' 713-XXX-XXXX
    area = rng.choice(("206", "312", "415", "503", "617", "802", "919", "214", "305", "512"))  # never 713
    local = f"{rng.randint(200, 999)}-{rng.randint(0, 9999):04d}"
    return rng.choice((f"({area}) {local}", f"{area}-{local}", f"{area}.{local.replace('-', '.')}",
                       f"+44 20 7946 {rng.randint(0, 999):04d}", f"555-{rng.randint(100, 199):04d}",
                       f"1-800-{local}"))


_SLOTS: dict[str, Callable[[random.Random], object]] = {
    **{k: (lambda rng, words=words: rng.choice(words)) for k, words in _W.items()},
    "noun": lambda rng: rng.choice(_NOUNS)[0],
    "noun2": lambda rng: rng.choice(_NOUNS)[0],
    "nouns": lambda rng: rng.choice(_NOUNS)[1],
    "vbase": lambda rng: rng.choice(_VERBS)[0],
    "vpast": lambda rng: rng.choice(_VERBS)[1],
    "adj2": lambda rng: rng.choice(_W["adj"]),
    "Subject": lambda rng: (lambda s: s[0].upper() + s[1:])(rng.choice(_W["subject"])),
    "first": lambda rng: rng.choice(PUBLIC_FIRST_NAMES),
    "name": lambda rng: f"{rng.choice(PUBLIC_FIRST_NAMES)} {rng.choice(PUBLIC_LAST_NAMES)}",
    "last": lambda rng: rng.choice(PUBLIC_LAST_NAMES),
    "small": lambda rng: rng.randint(2, 12),
    "num": lambda rng: rng.choice((2, 3, 4, 5, 6, 10, 12, 15, 20, 30, 45, 100)),
    "money": lambda rng: rng.randint(2, 90),
    "price": lambda rng: f"${rng.randint(1, 250)}.{rng.choice(('00', '50', '99', '95'))}",
    "votes": lambda rng: f"{rng.randint(4, 9)} to {rng.randint(0, 3)}",
    "people": lambda rng: f"{rng.randint(1, 99)},{rng.randint(0, 999):03d}",
    "year": lambda rng: rng.randint(1650, 2015),
    "date": lambda rng: rng.choice((f"{rng.randint(1, 28)} {rng.choice(_W['month'])}",
                                    f"{rng.randint(1, 12)}/{rng.randint(1, 28)}/{rng.randint(2008, 2016)}")),
    "euros": lambda rng: rng.randint(3, 40),
    "minutes": lambda rng: rng.choice((10, 15, 20, 25, 30, 40, 45)),
    "temp": lambda rng: rng.choice((160, 180, 200, 220)),
    "hour": lambda rng: f"{rng.randint(1, 12)}:{rng.choice(('00', '15', '30', '45'))} {rng.choice(('am', 'pm', 'AM', 'PM'))}",
    "order": lambda rng: rng.randint(10000, 99999),
    "phone": _phone_public,
    "email": _email,
    "surname": _surname,
    "person": lambda rng: f"{rng.choice(PUBLIC_FIRST_NAMES)} {_surname(rng)}",
    "town": lambda rng: _pseudo(rng, 1, 2) + rng.choice(("ford", "ton", "by", "wick", "field", "port", "ville", "", "")),
    "brand": lambda rng: _pseudo(rng, 2, 3),
    "url": lambda rng: f"www.{_pseudo(rng, 1, 2).lower()}.{rng.choice(_W['tld'])}/{_pseudo(rng, 1, 2).lower()}",
    "code": lambda rng: f"{rng.choice('ABCDFGHKLMPRSTVWXZ')}{rng.choice('ABCDEFGHJKLMNPRSTUVWXYZ')}-{rng.randint(100, 9999)}",
}


class _Slots(dict):
    """Fills each slot of a template on first use (so a template draws only what it shows)."""

    def __init__(self, rng: random.Random, **fixed):
        super().__init__(fixed)
        self.rng = rng

    def __missing__(self, key):
        value = self[key] = _SLOTS[key](self.rng)
        return value


_A_AN = re.compile(r"\b([Aa]) (?=[aeiou])")


def _fill(rng: random.Random, template: str, **fixed) -> str:
    return _A_AN.sub(r"\1n ", template.format_map(_Slots(rng, **fixed)))


# The everyday-prose grammar: each pattern's slots are drawn independently.
PROSE = (
    "{Subject} {vpast} the {adj} {noun} {time}.",
    "{Subject} {vpast} a {adj} {noun} {prep} the {noun2}.",
    "Do you know if the {noun} {prep} the {noun2} is still {adj}?",
    "I {adv} want to {vbase} the {noun} before {day}.",
    "The {noun} was {adv} {adj}, but the {nouns} were {adj2}.",
    "We are planning to {vbase} the {nouns} {future}.",
    "If you {vbase} the {noun}, please tell me what you think.",
    "There is a {adj} {noun} {prep} the {noun2} that nobody uses.",
    "{name} said the {nouns} would be {adj} by {day}.",
    "It took {num} {unit} to {vbase} the {noun}, which was {adv} {adj}.",
    "Thanks for the {noun}, it was {adj}!",
    "My {relative} {vpast} a {adj} {noun} for {price}.",
    "I was {feeling} when the {nouns} {vpast} the {noun} {time}.",
    "Most {nouns} in {city} are {adj}, and some are {adj2}.",
    "Nobody expected the {noun} to be so {adj}.",
    "You can {vbase} the {nouns} {prep} the {noun} on {day}s.",
    "Why did the {nouns} {vbase} the {noun} {time}?",
    "The {adj} {nouns} {prep} the {noun} {adv} need a coat of paint.",
    "After the {noun}, {subject} {vpast} {num} {nouns} and went home.",
    "{Subject} will {vbase} the {noun} {future}, weather permitting.",
    "Honestly, the {noun} is {adj} and the {noun2} is {adj2}.",
    "On {date}, {subject} {vpast} the {noun} {prep} the {noun2}.",
    "I have never seen a {noun} so {adj} in my life.",
    "Could someone {vbase} the {nouns} before {hour}?",
    "The {nouns} cost {price}, which seems {adj} to me.",
    "{person} from {town} {vpast} the {adj} {noun} {time}.",
    "The {brand} {noun} is {adv} {adj}, according to {person}.",
    "For more details, write to {email} or visit {url}.",
    "We met {person} at the {noun} in {town} on {date}.",
    "Reference {code}: the {noun} will be {adj} until {day}.",
    "The {nouns} in {town} were {adj}; the ones in {city} were {adj2}.",
    "According to the {noun}, {subject} {vpast} about {num} {nouns} in {year}.",
    "The {acronym} says the {noun} must be {adj} by {date}.",
    "Ask the {acronym} office about the {noun} (room {small}, second floor).",
    "See the attached {acronym} file for the {adj} {nouns}.",
)


OPENERS = ("Anyway, ", "By the way, ", "To be honest, ", "Oh, and ", "Also, ", "Still, ", "Funny thing: ",
           "As usual, ", "In the end, ", "Meanwhile, ", "Apparently, ", "So ")


_KEEP_CAPITAL = ("I ", "{person", "{name", "{brand", "{city", "{town", "{first")


def _clause(rng: random.Random, inner: bool) -> str:
    template = rng.choice(PROSE)
    text = _fill(rng, template)
    return text[0].lower() + text[1:] if inner and not template.startswith(_KEEP_CAPITAL) else text


def _sentence(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.25:  # an opener, as prose has
        return rng.choice(OPENERS) + _clause(rng, True)
    if r < 0.4:  # two clauses in one sentence
        return _clause(rng, False)[:-1] + rng.choice((", and ", ", but ", " because ", ", so ", " while ")) + _clause(rng, True)
    return _clause(rng, False)


def _prose(rng: random.Random, lo: int, hi: int) -> str:
    return " ".join(_sentence(rng) for _ in range(rng.randint(lo, hi)))


def _sentences(rng: random.Random, pool: tuple[str, ...], lo: int, hi: int, prose: float = 0.4, **fixed) -> str:
    """``lo``–``hi`` sentences, each from ``pool`` (distinct) or, with probability ``prose``, the grammar."""
    own = iter(rng.sample(pool, min(len(pool), hi)))
    out = []
    for _ in range(rng.randint(lo, hi)):
        out.append(_sentence(rng) if rng.random() < prose else _fill(rng, next(own), **fixed))
    return " ".join(out)


NEWS = (
    "The {body} voted {votes} on {day} to {action} {plan}.",
    "Officials said the project would cost about {money} million and take {small} years to complete.",
    "Residents who attended the meeting raised concerns about {concern}.",
    "{name}, a spokesperson for the {body}, said the decision was {verdict}.",
    "A final vote is expected in {month}.",
    "Critics argue that the money would be better spent on {plan}.",
    "Supporters say the change will make {city} a better place to live.",
    "The proposal was first discussed {small} years ago but stalled for lack of funding.",
    "Local businesses have been asked to share their views before the end of {month}.",
    "More than {people} people signed a petition against the plan.",
)
FORUM = (
    "Has anyone else had this problem?", "I tried {vbase}ing it myself but it did not help.",
    "Any advice would be really appreciated.", "It started about {small} weeks ago, out of nowhere.",
    "I had the same thing last year and a new {noun} sorted it out.", "Honestly, it depends on your budget.",
    "Thanks everyone, I will give that a try this weekend.", "Update: it worked! Thanks for the tips.",
    "Did you check the manual? There is a section on this.", "Same here. Following this thread.",
    "I would not bother with the expensive version, the cheap one is fine.",
    "My {relative} swears by it, for what it is worth.", "Can you post a photo? Hard to tell from the description.",
)
RECIPE_STEPS = (
    "Preheat the oven to {temp} degrees.", "Chop the vegetables into small pieces.",
    "Heat the oil in a large pan over a medium heat.", "Stir in the spices and cook for {small} minutes.",
    "Add the stock and bring to the boil.", "Mix the dry ingredients in a large bowl.",
    "Pour the mixture into a lined tin.", "Bake for {minutes} minutes, until golden.",
    "Season to taste and serve warm.", "Leave to cool before slicing.",
)
TRAVEL = (
    "We took the {transport} to the {place} and spent the afternoon {activity}.",
    "The weather was {weather}, so we stayed close to the hotel.", "Dinner was at a small place near the {place}.",
    "If you go, get there early because it gets crowded by noon.", "Tickets cost {euros} euros each, cash only.",
    "Our guide, {first}, told us the {place} was built in the {century} century.",
    "Tomorrow we head to {city} by {transport}.", "The view from the top was worth every step.",
    "We got a little lost on the way back, but it was fun.", "I would happily come back in {month}.",
)
CHAT = (
    "hey, are you coming tonight?", "running a bit late, sorry", "no worries", "lol yes", "did you see the game?",
    "can you grab some milk on the way", "omw", "what time is the film?", "i think it starts at {hour}",
    "sounds good", "ok see you there", "haha that is so true", "are we still on for {day}?",
    "my train is delayed again", "send me the photos later!", "thanks, you are the best", "who is bringing snacks",
    "call me when you are free", "did you {vbase} the {noun}?", "the {noun} is so {adj} lol",
    "my number changed, it is {phone} now", "can't, my {relative} is visiting",
)
REVIEW = (
    "{product} was {quality}.", "The staff were friendly and helpful.", "Delivery took {small} days.",
    "Would recommend to a friend.", "A bit pricey for what you get.", "Five stars, no complaints.",
    "It broke after {small} weeks, which was disappointing.", "Great value and easy to use.",
    "The room was clean but the street was noisy at night.", "I will definitely be back.",
)
ENCYCLOPEDIA = (
    "The population was about {people} at the last census.", "The economy is based on {industry} and tourism.",
    "The old town was rebuilt after a fire in {year}.", "Winters are {climate} and summers are mild.",
    "The city hosts a {festival} festival every {month}.", "It is connected to the capital by {transport}.",
)
LETTER = (
    "Thank you for your order #{order}, which will be shipped within {small} working days.",
    "This is a reminder of your appointment on {day} at {hour}.",
    "Please arrive ten minutes early and bring your membership card.",
    "We are pleased to confirm that your application has been accepted.",
    "The school will be closed on {day} for staff training.",
    "Our engineers are looking into the problem and will update you shortly.",
    "The builders will start work on the kitchen on {day} morning.",
    "Your claim has been received and a decision will be made within {small} weeks.",
    "If you need to reschedule, just reply to this message or call us on {phone}.",
    "We have updated our opening hours for the winter months.",
    "Parents are invited to the spring concert in the main hall.",
    "The new version of the app fixes the login issue reported last month.",
    "Your book is ready to collect from the front desk.",
    "We apologise for any inconvenience this may cause.",
    "Please find the invoice for {date} below.",
    "The total comes to {price}, payable by the end of {month}.",
)


def _news(rng: random.Random) -> str:
    head = _fill(rng, "{Body} votes to {action} {plan}", Body=rng.choice(_W["body"]).title())
    return f"{head}\n\n{rng.choice(_W['city']).upper()} - {_sentences(rng, NEWS, 2, 4, prose=0.25)}"


def _forum(rng: random.Random) -> str:
    user = f"{rng.choice(PUBLIC_FIRST_NAMES).lower()}{rng.randint(1, 99)}"
    text = _fill(rng, "Thread: {topic}\nPosted by {user} on {month} {d}, {y}\n\n", user=user,
                 d=rng.randint(1, 28), y=rng.randint(2008, 2016)) + _sentences(rng, FORUM, 1, 4)
    if rng.random() < 0.5:
        other = f"{rng.choice(PUBLIC_FIRST_NAMES).lower()}_{rng.choice(PUBLIC_LAST_NAMES).lower()}"
        text += f"\n\nReply from {other}: {_sentences(rng, FORUM, 1, 3)}"
    return text


def _recipe(rng: random.Random) -> str:
    steps = [_fill(rng, s) for s in rng.sample(RECIPE_STEPS, rng.randint(2, 4))]
    return (_fill(rng, "{dish}\nServes {n}. Prep time: {minutes} minutes.\n\n", n=rng.randint(2, 6))
            + f"Ingredients: {', '.join(rng.sample(_W['ingredient'], rng.randint(3, 5)))}.\n\n"
            + "\n".join(f"{i}. {s}" for i, s in enumerate(steps, 1)))


def _travel(rng: random.Random) -> str:
    return f"Day {rng.randint(1, 14)} in {rng.choice(_W['city'])}\n\n{_sentences(rng, TRAVEL, 2, 5)}"


def _chat(rng: random.Random) -> str:
    a, b = (x.lower() for x in rng.sample(PUBLIC_FIRST_NAMES, 2))
    h, m = rng.randint(8, 22), rng.randint(0, 50)
    return "\n".join(f"[{h:02d}:{m + i:02d}] {(a, b)[i % 2]}: {_fill(rng, rng.choice(CHAT))}"
                     for i in range(rng.randint(3, 7)))


def _review(rng: random.Random) -> str:
    head = f"Rating: {rng.randint(1, 5)}/5\nReviewed by {rng.choice(PUBLIC_FIRST_NAMES)} {rng.choice(PUBLIC_LAST_NAMES)[0]}."
    return f"{head}\n\n{_sentences(rng, REVIEW, 2, 4, product=rng.choice(_W['product']))}"


def _encyclopedia(rng: random.Random) -> str:
    return (_fill(rng, "{city} is a {size} city on the {geo}, known for its {feature}. ")
            + _sentences(rng, ENCYCLOPEDIA, 2, 4, prose=0.2))


def _blog(rng: random.Random) -> str:
    return _fill(rng, "{title}\n\n", title=rng.choice(("A quiet week", "Notes from the garden", "Weekend plans",
                                                        "Things I learned this month", "Small wins", "Catching up")))\
        + _prose(rng, 2, 5)


def _letter(rng: random.Random) -> str:
    company = rng.choice(_W["company"])
    text = _fill(rng, "{greeting},\n\n", greeting=rng.choice((
        f"Dear {rng.choice(('Ms', 'Mr', 'Dr'))} {rng.choice(PUBLIC_LAST_NAMES)}", f"Hi {rng.choice(PUBLIC_FIRST_NAMES)}",
        "Dear customer", "Dear parents", "Hello everyone")))
    text += _sentences(rng, LETTER, 2, 4, prose=0.3)
    text += _fill(rng, "\n\n{closing},\n{name}\n{role}, {company}", company=company)
    if rng.random() < 0.35:  # a web-mail header of another style than the e-mails' From/To/Subject block
        domain = company.lower().replace(" ", "") + "." + rng.choice(_W["tld"])
        text = (f"Date: {rng.choice(_W['day'])[:3]}, {rng.randint(1, 28)} {rng.choice(_W['month'])[:3]} "
                f"{rng.randint(2009, 2015)}\nSender: {rng.choice(PUBLIC_FIRST_NAMES).lower()}."
                f"{rng.choice(PUBLIC_LAST_NAMES).lower()}@{domain}\n"
                + (_fill(rng, "Subject: your {noun} on {day}\n") if rng.random() < 0.5 else "") + f"\n{text}")
    return text


WORK = (
    "Please review the attached {doc} and send me your comments by {day}.",
    "Can we move the {dept} meeting to {day} at {hour}?",
    "I have updated the {doc} with the new {nouns}.",
    "The {dept} team needs the final figures before the end of the month.",
    "Let me know if you have any questions.",
    "I am away from {date} and back on {day}.",
    "Thanks for sending the {doc} so quickly.",
    "Our {client} in {town} has asked for a new quote.",
    "The delivery of {nouns} arrived damaged, so we have asked the supplier for a refund.",
    "Attached is the {doc} for the {brand} project.",
    "We are still waiting for the signed {doc} from the {client}.",
    "Could you pass this on to whoever handles {dept} at your end?",
    "The {dept} meeting has moved to room {small}.",
    "I spoke to the {client} this morning and they are happy with the {doc}.",
    "We need to order more {nouns} before the {festival} festival.",
    "The {doc} is on the shared drive under {brand}.",
    "Sorry for the slow reply, it has been a busy week in {dept}.",
    "Can you print {num} copies of the {doc} for {day}?",
    "The {client} has paid the invoice, thanks for chasing it.",
    "Please remind everyone that the car park is closed on {day}.",
)
MAIL_SUBJECTS = ("Re: the {noun} on {day}", "Photos from {town}", "RE: {acronym} {noun}", "FW: {adj} {nouns}",
                 "Your {brand} order {code}", "Quick question about the {noun}", "Fwd: {festival} festival tickets",
                 "{day} plans", "Re: Re: {nouns} for the party", "Invitation: {brand} open day",
                 "Your booking at {company}", "Minutes of the {brand} club meeting", "Welcome to {company}!",
                 "Re: {adj} {noun}", "{doc} for {day}", "RE: {dept} meeting", "updated {doc}", "FW: {doc}",
                 "{brand} project", "Re: quote for {town}", "room booking", "new {nouns}")


def _mail(rng: random.Random) -> str:
    """An e-mail of everyday life or of a small business in another industry (shops, clinics,
    schools, builders, software, cafes): other names, addresses, subjects and sentences than the
    e-mails of the fine-tuning splits, headers in several styles."""
    first, last = rng.choice(PUBLIC_FIRST_NAMES), _surname(rng)
    work = rng.random() < 0.6
    company = rng.choice(_W["company"])
    style = rng.random()
    subject = _fill(rng, "Subject: " + rng.choice(MAIL_SUBJECTS))
    if style < 0.4:  # bare addresses
        lines = [f"From: {_email(rng)}", f"To: {_email(rng)}", subject]
    elif style < 0.8:  # web-mail: names with addresses, a date line, in varying order
        lines = [f"From: {first} {last} <{_email(rng)}>", _fill(rng, "Date: {day}, {date} at {hour}"), subject]
        if rng.random() < 0.6:
            lines.insert(rng.randint(1, 3), f"To: {_fill(rng, '{person}')} <{_email(rng)}>")
        if rng.random() < 0.2:
            lines.append(f"Cc: {_email(rng)}")
        rng.shuffle(lines)
    else:
        lines = [subject]
    text = "\n".join(lines) + "\n\n"
    if rng.random() < 0.6:
        greeting = rng.choice(("Hi {first2},", "Hello {first2},", "Dear all,", "Hey {first2}!", "Good morning,", "{first2},"))
        text += _fill(rng, greeting, first2=rng.choice(PUBLIC_FIRST_NAMES)) + "\n\n"
    text += _sentences(rng, WORK, 1, 4, prose=0.35) if work else _prose(rng, 1, 4)
    r = rng.random()
    if r < 0.35:
        text += "\n\n" + rng.choice(("Thanks", "Cheers", "Best", "Regards", "See you")) + f",\n{first}"
    elif r < 0.6:
        text += _fill(rng, "\n\n{first} {last}\n{role}, {company}\nTel: {phone}", first=first, last=last, company=company)
        if rng.random() < 0.5:
            text += f"\nFax: {_phone_public(rng)}"
    r = rng.random()
    if r < 0.15:  # a quoted reply, Outlook style
        text += _fill(rng, "\n\n-----Original Message-----\nFrom: {person}\nSent: {day}, {date} {hour}\n"
                           "To: {person2}\nSubject: {sub}\n\n", person2=_SLOTS["person"](rng),
                      sub=subject.split(": ", 1)[1]) + _sentences(rng, WORK, 1, 2)
    elif r < 0.3:  # a quoted reply, "On ..., X wrote:" style
        text += _fill(rng, "\n\nOn {date} at {hour}, {person} <{email}> wrote:\n> ") + _prose(rng, 1, 2)
    elif r < 0.4:
        text += "\n" + _fill(rng, "{rule}\n{person}\n{phone}")
    return text


def _listing(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.4:
        items = [_fill(rng, rng.choice(("{adj} {nouns}", "{town}", "{brand}", "{city}", "{year}", "{noun}")))
                 for _ in range(rng.randint(3, 7))]
        return f"{_sentence(rng)}\n\nTags: " + ", ".join(items)
    if kind < 0.55:  # a directory or a timetable: numbers, as real listings have
        if rng.random() < 0.5:
            return "Useful numbers\n" + "\n".join(
                _fill(rng, rng.choice(("{Place}: {phone}", "{person} (mobile) {phone}", "{company}, phone {phone}, fax {phone2}",
                                       "{town} office: {phone}")), Place=rng.choice(_W["place"]).capitalize(),
                      phone2=_phone_public(rng)) for _ in range(rng.randint(3, 7)))
        return f"Timetable, {rng.choice(_W['transport'])} {rng.randint(1, 99)}\n" + "\n".join(
            f"{_fill(rng, '{town}')} {rng.randint(5, 23):02d}:{rng.randint(0, 59):02d} {rng.randint(5, 23):02d}:{rng.randint(0, 59):02d}"
            for _ in range(rng.randint(3, 7)))
    if kind < 0.75:
        return f"Contents\n" + "\n".join(f"{i}. " + _fill(rng, rng.choice((
            "The {adj} {noun}", "A history of {town}", "How to {vbase} a {noun}", "{person} on {nouns}",
            "Notes on the {brand} {noun}"))) for i in range(1, rng.randint(4, 8)))
    return "\n".join(_fill(rng, rng.choice(("{person}, {town} - {price}", "{code} {adj} {noun} x{small}",
                                             "{date}: {noun} ({brand})", "{brand} {noun}, {price}")))
                     for _ in range(rng.randint(3, 7)))


ADS = (
    "FOR SALE: {adj} {noun}, hardly used, {price}. Call {phone} or email {email}.",
    "WANTED: {adj} {nouns} for a school project in {town}. Contact {person}, {phone}.",
    "LOST: a {adj} {noun} near the {place} on {day}. Reward offered. {email}",
    "FREE to a good home: {num} {nouns}. Collection from {town} only.",
    "ROOM TO LET in {town}, {price} a week, bills included. Ask for {first} on {phone}.",
    "LESSONS: {noun} lessons for beginners with {person}. First hour free. {url}",
)
NOTICES = (
    "Opening hours from {date}: Monday to Friday {hour} to {hour2}.",
    "The {noun} in the {place} will be closed for repairs until {day}.",
    "Please do not leave {nouns} in the corridor.",
    "Volunteers needed for the {festival} festival on {date}. Sign up at {url}.",
    "Meeting of the {brand} residents group: {day} at {hour}, {town} community hall.",
    "Questions? Contact {person} at {email}.",
)


def _ad(rng: random.Random) -> str:
    return "\n".join(_fill(rng, t) for t in rng.sample(ADS, rng.randint(1, 3)))


def _notice(rng: random.Random) -> str:
    title = rng.choice(("NOTICE", "Community notice board", "Important information", "Update for members"))
    rule = rng.choice(_W["rule"])
    return f"{title}\n{rule}\n" + f"\n{rule}\n".join(_fill(rng, t, hour2=_SLOTS["hour"](rng))
                                                     for t in rng.sample(NOTICES, rng.randint(2, 4)))


# genre → (generator, weight): e-mails of other kinds are the largest share, as on the web
PUBLIC_GENRES: dict[str, tuple[Callable[[random.Random], str], float]] = {
    "mail": (_mail, 0.35), "letter": (_letter, 0.08), "news": (_news, 0.06), "forum": (_forum, 0.07),
    "recipe": (_recipe, 0.04), "travel": (_travel, 0.05), "chat": (_chat, 0.05), "review": (_review, 0.05),
    "encyclopedia": (_encyclopedia, 0.04), "blog": (_blog, 0.07), "ads": (_ad, 0.04), "notice": (_notice, 0.04),
    "listing": (_listing, 0.06),
}


def secret_values(secrets) -> tuple[str, ...]:
    """Each secret and the values inside it — phone numbers, e-mail addresses, rooms, "First Last"
    names — none of which may appear in the public split, in any format."""
    values: set[str] = set()
    for s in secrets:
        text = s if isinstance(s, str) else s.text
        values.add(text)
        values.update(re.findall(r"\d{3}-\d{3}-\d{4}", text))
        values.update(re.findall(r"[\w.]+@[\w.]+", text))
        values.update(re.findall(r"EB \d{4}", text))
        values.update(" ".join(m) for m in re.findall(r"\b([A-Z][a-z]+) (?:[A-Z] )?([A-Z][a-z]+)\b", text))
    return tuple(sorted(values))


def generate_public(n: int, seed: int, forbidden: tuple[str, ...] = ()) -> list[Email]:
    """``n`` secret-free public texts of general English (a genre at random for each), determined by
    (n, seed); a text containing any ``forbidden`` string is drawn again."""
    if n < 1:
        raise ValueError(f"n_public must be >= 1, got {n}")
    rng = random.Random(f"empriv-public-{seed}")
    genres = [g for g, _ in PUBLIC_GENRES.values()]
    weights = [w for _, w in PUBLIC_GENRES.values()]
    out = []
    for i in range(n):
        while True:
            text = rng.choices(genres, weights)[0](rng)
            if not any(f in text for f in forbidden):
                break
        out.append(Email(f"public-{i:06d}", text))
    return out
