"""configs/rewrite/qream_ft_llama32_1b.yaml, its header run as written on loopback: the tier's QREAM-FT
student (`qream_sft_run`'s final/) served with `--max-model-len 8192`, the fixed reader served under
`meta-llama/Meta-Llama-3-8B-Instruct` (the embedded model behind it), r_raw the top-5 of the tier's retriever
for held-out HotpotQA dev questions; every other key as written (method ft, rewrites of up to 512 tokens,
evaluate: the reader answers from r_raw and from the rewrite)."""

from __future__ import annotations

import dataclasses
import json

import pytest
import yaml

from r3forge.data.loaders import load_qa

from .conftest import override_flags, read_jsonl, run_command
from .headers import CONFIGS, header_command, served_model

CONFIG = "rewrite/qream_ft_llama32_1b.yaml"
QUESTIONS = 3


@pytest.mark.slow
def test_qream_ft_rewrite_runs(qream_sft_run, retriever_url, llm_server, hotpot, smollm2_path, paper_root):
    final = qream_sft_run[0] / "final"
    student_cmd, reader_cmd = (header_command(CONFIG, "launch/serve_vllm.sh", index=i) for i in (0, 1))
    # the header serves the SFT run's final/ under its path: here the tier's own run folder
    student = llm_server(dataclasses.replace(served_model(student_cmd, str(final)), name=str(final)))
    reader = llm_server(served_model(reader_cmd, str(smollm2_path)))
    assert student.config.max_model_len == reader.config.max_model_len == 8192

    out = paper_root / "rewrite" / "qream_ft_hotpotqa_llama32_1b"
    cmd = header_command(CONFIG, "r3forge", "rewrite")
    cmd += override_flags(qa_path=hotpot["dev"], max_questions=QUESTIONS, retriever_url=retriever_url,
                          base_url=student.base_url, reader_base_url=reader.base_url, model=final,
                          tokenizer=final, output_dir=out)  # fmt: skip
    run_command([*cmd, "--progress", "false"], paper_root / "logs" / "rewrite-qream-ft.log", 1800)

    values = yaml.safe_load((CONFIGS / CONFIG).read_text())
    report = json.loads((out / "report.json").read_text())
    assert report["method"] == values["method"] == "ft" and report["questions"] == QUESTIONS
    assert report["rewritten"] + sum(report["fallbacks"].values()) == QUESTIONS
    for key in ("em_raw", "f1_raw", "tk_raw", "em_rewrite", "f1_rewrite", "tk_rewrite"):
        assert report[key] is not None, key  # evaluate: true, as written
    rows = read_jsonl(out / "evidence.jsonl")
    questions = load_qa(str(hotpot["dev"]))[:QUESTIONS]
    assert [r["question_id"] for r in rows] == questions["id"]
    for row in rows:
        assert row["raw"].count("\n\n") >= values["top_k"] - 1  # the retriever's top-5
        assert (row["rewrite"] is None) == bool(row["fallback"]) and row["answer_raw"] is not None
    for stage, model in (("rewrite", str(final)), ("reader", values["reader_model"])):
        manifest = json.loads((out / stage / "manifest.json").read_text())
        assert manifest["model"].startswith(model if stage == "reader" else "final"), (
            stage,
            manifest["model"],
        )
