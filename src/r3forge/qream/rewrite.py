"""QREAM-ICL: iterative, question-oriented rewriting of the raw retrieval with stylistic demonstrations.

Round 1 rewrites r_raw (the top-K retrieved documents of question q, concatenated); round n > 1 rewrites
the first `l` tokens of round n-1's output. N rounds give the candidates C_q that `select.py` scores.

    step = RewriteStep(demos=[(seed["question"], seed["document"]) for seed in seeds])
    items = [rewrite_item(q, raw_retrieval(passages, k=5), round=1) for q, passages in ...]
    run_step(step, items, rewriter, EngineConfig("runs/qream/round1"))
    # round 2: rewrite_item(q, first_tokens(round1_text, tokenizer, l=100), round=2) ...
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from r3forge.backends.base import GenerationRequest, GenerationResult
from r3forge.errors import ConfigError
from r3forge.synth.engine import Rejected
from r3forge.text import complete_sentences

PROMPT_VERSION = "qream_rewrite_v1"
INSTRUCTION = (
    "Rewrite retrieved text into a background document for a question, in the style of the examples: one "
    "focused paragraph that presents the information the question needs. Use only facts stated in the "
    "retrieved text; do not answer beyond it and do not mention the question or the retrieval."
)
# the QREAM-FT student's prompt: its SFT inputs and, once trained, its inputs at inference (`FTRewriteStep`)
FT_INSTRUCTION = (
    "Rewrite the retrieved text into a background document for the question: one focused paragraph that "
    "presents the information the question needs, using only facts stated in the retrieved text."
)
_LABEL = re.compile(r"^[\s*_#>`]*(?:background\s+)?document[\s*_]*:[\s*_]*", re.IGNORECASE | re.MULTILINE)
_ECHO = re.compile(r"^[\s*_#>`]*(?:question|retrieved text)[\s*_]*:.*$", re.IGNORECASE | re.MULTILINE)


def strip_echo(text: str) -> str:
    """The document part of an output: after the last `Document:` label if there is one, without lines that
    echo the prompt's `Question:` / `Retrieved text:` fields (small models repeat the prompt's layout).

    >>> strip_echo("Question: Who?\\nDocument: The answer is here.")
    'The answer is here.'
    >>> strip_echo("Question: Who?\\nRetrieved text: x\\nA plain paragraph.")
    'A plain paragraph.'
    """
    labels = list(_LABEL.finditer(text))
    if labels:
        text = text[labels[-1].end() :]
    return _ECHO.sub("", text).strip()


def trim_generation(text: str, truncated: bool) -> tuple[str, str]:
    """(text, what was trimmed): a small model's loops and cut-off endings removed at sentence boundaries.

    The text stops before the first sentence that repeats an earlier one ("repetition"); an output that hit
    max_tokens loses its unfinished last sentence ("unfinished"). Nothing trimmed: "".

    >>> trim_generation("A is B. C is D. A is B. A is B.", False)
    ('A is B. C is D.', 'repetition')
    >>> trim_generation("A is B. C is", True)
    ('A is B.', 'unfinished')
    >>> trim_generation("It has 2.1 million people. It is", True)  # a decimal point ends no sentence
    ('It has 2.1 million people.', 'unfinished')
    """
    sentences = complete_sentences(text)
    seen, kept = set(), []
    for sentence in sentences:
        if sentence.lower() in seen:
            return " ".join(kept), "repetition"
        seen.add(sentence.lower())
        kept.append(sentence)
    if truncated:
        return " ".join(kept), "unfinished"
    return text, ""


def raw_retrieval(passages: Sequence[dict], k: int = 5) -> str:
    """r_raw: the first `k` passages (best first) as "title: text" paragraphs.

    >>> raw_retrieval([{"title": "A", "text": "x."}, {"title": "", "text": "y."}, {"title": "C", "text": "z."}], 2)
    'A: x.\\n\\ny.'
    """
    if k < 1:
        raise ConfigError(f"top-K of the raw retrieval must be >= 1, got {k}")
    return "\n\n".join(f"{p['title']}: {p['text']}" if p.get("title") else p["text"] for p in passages[:k])


def first_tokens(text: str, tokenizer: Any, n: int) -> str:
    """The first `n` tokens of `text` (by `tokenizer`; whitespace words without one), decoded.

    >>> first_tokens("one two three four", None, 2)
    'one two'
    """
    if n < 1:
        raise ConfigError(f"the rewrite prefix length l must be >= 1, got {n}")
    if tokenizer is None:
        return " ".join(text.split()[:n])
    ids = tokenizer(text, add_special_tokens=False)["input_ids"][:n]
    return tokenizer.decode(ids, skip_special_tokens=True).strip()


def ft_prompt(question: str, raw: str) -> str:
    """The user turn of the QREAM-FT student: instruction, question and r_raw (no demonstrations)."""
    return f"{FT_INSTRUCTION}\n\nQuestion: {question}\nRetrieved text:\n{raw}"


def rewrite_item(record: dict, source: str, round: int) -> dict:
    """A rewrite item: the question (id, text, answers) and the text this round rewrites."""
    return {
        "question_id": str(record["id"]),
        "question": record["question"],
        "answers": list(record.get("answers") or []),
        "round": round,
        "source": source,
    }


def rewrite_key(item: dict) -> dict:
    """A rewrite item's identity: question, round and a hash of the text it rewrites."""
    source = hashlib.sha256(item["source"].encode("utf-8")).hexdigest()[:16]
    return {"question_id": item["question_id"], "round": item["round"], "source_sha256": source}


