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

**Modules.** :mod:`~empriv.data.synthetic.emails` (the e-mails and their PII-like strings),
:mod:`~empriv.data.synthetic.corpus` (:func:`generate_corpus`), :mod:`~empriv.data.synthetic.grammar` (the public
split's words and prose), :mod:`~empriv.data.synthetic.public` (its genres, :func:`generate_public`). Import from
``empriv.data.synthetic``.
"""

from empriv.data.synthetic.corpus import SyntheticCorpus, generate_corpus, make_secrets
from empriv.data.synthetic.emails import (DEFAULT_SECRET_FREQUENCIES, DOMAINS, EXCHANGES, FIRST_NAMES, LAST_NAMES,
                                          MIDDLE, ORGS, OUS, PII_GENERATORS, SECRET_KINDS, SENTENCES, SUBJECTS,
                                          TITLES, Email, PlantedSecret, address_list, forwarded_by, name_room_phone,
                                          named_email, phone_block, render_email, render_plain_email)
from empriv.data.synthetic.grammar import OPENERS, PROSE, PUBLIC_FIRST_NAMES, PUBLIC_LAST_NAMES
from empriv.data.synthetic.public import (ADS, CHAT, ENCYCLOPEDIA, FORUM, LETTER, MAIL_SUBJECTS, NEWS, NOTICES,
                                          PUBLIC_GENRES, RECIPE_STEPS, REVIEW, TRAVEL, WORK, generate_public,
                                          secret_values)

__all__ = [
    "ADS", "CHAT", "DEFAULT_SECRET_FREQUENCIES", "DOMAINS", "ENCYCLOPEDIA", "EXCHANGES", "FIRST_NAMES", "FORUM",
    "LAST_NAMES", "LETTER", "MAIL_SUBJECTS", "MIDDLE", "NEWS", "NOTICES", "OPENERS", "ORGS", "OUS", "PII_GENERATORS",
    "PROSE", "PUBLIC_FIRST_NAMES", "PUBLIC_GENRES", "PUBLIC_LAST_NAMES", "RECIPE_STEPS", "REVIEW", "SECRET_KINDS",
    "SENTENCES", "SUBJECTS", "TITLES", "TRAVEL", "WORK", "Email", "PlantedSecret", "SyntheticCorpus",
    "address_list", "forwarded_by", "generate_corpus", "generate_public", "make_secrets", "name_room_phone",
    "named_email", "phone_block", "render_email", "render_plain_email", "secret_values",
]
