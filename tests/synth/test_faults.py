"""A synthesis run against a misbehaving OpenAI-compatible teacher (the loopback `fault_server`: truncated
bodies, `{"oops": true}`, 500, 429, hangs): every item ends accepted, rejected or failed with a reason, the
faults are in the summary, `manifest.json` and the card, and a rerun against a healthy server completes the
failed items. No model: the server answers with the words of the prompt's marker."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from r3forge.backends import GenerationRequest, OpenAIHTTPBackend, OpenAIHTTPConfig, PartialFailure
from r3forge.backends.vllm_server import free_port
from r3forge.synth import EngineConfig, Rejected, load_accepted, load_rejected, merge_shards, run_step
from r3forge.synth.store import FAILED, iter_records, read_manifest

# prompt marker -> how the item ends (the server's fault on the first `times` calls; 2 attempts per request)
ITEMS = {
    "reply=paris": "accepted",
    "fault=truncated times=1": "accepted",
    "fault=oops times=1": "accepted",
    "fault=nologprobs times=1": "accepted",
    "fault=500 times=1": "accepted",
    "fault=429 times=1": "accepted",
    "fault=hang times=1": "accepted",
    "reply=far_too_many_words_here": "rejected",
    "fault=truncated times=9": "bad_response",
    "fault=oops times=9": "bad_response",
    "fault=500 times=9": "http_500",
    "fault=429 times=9": "rate_limited",
    "fault=hang times=9": "timeout",
}


class ShortAnswer:
    """Accept answers of at most three words; keep the score-token logprob."""

    name, version = "short_answer", "v1"

    def key(self, item: dict) -> dict:
        return {"id": item["id"]}

    def prompt(self, item: dict) -> GenerationRequest:
        return GenerationRequest(messages=[{"role": "user", "content": item["prompt"]}], top_logprobs=1)

    def parse(self, item: dict, result) -> dict | Rejected:
        choice = result.choices[0]
        if len(choice.text.split()) > 3:
            return Rejected("overlong", choice.text)
        return {"answer": choice.text, "logprob": choice.logprobs[0]}


def teacher(base_url: str, max_retries: int = 1) -> OpenAIHTTPBackend:
    return OpenAIHTTPBackend(
        OpenAIHTTPConfig(
            base_url=base_url, model="teacher", max_retries=max_retries, backoff_base_s=0.01,
            backoff_max_s=0.05, request_timeout_s=2.5,  # a loaded CPU's answer well within it
        )
    )  # fmt: skip


def outcomes(folder: Path) -> dict[str, str]:
    """Item id -> "accepted", "rejected", or the reason of its last failure (items not done)."""

    def name(row: dict) -> str:  # a Dataset holds `input` as a struct or as JSON text
        return (row["input"] if isinstance(row["input"], dict) else json.loads(row["input"]))["id"]

    out = {name(r): r["reason"] for r in iter_records([folder], FAILED)}
    out |= {name(r): "rejected" for r in load_rejected(folder)}
    return out | {name(r): "accepted" for r in load_accepted(folder)}


def test_bad_responses_fail_their_items_only_and_a_rerun_completes_them(fault_server, tmp_path, capsys):
    items = [{"id": f"q{i}", "prompt": prompt} for i, prompt in enumerate(ITEMS)]
    out = tmp_path / "run"
    config = EngineConfig(output_dir=str(out), batch_size=4, concurrency=2, progress=False)
    summary = run_step(ShortAnswer(), items, teacher(fault_server.base_url), config)

    expected = {item["id"]: ITEMS[item["prompt"]] for item in items}
    assert outcomes(out) == expected
    failure_reasons = {"bad_response": 2, "http_500": 1, "rate_limited": 1, "timeout": 1}
    assert (summary.processed, summary.accepted, summary.rejected, summary.failed) == (13, 7, 1, 5)
    assert summary.failure_reasons == failure_reasons
    by_cause = {"429": 1 + 1, "500": 1 + 1, "bad_response": 3 + 2, "timeout": 1 + 1}
    assert summary.faults["retries_by_cause"] == by_cause, summary.faults
    assert summary.faults["timeouts"] == 1 + 2 and summary.faults["retries"] == 11
    line = capsys.readouterr().err
    assert "5 failed" in line and "a rerun retries them" in line and "teacher faults:" in line

    manifest = read_manifest(out)
    assert (manifest["accepted"], manifest["rejected"], manifest["failed"]) == (7, 1, 5)
    assert manifest["failure_reasons"] == failure_reasons and manifest["faults"] == summary.faults
    assert manifest["faults"]["failed_requests"] == failure_reasons
    assert not manifest["shards"]["00000-of-00001"]["complete"]
    card = (out / "README.md").read_text(encoding="utf-8")
    assert "## Teacher faults" in card and '"bad_response": 2' in card
    merged = read_manifest(merge_shards([out], tmp_path / "merged"))  # a merge keeps what is left to do
    assert (merged["failed"], merged["failure_reasons"], merged["faults"]) == (
        5,
        failure_reasons,
        summary.faults,
    )

    fault_server.healthy = True
    rerun = run_step(ShortAnswer(), items, teacher(fault_server.base_url), config)
    assert (rerun.cached, rerun.processed, rerun.accepted, rerun.failed) == (8, 5, 5, 0)
    assert rerun.faults["retries"] == 0 and rerun.faults["attempts"] == 5
    assert set(outcomes(out).values()) == {"accepted", "rejected"}
    assert len(load_accepted(out)) == 12
    manifest = read_manifest(out)
    assert (manifest["accepted"], manifest["failed"], manifest["failure_reasons"]) == (12, 0, {})
    assert manifest["faults"]["retries"] == summary.faults["retries"]  # summed over both runs
    assert manifest["faults"]["attempts"] == summary.faults["attempts"] + 5
    assert manifest["shards"]["00000-of-00001"]["complete"]


def test_a_batch_that_cannot_connect_stops_the_run(tmp_path):
    """Every request of a batch refused: the server is down, so the run stops (a rerun resumes) instead of
    trying, and failing, every item in turn."""
    config = EngineConfig(output_dir=str(tmp_path), batch_size=2, progress=False)
    items = [{"id": "q0", "prompt": "reply=a"}, {"id": "q1", "prompt": "reply=b"}]
    with pytest.raises(PartialFailure, match=r"2 of 2 requests failed .*\(connection\).*r3forge serve llm"):
        run_step(ShortAnswer(), items, teacher(f"http://127.0.0.1:{free_port()}/v1", max_retries=0), config)
    manifest = read_manifest(tmp_path)
    assert (manifest["accepted"], manifest["failed"]) == (0, 0)
    assert manifest["faults"]["failed_requests"] == {"connection": 2}
