"""Names and sentences for the synthetic world (`synth_world`).

Everything here is pure text machinery driven by a caller-owned `random.Random`, so the same seed gives
the same names and sentences in every process:

* `NameForge` invents pronounceable, unique names (people, cities, countries, organisations, works) and
  near-duplicate "twin" names for similar-entity distractors ("Veloria Tamsin" vs "Veloria Tamsen").
* `RELATIONS` lists every relation of the world with its statement, question, claim (for hedged,
  conflicting passages) and description (for 2-hop questions) templates.
* `FILLERS` are fact-free sentences that `compose` uses to pad passages to a natural length.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

ENTITY_TYPES = ("country", "city", "person", "organisation", "work")
MIN_WORDS, MAX_SENTENCES = 40, 5

_ONSETS = ("b", "br", "d", "dr", "f", "g", "gr", "h", "k", "kr", "l", "m", "n", "p", "r", "s", "st", "t")
_ONSETS += ("th", "tr", "v", "z", "sh", "c", "j", "w")
_VOWELS = ("a", "e", "i", "o", "u", "a", "e", "o", "ia", "ae", "ei", "ou")
_CODAS = ("", "", "n", "r", "l", "s", "m", "th", "nd", "rk")
_ENDINGS = {
    "first": ("a", "ia", "en", "or", "is", "el", "ine", "an", "o", "ette", "iel"),
    "last": ("in", "en", "ard", "ell", "ow", "ick", "ane", "ey", "orn", "ton", "ley", "ski"),
    "city": ("mora", "holm", "vale", "gard", "ith", "avel", "ene", "ost", "wick", "ford", "mere", "ria"),
    "country": ("ia", "and", "esh", "ora", "enn", "ovia", "ar", "istan", "ea"),
    "root": ("ar", "en", "is", "or", "al", "ium", "et", "ane"),
}


def _words(text: str, sep: str | None = None) -> tuple[str, ...]:
    """Split a word-list literal (keeps long vocabularies compact)."""
    return tuple(text.split(sep))


# Cheap guard against inventing a real word or a famous real name.
_BLOCKED = frozenset(
    _words(
        """
    able also area arena band bare bard bean bear bell belt bend best bird bite blame blend bold bond
    bone boot born bran brand bread brew brick bride brim broth cane card care cart case cash cave cell
    chain coin cold cone core corn dale dane dare darn data date dean dear deed dell dent desk dine dome
    done dose dove drain dream dress drill drum dune earl even fame fare farm fate fell fern file fine
    fire fish fold fond ford form fort gale game gate gene gore gown grain grand grin hand hare harm
    hate hell herd hero hire hold home hope horn host iron java jest join kale kind king kiln lace lame
    land lane lard lean lend lens lime line lion lord lore lose love lung mane mare mark mars mast mate
    meal mean melt mend mere mile mine mint mist moan mold monk moon more moss name nest nine none norm
    nose note oven pale pane park pine pond pore port rain rank rare rest rice ride ring rise road robe
    rock role roma rome rose ruin rule sale sand sane sash seal seen sent shin shine shore sine sire
    sole song sore stand star stem stern store tale tank team tend tent term tide tile time tone torn
    town tree trend vale vane vase vein vent verb vine wand ward ware warm west wind wine wise wore zone
    adam anna berlin boston cairo china delhi dublin elena greta hanna hilda india irene italy jordan
    kenya lima london madrid malta maria milan moscow oslo paris peru perth rio russia sara sofia spain
    syria texas tokyo venice vienna warsaw york thor odin zeus hera juno luna nora mina dora
    this than then bran gran stan sean dean jean bean lean mean loan roan joan ivan evan liam noah
    tina gina nina lina rosa vera anna emma ella bella lisa
"""
    )
)


def _syllable(rng: random.Random, coda: bool = False) -> str:
    return rng.choice(_ONSETS) + rng.choice(_VOWELS) + (rng.choice(_CODAS) if coda else "")


def _join(root: str, ending: str) -> str:
    """Glue a root and an ending, dropping the root's final vowels when the ending starts with one."""
    if ending[0] in "aeiou":
        root = root.rstrip("aeiou") or root
    return root + ending


