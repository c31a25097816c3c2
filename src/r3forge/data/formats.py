"""Per-format converters: one raw source record -> one canonical record (see `records.py`).

A converter is `convert(raw, index, ctx) -> dict`: `raw` is the decoded JSON value, `index` its 0-based position
in the file (or Hub split), `ctx` the id prefix and `source` label. Converters raise `RecordError` (message
only); the loader adds the file and line.

Id rules: a record's own id field when present, else `<prefix>-<index>` (the prefix is the file stem, or
`<name>-<split>` on the Hub). A question's own paragraphs get `<question id>-<paragraph index>` (MuSiQue:
the paragraph's `idx`). HotpotQA sentences are joined with "" (they carry their own leading spaces) and
stripped, which reproduces the shared wiki_paragraphs corpus.

Graded relevance (HotpotQA, MuSiQue, PopQA): 0 for a paragraph marked not supporting; 1 supporting; 2
supporting and its evidence (HotpotQA: the supporting sentences; MuSiQue/PopQA: the paragraph text)
contains a gold answer as whole tokens after SQuAD normalization (`contains_answer`, the same rule as
the RA-R cover metric); -1 when the source does not mark support (e.g. PopQA without `is_supporting`).
SQuAD: the context is the gold paragraph, 2 when it contains the answer, else 1.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from r3forge.data.records import RELEVANCE_UNKNOWN, passage_record, qa_record, split_flashrag_contents
from r3forge.metrics.qa import answer_in_text


class RecordError(ValueError):
    """A record does not match its format; the message names the field (the loader adds file and line)."""


@dataclass(frozen=True)
class RecordContext:
    """Per-file settings of a converter: generated ids are `<prefix>-<index>`; `source` labels QA records."""

    prefix: str
    source: str


Converter = Callable[[Any, int, RecordContext], dict[str, Any]]

_MISSING: Any = object()
_TYPE_NAMES = {str: "a string", int: "an integer", list: "a list", dict: "an object", bool: "a boolean"}


def contains_answer(text: str, answers: Sequence[str]) -> bool:
    """Whether a gold answer occurs in `text` as whole tokens (the project's RA-R cover rule,
    `metrics.qa.answer_in_text`: SQuAD normalization); False without answers.

    >>> contains_answer("It was a politician.", ["Politician"]), contains_answer("a politician", ["pol"])
    (True, False)
    """
    return bool(answers) and answer_in_text(list(answers), text)


def _type(value: Any) -> str:
    return "null" if value is None else _TYPE_NAMES.get(type(value), type(value).__name__)


def _obj(raw: Any, where: str = "record") -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise RecordError(f"{where} must be a JSON object, got {_type(raw)}")
    return raw


def _get(
    rec: dict[str, Any], name: str, kind: type | tuple[type, ...], default: Any = _MISSING, at: str = ""
) -> Any:
    """`rec[name]` checked against `kind`; `default` when absent or null (else `RecordError`)."""
    value = rec.get(name)
    if value is None:
        if default is not _MISSING:
            return default
        raise RecordError(
            f"missing field {at + name!r}" if name not in rec else f"field {at + name!r} is null"
        )
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        wanted = " or ".join(_TYPE_NAMES.get(k, k.__name__) for k in kinds)
        raise RecordError(f"field {at + name!r} must be {wanted}, got {_type(value)}")
    return value


def _string_list(value: list[Any], field: str) -> list[str]:
    bad = [v for v in value if not isinstance(v, str | int | float) or isinstance(v, bool)]
    if bad:
        raise RecordError(f"field {field!r} must be a list of strings, found {_type(bad[0])}")
    return [str(v) for v in value]


def _strings(rec: dict[str, Any], name: str, default: Any = _MISSING, at: str = "") -> list[str]:
    return _string_list(_get(rec, name, list, default, at), at + name)


def _record_id(rec: dict[str, Any], name: str, index: int, ctx: RecordContext) -> str:
    if rec.get(name) in (None, ""):
        return f"{ctx.prefix}-{index}"
    return str(_get(rec, name, (str, int)))


def _dedupe(values: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(v for v in values if v))


def _leftovers(rec: dict[str, Any], used: Iterable[str]) -> dict[str, Any]:
    used = set(used)
    return {k: v for k, v in rec.items() if k not in used}


def _graded(supporting: Any, evidence: str, answers: list[str], at: str) -> int:
    if supporting is None:
        return RELEVANCE_UNKNOWN
    if not isinstance(supporting, bool):
        raise RecordError(f"field {at + 'is_supporting'!r} must be true or false, got {_type(supporting)}")
    if not supporting:
        return 0
    return 2 if contains_answer(evidence, answers) else 1


def _paragraphs(rec: dict[str, Any], qid: str, text_field: str, answers: list[str]) -> list[dict[str, Any]]:
    """MuSiQue/PopQA `paragraphs[{title, <text_field>, is_supporting?, idx?}]` with graded relevance."""
    passages = []
    for i, raw in enumerate(_get(rec, "paragraphs", list, [])):
        at = f"paragraphs[{i}]."
        p = _obj(raw, at[:-1])
        text = _get(p, text_field, str, at=at)
        passages.append(
            {
                "id": f"{qid}-{p.get('idx', i)}",
                "title": _get(p, "title", str, "", at),
                "text": text,
                "relevance": _graded(p.get("is_supporting"), text, answers, at),
            }
        )
    return passages


def flashrag_qa(raw: Any, index: int, ctx: RecordContext) -> dict[str, Any]:
    """FlashRAG dataset `{id, question, golden_answers[], metadata?}`."""
    rec = _obj(raw)
    meta = _leftovers(rec, ("id", "question", "golden_answers", "metadata"))
    extra = rec.get("metadata")
    if extra is not None:
        meta = {**extra, **meta} if isinstance(extra, dict) else {**meta, "metadata": extra}
    question, answers = _get(rec, "question", str), _strings(rec, "golden_answers")
    return qa_record(_record_id(rec, "id", index, ctx), question, answers, ctx.source, metadata=meta)


def answer_list_qa(raw: Any, index: int, ctx: RecordContext) -> dict[str, Any]:
    """NQ-open / AmbigQA / other `{question, answer[]}` lists (id generated unless present)."""
    rec = _obj(raw)
    question, answers = _get(rec, "question", str), _strings(rec, "answer")
    meta = _leftovers(rec, ("id", "question", "answer"))
    return qa_record(_record_id(rec, "id", index, ctx), question, answers, ctx.source, metadata=meta)


def hotpotqa_hf(raw: Any, index: int, ctx: RecordContext) -> dict[str, Any]:
    """HF `hotpot_qa` (distractor/fullwiki): supporting_facts{title[],sent_id[]}, context{title[],sentences[][]}."""
    rec = _obj(raw)
    context, facts = _get(rec, "context", dict), _get(rec, "supporting_facts", dict)
    titles, sentences = (
        _strings(context, "title", at="context."),
        _get(context, "sentences", list, at="context."),
    )
    fact_titles = _strings(facts, "title", at="supporting_facts.")
    fact_ids = _get(facts, "sent_id", list, at="supporting_facts.")
    if len(titles) != len(sentences) or len(fact_titles) != len(fact_ids):
        raise RecordError("context (or supporting_facts) title and sentence lists differ in length")
    pairs = [
        (t, _string_list(s, f"context.sentences[{i}]"))
        for i, (t, s) in enumerate(zip(titles, sentences, strict=True))
    ]
    return _hotpot(rec, "id", pairs, list(zip(fact_titles, fact_ids, strict=True)), index, ctx)


def hotpotqa_original(raw: Any, index: int, ctx: RecordContext) -> dict[str, Any]:
    """Original HotpotQA: _id, supporting_facts[[title, sent_id]], context[[title, [sentences]]].

    Also accepts the AMOR variant whose facts are `[title, [sent_ids], sentences, retrieved_doc]`
    (the extra items are dropped).
    """
    rec = _obj(raw)
    pairs = []
    for i, item in enumerate(_get(rec, "context", list)):
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[1], list)) or not isinstance(
            item[0], str
        ):
            raise RecordError(f"context[{i}] must be [title, [sentences]]")
        pairs.append((item[0], _string_list(item[1], f"context[{i}][1]")))
    facts = []
    for i, item in enumerate(_get(rec, "supporting_facts", list)):
        if not (isinstance(item, list) and len(item) >= 2 and isinstance(item[0], str)):
            raise RecordError(f"supporting_facts[{i}] must be [title, sent_id]")
        facts += [(item[0], sid) for sid in (item[1] if isinstance(item[1], list) else [item[1]])]
    return _hotpot(rec, "_id" if "_id" in rec else "id", pairs, facts, index, ctx)


def _hotpot(
    rec: dict[str, Any],
    id_field: str,
    context: list[tuple[str, list[str]]],
    facts: list[tuple[str, Any]],
    index: int,
    ctx: RecordContext,
) -> dict[str, Any]:
    if any(not isinstance(s, int) or isinstance(s, bool) for _, s in facts):
        raise RecordError("supporting fact sent_id must be an integer")
    qid = _record_id(rec, id_field, index, ctx)
    answer = _get(rec, "answer", str, "")
    answers = [answer] if answer else []
    support: dict[str, set[int]] = defaultdict(set)
    for title, sent_id in facts:
        support[title].add(sent_id)
    passages = []
    for i, (title, sentences) in enumerate(context):
        relevance = 0
        if title in support:
            evidence = " ".join(sentences[s] for s in sorted(support[title]) if 0 <= s < len(sentences))
            relevance = _graded(True, evidence, answers, "")
        passages.append(
            {"id": f"{qid}-{i}", "title": title, "text": "".join(sentences).strip(), "relevance": relevance}
        )
    return qa_record(
        qid,
        _get(rec, "question", str),
        answers,
        ctx.source,
        passages=passages,
        supporting_facts=[{"title": t, "sent_id": s} for t, s in facts],
        metadata=_leftovers(rec, (id_field, "question", "answer", "supporting_facts", "context")),
    )


def musique(raw: Any, index: int, ctx: RecordContext) -> dict[str, Any]:
    """MuSiQue: paragraphs[{idx,title,paragraph_text,is_supporting}] (optional), question_decomposition."""
    rec = _obj(raw)
    qid = _record_id(rec, "id", index, ctx)
    answers = _dedupe([_get(rec, "answer", str, ""), *_strings(rec, "answer_aliases", [])])
    steps = _get(rec, "question_decomposition", list, [])
    steps = [_obj(s, f"question_decomposition[{i}]") for i, s in enumerate(steps)]
    sub_questions = [
        {
            "question": _get(s, "question", str, at=f"question_decomposition[{i}]."),
            "answer": s.get("answer") or "",
        }
        for i, s in enumerate(steps)
    ]
    used = ("id", "question", "answer", "answer_aliases", "paragraphs", "question_decomposition")
    meta = _leftovers(rec, used)
    details = [_leftovers(s, ("question", "answer")) for s in steps]
    if any(details):  # sub-question ids, paragraph_support_idx, document_id
        meta["question_decomposition"] = details
    return qa_record(
        qid,
        _get(rec, "question", str),
        answers,
        ctx.source,
        passages=_paragraphs(rec, qid, "paragraph_text", answers),
        sub_questions=sub_questions,
        metadata=meta,
    )


def popqa(raw: Any, index: int, ctx: RecordContext) -> dict[str, Any]:
    """PopQA: possible_answers (a JSON string list, or a list), optional paragraphs[{title,text,is_supporting?}]."""
    rec = _obj(raw)
    qid = _record_id(rec, "id", index, ctx)
    possible = _get(rec, "possible_answers", (str, list))
    if isinstance(possible, str):
        try:
            possible = json.loads(possible)
        except json.JSONDecodeError as e:
            raise RecordError(f"field 'possible_answers' is not a JSON list: {e.msg}") from None
        if not isinstance(possible, list):
            raise RecordError(f"field 'possible_answers' must encode a list, got {_type(possible)}")
    answers = _string_list(possible, "possible_answers")
    meta = _leftovers(rec, ("id", "question", "possible_answers", "paragraphs"))
    passages = _paragraphs(rec, qid, "text", answers)
    return qa_record(qid, _get(rec, "question", str), answers, ctx.source, passages=passages, metadata=meta)


_TRIVIAQA_DROPPED = ("entity_pages", "search_results")  # HF rc configs: whole documents, too big for metadata


def triviaqa(raw: Any, index: int, ctx: RecordContext) -> dict[str, Any]:
    """TriviaQA: `{question_id, turns[question], answer[aliases]}` or HF `{question, question_id, answer{value, aliases}}`."""
    rec = _obj(raw)
    used = ["question_id", "question", "answer", *_TRIVIAQA_DROPPED]
    if "question" in rec:
        question = _get(rec, "question", str)
    else:
        turns = _strings(rec, "turns")
        if not turns:
            raise RecordError("field 'turns' is empty (expected [question])")
        question = turns[0]
        used += ["turns"] if len(turns) == 1 else []
    answer = rec.get("answer")
    if isinstance(answer, dict):
        answers = _dedupe(
            [_get(answer, "value", str, "", "answer."), *_strings(answer, "aliases", [], "answer.")]
        )
    else:
        answers = _strings(rec, "answer")
    meta = _leftovers(rec, used)
    return qa_record(_record_id(rec, "question_id", index, ctx), question, answers, ctx.source, metadata=meta)


def squad(raw: Any, index: int, ctx: RecordContext) -> dict[str, Any]:
    """SQuAD `{context, question, answer}` (or HF `answers{text[]}`); the context becomes the gold passage."""
    rec = _obj(raw)
    qid = _record_id(rec, "id", index, ctx)
    context = _get(rec, "context", str)
    if "answers" in rec:
        given = rec["answers"]
        answers = (
            _strings(given, "text", at="answers.") if isinstance(given, dict) else _strings(rec, "answers")
        )
    else:
        given = _get(rec, "answer", (str, list))
        answers = [given] if isinstance(given, str) else _string_list(given, "answer")
    answers = _dedupe(answers)
    passage = {
        "id": f"{qid}-0",
        "title": _get(rec, "title", str, ""),
        "text": context,
        "relevance": 2 if contains_answer(context, answers) else 1,
    }
    meta = _leftovers(rec, ("id", "title", "context", "question", "answer", "answers"))
    return qa_record(qid, _get(rec, "question", str), answers, ctx.source, passages=[passage], metadata=meta)


def flashrag_passage(raw: Any, index: int, ctx: RecordContext) -> dict[str, str]:
    """FlashRAG corpus `{id, contents: '"Title"\\ntext'}`; like FlashRAG, an unquoted first line is the title too."""
    rec = _obj(raw)
    contents = _get(rec, "contents", str)
    title, text = split_flashrag_contents(contents)
    return passage_record(_record_id(rec, "id", index, ctx), title, text)


def plain_passage(raw: Any, index: int, ctx: RecordContext) -> dict[str, str]:
    """`{id?, title?, text}`, or a `(title, [sentences] | text)` entry of a `{title: [sentences]}` object.

    Sentences are joined with "" (HotpotQA sentences carry their own leading spaces), then stripped.
    """
    if isinstance(raw, tuple):
        title, body = raw
        if isinstance(body, list):
            body = "".join(_string_list(body, title)).strip()
        elif not isinstance(body, str):
            raise RecordError(f"entry {title!r} must be a list of sentences or a string, got {_type(body)}")
        return passage_record(f"{ctx.prefix}-{index}", title, body)
    rec = _obj(raw)
    return passage_record(
        _record_id(rec, "id", index, ctx), _get(rec, "title", str, ""), _get(rec, "text", str)
    )


QA_CONVERTERS: dict[str, Converter] = {
    "flashrag": flashrag_qa,
    "hotpotqa_hf": hotpotqa_hf,
    "hotpotqa": hotpotqa_original,
    "musique": musique,
    "popqa": popqa,
    "nq_open": answer_list_qa,
    "ambigqa": answer_list_qa,
    "triviaqa": triviaqa,
    "squad": squad,
}
CORPUS_CONVERTERS: dict[str, Converter] = {"flashrag_corpus": flashrag_passage, "passages": plain_passage}
DEFAULT_SOURCES = {name: name for name in QA_CONVERTERS} | {"hotpotqa_hf": "hotpotqa"}
