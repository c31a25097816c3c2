"""Teacher-annotation throughput: r3forge's pipeline vs the reference implementation's sequential loop, and
vs vLLM's offline batch, on the same (question, paragraph) pairs, the same greedy prompts, the same model.

1. sequential: one synchronous OpenAI chat call per pair, then parse (the reference implementation's style),
   against a real `vllm serve` of the embedded model on loopback;
2. pipeline: `run_step` (batched, concurrent HTTP, parse, fsync'd append-only store) against that server;
3. offline: `vllm.LLM.chat` over all pairs at once in this process (after the server has stopped), the
   fastest way to run one fixed batch, then the same parse. It runs with vLLM's defaults (torch.compile),
   while CPU servers run eager (`r3forge serve llm`): a slightly stronger baseline than the server.

Targets: pipeline >= 6x sequential; pipeline >= 0.8x offline. Pairs per second are reported for all three.
Measured on 2 CPU cores (2026-11-30, 200 pairs): sequential 0.36 pairs/s, pipeline 1.09, offline 1.20:
3.0x and 0.91x. On CPU vLLM keeps one core for its frontend and the engine is prefill-bound on the other,
so batching gains ~3x there, not the >= 6x of a GPU server with idle parallel capacity.

On a GPU build of vLLM (`pip install -e '.[gpu]'`) the same script runs on CUDA: the server and the offline
engine take vLLM's `auto` dtype (bf16 on recent GPUs) instead of float32, and `--gpu_memory_utilization`
bounds each of them (the server's `--gpu-memory-utilization`), so they can share the GPU (`make test-gpu`).

    .venv/bin/python tests/benchmarks/bench_annotate_throughput.py [--pairs 200] [--batch_size 32 --concurrency 4]
        [--qa_path data/synth_world/hf/questions] [--gpu_memory_utilization 0.9] --beside nothing

Run it alone: it times. The result file (`--out`, default
`tests/benchmarks/results/annotate_throughput/<cpu kind>.json`, one per CPU kind, result_file.cpu_kind, also
on a GPU, whose name is in the figures) holds the figures, the table `throughput` and the provenance
(result_file.py); `--beside` says what shared the cores.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import openai
import torch
from render_tables import markdown_table
from result_file import NOT_RECORDED, cpu_kind, write_result
from transformers import AutoTokenizer

from r3forge.annotate.verbal import VerbalAnnotationStep
from r3forge.backends import OpenAIHTTPBackend, OpenAIHTTPConfig
from r3forge.backends.base import Choice, GenerationResult, Usage
from r3forge.backends.vllm_server import ServeLLMConfig, VLLMServer, is_cpu_build
from r3forge.data.loaders import load_qa
from r3forge.models import prepare_model
from r3forge.retrieval.pairs import qa_items
from r3forge.synth import EngineConfig, Rejected, run_step

REPO = Path(__file__).resolve().parents[2]
RESULTS = Path(__file__).parent / "results" / "annotate_throughput"
MODEL = "smollm2-135m-instruct"
SEQUENTIAL_TARGET, OFFLINE_TARGET = 6, 0.8  # the pipeline's speed over each baseline (module docstring)


def pairs(qa_path: Path, n: int) -> list[dict]:
    items = list(qa_items(load_qa(qa_path), max_questions=(n + 9) // 10, max_docs=10))[:n]
    if len(items) < n:
        sys.exit(f"{qa_path}: only {len(items)} pairs")
    return items


def sequential(base_url: str, step: VerbalAnnotationStep, items: list[dict]) -> tuple[float, int]:
    """The reference style: a synchronous client, one request at a time, parse each answer."""
    client = openai.OpenAI(base_url=base_url, api_key="EMPTY")
    accepted, start = 0, time.perf_counter()
    for item in items:
        request = step.prompt(item)
        response = client.chat.completions.create(
            model=MODEL,
            messages=list(request.messages),
            temperature=request.temperature,
            max_tokens=request.max_tokens,
            logprobs=True,
            top_logprobs=request.top_logprobs,
        )
        c = response.choices[0]
        tokens = c.logprobs.content or []
        choice = Choice(
            c.message.content or "",
            [],
            [t.logprob for t in tokens],
            [{x.token: x.logprob for x in t.top_logprobs} for t in tokens],
            c.finish_reason,
        )
        accepted += not isinstance(step.parse(item, GenerationResult([choice], Usage())), Rejected)
    return time.perf_counter() - start, accepted


def pipeline(base_url: str, step: VerbalAnnotationStep, items: list[dict], args) -> tuple[float, int]:
    backend = OpenAIHTTPBackend(OpenAIHTTPConfig(base_url=base_url, model=MODEL, max_concurrency=64))
    with tempfile.TemporaryDirectory() as out:
        config = EngineConfig(output_dir=out, model=MODEL, batch_size=args.batch_size,
                              concurrency=args.concurrency, progress=False, export=False)  # fmt: skip
        start = time.perf_counter()
        summary = run_step(step, items, backend, config)
        return time.perf_counter() - start, summary.accepted


def offline(
    model_path: Path, step: VerbalAnnotationStep, items: list[dict], gpu_memory_utilization: float
) -> tuple[float, int]:
    from vllm import LLM, SamplingParams

    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    # CPU: float32 (the CPU servers' dtype); GPU: vLLM's auto dtype (as the server's), in a bounded share
    device = {"dtype": "float32"} if is_cpu_build() else {"gpu_memory_utilization": gpu_memory_utilization}
    llm = LLM(model=str(model_path), max_model_len=2048, max_logprobs=20, generation_config="vllm",
              logprobs_mode="raw_logprobs", **device)  # fmt: skip
    requests = [step.prompt(item) for item in items]
    params = SamplingParams(
        temperature=0.0, max_tokens=requests[0].max_tokens, logprobs=requests[0].top_logprobs
    )
    llm.chat([list(r.messages) for r in requests[:4]], params, use_tqdm=False)  # warm-up
    start = time.perf_counter()
    outputs = llm.chat([list(r.messages) for r in requests], params, use_tqdm=False)
    accepted = 0
    for item, out in zip(items, outputs, strict=True):
        o = out.outputs[0]
        lps = o.logprobs or []
        choice = Choice(
            o.text,
            list(o.token_ids),
            [d[t].logprob for d, t in zip(lps, o.token_ids, strict=True)],
            [{t: x.logprob for t, x in d.items()} for d in lps],
            "length" if o.finish_reason == "length" else "stop",
        )
        accepted += not isinstance(step.parse(item, GenerationResult([choice], Usage())), Rejected)
    elapsed = time.perf_counter() - start
    engine = getattr(llm, "llm_engine", None)
    shutdown = getattr(getattr(engine, "engine_core", None), "shutdown", None)
    if shutdown is not None:
        shutdown()
    return elapsed, accepted


def throughput_table(figures: dict) -> dict:
    """Seconds, pairs/s and accepted pairs of the three runs; the pipeline's speed as a ratio to each baseline.

    >>> f = {"pairs": 200, "device": "2 CPUs", "batch_size": 32, "concurrency": 4, "sequential_s": 555.04,
    ...      "pipeline_s": 183.5, "offline_s": 166.7, "pipeline_vs_sequential": 3.0247,
    ...      "pipeline_vs_offline": 0.9084, "accepted": {"sequential": 190, "pipeline": 191, "offline": 190}}
    >>> throughput_table(f)["rows"]  # doctest: +NORMALIZE_WHITESPACE
    [['sequential', '555.0', '0.36', '190', '3.02x', '>= 6x'],
     ['pipeline (batch_size=32, concurrency=4)', '183.5', '1.09', '191', '', ''],
     ['offline', '166.7', '1.20', '190', '0.91x', '>= 0.8x']]
    """
    n, accepted = figures["pairs"], figures["accepted"]
    ratio = {"sequential": figures["pipeline_vs_sequential"], "offline": figures["pipeline_vs_offline"]}
    target = {"sequential": SEQUENTIAL_TARGET, "offline": OFFLINE_TARGET}
    pipeline = f"pipeline (batch_size={figures['batch_size']}, concurrency={figures['concurrency']})"
    rows = []
    for name, label in (("sequential", "sequential"), ("pipeline", pipeline), ("offline", "offline")):
        t = figures[f"{name}_s"]
        rows.append([label, f"{t:.1f}", f"{n / t:.2f}", str(accepted[name]),
                     f"{ratio[name]:.2f}x" if name in ratio else "",
                     f">= {target[name]:g}x" if name in target else ""])  # fmt: skip
    columns = [
        f"{n} pairs, {figures['device']}",
        "seconds",
        "pairs/s",
        "accepted",
        "pipeline vs this",
        "target",
    ]
    return {"columns": columns, "align": "lrrrrl", "rows": rows}


def main(argv: list[str] | None = None) -> dict:
    """Run the three arms, print the table, write the result file; return its figures (the seconds, the two
    ratios, the settings)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=200)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--max_tokens", type=int, default=96)
    parser.add_argument(
        "--qa_path", default=str(REPO.parent / "shared/data/hotpotqa/rpt_distractor_dev_sample_dev.jsonl")
    )
    parser.add_argument(
        "--gpu_memory_utilization", type=float, default=0.9, help="GPU builds: share of GPU memory per engine"
    )
    parser.add_argument("--beside", default=NOT_RECORDED, help="what shared the cores ('nothing' when alone)")
    parser.add_argument(
        "--out", default=None, help="result file (default: results/annotate_throughput/<cpu kind>.json)"
    )
    args = parser.parse_args(argv)
    model_path = prepare_model(MODEL)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    step = VerbalAnnotationStep(
        max_tokens=args.max_tokens, top_logprobs=5, few_shot=True, tokenizer=tokenizer
    )
    items = pairs(Path(args.qa_path), args.pairs)
    serve = ServeLLMConfig(model=str(model_path), served_model_name=MODEL, port=0, max_model_len=2048)
    gpu_args = [] if is_cpu_build() else ["--gpu-memory-utilization", str(args.gpu_memory_utilization)]
    with VLLMServer(serve, gpu_args) as server:
        OpenAIHTTPBackend(OpenAIHTTPConfig(base_url=server.base_url, model=MODEL)).generate(
            [step.prompt(i) for i in items[:4]]
        )  # warm-up
        t_seq, a_seq = sequential(server.base_url, step, items)
        t_pipe, a_pipe = pipeline(server.base_url, step, items, args)
    t_off, a_off = offline(model_path, step, items, args.gpu_memory_utilization)
    n = len(items)
    device = f"{os.cpu_count()} CPUs" if is_cpu_build() else torch.cuda.get_device_name()
    print(f"\n{n} (question, paragraph) pairs of {args.qa_path}, {MODEL}, greedy, "
          f"max_tokens={args.max_tokens}, {device}")  # fmt: skip
    figures = {"pairs": n, "sequential_s": t_seq, "pipeline_s": t_pipe, "offline_s": t_off,
               "pipeline_vs_sequential": t_seq / t_pipe, "pipeline_vs_offline": t_off / t_pipe,
               "accepted": {"sequential": a_seq, "pipeline": a_pipe, "offline": a_off}, "model": MODEL,
               "qa_path": args.qa_path, "max_tokens": args.max_tokens, "batch_size": args.batch_size,
               "concurrency": args.concurrency, "device": device}  # fmt: skip
    tables = {"throughput": throughput_table(figures)}
    print("\n".join(markdown_table(tables["throughput"])))
    out = Path(args.out) if args.out else RESULTS / f"{cpu_kind()}.json"
    write_result(out, figures, tables, beside=args.beside)
    print(f"result: {out}")
    return figures


if __name__ == "__main__":
    main()
