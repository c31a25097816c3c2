"""The two QREAM criteria as synthesis steps: utility (a fixed reader answers from the candidate) and
fidelity (an LLM extracts the candidate's atomic facts; an LLM judges each against r_raw).

    run_step(ReaderStep(), candidates, reader, EngineConfig("runs/qream/reader"))
    run_step(FactExtractStep(), candidates, extractor, EngineConfig("runs/qream/facts"))
    run_step(FactJudgeStep(), with_facts, judge, EngineConfig("runs/qream/judge"))   # one request per fact

A candidate item: `question_id`, `question`, `answers`, `round`, `document` (the candidate text) and, for
the judge, `raw` (r_raw) and `facts`. Reader, extractor and judge may be different models on different
backends, as the paper notes.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

from r3forge.backends.base import GenerationRequest, GenerationResult, p_yes, token_decoder
from r3forge.errors import ConfigError
from r3forge.metrics.qa import normalize_answer, short_answer
from r3forge.qream.select import hard_filter, s_fact, s_perf
from r3forge.synth.engine import Rejected
from r3forge.text import complete_sentences, content_words

READER_VERSION = "qream_reader_v1"
FACTS_VERSION = "qream_facts_v1"
JUDGE_VERSION = "qream_fact_judge_v1"
READER_PROMPT = (
    "Answer the question using the document. Reply with the answer only: a short phrase, no sentence.\n\n"
    "Document: {document}\n\nQuestion: {question}"
)
# reader demos ((document, question), answer): with `few_shot`, earlier chat turns that show the short-answer form
READER_DEMOS = (
    (
        (
            "The Eiffel Tower was completed in 1889 for the World's Fair in Paris.",
            "When was the Eiffel Tower completed?",
        ),
        "1889",
    ),
    (
        ("Hamlet is a tragedy by William Shakespeare, set in Denmark.", "Who wrote Hamlet?"),
        "William Shakespeare",
    ),
)
FACTS_PROMPT = (
    "List the atomic facts stated in the text below: short, self-contained sentences, one fact each, one per "
    "line, each line starting with '- '. Do not add facts the text does not state.\n\nText: {document}"
)
JUDGE_PROMPT = (
    "Reference text:\n{raw}\n\nClaim: {fact}\n\nIs the claim supported by the reference text? Answer with "
    "one word, yes or no."
)
_BULLET = re.compile(r"^\s*(?:[-*\u2022]|\d+[.)])\s+(?P<fact>.+?)\s*$")
_VERDICT = re.compile(r"\b(yes|no)\b", re.IGNORECASE)


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def candidate_key(item: dict) -> dict:
    """A candidate's identity: question, round and a hash of its text."""
    return {
        "question_id": item["question_id"],
        "round": item["round"],
        "document_sha256": _sha(item["document"]),
    }


def _chat(content: str, temperature: float, max_tokens: int) -> GenerationRequest:
    return GenerationRequest(
        messages=[{"role": "user", "content": content}], temperature=temperature, max_tokens=max_tokens
    )


@dataclass
class ReaderStep:
    """Utility: the reader's answer from the candidate, the hard filter and S_perf."""

    max_tokens: int = 32
    few_shot: bool = False
    tokenizer: Any = field(default=None, repr=False, compare=False)  # unused; uniform with other steps
    name: str = field(default="qream_reader", init=False)

    def __post_init__(self) -> None:
        self.version = READER_VERSION + ("+fs" if self.few_shot else "")

    def key(self, item: dict) -> dict:
        return candidate_key(item)

    def prompt(self, item: dict) -> GenerationRequest:
        """One user turn (after the two `READER_DEMOS` turns with `few_shot`: small readers then answer with a
        short phrase instead of a sentence)."""
        turns = []
        for (document, question), answer in READER_DEMOS if self.few_shot else ():
            turns += [
                {"role": "user", "content": READER_PROMPT.format(document=document, question=question)},
                {"role": "assistant", "content": answer},
            ]
        content = READER_PROMPT.format(document=item["document"], question=item["question"])
        return GenerationRequest(
            messages=[*turns, {"role": "user", "content": content}],
            temperature=0.0,
            max_tokens=self.max_tokens,
        )

    def parse(self, item: dict, result: GenerationResult) -> dict | Rejected:
        answer = short_answer(result.choices[0].text)
        if not answer:
            return Rejected("empty_answer", "the reader gave no answer")
        golds = list(item["answers"])
        return {
            **candidate_key(item),
            "answer": answer,
            "passes": hard_filter(answer, golds),
            "s_perf": s_perf(answer, golds) if golds else 0.0,
        }


