"""The tables of `bench_qream.sh` from its run folder (each table is printed only when its runs exist).

    .venv/bin/python tests/benchmarks/qream_tables.py runs/bench_qream

1. Fact judges on the probe set (per dataset): AUC, calibrated tau and held-out accuracy, supported share per
   claim kind.
2. Golden-rewrite rate (dual criteria, echo guard on) per teacher and dataset, with why questions dropped,
   and the extractive teacher's rate by the number of exploration rounds; where the hard filter fails: per
   round, candidates with the answer string in them and the reader's passes with and without it.
3. Held-out questions, one fixed reader (the embedded model, two demos): EM / F1 / input tokens (TK, and as a
   share of r_raw's) and s_orient of r_raw, the QREAM-FT student, QREAM-ICL, the extractive teacher itself
   (round 3: its best 6 sentences) and the golden rewrites where they exist (oracle: selected by the reader).
   The baseline is r_raw: "F1 / raw" and "TK / raw" are ratios against it on the same questions (the golden
   row's against r_raw on the questions that have a golden rewrite).
   The student's F1 gain over r_raw carries a paired bootstrap 95% interval over the questions.
4. Learning curve: the student distilled on a quarter, half and all golden rewrites (same epochs, seed), held out.
5. Selection ablation (the paper's Table 4 shape) on the extractive candidates of each split: golden rate, and
   the reader F1, S_fact and TK of what each selection keeps (dual / utility / fidelity / none).
6. In the RAG evaluation (`eval rag --rewrite ft`): none and IGP with their `+qream` twins (the student
   rewrites the kept passages), on the held-out HotpotQA questions.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import datasets
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from r3forge.metrics.efficiency import input_tokens
from r3forge.metrics.orientation import r_inc, s_orient
from r3forge.metrics.qa import exact_match, normalize_answer
from r3forge.metrics.stats import paired_bootstrap
from r3forge.models import resolve_model
from r3forge.qream.judge_probe import sentences
from r3forge.qream.pipeline import select_all
from r3forge.qream.score import lexical_support

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


def rounds_table(r: Path) -> None:
    """Golden rate with the first n rounds of candidates only: how much each exploration round adds."""
    print("\n### Golden rate by exploration rounds (extractive teacher; round n: its best 2n sentences)\n")
    print("| dataset | split | questions | " + " | ".join(f"rounds <= {n}" for n in range(1, 6)) + " |")
    print("|---|---|---|" + "---|" * 5)
    for d in DATASETS:
        for split in ("train", "heldout"):
            cands = rows(r / f"ext_{d}_{split}" / "candidates.jsonl")
            if not cands:
                continue
            questions = len({c["question_id"] for c in cands})
            cells = []
            for n in range(1, 6):
                kept = [dict(c) for c in cands if c["round"] <= n]
                if n > max(c["round"] for c in cands):
                    cells.append("")
                    continue
                selected, _ = select_all(kept, "dual")
                cells.append(f"{sum(c['golden'] for c in selected) / questions:.2f}")
            print(f"| {d} | {split} | {questions} | " + " | ".join(cells) + " |")


def contains_answer(text: str, answers: list[str]) -> bool:
    """Some gold answer, SQuAD-normalized, inside the normalized text.

    >>> contains_answer("It was built in 1889 in Paris.", ["1889"]), contains_answer("Paris.", ["Rome"])
    (True, False)
    """
    norm = normalize_answer(text)
    return any(a and a in norm for a in map(normalize_answer, answers))


def hard_filter_table(r: Path, tokenizer) -> None:
    """Rewriter or reader? Per round: the answer string in the candidate, and the reader's passes with and
    without it (the hard filter: a gold answer inside the fixed reader's answer); r_raw as the reference."""
    print("\n### Where the hard filter fails (extractive teacher; reader: SmolLM2-135M)\n")
    print("| dataset | split | evidence | TK | answer in it | reader passes | passes, answer in it | "
          "passes, answer not in it | golden |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for d in DATASETS:
        for split in ("train", "heldout"):
            cands = rows(r / f"ext_{d}_{split}" / "candidates.jsonl")
            if not cands:
                continue
            raw = {c["question_id"]: (c["raw"], c["answers"]) for c in cands}
            has = sum(contains_answer(text, answers) for text, answers in raw.values())
            tk = mean(input_tokens([text for text, _ in raw.values()], tokenizer))
            print(f"| {d} | {split} | r_raw ({len(raw)} q) | {tk:.0f} | {has} | | | | |")
            for n in sorted({c["round"] for c in cands}):
                these = [c for c in cands if c["round"] == n]
                inside = [contains_answer(c["document"], c["answers"]) for c in these]
                tk = mean(input_tokens([c["document"] for c in these], tokenizer))
                print(f"| {d} | {split} | round {n} ({len(these)}) | {tk:.0f} | {sum(inside)} | "
                      f"{sum(c['passes'] for c in these)} | "
                      f"{sum(c['passes'] and i for c, i in zip(these, inside, strict=True))} | "
                      f"{sum(c['passes'] and not i for c, i in zip(these, inside, strict=True))} | "
                      f"{sum(bool(c['golden']) for c in these)} |")  # fmt: skip


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
        raw_by_id = {a[0]: a for a in arms["r_raw"]}
        print(f"\n### Held-out {d} ({len(questions)} questions; reader: SmolLM2-135M, two demos)\n")
        raw_of = {a[0]: a[1] for a in arms["r_raw"]}
        print("| evidence | EM | F1 | F1 / raw | TK | TK / raw | s_orient | r_inc (sentences, lexical) |")
        print("|---|---|---|---|---|---|---|---|")
        for name, arm in arms.items():
            tk = mean(input_tokens([a[1] for a in arm], tokenizer))
            orient = mean(
                s_orient(model, tokenizer, [a[1] for a in arm], [questions.get(a[0], "") for a in arm])
            )
            inc = mean([r_inc([lexical_support(f, raw_of[a[0]]) for f in sentences(a[1])]) for a in arm])
            f1 = mean([a[3] for a in arm])
            # ratios against r_raw on the same questions (the golden row covers only the questions that have one)
            base = [raw_by_id[a[0]] for a in arm if a[0] in raw_by_id]
            base_f1, base_tk = mean([b[3] for b in base]), mean(input_tokens([b[1] for b in base], tokenizer))
            print(f"| {name} | {mean([a[2] for a in arm]):.3f} | {f1:.3f} | {f1 / base_f1 if base_f1 else float('nan'):.2f} | "
                  f"{tk:.0f} | {tk / base_tk:.2f} | {orient:.3f} | {inc:.3f} |")  # fmt: skip
        gain, low, high = paired_bootstrap([x["f1_raw"] for x in ft], [x["f1_rewrite"] for x in ft])
        print(f"\nStudent F1 - r_raw F1, paired bootstrap 95%: {gain:+.3f} [{low:+.3f}, {high:+.3f}]; "
              f"rewritten {sum(x['rewrite'] is not None for x in ft)} of {len(ft)} (the rest fall back to r_raw).")  # fmt: skip
        print(
            "\n(EM of the extractive and golden rows: S_perf = 1, the reader's F1 of 1.0; their F1 is S_perf. "
            "r_inc here: the share of the evidence's sentences of 5+ words that the lexical judge does not find "
            "in r_raw, an offline stand-in for the LLM fact extractor + judge.)"
        )


def curve_table(r: Path) -> None:
    """The student at 3+ training sizes, held out: reader F1 and TK of its rewrites against r_raw's."""
    sized = sorted(int(f.name.split("_")[-1]) for f in r.glob("ft_data_*") if f.name.split("_")[-1].isdigit())
    sizes = [(n, f"ft_{n}") for n in sized] + [(None, "ft")]
    if not any((r / f"{prefix}_{d}" / "report.json").is_file() for _, prefix in sizes for d in DATASETS):
        return
    print("\n### Learning curve: QREAM-FT student by golden rewrites seen (held out)\n")
    print("| dataset | train rows | rewritten | F1 raw | F1 student | student - raw [95%] | TK / raw |")
    print("|---|---|---|---|---|---|---|")
    for d in DATASETS:
        for n, prefix in sizes:
            ev = rows(r / f"{prefix}_{d}" / "evidence.jsonl")
            rep = load(r / f"{prefix}_{d}" / "report.json")
            if not ev or not rep:
                continue
            size = n if n is not None else len(rows_of_dataset(r / "ft_data"))
            gain, low, high = paired_bootstrap([x["f1_raw"] for x in ev], [x["f1_rewrite"] for x in ev])
            print(f"| {d} | {size} | {rep['rewritten']} / {rep['questions']} | {rep['f1_raw']:.3f} | "
                  f"{rep['f1_rewrite']:.3f} | {gain:+.3f} [{low:+.3f}, {high:+.3f}] | {rep['tk_ratio']:.2f} |")  # fmt: skip


def rows_of_dataset(folder: Path) -> list:
    """The training rows of a saved DatasetDict folder ([] when absent)."""
    if not folder.is_dir():
        return []
    return list(datasets.load_from_disk(str(folder))["train"])


def rag_table(r: Path) -> None:
    if (table := r / "rag_hotpotqa" / "table.md").is_file():
        print("\n### eval rag --rewrite ft, held-out HotpotQA (own 10 paragraphs; generator SmolLM2-135M)\n")
        print(table.read_text())


def ablation_table(r: Path, tokenizer) -> None:
    for d, split in ((d, split) for d in DATASETS for split in ("train", "heldout")):
        cands = rows(r / f"ext_{d}_{split}" / "candidates.jsonl")
        if not cands:
            continue
        print(
            f"\n### Selection ablation, extractive candidates, {d} {split} ({len({c['question_id'] for c in cands})} q)\n"
        )
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
    rounds_table(r)
    hard_filter_table(r, tokenizer)
    with torch.no_grad():
        heldout_table(r, AutoModelForCausalLM.from_pretrained(path).eval(), tokenizer)
    curve_table(r)
    ablation_table(r, tokenizer)
    rag_table(r)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "runs/bench_qream")
