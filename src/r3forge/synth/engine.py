"""The synthesis engine: run a `SynthesisStep` (a `prompt()` + `parse()` pair) over items with a teacher.

    summary = run_step(step, items, backend, EngineConfig(output_dir="runs/synth/verbal"))
    ds = load_accepted("runs/synth/verbal")

Items are prompted in batches of `batch_size` and sent to the backend (`concurrency` batches in flight);
each batch's records are appended to the store and fsync'd as soon as it comes back (see `store.py`:
`kill -9` at any moment, rerun, and nothing is lost or duplicated). Parse failures go to the rejected file
with the step's reason code, never to the accepted one; an item whose request the backend gave up on (a
bad response, a 5xx, a timeout) goes to the failed file, and a rerun tries it again (`faults.py`).
`--shard i/N` splits one job across nodes by a stable hash of each item's key; `merge_shards` (`r3forge
synth merge`) combines the shard folders, writes Parquet and a dataset card, and can push to the Hub. A dry
run prompts every pending item and prints request and prompt-token counts without generating. The command
line is in `cli.py`.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from tqdm.auto import tqdm

from r3forge.errors import ConfigError, PartialFailure, RequestFailed
from r3forge.identity import backend_model_id
from r3forge.synth import faults
from r3forge.synth.export import export_dataset
from r3forge.synth.store import (
    MANIFEST,
    ShardSpec,
    ShardStore,
    SynthError,
    cache_key,
    check_identity,
    read_manifest,
    sampling_params,
    scan,
)

if TYPE_CHECKING:
    from r3forge.backends.base import GenerationBackend, GenerationRequest

POLL_S = 0.25  # while batches are in flight, the backend's fault counts are saved this often
# record fields the engine writes; a parsed output may not use them (they become Dataset columns too)
RESERVED = frozenset(
    {"key", "input", "step", "version", "model", "sampling", "raw", "reasoning", "finish_reasons"}
    | {"prompt_tokens", "completion_tokens", "latency_s", "shard", "created", "output", "reason", "detail"}
)


@dataclass(frozen=True)
class Rejected:
    """What `parse` returns for an unusable output: a short reason code (counted) and free-form detail."""

    reason: str
    detail: str = ""


class SynthesisStep(Protocol):
    """A synthesis step. `prompt` returns one request or a list; `parse` then gets one result or a list."""

    name: str
    version: str  # the prompt version: bump it whenever `prompt` changes, or cached records are reused

    def key(self, item: dict) -> dict: ...  # the JSON-serializable input fields that identify an item

    def prompt(self, item: dict) -> GenerationRequest | list[GenerationRequest]: ...

    def parse(self, item: dict, result: Any) -> dict | Rejected: ...


@dataclass
class EngineConfig:
    output_dir: str = field(metadata={"help": "Output folder (one per concurrently running job/shard)."})
    model: str = field(
        default="", metadata={"help": "Teacher model id for records and the cache key; empty: the backend's."}
    )
    batch_size: int = field(
        default=16, metadata={"help": "Items per backend call (results fsync'd per call)."}
    )
    concurrency: int = field(default=1, metadata={"help": "Backend calls in flight at once (HTTP: 2-4)."})
    shard: str = field(
        default="0/1", metadata={"help": "'i/N': process only shard i of N (stable key hash)."}
    )
    dry_run: bool = field(
        default=False, metadata={"help": "Print request and prompt-token counts; no generation."}
    )
    max_items: int | None = field(default=None, metadata={"help": "Use only the first N input items."})
    resume: bool = field(
        default=True, metadata={"help": "Skip cached items; false: refuse a non-empty folder."}
    )
    export: bool = field(
        default=True, metadata={"help": "After an unsharded run, write Parquet + dataset card (README.md)."}
    )
    progress: bool = field(default=True, metadata={"help": "Show a live progress bar (stderr)."})
    on_parse_error: Literal["raise", "reject"] = field(
        default="raise", metadata={"help": "An exception in parse(): stop, or reject as 'parse_error'."}
    )
    tokenizer: str = field(
        default="",
        metadata={"help": "Dry run token counts: tokenizer (embedded name, folder, Hub id).", "model": ()},
    )

    def __post_init__(self) -> None:
        ShardSpec.parse(self.shard)
        if self.batch_size < 1 or self.concurrency < 1:
            raise ConfigError(f"EngineConfig: batch_size and concurrency must be >= 1, got {self}")


@dataclass
class RunSummary:
    """Counts of one `run_step` call (the folder's totals are in `manifest.json`)."""

    output_dir: str
    shard: str
    seen: int = 0  # input items read (after max_items)
    out_of_shard: int = 0
    cached: int = 0  # skipped: already in the store
    duplicate_inputs: int = 0  # skipped: same cache key as an earlier input item
    pending: int = 0
    processed: int = 0
    accepted: int = 0
    rejected: int = 0
    reject_reasons: dict[str, int] = field(default_factory=dict)
    failed: int = 0  # items whose requests failed after the backend's retries (a rerun retries them)
    failure_reasons: dict[str, int] = field(default_factory=dict)
    faults: dict[str, Any] = field(default_factory=dict)  # the backend's fault counts during this run
    requests: int = 0
    prompt_tokens: int | None = 0
    completion_tokens: int = 0
    max_completion_tokens: int = 0  # dry run: sum of max_tokens x n over pending requests
    elapsed_s: float = 0.0
    dry_run: bool = False

    def line(self) -> str:
        head = f"synth shard {self.shard}: {self.seen} items, {self.cached} cached, {self.pending} pending"
        if self.dry_run:
            tokens = (
                "n/a (no tokenizer: pass --tokenizer)" if self.prompt_tokens is None else self.prompt_tokens
            )
            return (
                f"{head}; dry run: {self.requests} requests, {tokens} prompt tokens, "
                f"<= {self.max_completion_tokens} completion tokens"
            )
        rate = self.rejected / self.processed if self.processed else 0.0
        failed = faults.fault_text(self.failed, self.failure_reasons, self.faults)
        return (
            f"{head}; {self.processed} processed ({self.accepted} accepted, {self.rejected} rejected "
            f"{rate:.1%} {self.reject_reasons}{failed}) in {self.elapsed_s:.1f}s -> {self.output_dir}"
        )


@dataclass
class _Plan:
    pending: list[tuple[Any, str]]  # (item, or its index when items is indexable; cache key)
    indexable: bool


def _requests(step: SynthesisStep, item: dict) -> tuple[list, bool]:
    out = step.prompt(item)
    return (list(out), True) if isinstance(out, list | tuple) else ([out], False)


def _plan(
    step: SynthesisStep,
    items: Iterable[dict],
    model: str,
    config: EngineConfig,
    done: set[str],
    summary: RunSummary,
    on_pending: Callable[[list], None] | None,
) -> _Plan:
    """Pass 1 over the items: shard filter, cache keys, skip what is done. Keeps indices when it can."""
    shard = ShardSpec.parse(config.shard)
    indexable = hasattr(items, "__getitem__") and hasattr(items, "__len__") and not isinstance(items, dict)
    pending, queued = [], set()
    for index, item in enumerate(items):
        if config.max_items is not None and index >= config.max_items:
            break
        summary.seen += 1
        item_key = step.key(item)
        try:
            owned = shard.owns(item_key)
        except (TypeError, ValueError) as e:
            raise SynthError(
                f"step {step.name!r}: key() of input item {index} is not JSON data: {e}"
            ) from None
        if not owned:
            summary.out_of_shard += 1
            continue
        requests, _ = _requests(step, item)
        key = cache_key(item_key, step.version, model, [sampling_params(r) for r in requests])
        if key in done:
            summary.cached += 1
        elif key in queued:
            summary.duplicate_inputs += 1
        else:
            queued.add(key)
            pending.append((index if indexable else item, key))
            if on_pending is not None:
                on_pending(requests)
    summary.pending = len(pending)
    return _Plan(pending, indexable)


def _token_counter(backend: Any, config: EngineConfig) -> Callable[[Any], int] | None:
    if backend is not None and callable(getattr(backend, "encode", None)):
        return lambda request: len(backend.encode(request))
    if not config.tokenizer:
        return None
    # imported here: both pull in torch (~5 s), which only dry runs without a backend need
    from transformers import AutoTokenizer

    from r3forge.models import resolve_model

    tok = AutoTokenizer.from_pretrained(resolve_model(config.tokenizer))

    def count(request) -> int:  # built as the transformers / vLLM backends build prompts
        if request.messages is None:
            return len(tok(request.prompt, add_special_tokens=True)["input_ids"])
        text = tok.apply_chat_template(list(request.messages), add_generation_prompt=True, tokenize=False)
        return len(tok(text, add_special_tokens=False)["input_ids"])

    return count


def _dry_run(
    step: SynthesisStep,
    items: Iterable[dict],
    model: str,
    config: EngineConfig,
    count_tokens: Callable[[Any], int] | None,
    summary: RunSummary,
) -> RunSummary:
    """Pass 1 only, read-only on the folder (a live run may be writing it): counts of what a run would do."""
    manifest = read_manifest(config.output_dir) if Path(config.output_dir).is_dir() else None
    if manifest is not None:
        identity = {"step": step.name, "version": step.version, "model": model}
        check_identity(manifest, identity, str(Path(config.output_dir) / MANIFEST))
    done = scan(config.output_dir).done if manifest is not None else set()
    tokens = [0]

    def on_pending(requests) -> None:
        summary.requests += len(requests)
        summary.max_completion_tokens += sum(r.max_tokens * r.n for r in requests)
        if count_tokens is not None:
            tokens[0] += sum(count_tokens(r) for r in requests)

    _plan(step, items, model, config, done, summary, on_pending)
    summary.prompt_tokens = tokens[0] if count_tokens is not None else None
    print(summary.line())
    return summary


def run_step(
    step: SynthesisStep,
    items: Iterable[dict],
    backend: GenerationBackend | None,
    config: EngineConfig,
    count_tokens: Callable[[GenerationRequest], int] | None = None,
) -> RunSummary:
    """Run `step` over the items of this shard not yet in `config.output_dir`; return the counts.

    `backend` may be None for a dry run (then token counts come from `count_tokens` or `config.tokenizer`).
    """
    start = time.perf_counter()
    if backend is None and not config.dry_run:
        raise ConfigError("run_step needs a generation backend (backend=None is only for dry runs)")
    shard = ShardSpec.parse(config.shard)
    model = config.model or backend_model_id(backend)
    summary = RunSummary(config.output_dir, str(shard), dry_run=config.dry_run)
    if config.dry_run:
        return _dry_run(step, items, model, config, count_tokens or _token_counter(backend, config), summary)
    identity = {"step": step.name, "version": step.version, "model": model}
    with ShardStore(config.output_dir, shard, identity, resume=config.resume) as store:
        plan = _plan(step, items, model, config, store.done, summary, None)
        with faults.counted(backend, store, summary) as log:
            _generate(step, items, backend, plan, store, config, log)
        store.complete = not store.failed
    summary.elapsed_s = time.perf_counter() - start
    print(summary.line(), file=sys.stderr)
    if config.export and shard.count == 1:
        export_dataset(config.output_dir)
    return summary


def _generate(
    step: SynthesisStep,
    items: Any,
    backend: GenerationBackend,
    plan: _Plan,
    store: ShardStore,
    config: EngineConfig,
    log: faults.FaultLog,
) -> None:
    """Pass 2: prompt, generate and parse batch by batch; every finished batch is appended and fsync'd,
    after the backend's fault counts (also saved every `POLL_S` while batches are in flight)."""
    summary = log.summary
    show = config.progress and bool(plan.pending)
    bar = tqdm(total=len(plan.pending), unit="item", disable=not show, file=sys.stderr, dynamic_ncols=True)
    t0, reasons, failures = time.perf_counter(), Counter(), Counter()
    in_flight: set[Future] = set()
    pool = ThreadPoolExecutor(max_workers=config.concurrency)

    def drain(limit: int) -> None:  # finish batches until fewer than `limit` are in flight
        nonlocal in_flight
        while len(in_flight) >= limit:
            finished, in_flight = wait(in_flight, timeout=POLL_S, return_when=FIRST_COMPLETED)
            log.save()  # before the batches' records: a kill in between counts their calls, redoes them
            for future in finished:
                finish(future)

    def finish(future: Future) -> None:
        batch, results, latency = future.result()
        accepted, rejected, failed = _records(step, batch, results, latency, store, config)
        store.append(accepted, rejected, failed)
        results = [r for r in results if not isinstance(r, RequestFailed)]
        summary.processed += len(batch)
        summary.accepted += len(accepted)
        summary.rejected += len(rejected)
        summary.failed += len(failed)
        failures.update(r["reason"] for r in failed)
        summary.requests += len(results)
        summary.prompt_tokens += sum(r.usage.prompt_tokens for r in results)
        summary.completion_tokens += sum(r.usage.completion_tokens for r in results)
        reasons.update(r["reason"] for r in rejected)
        elapsed = max(time.perf_counter() - t0, 1e-9)
        bar.update(len(batch))
        bar.set_postfix_str(
            f"req/s={summary.requests / elapsed:.2f} tok/s={summary.completion_tokens / elapsed:.1f} "
            f"rej={summary.rejected / summary.processed:.1%}",
            refresh=False,
        )

    try:
        for start in range(0, len(plan.pending), config.batch_size):
            batch = []
            for ref, key in plan.pending[start : start + config.batch_size]:
                item = items[ref] if plan.indexable else ref
                requests, many = _requests(step, item)
                sampling = [sampling_params(r) for r in requests]
                if cache_key(step.key(item), step.version, store.identity["model"], sampling) != key:
                    raise SynthError(
                        f"step {step.name!r}: key()/prompt() not deterministic for {step.key(item)}"
                    )
                store.add_sampling(sampling)
                batch.append((item, key, requests, many, sampling))
            in_flight.add(pool.submit(_call, backend, batch))
            drain(config.concurrency)
        drain(1)  # the last batches, written as they end
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        bar.close()
    summary.reject_reasons = dict(sorted(reasons.items()))
    summary.failure_reasons = dict(sorted(failures.items()))


def _call(backend: GenerationBackend, batch: list[tuple]) -> tuple[list[tuple], list, float]:
    requests = [r for _, _, reqs, _, _ in batch for r in reqs]
    t = time.perf_counter()
    try:
        results = backend.generate(requests)
    except PartialFailure as e:  # some requests failed after their retries: those items fail alone
        results = faults.usable_results(e)
    if len(results) != len(requests):
        raise SynthError(
            f"backend {backend.name!r} returned {len(results)} results for {len(requests)} requests"
        )
    return batch, results, time.perf_counter() - t


def _records(
    step: SynthesisStep,
    batch: list[tuple],
    results: list,
    latency: float,
    store: ShardStore,
    config: EngineConfig,
) -> tuple[list[dict], list[dict], list[dict]]:
    """Parse each item's results into an accepted or a rejected record; a failed one when a request failed."""
    accepted, rejected, failed, offset = [], [], [], 0
    for item, key, requests, many, sampling in batch:
        mine = results[offset : offset + len(requests)]
        offset += len(requests)
        if failure := faults.first_failure(mine):
            failed.append(faults.failed_record(key, step.key(item), store, sampling, failure))
            continue
        try:
            out = step.parse(item, mine if many else mine[0])
        except Exception as e:
            if config.on_parse_error == "raise":
                raise SynthError(f"step {step.name!r}: parse() failed on item {step.key(item)}: {e!r}") from e
            out = Rejected("parse_error", repr(e))
        record = {
            "key": key,  # first: a reader can tell a record's key without parsing it
            "input": step.key(item),
            **store.identity,
            "sampling": sampling,
            "raw": [[c.text for c in r.choices] for r in mine],
            "reasoning": [[c.reasoning for c in r.choices] for r in mine],
            "finish_reasons": [[c.finish_reason for c in r.choices] for r in mine],
            "prompt_tokens": sum(r.usage.prompt_tokens for r in mine),
            "completion_tokens": sum(r.usage.completion_tokens for r in mine),
            "latency_s": round(latency, 4),  # of the backend call that produced the whole batch
            "shard": str(store.shard),
            "created": round(time.time(), 3),
        }
        if isinstance(out, Rejected):
            rejected.append(record | {"reason": out.reason, "detail": out.detail})
        elif isinstance(out, dict):
            if clash := RESERVED & out.keys():
                raise SynthError(f"step {step.name!r}: parse() output uses reserved field(s) {sorted(clash)}")
            accepted.append(record | {"output": out})
        else:
            raise SynthError(
                f"step {step.name!r}: parse() must return a dict or Rejected, got {type(out).__name__}"
            )
    return accepted, rejected, failed
