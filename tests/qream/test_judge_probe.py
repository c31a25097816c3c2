"""The fact-judge probe set (claims built from the data), the probability judge against an independent
computation of P(yes) on the embedded model, and `qream-judge-probe` end to end."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from r3forge.backends import HFLocalBackend, HFLocalConfig
from r3forge.backends.open import LLMConfig
from r3forge.errors import ConfigError
from r3forge.metrics.ranking import roc_auc
from r3forge.qream.judge_probe import ProbeConfig, build_probe, probe_main, swap
from r3forge.qream.rewrite import raw_retrieval
from r3forge.qream.score import JUDGE_PROMPT, FactJudgeStep, at_tau
from r3forge.synth import EngineConfig, load_accepted, run_step
from r3forge.synth.job import RunConfig

RECORDS = [
    {"id": "q1", "question": "Who built the tower?", "answers": ["Gustave Eiffel"], "passages": [
        {"title": "Eiffel Tower", "text": "The Eiffel Tower was built by Gustave Eiffel in 1889 (for the fair). "
         "It stands in Paris, near the Seine river."}]},
    {"id": "q2", "question": "Where is the Colosseum?", "answers": ["Rome"], "passages": [
        {"title": "Colosseum", "text": "The Colosseum is an ancient amphitheatre in Rome, built under Vespasian "
         "in 72. It held about 50,000 spectators at its height."}]},
    {"id": "q3", "question": "Who wrote Hamlet?", "answers": ["William Shakespeare"], "passages": [
        {"title": "Hamlet", "text": "Hamlet is a tragedy written by William Shakespeare around 1600. It is set in "
         "Denmark, at the castle of Elsinore."}]},
]  # fmt: skip
RAWS = [raw_retrieval(r["passages"], 5) for r in RECORDS]


def test_probe_claims_are_labelled_by_construction() -> None:
    items = build_probe(RECORDS, RAWS, claims_per_kind=1, seed=0)
    assert [i["question_id"] for i in items] == ["q1", "q2", "q3"]
    assert items == build_probe(RECORDS, RAWS, claims_per_kind=1, seed=0)  # seeded
    for item in items:
        assert len(item["facts"]) == len(item["labels"]) == len(item["kinds"])
        assert item["half"] in ("calibrate", "test")
        for fact, label, kind in zip(item["facts"], item["labels"], item["kinds"], strict=True):
            assert label == (kind in ("verbatim", "trimmed"))
            if kind == "verbatim":
                assert fact in " ".join(item["raw"].split())
            elif kind == "trimmed":
                assert "(" not in fact and fact not in item["raw"]
            else:  # negatives: not a sentence of this question's r_raw
                assert fact not in item["raw"]
        assert "swapped" in item["kinds"] and "other" in item["kinds"]


def test_swap_changes_one_token_to_a_donors() -> None:
    sentence = "The Eiffel Tower was built by Gustave Eiffel in 1889."
    out = swap(sentence, ["Rome was founded in 753 by Romulus."], random.Random(1))
    assert out is not None and out != sentence
    changed = [(a, b) for a, b in zip(sentence.split(), out.split(), strict=True) if a != b]
    assert len(changed) == 1 and changed[0][1].rstrip(".") in {"Rome", "753", "Romulus"}
    assert swap("Nothing to swap here at all.", ["Rome was founded in 753."], random.Random(0)) is None


def test_roc_auc_against_pairwise_count() -> None:
    rng = random.Random(0)
    scores = [rng.choice([0.1, 0.2, 0.5, 0.9]) for _ in range(40)]
    labels = [rng.randint(0, 1) for _ in range(40)]
    pos = [s for s, y in zip(scores, labels, strict=True) if y]
    neg = [s for s, y in zip(scores, labels, strict=True) if not y]
    pairwise = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg) / (len(pos) * len(neg))
    assert roc_auc(scores, labels) == pytest.approx(pairwise)


def test_at_tau_and_step_checks() -> None:
    record = {"p_yes": [0.8, 0.3, None], "supported": [True, False, False], "s_fact": 1 / 3}
    assert at_tau(record, 0.25)["supported"] == [True, True, False]
    assert at_tau(record, 0.9)["s_fact"] == 0.0
    with pytest.raises(ConfigError, match="scoring"):
        FactJudgeStep(scoring="logits")
    with pytest.raises(ConfigError, match="tau"):
        FactJudgeStep(scoring="probability", tau=1.5)


def _independent_p_yes(model, tokenizer, raw: str, fact: str, k: int) -> tuple[float, float]:
    """P(yes) / (P(yes) + P(no)) over the top-k of the first answer token, straight from the logits, and
    the largest |logit| of the pass (the scale of its rounding)."""
    messages = [{"role": "user", "content": JUDGE_PROMPT.format(raw=raw, fact=fact)}]
    ids = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    with torch.no_grad():
        every = model(**ids).logits[0].float()  # [T, V]
    logits = every[-1]  # [V]
    top = torch.log_softmax(logits, -1).topk(k)
    mass = {"yes": 0.0, "no": 0.0}
    for logprob, token in zip(top.values.tolist(), top.indices.tolist(), strict=True):
        word = tokenizer.decode([token], skip_special_tokens=True).strip().strip("*").lower()
        if word in mass:
            mass[word] += math.exp(logprob)
    return mass["yes"] / (mass["yes"] + mass["no"]), every.abs().max().item()


def test_probability_judge_matches_the_logits(smollm2_path: Path, tmp_path: Path, fp32) -> None:
    (item,) = build_probe(RECORDS, RAWS, claims_per_kind=1, seed=0)[:1]
    backend = HFLocalBackend.from_config(HFLocalConfig(model=str(smollm2_path)))
    tokenizer = AutoTokenizer.from_pretrained(smollm2_path)
    step = FactJudgeStep(scoring="probability", tau=0.5, top_logprobs=20, tokenizer=tokenizer)
    summary = run_step(step, [item], backend, EngineConfig(str(tmp_path / "judge"), progress=False))
    assert summary.requests == len(item["facts"])
    (judged,) = load_accepted(tmp_path / "judge")
    model = AutoModelForCausalLM.from_pretrained(smollm2_path).eval()
    for fact, p, supported in zip(item["facts"], judged["p_yes"], judged["supported"], strict=True):
        want, scale = _independent_p_yes(model, tokenizer, item["raw"], fact, 20)
        # P = Y / (Y + N) from logprobs of two fp32 passes that sum in other orders (a batch of the facts vs
        # one prompt), each within δ = 2·sqrt(L·k)·u·max|logit| (~9e-4): |Δ P| <= P(1 - P)·2δ <= δ; the
        # other fact's or a No-only probability is off by > 1e-2
        assert p == pytest.approx(want, abs=fp32.atol(scale, fp32.forward_length(model.config)))
        assert supported == (p >= 0.5)


def test_probe_main_end_to_end(smollm2_path: Path, tmp_path: Path) -> None:
    qa = tmp_path / "qa.jsonl"
    rows = [  # HotpotQA's Hub shape, one paragraph per question
        {"id": r["id"], "question": r["question"], "answer": r["answers"][0],
         "supporting_facts": {"title": [r["passages"][0]["title"]], "sent_id": [0]},
         "context": {"title": [r["passages"][0]["title"]], "sentences": [[r["passages"][0]["text"]]]}}
        for r in RECORDS
    ]  # fmt: skip
    qa.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    config = ProbeConfig(qa_path=str(qa), judges="prob,lexical")
    llm = LLMConfig(backend="hf", model=str(smollm2_path))
    figures = probe_main(config, llm, RunConfig(output_dir=str(tmp_path / "probe"), progress=False))
    claims = [json.loads(line) for line in (tmp_path / "probe" / "claims.jsonl").read_text().splitlines()]
    assert figures["claims"] == len(claims) and set(figures["judges"]) == {"prob", "lexical"}
    assert all(0.0 <= c["prob"] <= 1.0 for c in claims if c["prob"] is not None)
    lexical = figures["judges"]["lexical"]
    assert lexical["supported_by_kind"]["verbatim"] == 1.0 and lexical["supported_by_kind"]["other"] < 1.0
    assert "| prob |" in (tmp_path / "probe" / "table.md").read_text()
    with pytest.raises(ConfigError, match="judges"):
        probe_main(
            ProbeConfig(qa_path=str(qa), judges="oracle"), llm, RunConfig(output_dir=str(tmp_path / "x"))
        )
