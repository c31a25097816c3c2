"""The synthesis store: an output folder of append-only JSONL shards that survives `kill -9` at any moment.

Layout of one output folder (written by one process at a time; a `.lock` file enforces it):

* `accepted-<tag>.jsonl`, `rejected-<tag>.jsonl`: one complete JSON record per line, each starting with
  its cache `key`; `<tag>` is the shard, e.g. `00000-of-00002` for `--shard 0/2`. Lines are only ever
  appended; each batch is written, flushed and fsync'd before the next one is generated.
* `failed-<tag>.jsonl`: items whose requests failed after the backend's retries (a bad response, a 5xx, a
  timeout...), with the reason code; they are not done, so the next run tries them again.
* `faults-<tag>.jsonl`: the teacher's fault counts (calls made, retries by cause, timeouts, requests given
  up), appended as they grow during a run (`faults.py`), one increment per line: their sum is the folder's
  total over every run, a killed one included, each call counted once.
* `manifest.json`: step name and prompt version, teacher model, sampling parameters seen, per-shard counts,
  the items still failed and the teacher's faults (the sum of `faults-*.jsonl`); rewritten atomically
  (temp file + fsync + rename).

On startup the folder is scanned: every complete line counts as done, a torn last line (a kill in the
middle of a write: no trailing newline) is truncated away, and a complete line that is not a JSON record
is an error naming file:line (that is corruption, not a crash). Items whose cache key is done are skipped,
so reruns resume with no record lost or duplicated; record order may differ from input order.

The cache key is the sha256 of canonical JSON (sorted keys, no whitespace) of the step's item key, the
prompt version, the model id and the requests' sampling parameters: stable across processes, machines and
`PYTHONHASHSEED`. The prompt text itself is not hashed: bump the step's `version` when the prompt changes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from r3forge import __version__
from r3forge.errors import ConfigError, DataFormatError, R3ForgeError

MANIFEST = "manifest.json"
STORE_FORMAT = "r3forge.synth/1"
KINDS = ("accepted", "rejected")  # the done kinds
FAILED = "failed"  # items to retry
FAULTS = "faults"  # the teacher's fault counts: increments, summed on read
IDENTITY = ("step", "version", "model")  # what must match to resume into, or merge, output folders
# GenerationRequest fields always hashed; any other non-prompt field is hashed only when not at its default,
# so adding a field to GenerationRequest later does not invalidate existing caches.
CORE_SAMPLING = ("n", "temperature", "top_p", "max_tokens", "stop", "seed", "top_logprobs")
_SHARD = re.compile(r"\s*(\d+)\s*/\s*(\d+)\s*")


class SynthError(R3ForgeError, RuntimeError):
    """A synthesis run or merge cannot proceed: the message names the folder/file and what to do."""


def canonical_json(obj: Any) -> str:
    """Deterministic JSON: sorted keys, no whitespace, UTF-8 kept, NaN refused.

    >>> canonical_json({"b": [1, 2.5], "a": "é"})
    '{"a":"é","b":[1,2.5]}'
    """
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def sampling_params(request: Any) -> dict[str, Any]:
    """The sampling parameters of a `GenerationRequest` (everything except `messages` / `prompt`)."""
    if not dataclasses.is_dataclass(request):
        raise TypeError(f"expected a GenerationRequest, got {type(request).__name__}")
    out = {}
    for f in dataclasses.fields(request):
        if f.name in ("messages", "prompt"):
            continue
        value = getattr(request, f.name)
        if f.name in CORE_SAMPLING or value != f.default:
            out[f.name] = list(value) if isinstance(value, tuple) else value
    return out


def cache_key(item_key: dict[str, Any], version: str, model: str, sampling: list[dict[str, Any]]) -> str:
    """sha256 hex of (item key, prompt version, model id, sampling parameters of each request).

    >>> cache_key({"id": "q1"}, "v1", "m", [{"temperature": 0.0}])[:16]
    '41dcd9d7dbfd9668'
    """
    payload = canonical_json({"item": item_key, "version": version, "model": model, "sampling": sampling})
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class ShardSpec:
    """Shard `index` of `count`: the items whose stable key hash mod `count` equals `index`."""

    index: int = 0
    count: int = 1

    @classmethod
    def parse(cls, text: str) -> ShardSpec:
        """`"i/N"` with 0 <= i < N.

        >>> ShardSpec.parse("1/4")
        ShardSpec(index=1, count=4)
        """
        m = _SHARD.fullmatch(str(text))
        if m is None or not 0 <= int(m[1]) < int(m[2]):
            raise ConfigError(f"shard: expected 'i/N' with 0 <= i < N (e.g. 0/2), got {text!r}")
        return cls(int(m[1]), int(m[2]))

    @property
    def tag(self) -> str:
        return f"{self.index:05d}-of-{self.count:05d}"

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def owns(self, item_key: dict[str, Any]) -> bool:
        """Whether this shard processes the item (stable across processes; independent of the model)."""
        if self.count == 1:
            return True
        digest = hashlib.sha256(canonical_json(item_key).encode("utf-8")).digest()
        return int.from_bytes(digest[:8], "big") % self.count == self.index


def record_files(root: Path, kind: str) -> list[Path]:
    """The `accepted-*.jsonl` or `rejected-*.jsonl` files of a folder, sorted."""
    return sorted(p for p in Path(root).glob(f"{kind}-*.jsonl") if p.is_file())


def iter_lines(path: Path, repair: bool = False) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line, record) of every complete line of a store file.

    A last line without its newline is a torn write: it is skipped, and with `repair` truncated from the
    file. Any other unreadable line raises `DataFormatError` naming file:line.
    """
    offset = 0
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            if not raw.endswith(b"\n"):
                if repair:
                    _truncate(path, offset)
                return
            offset += len(raw)
            if not raw.strip():
                continue
            try:
                record = json.loads(raw)
            except ValueError as e:
                raise DataFormatError(
                    path,
                    lineno,
                    f"not a JSON record ({e}); only a torn *last* line is repaired "
                    "automatically, so this is corruption: fix or delete the line, then rerun",
                ) from None
            if not isinstance(record, dict) or not isinstance(record.get("key"), str):
                raise DataFormatError(path, lineno, "record has no string 'key' field")
            yield lineno, record


