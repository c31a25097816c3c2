"""`r3forge annotate verbal` killed with SIGKILL mid-run, twice, against a teacher that injects faults, then
resumed: the records are those of a run without faults or kills (none lost, duplicated or changed), the
fault counts of `manifest.json` / `report.json` are what the teacher server injected and answered, each
call counted once over the three runs, and report.json's pair counts add up and say what they count.

The teacher is a loopback OpenAI-compatible server (no model): its answer to a prompt is a fixed
`Comment: ... / Score: s` drawn from the prompt's hash, and so are the faults of a prompt's first calls
(429, 500, a truncated body, a dropped connection: about 40% of calls). A run is killed while the server
holds one request of a batch unanswered, once the client has saved the counts of the calls it made (the
engine saves them every `POLL_S`, not only when a batch is written): the batch in flight is lost with its
records, and the resumed run sends it again.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from r3forge.annotate.verbal import VerbalAnnotationStep
from r3forge.backends import OpenAIHTTPBackend, OpenAIHTTPConfig
from r3forge.data.loaders import load_qa
from r3forge.retrieval.pairs import qa_items
from r3forge.synth import EngineConfig, load_accepted, load_rejected, run_step
from r3forge.synth.store import read_faults, read_manifest

FAULTS = ("429", "500", "truncated", "drop")
CAUSE = {"429": "429", "500": "500", "truncated": "bad_response", "drop": "connection"}  # client's names
# the longest backoff before a retry is 1 s (0.5 s doubled: the second of at most two faults, the default
# backoff): a client that made no call for longer has no retry pending, the held batch stops it
QUIET_S = 3.0
QA = "hotpotqa/rpt_distractor_dev_sample_dev.jsonl"


class Teacher:
    """The loopback teacher. `hold_at`: the first call of the n-th distinct prompt it sees gets no answer
    until `release()`. Tallies: `received` (calls), `answered`, `injected` (faults by kind)."""

    def __init__(self) -> None:
        self.hold_at: int | None = None
        self.received, self.answered, self.injected = 0, 0, Counter()
        self.held = threading.Event()
        self.last_call = time.monotonic()
        self._served: Counter = Counter()  # per prompt: calls served (holds aside)
        self._lock, self._release = threading.Lock(), threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                owner.answer(self, body["messages"][-1]["content"])

            def log_message(self, *args) -> None:
                pass

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._http.daemon_threads = True
        threading.Thread(target=self._http.serve_forever, daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._http.server_address[1]}/v1"

    def close(self) -> None:
        self._release.set()
        self._http.shutdown()
        self._http.server_close()

    def hold(self, n: int | None) -> None:
        """Hold the first call of the n-th distinct prompt (None: hold nothing)."""
        self.hold_at = n
        self.held.clear()
        self._release.clear()

    def release(self) -> None:
        self._release.set()

    @staticmethod
    def plan(prompt: str) -> tuple[list[str], str]:
        """(faults of the prompt's first calls, the answer): 0, 1 or 2 faults, from the prompt's hash."""
        h = int(hashlib.sha256(prompt.encode()).hexdigest(), 16)
        faults = [FAULTS[(h >> 8 + i) % len(FAULTS)] for i in range((0, 0, 1, 1, 2)[h % 5])]
        return faults, f"Comment: The passage is item {h % 997} of the set.\nScore: {1 + (h >> 4) % 5}"

    def fate(self, prompt: str) -> str:
        faults, _ = self.plan(prompt)
        with self._lock:
            self.received += 1
            self.last_call = time.monotonic()
            new = prompt not in self._served
            if new and self.hold_at is not None and len(self._served) + 1 == self.hold_at:
                self._served[prompt] += 0  # seen: its later calls are served normally
                self.held.set()
                return "hold"
            n = self._served[prompt]
            self._served[prompt] += 1
            fate = faults[n] if n < len(faults) else "pass"
            if fate != "pass":
                self.injected[fate] += 1
            return fate

    def answer(self, handler: BaseHTTPRequestHandler, prompt: str) -> None:
        fate = self.fate(prompt)
        if fate == "hold":
            self._release.wait()
            handler.close_connection = True
            return  # no answer: the client that sent it is gone
        if fate == "drop":
            handler.close_connection = True  # closed without an answer: the client sees a reset
            return
        text = self.plan(prompt)[1]
        tokens = text.replace("\n", " \n").split(" ")
        entries = [
            {"token": t, "logprob": -0.25, "top_logprobs": [{"token": t, "logprob": -0.25}]} for t in tokens
        ]
        completion = {
            "id": "chatcmpl-teacher", "object": "chat.completion", "created": 0, "model": "teacher",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": "stop", "logprobs": {"content": entries}}],
            "usage": {"prompt_tokens": 50, "completion_tokens": len(tokens), "total_tokens": 50 + len(tokens)},
        }  # fmt: skip
        status, headers, body = 200, {}, json.dumps(completion).encode()
        if fate == "truncated":
            body = body[: len(body) // 2]
        elif fate in ("429", "500"):
            status, body = int(fate), b'{"error": {"message": "injected", "type": "server_error"}}'
            headers = {"Retry-After": "0"} if fate == "429" else {}
        handler.send_response(status)
        for k, v in {"Content-Type": "application/json", "Content-Length": str(len(body)), **headers}.items():
            handler.send_header(k, v)
        handler.end_headers()
        handler.wfile.write(body)
        with self._lock:
            self.answered += 1
            self.last_call = time.monotonic()


@pytest.fixture
def teacher():
    server = Teacher()
    yield server
    server.close()


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen]]:
    """The runs a test started: killed at its end if still running (a failed test)."""
    runs: list[subprocess.Popen] = []
    yield runs
    for run in runs:
        if run.poll() is None:
            run.kill()
            run.wait(60)


def annotate(teacher: Teacher, qa: Path, out: Path, started: list[subprocess.Popen]) -> subprocess.Popen:
    argv = [
        sys.executable,
        "-m",
        "r3forge",
        "annotate",
        "verbal",
        "--qa_path",
        str(qa),
        "--output_dir",
        str(out),
    ]
    argv += [
        "--max_questions",
        "6",
        "--max_docs_per_question",
        "4",
        "--batch_size",
        "4",
        "--concurrency",
        "1",
    ]
    argv += [
        "--backend",
        "openai",
        "--model",
        "teacher",
        "--base_url",
        teacher.base_url,
        "--progress",
        "false",
    ]
    env = os.environ | {"NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"}
    started.append(subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    return started[-1]


def kill_when_held(teacher: Teacher, run: subprocess.Popen, out: Path) -> None:
    """SIGKILL `run` once the teacher holds its request, no other call came for QUIET_S and the run has
    saved the counts of every call the teacher served (on a loaded machine the client may take a while to
    read an answer: killed before that, it has not seen it, so it cannot count it)."""
    deadline = time.monotonic() + 600  # a loaded 2-core machine takes minutes to start a run

    def settled() -> bool:
        if not teacher.held.is_set() or time.monotonic() - teacher.last_call < QUIET_S:
            return False
        saved = read_faults(out)
        return {k: saved.get(k) for k in ("attempts", "retries", "retries_by_cause")} == counts_of(teacher)

    while not settled():
        assert run.poll() is None, f"the run ended before the kill: {run.communicate()}"
        assert time.monotonic() < deadline, f"held: {teacher.held.is_set()}; saved: {read_faults(out)}"
        time.sleep(0.1)
    run.kill()
    run.wait(30)
    assert run.returncode == -9
    teacher.release()


def counts_of(teacher: Teacher) -> dict:
    """The fault counts the client must have recorded for what the teacher served (no request given up)."""
    return {"attempts": teacher.received, "retries": sum(teacher.injected.values()),
            "retries_by_cause": {CAUSE[f]: n for f, n in sorted(teacher.injected.items())}}  # fmt: skip


def recorded(faults: dict) -> dict:
    assert faults["failed_requests"] == {} and faults["timeouts"] == 0, faults
    return {k: faults[k] for k in ("attempts", "retries", "retries_by_cause")}


def test_killed_runs_resume_with_every_record_and_every_teacher_call_counted_once(
    teacher, started, shared_data, tmp_path
):
    qa, out = shared_data / QA, tmp_path / "verbal"
    items = list(qa_items(load_qa(qa), max_questions=6, max_docs=4))  # 24 pairs, 6 batches of 4

    teacher.hold(10)  # in the 3rd batch: batches 1-2 are written, the 3rd is lost
    kill_when_held(
        teacher, annotate(teacher, qa, out, started), out
    )  # once its calls' counts are saved, mid-batch
    assert recorded(read_faults(out)) == counts_of(teacher)
    assert len(load_accepted(out)) + len(load_rejected(out)) == 8

    teacher.hold(18)  # the resumed run: batch 3 again, then 13-16, then 17-20 is held
    kill_when_held(teacher, annotate(teacher, qa, out, started), out)
    assert recorded(read_faults(out)) == counts_of(teacher)  # the resumed run added only its own calls
    assert len(load_accepted(out)) + len(load_rejected(out)) == 16

    teacher.hold(None)
    done = annotate(teacher, qa, out, started)
    stdout, stderr = done.communicate(timeout=600)
    assert done.returncode == 0, stderr
    assert json.loads(stdout.strip().splitlines()[-1])["processed"] == 8
    assert teacher.received == teacher.answered + teacher.injected["drop"] + 2  # and the 2 held calls
    assert sum(teacher.injected.values()) / teacher.received > 0.3
    assert set(teacher.injected) == set(FAULTS)
    manifest = read_manifest(out)
    assert recorded(manifest["faults"]) == counts_of(teacher) and manifest["failed"] == 0

    report = json.loads((out / "report.json").read_text())
    assert report["faults"] == manifest["faults"]
    assert (report["pairs_requested"], report["pairs_annotated"], report["pairs_failed"]) == (24, 24, 0)
    assert report["pairs_not_sent"] == 0
    assert report["pairs_annotated"] == report["pairs_accepted"] + report["pairs_rejected"]
    assert all(k in report["counts"] for k in report if k.startswith("pairs_"))

    # nothing lost, duplicated or changed: the records of a run without faults or kills
    lines = [json.loads(line) for path in out.glob("*ed-*.jsonl") for line in path.read_text().splitlines()]
    assert sorted(r["key"] for r in lines if "raw" in r) == sorted({r["key"] for r in lines if "raw" in r})
    teacher.injected.clear()
    plain = tmp_path / "plain"
    backend = OpenAIHTTPBackend(OpenAIHTTPConfig(base_url=teacher.base_url, model="teacher"))
    config = EngineConfig(output_dir=str(plain), model="teacher", batch_size=8, progress=False)
    teacher._served.clear()  # a fresh count: the plain run gets its prompts' faults too, retried
    run_step(VerbalAnnotationStep(), items, backend, config)

    def answers(folder: Path) -> dict:
        got = {r["key"]: (r["comment"], r["score"], r["score_logprob"]) for r in load_accepted(folder)}
        return got | {r["key"]: (r["reason"],) for r in load_rejected(folder)}

    assert answers(out) == answers(plain) and len(answers(plain)) == 24
