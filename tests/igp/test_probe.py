"""IGP probes with the embedded model: NU(q) once per question (cached), every NU(q | d) in one batched
call, and IG = NU(q) - NU(q | d) equal to probing each prompt on its own."""

from __future__ import annotations

from pathlib import Path

import pytest

from r3forge.backends import HFLocalBackend, HFLocalConfig
from r3forge.igp.probe import ProbeConfig, probe_gains, probe_request
from r3forge.igp.uncertainty import normalized_uncertainty

CONFIG = ProbeConfig(k=8, max_steps=6)
QUESTIONS = ["Who wrote Hamlet?", "What is the capital of Peru?"]
DOCS = [["Hamlet is a tragedy by William Shakespeare.", "The Nile is a river in Africa."],
        ["Lima is the capital and largest city of Peru."]]  # fmt: skip


@pytest.fixture(scope="module")
def backend(smollm2_path: Path) -> HFLocalBackend:
    return HFLocalBackend.from_config(HFLocalConfig(model=str(smollm2_path), batch_size=4))


def test_batched_cached_and_equal_to_single_probes(backend: HFLocalBackend, counting_backend) -> None:
    counting, cache = counting_backend(backend), {}
    gains = probe_gains(counting, QUESTIONS, DOCS, CONFIG, cache)
    assert (counting.calls, counting.requests) == (2, 5)  # unconditional batch + one conditional batch
    assert set(cache) == set(QUESTIONS)
    for question, docs, g in zip(QUESTIONS, DOCS, gains, strict=True):
        alone = backend.generate([probe_request(question, None, CONFIG)])[0].choices[0]
        assert g.question.nu == pytest.approx(normalized_uncertainty(alone.top_logprobs, 8, 6).nu, abs=1e-5)
        for doc, conditional, ig in zip(docs, g.conditional, g.ig, strict=True):
            single = backend.generate([probe_request(question, doc, CONFIG)])[0].choices[0]
            assert conditional.nu == pytest.approx(
                normalized_uncertainty(single.top_logprobs, 8, 6).nu, abs=1e-5
            )
            assert ig == pytest.approx(g.question.nu - conditional.nu)
    again = probe_gains(counting, QUESTIONS[:1], DOCS[:1], CONFIG, cache)
    assert counting.calls == 3 and again[0].question == gains[0].question  # NU(q) came from the cache


def test_prompt_and_config() -> None:
    request = probe_request("Q?", "Some passage.", CONFIG)
    assert request.messages[0]["content"] == "Some passage.\n\nQ?" and request.temperature == 0.0
    assert (request.max_tokens, request.top_logprobs) == (6, 8)
    with pytest.raises(ValueError, match="K >= 2"):
        ProbeConfig(k=1)
    with pytest.raises(ValueError, match="candidate lists"):
        probe_gains(None, ["q"], [], CONFIG)