def _truncate(path: Path, size: int) -> None:
    with open(path, "r+b") as f:
        f.truncate(size)
        f.flush()
        os.fsync(f.fileno())


@dataclass
class ScanResult:
    """What a folder already holds."""

    done: set[str] = field(default_factory=set)  # cache keys of accepted and rejected records
    counts: Counter = field(default_factory=Counter)  # "accepted" / "rejected" -> records
    reasons: Counter = field(default_factory=Counter)  # reject reason code -> records
    duplicates: int = 0  # lines whose key was already seen (never written by the engine; dropped on read)
    failed: dict[str, str] = field(default_factory=dict)  # cache key -> reason of its last failure (not done)


def scan(root: str | os.PathLike[str], repair: bool = False) -> ScanResult:
    """Read every record line of a folder once: done keys, counts per kind and per reject reason."""
    result = ScanResult()
    for kind in KINDS:
        for path in record_files(Path(root), kind):
            for _, record in iter_lines(path, repair=repair):
                if record["key"] in result.done:
                    result.duplicates += 1
                    continue
                result.done.add(record["key"])
                result.counts[kind] += 1
                if kind == "rejected":
                    result.reasons[str(record.get("reason"))] += 1
    for path in record_files(Path(root), FAILED):
        for _, record in iter_lines(path, repair=repair):
            if record["key"] not in result.done:
                result.failed[record["key"]] = str(record.get("reason"))
    return result


def add_counts(total: dict[str, Any], more: dict[str, Any], sign: int = 1) -> dict[str, Any]:
    """`total` + `sign` x `more`, for nested dicts of counts (a fault record); a new dict.

    >>> add_counts({"retries": 2, "by": {"500": 2}}, {"retries": 1, "by": {"429": 1}})
    {'retries': 3, 'by': {'500': 2, '429': 1}}
    """
    out = dict(total)
    for k, v in more.items():
        if isinstance(v, dict):
            out[k] = add_counts(out.get(k) or {}, v, sign)
        elif isinstance(v, int | float):
            out[k] = out.get(k, 0) + sign * v
    return out


