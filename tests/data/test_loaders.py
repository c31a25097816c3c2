"""Dataset loaders: every shared benchmark file loads with its README count; malformed input names file:line."""

from __future__ import annotations

import collections
import json
import os
from pathlib import Path

import datasets
import pytest
from datasets.exceptions import DatasetGenerationError

from r3forge.data.formats import RecordContext, contains_answer, hotpotqa_hf, hotpotqa_original
from r3forge.data.loaders import (
    CORPUS_FORMATS,
    QA_FORMATS,
    HubSpec,
    detect_format,
    iter_corpus,
    iter_qa,
    load_corpus,
    load_qa,
    parse_hub_uri,
    summarize,
)
from r3forge.data.records import PASSAGE_FEATURES, QA_FEATURES
from r3forge.errors import DataFormatError

SHARED_DATA = Path(
    os.environ.get("R3FORGE_SHARED_DATA") or Path(__file__).resolve().parents[2].parent / "shared" / "data"
)
needs_shared = pytest.mark.skipif(
    not SHARED_DATA.is_dir(), reason=f"shared data folder not found: {SHARED_DATA}"
)

# path -> (detected format, record count). Counts from ../shared/data/README.md; the README gives the
# qa_only_full_sets only as a range (2,032 - 14,267): their exact counts are the files' line counts.
EXPECTED = {
    "hotpotqa/rpt_distractor_dev_sample_train.jsonl": ("hotpotqa_hf", 300),
    "hotpotqa/rpt_distractor_dev_sample_dev.jsonl": ("hotpotqa_hf", 300),
    "hotpotqa/rpt_distractor_dev_sample_test.jsonl": ("hotpotqa_hf", 500),
    "hotpotqa/amor_hotpotqa_dev.jsonl": ("hotpotqa", 100),
    "wiki_paragraphs/hotpot_dev_distractor_paragraphs.part00.jsonl": ("passages", 5000),
    "wiki_paragraphs/hotpot_dev_distractor_paragraphs.part01.jsonl": ("passages", 5000),
    "wiki_paragraphs/hotpot_dev_distractor_paragraphs.part02.jsonl": ("passages", 4835),
    "hipporag/hotpotqa_train.json": ("hotpotqa", 100),
    "hipporag/hotpotqa_train_corpus.json": ("passages", 994),
    "hipporag/musique_train.json": ("musique", 100),
    "hipporag/musique_train_corpus.json": ("passages", 1890),
    "hipporag/popqa.json": ("popqa", 1000),
    "hipporag/2wikimultihopqa_corpus.json": ("passages", 6119),
    "musique/lag_musique_ans_dev_questions.json": ("musique", 2417),
    "nq_open/NQ-open.dev.jsonl": ("nq_open", 3610),
    "nq_open/NQ-open.efficientqa.dev.1.1.jsonl": ("nq_open", 1800),
    "ambigqa/ambigqa_train_questions_and_answers.json": ("ambigqa", 10036),
    "ambigqa/ambigqa_test_questions_and_answers.json": ("ambigqa", 2002),
    "triviaqa/safeswitch_trivia_qa_rc_train_first2000.jsonl": ("triviaqa", 2000),
    "squad/routerlens_squad_dev_split.json": ("squad", 4330),
    "flashrag/nq_test_toy.jsonl": ("flashrag", 17),
    "flashrag/sample_data.jsonl": ("flashrag_corpus", 1000),
    "qa_only_full_sets/2wikimultihopqa_dev.jsonl": ("nq_open", 12576),
    "qa_only_full_sets/complex_web_questions_dev.jsonl": ("nq_open", 3519),
    "qa_only_full_sets/popqa_test.jsonl": ("nq_open", 14267),
    "qa_only_full_sets/squad_dev.jsonl": ("nq_open", 10570),
    "qa_only_full_sets/web_questions_test.jsonl": ("nq_open", 2032),
}
HOTPOT_DISTRACTOR = [f"hotpotqa/rpt_distractor_dev_sample_{s}.jsonl" for s in ("train", "dev", "test")]