def parse_rewrite(item: dict, result: GenerationResult, min_words: int) -> dict | Rejected:
    """The rewrite, trimmed of loops and an unfinished ending (`trimmed` says which); too short after that:
    rejected (`truncated` when it hit max_tokens, else `too_short`)."""
    choice = result.choices[0]
    cut = choice.finish_reason == "length"
    text, trimmed = trim_generation(strip_echo(choice.text), cut)
    words = len(text.split())
    if words < min_words:
        detail = f"{words} words < {min_words} after trimming ({trimmed or '-'})"
        return Rejected("truncated" if cut else "too_short", detail)
    keep = ("question_id", "question", "answers", "round", "source")
    return {k: item[k] for k in keep} | {"rewrite": text, "trimmed": trimmed}


@dataclass
class RewriteStep:
    """The `SynthesisStep` of one rewriting round. `demos` = (seed question, seed document) pairs; their hash
    is part of `version`, so other seeds never reuse cached rewrites."""

    demos: Sequence[tuple[str, str]]
    temperature: float = 0.0
    max_tokens: int = 384
    min_words: int = 10
    tokenizer: Any = field(default=None, repr=False, compare=False)  # unused; uniform with other steps
    name: str = field(default="qream_rewrite", init=False)

    def __post_init__(self) -> None:
        if not self.demos:
            raise ConfigError("RewriteStep needs at least one (seed question, seed document) demonstration")
        digest = hashlib.sha256(json.dumps([list(d) for d in self.demos]).encode()).hexdigest()[:12]
        self.version = f"{PROMPT_VERSION}+demos-{digest}"

    def key(self, item: dict) -> dict:
        return rewrite_key(item)

    def prompt(self, item: dict) -> GenerationRequest:
        examples = "\n\n".join(f"Question: {q}\nDocument: {d}" for q, d in self.demos)
        content = (
            f"{INSTRUCTION}\n\nExamples:\n\n{examples}\n\nNow the question and its retrieved text.\n\n"
            f"Question: {item['question']}\nRetrieved text:\n{item['source']}\n\nWrite the document.\n\nDocument:"
        )
        return GenerationRequest(
            messages=[{"role": "user", "content": content}],
            temperature=self.temperature,
            max_tokens=self.max_tokens,
        )

    def parse(self, item: dict, result: GenerationResult) -> dict | Rejected:
        return parse_rewrite(item, result, self.min_words)


@dataclass
class FTRewriteStep:
    """The `SynthesisStep` of a trained QREAM-FT student: one rewrite of r_raw from `ft_prompt` (the prompt
    its SFT data used), parsed and rejected like `RewriteStep`'s. Item: `rewrite_item(..., round=1)`."""

    temperature: float = 0.0
    max_tokens: int = 384
    min_words: int = 10
    tokenizer: Any = field(default=None, repr=False, compare=False)
    name: str = field(default="qream_ft_rewrite", init=False)
    version: str = field(default="qream_ft_v1", init=False)

    def key(self, item: dict) -> dict:
        return rewrite_key(item)

    def prompt(self, item: dict) -> GenerationRequest:
        return GenerationRequest(
            messages=[{"role": "user", "content": ft_prompt(item["question"], item["source"])}],
            temperature=self.temperature,
            max_tokens=self.max_tokens,
        )

    def parse(self, item: dict, result: GenerationResult) -> dict | Rejected:
        return parse_rewrite(item, result, self.min_words)
