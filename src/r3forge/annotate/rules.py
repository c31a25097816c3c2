"""Rule-labelled verbal annotations from gold evidence: a deterministic "teacher" for SFT development.

Where a dataset marks supporting facts (HotpotQA), every (question, own passage) pair gets a comment and a
1-5 score by a fixed rule, in exactly the format and prompt of the teacher annotations (`annotate verbal`),
so `r3forge sft` trains on it unchanged. It gives students a graded, evidence-citing target while a real
teacher is out of reach (the embedded 135M teacher scores nearly everything 1). The rule, per passage:

    5  gold passage that contains the answer      It states that "<its supporting sentence>", which answers ...
    4  gold passage without the answer            It states that "<its supporting sentence>", a fact the ...
    3  distractor that contains the answer string It mentions "<answer>", but not in the sense the question ...
    2  distractor with >= half the question's     It is about <title> and mentions <words>, but says nothing ...
       content words (title + text)
    1  any other distractor                        It is about <title>, which the question does not concern.

Yes/no answers are never matched as strings. Gold relevance (0/1/2) is kept for NDCG.

Two options make the labels match what a reranker sees inside the search agent (`r3forge eval agent`, GRPO):
`doc_max_words` labels each passage cut to its first N words, as the agent's environment shows it (a gold
passage whose supporting sentence is cut off is then labelled by the distractor rules: the text shown does
not state the fact), and `sub_questions` adds each multi-hop question's sub-questions (the queries a search
agent issues) as questions of their own, with the hop's supporting passage as the gold one. With `cite_all`
every comment quotes the passage, the 1-3 levels their sentence nearest the question (the answer's, else the
one sharing most content words): `It states that "<sentence>", which the question does not concern.`

    r3forge annotate rules --qa_path ../shared/data/hotpotqa/rpt_distractor_dev_sample_train.jsonl \\
        --output_dir runs/annotate/rules_hotpotqa_sft
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from r3forge.annotate.export import ExportSFTConfig, build_sft, write_sft
from r3forge.annotate.verbal import load_template
from r3forge.data.loaders import load_qa
from r3forge.errors import ConfigError
from r3forge.metrics.qa import answer_in_text, normalize_answer
from r3forge.text import content_words, quote, sentences

RULE_VERSION = (
    "rule_labels_v3"  # v2: citations checked against the answer (cited); v3: r3forge.text's stop words
)


@dataclass
class RulesConfig:
    qa_path: str = field(metadata={"help": "QA records whose passages carry gold relevance (HotpotQA)."})
    output_dir: str = field(
        metadata={"help": "Folder for the SFT DatasetDict (save_to_disk) and <split>.jsonl."}
    )
    qa_format: str = field(default="auto", metadata={"help": "QA format for load_qa (auto: detect)."})
    max_questions: int | None = field(
        default=None, metadata={"help": "Use only the first N questions (unset: all)."}
    )
    validation_fraction: float = field(default=0.1, metadata={"help": "Share of questions held out."})
    seed: int = field(default=0, metadata={"help": "Seed of the question split and of the rebalancing."})
    max_per_score: int | None = field(
        default=None, metadata={"help": "Cap each score class of the training split at N rows."}
    )
    system_prompt: str = field(default="", metadata={"help": "Optional system message of every prompt."})
    score_first: bool = field(
        default=False,
        metadata={"help": "Variant, not the paper's format: completions 'Score: s' then 'Comment: ...'."},
    )
    doc_max_words: int = field(
        default=0,
        metadata={
            "help": "Label each passage cut to its first N words, as the search agent's environment "
            "shows it (its doc_max_words); 0: the whole passage.",
            "min": 0,
        },
    )
    sub_questions: bool = field(
        default=False,
        metadata={
            "help": "Also label each multi-hop question's sub-questions (records' `sub_questions`, "
            "aligned with `supporting_facts`), the hop's supporting passage as the gold one."
        },
    )
    cite_all: bool = field(
        default=False,
        metadata={
            "help": "Every comment opens with a quote of the passage: a distractor's sentence nearest the "
            'question too (It states that "...", which the question does not concern), so a student '
            "first copies the evidence, then judges it."
        },
    )
    overwrite: bool = field(
        default=False, metadata={"help": "Move an existing output folder aside to <folder>.replaced-<time>."}
    )


def evidence(split: list[str], record: dict, answers: list[str]) -> str:
    """The sentence a gold passage without sentence-level supporting facts (MuSiQue, the synthetic world) is
    cited by: the first that contains an answer, else the one sharing most of the question's content words.

    >>> evidence(["Ann was born in 1770.", "Ann was born in Paris."], {"question": "Where was Ann born?"}, ["Paris"])
    'Ann was born in Paris.'
    """
    for sentence in split:
        if answers and answer_in_text(answers, sentence):
            return sentence
    question = set(content_words(record["question"], min_chars=3))
    return max(split, key=lambda s: len(question & set(content_words(s, min_chars=3))))


def cited(split: list[str], record: dict, passage: dict, answers: list[str]) -> str:
    """The sentence a gold passage is cited by: its supporting-fact sentence (by title and sentence id) where
    that names the answer, else the first sentence that names the answer; for a passage without the answer (a
    bridge), the supporting-fact sentence where it names a sub-question's answer (the bridge entity), else the
    first that does, else the supporting-fact sentence, else `evidence`. (Two passages may share a title, a
    sentence id indexes only one of them: the answer check keeps the citation on the passage's own text.)

    >>> rec = {"question": "Where was the founder of X born?", "supporting_facts": [{"title": "X", "sent_id": 0}],
    ...        "sub_questions": [{"question": "Who founded X?", "answer": "Ann"}]}
    >>> cited(["X is old.", "Ann founded X."], rec, {"title": "X"}, ["Rome"])
    'Ann founded X.'
    """
    ids = [f["sent_id"] for f in record.get("supporting_facts") or [] if f["title"] == passage["title"]]
    by_id = split[ids[0]] if ids and 0 <= ids[0] < len(split) else None
    bridges = [
        str(s["answer"]) for s in record.get("sub_questions") or [] if str(s.get("answer", "")).strip()
    ]
    for names in (answers, bridges):
        named = [x for x in split if names and answer_in_text(names, x)]
        if named:
            return by_id if by_id in named else named[0]
    return by_id if by_id is not None else evidence(split, record, answers)


def rule_label(record: dict, passage: dict, cite_all: bool = False) -> tuple[int, str]:
    """(score, comment) of one (question record, own passage) by the module's rule; with `cite_all` every
    comment opens with a quote of the passage (a distractor's: its sentence nearest the question).

    >>> rec = {"question": "Which city hosts the Louvre museum?", "answers": ["Paris"],
    ...        "supporting_facts": [{"title": "Louvre", "sent_id": 1}]}
    >>> rule_label(rec, {"title": "Louvre", "text": "It is a museum. The Louvre is in Paris.", "relevance": 2})
    (5, 'It states that "The Louvre is in Paris", which answers the question directly.')
    >>> rule_label(rec, {"title": "Nice", "text": "Nice is a city with a museum.", "relevance": 0})[0]
    2
    >>> rule_label(rec, {"title": "Nice", "text": "Nice is old. It has a museum.", "relevance": 0}, cite_all=True)
    (1, 'It states that "It has a museum", which the question does not concern.')
    >>> rule_label(rec, shown({"title": "Louvre", "text": "It is a museum. The Louvre is in Paris.", "relevance": 2}, 4))
    (2, 'It is about Louvre and mentions louvre, museum, but says nothing the question needs.')
    """
    answers = [a for a in record.get("answers") or [] if normalize_answer(a) not in ("", "yes", "no")]
    has_answer = bool(answers) and answer_in_text(answers, passage["text"])
    split = sentences(passage["text"]) or [passage["text"]]
    if passage["relevance"] > 0:
        full = passage.get("full_text", passage["text"])  # sentence ids index the whole passage
        sentence = cited(sentences(full) or [full], record, passage, answers)
        cut = full != passage["text"] and " ".join(sentence.split()) not in passage["text"]  # doc_max_words
        if cut and not has_answer:  # the fact is not shown: labelled as what is shown
            return rule_label(
                record, {k: v for k, v in passage.items() if k != "full_text"} | {"relevance": 0}, cite_all
            )
        if cut:
            sentence = evidence(split, record, answers)  # the shown sentence with the answer
        if has_answer or passage["relevance"] >= 2:
            return 5, f'It states that "{quote(sentence)}", which answers the question directly.'
        return 4, f'It states that "{quote(sentence)}", a fact the question needs, but not the answer itself.'
    # cite_all: a distractor is quoted by its answer's sentence, else the one nearest the question
    nearest = f'It states that "{quote(evidence(split, record, answers))}"' if cite_all else ""
    if has_answer:
        if cite_all:
            return 3, f"{nearest}, but not in the sense the question asks about."
        return 3, f'It mentions "{answers[0]}", but not in the sense the question asks about.'
    question = set(content_words(record["question"], min_chars=3))
    shared = list(
        dict.fromkeys(
            t for t in content_words(passage["title"] + " " + passage["text"], min_chars=3) if t in question
        )
    )
    if question and len(shared) >= len(question) / 2:
        if cite_all:
            return 2, f"{nearest}, which is related to the question but says nothing it needs."
        return (
            2,
            f"It is about {passage['title']} and mentions {', '.join(shared[:3])}, but says nothing the question needs.",
        )
    if cite_all:
        return 1, f"{nearest}, which the question does not concern."
    return 1, f"It is about {passage['title']}, which the question does not concern."


def shown(passage: dict, max_words: int) -> dict:
    """The passage as a search agent's environment shows it: its first `max_words` words joined by single
    spaces (0: all, unchanged); a cut passage keeps its whole text in `full_text`.

    >>> shown({"text": "One two. Three four five."}, 3)
    {'text': 'One two. Three', 'full_text': 'One two. Three four five.'}
    >>> shown({"text": "One two."}, 3)
    {'text': 'One two.'}
    """
    words = passage["text"].split()
    if not max_words or len(words) <= max_words:
        return passage
    return passage | {"text": " ".join(words[:max_words]), "full_text": passage["text"]}


def sub_records(record: dict) -> list[dict]:
    """A multi-hop record's sub-questions as records of their own: sub-question i's gold passage is the gold
    passage of supporting fact i's title (relevance 2), every other passage relevance 0; [] where they do not
    align.

    >>> rec = {"id": "q", "question": "Where was the founder of X born?", "answers": ["Rome"],
    ...        "passages": [{"title": "X", "relevance": 1}, {"title": "Ann", "relevance": 2}],
    ...        "supporting_facts": [{"title": "X", "sent_id": 0}, {"title": "Ann", "sent_id": 1}],
    ...        "sub_questions": [{"question": "Who founded X?", "answer": "Ann"},
    ...                          {"question": "Where was Ann born?", "answer": "Rome"}]}
    >>> [(r["id"], r["answers"], [p["relevance"] for p in r["passages"]]) for r in sub_records(rec)]
    [('q-sub1', ['Ann'], [2, 0]), ('q-sub2', ['Rome'], [0, 2])]
    """
    subs, facts = record.get("sub_questions") or [], record.get("supporting_facts") or []
    if not subs or len(subs) != len(facts):
        return []
    out = []
    for i, (sub, fact) in enumerate(zip(subs, facts, strict=True), 1):
        gold = [p["title"] == fact["title"] and p["relevance"] > 0 for p in record["passages"]]
        passages = [p | {"relevance": 2 if g else 0} for p, g in zip(record["passages"], gold, strict=True)]
        out.append(
            {
                "id": f"{record['id']}-sub{i}",
                "question": sub["question"],
                "answers": [sub["answer"]],
                "passages": passages,
                "supporting_facts": [fact],
            }
        )
    return out


def rule_annotations(
    records: Iterable[dict], doc_max_words: int = 0, sub_questions: bool = False, cite_all: bool = False
) -> Iterator[dict[str, Any]]:
    """Flat annotation records (the shape `export_sft` reads from a teacher run) for every own passage (cut
    to `doc_max_words`), with `sub_questions` for every sub-question of a multi-hop record as well, and with
    `cite_all` a quote in every comment."""
    for top in records:
        if not top.get("passages"):
            raise ConfigError(f"question {top['id']}: no passages to label (rules need the own passages)")
        if all(p["relevance"] < 0 for p in top["passages"]):
            raise ConfigError(f"question {top['id']}: passages without gold relevance; rules need it")
        # the split is by question: a sub-question (its own question_id) keeps its question's group_id
        for record in [top, *(sub_records(top) if sub_questions else [])]:
            yield from _labelled(record, str(top["id"]), doc_max_words, cite_all)


def _labelled(record: dict, group: str, doc_max_words: int, cite_all: bool) -> Iterator[dict[str, Any]]:
    for full in record["passages"]:
        passage = shown(full, doc_max_words)
        score, comment = rule_label(record, passage, cite_all)
        yield {
            "question_id": str(record["id"]),
            "group_id": group,
            "question": record["question"],
            "doc_id": passage["id"],
            "doc_title": passage["title"],
            "doc_text": passage["text"],
            "comment": comment,
            "score": score,
            "score_logprob": None,
            "relevance": passage["relevance"],
        }


def rules_main(config: RulesConfig) -> dict[str, int]:
    """Label, split by question and write the SFT DatasetDict; returns rows per split and per score."""
    out = Path(config.output_dir)
    if out.exists() and any(out.iterdir()) and not config.overwrite:
        raise ConfigError(f"{out}: exists and is not empty; pass --overwrite or choose another folder")
    records = list(load_qa(config.qa_path, config.qa_format))[: config.max_questions]
    export = ExportSFTConfig(
        input_dir=config.qa_path,
        output_dir=str(out),
        system_prompt=config.system_prompt,
        validation_fraction=config.validation_fraction,
        seed=config.seed,
        max_per_score=config.max_per_score,
        score_first=config.score_first,
    )
    template, _ = load_template(None)
    dsd = build_sft(
        rule_annotations(records, config.doc_max_words, config.sub_questions, config.cite_all),
        export,
        template,
    )
    write_sft(dsd, out)
    counts: dict[str, int] = {}
    for name, split in dsd.items():
        counts[name] = len(split)
        for s in split["score"] if len(split) else []:
            counts[f"score_{s}"] = counts.get(f"score_{s}", 0) + 1
    (out / "labels.json").write_text(
        json.dumps(
            {
                "rule": RULE_VERSION,
                "score_first": config.score_first,
                "doc_max_words": config.doc_max_words,
                "sub_questions": config.sub_questions,
                "cite_all": config.cite_all,
                **counts,
            },
            indent=1,
        )
        + "\n"
    )
    return counts
