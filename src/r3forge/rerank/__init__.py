"""Rerankers for evidence selection: score each question's candidate passages, higher = more relevant.

`Reranker` is the protocol (`rerank(questions, candidates) -> [RerankOutput]`); `order` sorts a
`RerankOutput` into candidate indices, best first. Implementations: `RetrieverOrder` (no reranking),
`BiEncoderReranker`, `CrossEncoderReranker` (train one with `r3forge train-cross-encoder`), `QLMReranker`
(UPR query likelihood), `YesNoReranker` (P(yes) of a generation backend), `VerbalReranker` (Verbal-R3
comment + 1-5 score) and `ExtractiveVerbalReranker` (no model: a lexical stand-in in the verbal format).
"""

from r3forge.rerank.base import (
    Candidate,
    Reranker,
    RerankOutput,
    RetrieverOrder,
    order,
    passage,
    to_candidates,
)
from r3forge.rerank.encoders import (
    BiEncoderConfig,
    BiEncoderReranker,
    CrossEncoderConfig,
    CrossEncoderReranker,
)
from r3forge.rerank.extractive import ExtractiveVerbalReranker
from r3forge.rerank.lm import QLMConfig, QLMReranker, YesNoReranker
from r3forge.rerank.verbal import VerbalConfig, VerbalReranker

__all__ = [
    "BiEncoderConfig",
    "BiEncoderReranker",
    "Candidate",
    "CrossEncoderConfig",
    "CrossEncoderReranker",
    "ExtractiveVerbalReranker",
    "QLMConfig",
    "QLMReranker",
    "RerankOutput",
    "Reranker",
    "RetrieverOrder",
    "VerbalConfig",
    "VerbalReranker",
    "YesNoReranker",
    "order",
    "passage",
    "to_candidates",
]
