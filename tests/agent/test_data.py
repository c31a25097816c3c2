"""The agent's questions: hashed held-out split, prompts, warm-start trajectories, the closed-book filter."""

from __future__ import annotations

import json

from r3forge.agent.data import FilterConfig, filter_closed_book, hops, is_heldout, load_agent_rows
from r3forge.agent.env import EnvConfig, SearchConfig
from r3forge.agent.reward import parse_completion
from r3forge.agent.warmstart import WarmstartArgs, write_warmstart
from r3forge.backends.open import LLMConfig


def test_split_is_disjoint_and_complete(world):
    path = str(world["questions"])
    train = load_agent_rows(path, "train", 0.3, "raw")
    held = load_agent_rows(path, "heldout", 0.3, "raw")
    assert {r["id"] for r in train}.isdisjoint({r["id"] for r in held})
    assert len(train) + len(held) == len(load_agent_rows(path, "all", 0.3, "raw")) == 30
    assert all(is_heldout(r["id"], 0.3) for r in held)
    assert held[0]["prompt"][0]["content"].endswith(f"Question: {held[0]['question']}")


def test_warmstart_rows_are_well_formed_trajectories(world, tmp_path):
    out = tmp_path / "warm.jsonl"
    args = WarmstartArgs(
        dataset=str(world["questions"]), output=str(out), max_questions=6, heldout_fraction=0.3
    )
    write_warmstart(args, SearchConfig(index=str(world["index"])), EnvConfig(observation="raw", num_shown=1))
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 6 and not any(is_heldout(r["id"], 0.3) for r in rows)
    for row in rows:
        parsed = parse_completion(row["completion"][0]["content"])
        assert parsed.valid, parsed.reason
        assert len(parsed.searches) >= 1


def test_hops_reads_flashrag_metadata():
    record = {"question": "Q", "answers": ["a"],
              "metadata": json.dumps({"sub_questions": [{"question": "q1", "answer": "x"}, {"question": "q2"}]})}  # fmt: skip
    assert hops(record) == [("q1", "x"), ("q2", "")]
    assert hops({"question": "Q", "answers": ["a"]}) == [("Q", "a")]


def test_closed_book_filter_drops_answered_keeps_yes_no(smollm2_path, tmp_path):
    qa = tmp_path / "qa.jsonl"
    rows = [("q1", "What is the capital of France?", ["Paris"]), ("q2", "Is Paris in France?", ["yes"]),
            ("q3", "What is the birth year of Peibrette Thesick?", ["1858"])]  # fmt: skip
    qa.write_text(
        "".join(json.dumps({"id": i, "question": q, "golden_answers": a}) + "\n" for i, q, a in rows)
    )
    teacher = LLMConfig(backend="hf", model=str(smollm2_path))
    common = dict(qa_path=str(qa), samples=4, max_tokens=8, seed=0)
    marked = filter_closed_book(
        FilterConfig(output=str(tmp_path / "m.jsonl"), mode="mark", **common), teacher
    )
    kept = filter_closed_book(FilterConfig(output=str(tmp_path / "d.jsonl"), **common), teacher)
    marks = {r["id"]: r["metadata"] for r in map(json.loads, (tmp_path / "m.jsonl").read_text().splitlines())}
    assert len(marks) == 3 and marks["q2"]["closed_book_answered"] is False  # yes/no: always kept
    for meta in marks.values():
        assert meta["closed_book_samples"] == 4 and 0 <= meta["closed_book_hits"] <= 4
    assert marks["q1"]["closed_book_answered"] == (marks["q1"]["closed_book_hits"] > 0)
    written = {json.loads(line)["id"] for line in (tmp_path / "d.jsonl").read_text().splitlines()}
    assert written == {i for i, m in marks.items() if not m["closed_book_answered"]}
    assert kept["written"] == len(written) and kept["yes_no_exempt"] == marked["yes_no_exempt"] == 1


def test_gold_answers_that_normalize_to_nothing_are_dropped(tmp_path, capsys):
    """NQ-open has golds like "A+" and ")": normalized they are "", which "<answer>the</answer>" matches."""
    path = tmp_path / "nq.jsonl"
    rows = [{"question": "grade?", "answer": ["A+"]}, {"question": "both?", "answer": [")", "Paris"]},
            {"question": "city?", "answer": ["Rome"]}]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    kept = load_agent_rows(str(path), "all", 0.0)
    assert [r["answers"] for r in kept] == [["Paris"], ["Rome"]]
    assert (
        "dropped 1 all question(s) whose every gold answer normalizes to the empty string"
        in capsys.readouterr().err
    )
