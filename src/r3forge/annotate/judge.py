"""Judge pass over verbal annotations: a second model says whether each annotation is reasonable.

    step = AnnotationJudgeStep(tokenizer=judge.tokenizer)
    run_step(step, judge_items("runs/annotate/verbal"), judge.backend, EngineConfig("runs/annotate/judge"))

The judge reads the question, the document and the teacher's `Comment` / `Score` and answers
`Verdict: yes|no` then `Reason: ...`. Each record keeps the verdict (`approved`), the reason, the verdict
token's logprob and, when the backend returned top-k logprobs there, `p_yes` = P(yes) / (P(yes) + P(no))
at that position (a graded approval). The paper used a different-family model as judge (98.5% approved);
`r3forge annotate export-sft --judge_dir ...` keeps only approved annotations.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from r3forge.annotate import templates
from r3forge.annotate.verbal import chat_request, score_token_index
from r3forge.backends.base import GenerationRequest, GenerationResult, p_yes, token_decoder
from r3forge.synth.engine import Rejected
from r3forge.synth.export import load_accepted

PROMPT_VERSION = "verbal_judge_v1"
REASONS = ("truncated", "missing_verdict", "invalid_verdict")
_VERDICT = re.compile(r"^[\s*_#>`]*verdict[\s*_]*[:\-=][\s*_]*(?P<value>\w+)", re.IGNORECASE | re.MULTILINE)
_REASON = re.compile(r"^[\s*_#>`]*reason[\s*_]*[:\-=][\s*_]*", re.IGNORECASE | re.MULTILINE)
YES, NO = ("yes", "true", "reasonable", "approved"), ("no", "false", "unreasonable", "rejected")
# few-shot demos: ((question, title, document, comment, score), answer); used only with `few_shot`
DEMOS = (
    (
        (
            "Who wrote Hamlet?",
            "Hamlet",
            "Hamlet is a tragedy written by William Shakespeare.",
            "It states that Shakespeare wrote Hamlet, which answers the question.",
            5,
        ),
        "Verdict: yes\nReason: The document names the author, so the comment is right and 5 fits.",
    ),
    (
        (
            "What is the capital of Peru?",
            "Tulip",
            "The tulip is a flowering plant of the lily family.",
            "It states that Lima is the capital of Peru.",
            5,
        ),
        "Verdict: no\nReason: The document is about a plant; the comment invents a fact and 5 is too high.",
    ),
)


def load_template(path: str | None = None) -> tuple[str, str]:
    return templates.load_template(path, PROMPT_VERSION, ("question", "document", "comment", "score"))


def parse_verdict(text: str) -> tuple[bool, str, int] | Rejected:
    """(approved, reason, character offset of the verdict word) from `Verdict: yes|no / Reason: ...`.

    >>> parse_verdict("**Verdict:** Yes\\nReason: the comment matches.")
    (True, 'the comment matches.', 13)
    >>> parse_verdict("I think so.")
    Rejected(reason='missing_verdict', detail='no Verdict: line')
    """
    m = _VERDICT.search(text)
    if m is None:
        return Rejected("missing_verdict", "no Verdict: line")
    value = m["value"].lower()
    if value not in YES + NO:
        return Rejected("invalid_verdict", f"verdict {m['value']!r} is not yes/no")
    r = _REASON.search(text, m.end())
    reason = re.sub(r"\s+", " ", text[r.end() :]).strip(" *_") if r else ""
    return value in YES, reason, m.start("value")


@dataclass
class AnnotationJudgeStep:
    """The `SynthesisStep` of the annotation judge (the approval pass; QREAM's fact judge is
    `qream.score.FactJudgeStep`): one item = one accepted verbal annotation (`judge_items`)."""

    template_path: str | None = None
    temperature: float = 0.0
    max_tokens: int = 96
    top_logprobs: int = 5
    prefill: str = ""
    few_shot: bool = False
    tokenizer: Any = field(default=None, repr=False, compare=False)
    name: str = field(default="verbal_judge", init=False)

    def __post_init__(self) -> None:
        self.template, prompt_version = load_template(self.template_path)
        self.version = prompt_version + ("+fs" if self.few_shot else "")

    def render(self, question: str, title: str, document: str, comment: str, score: int) -> str:
        values = {"question": question, "title": title, "document": document, "comment": comment}
        return templates.fill(self.template, values | {"score": score})

    def key(self, item: dict) -> dict:
        # the annotation's own cache key: a re-annotated pair (new teacher or prompt) is judged anew
        return {"annotation_key": item["annotation_key"]}

    def prompt(self, item: dict) -> GenerationRequest:
        """The chat prompt (after the demos with `few_shot`); with `prefill`, a raw prompt that starts the
        judge's answer (the chat template applied by `tokenizer`)."""
        turns = []
        for demo, answer in DEMOS if self.few_shot else ():
            turns += [
                {"role": "user", "content": self.render(*demo)},
                {"role": "assistant", "content": answer},
            ]
        fields = ("question", "doc_title", "doc_text", "comment", "score")
        turns.append({"role": "user", "content": self.render(*(item[k] for k in fields))})
        return chat_request(
            turns,
            self.prefill,
            self.tokenizer,
            "AnnotationJudgeStep",
            temperature=self.temperature,
            max_tokens=self.max_tokens,
            top_logprobs=self.top_logprobs,
        )

    def parse(self, item: dict, result: GenerationResult) -> dict | Rejected:
        choice = result.choices[0]
        if choice.finish_reason == "length":
            return Rejected("truncated", f"hit max_tokens={self.max_tokens}")
        parsed = parse_verdict(self.prefill + choice.text)
        if isinstance(parsed, Rejected):
            return parsed
        approved, reason, offset = parsed
        offset -= len(self.prefill)
        decode = token_decoder(self.tokenizer)
        t = score_token_index(choice, offset, decode)
        return {
            "question_id": item["question_id"],
            "doc_id": item["doc_id"],
            "score": item["score"],
            "approved": approved,
            "judge_reason": reason,
            "verdict_logprob": None if t is None else choice.logprobs[t],
            "p_yes": None if t is None or not choice.top_logprobs else p_yes(choice.top_logprobs[t], decode),
        }


JudgeStep = AnnotationJudgeStep  # its name before it was told apart from QREAM's FactJudgeStep


def judge_items(annotation_dir: str, max_items: int | None = None) -> Iterator[dict]:
    """The accepted annotations of a verbal annotation folder as judge items."""
    ds = load_accepted(annotation_dir)
    for i, row in enumerate(ds):
        if max_items is not None and i >= max_items:
            return
        yield {
            "annotation_key": row["key"],
            "question_id": row["question_id"],
            "question": row["question"],
            "doc_id": row["doc_id"],
            "doc_title": row["doc_title"],
            "doc_text": row["doc_text"],
            "comment": row["comment"],
            "score": row["score"],
        }


def approvals(judge_dir: str) -> dict[str, bool]:
    """annotation cache key -> approved, from a judge folder's accepted records."""
    ds = load_accepted(judge_dir)
    if len(ds) == 0:
        return {}
    return {inp["annotation_key"]: bool(a) for inp, a in zip(ds["input"], ds["approved"], strict=True)}
