"""The tables of `bench_qream.sh` from its run folder (each table is printed only when its runs exist).

    .venv/bin/python tests/benchmarks/qream_tables.py runs/bench_qream

1. Fact judges on the probe set (per dataset): AUC, calibrated tau and held-out accuracy, supported share per
   claim kind.
2. Golden-rewrite rate (dual criteria, echo guard on) per teacher and dataset, with why questions dropped.
3. Held-out questions, one fixed reader (the embedded model, two demos): EM / F1 / input tokens (TK, and as a
   share of r_raw's) and s_orient of r_raw, the QREAM-FT student, QREAM-ICL, the extractive teacher itself
   (round 3: its best 6 sentences) and the golden rewrites where they exist (oracle: selected by the reader).
   The baseline is r_raw: "F1 / raw" and "TK / raw" are ratios against it.
4. Selection ablation (the paper's Table 4 shape) on the held-out extractive candidates: golden rate, and
   the reader F1, S_fact and TK of what each selection keeps (dual / utility / fidelity / none).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from r3forge.metrics.efficiency import input_tokens
from r3forge.metrics.orientation import s_orient
from r3forge.metrics.qa import exact_match
from r3forge.models import resolve_model
from r3forge.qream.pipeline import select_all

DATASETS = ("hotpotqa", "world")


def load(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.is_file() else None


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def em(candidate: dict) -> float:
    """EM of the reader's answer from a QREAM candidate (its F1 is the candidate's S_perf)."""
    return exact_match(candidate["answer"], candidate["answers"]) if candidate["answer"] else 0.0


def mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def judges_table(r: Path) -> None:
    for d in DATASETS:
        if (table := r / f"probe_{d}" / "table.md").is_file():
            report = load(r / f"probe_{d}" / "report.json") or {}
            print(
                f"\n### Fact judges, {d} ({report.get('questions')} questions, {report.get('claims')} claims)\n"
            )
            print(table.read_text())


def golden_table(r: Path) -> None:
    print("\n### Golden rewrites (dual criteria, echo guard)\n")
    print(
        "| teacher | dataset | split | questions | golden | rate | golden S_perf | golden S_fact | dropped |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for teacher, prefix in (("extractive", "ext"), ("ICL (135M)", "iclgold")):
        for d in DATASETS:
            for split in ("train", "heldout"):
                rep = load(r / f"{prefix}_{d}_{split}" / "report.json")
                if rep:
                    rate = rep["golden"] / max(rep["questions"], 1)
                    print(f"| {teacher} | {d} | {split} | {rep['questions']} | {rep['golden']} | {rate:.2f} | "
                          f"{rep['golden_mean_s_perf']} | {rep['golden_mean_s_fact']} | {rep['dropped']} |")  # fmt: skip


def heldout_table(r: Path, model, tokenizer) -> None:
    for d in DATASETS:
        ft = rows(r / f"ft_{d}" / "evidence.jsonl")
        if not ft:
            continue
        questions = {x["question_id"]: x["question"] for x in ft}
        arms: dict[str, list[tuple[str, str, float, float]]] = {}  # name -> (qid, doc, em, f1)
        arms["r_raw"] = [(x["question_id"], x["raw"], x["em_raw"], x["f1_raw"]) for x in ft]
        arms["QREAM-FT student"] = [(x["question_id"], x["rewrite"] or x["raw"], x["em_rewrite"], x["f1_rewrite"])
                                    for x in ft]  # fmt: skip
        icl = rows(r / f"icl_{d}" / "evidence.jsonl")
        if icl:
            arms["QREAM-ICL (135M)"] = [(x["question_id"], x["rewrite"] or x["raw"], x["em_rewrite"], x["f1_rewrite"])
                                        for x in icl]  # fmt: skip
        cands = rows(r / f"ext_{d}_heldout" / "candidates.jsonl")
        if cands:
            last = {}
            for c in cands:  # the teacher's largest candidate per question (round 3, or the last it made)
                if c["round"] >= last.get(c["question_id"], {"round": 0})["round"]:
                    last[c["question_id"]] = c
            arms["extractive teacher (6 sentences)"] = [
                (q, c["document"], em(c), c["s_perf"]) for q, c in last.items()
            ]
            golden = [c for c in cands if c["golden"]]
            arms[f"golden, oracle ({len(golden)} of {len(questions)} q)"] = [
                (c["question_id"], c["document"], em(c), c["s_perf"]) for c in golden
            ]
        base_f1 = mean([a[3] for a in arms["r_raw"]])
        base_tk = mean(input_tokens([a[1] for a in arms["r_raw"]], tokenizer))
        print(f"\n### Held-out {d} ({len(questions)} questions; reader: SmolLM2-135M, two demos)\n")
        print("| evidence | EM | F1 | F1 / raw | TK | TK / raw | s_orient |")
        print("|---|---|---|---|---|---|---|")
        for name, arm in arms.items():
            tk = mean(input_tokens([a[1] for a in arm], tokenizer))
            orient = mean(
                s_orient(model, tokenizer, [a[1] for a in arm], [questions.get(a[0], "") for a in arm])
            )
            f1 = mean([a[3] for a in arm])
            print(f"| {name} | {mean([a[2] for a in arm]):.3f} | {f1:.3f} | {f1 / base_f1 if base_f1 else float('nan'):.2f} | "
                  f"{tk:.0f} | {tk / base_tk:.2f} | {orient:.3f} |")  # fmt: skip
        print(
            "\n(EM of the extractive and golden rows: S_perf = 1, the reader's F1 of 1.0; their F1 is S_perf.)"
        )


def ablation_table(r: Path, tokenizer) -> None:
    for d in DATASETS:
        cands = rows(r / f"ext_{d}_heldout" / "candidates.jsonl")
        if not cands:
            continue
        print(f"\n### Selection ablation, extractive candidates, held-out {d}\n")
        print(
            "| selection | golden questions | reader F1 of the kept | S_fact of the kept | TK of the kept |"
        )
        print("|---|---|---|---|---|")
        for mode in ("dual", "utility", "fidelity", "none"):
            selected, _ = select_all([dict(c) for c in cands], mode)
            kept = [c for c in selected if c["golden"]]
            tk = mean(input_tokens([c["document"] for c in kept], tokenizer)) if kept else float("nan")
            print(f"| {mode} | {len(kept)} | {mean([c['s_perf'] for c in kept]):.3f} | "
                  f"{mean([c['s_fact'] for c in kept]):.3f} | {tk:.0f} |")  # fmt: skip


def main(run_dir: str) -> None:
    r = Path(run_dir)
    path = resolve_model("smollm2-135m-instruct")
    tokenizer = AutoTokenizer.from_pretrained(path)
    judges_table(r)
    golden_table(r)
    with torch.no_grad():
        heldout_table(r, AutoModelForCausalLM.from_pretrained(path).eval(), tokenizer)
    ablation_table(r, tokenizer)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "runs/bench_qream")
