"""Synthetic world generator: the project's own embedded demo data.

From one seed it invents a fictional world (countries, cities, people, organisations, works; the facts
are the relations in `world_text.RELATIONS`) with (`world_files` writes them out)

* a passage corpus: every fact is stated in one or more *primary* passages; some facts are restated in
  *paraphrase* passages; near-duplicate "twin" entities ("Veloria Tamsin" vs "Veloria Tamsen") with
  different facts fill *distractor* passages; a few *conflict* passages state a wrong value, hedged or
  attributed ("Some older registers claim that ..."), and are never gold;
* questions: single-hop, 2-hop bridge ("In which city was the author of X born?") and 2-hop comparison
  ("Who was born first, A or B?"), with gold answers, gold passage ids, sub-questions and ~10 passages
  with graded relevance (2 = states the answer fact, 1 = states the other needed fact, 0 = hard distractor).

The world is fictional, so a model cannot answer from memory: evidence selection visibly matters.
Only `random.Random(config.seed)` is used, so the same config gives byte-identical output in every process.
The corpus size is approximate: entity counts are derived from `num_passages` and the passage-kind rates
(each a fraction of `num_passages`), which lands within a few percent of the target.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, fields
from typing import Any

from datasets import Dataset

from r3forge.data import world_text as wt
from r3forge.data.records import PASSAGE_FEATURES, QA_FEATURES, passage_record, qa_record
from r3forge.data.world_text import ENTITY_TYPES, RELATIONS, NameForge
from r3forge.errors import ConfigError

Row = dict[str, Any]
SOURCE = "synth_world"
# The world is scaled by its number of people: entities per person, minimum counts, and how many primary
# passages each entity's facts are spread over.
PER_PERSON = {"country": 0.04, "city": 0.25, "person": 1.0, "organisation": 0.2, "work": 0.5}
MIN_COUNT = {"country": 2, "city": 4, "person": 8, "organisation": 3, "work": 4}
PASSAGES_PER_ENTITY = {"country": 1, "city": 1, "person": 2, "organisation": 2, "work": 1}
LITERAL_CHOICES = {"occupation": wt.OCCUPATIONS, "field": wt.FIELDS, "genre": wt.GENRES}
MIN_SIZE = {"num_passages": 50, "num_questions": 1, "passages_per_question": 3}


def _help(default: Any, text: str) -> Any:
    return field(default=default, metadata={"help": text})


@dataclass
class SynthWorldConfig:
    """Size and mix of the synthetic world; validated on construction (`ConfigError` names the field)."""

    seed: int = _help(0, "Random seed; the same config gives byte-identical output.")
    num_passages: int = _help(2000, "Approximate corpus size (>= 50); entity counts are derived from it.")
    num_questions: int = _help(500, "Exact number of questions (>= 1).")
    two_hop_fraction: float = _help(0.5, "Fraction of questions that need two facts (bridge or comparison).")
    comparison_fraction: float = _help(0.2, "Fraction of the two-hop questions that ask who was born first.")
    distractor_rate: float = _help(0.2, "Fraction of passages about near-duplicate (twin) entities.")
    paraphrase_rate: float = _help(0.15, "Fraction of passages that restate known facts in other words.")
    conflict_rate: float = _help(0.05, "Fraction of passages stating a wrong value, hedged (never gold).")
    passages_per_question: int = _help(10, "Graded passages per question: gold + hard distractors.")
    output_dir: str = _help("data/synth_world", "Folder that `main` writes the world to.")

    def __post_init__(self) -> None:
        def bad(name: str, why: str) -> ConfigError:
            return ConfigError(f"SynthWorldConfig.{name}: {why}, got {getattr(self, name)!r}")

        for f in fields(self):
            # f.type is the annotation string here, but a class once HfArgumentParser has resolved it
            kind = getattr(f.type, "__name__", f.type)
            value, want = getattr(self, f.name), {"int": int, "float": (int, float), "str": str}[kind]
            if isinstance(value, bool) or not isinstance(value, want) or value == "":
                raise bad(f.name, f"must be a non-empty {kind}")
            if f.name in MIN_SIZE and value < MIN_SIZE[f.name]:
                raise bad(f.name, f"must be >= {MIN_SIZE[f.name]}")
            if kind == "float" and not 0.0 <= value <= 1.0:
                raise bad(f.name, "must be in [0, 1]")
        if self.distractor_rate + self.paraphrase_rate + self.conflict_rate > 0.8:
            raise bad("conflict_rate", "distractor_rate + paraphrase_rate + conflict_rate must be <= 0.8")


@dataclass
class World:
    """A generated world: canonical datasets plus the entities, facts and per-passage metadata behind them."""

    config: SynthWorldConfig
    entities: list[Row]  # {id, type, name, token, twin_of}
    facts: list[Row]  # {id, subject, relation, object, value, distractor}
    passage_meta: list[Row]  # {id, title, entity, entity_type, kind, facts, conflicts_with, ...}
    corpus: Dataset  # PASSAGE_FEATURES
    questions: Dataset  # QA_FEATURES


def _stratified(groups: dict[Any, list[Any]], rng: random.Random) -> list[Any]:
    """All items, shuffled within each group, interleaved round-robin over the sorted group keys."""
    keys = sorted(groups)
    for k in keys:
        rng.shuffle(groups[k])
    longest = max((len(g) for g in groups.values()), default=0)
    return [groups[k][i] for i in range(longest) for k in keys if i < len(groups[k])]


class _Builder:
    """Builds one world step by step; all randomness comes from `self.rng`, in a fixed order."""

    def __init__(self, cfg: SynthWorldConfig):
        self.cfg, self.rng = cfg, random.Random(cfg.seed)
        self.forge = NameForge(self.rng)
        self.entities: list[Row] = []
        self.ent: dict[str, Row] = {}
        self.real: dict[str, list[Row]] = {t: [] for t in ENTITY_TYPES}  # non-twin entities by type
        self.forms: dict[str, str] = {}  # entity id -> its name with "{x}" in place of the invented token
        self.twins: dict[str, list[str]] = {}
        self.facts: list[Row] = []
        self.facts_of: dict[str, list[Row]] = {}
        self.passages: list[Row] = []
        self.primary_tpl: dict[str, int] = {}  # fact id -> statement template used by its primary passage

    # ---- entities and facts ----
    def entity(self, etype: str, form: str, token: str, twin_of: str | None = None) -> Row:
        e = {"id": f"e{len(self.entities):05d}", "type": etype, "name": form.format(x=token), "token": token}
        e["twin_of"] = twin_of
        self.entities.append(e)
        self.ent[e["id"]], self.forms[e["id"]], self.facts_of[e["id"]] = e, form, []
        if twin_of is None:
            self.real[etype].append(e)
        else:
            self.twins.setdefault(twin_of, []).append(e["id"])
        return e

    def fact(self, subj: Row, relation: str, value: Any) -> None:
        obj = value if isinstance(value, dict) else None
        f = {"id": f"f{len(self.facts):05d}", "subject": subj["id"], "relation": relation}
        f |= {"object": obj["id"] if obj else None, "value": obj["name"] if obj else str(value)}
        f["distractor"] = subj["twin_of"] is not None
        self.facts.append(f)
        self.facts_of[subj["id"]].append(f)

    def get(self, eid: str, relation: str) -> Row:
        """The fact `relation` of entity `eid` (every relation is functional)."""
        return next(f for f in self.facts_of[eid] if f["relation"] == relation)

    def year(self, eid: str) -> int:
        return int(self.get(eid, "birth_year")["value"])

    def build_entities(self) -> None:
        cfg, rng, forge = self.cfg, self.rng, self.forge
        primary = cfg.num_passages * (1 - cfg.distractor_rate - cfg.paraphrase_rate - cfg.conflict_rate)
        scale = primary / sum(PER_PERSON[t] * PASSAGES_PER_ENTITY[t] for t in ENTITY_TYPES)
        n = {t: max(MIN_COUNT[t], round(scale * PER_PERSON[t])) for t in ENTITY_TYPES}
        countries = [self.entity("country", "{x}", forge.country()) for _ in range(n["country"])]
        cities = [self.entity("city", "{x}", forge.city()) for _ in range(n["city"])]
        for i, c in enumerate(cities):  # every country gets at least one city
            self.fact(c, "in_country", countries[i] if i < len(countries) else rng.choice(countries))
        for k in countries:
            own = [c for c in cities if self.get(c["id"], "in_country")["object"] == k["id"]]
            self.fact(k, "capital", rng.choice(own))
        first_names = [forge.first_name() for _ in range(max(6, n["person"] // 3))]
        for _ in range(n["person"]):
            p = self.entity("person", rng.choice(first_names) + " {x}", forge.last_name())
            self.fact(p, "born_in", rng.choice(cities))
            self.fact(p, "birth_year", rng.randint(1700, 1880))
            self.fact(p, "occupation", rng.choice(wt.OCCUPATIONS))
        people = self.real["person"]
        for _ in range(n["organisation"]):
            org = self.entity("organisation", wt.org_name(rng, "{x}"), forge.root())
            founder = rng.choice(people)
            self.fact(org, "headquartered_in", rng.choice(cities))
            self.fact(org, "founded_year", self.year(founder["id"]) + rng.randint(25, 55))
            self.fact(org, "founded_by", founder)
            self.fact(org, "field", rng.choice(wt.FIELDS))
        for p in people:
            self.fact(p, "works_for", rng.choice(self.real["organisation"]))
        for _ in range(n["work"]):
            work, author = self.entity("work", wt.work_form(rng), forge.root()), rng.choice(people)
            self.fact(work, "created_by", author)
            self.fact(work, "created_year", self.year(author["id"]) + rng.randint(20, 60))
            self.fact(work, "genre", rng.choice(wt.GENRES))

    def other_value(self, f: Row, keep_literal: float = 0.0) -> str:
        """A different value for fact `f`: a nearby year, another entity, or (maybe) another literal."""
        rng, rel = self.rng, RELATIONS[f["relation"]]
        if f["relation"] in wt.YEAR_RELATIONS:
            return str(int(f["value"]) + rng.choice([-1, 1]) * rng.randint(1, 6))
        if rel.object is None:
            others = [c for c in LITERAL_CHOICES[f["relation"]] if c != f["value"]]
            return f["value"] if rng.random() < keep_literal else rng.choice(others)
        pool = [e for e in self.real[rel.object] if e["id"] != f["object"]]
        if rel.object == "city":  # a city of the same country makes a closer distractor
            country = self.get(f["object"], "in_country")["object"]
            pool = [c for c in pool if self.get(c["id"], "in_country")["object"] == country] or pool
        return rng.choice(pool)["id"]

    def build_twins(self) -> None:
        """Near-duplicate entities with different facts, until they fill `distractor_rate` of the corpus."""
        target = round(self.cfg.distractor_rate * self.cfg.num_passages)
        candidates = [e for t in ("person", "organisation", "work", "city") for e in self.real[t]]
        self.rng.shuffle(candidates)
        made = 0
        for e in candidates * 4:  # high rates give some entities several twins
            if made >= target:
                break
            twin = self.entity(e["type"], self.forms[e["id"]], self.forge.twin(e["token"]), twin_of=e["id"])
            for f in self.facts_of[e["id"]]:
                value = self.other_value(f, keep_literal=0.5)
                self.fact(twin, f["relation"], self.ent.get(value, value))
            made += PASSAGES_PER_ENTITY[e["type"]]

    # ---- passages ----
    def passage(self, e: Row, kind: str, sents: list[tuple[str | None, str]]) -> Row:
        text, where = wt.compose(self.rng, e["type"], e["name"], sents)
        meta = {"id": "", "title": e["name"], "entity": e["id"], "entity_type": e["type"], "kind": kind}
        meta |= {"facts": list(where), "implied_facts": [], "conflicts_with": [], "conflict_value": None}
        meta |= {"fact_sentences": where, "num_words": len(text.split()), "text": text}
        self.passages.append(meta)
        return meta

    def state(self, f: Row, avoid: int | None = None) -> tuple[str, str]:
        """`(fact id, sentence)` stating `f`; `avoid` excludes one template (paraphrases avoid the primary's)."""
        templates = RELATIONS[f["relation"]].statements
        idx = self.rng.choice([i for i in range(len(templates)) if i != avoid])
        if avoid is None:
            self.primary_tpl[f["id"]] = idx
        text = templates[idx].format(s=self.ent[f["subject"]]["name"], o=f["value"])
        return f["id"], text[0].upper() + text[1:]

    def build_passages(self) -> None:
        cfg, rng = self.cfg, self.rng
        for e in self.entities:  # primary (real entities) and distractor (twins) passages
            facts, parts = list(self.facts_of[e["id"]]), PASSAGES_PER_ENTITY[e["type"]]
            rng.shuffle(facts)
            for i in range(parts):
                kind = "primary" if e["twin_of"] is None else "distractor"
                self.passage(e, kind, [self.state(f) for f in facts[i::parts]])
        real = [f for f in self.facts if not f["distractor"]]
        for _ in range(round(cfg.paraphrase_rate * cfg.num_passages)):
            f = rng.choice(real)
            e, sents = self.ent[f["subject"]], [self.state(f, avoid=self.primary_tpl[f["id"]])]
            others = [g for g in self.facts_of[e["id"]] if g["id"] != f["id"]]
            if others and rng.random() < 0.5:
                sents.append(self.state(rng.choice(others), avoid=-1))
            self.passage(e, "paraphrase", sents)
        for _ in range(round(cfg.conflict_rate * cfg.num_passages)):
            f = rng.choice(real)
            e, wrong = self.ent[f["subject"]], self.other_value(f)
            wrong = self.ent[wrong]["name"] if wrong in self.ent else wrong
            claim = RELATIONS[f["relation"]].claim.format(s=e["name"], o=wrong)
            hedged = rng.choice(wt.HEDGES).format(claim=claim)
            meta = self.passage(e, "conflict", [(None, hedged[0].upper() + hedged[1:])])
            meta["conflicts_with"], meta["conflict_value"] = [f["id"]], wrong
        # "The capital of K is C" also states that C lies in K
        capital_of = {
            f["id"]: self.get(f["object"], "in_country")["id"] for f in real if f["relation"] == "capital"
        }
        rng.shuffle(self.passages)
        for i, p in enumerate(self.passages, start=1):
            p["id"] = f"w{cfg.seed}-p{i:05d}"
            p["implied_facts"] = [capital_of[fid] for fid in p["facts"] if fid in capital_of]

    # ---- questions ----
    def index(self) -> None:
        """Look-ups from facts, entities, relations and types to passages, in a fixed order."""
        self.pid = {p["id"]: p for p in self.passages}
        self.ids = [p["id"] for p in self.passages]
        self.stated_in: dict[str, list[Row]] = {}  # direct primary, implied primary, then paraphrases
        self.conflicts: dict[str, list[str]] = {}
        self.by_entity: dict[str, list[str]] = {}
        self.by_relation: dict[str, list[str]] = {}  # primary/distractor passages stating the relation
        self.by_type: dict[str, list[str]] = {}  # primary/distractor passages about the entity type
        relation = {f["id"]: f["relation"] for f in self.facts}
        for p in self.passages:
            self.by_entity.setdefault(p["entity"], []).append(p["id"])
            for fid in p["facts"] + p["implied_facts"]:
                self.stated_in.setdefault(fid, []).append(p)
            for fid in p["conflicts_with"]:
                self.conflicts.setdefault(fid, []).append(p["id"])
            if p["kind"] in ("primary", "distractor"):
                self.by_type.setdefault(p["entity_type"], []).append(p["id"])
                for fid in p["facts"]:
                    self.by_relation.setdefault(relation[fid], []).append(p["id"])
        for fid, ps in self.stated_in.items():
            ps.sort(key=lambda p: (p["kind"] == "paraphrase", fid not in p["facts"], p["id"]))

    def pools(self) -> dict[str, list[tuple[Row, ...]]]:
        """Every candidate question as a tuple of the facts it needs, stratified by relation pattern."""
        single: dict[Any, list[Any]] = {}
        bridge: dict[Any, list[Any]] = {}
        for f in (f for f in self.facts if not f["distractor"]):
            single.setdefault(f["relation"], []).append((f,))
            for g in self.facts_of[f["object"]] if f["object"] else []:
                if g["object"] != f["subject"]:  # "the capital of the country where C lies" may be C itself
                    bridge.setdefault((f["relation"], g["relation"]), []).append((f, g))
        years = [self.get(p["id"], "birth_year") for p in self.real["person"]]
        limit = min(self.cfg.num_questions, len(years) * (len(years) - 1) // 2)
        comparison: list[tuple[Row, ...]] = []
        seen: set[tuple[str, str]] = set()  # membership only
        for _ in range(20 * limit):
            a, b = self.rng.sample(years, 2)
            if a["value"] != b["value"] and (a["id"], b["id"]) not in seen:
                seen |= {(a["id"], b["id"]), (b["id"], a["id"])}
                comparison.append((a, b))
            if len(comparison) >= limit:
                break
        pools = {"single": _stratified(single, self.rng), "bridge": _stratified(bridge, self.rng)}
        return pools | {"comparison": comparison}

    def ask(self, f: Row, subject: str | None = None) -> str:
        subject = subject or self.ent[f["subject"]]["name"]
        return self.rng.choice(RELATIONS[f["relation"]].questions).format(s=subject)

    def question(self, qid: str, kind: str, facts: tuple[Row, ...]) -> Row:
        """One QA record: question text, gold passages (graded) and hard distractors, shuffled."""
        names = [self.ent[f["subject"]]["name"] for f in facts]
        subs = [{"question": self.ask(f), "answer": f["value"]} for f in facts]
        entities = [f["subject"] for f in facts]  # for a bridge: the start entity, then the bridge entity
        if kind == "single":
            question, answer, grades, subs = subs[0]["question"], facts[0]["value"], [2], []
        elif kind == "bridge":
            question = self.ask(facts[1], RELATIONS[facts[0]["relation"]].describe.format(s=names[0]))
            answer, grades = facts[1]["value"], [1, 2]
        else:  # comparison: who was born first
            question = self.rng.choice(wt.COMPARISON_QUESTIONS).format(a=names[0], b=names[1])
            first = 0 if int(facts[0]["value"]) < int(facts[1]["value"]) else 1
            answer, grades = names[first], [2 if i == first else 1 for i in range(2)]
        stated = [(p, g) for f, g in zip(facts, grades, strict=True) for p in self.stated_in[f["id"]]]
        stated.sort(key=lambda pg: pg[0]["kind"] == "paraphrase")  # stable: primaries first, in hop order
        grade = {p["id"]: g for p, g in stated}
        firsts = [self.stated_in[f["id"]][0] for f in facts]
        k = self.cfg.passages_per_question
        shown = list(dict.fromkeys([p["id"] for p in firsts] + list(grade)))[: max(len(facts), k - k // 2)]
        negatives = self.negatives(facts, entities, set(grade), k - len(shown))
        listed = [{**self.pid[i], "relevance": grade[i]} for i in shown]
        listed += [{**self.pid[i], "relevance": 0} for i in negatives]
        self.rng.shuffle(listed)
        meta = {"type": kind, "hops": 1 if kind == "single" else 2, "seed": self.cfg.seed}
        meta["relations"] = [f["relation"] for f in facts]
        meta |= {"bridge_entity": facts[0]["value"] if kind == "bridge" else None, "entity_ids": entities}
        meta["fact_ids"] = [f["id"] for f in facts]
        support = [
            {"title": p["title"], "sent_id": p["fact_sentences"][f["id"]]}
            for f, p in zip(facts, firsts, strict=True)
        ]
        extra = {"passages": listed, "supporting_facts": support, "sub_questions": subs, "metadata": meta}
        return qa_record(qid, question, [answer], SOURCE, **extra, gold_passage_ids=list(grade))

    def negatives(self, facts: tuple[Row, ...], entities: list[str], gold: set[str], n: int) -> list[str]:
        """Hard distractors: conflicts, twins, the entities' other passages, same relation, same type."""
        sample = lambda ids, k=6: self.rng.sample(ids, min(len(ids), k))  # noqa: E731
        pools = [
            [pid for f in facts for pid in self.conflicts.get(f["id"], [])],
            [pid for e in entities for t in self.twins.get(e, []) for pid in self.by_entity[t]],
            [pid for e in entities for pid in self.by_entity[e]],
            sample(self.by_relation[facts[-1]["relation"]]),
            sample(self.by_type[self.ent[entities[-1]]["type"]]),
            sample(self.ids, n + len(gold)),  # any passage, should the pools above run short
        ]
        chosen: list[str] = []
        for cap in (2, n):  # a few from each pool first, then fill in priority order
            for pool in pools:
                chosen += [p for p in pool if p not in gold and p not in chosen][: min(cap, n - len(chosen))]
        return chosen

    def build_questions(self) -> list[Row]:
        cfg = self.cfg
        two = round(cfg.num_questions * cfg.two_hop_fraction)
        want = {"single": cfg.num_questions - two, "bridge": two - round(two * cfg.comparison_fraction)}
        want["comparison"] = two - want["bridge"]
        pools = self.pools()
        take = {k: min(want[k], len(pools[k])) for k in want}
        for k in take:  # a short pool hands its shortfall to the others
            take[k] = min(len(pools[k]), take[k] + cfg.num_questions - sum(take.values()))
        if sum(take.values()) < cfg.num_questions:
            raise ConfigError(
                f"SynthWorldConfig.num_questions: a world of ~{cfg.num_passages} passages supports at most "
                f"{sum(take.values())} questions, got {cfg.num_questions}"
            )
        chosen = [(k, facts) for k in want for facts in pools[k][: take[k]]]
        self.rng.shuffle(chosen)
        return [self.question(f"w{cfg.seed}-q{i:05d}", k, fs) for i, (k, fs) in enumerate(chosen, start=1)]


def generate_world(config: SynthWorldConfig) -> World:
    """Invent the world for `config` (deterministic by `config.seed`) and return it in memory."""
    b = _Builder(config)
    b.build_entities()
    b.build_twins()
    b.build_passages()
    b.index()
    questions = b.build_questions()
    meta = [{k: v for k, v in p.items() if k != "text"} for p in b.passages]
    corpus = [passage_record(p["id"], p["title"], p["text"]) for p in b.passages]
    return World(
        config=config,
        entities=b.entities,
        facts=b.facts,
        passage_meta=meta,
        corpus=Dataset.from_list(corpus, features=PASSAGE_FEATURES),
        questions=Dataset.from_list(questions, features=QA_FEATURES),
    )
