"""The public split (:func:`generate_public`): general English of other genres — e-mails of everyday life and of
other industries, letters, news, forum threads, recipes, travel notes, chat, reviews, encyclopedia notes, blogs,
ads, notices, listings — over the grammar of :mod:`empriv.data.synthetic.grammar`; and the secret values it must
never contain (:func:`secret_values`)."""

from __future__ import annotations

import random
import re
from collections.abc import Callable

from empriv.data.synthetic.emails import Email
from empriv.data.synthetic.grammar import (PUBLIC_FIRST_NAMES, PUBLIC_LAST_NAMES, _SLOTS, _W, _email, _fill,
                                           _phone_public, _prose, _sentence, _sentences, _surname)


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
        return "Contents\n" + "\n".join(f"{i}. " + _fill(rng, rng.choice((
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
