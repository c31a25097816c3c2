"""QREAM's s_orient against a direct, unbatched computation on the embedded model; r_inc on a hand-made
example with known unsupported facts."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from r3forge.metrics.orientation import DEFAULT_TEMPLATE, r_inc, s_orient

DOCS = [
    "Paris is the capital and most populous city of France.",
    "The tulip is a flowering plant of the lily family, grown from bulbs in spring across the Netherlands.",
    "France is a country in Western Europe. Its capital is Paris, on the Seine.",
]
QUESTIONS = [
    "What is the capital of France?",
    "What is the capital of France?",
    "Which river flows through Paris?",
]


@pytest.fixture(scope="module")
def lm(smollm2_path: Path):
    return AutoModelForCausalLM.from_pretrained(smollm2_path).eval(), AutoTokenizer.from_pretrained(
        smollm2_path
    )


def direct(model, tokenizer, doc: str, question: str) -> tuple[float, float]:
    """One pair, no padding: sum of log P(q_t | prefix, q_<t) over the question's tokens / their count, and
    the largest |logit| of the pass (the scale of its rounding)."""
    prefix = tokenizer(DEFAULT_TEMPLATE.format(document=doc))["input_ids"]
    q = tokenizer(" " + question, add_special_tokens=False)["input_ids"]
    ids = torch.tensor([prefix + q])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float()  # (T, V)
    logprobs = torch.log_softmax(logits, dim=-1)
    total = sum(logprobs[len(prefix) + t - 1, tok].item() for t, tok in enumerate(q))
    return total / len(q), logits.abs().max().item()


def test_batched_equals_direct(lm, fp32) -> None:
    model, tokenizer = lm
    batched = s_orient(model, tokenizer, DOCS, QUESTIONS, batch_size=3)  # different lengths: left padding
    unbatched = s_orient(model, tokenizer, DOCS, QUESTIONS, batch_size=1)
    for doc, question, got, alone in zip(DOCS, QUESTIONS, batched, unbatched, strict=True):
        want, scale = direct(model, tokenizer, doc, question)
        # a mean of logprobs from two fp32 forwards that sum in other orders (padding, batch shape):
        # 2·sqrt(L·k)·u·max|logit| (~9e-4); a token scored at the wrong position or a pad attended moves the
        # mean by > 1e-2
        atol = fp32.atol(scale, fp32.forward_length(model.config))
        assert got == pytest.approx(want, abs=atol) and alone == pytest.approx(got, abs=atol)


def test_an_on_topic_document_orients_better(lm) -> None:
    model, tokenizer = lm
    on_topic, off_topic, _ = s_orient(model, tokenizer, DOCS, QUESTIONS)
    assert on_topic > off_topic
    assert all(v < 0 for v in (on_topic, off_topic))


def test_long_documents_keep_their_end(lm) -> None:
    model, tokenizer = lm
    long_doc = "Filler sentence about nothing. " * 400 + DOCS[0]
    (score,) = s_orient(model, tokenizer, [long_doc], QUESTIONS[:1], max_length=256)
    (short,) = s_orient(model, tokenizer, [("Filler sentence about nothing. " * 20) + DOCS[0]], QUESTIONS[:1])
    assert score == pytest.approx(short, abs=0.5)  # both see the filler, then the Paris sentence


def test_r_inc_hand_made() -> None:
    # r_raw: "Marie Curie was born in Warsaw in 1867. She won two Nobel Prizes."
    # candidate facts and whether r_raw supports them:
    facts = {
        "Marie Curie was born in Warsaw.": True,
        "Marie Curie was born in 1867.": True,
        "Marie Curie won two Nobel Prizes.": True,
        "Marie Curie died in 1934.": False,  # not in r_raw: an increment
        "Marie Curie discovered polonium.": False,  # not in r_raw
    }
    assert r_inc(list(facts.values())) == pytest.approx(0.4)
    assert r_inc([True] * 3) == 0.0 and r_inc([False]) == 1.0
