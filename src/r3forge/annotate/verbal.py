"""Teacher annotation for the Verbal-R3 verbal reranker: (question, document) -> comment + score 1-5.

    step = VerbalAnnotationStep(tokenizer=backend.tokenizer)
    run_step(step, qa_items(load_qa("dev.jsonl")), backend, EngineConfig(output_dir="runs/verbal"))

(`qa_items` / `retrieved_items` in `retrieval/pairs.py`; the `r3forge annotate verbal` job in `jobs.py`.)

The teacher reads the question and ONE document and answers in a fixed two-field format::

    Comment: <short, evidence-citing comment on how the document bears on the question>
    Score: <1-5>

`parse` accepts whitespace and markdown variants (`**Comment:**`, `comment -`, `Score: 4/5`,
`Score: **4**`) and the score-first order of the `score_first` SFT variant (`Score:` line, then `Comment:`;
not the paper's format, see `annotation_text`), and rejects unusable outputs with a reason code (`REASONS`). It also finds the generated
token that carries the score digit and keeps its logprob (a tie-breaker between equal scores) and, when the
backend returned top-k logprobs there, the logprobs of the five score tokens "1".."5".

The engine already stores the teacher model, prompt version, sampling parameters, raw output, reasoning,
token usage and latency in every record; `parse` adds the question/document fields and the annotation.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from r3forge.annotate import templates
from r3forge.backends.base import Choice, GenerationRequest, GenerationResult, token_decoder
from r3forge.errors import ConfigError
from r3forge.synth.engine import Rejected

PROMPT_VERSION = "verbal_annotation_v1"
SCORES = ("1", "2", "3", "4", "5")
REASONS = (
    "truncated",
    "missing_comment",
    "missing_score",
    "invalid_score",
    "empty_comment",
    "overlong_comment",
    "copied_document",
)

_MD = r"[\s*_#>`]*"  # markdown decoration around a label: bold, italics, headings, quotes
_SEP = r"[\s*_]*[:\-\u2013\u2014=][\s*_]*"  # "Comment:", "Comment -", "**Comment:**", "Comment **:**"
_COMMENT = re.compile(rf"^{_MD}comment{_SEP}", re.IGNORECASE | re.MULTILINE)
_SCORE = re.compile(rf"^{_MD}(?:relevance\s+)?score{_SEP}", re.IGNORECASE | re.MULTILINE)
# after the score label: "4", "**4**", "4/5", "4 / 5", "[4]"; anything else is an invalid score
_VALUE = re.compile(r"[\s*_\[(]*(?P<digit>\d+(?:\.\d+)?)[\s*_\])]*(?:/\s*5\b)?(?=\s|$|[.,;*])")
_WORD = re.compile(r"\w+")
# few-shot demos: ((question, title, document), answer); used only with `few_shot` (small teachers)
DEMOS = (
    (
        ("What city is the capital of France?", "Paris", "Paris is the capital and largest city of France."),
        "Comment: It states that Paris is the capital of France, which answers the question.\nScore: 5",
    ),
    (
        ("Who wrote Hamlet?", "Tulip", "The tulip is a flowering plant of the lily family."),
        "Comment: It is about a plant and says nothing about Hamlet or its author.\nScore: 1",
    ),
)


def load_template(path: str | None = None) -> tuple[str, str]:
    """(template text, prompt version): the built-in `PROMPT_VERSION`, or a user's file (`custom-<hash>`)."""
    return templates.load_template(path, PROMPT_VERSION, ("question", "document"))


def render(template: str, question: str, title: str, document: str) -> str:
    """Fill `{question}`, `{title}`, `{document}` (plain replacement: other braces stay as they are)."""
    return templates.fill(template, {"question": question, "title": title, "document": document})


def annotation_text(comment: str, score: int, score_first: bool = False) -> str:
    """The canonical two-field answer (the student's SFT target). `score_first`: a variant that departs from
    the paper's comment-then-score format: the student commits to its score in the first tokens of its
    answer, conditioned on the question and document alone, and writes the comment after it.

    >>> annotation_text("Names the city.", 5, score_first=True)
    'Score: 5\\nComment: Names the city.'
    """
    return f"Score: {score}\nComment: {comment}" if score_first else f"Comment: {comment}\nScore: {score}"


@dataclass(frozen=True)
class ParsedAnnotation:
    """A parsed output: the comment, the score and the character offset of the score digit in the text."""

    comment: str
    score: int
    score_offset: int


