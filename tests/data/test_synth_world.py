"""Tests of the synthetic world generator: determinism, answerability, distractors, sizes, writing."""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from datasets import load_from_disk

from r3forge.data.records import split_flashrag_contents
from r3forge.data.synth_world import SynthWorldConfig, World, generate_world
from r3forge.data.world_files import FILES, main, write_world

SMALL = {"num_passages": 200, "num_questions": 60, "seed": 7}


@pytest.fixture(scope="module")
def world() -> World:
    return generate_world(SynthWorldConfig())


@pytest.fixture(scope="module")
def small() -> World:
    return generate_world(SynthWorldConfig(**SMALL))


DIGEST = "json.dumps([w.corpus.to_list(), w.questions.to_list(), w.facts, w.passage_meta], sort_keys=True)"


def _digest(w: World) -> str:
    return hashlib.sha256(eval(DIGEST, {"json": json, "w": w}).encode()).hexdigest()


def _meta(w: World) -> dict[str, dict]:
    return {p["id"]: p for p in w.passage_meta}


def test_same_seed_same_world(small: World) -> None:
    again = generate_world(SynthWorldConfig(**SMALL))
    assert again.corpus.to_list() == small.corpus.to_list()
    assert again.questions.to_list() == small.questions.to_list()
    assert _digest(again) == _digest(small)


def test_same_seed_same_world_across_processes(small: World) -> None:
    code = (
        "import hashlib, json\n"
        "from r3forge.data.synth_world import SynthWorldConfig, generate_world\n"
        f"w = generate_world(SynthWorldConfig(**{SMALL!r}))\n"
        f"print(hashlib.sha256(({DIGEST}).encode()).hexdigest())\n"
    )
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = os.environ | {
        "PYTHONHASHSEED": "12345",
        "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]),
    }
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == _digest(small)


def test_different_seed_different_world(small: World) -> None:
    other = generate_world(SynthWorldConfig(**(SMALL | {"seed": 8})))
    assert other.corpus["text"] != small.corpus["text"]
    assert other.questions["question"] != small.questions["question"]


def test_every_question_answerable_from_its_gold_passages(world: World) -> None:
    text = dict(zip(world.corpus["id"], world.corpus["text"], strict=True))
    meta, facts = _meta(world), {f["id"]: f for f in world.facts}
    for q in world.questions:
        m, answer = json.loads(q["metadata"]), q["answers"][0]
        assert q["gold_passage_ids"] and all(g in text for g in q["gold_passage_ids"])
        assert not any(meta[g]["kind"] == "conflict" for g in q["gold_passage_ids"])
        # every needed fact is stated (or implied) by some gold passage
        for fid in m["fact_ids"]:
            assert not facts[fid]["distractor"]
            assert any(fid in meta[g]["facts"] + meta[g]["implied_facts"] for g in q["gold_passage_ids"])
        graded = {p["id"]: p["relevance"] for p in q["passages"]}
        assert {i for i, r in graded.items() if r > 0} <= set(q["gold_passage_ids"])
        top = [i for i, r in graded.items() if r == 2]
        assert top and all(answer in text[i] for i in top), q
        assert 1 in graded.values() or m["hops"] == 1
        for (
            i,
            r,
        ) in graded.items():  # distractors state none of the needed facts and are never conflicts-as-gold
            if r == 0:
                assert not set(meta[i]["facts"] + meta[i]["implied_facts"]) & set(m["fact_ids"])
        if m["type"] == "single":
            assert facts[m["fact_ids"][0]]["value"] == answer
        if m["type"] == "bridge":
            bridge = m["bridge_entity"]
            assert [s["answer"] for s in q["sub_questions"]] == [bridge, answer]
            assert facts[m["fact_ids"][0]]["value"] == bridge and facts[m["fact_ids"][1]]["value"] == answer
            assert all(bridge in text[i] for i, r in graded.items() if r > 0)
            assert all(bridge in text[g] for g in q["gold_passage_ids"])
        if m["type"] == "comparison":
            years = [int(facts[f]["value"]) for f in m["fact_ids"]]
            assert years[0] != years[1] and answer in q["question"]
            assert len(q["sub_questions"]) == 2