def iter_records(roots: list[Path], kind: str, skip: set[str] | None = None) -> Iterator[dict[str, Any]]:
    """Records of one kind across folders, first occurrence of each key only (and none in `skip`)."""
    seen = set(skip or ())
    for root in roots:
        for path in record_files(root, kind):
            for _, record in iter_lines(path):
                if record["key"] not in seen:
                    seen.add(record["key"])
                    yield record


def read_faults(root: str | os.PathLike[str]) -> dict[str, Any]:
    """The teacher's fault counts over every run into a folder: the sum of its `faults-*.jsonl` increments
    (a folder written before those logs: its manifest's `faults`)."""
    files = record_files(Path(root), FAULTS)
    if not files:
        return dict((read_manifest(root) or {}).get("faults") or {})
    total: dict[str, Any] = {}
    for record in iter_records([Path(root)], FAULTS):
        total = add_counts(total, record.get("faults") or {})
    return total


def read_manifest(root: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The folder's manifest, None when it has none; `DataFormatError` when unreadable."""
    path = Path(root) / MANIFEST
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:
        raise DataFormatError(path, None, f"unreadable manifest ({e})") from None


def write_manifest(root: str | os.PathLike[str], manifest: dict[str, Any]) -> None:
    """Write `manifest.json` atomically: temp file, fsync, rename, fsync the folder."""
    root = Path(root)
    tmp = root / f".{MANIFEST}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1, ensure_ascii=False, sort_keys=True)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, root / MANIFEST)
    fsync_dir(root)


def fsync_dir(root: Path) -> None:
    """Make created/renamed entries of a folder durable."""
    fd = os.open(root, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def check_identity(
    manifest: dict[str, Any], identity: dict[str, Any], where: str, ours: str = "this run"
) -> None:
    """Raise `SynthError` when a folder's step/version/model differ from `identity` (that of `ours`)."""
    diff = [f"{k}: {manifest.get(k)!r} there vs {identity.get(k)!r} in {ours}" for k in IDENTITY]
    diff = [d for d, k in zip(diff, IDENTITY, strict=True) if manifest.get(k) != identity.get(k)]
    if diff:
        raise SynthError(
            f"{where}: holds records of a different run ({', '.join(diff)}); use another output folder"
        )


class ShardStore:
    """One process's handle on an output folder: lock, scan/repair, append with fsync, manifest.

    with ShardStore(out, ShardSpec(0, 2), identity) as store:  # identity: step, version, model
        if key not in store.done: ...
        store.append(accepted_records, rejected_records)
    """

    def __init__(
        self, root: str | os.PathLike[str], shard: ShardSpec, identity: dict[str, Any], resume: bool = True
    ):
        self.root, self.shard, self.identity, self.resume = Path(root), shard, dict(identity), resume
        self.sampling: list[dict[str, Any]] = []  # distinct sampling parameter lists seen (for the manifest)
        self.faults: dict[str, Any] = {}  # the teacher's fault counts over every run into the folder
        self.complete = False
        self._lock = FileLock(self.root / ".lock", timeout=0)
        self._files: dict[str, Any] = {}
        self._last_manifest = 0.0
        self._run = f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}-{os.urandom(4).hex()}"
        self._increments = 0  # fault count lines this run appended

    def __enter__(self) -> ShardStore:
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            self._lock.acquire()
        except Timeout:
            raise SynthError(
                f"{self.root}: another process is writing this folder (lock {self.root / '.lock'}); "
                "give each concurrent job (e.g. each --shard) its own output folder"
            ) from None
        try:
            self._open()
        except BaseException:
            self._lock.release()
            raise
        return self

    def _open(self) -> None:
        for stale in self.root.glob(f".{MANIFEST}.tmp-*"):  # left by a process killed while writing it
            stale.unlink()
        manifest = read_manifest(self.root)
        if manifest is not None:
            check_identity(manifest, self.identity, str(self.root / MANIFEST))
            self.sampling = list(manifest.get("sampling", []))
        for path in record_files(self.root, FAULTS):
            for _ in iter_lines(path, repair=True):  # a torn last increment is cut away before appending
                pass
        self.faults = read_faults(self.root)
        if self.faults and not record_files(self.root, FAULTS):  # counts from before the log: carried over
            self._append(FAULTS, [{"key": f"{self._run}-0", "faults": self.faults, "carried_from": MANIFEST}])
        scanned = scan(self.root, repair=True)
        if scanned.done and not self.resume:
            raise SynthError(
                f"{self.root}: already holds {len(scanned.done)} records and resume is off; "
                "pass --resume true to continue it, or choose an empty output folder"
            )
        self.done, self.counts, self.reasons = scanned.done, scanned.counts, scanned.reasons
        self.failed = scanned.failed
        self.write_manifest(force=True)

    def add_sampling(self, sampling: list[dict[str, Any]]) -> None:
        if sampling not in self.sampling and len(self.sampling) < 50:
            self.sampling.append(sampling)

    def add_faults(self, increment: dict[str, Any]) -> None:
        """Append an increment of the teacher's fault counts (fsync'd before returning) and add it to the
        folder's total: what a run counted survives a `kill -9` right after."""
        self._increments += 1
        record = {"key": f"{self._run}-{self._increments}", "shard": str(self.shard)}
        self._append(FAULTS, [record | {"created": round(time.time(), 3), "faults": increment}])
        self.faults = add_counts(self.faults, increment)
        self.write_manifest()

    def _append(self, kind: str, records: Sequence[dict[str, Any]]) -> None:
        f = self._file(kind)
        f.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode("utf-8"))
        f.flush()
        os.fsync(f.fileno())

    def append(
        self,
        accepted: list[dict[str, Any]],
        rejected: list[dict[str, Any]],
        failed: Sequence[dict[str, Any]] = (),
    ) -> None:
        """Append records (each with its `key`), flushed and fsync'd before returning."""
        for kind, records in (("accepted", accepted), ("rejected", rejected), (FAILED, failed)):
            if not records:
                continue
            self._append(kind, records)
            for r in records:
                if kind == FAILED:
                    self.failed[r["key"]] = str(r.get("reason"))
                    continue
                self.done.add(r["key"])
                self.failed.pop(r["key"], None)
                if kind == "rejected":
                    self.reasons[str(r.get("reason"))] += 1
            if kind != FAILED:
                self.counts[kind] += len(records)
        self.write_manifest()

    def _file(self, kind: str):
        if kind not in self._files:
            path = self.root / f"{kind}-{self.shard.tag}.jsonl"
            self._files[kind] = open(path, "ab")  # noqa: SIM115 (closed in close())
            fsync_dir(self.root)
        return self._files[kind]

    def manifest(self) -> dict[str, Any]:
        shards = (read_manifest(self.root) or {}).get("shards", {})
        shards[self.shard.tag] = {"shard": str(self.shard), "complete": self.complete}
        return {
            "format": STORE_FORMAT,
            **self.identity,
            "sampling": self.sampling,
            "shards": shards,
            "accepted": self.counts["accepted"],
            "rejected": self.counts["rejected"],
            "reject_reasons": dict(sorted(self.reasons.items())),
            "failed": len(self.failed),  # items a rerun will try again
            "failure_reasons": dict(sorted(Counter(self.failed.values()).items())),
            "faults": self.faults,
            "updated": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "r3forge_version": __version__,
        }

    def write_manifest(self, force: bool = False) -> None:
        """Rewrite the manifest (at most once a second unless `force`): counts are advisory, the JSONL
        files are the truth."""
        if force or time.monotonic() - self._last_manifest >= 1.0:
            write_manifest(self.root, self.manifest())
            self._last_manifest = time.monotonic()

    def close(self) -> None:
        for f in self._files.values():
            f.close()
        self._files.clear()
        if self._lock.is_locked:
            self.write_manifest(force=True)
            self._lock.release()

    def __exit__(self, *exc: object) -> None:
        self.close()
