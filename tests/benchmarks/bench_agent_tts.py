"""Test-time scaling with a GRPO checkpoint of tests/benchmarks/bench_agent_grpo_seeds.sh: relevance-guided
scaling (Verbal-R3 Algorithm A1) vs majority vote, on the learning bench's held-out questions.

    .venv/bin/python tests/benchmarks/bench_agent_tts.py QUICKSTART_RUN ARM [--student RELEASE]
        [--run_dir runs/bench_agent_seeds] [--ledger tests/benchmarks/results/agent_tts] [--max_questions 200]

ARM is a verbal arm of the seeds bench (`extractive`: the answer-blind stand-in, no model; `student`: the
distilled verbal reranker in RELEASE, served by vLLM; the same release the arm was trained with). The checkpoint
is the one of that arm with the best greedy held-out EM among those whose weights are still in RUN_DIR (a run
folder does not outlive its machine, so this runs in the session that trained it). Choosing on the same held-out
questions flatters every strategy's absolute EM alike; the comparison between strategies is paired (the same
checkpoint, the same questions, the same sample budget N) and is not biased by the choice.

`r3forge eval tts --config configs/eval/tts_world_cpu.yaml` with the bench's environment (index, 3 retrieved,
2 shown, 30 words) and the arm's observation runs the three strategies (naive majority vote, majority vote with
unique-query extraction, relevance-guided); its summary and rows go to LEDGER/ARM/ (agent_ledger.py's layout),
with run.json (the checkpoint, its greedy EM, the machine, the seconds) and tables.json:
EM and F1 per strategy, reranker pairs / calls and unique queries per question, the paired differences
relevance - naive, relevance - naive_unique and naive_unique - naive with a 95% bootstrap interval over the
questions, and the questions whose votes or majority answer relevance-guided scaling changed; its tables
`strategies` and `paired` are what the guides render (with provenance: result_file.py; `--beside` says what shared
the cores, `--tables_only` rewrites tables.json from the ledger's rows). Resumable: a finished evaluation in
RUN_DIR/tts_ARM is not run again.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import subprocess
import sys
import time
from pathlib import Path

from agent_learning_tables import interval, verdict
from agent_ledger import copy_eval, machine, sha256
from render_tables import markdown_table
from result_file import NOT_RECORDED, write_result

from r3forge.data.jsonio import write_json
from r3forge.metrics.stats import paired_bootstrap

STRATEGIES = ("naive", "naive_unique", "relevance")
PAIRS = (("relevance", "naive"), ("relevance", "naive_unique"), ("naive_unique", "naive"))


def observation(arm: str, student: str | None) -> list[str]:
    """The arm's observation flags, as bench_agent_grpo_seeds.sh trains it."""
    if arm == "extractive":
        return ["--observation", "verbal", "--reranker_backend", "extractive", "--reranker_serve", "false"]
    if arm == "student":
        if not student or not (Path(student) / "config.json").is_file():
            sys.exit(f"bench_agent_tts: the student arm needs --student <release folder>, got {student!r}")
        return ["--observation", "verbal", "--reranker_model", student, "--reranker_tokenizer", student,
                "--reranker_max_tokens", "64", "--reranker_serve", "true"]  # fmt: skip
    sys.exit(f"bench_agent_tts: ARM must be a verbal arm (extractive, student), got {arm!r}")


def weights(run: Path, step: int) -> Path:
    """Checkpoint `step`'s weights: checkpoint-<step>/, or final/ for the last step (the bench deletes that
    checkpoint, which holds the same weights)."""
    ckpt = run / "grpo" / f"checkpoint-{step}"
    final = run / "grpo" / "final_metrics.json"
    if not ckpt.is_dir() and final.is_file() and json.loads(final.read_text())["logged_steps"] == step:
        return run / "grpo" / "final"
    return ckpt


def best_checkpoint(run_dir: Path, arm: str) -> dict:
    """The evaluated checkpoint of `arm` with the best greedy held-out EM whose weights are on this machine
    (ties: the later step, then the lower seed)."""
    found = []
    for run in sorted(run_dir.glob(f"{arm}_s*")):
        if not re.fullmatch(rf"{arm}_s\d+", run.name):
            continue
        seed = int(run.name.rsplit("_s", 1)[1])
        for summary in run.glob("eval_*/summary.json"):
            step = int(summary.parent.name.removeprefix("eval_"))
            path = weights(run, step)
            if (path / "model.safetensors").is_file():
                em = json.loads(summary.read_text())["em"]
                found.append({"em": em, "step": step, "seed": seed, "model": str(path)})
    if not found:
        sys.exit(f"bench_agent_tts: no evaluated checkpoint of arm {arm!r} with its weights under {run_dir}")
    return max(found, key=lambda c: (c["em"], c["step"], -c["seed"]))


