"""HTTP client of a retriever server (`r3forge serve retriever`, or any Search-R1-style `/retrieve`).

    client = RetrieverClient("http://127.0.0.1:8000", timeout=30, max_retries=5)
    client.search(["who wrote Hamlet"], k=3)      # [[("hp12", 17.1), ...]]  (the Retriever protocol)
    client.retrieve(["who wrote Hamlet"], k=3)    # [[{"id", "title", "text", "contents", "score"}, ...]]

Connection errors, timeouts and 408/409/429/5xx answers are retried with exponential backoff and jitter
(`r3forge.retry`: the backend's policy, a server's Retry-After honoured); after
`max_retries` retries a `RetrieverUnavailableError` names the URL and the number of attempts. A 4xx answer
is the caller's mistake and raises `RetrievalError` with the server's message at once.
"""

from __future__ import annotations

import time
from typing import Any

import httpx

from r3forge.data.records import split_flashrag_contents
from r3forge.retrieval.base import Hit, RetrievalError, RetrieverUnavailableError, check_request
from r3forge.retry import Backoff, retry_after, retryable_status


class RetrieverClient:
    """A `Retriever` backed by a server; thread-safe (one pooled `httpx.Client`)."""

    def __init__(
        self,
        url: str,
        timeout: float = 30.0,
        max_retries: int = 5,
        backoff: float = 0.5,
        max_backoff: float = 10.0,
    ):
        if max_retries < 0:
            raise RetrievalError(f"max_retries must be >= 0, got {max_retries}")
        self.url = url.rstrip("/")
        self.max_retries = max_retries
        self._backoff = Backoff(max_retries, backoff, max_backoff)
        self._http = httpx.Client(base_url=self.url, timeout=timeout)

    def __enter__(self) -> RetrieverClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def health(self) -> dict[str, Any]:
        return self._request("GET", "/health")

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        """Top-k (passage_id, score) per query, best first."""
        return [[(d["id"], d["score"]) for d in row] for row in self.retrieve(queries, k)]

    def retrieve(self, queries: list[str], k: int) -> list[list[dict[str, Any]]]:
        """Top-k passages per query as {id, title, text, contents, score}, best first."""
        check_request(queries, k)
        if not queries:
            return []
        body = self._request(
            "POST", "/retrieve", {"queries": list(queries), "topk": k, "return_scores": True}
        )
        out = []
        for row in body["result"]:
            docs = []
            for item in row:
                doc = item["document"]
                title, text = split_flashrag_contents(doc["contents"])
                docs.append(
                    {
                        "id": str(doc["id"]),
                        "title": title,
                        "text": text,
                        "contents": doc["contents"],
                        "score": float(item["score"]),
                    }
                )
            out.append(docs)
        return out

    def get(self, ids: list[str]) -> list[dict[str, str]]:
        """Passages {id, title, text} by id (r3forge servers only: `POST /passages`)."""
        if not ids:
            return []
        return self._request("POST", "/passages", {"ids": list(ids)})["passages"]

    def _request(self, method: str, path: str, payload: dict[str, Any] | None = None) -> dict[str, Any]:
        last = ""
        for attempt in range(self.max_retries + 1):
            server_says = None
            try:
                response = self._http.request(method, path, json=payload)
            except httpx.TransportError as e:
                last = f"{type(e).__name__}: {e}"
            else:
                if response.status_code < 400:
                    return response.json()
                if not retryable_status(response.status_code):
                    raise RetrievalError(
                        f"{self.url}{path}: HTTP {response.status_code}: {_detail(response)}"
                    )
                last = f"HTTP {response.status_code}: {_detail(response)}"
                server_says = retry_after(response.headers)
            if attempt < self.max_retries:
                time.sleep(self._backoff.delay(attempt, server_says))
        attempts = self.max_retries + 1
        raise RetrieverUnavailableError(
            f"{self.url}{path}: no answer after {attempts} attempts ({self.max_retries} retries); last error: {last}",
            attempts=attempts,
        )


def _detail(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:500]
    return str(body.get("detail", body)) if isinstance(body, dict) else str(body)[:500]
