"""Prompt A: the fixed grounded-QA prompt of the final stage, as a synthesis step (cached, resumable).

    run_step(AnswerStep(), items, generator, EngineConfig("runs/eval/rag/answers"))

An item: `question_id`, `question`, `answers`, `documents` (the selected evidence, in reading order: raw
passages, or the verbal reranker's comments). With no document left (nothing admitted, or B cut them all),
the same prompt without the documents block asks the generator to answer from memory. Items with the same
question and the same evidence share one cached answer, whichever method selected it.

With a tokenizer and a `cue` (default "Answer:"), the chat template is applied here and the assistant turn is
pre-filled with the cue, sent as a raw prompt: small models then answer tersely (the foundation demo measured
F1 on gold evidence 0.05 -> 0.20 on 24 world questions with the cue).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from r3forge.backends.base import GenerationRequest, GenerationResult
from r3forge.metrics.qa import exact_match, f1_score, short_answer
from r3forge.synth.engine import Rejected

ANSWER_VERSION = "rag_answer_v1"
INSTRUCTION = (
    "Answer the question based on the given documents. Give only the answer, a short phrase, no sentence."
)
CLOSED_BOOK = "Answer the question. Give only the answer, a short phrase, no sentence."
DEMOS = (
    (
        ["The Eiffel Tower was completed in 1889 for the World's Fair in Paris."],
        "When was the Eiffel Tower completed?",
        "1889",
    ),
    (
        ["Hamlet is a tragedy by William Shakespeare, set in Denmark."],
        "Who wrote Hamlet?",
        "William Shakespeare",
    ),
)


def prompt_text(question: str, documents: list[str]) -> str:
    """The user turn of prompt A.

    >>> print(prompt_text("Who wrote Hamlet?", ["Hamlet is by Shakespeare."]))
    Answer the question based on the given documents. Give only the answer, a short phrase, no sentence.
    <BLANKLINE>
    Documents:
    [1] Hamlet is by Shakespeare.
    <BLANKLINE>
    Question: Who wrote Hamlet?
    >>> prompt_text("Who wrote Hamlet?", []).splitlines()[0] == CLOSED_BOOK
    True
    """
    if not documents:
        return f"{CLOSED_BOOK}\n\nQuestion: {question}"
    block = "\n".join(f"[{i}] {d}" for i, d in enumerate(documents, 1))
    return f"{INSTRUCTION}\n\nDocuments:\n{block}\n\nQuestion: {question}"


def evidence_sha(documents: list[str]) -> str:
    return hashlib.sha256(json.dumps(documents, ensure_ascii=False).encode("utf-8")).hexdigest()[:16]


@dataclass
class AnswerStep:
    """The generator's answer from the selected evidence; EM and F1 against the gold answers."""

    max_tokens: int = 32
    few_shot: bool = False
    cue: str = "Answer:"
    tokenizer: Any = field(default=None, repr=False, compare=False)  # None: chat messages, no cue
    name: str = field(default="rag_answer", init=False)

    def __post_init__(self) -> None:
        cue = f"+cue={self.cue}" if self.cue and self.tokenizer is not None else ""
        self.version = ANSWER_VERSION + ("+fs" if self.few_shot else "") + cue

    def key(self, item: dict) -> dict:
        return {"question_id": item["question_id"], "evidence_sha256": evidence_sha(item["documents"])}

    def prompt(self, item: dict) -> GenerationRequest:
        turns = []
        for documents, question, answer in DEMOS if self.few_shot else ():
            turns += [
                {"role": "user", "content": prompt_text(question, documents)},
                {"role": "assistant", "content": answer},
            ]
        messages = [*turns, {"role": "user", "content": prompt_text(item["question"], item["documents"])}]
        if self.tokenizer is None or not self.cue:
            return GenerationRequest(messages=messages, temperature=0.0, max_tokens=self.max_tokens)
        text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return GenerationRequest(prompt=text + self.cue, temperature=0.0, max_tokens=self.max_tokens)

    def parse(self, item: dict, result: GenerationResult) -> dict | Rejected:
        answer = short_answer(result.choices[0].text)
        if not answer:
            return Rejected("empty_answer", "the generator gave no answer")
        golds = list(item["answers"])
        return {
            **self.key(item),
            "answer": answer,
            "em": exact_match(answer, golds) if golds else 0.0,
            "f1": f1_score(answer, golds) if golds else 0.0,
        }
