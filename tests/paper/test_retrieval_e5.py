"""configs/retrieval/e5_base_hnsw.yaml: the Search-R1 / FlashRAG e5 index, built as its header says with
the embedded MiniLM on CPU (encoder, device, corpus and output overridden), then served by the header's
`r3forge serve retriever` that the NQ annotation and the GRPO agent use. In the default suite (seconds)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from r3forge.data.loaders import load_qa
from r3forge.retrieval import RetrieverClient

from .conftest import REPO, WIKI_PASSAGES, read_jsonl
from .headers import header_command

CONFIG = "retrieval/e5_base_hnsw.yaml"


def test_header_builds_the_index_the_retriever_servers_serve():
    build = header_command(CONFIG, "r3forge", "index", "build")
    assert build[3:5] == ["--config", f"configs/{CONFIG}"]
    output = yaml.safe_load((REPO / "configs" / CONFIG).read_text())["output"]
    for user in ("annotate/verbal_nq_gptoss120b.yaml", "grpo/agent_qwen2.5-3b.yaml"):
        assert header_command(user, "r3forge", "serve", "retriever")[3:5] == ["--index", output], user


def test_e5_index_builds_and_serves(e5_index, paper_corpus, retriever_url, hotpot):
    index, log = e5_index
    written = yaml.safe_load((REPO / "configs" / CONFIG).read_text())
    manifest = json.loads((index / "index.json").read_text())
    passages = WIKI_PASSAGES + len(read_jsonl(paper_corpus[1]))
    assert f"dense index of {passages} passages" in log
    assert manifest["kind"] == "dense" and manifest["count"] == passages
    params = manifest["params"]
    # everything but encoder and device as the YAML writes it: e5's prefixes (with their trailing space), HNSW
    for key in ("query_prefix", "passage_prefix", "max_seq_length", "batch_size", "index_type"):
        assert params[key] == written[key], key
    assert params["encoder"] == "all-minilm-l6-v2" and params["device"] == "cpu" and params["dim"] == 384
    assert sorted(p.name for p in index.iterdir()) == ["dense", "index.json", "owner.json", "passages"]

    # the served index finds a HotpotQA question's own paragraphs (own ids: <question id>-<i>)
    questions = load_qa(str(hotpot["retrieved"]))
    with RetrieverClient(retriever_url) as client:
        assert client.health()["kind"] == "dense"
        hits = client.search(questions["question"], 10)
    own = [
        any(pid.startswith(f"{qid}-") for pid, _ in row)
        for qid, row in zip(questions["id"], hits, strict=True)
    ]
    assert sum(own) >= len(own) // 2, own
    assert all(row == sorted(row, key=lambda h: -h[1]) for row in hits)


def test_corpus_is_real_shared_data(paper_corpus, shared_data: Path):
    wiki = read_jsonl(paper_corpus[0])
    assert len(wiki) == WIKI_PASSAGES and all(set(r) == {"id", "contents"} for r in wiki)
    first = json.loads((shared_data / "flashrag/sample_data.jsonl").open().readline())
    assert wiki[0] == first
