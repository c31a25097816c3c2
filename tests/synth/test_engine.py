"""The synthesis engine end to end: a one-word-answer step on synthetic-world questions, answered by the
embedded SmolLM2 through the real transformers backend (greedy, 4 new tokens: ~1 s per item on this CPU),
plus SIGKILL/resume runs of the command line in subprocesses.

The step lives in `JOB`, written to a folder that both this process and the subprocesses import
(`synth_job`).
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import datasets
import huggingface_hub
import pytest

from r3forge.backends import HFLocalBackend, HFLocalConfig
from r3forge.cli import run_command
from r3forge.config import missing_help
from r3forge.data.synth_world import SynthWorldConfig, generate_world
from r3forge.errors import ConfigError
from r3forge.identity import model_identity
from r3forge.models import resolve_model
from r3forge.synth import (
    EngineConfig,
    Rejected,
    SynthError,
    load_accepted,
    load_rejected,
    merge_shards,
    push_to_hub,
    run_step,
)
from r3forge.synth.cli import MergeArgs, RunArgs
from r3forge.synth.export import HubConfig
from r3forge.synth.store import MANIFEST, read_manifest, record_files

# what the engine records for an HF backend over the embedded model's folder: its name @ a content hash
MODEL_ID = model_identity(resolve_model("smollm2-135m-instruct"))

JOB = '''
"""A one-word-answer synthesis step (tests only)."""

from r3forge.backends.base import GenerationRequest
from r3forge.synth import Rejected


class OneWordAnswer:
    """Answer a question in one word; reject empty and overlong (> 2 words) answers."""

    name = "one_word_answer"
    version = "v1"

    def __init__(self, max_tokens: int = 4):
        self.max_tokens = max_tokens

    def key(self, item):
        return {"id": item["id"]}

    def prompt(self, item):
        messages = [
            {"role": "system", "content": "Answer with one word only."},
            {"role": "user", "content": item["question"]},
        ]
        return GenerationRequest(messages=messages, max_tokens=self.max_tokens)

    def parse(self, item, result):
        text = result.choices[0].text.strip()
        if not text:
            return Rejected("empty")
        words = text.split()
        if len(words) > 2:
            return Rejected("overlong", f"{len(words)} words")
        return {"answer": text, "question": item["question"]}
'''


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    """The `JOB` module, written to a folder (`job.FOLDER`) that subprocesses put on PYTHONPATH."""
    folder = tmp_path_factory.mktemp("job")
    (folder / "synth_job.py").write_text(JOB, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("synth_job", folder / "synth_job.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.FOLDER = folder
    return module


@pytest.fixture(scope="module")
def questions() -> list[dict]:
    world = generate_world(SynthWorldConfig(num_passages=50, num_questions=12, seed=0))
    return [{"id": q["id"], "question": q["question"]} for q in world.questions]


@pytest.fixture(scope="module")
def many_questions() -> list[dict]:
    """Enough items (~5 s of generation here) that every SIGKILL lands while the CLI is still writing."""
    world = generate_world(SynthWorldConfig(num_passages=200, num_questions=60, seed=1))
    return [{"id": q["id"], "question": q["question"]} for q in world.questions]


@pytest.fixture(scope="module")
def hf_backend(smollm2_path: Path) -> HFLocalBackend:
    return HFLocalBackend.from_config(HFLocalConfig(model=str(smollm2_path), batch_size=8))


@pytest.fixture(scope="module")
def single_run(job, questions, hf_backend, tmp_path_factory) -> tuple[Path, object]:
    """One unsharded run over the first 8 questions (batches of 4)."""
    out = tmp_path_factory.mktemp("single")
    config = EngineConfig(output_dir=str(out), batch_size=4)
    return out, run_step(job.OneWordAnswer(), questions[:8], hf_backend, config)


def keys_of(root: Path, kind: str) -> list[str]:
    """Every record key in a folder's files of one kind, duplicates included."""
    return [json.loads(line)["key"] for p in record_files(root, kind) for line in p.read_text().splitlines()]


