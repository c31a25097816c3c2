"""configs/eval/igp_qwen2.5-7b_vllm.yaml, its header run as written on loopback: the generator served under
`Qwen/Qwen2.5-7B-Instruct` with the header's `--max-logprobs 128 --enable-prefix-caching` (the embedded model
behind it), a BM25 index over a FlashRAG Wikipedia corpus (`r3forge index build` as the header writes it), NQ
test questions in FlashRAG's format, every other key as written: N = 5, methods none / ig / igp, Top-M 1, 3,
5, six T_p, probe K = 128 over HTTP, 32 probe steps; then the header's `eval report`."""

from __future__ import annotations

import json

import pytest
import yaml

from .conftest import NQ_FLASHRAG, override_flags, read_jsonl, run_command
from .headers import CONFIGS, header_command, served_model

CONFIG = "eval/igp_qwen2.5-7b_vllm.yaml"
QUESTIONS = 2


@pytest.mark.slow
def test_igp_paper_config_runs(llm_server, smollm2_path, shared_data, paper_root):
    logs = paper_root / "logs"
    server = llm_server(served_model(header_command(CONFIG, "vllm", "serve"), str(smollm2_path)))
    assert "--enable-prefix-caching" in server.extra_args and server.config.max_logprobs == 128

    index = paper_root / "indexes" / "wiki18-bm25"
    build = header_command(CONFIG, "r3forge", "index", "build")
    run_command([*build, *override_flags(corpus=shared_data / "flashrag/sample_data.jsonl", output=index)],
                logs / "index-bm25.log")  # fmt: skip

    out = paper_root / "eval" / "igp_qwen7b_nq"
    rag = header_command(CONFIG, "r3forge", "eval", "rag")
    rag += override_flags(qa_path=shared_data / NQ_FLASHRAG, max_questions=QUESTIONS, index=index,
                          base_url=server.base_url, tokenizer=smollm2_path, output_dir=out)  # fmt: skip
    run_command([*rag, "--progress", "false"], logs / "eval-igp.log", timeout_s=2400)

    values = yaml.safe_load((CONFIGS / CONFIG).read_text())
    resolved = yaml.safe_load((out / "config.yaml").read_text())
    for key in ("num_candidates", "methods", "top_m", "probe_k", "probe_max_steps", "answer_max_tokens",
                "max_concurrency", "batch_size", "backend", "model"):  # fmt: skip
        assert resolved[key] == values[key], key  # as written
    assert resolved["max_logprobs"] == 128  # the client lets K = 128 through, as the server does
    rows = read_jsonl(out / "rows.jsonl")
    # one row per question x point: none and ig over Top-M {1, 3, 5}, igp over Top-M x the six T_p
    assert len(rows) == QUESTIONS * (3 + 3 + 3 * 6)
    assert {r["dataset"] for r in rows} == {"nq"} and {r["top_m"] for r in rows} == {1, 3, 5}
    assert sorted({r["threshold"] for r in rows if r["method"] == "igp"}) == sorted(values["thresholds"])
    assert all(r["tk"] > 0 and "f1" in r for r in rows)
    questions = read_jsonl(out / "questions.jsonl")
    assert len(questions) == QUESTIONS and all(len(q["candidates"]) == 5 for q in questions)  # N = 5
    stats = json.loads((out / "ig_stats.json").read_text())
    assert set(stats) >= {"ig", "igp"} and stats["igp"]["nu_question_mean"] > 0  # the generator probed itself
    for name in ("table.md", "summary.json", "tuned.md"):
        assert (out / name).stat().st_size > 0, name

    report = header_command(CONFIG, "r3forge", "eval", "report")
    table = paper_root / "eval" / "table"
    run_command([*report, *override_flags(runs=out, output_dir=table)], logs / "eval-report.log")
    assert "nq" in (table / "table.md").read_text()
