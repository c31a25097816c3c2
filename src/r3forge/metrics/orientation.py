"""QREAM's document metrics: question orientation `s_orient` (under a fixed LM) and factual increment `r_inc`.

    from r3forge.metrics.orientation import s_orient, r_inc
    s_orient(model, tokenizer, ["Paris is the capital of France."], ["What is the capital of France?"])
    r_inc([True, True, False])   # one of three atomic facts unsupported by r_raw -> 0.333...

s_orient(d, q) = (1/|q|) sum_t log P(q_t | q_<t, d): the length-normalized log-likelihood of the question
given the document, read from one teacher-forced forward pass over `template` (document first, then the
question). The question is tokenized on its own (with the leading space the template puts before it) and
appended to the tokenized prefix, so a question has the same tokens whatever the document: scores of several
documents for one question compare like with like. Not imported by `r3forge.metrics` (it needs torch).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

DEFAULT_TEMPLATE = "{document}\n\nQuestion:"  # the question follows after one space


def r_inc(supported: Sequence[bool]) -> float:
    """Share of a document's atomic facts NOT supported by the raw retrieval (FactScore-style); 0.0 for a
    document without facts.

    >>> r_inc([True, True, False, False])
    0.5
    >>> r_inc([])
    0.0
    """
    return 0.0 if not supported else sum(not s for s in supported) / len(supported)


def _pairs(tokenizer: Any, documents: Sequence[str], questions: Sequence[str], template: str):
    for doc, question in zip(documents, questions, strict=True):
        prefix = tokenizer(template.format(document=doc), add_special_tokens=True)["input_ids"]
        q = tokenizer(" " + question.strip(), add_special_tokens=False)["input_ids"]
        if not q:
            raise ValueError(f"s_orient: empty question for document {doc[:40]!r}")
        yield prefix, q


@torch.no_grad()
def s_orient(
    model: Any,
    tokenizer: Any,
    documents: Sequence[str],
    questions: Sequence[str],
    template: str = DEFAULT_TEMPLATE,
    batch_size: int = 8,
    max_length: int = 2048,
) -> list[float]:
    """Mean log P(question token | earlier question tokens, document) per (document, question) pair.

    Batches are left-padded (explicit position ids, so padding changes nothing) and only the logits of the
    question positions are computed (`logits_to_keep`). A prefix longer than `max_length` minus the question
    keeps its last tokens (the document's end, next to the question).
    """
    pairs = list(_pairs(tokenizer, documents, questions, template))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    device = next(model.parameters()).device
    out: list[float] = []
    for start in range(0, len(pairs), batch_size):
        chunk = [(p[-(max_length - len(q)) :], q) for p, q in pairs[start : start + batch_size]]
        seqs = [p + q for p, q in chunk]
        width, keep = max(map(len, seqs)), max(len(q) for _, q in chunk) + 1
        ids = torch.full((len(seqs), width), pad, dtype=torch.long)  # (B, T) left-padded
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for i, s in enumerate(seqs):
            ids[i, width - len(s) :] = torch.tensor(s)
            mask[i, width - len(s) :] = 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)  # (B, T)
        logits = model(
            input_ids=ids.to(device),
            attention_mask=mask.to(device),
            position_ids=positions.to(device),
            logits_to_keep=keep,
        ).logits.float()  # (B, keep, V): positions T-keep .. T-1
        logprobs = torch.log_softmax(logits[:, :-1], dim=-1)  # (B, keep-1, V) predicts T-keep+1 .. T-1
        targets = ids[:, width - keep + 1 :].to(device)  # (B, keep-1)
        token_lp = logprobs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # (B, keep-1)
        for i, (_, q) in enumerate(chunk):
            out.append(token_lp[i, -len(q) :].mean().item())  # the question's own tokens are last
    return out