def all_keys(root: Path) -> tuple[set[str], set[str]]:
    accepted, rejected = keys_of(root, "accepted"), keys_of(root, "rejected")
    assert len(accepted) == len(set(accepted)) and len(rejected) == len(set(rejected)), "duplicate records"
    assert not set(accepted) & set(rejected)
    return set(accepted), set(rejected)


class NoBackend:
    """Fails the test if anything is generated."""

    name = "none"
    model_id = MODEL_ID

    def generate(self, requests):
        raise AssertionError(f"unexpected generation of {len(requests)} requests")

    def close(self):
        pass


def test_run_writes_records_rejects_parquet_and_card(single_run):
    out, summary = single_run
    assert summary.seen == summary.pending == summary.processed == 8 and summary.requests == 8
    assert summary.accepted + summary.rejected == 8 and summary.accepted >= 1 and summary.rejected >= 1
    assert sum(summary.reject_reasons.values()) == summary.rejected
    accepted_keys, rejected_keys = all_keys(out)
    assert len(accepted_keys) == summary.accepted and len(rejected_keys) == summary.rejected

    accepted, rejected = load_accepted(out), load_rejected(out)
    assert set(accepted["key"]) == accepted_keys and set(rejected["key"]) == rejected_keys
    assert all(len(a.split()) <= 2 for a in accepted["answer"])  # rejected outputs never reach accepted
    assert set(rejected["reason"]) <= {"empty", "overlong"}
    row = accepted[0]
    assert row["model"] == MODEL_ID and row["version"] == "v1" and row["step"] == "one_word_answer"
    assert json.loads(row["sampling"])[0]["max_tokens"] == 4 and row["input"]["id"].startswith("w0-q")
    assert row["raw"][0][0].strip() == row["answer"] and row["reasoning"] == [[None]]
    assert row["completion_tokens"] > 0 and row["prompt_tokens"] > 0 and row["latency_s"] > 0

    parquet = datasets.Dataset.from_parquet(str(out / "data/train-00000-of-00001.parquet"))
    assert sorted(parquet["key"]) == sorted(accepted_keys)
    assert (
        len(datasets.Dataset.from_parquet(str(out / "rejected/train-00000-of-00001.parquet")))
        == summary.rejected
    )
    card = (out / "README.md").read_text(encoding="utf-8")
    assert f"teacher `{MODEL_ID}`" in card and "prompt version `v1`" in card
    assert f"| accepted | {summary.accepted} |" in card and "### completion tokens" in card
    for reason, n in summary.reject_reasons.items():
        assert f"| `{reason}` | {n} |" in card
    manifest = read_manifest(out)
    assert manifest["accepted"] == summary.accepted and manifest["shards"]["00000-of-00001"]["complete"]


def test_rerun_resumes_with_nothing_to_do(job, questions, single_run):
    out, _ = single_run
    before = {p.name: p.read_bytes() for p in out.glob("*.jsonl")}
    summary = run_step(job.OneWordAnswer(), questions[:8], NoBackend(), EngineConfig(output_dir=str(out)))
    assert summary.cached == 8 and summary.pending == summary.processed == 0
    assert {p.name: p.read_bytes() for p in out.glob("*.jsonl")} == before
    # a new prompt version or other sampling is a different cache key: everything is pending again
    dry = EngineConfig(output_dir=str(out), dry_run=True, model=MODEL_ID)
    assert run_step(job.OneWordAnswer(max_tokens=5), questions[:8], None, dry).pending == 8
    with pytest.raises(ConfigError, match="needs a generation backend"):
        run_step(job.OneWordAnswer(), questions, None, EngineConfig(output_dir=str(out)))


def test_dry_run_counts_requests_and_prompt_tokens(
    job, questions, single_run, hf_backend, smollm2_path, capsys
):
    out, _ = single_run
    step = job.OneWordAnswer()
    files = sorted(p.name for p in out.iterdir())
    summary = run_step(step, questions, hf_backend, EngineConfig(output_dir=str(out), dry_run=True))
    expected = sum(len(hf_backend.encode(step.prompt(q))) for q in questions[8:])
    assert (summary.seen, summary.cached, summary.pending, summary.requests) == (12, 8, 4, 4)
    assert summary.prompt_tokens == expected and summary.max_completion_tokens == 4 * 4
    assert f"4 requests, {expected} prompt tokens" in capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == files  # nothing written
    # without a backend: the tokenizer named in the config
    config = EngineConfig(output_dir=str(out), dry_run=True, model=MODEL_ID, tokenizer=str(smollm2_path))
    assert run_step(step, questions, None, config).prompt_tokens == expected