def parse_annotation(text: str, max_comment_words: int = 120) -> ParsedAnnotation | Rejected:
    """Parse `Comment: ... / Score: s` text (format and length checks only; see `VerbalAnnotationStep`), or
    the score-first `Score: s / Comment: ...` (a Score line before the comment and none after it).

    >>> parse_annotation("**Comment:** Names the city.\\n\\n**Score:** 4/5")
    ParsedAnnotation(comment='Names the city.', score=4, score_offset=41)
    >>> parse_annotation("Score: 2\\nComment: Only the name matches.")
    ParsedAnnotation(comment='Only the name matches.', score=2, score_offset=7)
    >>> parse_annotation("Comment: fine")
    Rejected(reason='missing_score', detail='no Score: line')
    """
    comment_m = _COMMENT.search(text)
    if comment_m is None:
        return Rejected("missing_comment", "no Comment: line")
    scores = list(_SCORE.finditer(text))
    after = [m for m in scores if m.start() >= comment_m.end()]
    before = [m for m in scores if m.end() <= comment_m.start()]
    if not after and not before:
        return Rejected("missing_score", "no Score: line")
    score_m = after[0] if after else before[0]
    comment_end = score_m.start() if after else len(text)
    value = _VALUE.match(text, score_m.end())
    if value is None or value["digit"] not in SCORES:
        shown = text[score_m.end() : score_m.end() + 20].splitlines()[0] if text[score_m.end() :] else ""
        return Rejected("invalid_score", f"score value {shown!r} is not an integer 1-5")
    comment = re.sub(r"\s+", " ", text[comment_m.end() : comment_end].replace("**", "")).strip(" *_")
    if not comment:
        return Rejected("empty_comment", "the Comment: field is empty")
    words = len(comment.split())
    if words > max_comment_words:
        return Rejected("overlong_comment", f"{words} words > {max_comment_words}")
    return ParsedAnnotation(comment, int(value["digit"]), value.start("digit"))


def longest_common_run(a: Sequence[str], b: Sequence[str]) -> int:
    """Length of the longest contiguous run of words shared by `a` and `b` (O(len(a) * len(b))).

    >>> longest_common_run("the cat sat on a mat".split(), "a cat sat on the mat".split())
    3
    """
    best, prev = 0, [0] * (len(b) + 1)
    for x in a:
        cur = [0] * (len(b) + 1)
        for j, y in enumerate(b, start=1):
            if x == y:
                cur[j] = prev[j - 1] + 1
                best = max(best, cur[j])
        prev = cur
    return best


def copy_check(comment: str, document: str, max_run: int, max_fraction: float) -> Rejected | None:
    """`copied_document` when the comment shares a run of more than `max_run` words with the document, or
    when the shared run covers more than `max_fraction` of a comment of at least 8 words."""
    c, d = _WORD.findall(comment.lower()), _WORD.findall(document.lower())
    run = longest_common_run(c, d)
    if run > max_run or (len(c) >= 8 and run / len(c) > max_fraction):
        return Rejected("copied_document", f"{run} of {len(c)} comment words copied verbatim")
    return None


def score_token_index(choice: Choice, offset: int, decode: Callable[[list[int]], str] | None) -> int | None:
    """Index of the generated token that holds the score digit at character `offset` of `choice.text`.

    With token ids and a `decode` function: the first token whose decoded prefix reaches past `offset` and
    whose own text contains the digit. Without them (a server that returns token texts, not ids): the last
    position whose top-k dict has the digit as a string key with the chosen token's logprob.
    """
    if not 0 <= offset < len(choice.text):
        return None
    digit = choice.text[offset]
    if choice.token_ids and decode is not None:
        base = decode(choice.token_ids).find(choice.text)  # text may be cut (reasoning, stop strings)
        if base < 0:
            return None
        for t in range(len(choice.token_ids)):
            if len(decode(choice.token_ids[: t + 1])) > base + offset:
                return t if digit in decode([choice.token_ids[t]]) else None
        return None
    for t in range(len(choice.top_logprobs) - 1, -1, -1):
        for key, logprob in choice.top_logprobs[t].items():
            if isinstance(key, str) and key.strip() == digit and math.isclose(logprob, choice.logprobs[t]):
                return t
    return None


def score_logprobs(
    top: dict[Any, float], decode: Callable[[list[int]], str] | None
) -> dict[str, float | None] | None:
    """{"1": lp, ..., "5": lp} from one position's top-k dict (None for a digit not in the top k; the best
    token when several decode to the same digit, e.g. "4" and " 4"); None without top-k logprobs."""
    if not top:
        return None
    out: dict[str, float | None] = dict.fromkeys(SCORES)
    for key, logprob in top.items():
        text = key if isinstance(key, str) else (decode([key]) if decode is not None else "")
        digit = text.strip().strip("*")
        if digit in out and (out[digit] is None or logprob > out[digit]):
            out[digit] = logprob
    return out