def parse_facts(text: str, max_facts: int) -> list[str]:
    """Bulleted or numbered lines -> facts (deduplicated, at most `max_facts`). An output without a list
    (small models often write prose) falls back to its sentences, one fact each, as FactScore splits text.

    >>> parse_facts("Facts:\\n- Paris is in France.\\n2) It has 2 million people.\\n- Paris is in France.", 10)
    ['Paris is in France.', 'It has 2 million people.']
    >>> parse_facts("Paris is in France. It is large.", 10)
    ['Paris is in France.', 'It is large.']
    """
    bullets = [m["fact"] for m in map(_BULLET.match, text.splitlines()) if m]
    lines = bullets or [s for s in complete_sentences(text) if len(s.split()) >= 3]
    return list(dict.fromkeys(lines))[:max_facts]


@dataclass
class FactExtractStep:
    """Fidelity, part 1: the candidate's atomic facts."""

    max_facts: int = 20
    max_tokens: int = 384
    tokenizer: Any = field(default=None, repr=False, compare=False)
    name: str = field(default="qream_facts", init=False)

    def __post_init__(self) -> None:
        self.version = f"{FACTS_VERSION}+max{self.max_facts}"

    def key(self, item: dict) -> dict:
        return candidate_key(item)

    def prompt(self, item: dict) -> GenerationRequest:
        return _chat(FACTS_PROMPT.format(document=item["document"]), 0.0, self.max_tokens)

    def parse(self, item: dict, result: GenerationResult) -> dict | Rejected:
        facts = parse_facts(result.choices[0].text, self.max_facts)
        if not facts:
            reason = "truncated" if result.choices[0].finish_reason == "length" else "no_facts"
            return Rejected(reason, "neither '- fact' lines nor complete sentences in the output")
        return {**candidate_key(item), "facts": facts}


