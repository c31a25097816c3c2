"""The Verbal-R3 verbal reranker: a model writes `Comment: ... / Score: 1-5` for each (question, document).

The prompt is built exactly as the annotation pipeline's `VerbalAnnotationStep.prompt` builds it (same
template, few-shot demos, prefill and sampling), so a student distilled on those annotations is asked the
way it was trained. Outputs are read with `parse_annotation`:

* `scores`: the parsed 1-5 score (0 when the output does not parse); with `rank_by: expected`, the expected
  score sum_s s * p(s) over the five digit logprobs where the output has them (a student whose argmax is
  nearly constant still ranks by how much mass it puts on the high scores);
* `tiebreak`: the logprob of the generated score token (NaN when it cannot be located), higher first;
* `notes`: the comment (None when unparsed), for prompts that show the reranker's comments to the reader.

    verbal = VerbalReranker(HFLocalBackend.from_config(HFLocalConfig(model="runs/sft/verbal/final")),
                            tokenizer, VerbalConfig(max_tokens=128))
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from r3forge.annotate.verbal import (
    VerbalAnnotationStep,
    expected_score,
    parse_annotation,
    score_logprobs,
    score_token_index,
)
from r3forge.backends.base import Choice, GenerationBackend, token_decoder
from r3forge.errors import ConfigError
from r3forge.rerank.base import Candidate, RerankOutput, check_inputs, flat_pairs, split_flat
from r3forge.synth.engine import Rejected

RANK_BY = ("score", "expected")


@dataclass
class VerbalConfig:
    template_path: str | None = field(
        default=None,
        metadata={"help": "Prompt template file (default: the built-in verbal_annotation_v1)."},
    )
    max_tokens: int = field(default=128, metadata={"help": "Generation budget for comment + score."})
    top_logprobs: int = field(
        default=5, metadata={"help": "Top-k logprobs per generated token (for the score-token logprobs)."}
    )
    prefill: str = field(
        default="",
        metadata={"help": "Text that starts the assistant turn, e.g. 'Comment:' (needs a tokenizer)."},
    )
    few_shot: bool = field(
        default=False, metadata={"help": "Put the two built-in demos before the question."}
    )
    max_comment_words: int = field(
        default=120, metadata={"help": "Longer comments count as parse failures (as in the annotation step)."}
    )
    rank_by: str = field(
        default="score",
        metadata={
            "help": "score: the parsed 1-5 score, ties by the score token's logprob (the paper); "
            "expected: sum_s s*p(s) over the digit logprobs (top_logprobs >= 5), else the score."
        },
    )

    def __post_init__(self) -> None:
        if self.rank_by not in RANK_BY:
            raise ConfigError(f"VerbalConfig: rank_by must be one of {RANK_BY}, got {self.rank_by!r}")
        if self.max_tokens < 1 or self.top_logprobs < 0:
            raise ConfigError(
                f"VerbalConfig: need max_tokens >= 1 and top_logprobs >= 0, got {self.max_tokens}, "
                f"{self.top_logprobs}"
            )


@dataclass
class VerbalJudgment:
    """One parsed (or unparsed) output: what `VerbalReranker` keeps per candidate."""

    score: float  # 1-5, 0 when unparsed
    tiebreak: float  # logprob of the score token, NaN when unknown
    comment: str | None
    expected_score: float | None  # sum_s s * p(s) over the score tokens' top-k logprobs, renormalized
    failure: str | None  # the parser's reason code when unparsed


def judge(choice: Choice, prefill: str, tokenizer: Any, max_comment_words: int = 120) -> VerbalJudgment:
    """Read one output: prefill + text parsed, the score token located by its character offset.

    Unlike the annotation step, a truncated output that still parses counts (the score is there).
    """
    parsed = parse_annotation(prefill + choice.text, max_comment_words)
    if isinstance(parsed, Rejected):
        return VerbalJudgment(0.0, math.nan, None, None, parsed.reason)
    decode = token_decoder(tokenizer)
    t = score_token_index(choice, parsed.score_offset - len(prefill), decode)
    if t is None:
        return VerbalJudgment(float(parsed.score), math.nan, parsed.comment, None, None)
    expected = expected_score(score_logprobs(choice.top_logprobs[t], decode)) if choice.top_logprobs else None
    return VerbalJudgment(float(parsed.score), choice.logprobs[t], parsed.comment, expected, None)


def ranking_scores(judgments: Sequence[VerbalJudgment], rank_by: str) -> list[float]:
    """The scores a reranker ranks by: the parsed scores, or (`expected`) each judgment's expected score where
    it has one (else its parsed score; 0 when unparsed).

    >>> js = [VerbalJudgment(1.0, -0.1, "a", 1.4, None), VerbalJudgment(1.0, -0.05, "b", 1.1, None),
    ...       VerbalJudgment(3.0, -0.2, "c", None, None), VerbalJudgment(0.0, math.nan, None, None, "x")]
    >>> ranking_scores(js, "score"), ranking_scores(js, "expected")
    ([1.0, 1.0, 3.0, 0.0], [1.4, 1.1, 3.0, 0.0])
    """
    if rank_by == "expected":
        return [j.expected_score if j.expected_score is not None else j.score for j in judgments]
    return [j.score for j in judgments]


class VerbalReranker:
    """Scores from a verbal reranker (teacher or distilled student) behind any `GenerationBackend`.

    `tokenizer` decodes token ids (local and vLLM backends) to locate the score token, and applies the chat
    template when `prefill` is set; HTTP backends return token texts and need none.
    """

    name = "verbal"

    def __init__(self, backend: GenerationBackend, tokenizer: Any = None, config: VerbalConfig | None = None):
        self.backend, self.tokenizer, self.config = backend, tokenizer, config or VerbalConfig()
        c = self.config
        if c.prefill and tokenizer is None:
            raise ConfigError("VerbalReranker: prefill needs a tokenizer (for its chat template)")
        self.step = VerbalAnnotationStep(
            template_path=c.template_path,
            temperature=0.0,
            max_tokens=c.max_tokens,
            top_logprobs=c.top_logprobs,
            prefill=c.prefill,
            few_shot=c.few_shot,
            tokenizer=tokenizer,
        )

    def item(self, question: str, candidate: Candidate) -> dict[str, str]:
        """The annotation item the step's prompt reads."""
        return {"question": question, "doc_title": candidate.title, "doc_text": candidate.text}

    def rerank(
        self, questions: Sequence[str], candidates: Sequence[Sequence[Candidate]]
    ) -> list[RerankOutput]:
        check_inputs(questions, candidates, "VerbalReranker")
        pairs = flat_pairs(questions, candidates)
        requests = [self.step.prompt(self.item(q, c)) for q, c in pairs]
        results = self.backend.generate(requests) if requests else []
        choices = [r.choices[0] for r in results]
        judged = [
            judge(ch, self.config.prefill, self.tokenizer, self.config.max_comment_words) for ch in choices
        ]
        outputs = []
        for js, chs in zip(split_flat(judged, candidates), split_flat(choices, candidates), strict=True):
            extra = {
                "parse_failures": sum(j.failure is not None for j in js),
                "failure_reasons": [j.failure for j in js],
                "expected_scores": [j.expected_score for j in js],
                "raw": [self.config.prefill + ch.text for ch in chs],
                "finish_reasons": [ch.finish_reason for ch in chs],
                "prompt_version": self.step.version,
                "parsed_scores": [j.score for j in js],
            }
            scores, comments = ranking_scores(js, self.config.rank_by), [j.comment for j in js]
            tiebreak = [j.tiebreak for j in js]
            outputs.append(RerankOutput(scores, tiebreak=tiebreak, notes=comments, extra=extra))
        return outputs