def tables(out: Path, summary: dict) -> tuple[dict, dict]:
    """(the figures, the tables `strategies` and `paired`) of a finished evaluation in `out` (its rows.jsonl.gz)."""
    rows: dict[str, dict[str, dict]] = {s: {} for s in STRATEGIES}  # strategy -> question id -> its row
    for r in map(json.loads, gzip.decompress((out / "rows.jsonl.gz").read_bytes()).decode().splitlines()):
        rows[r["strategy"]][r["id"]] = r
    n = summary["questions"]
    result: dict = {"questions": n, "samples": summary["samples"], "strategies": {}, "paired": {}}
    columns = [
        "strategy",
        "EM",
        "F1",
        "answers / q",
        "unique queries / q",
        "reranker pairs / q",
        "reranker calls / q",
    ]
    strategies = {"columns": columns, "align": "lrrrrrr", "rows": []}
    for s in STRATEGIES:
        x = summary[s]
        row = {"em": x["em"], "f1": x["f1"], "answers_per_question": x["answers_per_question"]} | {
            f"{k}_per_question": x[k] / n for k in ("unique_queries", "reranker_pairs", "reranker_calls")
        }
        result["strategies"][s] = row
        strategies["rows"].append([s, f"{row['em']:.3f}", f"{row['f1']:.3f}", f"{row['answers_per_question']:.2f}",
                                   f"{row['unique_queries_per_question']:.2f}", f"{row['reranker_pairs_per_question']:.2f}",
                                   f"{row['reranker_calls_per_question']:.2f}"])  # fmt: skip
    paired = {"columns": ["difference", "EM [95% CI over questions]", "verdict"], "align": "lll", "rows": []}
    for x, y in PAIRS:
        ids = sorted(rows[y])
        d = paired_bootstrap([float(rows[y][i]["em"]) for i in ids], [float(rows[x][i]["em"]) for i in ids])
        result["paired"][f"{x} - {y}"] = d
        paired["rows"].append([f"{x} - {y}", interval(d), verdict(d, x, y)])
    # the same seed and batches give the majority-vote arms the same first turns: where does A1 change anything?
    a, b = rows["relevance"], rows["naive_unique"]
    result["relevance_vs_naive_unique"] = {
        k: sum(a[i][key] != b[i][key] for i in b) for k, key in (("votes_differ", "votes"), ("prediction_differs", "prediction"))
    }  # fmt: skip
    print(f"\n### Test-time scaling: N = {summary['samples']} answers per question, {n} held-out questions\n")
    print("\n".join(markdown_table(strategies)) + "\n\n" + "\n".join(markdown_table(paired)))
    print(f"\nrelevance vs naive_unique: votes differ for {result['relevance_vs_naive_unique']['votes_differ']} of {n} "
          f"questions, the majority for {result['relevance_vs_naive_unique']['prediction_differs']}")  # fmt: skip
    return result, {"strategies": strategies, "paired": paired}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("quickstart", type=Path, help="A finished quickstart run (its world and BM25 index).")
    p.add_argument("arm", help="extractive or student.")
    p.add_argument("--student", help="The student arm's release folder (the one its GRPO runs used).")
    p.add_argument(
        "--run_dir", type=Path, default=Path("runs/bench_agent_seeds"), help="The seeds bench's run folder."
    )
    p.add_argument(
        "--ledger", type=Path, default=Path("tests/benchmarks/results/agent_tts"), help="Committed results."
    )
    p.add_argument("--max_questions", type=int, default=200, help="Held-out questions (the world has 109).")
    p.add_argument("--beside", default=NOT_RECORDED, help="What shared the cores ('nothing' when alone).")
    p.add_argument(
        "--tables_only", action="store_true", help="Only rewrite LEDGER/ARM/tables.json from its rows."
    )
    a = p.parse_args()
    if a.tables_only:
        dst = a.ledger / a.arm
        write_result(
            dst / "tables.json", *tables(dst, json.loads((dst / "summary.json").read_text())), beside=a.beside
        )
        return 0
    flags = observation(a.arm, a.student)
    best = best_checkpoint(a.run_dir, a.arm)
    print(f"bench_agent_tts: {a.arm}: seed {best['seed']} step {best['step']} (greedy EM {best['em']:.3f}): {best['model']}", file=sys.stderr)  # fmt: skip
    q = a.quickstart / "world" / "questions.jsonl"
    out = a.run_dir / f"tts_{a.arm}"
    done = out / "summary.json"
    seconds = None
    if not (
        done.is_file() and set(STRATEGIES) <= set(json.loads(done.read_text()).get("strategies_done", []))
    ):
        cmd = [".venv/bin/r3forge", "eval", "tts", "--config", "configs/eval/tts_world_cpu.yaml", "--dataset", str(q),
               "--index", str(a.quickstart / "index"), "--num_retrieve", "3", "--num_shown", "2", "--doc_max_words", "30",
               *flags, "--model", best["model"], "--max_questions", str(a.max_questions), "--output_dir", str(out)]  # fmt: skip
        print("$ " + " ".join(cmd), file=sys.stderr)
        start = time.time()
        subprocess.run(cmd, check=True)
        seconds = round(time.time() - start, 1)
    summary = json.loads(done.read_text())
    if summary["model"] != best["model"]:
        sys.exit(f"bench_agent_tts: {out} evaluated {summary['model']}, not the best checkpoint {best['model']}; "
                 "move it aside to rerun")  # fmt: skip
    dst = a.ledger / a.arm
    copy_eval(out, dst)
    about = {"arm": a.arm, "checkpoint": best, "seconds": seconds, "command": " ".join(sys.argv)}
    about |= machine(q, a.run_dir / f"ws_{a.arm}.jsonl", a.ledger)
    if a.arm == "student":
        about |= {
            "student": a.student,
            "student_weights_sha256": sha256(Path(a.student) / "model.safetensors"),
        }
    if seconds is None and (dst / "run.json").is_file():  # a rerun of the ledger step keeps the measured time
        about["seconds"] = json.loads((dst / "run.json").read_text()).get("seconds")
    write_json(dst / "run.json", about)
    write_result(dst / "tables.json", *tables(dst, summary), beside=a.beside)
    return 0


if __name__ == "__main__":
    sys.exit(main())
