"""Repeat the numerical-equality tests (tests/TOLERANCES.md) N times per torch thread count, each run a fresh
pytest process, and tally pass / fail per test, so "20 runs with 1 and with 2 threads without a failure"
comes from a file, not from memory:

    nice -n 19 .venv/bin/python tests/repeat_numeric.py --group lm_head logprobs --runs 20 --threads 1 2

The thread count is set with OMP_NUM_THREADS / MKL_NUM_THREADS, which torch reads when it starts (the
summary records `torch.get_num_threads()` under each setting; tests/igp/test_setaware.py pins 1 thread for
its own module whatever the setting). Results go to `--out` (default runs/tolerances/, not committed):
`t{threads}/{group}-{i}.xml` (junit) per run and `summary.md` / `summary.json`, rewritten after every run.
A rerun resumes: runs whose XML exists are read, not repeated. Exit status 1 when any run had a failure.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# the default suite's numerical comparisons (tests/TOLERANCES.md), riskiest first; the slow ones are listed
# there (not repeated). The default: every group but `vllm`.
GROUPS = {
    "lm_head": ["tests/sft/test_train.py"],  # tiled vs fused LM head: log-probs, entropy, gradients
    "logprobs": [  # padded / KV-cache generation vs one teacher-forced pass
        "tests/backends/test_hf_local.py::test_batched_left_padding_matches_one_by_one",
        "tests/backends/test_hf_local.py::test_logprobs_match_a_teacher_forced_forward_pass",
        "tests/agent/test_rollout.py::test_real_policy_logprobs_match_a_forward_pass_over_the_kept_ids",
    ],
    "grpo": [  # the GRPO loss on real rollouts
        "tests/agent/test_grpo.py::test_masked_tokens_move_neither_loss_nor_kl_nor_entropy",
        "tests/agent/test_grpo.py::test_pinned_loss_is_the_search_r1_token_mean_over_policy_tokens",
    ],
    "packed": ["tests/agent/test_packed.py"],  # the packed, mask-aware step vs TRL's padded step
    "default": [  # batched vs unbatched scores, NU, embeddings, exports
        "tests/metrics/test_orientation.py::test_batched_equals_direct",
        "tests/rerank/test_lm.py::test_qlm_matches_unbatched_and_prefers_the_answer",
        "tests/rerank/test_lm.py::test_yes_no_probabilities",
        "tests/rerank/test_encoders.py::test_bi_encoder_cosine",
        "tests/rerank/test_encoders.py::test_cross_encoder_logits",
        "tests/igp/test_uncertainty.py",
        "tests/igp/test_probe.py::test_batched_cached_and_equal_to_single_probes",
        "tests/igp/test_setaware.py",
        "tests/qream/test_judge_probe.py::test_probability_judge_matches_the_logits",
        "tests/release/test_export.py::test_lora_export_unmerged_loads_with_peft",
        "tests/release/test_export.py::test_lora_export_unmerged_points_at_the_hub_base",
        "tests/release/test_export.py::test_lora_export_merged_loads_with_transformers",
        "tests/retrieval/test_dense.py::test_saved_embeddings_are_the_encoders",
        "tests/retrieval/test_dense.py::test_flat_search_is_exact",
        "tests/retrieval/test_dense.py::test_query_prefix_is_applied",
        "tests/retrieval/test_bm25.py::test_loaded_index_matches_in_memory_bm25s",
        "tests/metrics/test_qa.py::test_em_f1_match_official_on_generated_cases",
    ],
    "vllm": [  # a vLLM server per run (~1 min to start on 2 cores)
        "tests/backends/test_parity.py::test_greedy_parity_hf_local_vs_http",
    ],
}


def thread_count(threads: int) -> int:
    """What torch reports under the environment a run gets."""
    code = "import torch; print(torch.get_num_threads())"
    out = subprocess.run([sys.executable, "-c", code], env=run_env(threads), capture_output=True, text=True)
    return int(out.stdout.strip() or -1)


def run_env(threads: int) -> dict[str, str]:
    return os.environ | {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}


def outcomes(xml: Path) -> dict[str, str]:
    """test id -> passed / failed / error / skipped, from one junit file."""
    result = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        module = case.get("classname", "").replace(".", "/")
        name = f"{module}.py::{case.get('name')}"
        kinds = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        result[name] = {"failure": "failed"}.get(kinds[0], kinds[0]) if kinds else "passed"
    return result


def summarize(out: Path, groups: list[str], threads: list[int], runs: int, torch_threads: dict) -> bool:
    """Rewrite summary.md / summary.json from every XML so far; True when nothing failed."""
    tally: dict[str, dict[int, dict[str, int]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(int)))
    done = {t: 0 for t in threads}
    for t in threads:
        for xml in sorted((out / f"t{t}").glob("*.xml")):
            if xml.stem.rsplit("-", 1)[0] not in groups:
                continue
            done[t] += 1
            for test, outcome in outcomes(xml).items():
                tally[test][t][outcome] += 1
    planned = runs * len(groups)
    lines = [
        "# Repeated numerical tests",
        "",
        f"Groups {', '.join(groups)}; {runs} runs per group and thread count, each a fresh pytest process.",
        "Thread settings (OMP/MKL_NUM_THREADS -> torch.get_num_threads()): "
        + ", ".join(f"{t} -> {torch_threads.get(t)}" for t in threads),
        "Runs finished: " + ", ".join(f"{done[t]}/{planned} with {t} thread(s)" for t in threads),
        "",
        "| test | " + " | ".join(f"{t} thread(s): pass / fail / other" for t in threads) + " |",
        "|---|" + "---|" * len(threads),
    ]
    ok = True
    for test in sorted(tally):
        cells = []
        for t in threads:
            c = tally[test][t]
            other = sum(v for k, v in c.items() if k not in ("passed", "failed"))
            cells.append(f"{c['passed']} / {c['failed']} / {other}")
            ok &= c["failed"] == 0 and c["error"] == 0
        lines.append(f"| `{test}` | " + " | ".join(cells) + " |")
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    summary = {"groups": groups, "runs": runs, "threads": torch_threads, "finished": done, "tally": tally}
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--group", nargs="+", default=list(GROUPS)[:-1], choices=list(GROUPS))
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "tolerances")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    torch_threads = {t: thread_count(t) for t in args.threads}
    ok = summarize(args.out, args.group, args.threads, args.runs, torch_threads)
    for group in args.group:  # riskiest group first, its 1- and 2-thread runs interleaved
        for i in range(args.runs):
            for t in args.threads:
                xml = args.out / f"t{t}" / f"{group}-{i:02d}.xml"
                if xml.exists():
                    continue
                xml.parent.mkdir(parents=True, exist_ok=True)
                partial = xml.with_suffix(".partial")
                cmd = [sys.executable, "-m", "pytest", *GROUPS[group], "-q", "-p", "no:cacheprovider",
                       f"--junitxml={partial}"]  # fmt: skip
                start = time.time()
                rc = subprocess.run(cmd, cwd=REPO, env=run_env(t), stdout=subprocess.DEVNULL).returncode
                if not partial.exists():
                    print(f"{group} run {i} with {t} thread(s): pytest exited {rc} without a report")
                    return 1
                partial.rename(xml)
                ok = summarize(args.out, args.group, args.threads, args.runs, torch_threads)
                print(
                    f"{group} run {i} with {t} thread(s): exit {rc}, {time.time() - start:.0f} s", flush=True
                )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
