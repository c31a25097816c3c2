"""Teacher faults in a synthesis run: what failed, and how often the backend had to retry.

A request the backend gave up on after its retries (`RequestFailed`: a bad response, a 5xx, a 429, a
timeout) fails its item only: the engine writes the item as a `failed` record with the reason code and
keeps the batch's other items. A failed record is not done, so the next run of the same command tries the
item again. A batch whose every request failed to connect stops the run instead (the server is down: there
is nothing to gain from retrying every item in turn; a rerun resumes).

The backend's fault counters (`backend.faults`, a dict of counts: the HTTP backend's retries by cause,
timeouts, requests given up), read before and after the run, are the run's faults: `RunSummary.faults`,
and summed over every run into the folder, the `faults` of `manifest.json`. A backend without `faults`
(in-process ones, which do not retry) records none.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from r3forge.errors import PartialFailure, RequestFailed
from r3forge.synth.store import add_counts


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
    faults = getattr(backend, "faults", None)
    return add_counts({}, faults) if isinstance(faults, dict) else {}


@contextmanager
def counted(backend: Any, store: Any, summary: Any) -> Iterator[None]:
    """Around a run's generation: its faults into `summary.faults` and added to `store.faults` (the
    manifest's), also when the run stops on an error."""
    before = backend_faults(backend)
    try:
        yield
    finally:
        summary.faults = faults_since(before, backend_faults(backend))
        store.faults = add_counts(store.faults, summary.faults)


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
