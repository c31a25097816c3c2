"""`r3forge serve retriever`: a saved index behind HTTP, compatible with Search-R1's retriever API.

    r3forge serve retriever --index indexes/wiki-bm25 --host 127.0.0.1 --port 8000

    POST /retrieve  {"queries": ["..."], "topk": 3, "return_scores": true}
        -> {"result": [[{"document": {"id": "hp3", "contents": "\\"Title\\"\\ntext"}, "score": 14.2}, ...], ...]}
        with "return_scores": false (Search-R1's default) each query's list holds the documents only.
    POST /passages  {"ids": ["hp3", ...]} -> {"passages": [{"id", "title", "text"}, ...]}  (r3forge extra)
    GET  /health    -> {"status": "ok", "kind": "bm25", "count": 14835, ...}

Invalid requests get a 4xx with a readable `detail`; a body over `max_body_bytes` or a query over
`max_query_chars` gets a 413 naming the limit, before any search (a body is refused on its Content-Length
before it is read). Searches run on one worker thread so the event loop stays free; requests that arrive
while a search runs are merged into the next search call (micro-batching by topk, `batcher.py`), and a
request whose client disconnects is dropped from the queue, so abandoned requests do not delay the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Iterator
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field, StrictBool, StrictInt, StrictStr
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from r3forge.config import parse_config
from r3forge.data.records import flashrag_contents
from r3forge.errors import ConfigError
from r3forge.retrieval import load_retriever
from r3forge.retrieval.base import RetrievalError, Retriever
from r3forge.retrieval.batcher import MicroBatcher, Result

logger = logging.getLogger(__name__)


KEEP_ALIVE_S = 75  # > client pool expiry (httpx: 5 s), so clients, not the server, retire idle connections


@dataclass
class ServeConfig:
    """`r3forge serve retriever` options."""

    index: str = field(metadata={"help": "Index folder written by `r3forge index build`."})
    host: str = field(default="127.0.0.1", metadata={"help": "Address to bind (loopback by default)."})
    port: int = field(default=8000, metadata={"help": "Port to bind (0 = any free port)."})
    default_topk: int = field(default=3, metadata={"help": "topk when a request omits it (Search-R1: 3)."})
    max_topk: int = field(default=100, metadata={"help": "Largest topk a request may ask for."})
    max_queries: int = field(default=1024, metadata={"help": "Most queries one request may carry."})
    max_batch: int = field(default=256, metadata={"help": "Most queries merged into one search call."})
    max_body_bytes: int = field(
        default=1 << 20,
        metadata={
            "help": "Largest request body in bytes (default 1 MiB); a larger one is answered 413 unread."
        },
    )
    max_query_chars: int = field(
        default=4096,
        metadata={"help": "Longest query in characters; a request with a longer one gets a 413."},
    )
    backend: str = field(default="auto", metadata={"help": "BM25 scoring backend: auto, numba or numpy."})
    encoder: str | None = field(
        default=None, metadata={"help": "Dense only: encoder to load instead of the manifest's."}
    )
    device: str | None = field(default=None, metadata={"help": "Dense only: encoder device (cpu, cuda)."})
    ef_search: int | None = field(default=None, metadata={"help": "Dense HNSW only: efSearch override."})
    log_level: str = field(default="info", metadata={"help": "uvicorn log level."})
    access_log: bool = field(default=False, metadata={"help": "Log every request (noisy under load)."})
    keep_alive_s: int = field(
        default=KEEP_ALIVE_S,
        metadata={
            "help": "Idle seconds before a keep-alive connection is closed (uvicorn's 5 s default "
            "races clients that reuse pooled connections under bursty rollout traffic)."
        },
    )

    def __post_init__(self) -> None:
        if self.default_topk > self.max_topk:
            raise ConfigError(
                f"default_topk ({self.default_topk}) is over max_topk ({self.max_topk}): every request "
                "without a topk would be refused; lower default_topk or raise max_topk"
            )


class RetrieveRequest(BaseModel):
    queries: list[StrictStr] = Field(min_length=1)
    topk: StrictInt | None = None
    return_scores: StrictBool = False


class PassagesRequest(BaseModel):
    ids: list[StrictStr] = Field(min_length=1)


class BodyLimit:
    """ASGI middleware: a request body over `max_bytes` is answered 413 and never reaches the app. A declared
    Content-Length over the limit is refused before the body is read, a chunked body as soon as it passes it
    (uvicorn discards the rest of the upload, so the client still reads the 413)."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(f"of {int(declared)} bytes", scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client left before its body arrived: nobody to answer
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.max_bytes:
                await self._refuse(f"of at least {size} bytes", scope, receive, send)
                return
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:  # the body once, then the server's own messages (the disconnect)
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    async def _refuse(self, size: str, scope: Scope, receive: Receive, send: Send) -> None:
        detail = f"request body {size} is over the limit max_body_bytes={self.max_bytes}"
        await JSONResponse({"detail": detail}, status_code=413)(scope, receive, send)


