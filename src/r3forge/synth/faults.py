"""Teacher faults in a synthesis run: what failed, and how often the backend had to retry.

A request the backend gave up on after its retries (`RequestFailed`: a bad response, a 5xx, a 429, a
timeout) fails its item only: the engine writes the item as a `failed` record with the reason code and
keeps the batch's other items. A failed record is not done, so the next run of the same command tries the
item again. A batch whose every request failed to connect stops the run instead (the server is down: there
is nothing to gain from retrying every item in turn; a rerun resumes).

The backend's fault counters (`backend.faults`, a dict of counts: the HTTP backend's calls, retries by
cause, timeouts, requests given up), less their values when the run began, are the run's faults:
`RunSummary.faults`. They are saved as they grow (`FaultLog`: every `POLL_S` while batches are in flight,
and before each finished batch's records are written), as increments appended to the folder's
`faults-*.jsonl`, whose sum is the `faults` of `manifest.json`: a run killed with `kill -9` keeps what it
counted up to its last save, and the run that resumes it counts only its own calls, so each call is counted
once. A backend without `faults` (in-process ones, which do not retry) records none.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from r3forge.errors import PartialFailure, RequestFailed
from r3forge.synth.store import FAILED, add_counts, canonical_json, iter_lines, record_files


def usable_results(error: PartialFailure) -> list:
    """The results of a batch with failed requests (a failed one is its `RequestFailed`); `error` is raised
    again when every request failed to connect."""
    if all(isinstance(r, RequestFailed) and r.reason == "connection" for r in error.results):
        raise error
    return error.results


def first_failure(results: list) -> RequestFailed | None:
    return next((r for r in results if isinstance(r, RequestFailed)), None)


def failed_record(
    key: str, item_key: dict[str, Any], store: Any, sampling: list[dict[str, Any]], failure: RequestFailed
) -> dict[str, Any]:
    """The `failed` record of an item (the fields of its accepted / rejected record that say which item of
    which run, then why)."""
    record = {
        "key": key,
        "input": item_key,
        **store.identity,
        "sampling": sampling,
        "shard": str(store.shard),
    }
    return record | {"created": round(time.time(), 3), "reason": failure.reason, "detail": str(failure)}


def backend_faults(backend: Any) -> dict[str, Any]:
    """A snapshot of the backend's fault counters ({} when it keeps none)."""
    for _ in range(100):
        try:
            faults = getattr(backend, "faults", None)
            return add_counts({}, faults) if isinstance(faults, dict) else {}
        except RuntimeError:  # a counter of the backend's thread grew while it was read: read it again
            continue
    raise RuntimeError(f"backend {getattr(backend, 'name', backend)!r}: its `faults` could not be read")


class FaultLog:
    """A run's fault counts: `save()` appends what the backend counted since the last save to the store's
    log (`ShardStore.add_faults`) and sets `summary.faults` to the run's total so far."""

    def __init__(self, backend: Any, store: Any, summary: Any):
        self.backend, self.store, self.summary = backend, store, summary
        self.start = self.saved = backend_faults(backend)

    def save(self) -> None:
        now = backend_faults(self.backend)
        increment = faults_since(self.saved, now)
        if any(v for v in increment.values()):  # a cause that occurred, or a call made
            self.store.add_faults(increment)
            self.saved = now
        self.summary.faults = faults_since(self.start, now)


@contextmanager
def counted(backend: Any, store: Any, summary: Any) -> Iterator[FaultLog]:
    """Around a run's generation: its `FaultLog`, saved once more at the end, also when the run stops on
    an error."""
    log = FaultLog(backend, store, summary)
    try:
        yield log
    finally:
        log.save()


def faults_since(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """The counts of `after` less those of `before`, without the causes that did not occur in between.

    >>> faults_since({"retries": 1, "by": {"500": 1}}, {"retries": 3, "by": {"500": 1, "429": 2}})
    {'retries': 2, 'by': {'429': 2}}
    """
    delta = add_counts(after, before, sign=-1)
    return {k: {c: n for c, n in v.items() if n} if isinstance(v, dict) else v for k, v in delta.items()}


def fault_text(failed: int, failure_reasons: dict[str, int], faults: dict[str, Any]) -> str:
    """The summary line's part on failed items and teacher faults ('' when there were none).

    >>> fault_text(2, {"timeout": 2}, {"retries": 5, "retries_by_cause": {"500": 5}, "timeouts": 4})
    ', 2 failed {"timeout": 2}: a rerun retries them; teacher faults: 5 retries {"500": 5}, 4 timeouts'
    """
    out = f", {failed} failed {json.dumps(failure_reasons)}: a rerun retries them" if failed else ""
    if faults.get("retries") or faults.get("timeouts"):
        retries, by_cause = faults.get("retries", 0), json.dumps(faults.get("retries_by_cause", {}))
        out += f"; teacher faults: {retries} retries {by_cause}, {faults.get('timeouts', 0)} timeouts"
    return out


def item_outcomes(root: str | os.PathLike[str]) -> dict[str, tuple[str, str]]:
    """How each item with a record in a folder ended, by the canonical JSON of its `key()`: ("accepted",
    ""), ("rejected", reject reason) or, for an item not done, ("failed", the reason of its last failure)."""
    out: dict[str, tuple[str, str]] = {}
    for kind in (FAILED, "rejected", "accepted"):  # a later kind wins: done beats failed
        for path in record_files(Path(root), kind):
            for _, record in iter_lines(path):
                reason = "" if kind == "accepted" else str(record.get("reason"))
                out[canonical_json(record.get("input"))] = (kind, reason)
    return out
