"""Resume overhead of the synthesis engine: time to skip 10,000 cached records.

    .venv/bin/python tests/benchmarks/bench_resume.py [--records 10000] [--output_chars 2000]

Fills a store with `--records` records from an instant stand-in teacher (each with `--output_chars`
characters of answer and as many of reasoning, about the size of a GPT-OSS annotation), then times a rerun
of `run_step` over the same items, where every item is cached: the store scan (read + JSON-parse every line,
repair check, done-key set) plus the plan pass (key(), prompt() and the sha256 cache key of every item).
Reported as a total, per record, and as ratios to two baselines: reading the record files' bytes once, and
reading + `json.loads` of every line.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import statistics
import time
from pathlib import Path

from r3forge.backends.base import Choice, GenerationRequest, GenerationResult, Usage
from r3forge.synth import EngineConfig, run_step
from r3forge.synth.store import record_files, scan


class Step:
    name, version = "bench_answer", "v1"

    def key(self, item: dict) -> dict:
        return {"id": item["id"]}

    def prompt(self, item: dict) -> GenerationRequest:
        return GenerationRequest(messages=[{"role": "user", "content": item["question"]}], max_tokens=512)

    def parse(self, item: dict, result: GenerationResult) -> dict:
        return {"answer": result.choices[0].text, "question": item["question"]}


class InstantTeacher:
    name, model_id = "instant", "instant-teacher"

    def __init__(self, chars: int):
        self.chars = chars

    def generate(self, requests):
        out = []
        for r in requests:
            seed = hashlib.sha256(r.messages[0]["content"].encode()).hexdigest()
            text = (seed * (self.chars // 64 + 1))[: self.chars]
            choice = Choice(text, [], [], [], "stop", reasoning=text[::-1])
            out.append(GenerationResult([choice], Usage(20, self.chars // 4)))
        return out

    def close(self) -> None:
        pass


def timed(fn, repeats: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--output_chars", type=int, default=2000, help="answer (and reasoning) length")
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--work_dir", default="/tmp/r3forge-bench-resume")
    args = parser.parse_args()

    out = Path(args.work_dir)
    shutil.rmtree(out, ignore_errors=True)
    items = [
        {"id": f"q{i:06d}", "question": f"Which entity is number {i} in the registry?"}
        for i in range(args.records)
    ]
    config = EngineConfig(output_dir=str(out), batch_size=args.batch_size, export=False, progress=False)
    teacher = InstantTeacher(args.output_chars)

    start = time.perf_counter()
    first = run_step(Step(), items, teacher, config)
    t_fill = time.perf_counter() - start
    files = record_files(out, "accepted") + record_files(out, "rejected")
    size = sum(p.stat().st_size for p in files)
    print(
        f"filled {first.processed} records ({size / 1e6:.1f} MB, {len(files)} file) in {t_fill:.2f}s: "
        f"{first.processed / t_fill:,.0f} records/s with one fsync per batch of {args.batch_size}"
    )

    def read_bytes() -> int:
        return sum(len(p.read_bytes()) for p in files)

    t_read, _ = timed(read_bytes, args.repeats)
    t_scan, scanned = timed(lambda: scan(out), args.repeats)
    assert len(scanned.done) == args.records
    t_resume, summary = timed(lambda: run_step(Step(), items, teacher, config), args.repeats)
    assert summary.cached == args.records and summary.processed == 0
    n = args.records
    print(f"baseline: read the files once            {t_read * 1e3:8.1f} ms")
    print(f"baseline: read + json.loads every line    {t_scan * 1e3:8.1f} ms  (store scan, done-key set)")
    print(
        f"resume: skip {n:,} cached records          {t_resume * 1e3:8.1f} ms  = {t_resume / n * 1e6:.1f} us/record, "
        f"{t_resume / t_read:.1f}x reading the file once, {t_resume / t_scan:.2f}x read + parse"
    )
    print(
        f"(medians of {args.repeats}; the rerun also prompts and hashes every item: {t_resume - t_scan:.3f}s)"
    )


if __name__ == "__main__":
    main()
