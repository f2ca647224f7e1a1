"""The public split's grammar: everyday words (the slots of the templates), made-up names, places and brands,
and sentences of everyday prose (:data:`PROSE`) filled slot by slot (:func:`_fill`).

General English of other genres — news, forum threads, recipes, travel notes, chat logs, reviews,
encyclopedia-style notes, and letters and newsletters of other industries (clinics, schools,
shops, software, builders, insurers) — so that the base model learns English-ish structure and the
tokenizer sensible merges, but not the fine-tuning distribution: no Enron-style From/To/Subject
block, no quoted reply or signature of the e-mail generator, no desk, contract or trading sentence,
no name pair or domain of the e-mail generator, no 713 phone number, EB room or Notes address.
Sentences come from a small grammar over a few hundred everyday words, so the text has the
variety of prose rather than of a handful of templates.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable


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
