"""(question, document) pairs to annotate or rank: a question's own passages, or a retriever's top-n.

Both yield flat items: `question_id`, `question`, `answers`, `doc_id`, `doc_title`, `doc_text`, `rank`
(0-based), `retrieval_score` (None for own passages) and `relevance`, the gold label where the data has one
(own passages: the loader's label; retrieved: 1 when the passage is a gold passage by id or by title, 0 when
the question lists gold passages and this is not one, None when it lists none, as in NQ) and
`answer_in_doc` (a gold answer string occurs in the document; None without answers).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from itertools import islice

from r3forge.errors import ConfigError
from r3forge.metrics.qa import answer_in_text
from r3forge.retrieval.base import Retriever


def _answer_in_doc(answers: Sequence[str], text: str) -> bool | None:
    answers = [a for a in answers if a and a.strip()]
    return answer_in_text(answers, text) if answers else None


def _item(record: dict, rank: int, doc: dict, score: float | None, relevance: int | None) -> dict:
    return {
        "question_id": str(record["id"]),
        "question": record["question"],
        "answers": list(record.get("answers") or []),
        "doc_id": str(doc["id"]),
        "doc_title": doc.get("title") or "",
        "doc_text": doc["text"],
        "rank": rank,
        "retrieval_score": score,
        "relevance": relevance,
        "answer_in_doc": _answer_in_doc(record.get("answers") or [], doc["text"]),
    }


def qa_items(
    records: Iterable[dict], max_questions: int | None = None, max_docs: int | None = None
) -> Iterator[dict]:
    """One item per (question, own passage) of canonical QA records; `relevance` is the gold label."""
    for record in islice(records, max_questions):
        for rank, passage in enumerate(record["passages"][:max_docs]):
            yield _item(record, rank, passage, None, passage["relevance"])


def gold_relevance(record: dict, doc: dict) -> int | None:
    """1 if `doc` is one of the record's gold passages (same id, or same title as a gold passage among its
    own passages, for corpora with other ids), 0 if not, None when the record names no gold passage.

    >>> rec = {"gold_passage_ids": ["p1"], "passages": [{"id": "p1", "title": "Paris"}]}
    >>> gold_relevance(rec, {"id": "wiki-9", "title": "Paris"}), gold_relevance(rec, {"id": "x", "title": "Rome"})
    (1, 0)
    """
    gold_ids = set(record.get("gold_passage_ids") or [])
    if not gold_ids:
        return None
    gold_titles = {p["title"] for p in record.get("passages") or [] if p["id"] in gold_ids and p.get("title")}
    return int(str(doc["id"]) in gold_ids or (bool(doc.get("title")) and doc["title"] in gold_titles))


def retrieved_items(
    records: Iterable[dict],
    retriever: Retriever,
    top_n: int,
    max_questions: int | None = None,
    batch_size: int = 64,
) -> Iterator[dict]:
    """One item per (question, retrieved passage): the retriever's top-`top_n` per question, best first,
    searched `batch_size` questions at a time."""
    if top_n < 1:
        raise ConfigError(f"top_n must be >= 1, got {top_n}")
    records = islice(records, max_questions)
    while chunk := list(islice(records, batch_size)):
        hits = retriever.search([r["question"] for r in chunk], top_n)
        docs = retriever.get(list(dict.fromkeys(pid for row in hits for pid, _ in row)))
        by_id = {str(d["id"]): d for d in docs}
        for record, row in zip(chunk, hits, strict=True):
            for rank, (pid, score) in enumerate(row):
                doc = by_id[str(pid)]
                yield _item(record, rank, doc, float(score), gold_relevance(record, doc))
