"""Set-aware IGP with the embedded model: round 0 is plain IGP, later rounds probe the selected set plus each
candidate, one batched call per round; Top-M, T_p, the token guard and both gates; ties by retriever index."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from r3forge.backends import HFLocalBackend, HFLocalConfig
from r3forge.igp.probe import ProbeConfig, probe_gains, probe_request
from r3forge.igp.select import SelectConfig, igp_select, truncate
from r3forge.igp.setaware import argmax_gain, greedy_select, set_document, set_probe_request
from r3forge.igp.uncertainty import normalized_uncertainty

CONFIG = ProbeConfig(k=20, max_steps=8)
QUESTIONS = ["Who wrote Hamlet?", "What is the capital of Peru?"]
DOCS = [["The Nile is a river in Africa.", "Hamlet is a tragedy by William Shakespeare.",
         "Shakespeare was born in Stratford-upon-Avon."],
        ["Peru is a country in South America.", "Lima is the capital and largest city of Peru.",
         "Bananas are rich in potassium."]]  # fmt: skip


@pytest.fixture(scope="module")
def backend(smollm2_path: Path) -> Iterator[HFLocalBackend]:
    """One torch thread while this module runs: on a shared, loaded CPU the default pool's spinning made the
    module ~19x slower (344 s vs 18 s measured); the caller's thread count is restored after."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield HFLocalBackend.from_config(HFLocalConfig(model=str(smollm2_path), batch_size=8))
    torch.set_num_threads(threads)


def nu_atol(backend: HFLocalBackend, request, fp32) -> float:
    """|Δ NU| of one probe in two batches (other padding): each logprob within 2·sqrt(L·k)·u·max|logit| (two
    fp32 passes that sum in other orders, ~9e-4), a top-k entropy within 2·log k times that, so NU within
    twice it (~2e-3); the prompt's logits stand for the scale."""
    with torch.no_grad():
        scale = backend.model(torch.tensor([backend.encode(request)])).logits.abs().max()
    return 2 * fp32.atol(scale, fp32.forward_length(backend.model.config))


@pytest.fixture(scope="module")
def cache() -> dict:
    return {}  # NU(q), shared by every test of this module (one backend, one ProbeConfig)


@pytest.fixture(scope="module")
def full(backend: HFLocalBackend, cache: dict, counting_backend):
    """Both questions to M = 3 with T_p = -inf (never stops): every candidate, in greedy order."""
    counting = counting_backend(backend)
    selections = greedy_select(counting, QUESTIONS, DOCS, CONFIG, SelectConfig(top_m=3), cache)
    return selections, counting


def test_round_zero_is_plain_ig_and_one_call_per_round(backend: HFLocalBackend, cache: dict, full) -> None:
    selections, counting = full
    rounds = max(len(s.round_gains) for s in selections)
    assert rounds == 3 and counting.calls == rounds + 1  # NU(q) batch, then one batch per round
    assert counting.requests == 2 + 6 + 4 + 2
    plain = probe_gains(backend, QUESTIONS, DOCS, CONFIG, cache)  # the same round-0 batch
    for sel, gains in zip(selections, plain, strict=True):
        assert sel.mode == "igp" and sel.passed == 3 and sel.probes == 3 + 2 + 1
        assert sel.nu_question == gains.question.nu
        # the same batch recomputed (same shapes and threads: the same sums), then float64: exact to ~1e-16
        assert sel.round_gains[0] == pytest.approx(dict(enumerate(gains.ig)), abs=1e-9)
        assert [len(r) for r in sel.round_gains] == [3, 2, 1] and sorted(sel.indices) == [0, 1, 2]
        assert sel.indices[0] == igp_select(gains.ig, gains.question.nu, [1, 1, 1], SelectConfig()).indices[0]
        assert sel.nu[0] == gains.conditional[sel.indices[0]].nu
        before = [sel.nu_question, *sel.nu[:-1]]
        for r, (index, gain) in enumerate(zip(sel.indices, sel.gains, strict=True)):
            assert gain == sel.round_gains[r][index] == max(sel.round_gains[r].values())
            assert gain == pytest.approx(before[r] - sel.nu[r], abs=1e-9)  # conditional on S, not on {}


def test_later_rounds_probe_the_selected_set(backend: HFLocalBackend, full, fp32) -> None:
    sel = full[0][0]
    first, second = (DOCS[0][i] for i in sel.indices[:2])
    request = set_probe_request(QUESTIONS[0], [first, second], CONFIG)
    assert request.messages[0]["content"] == f"{first}\n\n{second}\n\n{QUESTIONS[0]}"
    alone = backend.generate([request])[0].choices[0]  # the same probe on its own
    # a probe of {} or of one document instead of the set moves NU by > 1e-2
    atol = nu_atol(backend, request, fp32)
    assert sel.nu[1] == pytest.approx(normalized_uncertainty(alone.top_logprobs, 20, 8).nu, abs=atol)


