"""Rule labels from gold evidence: each score level, yes/no answers, input errors, and a real HotpotQA
export whose rows use the teacher's prompt and parse with the teacher's parser."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pytest

from r3forge.annotate.rules import rule_annotations, rule_label, shown
from r3forge.annotate.verbal import load_template, parse_annotation, render
from r3forge.cli import run_command
from r3forge.data.loaders import load_qa
from r3forge.errors import ConfigError
from r3forge.metrics.qa import answer_in_text, quoted_spans
from r3forge.text import sentences

RECORD = {
    "id": "q1",
    "question": "Which river flows through the capital city of Austria?",
    "answers": ["Danube"],
    "supporting_facts": [{"title": "Vienna", "sent_id": 1}, {"title": "Austria", "sent_id": 0}],
}


@pytest.mark.parametrize(
    ("passage", "score", "quoted"),
    [
        ({"title": "Vienna", "text": "Vienna is old. The Danube flows through Vienna. It is big.", "relevance": 2},
         5, "The Danube flows through Vienna"),
        ({"title": "Austria", "text": "Vienna is the capital of Austria. It has lakes.", "relevance": 1},
         4, "Vienna is the capital of Austria"),
        ({"title": "Budapest", "text": "The Danube also flows through Budapest.", "relevance": 0}, 3, "Danube"),
        ({"title": "Capital city", "text": "A capital city of a country hosts its river authority.",
          "relevance": 0}, 2, "capital"),
        ({"title": "Tennis", "text": "Tennis is a racket sport.", "relevance": 0}, 1, "Tennis"),
    ],
)  # fmt: skip
def test_each_level(passage: dict, score: int, quoted: str) -> None:
    got, comment = rule_label(RECORD, passage)
    assert got == score and quoted in comment
    parsed = parse_annotation(f"Comment: {comment}\nScore: {got}")
    assert parsed.score == score  # the target parses with the teacher's own parser


def test_yes_no_answers_are_not_matched_as_strings() -> None:
    record = RECORD | {"answers": ["yes"]}
    passage = {"title": "Yes", "text": "Yes is a rock band; yes.", "relevance": 0}
    assert rule_label(record, passage)[0] == 1
    gold = {"title": "Vienna", "text": "Vienna is old. The Danube flows through Vienna.", "relevance": 1}
    assert rule_label(record, gold)[0] == 4  # gold, but "yes" is not a string it can contain


def test_sentences_and_errors() -> None:
    assert sentences("A b. C d! E f? 1990 was it.") == ["A b.", "C d!", "E f?", "1990 was it."]
    with pytest.raises(ConfigError, match="q1: no passages"):
        list(rule_annotations([RECORD | {"passages": []}]))
    unknown = [{"id": "p", "title": "t", "text": "x", "relevance": -1}]
    with pytest.raises(ConfigError, match="gold relevance"):
        list(rule_annotations([RECORD | {"passages": unknown}]))


def test_hotpotqa_export(shared_data: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "rules"
    qa = shared_data / "hotpotqa" / "rpt_distractor_dev_sample_train.jsonl"
    argv = ["rules", "--qa_path", str(qa), "--max_questions", "40", "--output_dir", str(out)]
    assert run_command("annotate", argv) == 0
    counts = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    records = list(load_qa(qa))[:40]
    pairs = {(r["id"], p["id"]) for r in records for p in r["passages"]}
    assert counts["train"] + counts["validation"] == len(pairs) > 350 and all(
        counts[f"score_{s}"] > 0 for s in (1, 2, 4, 5)
    )
    dsd = datasets.load_from_disk(str(out))
    assert not set(dsd["train"]["question_id"]) & set(dsd["validation"]["question_id"])
    template, _ = load_template(None)
    row = dsd["train"][0]
    assert row["prompt"][-1]["content"].startswith(render(template, "", "", "").split("Question:")[0])
    for row in dsd["train"]:
        parsed = parse_annotation(row["completion"][0]["content"])
        assert parsed.score == row["score"]
        assert (row["relevance"] > 0) == (row["score"] >= 4)
    with pytest.raises(ConfigError, match="not empty"):
        run_command("annotate", argv)  # nothing a run wrote is overwritten without --overwrite

    # an evaluation-only set: every question in train, an empty validation split
    argv = ["rules", "--qa_path", str(qa), "--max_questions", "3", "--validation_fraction", "0"]
    assert run_command("annotate", [*argv, "--output_dir", str(tmp_path / "all")]) == 0
    dsd = datasets.load_from_disk(str(tmp_path / "all"))
    assert len(dsd["train"]) == len({(r["id"], p["id"]) for r in records[:3] for p in r["passages"]})
    assert "validation" not in dsd  # an empty split is not written (datasets cannot load one back)


def test_a_cut_passage_is_labelled_by_what_it_shows() -> None:
    gold = {
        "title": "Vienna",
        "text": "Vienna is old and very large. The Danube flows through Vienna.",
        "relevance": 2,
    }
    assert rule_label(RECORD, shown(gold, 0))[0] == 5
    score, comment = rule_label(RECORD, shown(gold, 6))  # "Vienna is old and very large.": the fact is cut
    assert score == 1 and "Danube" not in comment
    # the supporting sentence is cut, but the shown text still names the answer: cite what is shown
    early = gold | {"text": "The Danube is near. Vienna is old and large. The Danube flows through Vienna."}
    assert rule_label(RECORD, shown(early, 9)) == (
        5, 'It states that "The Danube is near", which answers the question directly.'
    )  # fmt: skip


def test_a_citation_names_the_answer_when_two_passages_share_a_title() -> None:
    # the sentence id (1) belongs to another passage titled Vienna; this one states the fact first
    twin = {"title": "Vienna", "text": "The Danube runs through Vienna. Vienna is old.", "relevance": 2}
    assert rule_label(RECORD, twin)[1] == 'It states that "The Danube runs through Vienna", which answers the question directly.'  # fmt: skip


def test_world_labels_with_sub_questions_match_the_agents_view(tmp_path: Path, capsys) -> None:
    world = tmp_path / "world"
    argv = [
        "synth-world",
        "--seed",
        "3",
        "--num_passages",
        "300",
        "--num_questions",
        "30",
        "--output_dir",
        str(world),
    ]
    assert run_command("data", argv) == 0
    records = list(load_qa(str(world / "hf" / "questions")))
    labelled = list(rule_annotations(records, doc_max_words=30, sub_questions=True))
    subs = [r for r in labelled if "-sub" in r["question_id"]]
    assert subs and {r["group_id"] for r in subs} <= {r["id"] for r in records}
    for r in labelled:
        assert len(r["doc_text"].split()) <= 30
        for span in quoted_spans(r["comment"]):  # every citation is verbatim in the text the reranker sees
            assert span in r["doc_text"], (r["question"], r["comment"], r["doc_text"])
    answers = {r["id"]: r["answers"] for r in records} | {
        f"{r['id']}-sub{i}": [s["answer"]] for r in records for i, s in enumerate(r["sub_questions"] or [], 1)
    }
    fives = [
        r for r in labelled if r["score"] == 5 and answers[r["question_id"]][0].lower() not in ("yes", "no")
    ]
    assert fives and all(answer_in_text(answers[r["question_id"]], quoted_spans(r["comment"])) for r in fives)

    out = tmp_path / "rules"
    argv = ["rules", "--qa_path", str(world / "hf" / "questions"), "--doc_max_words", "30",
            "--sub_questions", "true", "--validation_fraction", "0.3", "--output_dir", str(out)]  # fmt: skip
    assert run_command("annotate", argv) == 0
    dsd = datasets.load_from_disk(str(out))
    train, held = (set(dsd[s]["group_id"]) for s in ("train", "validation"))
    assert train and held and not train & held  # a sub-question never crosses into the other split
    labels = json.loads((out / "labels.json").read_text())
    assert labels["sub_questions"] is True and labels["doc_max_words"] == 30 and labels["cite_all"] is False