class NameForge:
    """Invents unique, pronounceable name tokens; every token it returns is distinct (case-insensitive)."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.used: set[str] = set()  # membership only: never iterated, so output order stays seeded

    def _fresh(self, kind: str, min_syllables: int = 1, max_syllables: int = 2) -> str:
        for _ in range(1000):
            n = self.rng.randint(min_syllables, max_syllables)
            root = "".join(_syllable(self.rng) for _ in range(n))
            token = _join(root, self.rng.choice(_ENDINGS[kind])).capitalize()
            if self._take(token):
                return token
        raise RuntimeError(f"name space exhausted for {kind!r} names")

    def _take(self, token: str) -> bool:
        low = token.lower()
        if len(low) < 4 or len(low) > 12 or low in self.used or low in _BLOCKED:
            return False
        self.used.add(low)
        return True

    def first_name(self) -> str:
        return self._fresh("first", 1, 2)

    def last_name(self) -> str:
        return self._fresh("last", 2, 2)

    def city(self) -> str:
        return self._fresh("city", 2, 2)

    def country(self) -> str:
        return self._fresh("country", 2, 2)

    def root(self) -> str:
        """A bare invented word, used inside organisation names and work titles."""
        return self._fresh("root", 2, 2)

    def twin(self, token: str) -> str:
        """A near-duplicate of `token`: one inner vowel changed (Tamsin -> Tamsen), or a letter appended."""
        spots = [i for i, ch in enumerate(token) if i > 0 and ch in "aeiou"]
        for _ in range(50):
            if spots:
                i = self.rng.choice(spots)
                ch = self.rng.choice([v for v in "aeiou" if v != token[i]])
                cand = token[:i] + ch + token[i + 1 :]
            else:
                cand = token + self.rng.choice("aeiou")
            if self._take(cand):
                return cand
        for extra in "aeiourlnst":
            if self._take(token + extra):
                return token + extra
        raise RuntimeError(f"no twin name left for {token!r}")


ORG_FORMS = _words(
    "{x} Institute|{x} Guild|{x} Society|{x} Academy|{x} Press|{x} Foundry|{x} Observatory|"
    "{x} Trading Company|House of {x}|{x} Conservatory",
    "|",
)
WORK_FORMS = ("The {adj} {noun} of {x}", "{noun}s of {x}", "The {x} {noun}", "A {noun} for {x}")
_WORK_ADJS = _words("Silent Glass Amber Hollow Crimson Winter Distant Burning Pale Iron")
_WORK_NOUNS = _words("Lantern Orchard Harbour Letter Garden Bell Tower River Mirror Song")
OCCUPATIONS = _words(
    "cartographer glassblower botanist printer shipwright physician clockmaker weaver surveyor "
    "composer painter poet novelist chemist mathematician translator bookbinder stonemason "
    "navigator librarian"
)
FIELDS = _words(
    "glassmaking cartography astronomy shipbuilding printing textiles medicine botany "
    "clockmaking mining metallurgy navigation music architecture surveying"
)
GENRES = _words(
    "novel|poem cycle|symphony|treatise|play|song cycle|chronicle|travelogue|comic opera|memoir|"
    "requiem|pastoral",
    "|",
)


def org_name(rng: random.Random, root: str) -> str:
    return rng.choice(ORG_FORMS).format(x=root)


def work_form(rng: random.Random) -> str:
    """A work-title pattern with the adjective and noun filled in and `{x}` left for the invented word."""
    noun = rng.choice(_WORK_NOUNS)
    form = rng.choice(WORK_FORMS).replace("{adj}", rng.choice(_WORK_ADJS)).replace("{noun}", noun)
    return form.replace("A ", "An ", 1) if form.startswith("A ") and noun[0] in "AEIOU" else form


@dataclass(frozen=True)
class Relation:
    """One functional relation: a subject has exactly one value for it.

    Templates use `{s}` for the subject name and `{o}` for the value (an entity name or a literal).
    `describe` names the value in terms of the subject ("the founder of {s}") and only exists for
    entity-valued relations; it is what chains two relations into a 2-hop question.
    """

    name: str
    subject: str
    object: str | None  # entity type of the value, or None for a literal (year, occupation, ...)
    statements: tuple[str, ...]
    questions: tuple[str, ...]
    claim: str
    describe: str = ""


RELATIONS: dict[str, Relation] = {
    r.name: r
    for r in (
        Relation(
            "in_country",
            "city",
            "country",
            ("{s} is a city in {o}.", "{s} lies in {o}.", "The city of {s} is located in {o}."),
            ("In which country is {s}?", "In which country does {s} lie?"),
            "{s} lies in {o}",
            "the country in which {s} lies",
        ),
        Relation(
            "capital",
            "country",
            "city",
            ("The capital of {s} is {o}.", "{o} serves as the capital of {s}.", "{s} is governed from {o}."),
            ("What is the capital of {s}?", "Which city is the capital of {s}?"),
            "{o} was the capital of {s}",
            "the capital of {s}",
        ),
        Relation(
            "born_in",
            "person",
            "city",
            ("{s} was born in {o}.", "{s} was born in the city of {o}.", "The birthplace of {s} was {o}."),
            ("In which city was {s} born?", "What is the birthplace of {s}?", "Where was {s} born?"),
            "{s} was born in {o}",
            "the city where {s} was born",
        ),
        Relation(
            "birth_year",
            "person",
            None,
            (
                "{s} was born in {o}.",
                "{s} was born in the year {o}.",
                "Records show that {s} was born in {o}.",
            ),
            ("In what year was {s} born?", "When was {s} born?", "What is the birth year of {s}?"),
            "{s} was born in {o}",
        ),
        Relation(
            "occupation",
            "person",
            None,
            ("{s} worked as a {o}.", "By profession, {s} was a {o}.", "{s} earned a living as a {o}."),
            ("What was the profession of {s}?", "What did {s} do for a living?"),
            "{s} was a {o}",
        ),
        Relation(
            "works_for",
            "person",
            "organisation",
            ("{s} worked for {o}.", "{s} was employed by {o}.", "For most of a long career, {s} served {o}."),
            ("Which organisation employed {s}?", "For which organisation did {s} work?"),
            "{s} worked for {o}",
            "the organisation that employed {s}",
        ),
        Relation(
            "headquartered_in",
            "organisation",
            "city",
            (
                "{s} is headquartered in {o}.",
                "{s} has its headquarters in {o}.",
                "The main seat of {s} is in {o}.",
            ),
            ("In which city is {s} headquartered?", "Where does {s} have its headquarters?"),
            "{s} was headquartered in {o}",
            "the city where {s} is headquartered",
        ),
        Relation(
            "founded_year",
            "organisation",
            None,
            ("{s} was founded in {o}.", "{s} was established in {o}.", "The founding of {s} dates to {o}."),
            ("In what year was {s} founded?", "When was {s} established?"),
            "{s} was founded in {o}",
        ),
        Relation(
            "founded_by",
            "organisation",
            "person",
            ("{s} was founded by {o}.", "{o} founded {s}.", "{s} owes its existence to its founder, {o}."),
            ("Who founded {s}?", "Who was the founder of {s}?"),
            "{s} was founded by {o}",
            "the founder of {s}",
        ),
        Relation(
            "field",
            "organisation",
            None,
            ("{s} is devoted to {o}.", "{s} is known for its work in {o}.", "The main field of {s} is {o}."),
            ("What field is {s} devoted to?", "In which field does {s} work?"),
            "{s} specialised in {o}",
        ),
        Relation(
            "created_by",
            "work",
            "person",
            ("{s} was created by {o}.", "{s} is a work by {o}.", "{o} is the author of {s}."),
            ("Who created {s}?", "Who is the author of {s}?"),
            "{s} was the work of {o}",
            "the author of {s}",
        ),
        Relation(
            "created_year",
            "work",
            None,
            (
                "{s} was completed in {o}.",
                "{s} first appeared in {o}.",
                "The year {o} saw the completion of {s}.",
            ),
            ("In what year was {s} completed?", "When did {s} first appear?"),
            "{s} was completed in {o}",
        ),
        Relation(
            "genre",
            "work",
            None,
            ("{s} is a {o}.", "By form, {s} is a {o}.", "Critics classify {s} as a {o}."),
            ("What kind of work is {s}?", "What is the genre of {s}?"),
            "{s} was a {o}",
        ),
    )
}
YEAR_RELATIONS = ("birth_year", "founded_year", "created_year")
COMPARISON_QUESTIONS = ("Who was born first, {a} or {b}?", "Which of {a} and {b} was born earlier?")

# Hedged, attributed wording for "mildly conflicting" passages; `{claim}` is a relation's claim.
HEDGES = (
    "Some older registers claim that {claim}, though most sources disagree.",
    "According to a disputed pamphlet, {claim}.",
    "A few early accounts state that {claim}; later historians consider this a confusion.",
    "It is occasionally said that {claim}, but the evidence for this is thin.",
)

FILLERS: dict[str, tuple[str, ...]] = {
    "person": (
        "{s} kept meticulous notebooks that still survive in several archives.",
        "Contemporaries described {s} as patient, exacting and quietly stubborn.",
        "Letters written by {s} are often quoted by later biographers.",
        "{s} travelled widely in early adulthood before settling down for good.",
        "A small portrait of {s} hangs in a provincial gallery.",
        "Among colleagues, {s} was known for a dry sense of humour.",
        "Little is recorded about the private life of {s}.",
        "Several anecdotes about {s} circulated for decades afterwards.",
    ),
    "city": (
        "{s} is known for its narrow streets and covered markets.",
        "A slow river divides {s} into an old quarter and a newer district.",
        "The main square of {s} hosts a seasonal fair every autumn.",
        "Travellers often remark on the red-tiled roofs of {s}.",
        "{s} grew up around a ford once used by cattle drovers.",
        "The climate around {s} is mild and damp for most of the year.",
    ),
    "country": (
        "{s} is a largely mountainous land with long, cold winters.",
        "The coastline of {s} is dotted with small fishing villages.",
        "{s} has a long tradition of local self-government.",
        "Much of the interior of {s} is covered by pine forest.",
        "{s} is divided into a dozen provinces of unequal size.",
    ),
    "organisation": (
        "{s} maintains a small library that is open to visiting scholars.",
        "Over the years {s} has trained a large number of apprentices.",
        "The archives of {s} are unusually complete for a body of its age.",
        "{s} publishes a yearly report on its activities.",
        "{s} has been reorganised several times since its beginnings.",
        "Membership of {s} was long considered a mark of distinction.",
    ),
    "work": (
        "{s} was received warmly by critics at the time.",
        "Only a handful of early copies of {s} survive.",
        "{s} has been revived several times in the last century.",
        "Scholars still debate the meaning of the final section of {s}.",
        "{s} is often studied alongside other works of its period.",
        "{s} was later translated into several languages.",
    ),
}


def compose(
    rng: random.Random, etype: str, name: str, sents: list[tuple[str | None, str]]
) -> tuple[str, dict]:
    """Pad `(fact id or None, sentence)` pairs with fillers about entity `name` to 2-5 sentences and ~40+ words.

    Returns the passage text and `{fact id: sentence index}`.
    """
    fillers = [t.format(s=name) for t in FILLERS[etype]]
    rng.shuffle(fillers)
    sents = list(sents)
    if rng.random() < 0.3:
        sents.insert(0, (None, fillers.pop()))
    while fillers and len(sents) < MAX_SENTENCES:
        if len(sents) >= 2 and sum(len(s.split()) for _, s in sents) >= MIN_WORDS:
            break
        sents.append((None, fillers.pop()))
    return " ".join(s for _, s in sents), {fid: i for i, (fid, _) in enumerate(sents) if fid}
