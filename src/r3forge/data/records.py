"""Canonical records shared by every loader, generator and pipeline.

Everything is a `datasets.Dataset` with one of two schemas:

* **QA example** (`QA_FEATURES`): one question with its gold answers and, when the source has them, the
  question's own passages with graded relevance, supporting facts and sub-questions.
* **Passage** (`PASSAGE_FEATURES`): one retrievable unit of a corpus.

Graded relevance (`passages[].relevance`) is an int: 0 = not relevant, 1 = supporting evidence,
2 = supporting evidence that states the answer itself; -1 = unknown (the source does not say).
`gold_passage_ids` lists the ids of gold evidence, either among `passages` or in a separate corpus
(open-retrieval setting; the synthetic world uses this).
"""

from __future__ import annotations

import json
from typing import Any

from datasets import Features, List, Value

RELEVANCE_UNKNOWN = -1

PASSAGE_FEATURES = Features(
    {
        "id": Value("string"),
        "title": Value("string"),
        "text": Value("string"),
    }
)

QA_FEATURES = Features(
    {
        "id": Value("string"),
        "question": Value("string"),
        "answers": List(Value("string")),
        "passages": List(
            {
                "id": Value("string"),
                "title": Value("string"),
                "text": Value("string"),
                "relevance": Value("int32"),
            }
        ),
        "gold_passage_ids": List(Value("string")),
        "supporting_facts": List({"title": Value("string"), "sent_id": Value("int32")}),
        "sub_questions": List({"question": Value("string"), "answer": Value("string")}),
        # free-form source fields that have no canonical slot (HotpotQA type/level, PopQA s_pop, ...), as JSON
        "metadata": Value("string"),
        # where the record came from, e.g. "hotpotqa", "nq_open", "synth_world"
        "source": Value("string"),
    }
)


def qa_record(
    id: str,
    question: str,
    answers: list[str],
    source: str,
    passages: list[dict[str, Any]] | None = None,
    supporting_facts: list[dict[str, Any]] | None = None,
    sub_questions: list[dict[str, str]] | None = None,
    metadata: dict[str, Any] | None = None,
    gold_passage_ids: list[str] | None = None,
) -> dict[str, Any]:
    """Build one QA example dict in canonical form (`QA_FEATURES`).

    `gold_passage_ids` defaults to the ids of `passages` with relevance > 0.

    >>> r = qa_record("q1", "Who?", ["Ada"], "demo", passages=[
    ...     {"id": "p1", "title": "Ada", "text": "Ada wrote it.", "relevance": 2}])
    >>> r["gold_passage_ids"], r["metadata"]
    (['p1'], '{}')
    """
    passages = [
        {
            "id": str(p["id"]),
            "title": str(p.get("title") or ""),
            "text": str(p["text"]),
            "relevance": int(p.get("relevance", RELEVANCE_UNKNOWN)),
        }
        for p in (passages or [])
    ]
    if gold_passage_ids is None:
        gold_passage_ids = [p["id"] for p in passages if p["relevance"] > 0]
    return {
        "id": str(id),
        "question": str(question),
        "answers": [str(a) for a in answers],
        "passages": passages,
        "gold_passage_ids": [str(g) for g in gold_passage_ids],
        "supporting_facts": [
            {"title": str(f["title"]), "sent_id": int(f["sent_id"])} for f in (supporting_facts or [])
        ],
        "sub_questions": [
            {"question": str(s["question"]), "answer": str(s["answer"])} for s in (sub_questions or [])
        ],
        "metadata": json.dumps(metadata or {}, ensure_ascii=False, sort_keys=True),
        "source": source,
    }


def passage_record(id: str, title: str, text: str) -> dict[str, str]:
    """Build one passage dict in canonical form (`PASSAGE_FEATURES`)."""
    return {"id": str(id), "title": str(title or ""), "text": str(text)}


def flashrag_contents(title: str, text: str) -> str:
    """FlashRAG corpus `contents`: the title in double quotes on the first line, then the text.

    >>> flashrag_contents("Paris", "Paris is the capital of France.")
    '"Paris"\\nParis is the capital of France.'
    """
    return f'"{title}"\n{text}'


def split_flashrag_contents(contents: str) -> tuple[str, str]:
    """Inverse of `flashrag_contents`, as FlashRAG reads it: the first line is the title (its surrounding
    double quotes removed, if any), the rest the text; contents without a newline have an empty title.

    >>> split_flashrag_contents('"Paris"\\nParis is the capital.')
    ('Paris', 'Paris is the capital.')
    >>> split_flashrag_contents('Absalon\\nAbsalon was a bishop.')
    ('Absalon', 'Absalon was a bishop.')
    >>> split_flashrag_contents('no title here')
    ('', 'no title here')
    """
    head, sep, rest = contents.partition("\n")
    if not sep:
        return "", contents
    if len(head) >= 2 and head.startswith('"') and head.endswith('"'):
        head = head[1:-1]
    return head, rest
