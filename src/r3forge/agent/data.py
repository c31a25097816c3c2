"""The agent's questions: the instruction prompt, the held-out split and the closed-book filter.

Rows are what `GRPOTrainer` and `r3forge eval agent` read: `prompt` (chat messages: the instruction with
the question), `answers` (gold answer list), `question`, `id`. The split is a hash of the question id, so
train and held-out never share a question whatever the file order.

The closed-book filter (Verbal-R3's data step): a question is dropped when the base generator answers it
correctly (EM) in any of k samples without retrieval (k = 10, temperature 1.0), except yes/no questions,
which are kept (a coin flip answers them).

    r3forge data filter-closed-book --qa_path data/synth_world/questions.jsonl --output runs/agent/filtered.jsonl
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from r3forge.agent.reward import answerable
from r3forge.backends.base import GenerationRequest
from r3forge.backends.open import LLMConfig, open_llm
from r3forge.data.jsonio import write_jsonl
from r3forge.data.loaders import load_qa
from r3forge.errors import ConfigError
from r3forge.metrics.qa import exact_match, normalize_answer

INSTRUCTION_VERBAL = (
    "Answer the question. Think step by step. When you are missing a fact, search for it with "
    "<search> a short query </search>; the search engine returns documents between <information> and "
    "</information>, each with a short comment and a relevance score from 1 (useless) to 5 (states the "
    "answer). You may search several times. When you know the answer, write it inside <answer> and "
    "</answer>, only the answer in a few words, for example <answer> 1858 </answer>.\nQuestion: {question}"
)
INSTRUCTION_RAW = (
    "Answer the question. Think step by step. When you are missing a fact, search for it with "
    "<search> a short query </search>; the search engine returns documents between <information> and "
    "</information>. You may search several times. When you know the answer, write it inside <answer> and "
    "</answer>, only the answer in a few words, for example <answer> 1858 </answer>.\nQuestion: {question}"
)
EXAMPLE = (
    "\nExample:\nQuestion: In which city was the founder of Ardel Works born?\n"
    "I need the founder first. <search> founder of Ardel Works </search>\n\n<information>[Doc 1] States that "
    "Ardel Works was founded by Mira Vonn. (Relevance score: 5)</information>\n\n"
    "Now the birthplace. <search> Mira Vonn birthplace </search>\n\n<information>[Doc 1] Says Mira Vonn was "
    "born in Teslow. (Relevance score: 5)</information>\n\n<answer> Teslow </answer>\n"
)
CLOSED_BOOK = "Answer the question with a few words only.\nQuestion: {question}"


def instruction(question: str, observation: str = "verbal", example: bool = False) -> list[dict[str, str]]:
    """The chat prompt of one question (the instruction names the observation format); `example` shows one
    worked two-search trajectory first (small models need it to produce the tags at all).

    >>> instruction("Who?")[0]["content"].endswith("Question: Who?")
    True
    """
    template = INSTRUCTION_VERBAL if observation == "verbal" else INSTRUCTION_RAW
    if example:
        template = template.replace(
            "\nQuestion: {question}", EXAMPLE + "\nNow your question.\nQuestion: {question}"
        )
    return [{"role": "user", "content": template.format(question=question)}]


def is_heldout(question_id: Any, fraction: float) -> bool:
    """Whether a question is in the held-out split: a hash of its id below `fraction`.

    >>> [is_heldout(i, 0.5) for i in ("q1", "q2", "q3", "q4")]
    [False, False, True, True]
    """
    return hashlib.sha256(str(question_id).encode("utf-8")).digest()[0] / 256 < fraction


def load_agent_rows(
    path: str,
    split: str,
    heldout_fraction: float,
    observation: str = "verbal",
    limit: int | None = None,
    qa_format: str = "auto",
    example: bool = False,
) -> list[dict[str, Any]]:
    """The `split` ("train" | "heldout" | "all") rows of a QA file, first `limit` of them.

    Gold answers that normalize to the empty string (NQ-open's "A+", ")") are left out, since any answer
    that normalizes to nothing ("the") would match them; a question left without a gold answer is dropped,
    and the count goes to stderr."""
    if split not in ("train", "heldout", "all"):
        raise ConfigError(f"split must be train, heldout or all, got {split!r}")
    rows, unanswerable = [], []
    for r in load_qa(path, format=qa_format):
        if split != "all" and is_heldout(r["id"], heldout_fraction) != (split == "heldout"):
            continue
        if not r["answers"]:
            raise ConfigError(f"{path}: question {r['id']} has no gold answer")
        if not (answers := answerable(r["answers"])):
            unanswerable.append(f"{r['id']} {list(r['answers'])!r}")
            continue
        rows.append(
            {
                "id": r["id"],
                "question": r["question"],
                "answers": answers,
                "prompt": instruction(r["question"], observation, example),
            }
        )
        if limit is not None and len(rows) >= limit:
            break
    if unanswerable:
        print(
            f"{path}: dropped {len(unanswerable)} {split} question(s) whose every gold answer normalizes to "
            f"the empty string (e.g. {unanswerable[0]})",
            file=sys.stderr,
        )
    if not rows:
        raise ConfigError(f"{path}: no {split} questions (heldout_fraction={heldout_fraction})")
    return rows


def is_yes_no(answers: list[str]) -> bool:
    """Whether every gold answer is yes or no.

    >>> is_yes_no(["Yes"]), is_yes_no(["yes", "1858"])
    (True, False)
    """
    return all(normalize_answer(a) in ("yes", "no") for a in answers)


@dataclass
class FilterConfig:
    qa_path: str = field(metadata={"help": "Questions to filter (any format `load_qa` reads)."})
    output: str = field(
        metadata={"help": "JSONL of the kept questions (FlashRAG: id, question, golden_answers)."}
    )
    qa_format: str = field(default="auto", metadata={"help": "QA format for load_qa (auto: detect)."})
    samples: int = field(default=10, metadata={"help": "k: closed-book samples per question (paper: 10)."})
    temperature: float = field(
        default=1.0, metadata={"help": "Sampling temperature of the closed-book answers."}
    )
    max_tokens: int = field(default=24, metadata={"help": "Max new tokens of a closed-book answer."})
    batch_size: int = field(default=32, metadata={"help": "Questions per backend call."})
    seed: int = field(default=0, metadata={"help": "Sampling seed."})
    max_questions: int | None = field(
        default=None, metadata={"help": "Filter only the first N questions (unset: all)."}
    )
    mode: Literal["drop", "mark"] = field(
        default="drop", metadata={"help": "drop: leave answered questions out; mark: keep all, flag them."}
    )


def filter_closed_book(config: FilterConfig, generator: LLMConfig) -> dict[str, Any]:
    """Sample closed-book answers from the base generator (`generator` fields: backend, model, ...) and write
    the questions it never answers (plus every yes/no question); returns the counts."""
    ds = load_qa(config.qa_path, format=config.qa_format)
    records = (
        list(ds.select(range(min(config.max_questions, len(ds)))))
        if config.max_questions is not None
        else list(ds)
    )
    kept, dropped, exempt = [], 0, 0
    with open_llm(generator) as model:
        for start in range(0, len(records), config.batch_size):
            chunk = records[start : start + config.batch_size]
            requests = [
                GenerationRequest(
                    messages=[{"role": "user", "content": CLOSED_BOOK.format(question=r["question"])}],
                    n=config.samples,
                    temperature=config.temperature,
                    max_tokens=config.max_tokens,
                    seed=config.seed,
                )
                for r in chunk
            ]
            for r, result in zip(chunk, model.backend.generate(requests), strict=True):
                hits = sum(
                    exact_match(c.text.strip().splitlines()[0] if c.text.strip() else "", r["answers"])
                    for c in result.choices
                )
                yes_no = is_yes_no(r["answers"])
                exempt += yes_no
                answered = hits > 0 and not yes_no
                dropped += answered
                if answered and config.mode == "drop":
                    continue
                kept.append(
                    {
                        "id": r["id"],
                        "question": r["question"],
                        "golden_answers": list(r["answers"]),
                        "metadata": {
                            "closed_book_hits": int(hits),
                            "closed_book_samples": config.samples,
                            "closed_book_answered": bool(answered),
                        },
                    }
                )
    out = Path(config.output)
    write_jsonl(out, kept)
    stats = {
        "questions": len(records),
        "answered_closed_book": dropped,
        "yes_no_exempt": exempt,
        "written": len(kept),
        "model": model.model_id,
        "output": str(out),
    }
    print(json.dumps(stats))
    return stats


def hops(record: dict[str, Any]) -> list[tuple[str, str]]:
    """(sub-question, sub-answer) pairs of a record: its `sub_questions`, else FlashRAG metadata's, else the
    question itself with its first answer (one hop)."""
    subs = record.get("sub_questions") or []
    if not subs and record.get("metadata"):
        meta = record["metadata"]
        meta = json.loads(meta) if isinstance(meta, str) else meta
        subs = meta.get("sub_questions") or []
    pairs = [(s["question"], s.get("answer", "")) for s in subs if s.get("question")]
    return pairs or [(record["question"], record["answers"][0])]


def trajectory(record: dict[str, Any], observations: list[str]) -> str:
    """A worked completion: one search per hop with its (real) observation, then the gold answer, in the
    exact text the rollout builds (observations wrapped as "\\n\\n<information>...</information>\\n\\n").

    >>> trajectory({"question": "Who?", "answers": ["Ann"]}, ["[Doc 1] Ann did it."])
    'I need to look this up. <search> Who? </search>\\n\\n<information>[Doc 1] Ann did it.</information>\\n\\n<answer> Ann </answer>'
    """
    parts = []
    for k, ((query, _), obs) in enumerate(zip(hops(record), observations, strict=True)):
        lead = "I need to look this up." if k == 0 else "Next I need one more fact."
        parts.append(f"{lead} <search> {query} </search>\n\n<information>{obs}</information>\n\n")
    return "".join(parts) + f"<answer> {record['answers'][0]} </answer>"
