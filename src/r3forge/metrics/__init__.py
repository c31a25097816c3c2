"""Metrics for answers (EM, F1, cover), rankings (NDCG, Recall, Precision, MRR, Spearman) and cost (TK, NTE)."""

from r3forge.metrics.efficiency import count_tokens, input_tokens, nte
from r3forge.metrics.qa import (
    answer_in_text,
    cover_batch,
    exact_match,
    exact_match_batch,
    f1_batch,
    f1_score,
    normalize_answer,
    short_answer,
)
from r3forge.metrics.ranking import (
    mrr,
    mrr_batch,
    ndcg_at_k,
    ndcg_batch,
    precision_at_k,
    precision_batch,
    recall_at_k,
    recall_batch,
    spearman,
)

__all__ = [
    "answer_in_text",
    "count_tokens",
    "cover_batch",
    "exact_match",
    "exact_match_batch",
    "f1_batch",
    "f1_score",
    "input_tokens",
    "mrr",
    "mrr_batch",
    "ndcg_at_k",
    "ndcg_batch",
    "normalize_answer",
    "nte",
    "precision_at_k",
    "precision_batch",
    "recall_at_k",
    "recall_batch",
    "short_answer",
    "spearman",
]
