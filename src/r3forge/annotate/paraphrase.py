"""The paper's "paraphrased context" baseline: the teacher rewrites a document for readability, without
commentary, so an ablation can tell the verbal reranker's comments from mere rewriting.

    step = ParaphraseStep()
    run_step(step, qa_items(load_qa("dev.jsonl")), teacher.backend, EngineConfig("runs/annotate/para"))

Items are the same (question, document) pairs as the verbal annotation's (`retrieval/pairs.py`), so every annotated
document has a paraphrase to compare with. The question is not shown to the teacher (the rewrite must not
judge relevance), so the key is the document alone: a document retrieved for several questions is
paraphrased once (the engine counts the other pairs as `duplicate_inputs`); join on `doc_id`. Unusable outputs are rejected with a reason code: `truncated`, `missing_paraphrase`,
`commentary` (a Comment:/Score: field or a relevance verdict), `too_short` / `too_long` (word count outside
`min_ratio` .. `max_ratio` x the document's) and `unchanged` (the document copied nearly verbatim).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from r3forge.annotate import templates
from r3forge.annotate.verbal import longest_common_run
from r3forge.backends.base import GenerationRequest, GenerationResult
from r3forge.synth.engine import Rejected

PROMPT_VERSION = "paraphrase_context_v1"
REASONS = ("truncated", "missing_paraphrase", "commentary", "too_short", "too_long", "unchanged")
_LABEL = re.compile(r"^[\s*_#>`]*(?:paraphrase|rewritten document|rewrite)[\s*_]*:[\s*_]*", re.I | re.M)
_COMMENTARY = re.compile(
    r"^[\s*_#>`]*(?:comment|score|relevance)[\s*_]*:|\brelevan(?:t|ce) to\b", re.I | re.M
)
_WORD = re.compile(r"\w+")


def load_template(path: str | None = None) -> tuple[str, str]:
    return templates.load_template(path, PROMPT_VERSION, ("document",))


@dataclass(frozen=True)
class ParaphraseChecks:
    """Validation thresholds of `ParaphraseStep.parse` (part of the step's `version`)."""

    min_ratio: float = 0.3  # fewer words than this x the document's: too_short
    max_ratio: float = 2.0  # more: too_long
    max_copied: float = 0.9  # a verbatim run over this share of the document's words: unchanged

    @property
    def tag(self) -> str:
        return f"r{self.min_ratio:g}-{self.max_ratio:g}-c{self.max_copied:g}"


def check_paraphrase(text: str, document: str, checks: ParaphraseChecks) -> str | Rejected:
    """The paraphrase in `text` (after an optional `Paraphrase:` label), or why it is unusable.

    >>> check_paraphrase("Paraphrase: Paris is France's capital.", "The capital of France is Paris.",
    ...                  ParaphraseChecks())
    "Paris is France's capital."
    >>> check_paraphrase("Comment: relevant.\\nScore: 5", "Paris is the capital.", ParaphraseChecks())
    Rejected(reason='commentary', detail='the output judges the document instead of rewriting it')
    """
    label = _LABEL.search(text)
    body = re.sub(r"\s+", " ", text[label.end() :] if label else text).strip(" *_")
    if not body:
        return Rejected("missing_paraphrase", "empty output")
    if _COMMENTARY.search(text):
        return Rejected("commentary", "the output judges the document instead of rewriting it")
    words, doc = _WORD.findall(body.lower()), _WORD.findall(document.lower())
    if len(words) < checks.min_ratio * len(doc):
        return Rejected("too_short", f"{len(words)} words for a {len(doc)}-word document")
    if len(words) > checks.max_ratio * max(len(doc), 1):
        return Rejected("too_long", f"{len(words)} words for a {len(doc)}-word document")
    run = longest_common_run(words, doc)
    if len(doc) >= 10 and run > checks.max_copied * len(doc):
        return Rejected("unchanged", f"{run} of {len(doc)} document words copied verbatim")
    return body


@dataclass
class ParaphraseStep:
    """The `SynthesisStep` of the paraphrased-context baseline: one item = one (question, document) pair."""

    template_path: str | None = None
    checks: ParaphraseChecks = field(default_factory=ParaphraseChecks)
    temperature: float = 0.0
    max_tokens: int = 512
    tokenizer: Any = field(default=None, repr=False, compare=False)  # unused; uniform with the other steps
    name: str = field(default="paraphrase_context", init=False)

    def __post_init__(self) -> None:
        self.template, prompt_version = load_template(self.template_path)
        self.version = f"{prompt_version}+{self.checks.tag}"

    def key(self, item: dict) -> dict:
        return {"doc_id": item["doc_id"]}

    def prompt(self, item: dict) -> GenerationRequest:
        content = templates.fill(self.template, {"title": item["doc_title"], "document": item["doc_text"]})
        return GenerationRequest(
            messages=[{"role": "user", "content": content}],
            temperature=self.temperature,
            max_tokens=self.max_tokens,
        )

    def parse(self, item: dict, result: GenerationResult) -> dict | Rejected:
        choice = result.choices[0]
        if choice.finish_reason == "length":
            return Rejected("truncated", f"hit max_tokens={self.max_tokens}")
        out = check_paraphrase(choice.text, item["doc_text"], self.checks)
        if isinstance(out, Rejected):
            return out
        return {k: item[k] for k in ("doc_id", "doc_title", "doc_text")} | {"paraphrase": out}