def expected_score(logprobs: dict[str, float | None] | None) -> float | None:
    """The expected score sum_s s * p(s) over the digits "1".."5", renormalized over those in the top k (a
    digit outside the top k counts as probability 0); None without digit logprobs. A ranking signal that
    survives a constant argmax: two documents both scored 1 differ in how much mass they put on 2..5.

    >>> expected_score({"1": math.log(0.5), "2": None, "3": math.log(0.25), "4": None, "5": math.log(0.25)})
    2.5
    >>> round(expected_score({"1": math.log(0.6), "5": math.log(0.2)}), 3)  # renormalized over 0.8
    2.0
    >>> expected_score({"1": None}) is None
    True
    """
    probs = {int(d): math.exp(lp) for d, lp in (logprobs or {}).items() if d in SCORES and lp is not None}
    total = sum(probs.values())
    return sum(s * p for s, p in probs.items()) / total if total > 0 else None


def chat_request(
    messages: list[dict[str, str]], prefill: str, tokenizer: Any, owner: str, **sampling: Any
) -> GenerationRequest:
    """A chat request; with `prefill`, a raw prompt instead: the chat template applied by `tokenizer`, then
    the prefill, which starts the assistant's answer (small models then keep the format)."""
    if not prefill:
        return GenerationRequest(messages=messages, **sampling)
    if tokenizer is None:
        raise ConfigError(f"{owner}: prefill needs a tokenizer (for its chat template)")
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return GenerationRequest(prompt=text + prefill, **sampling)


@dataclass(frozen=True)
class Checks:
    """Validation thresholds of `parse` (part of the step's `version`)."""

    max_comment_words: int = 120  # longer comments: overlong_comment
    copy_max_run: int = 20  # a longer word run shared with the document: copied_document
    copy_max_fraction: float = 0.8  # a shared run over this share of the comment: copied_document

    @property
    def tag(self) -> str:
        return f"w{self.max_comment_words}-r{self.copy_max_run}-f{self.copy_max_fraction:g}"


@dataclass
class VerbalAnnotationStep:
    """The `SynthesisStep` of teacher annotation: one item = one (question, document) pair (`qa_items`).

    `tokenizer` (anything with `decode(ids, skip_special_tokens=...)`) locates the score token from token
    ids; without it, token-text keys of the top-k logprobs are used. `prefill` (e.g. "Comment:", for small
    teachers that ignore the format) starts the assistant turn: the request becomes a raw prompt (the chat
    template applied by `tokenizer`, then the prefill) and `parse` reads prefill + output. `few_shot` puts
    the two `DEMOS` before the question as earlier chat turns. `version` = prompt version + few-shot flag +
    `checks.tag`: changing any of them gives new cache keys, never silently reused records.
    """

    template_path: str | None = None
    checks: Checks = field(default_factory=Checks)
    temperature: float = 0.0
    max_tokens: int = 256
    top_logprobs: int = 5
    prefill: str = ""
    few_shot: bool = False
    tokenizer: Any = field(default=None, repr=False, compare=False)
    name: str = field(default="verbal_annotation", init=False)

    def __post_init__(self) -> None:
        self.template, self.prompt_version = load_template(self.template_path)
        self.version = f"{self.prompt_version}{'+fs' if self.few_shot else ''}+{self.checks.tag}"

    def key(self, item: dict) -> dict:
        return {"question_id": item["question_id"], "doc_id": item["doc_id"]}

    def messages(self, item: dict) -> list[dict[str, str]]:
        """The chat prompt: the demos (with `few_shot`), then one user turn."""
        turns = []
        for demo, answer in DEMOS if self.few_shot else ():
            turns.append({"role": "user", "content": render(self.template, *demo)})
            turns.append({"role": "assistant", "content": answer})
        content = render(self.template, item["question"], item["doc_title"], item["doc_text"])
        return [*turns, {"role": "user", "content": content}]

    def prompt(self, item: dict) -> GenerationRequest:
        return chat_request(
            self.messages(item),
            self.prefill,
            self.tokenizer,
            "VerbalAnnotationStep",
            temperature=self.temperature,
            max_tokens=self.max_tokens,
            top_logprobs=self.top_logprobs,
        )

    def parse(self, item: dict, result: GenerationResult) -> dict | Rejected:
        choice = result.choices[0]
        if choice.finish_reason == "length":
            return Rejected("truncated", f"hit max_tokens={self.max_tokens}")
        parsed = parse_annotation(self.prefill + choice.text, self.checks.max_comment_words)
        if isinstance(parsed, Rejected):
            return parsed
        copied = copy_check(
            parsed.comment, item["doc_text"], self.checks.copy_max_run, self.checks.copy_max_fraction
        )
        if copied is not None:
            return copied
        decode = token_decoder(self.tokenizer)
        t = score_token_index(choice, parsed.score_offset - len(self.prefill), decode)
        return {
            **item,
            "comment": parsed.comment,
            "score": parsed.score,
            "score_token_index": t,
            "score_logprob": None if t is None else choice.logprobs[t],
            "score_logprobs": None if t is None else score_logprobs(choice.top_logprobs[t], decode),
        }
