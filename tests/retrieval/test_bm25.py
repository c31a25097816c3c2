"""BM25 (bm25s): build/save/load round trip, known answers on the real wiki corpus, tokenization, errors, CLI."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import bm25s
import datasets
import numpy as np
import pytest

from r3forge.cli import run_command
from r3forge.data.loaders import load_corpus, load_qa
from r3forge.data.records import PASSAGE_FEATURES
from r3forge.errors import ConfigError
from r3forge.retrieval import (
    BM25Config,
    BM25Retriever,
    BM25Tokenizer,
    IndexFormatError,
    RetrievalError,
    Retriever,
    build_bm25_index,
    load_retriever,
    open_retriever,
    read_manifest,
)
from r3forge.retrieval.base import passage_text

WIKI_GLOB = "wiki_paragraphs/hotpot_dev_distractor_paragraphs.part0*.jsonl"


def _passages(rows: list[tuple[str, str, str]]) -> datasets.Dataset:
    columns = {"id": [r[0] for r in rows], "title": [r[1] for r in rows], "text": [r[2] for r in rows]}
    return datasets.Dataset.from_dict(columns, features=PASSAGE_FEATURES)


@pytest.fixture(scope="module")
def wiki(shared_data: Path) -> datasets.Dataset:
    return load_corpus(str(shared_data / WIKI_GLOB))


@pytest.fixture(scope="module")
def wiki_index(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bm25") / "wiki"
    return build_bm25_index(str(shared_data / WIKI_GLOB), out, show_progress=False)


@pytest.fixture(scope="module")
def wiki_retriever(wiki_index: Path) -> BM25Retriever:
    return BM25Retriever.load(wiki_index, backend="numpy")


def test_manifest_and_self_contained_folder(wiki_index: Path, wiki: datasets.Dataset):
    manifest = read_manifest(wiki_index, kind="bm25")
    assert manifest.count == len(wiki) == 14835
    assert manifest.params["stemmer"] == "english" and manifest.params["method"] == "lucene"
    assert manifest.corpus_path.endswith("part0*.jsonl") and len(manifest.corpus_fingerprint) == 64
    assert {p.name for p in wiki_index.iterdir()} == {"index.json", "passages", "bm25"}
    assert not list(wiki_index.parent.glob(".tmp-*"))  # the staging folder was renamed away


def query_rtol(queries: list[str], fp32) -> float:
    """A BM25 score is an fp32 sum of one term per query token, positive (idf > 0: a title word is in fewer
    than half the passages): summed in another order it moves by at most (n - 1)·u relative (no
    cancellation), and two such sums by twice that; n is bounded by the query's word-character runs (tokens
    are runs of 2+). A term missing or counted twice is off by its own size (> 1e-2 relative)."""
    return 2 * max(len(re.findall(r"\w+", q)) for q in queries) * fp32.u


def test_loaded_index_matches_in_memory_bm25s(tmp_path: Path, wiki: datasets.Dataset, fp32):
    """Save + load gives exactly the scores of a bm25s index built in memory from the same tokens."""
    subset = wiki.select(range(3000))
    config = BM25Config(method="robertson", k1=1.2, b=0.7)
    build_bm25_index(subset, tmp_path / "idx", config, show_progress=False)
    loaded = BM25Retriever.load(tmp_path / "idx", backend="numpy")
    tokenize = BM25Tokenizer(config)
    reference = bm25s.BM25(method="robertson", k1=1.2, b=0.7)
    reference.index(tokenize([passage_text(r["title"], r["text"]) for r in subset]), show_progress=False)
    queries = [r["title"] for r in subset.select(range(0, 3000, 100))]
    rows, scores = reference.retrieve(tokenize(queries), k=10, show_progress=False)
    for got, ref_rows, ref_scores in zip(loaded.search(queries, 10), rows, scores, strict=True):
        n = len(got)  # passages sharing no query term (score 0) are left out
        assert n > 0 and np.all(ref_scores[n:] == 0)
        assert [pid for pid, _ in got] == subset.select(ref_rows[:n].tolist())["id"]
        np.testing.assert_allclose([s for _, s in got], ref_scores[:n], rtol=query_rtol(queries, fp32))


def test_round_trip_copy_and_mmap_identical(wiki_index: Path, wiki_retriever: BM25Retriever, tmp_path: Path):
    queries = ["Tinted Windows debut album first performance", "anthroposophical movement world center"]
    expected = wiki_retriever.search(queries, 10)
    copy = Path(shutil.copytree(wiki_index, tmp_path / "moved"))
    assert BM25Retriever.load(copy, backend="numpy", mmap=True).search(queries, 10) == expected
    assert load_retriever(copy, backend="numpy").search(queries, 10) == expected


@pytest.mark.slow  # numba JIT-compiles bm25s' kernels on first use: 6-12 s per process
def test_numba_backend_matches_numpy(wiki_index: Path, wiki_retriever: BM25Retriever, fp32):
    queries = ["Tinted Windows debut album first performance", "anthroposophical movement world center"]
    expected = wiki_retriever.search(queries, 10)
    numba = BM25Retriever.load(wiki_index, backend="numba").search(queries, 10)
    assert [[p for p, _ in row] for row in numba] == [[p for p, _ in row] for row in expected]
    np.testing.assert_allclose(
        [s for row in numba for _, s in row],
        [s for row in expected for _, s in row],
        rtol=query_rtol(queries, fp32),
    )


def test_hotpotqa_gold_paragraphs_in_top10(
    wiki_retriever: BM25Retriever, wiki: datasets.Dataset, shared_data: Path
):
    qa = load_qa(shared_data / "hotpotqa/rpt_distractor_dev_sample_dev.jsonl").select(range(100))
    corpus_id = {(r["title"], r["text"]): r["id"] for r in wiki}
    gold = [[corpus_id[(p["title"], p["text"])] for p in ex["passages"] if p["relevance"] > 0] for ex in qa]
    hits = wiki_retriever.search(qa["question"], k=10)
    # the first question's two gold paragraphs ("Tinted Windows (album)", "Tinted Windows (band)") rank 1-2
    assert {pid for pid, _ in hits[0][:2]} == set(gold[0]) == {"hp3", "hp9"}
    recall = np.mean([len(set(g) & {p for p, _ in h}) / len(g) for g, h in zip(gold, hits, strict=True)])
    assert recall > 0.75, recall  # measured 0.83 on the full 300-question slice
    assert all(len(h) == 10 for h in hits)
    assert all(h[i][1] >= h[i + 1][1] for h in hits for i in range(9))  # best first
    assert wiki_retriever.get(["hp9", "hp3"])[1]["title"] == "Tinted Windows (album)"


def test_retriever_protocol_and_edge_queries(wiki_retriever: BM25Retriever):
    assert isinstance(wiki_retriever, Retriever)
    assert wiki_retriever.search([], 5) == []
    # no indexed term (stopwords only, unknown word, empty): nothing matches, as in pyserini
    assert wiki_retriever.search(["the of and", "zxqvjklm", ""], 5) == [[], [], []]
    assert len(wiki_retriever.search(["music"], 20000)[0]) < 14835  # k above the corpus size is clipped
    with pytest.raises(KeyError, match="nope"):
        wiki_retriever.get(["hp1", "nope"])


def test_stemming_and_stopword_options_change_tokens():
    text = ["The runners are running in the Races"]
    assert BM25Tokenizer(BM25Config())(text) == [["runner", "run", "race"]]
    assert BM25Tokenizer(BM25Config(stemmer="none"))(text) == [["runners", "running", "races"]]
    assert BM25Tokenizer(BM25Config(stemmer="none", stopwords="none"))(text) == [
        ["the", "runners", "are", "running", "in", "the", "races"]
    ]
    assert BM25Tokenizer(BM25Config(stemmer="none", lowercase=False))(text) == [
        ["The", "runners", "running", "Races"]
    ]


def test_stemming_changes_what_matches(tmp_path: Path):
    corpus = _passages([("a", "Cats", "Two cats were running home."), ("b", "Dogs", "A dog sleeps all day.")])
    stem = BM25Retriever.load(build_bm25_index(corpus, tmp_path / "s", show_progress=False), backend="numpy")
    plain = BM25Retriever.load(
        build_bm25_index(corpus, tmp_path / "p", BM25Config(stemmer="none"), show_progress=False),
        backend="numpy",
    )
    assert [p for p, _ in stem.search(["cat runs"], 2)[0]] == ["a"]
    assert plain.search(["cat runs"], 2) == [[]]
    assert read_manifest(tmp_path / "p").params["stemmer"] == "none"


def test_bad_k_and_queries(wiki_retriever: BM25Retriever):
    for k in (0, -1, 2.5, "3", True):
        with pytest.raises(RetrievalError, match="k must be a positive int"):
            wiki_retriever.search(["music"], k)
    with pytest.raises(RetrievalError, match="list of strings"):
        wiki_retriever.search("music", 3)
    with pytest.raises(RetrievalError, match=r"queries\[1\] must be a string"):
        wiki_retriever.search(["music", 3], 3)


def test_build_errors(tmp_path: Path, wiki_index: Path):
    with pytest.raises(RetrievalError, match="no passages"):
        build_bm25_index(_passages([]), tmp_path / "empty", show_progress=False)
    with pytest.raises(RetrievalError, match=r"duplicate passage ids, e.g. \['x'\]"):
        build_bm25_index(
            _passages([("x", "", "one"), ("x", "", "two")]), tmp_path / "dup", show_progress=False
        )
    with pytest.raises(RetrievalError, match="already exists"):
        build_bm25_index(_passages([("x", "", "one")]), wiki_index, show_progress=False)
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "notes.txt").write_text("keep me")
    with pytest.raises(RetrievalError, match="exists and is not an index folder"):
        build_bm25_index(_passages([("x", "", "one")]), precious, overwrite=True, show_progress=False)
    assert (precious / "notes.txt").read_text() == "keep me"
    with pytest.raises(RetrievalError, match="no passage has a single token"):
        build_bm25_index(
            _passages([("x", "", "the of"), ("y", "", "!")]), tmp_path / "stop", show_progress=False
        )
    with pytest.raises(RetrievalError, match="stemmer='klingon'"):
        BM25Config(stemmer="klingon")
    assert not (tmp_path / "empty").exists() and not (tmp_path / "stop").exists()
    assert not list(tmp_path.glob(".tmp-*"))


def test_load_errors(tmp_path: Path, wiki_index: Path):
    with pytest.raises(IndexFormatError, match="no such index folder"):
        BM25Retriever.load(tmp_path / "missing")
    (tmp_path / "plain").mkdir()
    with pytest.raises(IndexFormatError, match=r"index\.json: missing"):
        BM25Retriever.load(tmp_path / "plain")
    broken = Path(shutil.copytree(wiki_index, tmp_path / "broken"))
    (broken / "bm25" / "vocab.index.json").unlink()
    with pytest.raises(IndexFormatError, match=r"incomplete index, missing \['bm25/vocab.index.json'\]"):
        BM25Retriever.load(broken)
    manifest = json.loads((broken / "index.json").read_text())
    (broken / "index.json").write_text(json.dumps({**manifest, "kind": "dense"}))
    with pytest.raises(IndexFormatError, match="is a 'dense' index, not 'bm25'"):
        BM25Retriever.load(broken)


def test_cli_build_with_yaml_config(tmp_path: Path, shared_data: Path, capsys: pytest.CaptureFixture[str]):
    config = tmp_path / "bm25.yaml"
    config.write_text(
        f"corpus: [{shared_data / 'flashrag/sample_data.jsonl'}]\nkind: bm25\nstemmer: none\nk1: 0.9\n"
    )
    out = tmp_path / "flashrag-bm25"
    assert run_command("index", ["build", "--config", str(config), "--output", str(out), "--b", "0.4"]) == 0
    assert "bm25 index of 1000 passages" in capsys.readouterr().out
    params = read_manifest(out).params
    assert (params["stemmer"], params["k1"], params["b"]) == ("none", 0.9, 0.4)
    assert run_command("index", ["search", "--index", str(out), "--queries", "Hamlet", "--k", "2"]) == 0
    assert "# Hamlet" in capsys.readouterr().out
    with pytest.raises(ConfigError, match="unknown flag '--stemer'"):
        run_command("index", ["build", "--corpus", "x", "--output", str(out), "--stemer", "none"])


def test_open_retriever_opens_a_folder_and_needs_exactly_one_source(wiki_index: Path, tmp_path: Path) -> None:
    retriever = open_retriever(str(wiki_index), "")
    assert (
        isinstance(retriever, BM25Retriever) and len(retriever.search(["Tinted Windows band"], k=2)[0]) == 2
    )
    with pytest.raises(ConfigError, match="exactly one"):
        open_retriever("", "")
    with pytest.raises(ConfigError, match="exactly one"):
        open_retriever(str(wiki_index), "http://127.0.0.1:1")
    with pytest.raises(ConfigError, match="not a folder"):
        open_retriever(str(tmp_path / "nope"), "")
