"""LM rerankers on the embedded SmolLM2-135M: query likelihood equals an unbatched forward pass and prefers
the passage that answers; Yes/No probabilities come from the backend's top-k logprobs."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from r3forge.backends import HFLocalBackend, HFLocalConfig
from r3forge.errors import ConfigError
from r3forge.rerank import Candidate, QLMConfig, QLMReranker, Reranker, YesNoReranker, order
from r3forge.rerank.lm import answer_probability

QUESTIONS = ["What is the capital of France?", "Who wrote the play Hamlet?"]
PARIS = Candidate("paris", "Paris", "Paris is the capital and largest city of France.")
HAMLET = Candidate("hamlet", "Hamlet", "Hamlet is a tragedy written by William Shakespeare.")
TULIP = Candidate("tulip", "Tulip", "The tulip is a flowering plant of the lily family, grown from bulbs.")
CANDIDATES = [[TULIP, HAMLET, PARIS], [PARIS, TULIP, HAMLET]]


@pytest.fixture(scope="module")
def backend(smollm2_path: Path) -> HFLocalBackend:
    return HFLocalBackend.from_config(HFLocalConfig(model=str(smollm2_path), batch_size=4))


def direct_mean_logprob(reranker: QLMReranker, question: str, candidate: Candidate) -> tuple[float, float]:
    """One unpadded forward pass over the whole sequence: mean log p of the question tokens, and the largest
    |logit| of the pass (the scale of its rounding)."""
    ids, n = reranker.encode(question, candidate)
    x = torch.tensor([ids])  # [1, L]
    with torch.inference_mode():
        logits = reranker.model(input_ids=x).logits[0].float()  # [L, V]
    logprobs = logits.log_softmax(-1)
    targets = x[0, len(ids) - n :]  # [n]: the question tokens
    mean = logprobs[len(ids) - n - 1 : -1].gather(-1, targets[:, None]).mean().item()
    return mean, logits.abs().max().item()


def test_qlm_matches_unbatched_and_prefers_the_answer(backend: HFLocalBackend, fp32) -> None:
    # the backend's loaded model and tokenizer, shared (one copy of the weights in the test session)
    reranker = QLMReranker(backend.model, backend.tokenizer, QLMConfig(batch_size=4))
    assert isinstance(reranker, Reranker)
    outs = reranker.rerank(QUESTIONS, CANDIDATES)  # 6 pairs of different lengths: 2 left-padded batches
    pairs = [(i, j) for i in range(2) for j in range(3)]
    length = {p: len(reranker.encode(QUESTIONS[p[0]], CANDIDATES[p[0]][p[1]])[0]) for p in pairs}
    for i, j in (min(pairs, key=length.get), max(pairs, key=length.get)):  # most padded; 2nd batch
        score, total = outs[i].scores[j], outs[i].extra["sum_logprob"][j]
        want, scale = direct_mean_logprob(reranker, QUESTIONS[i], CANDIDATES[i][j])
        # two fp32 forwards that sum in other orders (left-padded batch vs one row): 2·sqrt(L·k)·u·max|logit|
        # (~9e-4); scoring the passage's tokens or a shifted position moves the mean by > 1e-2
        assert score == pytest.approx(want, abs=fp32.atol(scale, fp32.forward_length(reranker.model.config)))
        # float64 arithmetic on the same sum (fsum, then / n): exact to ~1e-16, 1e-6 is only a readable bound
        assert total == pytest.approx(score * outs[i].extra["question_tokens"], rel=1e-6)
    assert order(outs[0])[0] == 2 and outs[0].scores[2] > outs[0].scores[0] + 0.5  # Paris >> tulip
    assert order(outs[1])[0] == 2  # Hamlet for the author


def test_qlm_truncates_long_passages(backend: HFLocalBackend) -> None:
    reranker = QLMReranker(backend.model, backend.tokenizer, QLMConfig(max_passage_tokens=5))
    long = Candidate("x", "", " ".join(["word"] * 50))
    ids, n = reranker.encode("Why?", long)
    short, _ = reranker.encode("Why?", Candidate("y", "", " ".join(["word"] * 5)))
    assert len(ids) == len(short) and n == len(
        backend.tokenizer("Why?", add_special_tokens=False)["input_ids"]
    )
    with pytest.raises(ConfigError, match="max_passage_tokens"):
        QLMConfig(max_passage_tokens=0)


def test_yes_no_probabilities(backend: HFLocalBackend, fp32) -> None:
    reranker = YesNoReranker(backend, backend.tokenizer, top_logprobs=20)
    outs = reranker.rerank(QUESTIONS, [CANDIDATES[0][1:], CANDIDATES[1][:1]])
    assert [len(o.scores) for o in outs] == [2, 1]
    for o in outs:
        for p_yes, p_no, t in zip(o.scores, o.extra["p_no"], o.tiebreak, strict=True):
            assert 0.0 <= p_yes <= 1.0 and 0.0 <= p_no <= 1.0 and p_yes + p_no <= 1.0 + 1e-6
            assert t == -p_no
    # the same number from one direct request
    request = reranker.request(QUESTIONS[1], PARIS)
    top = backend.generate([request])[0].choices[0].top_logprobs[0]
    decoded = {backend.tokenizer.decode([k]).strip().lower(): 0.0 for k in top}
    expected = sum(
        math.exp(lp) for k, lp in top.items() if backend.tokenizer.decode([k]).strip().lower() == "yes"
    )
    # a padded batch of 3 vs one request: each logprob within 2·sqrt(L·k)·u·max|logit| (~9e-4), so a sum of
    # probabilities within that times the sum; the No token's or another position's mass is off by > 1e-2
    with torch.inference_mode():
        scale = backend.model(torch.tensor([backend.encode(request)])).logits.abs().max().item()
    atol = expected * fp32.atol(scale, fp32.forward_length(backend.model.config))
    assert outs[1].scores[0] == pytest.approx(expected, abs=atol)
    assert "yes" in decoded or "no" in decoded  # the prompt makes the model answer Yes or No


def test_answer_probability_keys() -> None:
    assert answer_probability({" YES ": math.log(0.25), "Yes": math.log(0.5), "Yess": 0.0}, "yes", None) == (
        pytest.approx(0.75)
    )
    with pytest.raises(ConfigError, match="pass its tokenizer"):
        answer_probability({17: -1.0}, "yes", None)
    with pytest.raises(ConfigError, match="top_logprobs must be >= 1"):
        YesNoReranker(backend=None, top_logprobs=0)  # type: ignore[arg-type]