def _data_files() -> list[str]:
    if not SHARED_DATA.is_dir():
        return []
    skip = ("README", "LICENSE")
    files = (p for p in SHARED_DATA.rglob("*") if p.is_file() and not p.name.upper().startswith(skip))
    return sorted(str(p.relative_to(SHARED_DATA)) for p in files)


@pytest.fixture(scope="module", autouse=True)
def _fresh_datasets_cache(tmp_path_factory: pytest.TempPathFactory):
    """Build Arrow caches in a fresh folder, so each run parses the files (and leaves ~/.cache alone)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path_factory.mktemp("hf_datasets")))
        yield


def _load(rel: str) -> datasets.Dataset:
    path = SHARED_DATA / rel
    return load_corpus(path) if detect_format(path) in CORPUS_FORMATS else load_qa(path)


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


# --- every shared file ------------------------------------------------------------------------------------


@needs_shared
@pytest.mark.parametrize("rel", _data_files() or ["<no shared data>"])
def test_every_shared_file_loads_with_readme_count(rel: str):
    assert rel in EXPECTED, f"new data file {rel}: add its format and README record count to EXPECTED"
    fmt, count = EXPECTED[rel]
    assert detect_format(SHARED_DATA / rel) == fmt
    ds = _load(rel)
    assert len(ds) == count
    if fmt in QA_FORMATS:
        assert ds.features == QA_FEATURES
        stats = summarize(ds)
        assert stats["records"] == stats["with_answers"] == count
        assert all(ds["question"]) and len(set(ds["id"])) == count
    else:
        assert ds.features == PASSAGE_FEATURES
        assert all(ds["text"]) and len(set(ds["id"])) == count


@needs_shared
def test_expected_table_names_only_existing_files():
    assert sorted(EXPECTED) == _data_files()


@needs_shared
def test_wiki_paragraph_parts_concatenate_by_glob_list_and_folder():
    folder = SHARED_DATA / "wiki_paragraphs"
    parts = sorted(folder.glob("*.jsonl"))
    by_glob = load_corpus(str(folder / "*.part0?.jsonl"))
    assert len(by_glob) == 14_835 == len(load_corpus(parts)) == len(load_corpus(folder))
    assert [len(load_corpus(p)) for p in parts] == [5000, 5000, 4835]
    assert by_glob[0]["id"] == "hp0" and by_glob[-1]["id"] == "hp14834"
    assert len(set(by_glob["id"])) == 14_835


# --- content of a few -------------------------------------------------------------------------------------


@needs_shared
@pytest.mark.parametrize("rel", HOTPOT_DISTRACTOR)
def test_hotpotqa_distractor_graded_relevance(rel: str):
    ds = load_qa(SHARED_DATA / rel)
    shapes = collections.Counter()
    for r in ds:
        relevance = [p["relevance"] for p in r["passages"]]
        shapes["ten_passages"] += len(relevance) == 10
        assert sum(x > 0 for x in relevance) == 2, r["id"]
        assert set(relevance) <= {0, 1, 2}
        gold_titles = {p["title"] for p in r["passages"] if p["relevance"] > 0}
        assert gold_titles == {f["title"] for f in r["supporting_facts"]}
        assert r["gold_passage_ids"] == [p["id"] for p in r["passages"] if p["relevance"] > 0]
        assert [p["id"] for p in r["passages"]] == [f"{r['id']}-{i}" for i in range(len(relevance))]
        shapes["states_answer"] += 2 in relevance
        assert set(json.loads(r["metadata"])) == {"type", "level"}
    assert shapes["ten_passages"] >= 0.98 * len(ds)  # a handful of source records have 2-9 paragraphs
    assert 0.05 * len(ds) < shapes["states_answer"] < len(ds)


@needs_shared
def test_hotpotqa_paragraphs_are_the_wiki_paragraphs_corpus():
    corpus = load_corpus(SHARED_DATA / "wiki_paragraphs")
    pairs = set(zip(corpus["title"], corpus["text"], strict=True))
    qa = load_qa([SHARED_DATA / rel for rel in HOTPOT_DISTRACTOR])
    assert len(qa) == 1100 and all((p["title"], p["text"]) in pairs for r in qa for p in r["passages"])


@needs_shared
def test_hotpotqa_original_format_and_amor_variant():
    amor = load_qa(SHARED_DATA / "hotpotqa/amor_hotpotqa_dev.jsonl")
    first = amor[0]
    assert first["id"] == "5a85355a5542997b5ce3ffc8" and first["answers"] == ["beer and whisky"]
    # AMOR facts are [title, [sent ids], sentences, doc]: expanded to one fact per sentence id
    assert {"title": "Michael Jackson (writer)", "sent_id": 1} in first["supporting_facts"]
    assert (
        max(p["relevance"] for p in first["passages"]) == 2
    )  # "beer and whisky" is in a supporting sentence
    hippo = load_qa(SHARED_DATA / "hipporag/hotpotqa_train.json")
    assert hippo[0]["supporting_facts"] == [
        {"title": "Alû", "sent_id": 3},
        {"title": "Lilu (mythology)", "sent_id": 0},
    ]


@needs_shared
def test_musique_sub_questions_and_supporting_paragraphs():
    with_paragraphs = load_qa(SHARED_DATA / "hipporag/musique_train.json")
    for r in with_paragraphs:
        hops = int(r["id"].split("hop")[0])
        assert len(r["sub_questions"]) == hops and all(
            s["question"] and s["answer"] for s in r["sub_questions"]
        )
        assert len(r["passages"]) == 20 and len(r["gold_passage_ids"]) == hops
    states_answer = sum(any(p["relevance"] == 2 for p in r["passages"]) for r in with_paragraphs)
    assert states_answer >= 0.95 * len(with_paragraphs)
    closed_book = load_qa(SHARED_DATA / "musique/lag_musique_ans_dev_questions.json")
    assert all(r["sub_questions"] and not r["passages"] for r in closed_book)
    assert json.loads(closed_book[0]["metadata"])["question_decomposition"][0]["paragraph_support_idx"] == 10


@needs_shared
def test_popqa_paragraphs_marked_supporting():
    ds = load_qa(SHARED_DATA / "hipporag/popqa.json")
    first = ds[0]
    assert first["id"] == "4222362" and first["answers"][0] == "politician" and "pol" in first["answers"]
    # both pages are marked supporting, and both mention "politician"
    assert [p["relevance"] for p in first["passages"]] == [2, 2]
    assert json.loads(first["metadata"])["s_pop"] == 142
    assert all(len(r["gold_passage_ids"]) == 2 for r in ds)


@needs_shared
def test_squad_context_is_gold_passage():
    ds = load_qa(SHARED_DATA / "squad/routerlens_squad_dev_split.json")
    assert all(len(r["passages"]) == 1 and r["passages"][0]["text"] for r in ds)
    assert summarize(ds)["with_gold_passage_ids"] == len(ds)
    first = ds[0]
    assert first["id"] == "routerlens_squad_dev_split-0"
    assert first["passages"][0] | {"text": ""} == {
        "id": f"{first['id']}-0",
        "title": "",
        "text": "",
        "relevance": 2,
    }


@needs_shared
def test_flashrag_corpus_titles_and_qa():
    corpus = load_corpus(SHARED_DATA / "flashrag/sample_data.jsonl")
    assert all(corpus["title"]) and corpus[0]["title"] == "Evan Morris"
    assert corpus[0]["text"].startswith("Evan Morris Evan L. Morris")
    unquoted = next(p for p in corpus if p["title"] == "Absalon")  # unquoted title line
    assert not unquoted["text"].startswith("Absalon\n")
    qa = load_qa(SHARED_DATA / "flashrag/nq_test_toy.jsonl")
    assert qa[6]["id"] == "test_6" and qa[6]["answers"] == [
        "Xiu Li Dai",
        "Dai Xiuli",
        "Dai Yongge",
        "Yongge Dai",
    ]


@needs_shared
def test_triviaqa_aliases_and_generated_ids():
    trivia = load_qa(SHARED_DATA / "triviaqa/safeswitch_trivia_qa_rc_train_first2000.jsonl")
    first = trivia[0]
    assert first["id"] == "0" and first["question"].startswith("Which American-born Sinclair")
    assert "Sinclair Lewis" in first["answers"] and len(first["answers"]) == 5
    assert json.loads(first["metadata"]) == {"dataset": "trivia_qa"}
    nq = load_qa(SHARED_DATA / "nq_open/NQ-open.dev.jsonl", source="nq")
    assert nq[0]["id"] == "NQ-open.dev-0" and nq[0]["source"] == "nq"
    assert nq[0]["answers"] == ["14 December 1972 UTC", "December 1972"]


@needs_shared
@needs_shared
def test_saved_dataset_folder_loads_and_is_checked(tmp_path: Path):
    qa = load_qa(SHARED_DATA / "flashrag/nq_test_toy.jsonl")
    qa.save_to_disk(str(tmp_path / "questions"))
    again = load_qa(str(tmp_path / "questions"))
    assert again.column_names == qa.column_names and again[6] == qa[6]
    with pytest.raises(DataFormatError, match=r"questions: saved dataset lacks the corpus columns"):
        load_corpus(tmp_path / "questions")
    with pytest.raises(DataFormatError, match="save_to_disk folder: load it with load_qa"):
        list(iter_qa(tmp_path / "questions"))


@needs_shared
def test_title_to_sentences_corpus():
    corpus = load_corpus(SHARED_DATA / "hipporag/hotpotqa_train_corpus.json")
    first = corpus[0]
    assert first["id"] == "hotpotqa_train_corpus-0" and first["title"] == "Demon Dice"
    assert (
        first["text"].startswith("Demon Dice, originally published") and "Tim Brown. In it," in first["text"]
    )


# --- graded relevance on hand-made records ---------------------------------------------------------------


def test_hotpot_relevance_grades_from_supporting_sentences():
    raw = {
        "id": "q",
        "question": "Where was Ada born?",
        "answer": "London",
        "type": "bridge",
        "supporting_facts": {"title": ["Ada", "Byron"], "sent_id": [1, 0]},
        "context": {
            "title": ["Ada", "Byron", "Other"],
            "sentences": [
                ["Ada was a writer.", " She was born in London."],
                ["Byron was a poet.", " London."],
                ["x"],
            ],
        },
    }
    record = hotpotqa_hf(raw, 0, RecordContext("f", "hotpotqa"))
    # "Byron" mentions London, but not in its supporting sentence 0
    assert [p["relevance"] for p in record["passages"]] == [2, 1, 0]
    assert record["gold_passage_ids"] == ["q-0", "q-1"] and record["passages"][0]["text"].endswith(
        "born in London."
    )
    original = {
        "_id": "q",
        "question": raw["question"],
        "answer": "London",
        "supporting_facts": [["Ada", 1], ["Byron", 0]],
        "context": [
            [t, s] for t, s in zip(raw["context"]["title"], raw["context"]["sentences"], strict=True)
        ],
    }
    assert hotpotqa_original(original, 0, RecordContext("f", "hotpotqa"))["passages"] == record["passages"]


def test_answer_containment_is_normalized_whole_words():
    assert contains_answer("The Beatles played in Hamburg.", ["beatles"])
    assert contains_answer("born in São Paulo, Brazil", ["SÃO PAULO"]) and not contains_answer("x", [])
    assert not contains_answer("a politician", ["pol"])
    assert not contains_answer("anything", ["the", ""])


# --- malformed input --------------------------------------------------------------------------------------


def test_broken_json_line_names_file_and_line(tmp_path: Path):
    path = _write(
        tmp_path / "file.jsonl", '{"question": "a", "answer": ["x"]}\n\n{"question": "b", "answer": [}\n'
    )
    with pytest.raises(DataFormatError, match=r"file\.jsonl:3: invalid JSON at column") as err:
        load_qa(path)
    assert not isinstance(err.value, DatasetGenerationError) and err.value.line == 3
    with pytest.raises(DataFormatError, match=r"file\.jsonl:3"):
        list(iter_qa(path, "nq_open"))


def test_missing_field_names_field_and_line(tmp_path: Path):
    path = _write(tmp_path / "qa.jsonl", '{"question": "a", "answer": ["x"]}\n{"answer": ["y"]}\n')
    with pytest.raises(DataFormatError, match=r"qa\.jsonl:2: missing field 'question'"):
        load_qa(path, format="nq_open")


def test_wrong_type_is_a_clear_error(tmp_path: Path):
    path = _write(tmp_path / "qa.jsonl", '{"question": "a", "answer": "Paris"}\n')
    with pytest.raises(DataFormatError, match=r"qa\.jsonl:1: field 'answer' must be a list, got a string"):
        load_qa(path)
    nested = _write(
        tmp_path / "m.jsonl", '{"question": "q", "answer": "a", "paragraphs": [{"title": "t"}]}\n'
    )
    with pytest.raises(DataFormatError, match=r"m\.jsonl:1: missing field 'paragraphs\[0\]\.paragraph_text'"):
        load_qa(nested, format="musique")


@pytest.mark.parametrize("text", ["", "\n  \n"])
def test_empty_file(tmp_path: Path, text: str):
    path = _write(tmp_path / "empty.jsonl", text)
    with pytest.raises(DataFormatError, match=r"empty\.jsonl: empty file"):
        load_qa(path)
    with pytest.raises(DataFormatError, match="empty file"):
        load_qa(path, format="nq_open")
    with pytest.raises(DataFormatError, match="empty file"):
        load_qa(_write(tmp_path / "empty.json", "[ ]"), format="ambigqa")


def test_json_array_bad_record_and_syntax_error(tmp_path: Path):
    records = [{"question": "q0", "answer": ["a"]}, {"question": ["not", "text"], "answer": ["b"]}]
    path = _write(tmp_path / "arr.json", json.dumps(records, indent=2))
    line = json.dumps(records, indent=2).splitlines().index("  {", 2) + 1
    with pytest.raises(
        DataFormatError, match=rf"arr\.json:{line}: record 1: field 'question' must be a string"
    ):
        load_qa(path)
    broken = _write(
        tmp_path / "broken.json", '[\n  {"question": "q", "answer": ["a"]}\n  {"question": "r"}\n]'
    )
    with pytest.raises(DataFormatError, match=r"broken\.json:3: invalid JSON at column 3: expected ','"):
        load_qa(broken, format="ambigqa")


def test_format_errors(tmp_path: Path):
    path = _write(tmp_path / "odd.jsonl", '{"foo": 1}\n')
    with pytest.raises(DataFormatError, match=r"odd\.jsonl:1: cannot detect the format from \['foo'\]"):
        load_qa(path)
    with pytest.raises(ValueError, match="unknown QA format 'passages'"):
        load_qa(path, format="passages")
    qa = _write(tmp_path / "qa.jsonl", '{"question": "a", "answer": ["x"]}\n')
    with pytest.raises(DataFormatError, match="looks like 'nq_open', not a corpus format: use load_qa"):
        load_corpus(qa)
    with pytest.raises(FileNotFoundError):
        load_qa(tmp_path / "missing.jsonl")


def test_layouts_jsonl_named_json_object_document_and_bom(tmp_path: Path):
    rows = [{"id": "a", "title": "A", "text": "x"}, {"id": "b", "title": "B", "text": "y"}]
    jsonl_as_json = _write(tmp_path / "rows.json", "\n".join(json.dumps(r) for r in rows))
    assert list(iter_corpus(jsonl_as_json)) == rows
    document = _write(tmp_path / "titles.json", '\ufeff{\n "A": ["x", " y"],\n "B": "z"\n}')
    assert list(iter_corpus(document)) == [
        {"id": "titles-0", "title": "A", "text": "x y"},
        {"id": "titles-1", "title": "B", "text": "z"},
    ]
    with pytest.raises(DataFormatError, match=r"bad\.json:3: invalid JSON at column 2: expected ',' or '}'"):
        list(iter_corpus(_write(tmp_path / "bad.json", '{\n "A": "x"\n "B": "y"}')))


# --- caching and streaming --------------------------------------------------------------------------------


def test_edited_file_is_not_served_from_cache(tmp_path: Path):
    path = _write(tmp_path / "qa.jsonl", '{"question": "old", "answer": ["x"]}\n')
    assert load_qa(path)["question"] == ["old"]
    assert load_qa(path)["question"] == ["old"]
    _write(path, '{"question": "new", "answer": ["x"]}\n{"question": "two", "answer": ["y"]}\n')
    assert load_qa(path)["question"] == ["new", "two"]


def test_iter_corpus_streams_records_lazily(tmp_path: Path):
    lines = [json.dumps({"id": f"p{i}", "title": "T", "text": f"text {i}"}) for i in range(3)] + ["{oops"]
    path = _write(tmp_path / "corpus.jsonl", "\n".join(lines))
    records = iter_corpus(path)
    assert next(records) == {"id": "p0", "title": "T", "text": "text 0"}
    with pytest.raises(DataFormatError, match=r"corpus\.jsonl:4"):
        list(records)


def test_summarize_counts(tmp_path: Path):
    rows = [
        {"question": "q", "context": "Ada was born in London.", "answer": "London"},
        {"question": "r", "context": "Nothing here.", "answer": "Paris"},
    ]
    ds = load_qa(_write(tmp_path / "s.json", json.dumps(rows)), format="squad")
    assert [p[0]["relevance"] for p in ds["passages"]] == [2, 1]
    assert summarize(ds) == {
        "records": 2,
        "passages": 2,
        "with_relevance": 2,
        "with_answers": 2,
        "with_passages": 2,
        "with_gold_passage_ids": 2,
        "with_sub_questions": 0,
        "sources": {"squad": 2},
    }
    corpus = load_corpus(_write(tmp_path / "c.json", json.dumps([{"title": "", "text": "a"}, {"text": "b"}])))
    assert corpus["id"] == ["c-0", "c-1"] and summarize(corpus) == {"passages": 2, "with_title": 0}


# --- Hub --------------------------------------------------------------------------------------------------


def test_parse_hub_uri():
    assert parse_hub_uri("hf://hotpotqa/hotpot_qa:distractor@validation") == HubSpec(
        "hotpotqa/hotpot_qa", "distractor", "validation"
    )
    assert parse_hub_uri("hf://google-research-datasets/nq_open") == HubSpec(
        "google-research-datasets/nq_open"
    )
    assert parse_hub_uri("hf://squad@validation[:100]") == HubSpec("squad", None, "validation[:100]")
    assert parse_hub_uri("hf://mandarjoshi/trivia_qa:rc.nocontext").config == "rc.nocontext"
    for bad in ("hf://", "hf://a/b/c", "/data/file.jsonl", "hf://org/name@"):
        with pytest.raises(ValueError, match="not a Hub dataset URI"):
            parse_hub_uri(bad)


def test_hub_rows_go_through_the_same_converters(monkeypatch: pytest.MonkeyPatch):
    calls = []

    def fake_load_dataset(repo, config, split=None):
        calls.append((repo, config, split))
        rows = datasets.Dataset.from_list(
            [{"question": "who?", "answer": ["Ada"]}, {"question": "x", "answer": []}]
        )
        return rows if split else datasets.DatasetDict({"train": rows, "validation": rows})

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    ds = load_qa("hf://google-research-datasets/nq_open@validation")
    assert calls == [("google-research-datasets/nq_open", None, "validation")]
    assert (
        ds.features == QA_FEATURES and ds[0]["id"] == "nq_open-validation-0" and ds[0]["answers"] == ["Ada"]
    )
    with pytest.raises(ValueError, match="choose a split"):
        load_qa("hf://org/name")
    with pytest.raises(ValueError, match="not a corpus format"):
        load_corpus("hf://org/name@train")
