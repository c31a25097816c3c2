"""The retriever server for real on loopback: Search-R1 shapes, 4xx on bad requests, 413 on oversize bodies and
queries, 1,000 concurrent requests, requests abandoned by their client skipped, and the client's retries."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from r3forge.data.loaders import load_corpus, load_qa
from r3forge.data.records import flashrag_contents
from r3forge.retrieval import (
    BM25Retriever,
    Hit,
    RetrievalError,
    Retriever,
    RetrieverClient,
    RetrieverUnavailableError,
    build_bm25_index,
)
from r3forge.retrieval.server import RunningServer, ServeConfig, create_app, serve_in_thread

WIKI_GLOB = "wiki_paragraphs/hotpot_dev_distractor_paragraphs.part0*.jsonl"
MAX_TOPK = 50


@pytest.fixture(scope="module")
def index(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("served") / "wiki-bm25"
    return build_bm25_index(load_corpus(str(shared_data / WIKI_GLOB)), out, show_progress=False)


@pytest.fixture(scope="module")
def retriever(index: Path) -> BM25Retriever:
    return BM25Retriever.load(index, backend="numpy")


@pytest.fixture(scope="module")
def server(retriever: BM25Retriever):
    config = ServeConfig(index="test", port=0, max_topk=MAX_TOPK, max_queries=64)
    with serve_in_thread(retriever, config) as running:
        yield running


@pytest.fixture(scope="module")
def questions(shared_data: Path) -> list[str]:
    return load_qa(shared_data / "hotpotqa/rpt_distractor_dev_sample_test.jsonl")["question"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_search_r1_response_shape(server: RunningServer, retriever: BM25Retriever, questions: list[str]):
    queries = questions[:2]
    body = httpx.post(
        f"{server.url}/retrieve", json={"queries": queries, "topk": 3, "return_scores": True}
    ).json()
    assert list(body) == ["result"] and len(body["result"]) == 2
    for row, expected in zip(body["result"], retriever.search(queries, 3), strict=True):
        assert [item["document"]["id"] for item in row] == [pid for pid, _ in expected]
        # the same retriever's scores through JSON (a float's repr round-trips exactly): equal
        assert [item["score"] for item in row] == pytest.approx([s for _, s in expected])
        for item, passage in zip(row, retriever.get([pid for pid, _ in expected]), strict=True):
            assert set(item) == {"document", "score"} and set(item["document"]) == {"id", "contents"}
            assert item["document"]["contents"] == flashrag_contents(passage["title"], passage["text"])
    # Search-R1's default: no topk -> the server default (3); return_scores false -> documents only
    plain = httpx.post(f"{server.url}/retrieve", json={"queries": queries[:1]}).json()["result"]
    assert [d["id"] for d in plain[0]] == [item["document"]["id"] for item in body["result"][0]]
    assert set(plain[0][0]) == {"id", "contents"}
    assert httpx.get(f"{server.url}/health").json()["status"] == "ok"


@pytest.mark.parametrize(
    ("payload", "status", "message"),
    [
        (b"{not json", 400, "not valid JSON"),
        ({"topk": 3}, 422, "queries: Field required"),
        ({"queries": []}, 422, "queries: List should have at least 1 item"),
        ({"queries": "who?"}, 422, "queries: Input should be a valid list"),
        ({"queries": ["ok", 7]}, 422, "queries.1: Input should be a valid string"),
        ({"queries": ["ok"], "topk": 0}, 422, f"topk must be between 1 and {MAX_TOPK}, got 0"),
        ({"queries": ["ok"], "topk": MAX_TOPK + 1}, 422, f"topk must be between 1 and {MAX_TOPK}"),
        ({"queries": ["ok"], "topk": "3"}, 422, "topk: Input should be a valid integer"),
        ({"queries": ["ok"], "return_scores": "yes"}, 422, "return_scores: Input should be a valid boolean"),
        ({"queries": ["q"] * 65}, 413, "65 queries in one request; the limit is max_queries=64"),
    ],
)
def test_bad_requests_get_4xx_and_server_keeps_serving(
    server: RunningServer, payload, status: int, message: str
):
    kwargs = {"content": payload, "headers": {"content-type": "application/json"}}
    response = httpx.post(
        f"{server.url}/retrieve", **(kwargs if isinstance(payload, bytes) else {"json": payload})
    )
    assert response.status_code == status
    assert message in response.json()["detail"]
    ok = httpx.post(f"{server.url}/retrieve", json={"queries": ["Tinted Windows"], "topk": 1})
    assert ok.status_code == 200 and len(ok.json()["result"][0]) == 1


def test_oversize_body_and_query_get_413_and_server_keeps_serving(
    server: RunningServer, retriever: BM25Retriever
):
    """The issue's 10 MB query: refused on its Content-Length (default max_body_bytes, 1 MiB) before it is
    read; a chunked body without a length as soon as it passes the limit; a query over max_query_chars
    (default 4096); the same keep-alive connection then answers a normal query correctly."""

    def chunks() -> Iterator[bytes]:
        yield b'{"queries": ["'
        for _ in range(8):
            yield b"a" * (256 << 10)
        yield b'"]}'

    json_type = {"content-type": "application/json"}
    with httpx.Client(base_url=server.url, timeout=30) as client:
        huge = client.post("/retrieve", json={"queries": ["x" * (10 << 20)]})
        assert huge.status_code == 413
        assert huge.json()["detail"] == (
            f"request body of {len(huge.request.content)} bytes is over the limit max_body_bytes=1048576"
        )
        streamed = client.post("/retrieve", content=chunks(), headers=json_type)
        assert "content-length" not in streamed.request.headers and streamed.status_code == 413
        assert "is over the limit max_body_bytes=1048576" in streamed.json()["detail"]
        long = client.post("/retrieve", json={"queries": ["ok", "y" * 4097]})
        assert long.status_code == 413
        assert long.json()["detail"] == "queries.1: 4097 characters; the limit is max_query_chars=4096"
        at_limit = client.post("/retrieve", json={"queries": ["Tinted Windows " * 273], "topk": 1})
        assert at_limit.status_code == 200  # 4095 characters
        ok = client.post("/retrieve", json={"queries": ["Tinted Windows album"], "topk": 2})
        assert ok.status_code == 200
        expected = [pid for pid, _ in retriever.search(["Tinted Windows album"], 2)[0]]
        assert [d["id"] for d in ok.json()["result"][0]] == expected


def test_1000_concurrent_requests(server: RunningServer, retriever: BM25Retriever, questions: list[str]):
    """1,000 requests with 64 in flight: all succeed, each gets its own query's answer (micro-batching
    merges them into shared search calls), within a time bound."""
    queries = [questions[i % len(questions)] for i in range(1000)]
    topks = [1 + i % 7 for i in range(1000)]  # mixed topk: the batcher groups by k
    expected = {
        (q, k): [pid for pid, _ in hits]
        for q, k in set(zip(queries, topks, strict=True))
        for hits in retriever.search([q], k)
    }

    async def run() -> list[httpx.Response]:
        limit = asyncio.Semaphore(64)
        limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
        async with httpx.AsyncClient(base_url=server.url, timeout=30, limits=limits) as client:

            async def one(query: str, k: int) -> httpx.Response:
                async with limit:
                    return await client.post("/retrieve", json={"queries": [query], "topk": k})

            return await asyncio.gather(*(one(q, k) for q, k in zip(queries, topks, strict=True)))

    start = time.perf_counter()
    responses = asyncio.run(asyncio.wait_for(run(), timeout=90))
    elapsed = time.perf_counter() - start
    assert [r.status_code for r in responses] == [200] * 1000
    for query, k, response in zip(queries, topks, responses, strict=True):
        assert [d["id"] for d in response.json()["result"][0]] == expected[(query, k)]
    print(f"1000 requests in {elapsed:.1f}s ({1000 / elapsed:.0f} req/s)")


def test_client_implements_the_protocol(
    server: RunningServer, retriever: BM25Retriever, questions: list[str]
):
    with RetrieverClient(server.url, timeout=10, max_retries=1) as client:
        assert isinstance(client, Retriever)
        assert client.search(questions[:3], 5) == [
            [(pid, pytest.approx(score)) for pid, score in row] for row in retriever.search(questions[:3], 5)
        ]
        docs = client.retrieve(questions[:1], 2)[0]
        assert [{k: d[k] for k in ("id", "title", "text")} for d in docs] == retriever.get(
            [d["id"] for d in docs]
        )
        assert client.get(["hp3", "hp9"]) == retriever.get(["hp3", "hp9"])
        assert client.health()["status"] == "ok"
        start = time.perf_counter()
        with pytest.raises(RetrievalError, match=f"HTTP 422: topk must be between 1 and {MAX_TOPK}"):
            client.search(["x"], MAX_TOPK + 1)  # a 4xx is not retried
        with pytest.raises(RetrievalError, match=r"HTTP 404: .*unknown passage id"):
            client.get(["nope"])
        assert time.perf_counter() - start < 2


def test_client_gives_up_after_retry_budget():
    port = _free_port()  # nothing listens there
    client = RetrieverClient(f"http://127.0.0.1:{port}", timeout=2, max_retries=3, backoff=0.05)
    start = time.perf_counter()
    with pytest.raises(
        RetrieverUnavailableError, match=rf"127.0.0.1:{port}/retrieve: no answer after 4 attempts"
    ) as e:
        client.search(["anything"], 3)
    assert e.value.attempts == 4 and "ConnectError" in str(e.value)
    assert time.perf_counter() - start >= (0.025 + 0.05 + 0.1)  # backoff 0.05 * 2**i, at least half of each


class FlakyRetriever:
    """Fails its first `failures` searches (a 500 from the server), then answers."""

    def __init__(self, failures: int):
        self.failures = failures
        self.calls = 0

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        self.calls += 1
        if self.calls <= self.failures:
            raise RuntimeError("disk hiccup")
        return [[("p1", 1.0)] for _ in queries]

    def get(self, ids: list[str]) -> list[dict[str, str]]:
        return [{"id": i, "title": "T", "text": "body"} for i in ids]


def test_client_retries_5xx_then_succeeds():
    flaky = FlakyRetriever(failures=2)
    with RunningServer(create_app(flaky, ServeConfig(index="flaky", port=0))) as server:
        assert httpx.post(f"{server.url}/retrieve", json={"queries": ["q"]}).status_code == 500
        flaky.calls = 0
        client = RetrieverClient(server.url, max_retries=3, backoff=0.01)
        assert client.retrieve(["q"], 1) == [
            [{"id": "p1", "title": "T", "text": "body", "contents": '"T"\nbody', "score": 1.0}]
        ]
        assert flaky.calls == 3
        flaky.failures, flaky.calls = 10, 0
        with pytest.raises(
            RetrieverUnavailableError, match=r"after 2 attempts.*HTTP 500: search failed: RuntimeError"
        ):
            RetrieverClient(server.url, max_retries=1, backoff=0.01).search(["q"], 1)


class SlowRetriever:
    """Takes `per_query` seconds per query searched (the issue's 10 MB query took 9.8 s) and answers each
    query with the passage named after it, so the order of the rows is checked."""

    def __init__(self, per_query: float):
        self.per_query = per_query
        self.searched = 0

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        time.sleep(self.per_query * len(queries))
        self.searched += len(queries)
        return [[(f"p-{q}", 1.0)] for q in queries]

    def get(self, ids: list[str]) -> list[dict[str, str]]:
        return [{"id": i, "title": "T", "text": "body"} for i in ids]


def test_requests_abandoned_by_their_client_are_not_searched():
    """Three clients send 100 queries each (5 s of search each) and leave after 0.3 s: the server skips
    what it had not searched yet (max_batch: 4 queries per search call), so a later request does not wait
    for their 15 s; a request larger than max_batch is still answered whole, in order."""
    slow = SlowRetriever(per_query=0.05)
    config = ServeConfig(index="slow", port=0, max_batch=4)
    with RunningServer(create_app(slow, config)) as server:
        timed_out: list[bool] = []

        def abandon() -> None:
            try:
                httpx.post(
                    f"{server.url}/retrieve", json={"queries": [f"q{i}" for i in range(100)]}, timeout=0.3
                )
            except httpx.TimeoutException:
                timed_out.append(True)

        clients = [threading.Thread(target=abandon) for _ in range(3)]
        for thread in clients:
            thread.start()
        for thread in clients:
            thread.join()
        assert timed_out == [True] * 3
        start = time.perf_counter()
        later = httpx.post(
            f"{server.url}/retrieve", json={"queries": [f"n{i}" for i in range(10)]}, timeout=60
        )
        waited = time.perf_counter() - start
        assert later.status_code == 200
        assert [row[0]["id"] for row in later.json()["result"]] == [f"p-n{i}" for i in range(10)]
        counters = httpx.get(f"{server.url}/health").json()["searches"]
    assert counters["abandoned_requests"] == 3
    assert counters["skipped_queries"] >= 200  # each left while at most a few 4-query slices had run
    assert counters["queries"] == slow.searched == 300 + 10 - counters["skipped_queries"]
    assert waited < 10  # 15 s of abandoned work without the skipping; ~0.5 s with it
    print(f"later request waited {waited:.2f}s; {counters}")


def test_serve_main_subprocess(index: Path):
    """`python -m r3forge.retrieval.server --index ...` (what `r3forge serve retriever` runs) answers."""
    port = _free_port()
    cmd = [sys.executable, "-m", "r3forge.retrieval.server", "--index", str(index), "--port", str(port)]
    proc = subprocess.Popen(
        [*cmd, "--backend", "numpy", "--log_level", "warning"], stderr=subprocess.PIPE, text=True
    )
    try:
        client = RetrieverClient(
            f"http://127.0.0.1:{port}", timeout=5, max_retries=12, backoff=0.5, max_backoff=4
        )
        assert client.health()["count"] == 14835
        assert client.search(["Tinted Windows album"], 2)[0][0][0] == "hp3"
    finally:
        proc.terminate()
        _, stderr = proc.communicate(timeout=20)
    assert f"serving {index} on http://127.0.0.1:{port}" in stderr
