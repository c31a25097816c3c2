"""Utility and fidelity steps: parsing of reader answers, fact lists and per-fact verdicts, and a real run
of the three steps through the engine with the embedded model (one request per fact for the judge)."""

from __future__ import annotations

from pathlib import Path

import pytest

from r3forge.backends import HFLocalBackend, HFLocalConfig
from r3forge.backends.base import Choice, GenerationResult, Usage
from r3forge.qream.score import (
    FactExtractStep,
    FactJudgeStep,
    ReaderStep,
    candidate_key,
    judge_lexical,
    lexical_support,
    parse_facts,
)
from r3forge.synth import EngineConfig, Rejected, load_accepted, run_step

ITEM = {
    "question_id": "q1",
    "question": "Who painted the Mona Lisa?",
    "answers": ["Leonardo da Vinci"],
    "round": 1,
    "document": "The Mona Lisa is a portrait by the Italian artist Leonardo da Vinci, painted in Florence.",
    "raw": "Mona Lisa: The Mona Lisa is a half-length portrait painting by Leonardo da Vinci.",
}


def result(text: str, finish: str = "stop") -> GenerationResult:
    return GenerationResult([Choice(text, [], [], [], finish)], Usage())


@pytest.mark.parametrize(
    ("text", "answer", "passes"),
    [
        ("Leonardo da Vinci", "Leonardo da Vinci", True),
        ("Answer: **Leonardo da Vinci.**\nHe was Italian.", "Leonardo da Vinci", True),
        ("Michelangelo", "Michelangelo", False),
        ("It was painted by leonardo DA vinci", "It was painted by leonardo DA vinci", True),
    ],
)
def test_reader_parse(text: str, answer: str, passes: bool) -> None:
    out = ReaderStep().parse(ITEM, result(text))
    assert (out["answer"], out["passes"]) == (answer, passes)
    assert out["s_perf"] == (1.0 if answer == "Leonardo da Vinci" else out["s_perf"])
    assert ReaderStep().parse(ITEM, result("  \n")) == Rejected("empty_answer", "the reader gave no answer")


def test_reader_few_shot_prompt() -> None:
    plain, shots = ReaderStep().prompt(ITEM), ReaderStep(few_shot=True).prompt(ITEM)
    assert len(plain.messages) == 1 and len(shots.messages) == 5
    assert [m["role"] for m in shots.messages] == ["user", "assistant", "user", "assistant", "user"]
    assert shots.messages[-1] == plain.messages[0] and ReaderStep(few_shot=True).version.endswith("+fs")


def test_fact_parsing_and_judging() -> None:
    assert parse_facts("- a.\n- b.\n- c.", max_facts=2) == ["a.", "b."]
    step = FactExtractStep()
    assert step.parse(ITEM, result("no list here")).reason == "no_facts"
    assert step.parse(ITEM, result("The portrait is by Leonardo. It hangs in Paris."))["facts"] == [
        "The portrait is by Leonardo.",
        "It hangs in Paris.",
    ]
    assert step.parse(ITEM, result("The painter", "length")).reason == "truncated"
    judge = FactJudgeStep()
    item = ITEM | {"facts": ["It is by Leonardo.", "It was painted in Florence.", "It is in Paris."]}
    requests = judge.prompt(item)
    assert len(requests) == 3 and "Claim: It was painted in Florence." in requests[1].messages[0]["content"]
    out = judge.parse(item, [result("Yes."), result("No, it does not say."), result("Maybe")])
    assert out["supported"] == [True, False, False] and out["unclear"] == 1
    assert out["s_fact"] == pytest.approx(1 / 3)
    assert judge.key(item) != judge.key(item | {"raw": "other"})
    assert candidate_key(ITEM) != candidate_key(ITEM | {"document": "other text"})


def test_lexical_judge() -> None:
    raw = ITEM["raw"]
    fact = "Leonardo da Vinci painted the Mona Lisa."  # 5 of 6 content tokens: "painted" != "painting"
    assert lexical_support(fact, raw) and not lexical_support(fact, raw, 0.9)
    assert lexical_support("The Mona Lisa is a portrait painting by Leonardo da Vinci.", raw)
    assert lexical_support("The Mona Lisa is a PORTRAIT, by Leonardo!", raw)  # normalization
    assert not lexical_support("The Mona Lisa was painted in Florence.", raw)  # "florence" is not in r_raw
    assert lexical_support("The Mona Lisa was painted in Florence.", raw + " Painted in 1503.", 0.75)
    assert lexical_support("The Mona Lisa is not by Leonardo.", raw)  # blind to negation: a proxy only
    assert not lexical_support("It was.", raw)
    with pytest.raises(ValueError, match="threshold"):
        lexical_support("x", raw, 0.0)
    item = ITEM | {"facts": ["The Mona Lisa is a portrait.", "It hangs in the Louvre."]}
    out = judge_lexical(item)
    assert out["supported"] == [True, False] and out["s_fact"] == 0.5 and out["unclear"] == 0
    assert {k: out[k] for k in candidate_key(item)} == candidate_key(item)


@pytest.mark.slow
def test_real_utility_and_fidelity(smollm2_path: Path, tmp_path: Path) -> None:
    backend = HFLocalBackend.from_config(HFLocalConfig(model=str(smollm2_path)))
    summary = run_step(ReaderStep(), [ITEM], backend, EngineConfig(str(tmp_path / "reader"), progress=False))
    assert summary.processed == 1
    run_step(
        FactExtractStep(max_tokens=160),
        [ITEM],
        backend,
        EngineConfig(str(tmp_path / "facts"), progress=False),
    )
    facts = list(load_accepted(tmp_path / "facts"))
    assert facts and facts[0]["facts"]
    item = ITEM | {"facts": facts[0]["facts"]}
    summary = run_step(
        FactJudgeStep(), [item], backend, EngineConfig(str(tmp_path / "judge"), progress=False)
    )
    assert summary.requests == len(item["facts"])
    (judged,) = load_accepted(tmp_path / "judge")
    assert len(judged["supported"]) == len(item["facts"]) and 0.0 <= judged["s_fact"] <= 1.0
