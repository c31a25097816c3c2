"""The verbal reranker: prompts as the annotation step builds them; scores, score-token tie-breaks and
comments from hand-made outputs (token ids or token texts), and one real generate call."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from r3forge.annotate.verbal import VerbalAnnotationStep
from r3forge.backends import HFLocalBackend, HFLocalConfig
from r3forge.backends.base import Choice
from r3forge.errors import ConfigError
from r3forge.rerank import Candidate, Reranker, RerankOutput, VerbalConfig, VerbalReranker, order
from r3forge.rerank.verbal import judge, ranking_scores

PARIS = Candidate("paris", "Paris", "Paris is the capital and largest city of France.")
TULIP = Candidate("tulip", "Tulip", "The tulip is a flowering plant of the lily family.")
TEXT = "Comment: It says Paris is the capital of France.\nScore: 4"


@pytest.fixture(scope="module")
def backend(smollm2_path: Path) -> HFLocalBackend:
    return HFLocalBackend.from_config(HFLocalConfig(model=str(smollm2_path), batch_size=4))


def id_choice(tokenizer, text: str, score_lp: float) -> Choice:
    """`text` as the local backends return it: token ids, one logprob each, top-k dicts keyed by id."""
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    digit = {str(d): tokenizer.convert_tokens_to_ids(str(d)) for d in range(1, 6)}
    logprobs = [-0.1] * len(ids)
    logprobs[-1] = score_lp  # the last token is the score digit
    top = [{i: lp} for i, lp in zip(ids, logprobs, strict=True)]
    top[-1] = {digit["4"]: score_lp, digit["3"]: math.log(0.2), digit["5"]: math.log(0.1)}
    return Choice(text, ids, logprobs, top, "stop")


def test_judge_with_token_ids_and_texts(backend: HFLocalBackend) -> None:
    tok = backend.tokenizer
    j = judge(id_choice(tok, TEXT, math.log(0.7)), "", tok)
    assert (j.score, j.comment, j.failure) == (4.0, "It says Paris is the capital of France.", None)
    assert j.tiebreak == pytest.approx(math.log(0.7))
    assert j.expected_score == pytest.approx((4 * 0.7 + 3 * 0.2 + 5 * 0.1) / 1.0)
    # a prefilled prompt: the output starts after "Comment:"
    cut = TEXT.removeprefix("Comment:")
    assert judge(id_choice(tok, cut, -0.3), "Comment:", tok).tiebreak == pytest.approx(-0.3)
    # an HTTP server: token texts, no ids; the score token found through the top-k texts
    http = Choice(
        TEXT, [], [-0.1, -0.2, -0.05], [{"Comment": -0.1}, {":": -0.2}, {"4": -0.05, "5": -3.0}], "stop"
    )
    assert (judge(http, "", None).score, judge(http, "", None).tiebreak) == (4.0, -0.05)
    bad = judge(Choice("I think it is relevant.", [], [], [], "stop"), "", None)
    assert (bad.score, math.isnan(bad.tiebreak), bad.comment, bad.failure) == (
        0.0,
        True,
        None,
        "missing_comment",
    )


def test_prompts_match_the_annotation_step(backend: HFLocalBackend) -> None:
    config = VerbalConfig(max_tokens=16, prefill="Comment:", few_shot=True)
    reranker = VerbalReranker(backend, backend.tokenizer, config)
    step = VerbalAnnotationStep(max_tokens=16, prefill="Comment:", few_shot=True, tokenizer=backend.tokenizer)
    item = {"question": "What is the capital of France?", "doc_title": "Paris", "doc_text": PARIS.text}
    assert reranker.step.prompt(reranker.item(item["question"], PARIS)) == step.prompt(item)
    assert step.prompt(item).prompt.endswith("<|im_start|>assistant\nComment:")  # template + prefill
    with pytest.raises(ConfigError, match="prefill needs a tokenizer"):
        VerbalReranker(backend, None, VerbalConfig(prefill="Comment:"))
    with pytest.raises(ConfigError, match="max_tokens >= 1"):
        VerbalConfig(max_tokens=0)


def test_real_generation(backend: HFLocalBackend) -> None:
    # 135M rarely finishes the format in a few tokens: this checks the mechanics, not the parse rate
    reranker = VerbalReranker(backend, backend.tokenizer, VerbalConfig(max_tokens=12, prefill="Comment:"))
    assert isinstance(reranker, Reranker)
    outs = reranker.rerank(["What is the capital of France?", "Who wrote Hamlet?"], [[PARIS, TULIP], []])
    assert [len(o.scores) for o in outs] == [2, 0]
    for out in outs:
        n = len(out.scores)
        assert len(out.tiebreak) == len(out.notes) == len(out.extra["raw"]) == n
        assert all(s in (0.0, 1.0, 2.0, 3.0, 4.0, 5.0) for s in out.scores)
        assert all(r.startswith("Comment:") for r in out.extra["raw"])
        failures = out.extra["failure_reasons"]
        assert out.extra["parse_failures"] == sum(f is not None for f in failures)
        for score, note, failure in zip(out.scores, out.notes, failures, strict=True):
            assert (failure is None) == (score > 0) == (note is not None)
    assert sorted(order(outs[0])) == [0, 1]


def test_order_uses_the_score_token_logprob() -> None:
    out = RerankOutput([4.0, 4.0, 0.0, 5.0], tiebreak=[-0.9, -0.1, math.nan, -2.0])
    assert order(out) == [3, 1, 0, 2]


def test_rank_by_expected_score(backend: HFLocalBackend) -> None:
    """Two pairs both scored 1: by the parsed score they tie (the logprob of "1" breaks it, which puts the
    more confidently irrelevant one first); by the expected score the one with more mass on 2..5 comes first."""
    tok = backend.tokenizer
    digit = {d: tok.convert_tokens_to_ids(str(d)) for d in range(1, 6)}
    text = "Comment: It is about a plant.\nScore: 1"
    ids = tok(text, add_special_tokens=False)["input_ids"]

    def choice(p1: float, p5: float) -> Choice:
        top = [{i: -0.1} for i in ids[:-1]] + [{digit[1]: math.log(p1), digit[5]: math.log(p5)}]
        return Choice(text, ids, [-0.1] * (len(ids) - 1) + [math.log(p1)], top, "stop")

    sure, unsure = judge(choice(0.9, 0.1), "", tok), judge(choice(0.6, 0.4), "", tok)
    assert (sure.score, unsure.score) == (1.0, 1.0)
    assert order(
        RerankOutput(ranking_scores([sure, unsure], "score"), tiebreak=[sure.tiebreak, unsure.tiebreak])
    ) == [0, 1]
    expected = ranking_scores([sure, unsure], "expected")
    assert expected == pytest.approx([1.4, 2.6]) and order(RerankOutput(expected)) == [1, 0]
    with pytest.raises(ConfigError, match="rank_by must be one of"):
        VerbalConfig(rank_by="mean")
