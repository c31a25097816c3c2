"""The synthesis store: cache keys, torn/corrupt lines, locking, manifests, shard assignment. No model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from r3forge.errors import ConfigError, DataFormatError
from r3forge.synth.export import merge_shards
from r3forge.synth.store import (
    MANIFEST,
    ShardSpec,
    ShardStore,
    SynthError,
    add_counts,
    cache_key,
    iter_lines,
    read_faults,
    read_manifest,
    sampling_params,
    scan,
)

IDENTITY = {"step": "one_word", "version": "v1", "model": "m"}
SAMPLING = [{"n": 1, "temperature": 0.0, "max_tokens": 4}]
ITEM_KEYS = [{"id": f"q{i}", "lang": "en"} for i in range(200)]


def record(i: int, **extra) -> dict:
    key = cache_key(ITEM_KEYS[i], "v1", "m", SAMPLING)
    return {"key": key, "input": ITEM_KEYS[i], "raw": [["x" * 50]], **extra}


def fill(root: Path, accepted: range, rejected: range = range(0)) -> None:
    with ShardStore(root, ShardSpec(), IDENTITY) as store:
        store.append([record(i) for i in accepted], [record(i, reason="empty") for i in rejected])


def test_cache_key_is_canonical_and_covers_every_part():
    base = cache_key({"id": "q1", "lang": "en"}, "v1", "m", SAMPLING)
    assert base == cache_key({"lang": "en", "id": "q1"}, "v1", "m", SAMPLING)  # key order is irrelevant
    assert len(base) == 64 and int(base, 16) >= 0
    others = [
        cache_key({"id": "q2", "lang": "en"}, "v1", "m", SAMPLING),
        cache_key({"id": "q1", "lang": "en"}, "v2", "m", SAMPLING),
        cache_key({"id": "q1", "lang": "en"}, "v1", "m2", SAMPLING),
        cache_key({"id": "q1", "lang": "en"}, "v1", "m", [{**SAMPLING[0], "temperature": 0.7}]),
        cache_key({"id": "q1", "lang": "en"}, "v1", "m", SAMPLING * 2),
    ]
    assert len({base, *others}) == 6


def test_sampling_params_of_a_request():
    from r3forge.backends.base import GenerationRequest

    request = GenerationRequest(prompt="Q: 2+2?\nA:", max_tokens=4, stop=("\n",), seed=3)
    params = sampling_params(request)
    assert params == {
        "n": 1,
        "temperature": 0.0,
        "top_p": 1.0,
        "max_tokens": 4,
        "stop": ["\n"],
        "seed": 3,
        "top_logprobs": 0,
    }
    chat = GenerationRequest(
        messages=[{"role": "user", "content": "other text"}], max_tokens=4, stop=["\n"], seed=3
    )
    assert sampling_params(chat) == params  # the prompt is not a sampling parameter
    with pytest.raises(TypeError, match="GenerationRequest"):
        sampling_params({"max_tokens": 4})


def test_cache_key_and_shards_are_stable_across_processes():
    """Same keys and shard assignment under different PYTHONHASHSEED (no use of Python's hash())."""
    code = (
        "import json, sys; from r3forge.synth.store import ShardSpec, cache_key\n"
        "keys = json.loads(sys.argv[1])\n"
        "print(json.dumps([[cache_key(k, 'v1', 'm', [{'t': 0.5}]), ShardSpec(1, 3).owns(k)] for k in keys]))"
    )
    keys = ITEM_KEYS[:20]
    here = [[cache_key(k, "v1", "m", [{"t": 0.5}]), ShardSpec(1, 3).owns(k)] for k in keys]
    for seed in ("1", "987"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", code, json.dumps(keys)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        assert json.loads(out.stdout) == here


def test_shard_spec_parse_and_partition():
    assert ShardSpec.parse(" 2 / 3 ") == ShardSpec(2, 3) and str(ShardSpec(2, 3)) == "2/3"
    assert ShardSpec(2, 3).tag == "00002-of-00003"
    for bad in ("3/3", "1", "-1/2", "a/b", "0/0"):
        with pytest.raises(ConfigError, match="i/N"):
            ShardSpec.parse(bad)
    owners = [[s for s in range(3) if ShardSpec(s, 3).owns(k)] for k in ITEM_KEYS]
    assert all(len(o) == 1 for o in owners)  # every item in exactly one shard
    sizes = [sum(o == [s] for o in owners) for s in range(3)]
    assert min(sizes) > 40  # and roughly balanced (200 items)


def test_append_scan_and_manifest(tmp_path: Path):
    fill(tmp_path, range(5), range(5, 8))
    scanned = scan(tmp_path)
    assert len(scanned.done) == 8 and scanned.counts == {"accepted": 5, "rejected": 3}
    assert scanned.reasons == {"empty": 3}
    manifest = read_manifest(tmp_path)
    assert {k: manifest[k] for k in IDENTITY} == IDENTITY
    assert (
        manifest["accepted"] == 5 and manifest["rejected"] == 3 and manifest["reject_reasons"] == {"empty": 3}
    )
    assert manifest["shards"] == {"00000-of-00001": {"shard": "0/1", "complete": False}}
    assert not list(tmp_path.glob(".manifest*"))  # the atomic write left no temp file


def test_torn_last_line_is_truncated_and_ignored(tmp_path: Path):
    fill(tmp_path, range(3))
    path = tmp_path / "accepted-00000-of-00001.jsonl"
    good = path.stat().st_size
    torn = json.dumps(record(3))[:40]  # a kill in the middle of a write: no newline
    with open(path, "a", encoding="utf-8") as f:
        f.write(torn)
    assert len(scan(tmp_path).done) == 3 and path.stat().st_size > good  # read-only scan: skipped, kept
    with ShardStore(tmp_path, ShardSpec(), IDENTITY) as store:  # a writer repairs it
        assert len(store.done) == 3 and path.stat().st_size == good
        store.append([record(3)], [])
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 4 and all(json.loads(line)["key"] for line in lines)


def test_a_complete_but_invalid_json_line_is_corruption_named_by_file_and_line(tmp_path: Path):
    fill(tmp_path, range(3))
    path = tmp_path / "accepted-00000-of-00001.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    lines[1] = lines[1][:30] + "\n"  # complete (newline-terminated) but cut: not a crash artefact
    path.write_text("".join(lines), encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"accepted-00000-of-00001\.jsonl:2: not a JSON record"):
        ShardStore(tmp_path, ShardSpec(), IDENTITY).__enter__()
    path.write_text(lines[0] + '{"no_key": 1}\n', encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"jsonl:2: record has no string 'key'"):
        list(iter_lines(path))


def test_duplicate_lines_are_counted_and_dropped(tmp_path: Path):
    fill(tmp_path, range(3))
    path = tmp_path / "accepted-00000-of-00001.jsonl"
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(record(0)) + "\n")
    scanned = scan(tmp_path)
    assert len(scanned.done) == 3 and scanned.duplicates == 1 and scanned.counts["accepted"] == 3


def test_one_writer_per_folder(tmp_path: Path):
    with (
        ShardStore(tmp_path, ShardSpec(0, 2), IDENTITY),
        pytest.raises(SynthError, match="another process is writing"),
    ):
        ShardStore(tmp_path, ShardSpec(1, 2), IDENTITY).__enter__()
    with ShardStore(tmp_path, ShardSpec(1, 2), IDENTITY):  # released on exit
        pass


def test_folder_of_another_run_or_no_resume_is_refused(tmp_path: Path):
    fill(tmp_path, range(2))
    with pytest.raises(SynthError, match=r"version: 'v1' there vs 'v2' in this run"):
        ShardStore(tmp_path, ShardSpec(), {**IDENTITY, "version": "v2"}).__enter__()
    with pytest.raises(SynthError, match="resume is off"):
        ShardStore(tmp_path, ShardSpec(), IDENTITY, resume=False).__enter__()
    (tmp_path / MANIFEST).write_text("{not json", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"manifest\.json: unreadable manifest"):
        ShardStore(tmp_path, ShardSpec(), IDENTITY).__enter__()


def test_fault_counts_are_a_log_summed_over_runs_once_each(tmp_path: Path):
    """Each run appends increments; a torn last increment (a kill mid-write) is cut away and not counted;
    a folder from before the log carries its manifest's counts over once; a merge sums each folder once."""
    a, b = tmp_path / "a", tmp_path / "b"
    with ShardStore(a, ShardSpec(), IDENTITY) as store:
        store.add_faults({"attempts": 3, "retries": 1, "retries_by_cause": {"500": 1}})
        store.add_faults({"attempts": 2, "retries": 2, "retries_by_cause": {"429": 2}})
    log = a / "faults-00000-of-00001.jsonl"
    with open(log, "a", encoding="utf-8") as f:
        f.write('{"key": "torn", "faults": {"attempts": 9')  # no newline: the kill's half-written line
    with ShardStore(a, ShardSpec(), IDENTITY) as store:  # the resumed run
        assert store.faults == {"attempts": 5, "retries": 3, "retries_by_cause": {"500": 1, "429": 2}}
        store.add_faults({"attempts": 1})
    total = {"attempts": 6, "retries": 3, "retries_by_cause": {"500": 1, "429": 2}}
    assert read_faults(a) == read_manifest(a)["faults"] == total
    assert len(log.read_text(encoding="utf-8").splitlines()) == 3

    fill(b, range(0))  # a folder written before the log: its manifest's counts only
    (b / "faults-00000-of-00001.jsonl").unlink(missing_ok=True)
    manifest = read_manifest(b) | {"faults": {"attempts": 4, "timeouts": 1}}
    (b / MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
    for _ in range(2):  # carried over into the log once, not again
        with ShardStore(b, ShardSpec(), IDENTITY):
            pass
        assert read_faults(b) == read_manifest(b)["faults"] == {"attempts": 4, "timeouts": 1}

    merged = merge_shards([a, b, a], tmp_path / "merged")
    assert (
        read_manifest(merged)["faults"]
        == read_faults(merged)
        == add_counts(total, {"attempts": 4, "timeouts": 1})
    )