def test_distractors_present(world: World) -> None:
    meta = _meta(world)
    ent = {e["id"]: e for e in world.entities}
    for q in world.questions:
        m = json.loads(q["metadata"])
        types = {ent[e]["type"] for e in m["entity_ids"]}
        negatives = [meta[p["id"]] for p in q["passages"] if p["relevance"] == 0]
        assert len(q["passages"]) == world.config.passages_per_question
        assert any(
            p["entity_type"] in types or ent[p["entity"]]["twin_of"] in m["entity_ids"] for p in negatives
        ), q["id"]
    # near-duplicate names: twins whose names differ only slightly, both in the corpus
    titles = set(world.corpus["title"])
    twins = [(ent[e["twin_of"]]["name"], e["name"]) for e in world.entities if e["twin_of"]]
    assert len(twins) > 50
    for a, b in twins:
        assert a != b and a in titles and b in titles
        assert difflib.SequenceMatcher(None, a, b).ratio() > 0.8
    kinds = [p["kind"] for p in world.passage_meta]
    n = len(kinds)
    assert abs(kinds.count("conflict") / n - world.config.conflict_rate) < 0.02
    assert abs(kinds.count("paraphrase") / n - world.config.paraphrase_rate) < 0.03
    assert abs(kinds.count("distractor") / n - world.config.distractor_rate) < 0.03
    facts = {f["id"]: f for f in world.facts}
    text = dict(zip(world.corpus["id"], world.corpus["text"], strict=True))
    for p in world.passage_meta:
        if p["kind"] == "conflict":  # states a different value for a real fact, hedged
            (fid,) = p["conflicts_with"]
            assert p["facts"] == [] and p["conflict_value"] != facts[fid]["value"]
            assert p["conflict_value"] in text[p["id"]]
        if p["kind"] == "paraphrase":
            assert p["facts"] and not any(facts[f]["distractor"] for f in p["facts"])
    # some conflict passages are shown as hard negatives
    shown = {p["id"] for q in world.questions for p in q["passages"] if p["relevance"] == 0}
    assert any(meta[i]["kind"] == "conflict" for i in shown)


def test_sizes(world: World, small: World) -> None:
    assert abs(len(world.corpus) - 2000) <= 300
    assert len(world.questions) == 500
    hops = [json.loads(m)["hops"] for m in world.questions["metadata"]]
    assert hops.count(2) == 250
    assert abs(len(small.corpus) - 200) <= 30 and len(small.questions) == 60
    for p in world.passage_meta:
        assert 30 <= p["num_words"] <= 130
    for t in world.corpus["text"]:
        assert 2 <= t.count(". ") + 1 <= 5


def test_tiny_world_too_many_questions() -> None:
    with pytest.raises(ValueError, match="num_questions"):
        generate_world(SynthWorldConfig(num_passages=50, num_questions=100_000))


def test_write_world_round_trip(small: World, tmp_path: Path) -> None:
    out = tmp_path / "world"
    paths = write_world(small, out)
    assert set(paths) == set(FILES) and all(p.exists() for p in paths.values())
    assert sorted(os.listdir(tmp_path)) == ["world"]  # no temp folders left behind
    titles = dict(zip(small.corpus["id"], small.corpus["title"], strict=True))
    lines = paths["corpus"].read_text(encoding="utf-8").splitlines()
    assert len(lines) == len(small.corpus)
    for line in lines:
        row = json.loads(line)
        assert split_flashrag_contents(row["contents"])[0] == titles[row["id"]]
    questions = [json.loads(line) for line in paths["questions"].read_text(encoding="utf-8").splitlines()]
    assert [q["id"] for q in questions] == small.questions["id"]
    assert all(q["golden_answers"] and q["metadata"]["gold_passage_ids"] for q in questions)
    assert load_from_disk(str(paths["hf_corpus"])).to_list() == small.corpus.to_list()
    assert len(load_from_disk(str(paths["hf_questions"]))) == len(small.questions)
    doc = json.loads(paths["world"].read_text(encoding="utf-8"))
    assert len(doc["passages"]) == len(small.corpus) and doc["config"]["seed"] == 7
    assert "seed: 7" in paths["readme"].read_text(encoding="utf-8")
    write_world(small, out)  # replacing an existing world works
    assert sorted(os.listdir(tmp_path)) == ["world"]
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "keep.txt").write_text("x")
    with pytest.raises(FileExistsError):
        write_world(small, tmp_path / "other")


def test_write_world_is_atomic(small: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(world: World, out: Path) -> None:
        (out / "corpus.jsonl").write_text("half")
        raise KeyboardInterrupt

    monkeypatch.setattr("r3forge.data.world_files._write_files", boom)
    with pytest.raises(KeyboardInterrupt):
        write_world(small, tmp_path / "world")
    assert os.listdir(tmp_path) == []


def test_main_writes_and_summarizes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    summary = main(SynthWorldConfig(num_passages=80, num_questions=10, output_dir=str(tmp_path / "w")))
    assert summary["questions"] == 10 and (tmp_path / "w" / "world.json").exists()
    assert "synth-world seed=0" in capsys.readouterr().out


@pytest.mark.parametrize(
    "field,value",
    [
        ("num_passages", 10),
        ("num_questions", 0),
        ("passages_per_question", 2),
        ("two_hop_fraction", 1.5),
        ("comparison_fraction", -0.1),
        ("distractor_rate", 2.0),
        ("paraphrase_rate", -1.0),
        ("conflict_rate", 0.7),
        ("seed", "zero"),
        ("num_passages", True),
        ("output_dir", ""),
    ],
)
def test_config_validation_names_the_field(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        SynthWorldConfig(**{field: value})


def test_config_fields_have_help() -> None:
    assert all(f.metadata.get("help") for f in dataclasses.fields(SynthWorldConfig))
