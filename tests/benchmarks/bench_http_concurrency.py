"""Throughput of the HTTP backend with bounded concurrency vs a sequential loop of single requests.

Same vLLM server, same 64 greedy chat prompts. Starts a server of the embedded model unless `--base_url`
points at one. Target: >= 6x.

    .venv/bin/python tests/benchmarks/bench_http_concurrency.py [--concurrency 32] [--base_url URL --model NAME]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from r3forge.backends import GenerationRequest, OpenAIHTTPBackend, OpenAIHTTPConfig
from r3forge.backends.vllm_server import ServeLLMConfig, VLLMServer


def prompts(n: int, max_tokens: int) -> list[GenerationRequest]:
    return [
        GenerationRequest(
            messages=[{"role": "user", "content": f"Write one sentence about the number {i}."}],
            max_tokens=max_tokens,
            top_logprobs=5,
        )
        for i in range(n)
    ]


def run(base_url: str, model: str, args: argparse.Namespace) -> float:
    requests = prompts(args.num_prompts, args.max_tokens)
    sequential = OpenAIHTTPBackend(OpenAIHTTPConfig(base_url=base_url, model=model))
    sequential.generate(requests[:2])  # warm-up
    start = time.perf_counter()
    one_by_one = [sequential.generate([r])[0] for r in requests]
    t_seq = time.perf_counter() - start

    bounded = OpenAIHTTPBackend(
        OpenAIHTTPConfig(base_url=base_url, model=model, max_concurrency=args.concurrency)
    )
    start = time.perf_counter()
    together = bounded.generate(requests)
    t_con = time.perf_counter() - start

    tokens = sum(r.usage.completion_tokens for r in together)
    same = sum(
        a.choices[0].token_ids == b.choices[0].token_ids for a, b in zip(one_by_one, together, strict=True)
    )
    print(
        f"{len(requests)} prompts, {tokens} generated tokens, {same}/{len(requests)} identical greedy outputs"
    )
    print(f"sequential: {t_seq:7.2f} s ({tokens / t_seq:7.1f} tok/s)")
    print(f"concurrent: {t_con:7.2f} s ({tokens / t_con:7.1f} tok/s, max_concurrency={args.concurrency})")
    ratio = t_seq / t_con
    print(f"speedup: {ratio:.1f}x")
    return ratio


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base_url", default="", help="Existing server's /v1 root; empty: start one.")
    parser.add_argument("--model", default="smollm2-135m-instruct", help="Model to serve / served name.")
    parser.add_argument("--num_prompts", type=int, default=64)
    parser.add_argument("--max_tokens", type=int, default=32)
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args(argv)
    with contextlib.ExitStack() as stack:
        base_url, model = args.base_url, args.model
        if not base_url:
            config = ServeLLMConfig(model=args.model, port=0, max_model_len=1024, cpu_kvcache_gib=2)
            server = stack.enter_context(VLLMServer(config))
            base_url, model = server.base_url, server.model_name
            print(f"server: {base_url} (log {server.log_path})")
        run(base_url, model, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