@dataclass
class FactJudgeStep:
    """Fidelity, part 2: one request per fact ("supported by r_raw?"); S_fact = supported / all facts.

    `scoring="verdict"` (the paper's LLM judge) parses the generated yes/no; a verdict that is neither counts
    as not supported (and in `unclear`). `scoring="probability"` reads one answer token's top-k logprobs:
    p_yes = P(yes) / (P(yes) + P(no)), supported when p_yes >= `tau` (calibrate `tau` on the probe set of
    `qream/judge_probe.py`); a position where neither word is in the top k counts as unclear, p_yes None.
    Both keep `p_yes` per fact (the verdict mode's from its first generated token).
    """

    max_tokens: int = 8
    scoring: str = "verdict"  # "verdict" | "probability"
    tau: float = 0.5
    top_logprobs: int = 20
    tokenizer: Any = field(default=None, repr=False, compare=False)  # decodes token ids (in-process backends)
    name: str = field(default="qream_fact_judge", init=False)

    def __post_init__(self) -> None:
        if self.scoring not in ("verdict", "probability"):
            raise ConfigError(f"FactJudgeStep: scoring must be verdict or probability, got {self.scoring!r}")
        if not 0 <= self.tau <= 1 or self.top_logprobs < 2:
            raise ConfigError(f"FactJudgeStep: need 0 <= tau <= 1 and top_logprobs >= 2, got {self}")
        # tau is not in the version: a cached record is re-thresholded by `at_tau`, not re-generated
        self.version = JUDGE_VERSION + ("" if self.scoring == "verdict" else f"+prob@{self.top_logprobs}")
        self.decode = token_decoder(self.tokenizer)

    def key(self, item: dict) -> dict:
        return candidate_key(item) | {"raw_sha256": _sha(item["raw"]), "facts": list(item["facts"])}

    def prompt(self, item: dict) -> list[GenerationRequest]:
        tokens = 1 if self.scoring == "probability" else self.max_tokens
        return [
            GenerationRequest(
                messages=[{"role": "user", "content": JUDGE_PROMPT.format(raw=item["raw"], fact=f)}],
                temperature=0.0,
                max_tokens=tokens,
                top_logprobs=self.top_logprobs,
            )
            for f in item["facts"]
        ]

    def parse(self, item: dict, results: list[GenerationResult]) -> dict | Rejected:
        choices = [r.choices[0] for r in results]
        probs = [p_yes(c.top_logprobs[0], self.decode) if c.top_logprobs else None for c in choices]
        if self.scoring == "probability":
            supported = [p is not None and p >= self.tau for p in probs]
            unclear = sum(p is None for p in probs)
        else:
            verdicts = [_VERDICT.search(c.text) for c in choices]
            supported = [bool(v) and v.group(1).lower() == "yes" for v in verdicts]
            unclear = sum(v is None for v in verdicts)
        return {
            **candidate_key(item),
            "facts": list(item["facts"]),
            "supported": supported,
            "p_yes": probs,
            "unclear": unclear,
            "s_fact": s_fact(supported),
        }


def at_tau(record: dict, tau: float) -> dict:
    """A probability-scored judge record with `supported` and `s_fact` recomputed at threshold `tau` (cached
    records keep the tau they were parsed with).

    >>> at_tau({"p_yes": [0.9, 0.4, None], "supported": [True, False, False], "s_fact": 1 / 3}, 0.3)["s_fact"]
    0.6666666666666666
    """
    supported = [p is not None and p >= tau for p in record["p_yes"]]
    return record | {"supported": supported, "s_fact": s_fact(supported)}


def lexical_support(fact: str, raw: str, threshold: float = 0.8) -> bool:
    """A judge without a model: the fact counts as supported when at least `threshold` of its content tokens
    (SQuAD-normalized, function words dropped) occur in r_raw. It cannot see paraphrase or negation, so it
    is a cheap proxy for the LLM judge (for small-model CPU runs, where a 135M judge is near chance), not a
    replacement.

    >>> raw = "Paris is the capital of France. It has 2.1 million inhabitants."
    >>> lexical_support("The capital of France is Paris.", raw), lexical_support("Paris is in Spain.", raw)
    (True, False)
    >>> lexical_support("It is.", raw)  # no content token: nothing to support
    False
    """
    if not 0 < threshold <= 1:
        raise ValueError(f"lexical support threshold must be in (0, 1], got {threshold}")
    return lexical_overlap(fact, raw) >= threshold


def lexical_overlap(fact: str, raw: str) -> float:
    """The share of the fact's content tokens found in r_raw (what `lexical_support` thresholds); 0.0 for a
    fact without content tokens.

    >>> lexical_overlap("Paris is in Spain.", "Paris is the capital of France.")
    0.5
    """
    content = content_words(fact)
    vocabulary = set(normalize_answer(raw).split())
    return sum(t in vocabulary for t in content) / len(content) if content else 0.0


def judge_lexical(item: dict, threshold: float = 0.8) -> dict:
    """The `FactJudgeStep` record of one candidate item (`raw`, `facts`), judged by `lexical_support`."""
    supported = [lexical_support(f, item["raw"], threshold) for f in item["facts"]]
    return {
        **candidate_key(item),
        "facts": list(item["facts"]),
        "supported": supported,
        "unclear": 0,
        "s_fact": s_fact(supported),
    }
