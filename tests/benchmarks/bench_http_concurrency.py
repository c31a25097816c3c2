"""Throughput of the HTTP backend with bounded concurrency vs a sequential loop of single requests.

Same vLLM server, same 64 greedy chat prompts. Starts a server of the embedded model unless `--base_url`
points at one. Target: >= 6x.

    .venv/bin/python tests/benchmarks/bench_http_concurrency.py [--concurrency 32] [--base_url URL --model NAME]
        --beside nothing

Run it alone: it times. The result file (`--out`, default
`tests/benchmarks/results/http_concurrency/<cpu kind>.json`, one per CPU kind, result_file.cpu_kind) holds the
figures, the table `throughput` and the provenance (result_file.py); `--beside` says what shared the cores.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from render_tables import markdown_table
from result_file import NOT_RECORDED, cpu_kind, write_result

from r3forge.backends import GenerationRequest, OpenAIHTTPBackend, OpenAIHTTPConfig
from r3forge.backends.vllm_server import ServeLLMConfig, VLLMServer

RESULTS = Path(__file__).parent / "results" / "http_concurrency"


def prompts(n: int, max_tokens: int) -> list[GenerationRequest]:
    return [
        GenerationRequest(
            messages=[{"role": "user", "content": f"Write one sentence about the number {i}."}],
            max_tokens=max_tokens,
            top_logprobs=5,
        )
        for i in range(n)
    ]


def run(base_url: str, model: str, args: argparse.Namespace) -> dict:
    """Time both arms on the same prompts; the figures of the result file."""
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
    return {"model": model, "prompts": len(requests), "max_tokens": args.max_tokens, "generated_tokens": tokens,
            "identical_outputs": same, "concurrency": args.concurrency, "sequential_s": t_seq,
            "concurrent_s": t_con, "speedup": t_seq / t_con}  # fmt: skip


def throughput_table(figures: dict) -> dict:
    """Seconds and tokens per second of both arms, as speed ratios to the sequential loop.

    >>> f = {"prompts": 64, "generated_tokens": 2048, "identical_outputs": 64, "concurrency": 32,
    ...      "sequential_s": 40.123, "concurrent_s": 8.0, "speedup": 5.015}
    >>> throughput_table(f)["rows"]  # doctest: +NORMALIZE_WHITESPACE
    [['sequential (one request at a time)', '40.12', '51.0', '1.0x', ''],
     ['concurrent (max_concurrency=32)', '8.00', '256.0', '5.0x', '64/64']]
    """
    tokens = figures["generated_tokens"]
    seq, con = figures["sequential_s"], figures["concurrent_s"]
    rows = [
        ["sequential (one request at a time)", f"{seq:.2f}", f"{tokens / seq:.1f}", "1.0x", ""],
        [f"concurrent (max_concurrency={figures['concurrency']})", f"{con:.2f}", f"{tokens / con:.1f}",
         f"{figures['speedup']:.1f}x", f"{figures['identical_outputs']}/{figures['prompts']}"],
    ]  # fmt: skip
    columns = [f"{figures['prompts']} prompts, {tokens} generated tokens", "seconds", "tok/s", "vs sequential",
               "identical greedy outputs"]  # fmt: skip
    return {"columns": columns, "align": "lrrrr", "rows": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base_url", default="", help="Existing server's /v1 root; empty: start one.")
    parser.add_argument("--model", default="smollm2-135m-instruct", help="Model to serve / served name.")
    parser.add_argument("--num_prompts", type=int, default=64)
    parser.add_argument("--max_tokens", type=int, default=32)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--beside", default=NOT_RECORDED, help="what shared the cores ('nothing' when alone)")
    parser.add_argument(
        "--out", default=None, help="result file (default: results/http_concurrency/<cpu kind>.json)"
    )
    args = parser.parse_args(argv)
    with contextlib.ExitStack() as stack:
        base_url, model = args.base_url, args.model
        if not base_url:
            config = ServeLLMConfig(model=args.model, port=0, max_model_len=1024, cpu_kvcache_gib=2)
            server = stack.enter_context(VLLMServer(config))
            base_url, model = server.base_url, server.model_name
            print(f"server: {base_url} (log {server.log_path})")
        figures = run(base_url, model, args)
    figures["server"] = "given (--base_url)" if args.base_url else "started by the script"
    tables = {"throughput": throughput_table(figures)}
    print("\n".join(markdown_table(tables["throughput"])))
    out = Path(args.out) if args.out else RESULTS / f"{cpu_kind()}.json"
    write_result(out, figures, tables, beside=args.beside)
    print(f"result: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
