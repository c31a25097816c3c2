"""configs/annotate/verbal_nq_gptoss120b.yaml, its header run as written on loopback: the teacher served
under `openai/gpt-oss-120b` (the embedded model behind it), the e5 retriever, the dry run, the four shards,
their merge, then the reranker SFT header's judge and export-sft of the merged run.

The embedded teacher without the few-shot demos (the paper config has none) writes no `Comment:` line, so
every pair is rejected and export-sft has nothing to export: the test checks that it says so (it wrote an
empty SFT set before). The reranker SFT tier therefore trains on `annotate rules` data (conftest)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from r3forge.annotate.verbal import REASONS
from r3forge.data.loaders import load_qa
from r3forge.retrieval import RetrieverClient
from r3forge.synth.export import load_accepted, load_rejected

from .conftest import NQ_FLASHRAG, override_flags, run_command
from .headers import flag, header_command, served_model

CONFIG = "annotate/verbal_nq_gptoss120b.yaml"
SFT = "sft/verbal_reranker_qwen2.5-1.5b.yaml"
TOP_N = 4  # pairs per question here (the paper: 50); the dry run keeps the YAML's 50


def test_dry_run_counts_requests(retriever_url, smollm2_path, shared_data, paper_root):
    """The header's dry run (no teacher): 2 questions x top_n 50 as written, prompt tokens counted with the
    teacher's tokenizer. In the default suite."""
    dry = header_command(CONFIG, "r3forge", "annotate", "verbal", index=1)
    assert "--dry_run" in dry
    out = paper_root / "annotate" / "verbal_nq_dry"
    flags = override_flags(qa_path=shared_data / NQ_FLASHRAG, max_questions=2, retriever_url=retriever_url,
                           tokenizer=smollm2_path, output_dir=out)  # fmt: skip
    log = run_command([*dry, *flags], paper_root / "logs" / "annotate-verbal-dry.log", timeout_s=600)
    assert "100 pending; dry run: 100 requests" in log
    tokens = int(log.split("dry run: 100 requests, ")[1].split(" prompt tokens")[0])
    assert tokens > 100 * 150  # the v1 instruction + question + a Wikipedia passage, per request
    assert "<= 204800 completion tokens" in log  # max_tokens 2048 as written (gpt-oss reasoning counts)


@pytest.fixture(scope="module")
def sharded_run(retriever_url, llm_server, smollm2_path, shared_data, paper_root) -> dict:
    """The four shard commands of the header, then its merge; the teacher: the header's server command."""
    teacher = llm_server(served_model(header_command(CONFIG, "launch/serve_vllm.sh"), str(smollm2_path)))
    root = paper_root / "annotate" / "verbal_nq"
    shard_cmd = header_command(CONFIG, "r3forge", "annotate", "verbal")
    assert flag(shard_cmd, "--shard") == "0/4" and flag(shard_cmd, "--output_dir").endswith("/s0")
    shards = []
    for i in range(4):  # "one shard per teacher node": --shard i/4 into s<i>
        cmd = [f"{i}/4" if token == "0/4" else token for token in shard_cmd]
        cmd += override_flags(qa_path=shared_data / NQ_FLASHRAG, max_questions=1, top_n=TOP_N,
                              retriever_url=retriever_url, tokenizer=smollm2_path, output_dir=root / f"s{i}",
                              base_url=teacher.base_url)  # fmt: skip
        shards.append(root / f"s{i}")
        run_command([*cmd, "--progress", "false"], paper_root / "logs" / f"annotate-verbal-s{i}.log", 1200)
    merge = header_command(CONFIG, "r3forge", "synth", "merge")
    merged = root / "all"
    run_command([*merge, "--inputs", *map(str, shards), *override_flags(output_dir=merged)],
                paper_root / "logs" / "merge.log")  # fmt: skip
    return {"shards": shards, "merged": merged, "teacher": teacher}


@pytest.mark.slow
def test_sharded_annotation_and_merge(sharded_run, retriever_url, shared_data):
    shards, merged = sharded_run["shards"], sharded_run["merged"]
    for i, shard in enumerate(shards):
        manifest = json.loads((shard / "manifest.json").read_text())
        assert manifest["model"] == "openai/gpt-oss-120b"  # the served name, as the config sends it
        assert next(iter(manifest["shards"].values()))["shard"] == f"{i}/4"
        for sampling in manifest["sampling"]:  # the YAML's teacher settings, as written
            assert sampling == [{"n": 1, "temperature": 0.0, "top_p": 1.0, "max_tokens": 2048, "stop": [],
                                 "seed": None, "top_logprobs": 5}]  # fmt: skip
    manifest = json.loads((merged / "manifest.json").read_text())
    records = [*load_accepted(merged), *load_rejected(merged)]
    assert manifest["accepted"] + manifest["rejected"] == len(records) == TOP_N
    assert (merged / "README.md").is_file()

    # the pairs are the question's top-n from the served e5 index, each answered by the teacher
    question = load_qa(str(shared_data / NQ_FLASHRAG))[0]
    with RetrieverClient(retriever_url) as client:
        top = [pid for pid, _ in client.search([question["question"]], TOP_N)[0]]
    inputs = [r["input"] if isinstance(r["input"], dict) else json.loads(r["input"]) for r in records]
    assert {i["question_id"] for i in inputs} == {question["id"]}
    assert sorted(i["doc_id"] for i in inputs) == sorted(top)
    for record in load_rejected(merged):
        raw = json.loads(record["raw"]) if isinstance(record["raw"], str) else record["raw"]
        assert record["reason"] in REASONS and raw[0][0].strip()


@pytest.mark.slow
def test_judge_and_export_sft_of_the_merged_run(sharded_run, paper_root: Path):
    """The reranker SFT header's next two commands: judge the merged run, export the approved pairs."""
    merged, teacher = sharded_run["merged"], sharded_run["teacher"]
    judge_dir, sft_dir = (
        paper_root / "annotate" / "verbal_nq_judge",
        paper_root / "annotate" / "verbal_nq_sft",
    )
    judge = header_command(SFT, "r3forge", "annotate", "judge")
    judge += override_flags(annotation_dir=merged, output_dir=judge_dir, base_url=teacher.base_url)
    run_command([*judge, "--progress", "false"], paper_root / "logs" / "judge.log")
    assert json.loads((judge_dir / "manifest.json").read_text())["model"] == "openai/gpt-oss-120b"

    export = header_command(SFT, "r3forge", "annotate", "export-sft")
    export += override_flags(input_dir=merged, judge_dir=judge_dir, output_dir=sft_dir)
    accepted = len(load_accepted(merged))
    if accepted == 0:  # the embedded teacher (see the module docstring)
        with pytest.raises(AssertionError, match=r"nothing to export: 0 accepted annotation\(s\)"):
            run_command(export, paper_root / "logs" / "export-sft.log")
        assert not sft_dir.exists()
    else:
        run_command(export, paper_root / "logs" / "export-sft.log")
        assert (sft_dir / "dataset_dict.json").is_file()
