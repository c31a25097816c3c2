"""Resume overhead of the synthesis engine: time to skip 10,000 cached records.

    .venv/bin/python tests/benchmarks/bench_resume.py [--records 10000] [--output_chars 2000] --beside nothing

Fills a store with `--records` records from an instant stand-in teacher (each with `--output_chars`
characters of answer and as many of reasoning, about the size of a GPT-OSS annotation), then times a rerun
of `run_step` over the same items, where every item is cached: the store scan (read + JSON-parse every line,
repair check, done-key set) plus the plan pass (key(), prompt() and the sha256 cache key of every item).
Reported as a total, per record, and as ratios to two baselines: reading the record files' bytes once, and
reading + `json.loads` of every line.

Run it alone: it times. The result file (`--out`, default `tests/benchmarks/results/resume/<cpu kind>.json`,
one per CPU kind, result_file.cpu_kind) holds the figures, the tables `fill` and `resume`, and the provenance
(result_file.py); `--beside` says what shared the cores.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import statistics
import time
from pathlib import Path

from render_tables import markdown_table
from result_file import NOT_RECORDED, cpu_kind, write_result

from r3forge.backends.base import Choice, GenerationRequest, GenerationResult, Usage
from r3forge.synth import EngineConfig, run_step
from r3forge.synth.store import record_files, scan

RESULTS = Path(__file__).parent / "results" / "resume"


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


def measure(args: argparse.Namespace) -> dict:
    """Fill the store, then time the two baselines and the resume; the figures of the result file."""
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
    fill = {"records": first.processed, "bytes": size, "files": len(files), "seconds": t_fill,
            "records_per_s": first.processed / t_fill, "batch_size": args.batch_size}  # fmt: skip

    def read_bytes() -> int:
        return sum(len(p.read_bytes()) for p in files)

    t_read, _ = timed(read_bytes, args.repeats)
    t_scan, scanned = timed(lambda: scan(out), args.repeats)
    assert len(scanned.done) == args.records
    t_resume, summary = timed(lambda: run_step(Step(), items, teacher, config), args.repeats)
    assert summary.cached == args.records and summary.processed == 0
    n = args.records
    return {"records": n, "output_chars": args.output_chars, "repeats": args.repeats, "fill": fill,
            "read_s": t_read, "scan_s": t_scan, "resume_s": t_resume, "resume_us_per_record": t_resume / n * 1e6,
            "resume_vs_read": t_resume / t_read, "resume_vs_scan": t_resume / t_scan,
            "prompt_hash_s": t_resume - t_scan}  # fmt: skip


def fill_table(figures: dict) -> dict:
    """Filling the store from the instant teacher (no baseline: it sets up the resume).

    >>> fill_table({"fill": {"records": 10000, "bytes": 41234567, "files": 1, "seconds": 3.456,
    ...                      "records_per_s": 2893.5, "batch_size": 64}})["rows"]
    [['one fsync per batch of 64', '10000', '41.2', '1', '3.46', '2,894']]
    """
    f = figures["fill"]
    row = [f"one fsync per batch of {f['batch_size']}", str(f["records"]), f"{f['bytes'] / 1e6:.1f}",
           str(f["files"]), f"{f['seconds']:.2f}", f"{f['records_per_s']:,.0f}"]  # fmt: skip
    columns = ["fill (instant teacher)", "records", "MB", "files", "seconds", "records/s"]
    return {"columns": columns, "align": "lrrrrr", "rows": [row]}


def resume_table(figures: dict) -> dict:
    """Both baselines and the resume: milliseconds, microseconds per record, ratios to each baseline.

    >>> t = resume_table({"records": 10000, "repeats": 5, "read_s": 0.0123, "scan_s": 0.4, "resume_s": 0.55,
    ...                   "prompt_hash_s": 0.15})
    >>> t["columns"][0], t["rows"][2]
    ('medians of 5', ['resume: skip 10,000 cached records', '550.0', '55.0', '44.7x', '1.38x'])
    """
    n, read, scan_s = figures["records"], figures["read_s"], figures["scan_s"]
    rows = [
        ("baseline: read the files once", read),
        ("baseline: read + json.loads every line (store scan, done-key set)", scan_s),
        (f"resume: skip {n:,} cached records", figures["resume_s"]),
    ]
    cells = [[name, f"{t * 1e3:.1f}", f"{t / n * 1e6:.1f}", f"{t / read:.1f}x", f"{t / scan_s:.2f}x"]
             for name, t in rows]  # fmt: skip
    extra = figures["prompt_hash_s"]
    cells.append(["of which prompt + hash every item (resume - scan)", f"{extra * 1e3:.1f}",
                  f"{extra / n * 1e6:.1f}", "", ""])  # fmt: skip
    columns = [f"medians of {figures['repeats']}", "ms", "us/record", "vs read once", "vs read + parse"]
    return {"columns": columns, "align": "lrrrr", "rows": cells}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--output_chars", type=int, default=2000, help="answer (and reasoning) length")
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--work_dir", default="/tmp/r3forge-bench-resume")
    parser.add_argument("--beside", default=NOT_RECORDED, help="what shared the cores ('nothing' when alone)")
    parser.add_argument("--out", default=None, help="result file (default: results/resume/<cpu kind>.json)")
    args = parser.parse_args()

    figures = measure(args)
    tables = {"fill": fill_table(figures), "resume": resume_table(figures)}
    for table in tables.values():
        print("\n" + "\n".join(markdown_table(table)))
    out = Path(args.out) if args.out else RESULTS / f"{cpu_kind()}.json"
    write_result(out, figures, tables, beside=args.beside)
    print(f"result: {out}")


if __name__ == "__main__":
    main()