def test_shards_split_the_items_and_merge_equals_one_run(job, questions, hf_backend, single_run, tmp_path):
    out, _ = single_run
    shards = [tmp_path / "s0", tmp_path / "s1"]
    summaries = [
        run_step(
            job.OneWordAnswer(), questions[:8], hf_backend, EngineConfig(output_dir=str(d), shard=f"{i}/2")
        )
        for i, d in enumerate(shards)
    ]
    assert [s.pending + s.out_of_shard for s in summaries] == [8, 8]
    assert summaries[0].pending + summaries[1].pending == 8 and min(s.pending for s in summaries) > 0
    keys = [set().union(*all_keys(d)) for d in shards]
    assert not keys[0] & keys[1]
    assert not (shards[0] / "README.md").exists()  # a shard is not exported on its own

    single = set().union(*all_keys(out))
    assert (
        run_command(
            "synth", ["merge", "--inputs", *map(str, shards), "--output_dir", str(tmp_path / "merged")]
        )
        == 0
    )
    assert set().union(*all_keys(tmp_path / "merged")) == single
    assert len(load_accepted(tmp_path / "merged")) + len(load_rejected(tmp_path / "merged")) == 8
    manifest = read_manifest(tmp_path / "merged")
    assert manifest["shards"]["00000-of-00001"]["complete"] and len(manifest["merged_from"]) == 2
    # overlapping inputs (a shard twice, the single run too): duplicates dropped
    merged = merge_shards([shards[0], out, shards[0]], tmp_path / "merged", overwrite=True)
    assert set().union(*all_keys(merged)) == single
    with pytest.raises(SynthError, match="not empty"):
        merge_shards(shards, tmp_path / "merged")


def test_merge_refuses_folders_of_different_runs(job, questions, hf_backend, tmp_path):
    for name, version in (("a", "v1"), ("b", "v2")):
        step = job.OneWordAnswer()
        step.version = version
        run_step(step, questions[:3], hf_backend, EngineConfig(output_dir=str(tmp_path / name)))
    with pytest.raises(SynthError, match=r"merge: .*b/manifest.json: .*version: 'v2' there vs 'v1' in .*a\)"):
        merge_shards([tmp_path / "a", tmp_path / "b"], tmp_path / "m")
    with pytest.raises(SynthError, match="not a synthesis output folder"):
        merge_shards([tmp_path / "a", tmp_path / "nothing"], tmp_path / "m")
    assert not (tmp_path / "m").exists()


def test_parse_policy_and_output_checks(job, questions, hf_backend, tmp_path):
    class Broken(job.OneWordAnswer):
        def parse(self, item, result):
            if item["id"].endswith("2"):
                raise ValueError("bad output")
            return {"key": "clash"} if item["id"].endswith("3") else Rejected("meh")

    def run(name: str, **config):
        output_dir = str(tmp_path / name)
        return run_step(Broken(), questions[:4], hf_backend, EngineConfig(output_dir, **config))

    with pytest.raises(SynthError, match=r"parse\(\) failed on item \{'id': 'w0-q00002'\}: ValueError"):
        run("a", batch_size=1)
    assert len(keys_of(tmp_path / "a", "rejected")) == 1  # the batch before the failure is kept
    with pytest.raises(SynthError, match=r"reserved field\(s\) \['key'\]"):
        run("b", batch_size=1, on_parse_error="reject")
    summary = run("c", max_items=2, on_parse_error="reject", concurrency=2, batch_size=1)
    assert summary.reject_reasons == {"meh": 1, "parse_error": 1}


def test_every_config_field_has_help():
    for config in (EngineConfig, RunArgs, MergeArgs, HubConfig):
        assert missing_help(config) == [], config


