"""`r3forge annotate qream` killed (SIGKILL) at random points in its stages, then rerun: the final outputs
equal an uninterrupted run's. Batches of one item make the transformers backend's greedy outputs independent
of how a resumed run groups its requests, so the comparison can be exact (~4 min: slow)."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest


def command(shared_data: Path, smollm2_path: Path, out: Path) -> list[str]:
    cmd = [sys.executable, "-m", "r3forge", "annotate", "qream"]
    cmd += ["--qa_path", str(shared_data / "hotpotqa" / "rpt_distractor_dev_sample_dev.jsonl")]
    cmd += ["--seed_qa_path", str(shared_data / "hotpotqa" / "rpt_distractor_dev_sample_train.jsonl")]
    cmd += ["--max_questions", "3", "--num_seeds", "2", "--rounds", "2", "--prefix_tokens", "30"]
    cmd += ["--top_k", "2", "--rewrite_max_tokens", "96", "--max_facts", "3", "--seed_words", "40"]
    cmd += ["--backend", "hf", "--model", str(smollm2_path), "--orient_model", ""]
    return [*cmd, "--output_dir", str(out), "--batch_size", "1", "--progress", "false"]


def outputs(out: Path) -> list[str]:
    return sorted((out / "candidates.jsonl").read_text().splitlines())


@pytest.mark.slow
def test_kill_anywhere_then_resume_gives_the_uninterrupted_outputs(shared_data, smollm2_path, tmp_path):
    log = tmp_path / "log.txt"
    with open(log, "ab") as err:
        subprocess.run(command(shared_data, smollm2_path, tmp_path / "reference"), check=True,
                       stdout=subprocess.DEVNULL, stderr=err, timeout=600)  # fmt: skip
    out, rng, landed = tmp_path / "killed", random.Random(0), 0
    for _ in range(3):
        with open(log, "ab") as err:
            proc = subprocess.Popen(
                command(shared_data, smollm2_path, out), stdout=subprocess.DEVNULL, stderr=err
            )
        time.sleep(rng.uniform(6, 30))  # model load takes ~5 s; then anywhere in seeds .. fact judging
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            landed += 1
        proc.wait()
    assert landed >= 2
    with open(log, "ab") as err:
        final = subprocess.run(command(shared_data, smollm2_path, out), stdout=subprocess.DEVNULL, stderr=err,
                               timeout=600)  # fmt: skip
    assert final.returncode == 0, log.read_text(errors="replace")[-3000:]
    assert outputs(out) == outputs(tmp_path / "reference")
    report = json.loads((out / "report.json").read_text())
    assert report == json.loads((tmp_path / "reference" / "report.json").read_text())
