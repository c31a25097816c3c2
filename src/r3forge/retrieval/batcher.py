"""The retriever server's search queue: one worker thread, micro-batching, and no work for clients that left.

Requests that arrive while a search runs are merged into the next search call, grouped by topk (what makes
many small concurrent requests cheap). A search call holds at most `max_batch` queries, so one large request
is searched in slices; before each call the queue drops the requests whose client disconnected (the server
cancels their future), so an abandoned request costs at most the slice already running, never the wait of
the requests queued behind it. `counters` says how much was searched and how much was skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field

from r3forge.retrieval.base import Hit, Retriever

Result = list[list[tuple[Hit, dict[str, str]]]]  # per query, the top-k hits each with its passage


@dataclass
class _Job:
    queries: list[str]
    k: int
    future: asyncio.Future[Result]
    rows: Result = field(default_factory=list)  # the results of the slices searched so far

    @property
    def left(self) -> int:
        return len(self.queries) - len(self.rows)


@dataclass
class SearchCounters:
    """What the queue did since the server started (served under /health as `searches`)."""

    calls: int = 0  # search calls on the worker thread
    queries: int = 0  # queries searched
    abandoned_requests: int = 0  # requests whose client left before all their queries were searched
    skipped_queries: int = 0  # queries of those requests never searched

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


class MicroBatcher:
    """Serializes searches on one worker thread; jobs queued meanwhile go into the next call, grouped by k."""

    def __init__(self, retriever: Retriever, max_batch: int = 256):
        self.retriever = retriever
        self.max_batch = max(1, max_batch)
        self.counters = SearchCounters()
        self._queue: asyncio.Queue[_Job] = asyncio.Queue()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="retriever")
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def search(self, queries: list[str], k: int) -> Result:
        """Per query, the top-k hits each with its passage {id, title, text}. Cancelling the awaiting task
        (the client left) cancels the job: its queries not yet searched are skipped."""
        job = _Job(queries, k, asyncio.get_running_loop().create_future())
        await self._queue.put(job)
        return await job.future

    def _search_with_passages(self, queries: list[str], k: int) -> Result:
        hits = self.retriever.search(queries, k)
        passages = iter(self.retriever.get([pid for row in hits for pid, _ in row]))
        return [[(hit, next(passages)) for hit in row] for row in hits]

    def _live(self, jobs: list[_Job]) -> list[_Job]:
        """The jobs still awaited; an abandoned one is counted once, when it is dropped."""
        live = []
        for job in jobs:
            if not job.future.done():
                live.append(job)
            elif job.future.cancelled() and job.left:
                self.counters.abandoned_requests += 1
                self.counters.skipped_queries += job.left
        return live

    async def _loop(self) -> None:
        while True:
            jobs = [await self._queue.get()]
            size = len(jobs[0].queries)
            while size < self.max_batch and not self._queue.empty():
                jobs.append(self._queue.get_nowait())
                size += len(jobs[-1].queries)
            by_k: dict[int, list[_Job]] = defaultdict(list)
            for job in jobs:
                by_k[job.k].append(job)
            for k, group in by_k.items():
                await self._run_group(k, group)

    async def _run_group(self, k: int, group: list[_Job]) -> None:
        """Search the group's queries in calls of at most max_batch, dropping abandoned jobs before each."""
        loop = asyncio.get_running_loop()
        while group := [job for job in self._live(group) if job.left]:
            parts: list[tuple[_Job, int]] = []  # (job, how many of its next queries go into this call)
            budget = self.max_batch
            for job in group:
                if budget == 0:
                    break
                parts.append((job, min(job.left, budget)))
                budget -= parts[-1][1]
            queries = [q for job, n in parts for q in job.queries[len(job.rows) : len(job.rows) + n]]
            try:
                results = await loop.run_in_executor(self._executor, self._search_with_passages, queries, k)
            except Exception as e:  # the failure goes to its requests; the loop keeps serving
                for job, _ in parts:
                    if not job.future.done():
                        job.future.set_exception(e)
                continue
            self.counters.calls += 1
            self.counters.queries += len(queries)
            start = 0
            for job, n in parts:
                job.rows.extend(results[start : start + n])
                start += n
                if not job.left and not job.future.done():
                    job.future.set_result(job.rows)