def test_top_m_threshold_and_gates(backend: HFLocalBackend, cache: dict, full, counting_backend) -> None:
    counting = counting_backend(backend)  # NU(q) is cached from here on: calls count rounds only
    one = greedy_select(counting, QUESTIONS, DOCS, CONFIG, SelectConfig(top_m=1), cache)
    assert counting.calls == 1 and [s.indices for s in one] == [s.indices[:1] for s in full[0]]
    assert [s.probes for s in one] == [3, 3]
    at_zero = greedy_select(backend, QUESTIONS, DOCS, CONFIG, SelectConfig(threshold=0.0, top_m=2), cache)
    for sel in at_zero:  # every pick reached T_p; a stop before M came from a best gain below it
        assert all(g >= 0.0 for g in sel.gains) and len(sel.indices) <= 2
        if len(sel.indices) < 2:
            assert max(sel.round_gains[len(sel.indices)].values()) < 0.0
    counting.calls = 0
    above = greedy_select(counting, QUESTIONS[:1], DOCS[:1], CONFIG, SelectConfig(threshold=2.0), cache)
    assert counting.calls == 1 and (above[0].indices, above[0].mode, above[0].passed) == ([], "igp", 0)
    gated = SelectConfig(threshold=2.0, top_m=2, min_pass=1)  # T_p above every gain: nothing passes
    sel = greedy_select(backend, QUESTIONS[1:], DOCS[1:], CONFIG, gated, cache)[0]
    assert (sel.indices, sel.mode, sel.gains, sel.probes) == ([0, 1], "fallback_pass_rate", [], 3)
    counting.calls = 0
    certain = SelectConfig(top_m=2, gate_nu=1.01)  # NU <= 1: every question counts as certain
    for sel in greedy_select(counting, QUESTIONS, DOCS, CONFIG, certain, cache):
        assert (sel.indices, sel.mode, sel.probes, sel.round_gains) == ([0, 1], "skipped_certain", 0, [])
    assert counting.calls == 0  # skipped questions spend no probe
    empty = greedy_select(backend, QUESTIONS[:1], [[]], CONFIG, SelectConfig(min_pass=1), cache)
    assert (empty[0].indices, empty[0].mode) == ([], "fallback_pass_rate")


def test_token_budget_cuts_like_truncate(backend: HFLocalBackend, cache: dict, full, fp32) -> None:
    tokens = [[len(backend.tokenizer(d)["input_ids"]) for d in docs] for docs in DOCS]
    first, second = full[0][0].indices[:2]
    budget = tokens[0][first] + tokens[0][second] - 1  # the first question's second pick won't fit
    guarded = SelectConfig(top_m=2, token_budget=budget)
    selections = greedy_select(backend, QUESTIONS, DOCS, CONFIG, guarded, cache, tokens)
    # round 0 is the same batch; a later round probes fewer candidates (other padding): IG = NU - NU is
    # within twice the NU bound; a pick cut at the wrong place moves a gain by > 1e-2
    requests = [set_probe_request(q, docs[:2], CONFIG) for q, docs in zip(QUESTIONS, DOCS, strict=True)]
    atol = 2 * max(nu_atol(backend, request, fp32) for request in requests)
    for sel, whole, counts in zip(selections, full[0], tokens, strict=True):
        assert sel.indices == truncate(whole.indices, counts, 2, budget)
        assert sel.gains == pytest.approx(whole.gains[: len(sel.indices)], abs=atol)
    assert selections[0].indices == [first] and len(selections[0].round_gains) == 2
    with pytest.raises(ValueError, match="token counts"):
        greedy_select(backend, QUESTIONS, DOCS, CONFIG, guarded, cache)
    certain = SelectConfig(top_m=3, token_budget=tokens[0][0] + tokens[0][1], gate_nu=1.01)
    assert greedy_select(backend, QUESTIONS[:1], DOCS[:1], CONFIG, certain, cache, tokens[:1])[0].indices == [
        0,
        1,
    ]


def test_ties_prompt_and_validation() -> None:
    assert argmax_gain({2: 0.3, 0: 0.3, 1: 0.1}) == 0  # tie: the earlier retriever index
    assert argmax_gain({4: -0.2, 3: -0.1}) == 3
    with pytest.raises(ValueError, match="no candidate"):
        argmax_gain({})
    assert set_probe_request("Q?", ["One."], CONFIG) == probe_request("Q?", "One.", CONFIG)  # round 0 = IGP
    assert set_document(["a", "b", "c"]) == "a\n\nb\n\nc"
    with pytest.raises(ValueError, match="empty set"):
        set_document([])
    with pytest.raises(ValueError, match="candidate lists"):
        greedy_select(None, ["q"], [], CONFIG, SelectConfig())
    with pytest.raises(ValueError, match="one count per candidate"):
        greedy_select(None, ["q"], [["a"]], CONFIG, SelectConfig(), tokens=[[1, 2]])