async def _disconnected(request: Request) -> None:
    """Return when the client disconnects (the body has been read: the next message is the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _unless_client_leaves(request: Request, work: Awaitable[Result]) -> Result | None:
    """`work`'s result, or None when the client disconnects first; `work` is then cancelled, which drops
    the request's queries not yet searched from the batcher's queue."""
    task = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        done, _ = await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
        if task not in done and gone.exception() is not None:
            return await task  # the connection could not be watched: answer as before
    finally:
        for pending in (task, gone):
            if not pending.done():
                pending.cancel()
    return task.result() if task in done else None


def _validation_message(exc: RequestValidationError) -> tuple[int, str]:
    errors = exc.errors()
    if any(e.get("type") == "json_invalid" for e in errors):
        return 400, "request body is not valid JSON"
    parts = [
        f"{'.'.join(str(p) for p in e.get('loc', ()) if p != 'body') or 'body'}: {e.get('msg')}"
        for e in errors
    ]
    return 422, "; ".join(parts)


def create_app(retriever: Retriever, config: ServeConfig, info: dict[str, Any] | None = None) -> FastAPI:
    """The FastAPI app serving `retriever` (any `Retriever`, e.g. a loaded BM25 or dense index)."""
    batcher = MicroBatcher(retriever, config.max_batch)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await batcher.start()
        yield
        await batcher.stop()

    app = FastAPI(title="r3forge retriever", lifespan=lifespan)
    app.add_middleware(BodyLimit, max_bytes=config.max_body_bytes)

    @app.exception_handler(RequestValidationError)
    async def on_invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        status, message = _validation_message(exc)
        return JSONResponse({"detail": message}, status_code=status)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", **(info or {}), "searches": batcher.counters.as_dict()}

    @app.post("/retrieve")
    async def retrieve(request: RetrieveRequest, http: Request) -> Response:
        k = config.default_topk if request.topk is None else request.topk
        if not 1 <= k <= config.max_topk:
            raise HTTPException(422, f"topk must be between 1 and {config.max_topk}, got {k}")
        if len(request.queries) > config.max_queries:
            raise HTTPException(
                413,
                f"{len(request.queries)} queries in one request; the limit is max_queries={config.max_queries}",
            )
        for i, query in enumerate(request.queries):
            if len(query) > config.max_query_chars:
                raise HTTPException(
                    413,
                    f"queries.{i}: {len(query)} characters; the limit is max_query_chars={config.max_query_chars}",
                )
        try:
            results = await _unless_client_leaves(http, batcher.search(request.queries, k))
        except RetrievalError as e:
            raise HTTPException(422, str(e)) from e
        except Exception as e:  # answered as a 500 (clients retry); the server keeps serving
            logger.exception("search failed for %d queries", len(request.queries))
            return JSONResponse({"detail": f"search failed: {type(e).__name__}: {e}"}, status_code=500)
        if results is None:
            return Response(status_code=499)  # "client closed request": nobody reads it
        out = []
        for row in results:
            docs = [{"id": p["id"], "contents": flashrag_contents(p["title"], p["text"])} for _, p in row]
            if request.return_scores:
                out.append([{"document": d, "score": hit[1]} for d, (hit, _) in zip(docs, row, strict=True)])
            else:
                out.append(docs)
        return JSONResponse({"result": out})

    @app.post("/passages")
    async def passages(request: PassagesRequest) -> JSONResponse:
        if len(request.ids) > config.max_queries * config.max_topk:
            raise HTTPException(413, f"{len(request.ids)} ids in one request is too many")
        try:
            found = await asyncio.get_running_loop().run_in_executor(None, retriever.get, request.ids)
        except KeyError as e:
            raise HTTPException(404, str(e.args[0]) if e.args else "unknown passage id") from e
        return JSONResponse({"passages": found})

    return app


def load_app(config: ServeConfig) -> FastAPI:
    """Load the index named by `config` and build its app."""
    retriever = load_retriever(
        config.index,
        backend=config.backend,
        encoder=config.encoder,
        device=config.device,
        ef_search=config.ef_search,
    )
    manifest = retriever.manifest
    # warm up now, not on the first request: the id map, numba's JIT (seconds), the encoder
    retriever.get(retriever.passages.ids([0]))
    retriever.search(["warm up"], 1)
    info = {
        "kind": manifest.kind,
        "count": manifest.count,
        "index": config.index,
        "encoder": manifest.encoder,
    }
    return create_app(retriever, config, info)


class RunningServer:
    """A uvicorn server on a background thread (tests, notebooks, in-process training jobs)."""

    def __init__(self, app: FastAPI, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning"):
        config = uvicorn.Config(
            app, host=host, port=port, log_level=log_level, access_log=False, timeout_keep_alive=KEEP_ALIVE_S
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="retriever-server", daemon=True)
        self.host = host
        self.port = port

    def start(self, timeout: float = 30.0) -> RunningServer:
        self.thread.start()
        for _ in range(int(timeout / 0.02)):
            if self.server.started:
                break
            if not self.thread.is_alive():
                raise RetrievalError(f"retriever server on {self.host}:{self.port} failed to start")
            time.sleep(0.02)
        else:
            raise RetrievalError(f"retriever server on {self.host}:{self.port} not up after {timeout}s")
        self.port = self.server.servers[0].sockets[0].getsockname()[1]
        return self

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)

    def __enter__(self) -> RunningServer:
        return self.start() if not self.server.started else self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def serve_in_thread(retriever: Retriever, config: ServeConfig | None = None) -> Iterator[RunningServer]:
    """Serve `retriever` on loopback (port 0 = a free port) for the duration of the block."""
    config = config or ServeConfig(index="(in-process)", port=0)
    with RunningServer(create_app(retriever, config), config.host, config.port) as server:
        yield server


def serve_main(argv: list[str] | None = None) -> int:
    """`r3forge serve retriever --index DIR [--host H] [--port N] ...` (argv after `serve retriever`)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    (config,) = parse_config((ServeConfig,), argv, prog="r3forge serve retriever")
    app = load_app(config)
    print(f"[r3forge] serving {config.index} on http://{config.host}:{config.port}", file=sys.stderr)
    uvicorn.run(
        app,
        host=config.host,
        port=config.port,
        log_level=config.log_level,
        access_log=config.access_log,
        timeout_keep_alive=config.keep_alive_s,
    )
    return 0


if __name__ == "__main__":
    sys.exit(serve_main())