def test_push_to_hub_fails_clearly(single_run, tmp_path, monkeypatch):
    out, _ = single_run
    where = r"push to http://127\.0\.0\.1:9/datasets/org/name failed"
    with pytest.raises(SynthError, match=where + ": OfflineModeIsEnabled"):  # the tests run offline
        push_to_hub(out, "org/name", endpoint="http://127.0.0.1:9", token="hf_x")
    monkeypatch.setattr(huggingface_hub.constants, "is_offline_mode", lambda: False)
    with pytest.raises(SynthError, match=where + r": \w*ConnectError"):  # nothing listens on port 9
        push_to_hub(out, "org/name", endpoint="http://127.0.0.1:9", token="hf_x")
    with pytest.raises(SynthError, match="nothing exported"):
        push_to_hub(tmp_path, "org/name")


def run_with_kills(cmd: list[str], env: dict, out: Path, kills: int, seed: int, max_delay_s: float) -> int:
    """Run `cmd`, SIGKILL it `kills` times at seeded random moments once it is writing, then run it to the
    end. Returns how many kills landed (a run may finish before its kill)."""
    rng, landed, log = random.Random(seed), 0, out.parent / f"{out.name}.log"

    def written() -> int:
        return sum(p.stat().st_size for p in out.glob("*.jsonl")) if out.is_dir() else 0

    for _ in range(kills):
        with open(log, "ab") as stderr:
            proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=stderr)
        start, deadline = written(), time.monotonic() + 120
        while written() <= start and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)  # wait until this process has written a batch: it is in its write loop
        time.sleep(rng.uniform(0, max_delay_s))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            landed += 1
        proc.wait()
    with open(log, "ab") as stderr:
        final = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=stderr, timeout=300)
    assert final.returncode == 0, log.read_text(errors="replace")[-3000:]
    return landed


def cli_command(job: ModuleType, items: Path, out: Path, *flags: str) -> tuple[list[str], dict]:
    cmd = [sys.executable, "-m", "r3forge.synth", "run", "--step", "synth_job:OneWordAnswer"]
    cmd += ["--input", str(items), "--output_dir", str(out), "--progress", "false", *flags]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(job.FOLDER), os.environ.get("PYTHONPATH", "")])}
    return cmd, env


def sigkill_and_resume(job, questions, hf_backend, smollm2_path, tmp_path, kills: int, seed: int) -> None:
    """`kills` SIGKILLs of the CLI generating with the transformers backend (batches of 2 questions), then a
    run to completion; the record key set must equal an uninterrupted run's, with no duplicates."""
    reference = tmp_path / "reference"
    run_step(
        job.OneWordAnswer(), questions, hf_backend, EngineConfig(output_dir=str(reference), batch_size=4)
    )
    (tmp_path / "items.jsonl").write_text("".join(json.dumps(q) + "\n" for q in questions), encoding="utf-8")
    out = tmp_path / "killed"
    cmd, env = cli_command(job, tmp_path / "items.jsonl", out, "--backend", "hf")
    cmd += ["--backend_model", str(smollm2_path), "--model", MODEL_ID, "--batch_size", "2"]
    landed = run_with_kills(cmd, env, out, kills=kills, seed=seed, max_delay_s=0.5)
    assert landed >= kills - 1
    # greedy outputs can differ in the last bits between batch compositions, so accepted vs rejected may
    # too: the union is what must match (all_keys also asserts no duplicates)
    assert set().union(*all_keys(out)) == set().union(*all_keys(reference))
    assert len(load_accepted(out)) + len(load_rejected(out)) == len(questions)
    assert read_manifest(out)["accepted"] == len(all_keys(out)[0]) and (out / MANIFEST).is_file()


def test_sigkill_twice_then_resume_equals_an_uninterrupted_run(
    job, questions, hf_backend, smollm2_path, tmp_path
):
    sigkill_and_resume(job, questions[:8], hf_backend, smollm2_path, tmp_path, kills=2, seed=0)


@pytest.mark.slow
def test_sigkill_real_teacher_several_times_then_resume(
    job, many_questions, hf_backend, smollm2_path, tmp_path
):
    sigkill_and_resume(job, many_questions, hf_backend, smollm2_path, tmp_path, kills=4, seed=1)
