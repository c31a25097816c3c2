"""Verbal-R3 teacher annotation: the parser (table-driven), the score token, templates, and a real run of
the embedded SmolLM2 through the transformers backend on HotpotQA pairs (~20 s)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from r3forge.annotate.jobs import VERBAL_CONFIGS
from r3forge.annotate.verbal import (
    PROMPT_VERSION,
    REASONS,
    Checks,
    ParsedAnnotation,
    VerbalAnnotationStep,
    load_template,
    parse_annotation,
    score_logprobs,
    score_token_index,
)
from r3forge.backends.base import Choice, GenerationResult, Usage
from r3forge.cli import run_command
from r3forge.config import missing_help
from r3forge.errors import ConfigError
from r3forge.retrieval.pairs import qa_items
from r3forge.synth import EngineConfig, Rejected, load_accepted, load_rejected, run_step

DOC = (
    "Tinted Windows is an American rock supergroup formed in 2009. The band played its first show at "
    "the Cain's Ballroom in Tulsa, Oklahoma, in March 2009, before releasing its debut album."
)
ITEM = {
    "question_id": "q1",
    "question": "Where did Tinted Windows first perform?",
    "doc_id": "d1",
    "doc_title": "Tinted Windows (band)",
    "doc_text": DOC,
    "relevance": 1,
}
COPIED = "Tinted Windows is an American rock supergroup formed in 2009. The band played its first show at the"

# (output text, finish reason, expected (comment, score) or reject reason)
CASES = [
    (
        "Comment: It names Tulsa as the first show.\nScore: 5",
        "stop",
        ("It names Tulsa as the first show.", 5),
    ),
    (
        "**Comment:** Says the first show was in Tulsa.\n\n**Score:** 5",
        "stop",
        ("Says the first show was in Tulsa.", 5),
    ),
    ("comment - mentions the band only.\nscore - 2", "stop", ("mentions the band only.", 2)),
    (
        "\n\nComment:   Partial: the year, not the city.\n\n\nScore:   3\n",
        "stop",
        ("Partial: the year, not the city.", 3),
    ),
    ("Comment: States the venue.\nScore: 4/5", "stop", ("States the venue.", 4)),
    ("Comment: States the venue.\nScore: **4**", "stop", ("States the venue.", 4)),
    ("COMMENT: Unrelated band.\nSCORE: 1.", "stop", ("Unrelated band.", 1)),
    ("Comment: Two\nlines of comment.\nScore: 4 (the venue is named)", "stop", ("Two lines of comment.", 4)),
    ("## Comment: Gives the city.\n## Score: [5]", "stop", ("Gives the city.", 5)),
    ("Comment: Cut off mid-sente", "length", "truncated"),
    ("Comment: Gives the city.\nScore: 5 and then more", "length", "truncated"),
    ("The document gives the city.\nScore: 5", "stop", "missing_comment"),
    ("Comment: Gives the city.", "stop", "missing_score"),
    ("Comment: Gives the city.\nRating: 5", "stop", "missing_score"),
    ("Comment: Gives the city.\nScore: 7", "stop", "invalid_score"),
    ("Comment: Gives the city.\nScore: high", "stop", "invalid_score"),
    ("Comment: Gives the city.\nScore: 3.5", "stop", "invalid_score"),
    ("Comment: Gives the city.\nScore: 0", "stop", "invalid_score"),
    ("Comment:\nScore: 4", "stop", "empty_comment"),
    ("**Comment:** ** **\nScore: 4", "stop", "empty_comment"),
    ("Comment: " + "word " * 31 + "\nScore: 3", "stop", "overlong_comment"),
    (f"Comment: {COPIED}\nScore: 5", "stop", "copied_document"),
]


def result_of(text: str, finish: str = "stop") -> GenerationResult:
    return GenerationResult([Choice(text, [], [], [], finish)], Usage())


@pytest.mark.parametrize(("text", "finish", "expected"), CASES)
def test_parse(text: str, finish: str, expected) -> None:
    step = VerbalAnnotationStep(checks=Checks(max_comment_words=30))
    out = step.parse(ITEM, result_of(text, finish))
    if isinstance(expected, str):
        assert isinstance(out, Rejected) and out.reason == expected, out
        assert out.reason in REASONS
    else:
        assert isinstance(out, dict), out
        assert (out["comment"], out["score"]) == expected
        assert out["question_id"] == "q1" and out["doc_id"] == "d1" and out["doc_text"] == DOC
        assert out["score_logprob"] is None and out["score_logprobs"] is None  # no logprobs in these results


def test_every_reason_is_covered() -> None:
    assert {e for _, _, e in CASES if isinstance(e, str)} == set(REASONS)


def test_score_offset_points_at_digit() -> None:
    text = "Comment: ok\nScore: **4**"
    parsed = parse_annotation(text)
    assert isinstance(parsed, ParsedAnnotation) and text[parsed.score_offset] == "4"


def test_score_token_from_token_texts() -> None:
    """Without token ids (a server's token-text keys): the position whose top-k has the chosen digit."""
    top = [{"Score": -0.1}, {":": -0.01}, {" 4": -0.3, " 5": -1.5, " 3": -2.0}]
    choice = Choice("Score: 4", [], [-0.1, -0.01, -0.3], top, "stop")
    assert score_token_index(choice, 7, None) == 2
    assert score_logprobs(top[2], None) == {"1": None, "2": None, "3": -2.0, "4": -0.3, "5": -1.5}


def test_templates(tmp_path: Path) -> None:
    text, version = load_template()
    assert version == PROMPT_VERSION and "{question}" in text and "{document}" in text
    own = tmp_path / "mine.txt"
    own.write_text("Q: {question}\nD: {title} {document}\nComment/Score please.", encoding="utf-8")
    _, v1 = load_template(str(own))
    own.write_text("Q: {question}\nD: {document}\n", encoding="utf-8")
    _, v2 = load_template(str(own))
    assert v1.startswith("custom-") and v2.startswith("custom-") and v1 != v2
    step = VerbalAnnotationStep(template_path=str(own))
    assert (
        step.version.startswith(v2)
        and step.messages(ITEM)[0]["content"] == f"Q: {ITEM['question']}\nD: {DOC}"
    )
    (tmp_path / "bad.txt").write_text("no placeholders", encoding="utf-8")
    with pytest.raises(ConfigError, match="placeholder"):
        load_template(str(tmp_path / "bad.txt"))


def test_prompt_variants(smollm2_path: Path) -> None:
    from transformers import AutoTokenizer

    plain = VerbalAnnotationStep()
    (user,) = plain.prompt(ITEM).messages
    assert user["role"] == "user" and ITEM["question"] in user["content"] and DOC in user["content"]
    few = VerbalAnnotationStep(few_shot=True)
    assert [m["role"] for m in few.prompt(ITEM).messages] == ["user", "assistant"] * 2 + ["user"]
    assert len({plain.version, few.version, VerbalAnnotationStep(checks=Checks(copy_max_run=5)).version}) == 3
    with pytest.raises(ConfigError, match="tokenizer"):
        VerbalAnnotationStep(prefill="Comment:").prompt(ITEM)
    tokenizer = AutoTokenizer.from_pretrained(smollm2_path)
    request = VerbalAnnotationStep(prefill="Comment:", tokenizer=tokenizer).prompt(ITEM)
    assert request.messages is None and request.prompt.endswith("assistant\nComment:")
    out = VerbalAnnotationStep(prefill="Comment:").parse(ITEM, result_of(" Names Tulsa.\nScore: 5"))
    assert out["comment"] == "Names Tulsa." and out["score"] == 5


def test_items_and_config_help() -> None:
    record = {"id": "q", "question": "?", "passages": [{"id": f"p{i}", "title": "", "text": "t", "relevance": 0}
                                                       for i in range(3)]}  # fmt: skip
    items = list(qa_items([record] * 3, max_questions=2, max_docs=2))
    assert [(i["question_id"], i["doc_id"]) for i in items] == [("q", "p0"), ("q", "p1")] * 2
    assert all(missing_help(c) == [] for c in VERBAL_CONFIGS)


class Recording:
    """A backend wrapper that keeps every (request, result) it served."""

    name = "hf"

    def __init__(self, inner) -> None:
        self.inner, self.model_id, self.calls = inner, "smollm2-135m-instruct", []

    def generate(self, requests):
        results = self.inner.generate(requests)
        self.calls += list(zip(requests, results, strict=True))
        return results

    def close(self) -> None:
        self.inner.close()


@pytest.fixture(scope="module")
def real_run(smollm2_path: Path, shared_data: Path, tmp_path_factory: pytest.TempPathFactory):
    from r3forge.backends import HFLocalBackend, HFLocalConfig
    from r3forge.data.loaders import load_qa

    backend = Recording(HFLocalBackend.from_config(HFLocalConfig(model=str(smollm2_path), batch_size=8)))
    qa = load_qa(shared_data / "hotpotqa" / "rpt_distractor_dev_sample_dev.jsonl")
    items = list(qa_items(qa, max_questions=3, max_docs=2))
    tokenizer = backend.inner.tokenizer
    step = VerbalAnnotationStep(max_tokens=48, top_logprobs=5, few_shot=True, tokenizer=tokenizer)
    out = tmp_path_factory.mktemp("verbal")
    summary = run_step(step, items, backend, EngineConfig(output_dir=str(out), batch_size=8, progress=False))
    return out, summary, backend, tokenizer


def test_real_run(real_run) -> None:
    out, summary, backend, tokenizer = real_run
    assert summary.processed == 6 and summary.accepted + summary.rejected == 6
    assert set(summary.reject_reasons) <= set(REASONS)
    for record in load_accepted(out):
        assert record["score"] in range(1, 6) and record["version"].startswith(PROMPT_VERSION)
        assert math.isfinite(record["score_logprob"]) and record["score_token_index"] is not None
        # the logprob is that of the generated token at the score position, which decodes to the digit
        (choice,) = [
            r.choices[0]
            for q, r in backend.calls
            if record["doc_text"] in q.messages[-1]["content"]
            and record["question"] in q.messages[-1]["content"]
        ]
        t = record["score_token_index"]
        assert choice.logprobs[t] == record["score_logprob"]
        assert str(record["score"]) in tokenizer.decode([choice.token_ids[t]])
        if record["score_logprobs"][str(record["score"])] is not None:  # greedy: the chosen token is top-1
            # one log_softmax read twice (top-k and chosen): equal; approx's 1e-6 relative only for readability
            assert record["score_logprobs"][str(record["score"])] == pytest.approx(record["score_logprob"])
    for record in load_rejected(out):
        assert record["reason"] in REASONS


def test_cli_annotate_then_export(shared_data: Path, smollm2_path: Path, tmp_path: Path, capsys) -> None:
    qa = shared_data / "hotpotqa" / "rpt_distractor_dev_sample_dev.jsonl"
    out, sft = tmp_path / "annotations", tmp_path / "sft"
    argv = ["verbal", "--qa_path", str(qa), "--output_dir", str(out), "--max_questions", "2"]
    argv += ["--max_docs_per_question", "1", "--few_shot", "--max_tokens", "48"]
    assert run_command("annotate", argv) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["accepted"] + summary["rejected"] == 2
    assert summary["accepted"] >= 1  # greedy with the few-shot demos: both pairs parse on this model
    assert run_command("annotate", ["export-sft", "--input_dir", str(out), "--output_dir", str(sft)]) == 0
    rows = [json.loads(line) for p in sft.glob("*.jsonl") for line in p.read_text().splitlines()]
    assert len(rows) == summary["accepted"]
    assert all(r["completion"][0]["content"].rstrip()[-1] in "12345" for r in rows)
