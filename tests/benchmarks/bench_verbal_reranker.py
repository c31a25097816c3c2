"""Does the distilled verbal reranker rank? Held-out HotpotQA questions, every one of their 10 passages.

    .venv/bin/python tests/benchmarks/bench_verbal_reranker.py \\
        --qa_path ../shared/data/hotpotqa/rpt_distractor_dev_sample_test.jsonl --max_questions 40 \\
        --train_dataset runs/annotate/rules_hotpotqa_train \\
        --cross_encoder runs/rerank/cross_minilm_hotpotqa \\
        --student runs/sft/verbal_reranker_cpu/final [--student <another checkpoint> ...] \\
        [--out runs/bench/verbal_reranker] [--beside nothing]

One table, the same (question, passage) pairs for every row: the input order (the dataset's passage order),
BM25 over the question's 10 passages, the MiniLM cross-encoder trained on the training questions' gold
labels (`r3forge train-cross-encoder`), the un-tuned embedded model with the student's prompt, and each SFT
student. The teacher is the rule teacher over gold evidence (`r3forge annotate rules`, the labels the students
were trained on); its row is the ceiling, not a baseline (it reads the gold). Columns:

- parse: share of generations in the `Comment: ... / Score: s` format (LMs only; an unparsed pair ranks last);
- spearman: rank correlation of the method's scores with the teacher's 1-5 scores over all pairs (LMs: over
  the parsed pairs, as the SFT task eval computes it);
- NDCG@1/3/5 against gold relevance (2 = a supporting paragraph with the answer, 1 = supporting, 0 = other);
  an LM ranks by its score, ties broken by the score token's logprob; `E[s]` rows rank by the expected score
  from the five digit logprobs at the score token.

The held-out questions must not be in `--train_dataset` (checked). Generations, per-pair scores and the
table go to the `--out` folder (default `runs/bench/verbal_reranker/`): the result file `results.json` (the
figures `args`, `questions`, `pairs`, `results` and `student_by_teacher_score`, as before; the table `rankers`
it prints, one row per ranker with the columns above; and the provenance: result_file.py), the same table as
`table.md`, and one JSONL of generations per language model. Nothing here is timed: it measures ranking
quality, so other work may share the cores (`--beside` records what did).
"""

from __future__ import annotations

import argparse
import random
import sys
from collections import Counter
from pathlib import Path

import bm25s
import datasets
import numpy as np
import torch
from render_tables import markdown_table
from result_file import NOT_RECORDED, write_result
from transformers import AutoModelForCausalLM, AutoTokenizer

from r3forge.annotate.export import sft_row
from r3forge.annotate.report import agreement
from r3forge.annotate.rules import rule_annotations
from r3forge.annotate.verbal import load_template
from r3forge.data.jsonio import write_jsonl
from r3forge.data.loaders import load_qa
from r3forge.metrics.ranking import ndcg_batch, spearman
from r3forge.models import resolve_model
from r3forge.rerank.base import passage, to_candidates
from r3forge.rerank.encoders import CrossEncoderConfig, CrossEncoderReranker
from r3forge.retrieval.bm25 import BM25Config, BM25Tokenizer
from r3forge.sft.taskeval import generate, verbal_metrics, verbal_records

K_VALUES = (1, 3, 5)
CONFUSION: dict[str, dict] = {}  # LM row -> {teacher score: {student score: pairs}}


def held_out_rows(qa_path: str, max_questions: int, train_dataset: str) -> tuple[list[dict], list[dict]]:
    """(QA records, one SFT-format row per pair with the rule teacher's score); refuses a question that is
    also in the training set."""
    records = list(load_qa(qa_path))[:max_questions]
    template, _ = load_template(None)
    flat = list(rule_annotations(records))
    rows = [sft_row(r, template) | {"rank": i} for i, r in enumerate(flat)]
    seen = set()
    for split in datasets.load_from_disk(train_dataset).values():
        seen.update(split["question_id"])
    leaked = sorted({r["question_id"] for r in rows} & seen)
    if leaked:
        sys.exit(f"{len(leaked)} held-out questions are in {train_dataset} (e.g. {leaked[:3]}): not held out")
    for row, rec in zip(rows, flat, strict=True):
        row["text"] = passage(to_candidates([{"id": rec["doc_id"], "title": rec["doc_title"],
                                               "text": rec["doc_text"], "relevance": rec["relevance"]}])[0])  # fmt: skip
        row["question"] = rec["question"]
    return records, rows


def ranking_metrics(rows: list[dict], scores: list[float]) -> dict[str, float]:
    """Spearman vs the teacher's scores and NDCG@k vs gold of a per-pair score (ties: input order)."""
    by_q: dict[str, list[tuple[float, int, str]]] = {}
    for i, (row, s) in enumerate(zip(rows, scores, strict=True)):
        by_q.setdefault(row["question_id"], []).append((-s, i, row["doc_id"]))
    qrels = {q: {} for q in by_q}
    for row in rows:
        qrels[row["question_id"]][row["doc_id"]] = int(row["relevance"])
    questions = [q for q in by_q if any(v > 0 for v in qrels[q].values())]
    rankings = [[d for _, _, d in sorted(by_q[q])] for q in questions]
    out = {"parse_rate": None, "spearman": round(spearman(scores, [r["score"] for r in rows]), 4)}
    for k in K_VALUES:
        out[f"ndcg@{k}"] = round(float(ndcg_batch(rankings, [qrels[q] for q in questions], k).mean()), 4)
    return out


def bm25_scores(rows: list[dict]) -> list[float]:
    """BM25 (the project's tokenizer, Lucene scoring) of each question against its own passages only."""
    tokenize, out = BM25Tokenizer(BM25Config()), []
    for q in dict.fromkeys(r["question_id"] for r in rows):
        docs = [r for r in rows if r["question_id"] == q]
        index = bm25s.BM25()
        index.index(tokenize([d["text"] for d in docs]), show_progress=False)
        out += [float(s) for s in index.get_scores(tokenize([docs[0]["question"]])[0])]
    return out


def cross_encoder_scores(path: str, records: list[dict]) -> list[float]:
    reranker = CrossEncoderReranker.from_config(CrossEncoderConfig(model=path))
    outs = reranker.rerank([r["question"] for r in records], [to_candidates(r["passages"]) for r in records])
    return [float(s) for o in outs for s in o.scores]


def lm_metrics(path: str, rows: list[dict], out_dir: Path, name: str) -> list[tuple[str, dict]]:
    """(row name, metrics) of one LM (argmax and expected-score rankings); generations to out_dir."""
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    choices = generate(model, tokenizer, [r["prompt"] for r in rows], max_new_tokens=96, batch_size=16)
    records = verbal_records(rows, choices, tokenizer)
    write_jsonl(out_dir / f"{name.replace('/', '_')}.jsonl", records)
    m = verbal_metrics(records)
    by_teacher: dict[int, Counter] = {}
    for r in records:
        by_teacher.setdefault(r["teacher_score"], Counter())[r["student_score"] or "unparsed"] += 1
    CONFUSION[name] = {t: dict(c.most_common()) for t, c in sorted(by_teacher.items())}
    print(f"{name}: student scores by teacher score {CONFUSION[name]}", file=sys.stderr)
    parsed = [r for r in records if r["expected_score"] is not None]
    rho = (
        spearman([r["expected_score"] for r in parsed], [r["teacher_score"] for r in parsed])
        if len(parsed) > 1
        else None
    )
    argmax = {"parse_rate": m["parse_rate"], "spearman": m["spearman"]} | {
        f"ndcg@{k}": m[f"ndcg@{k}"] for k in K_VALUES
    }
    expected = {"parse_rate": m["parse_rate"], "spearman": None if rho is None else round(rho, 4)} | {
        f"ndcg@{k}": m.get(f"expected_ndcg@{k}") for k in K_VALUES
    }
    return [(name, argmax), (f"{name}, E[s]", expected)]


def fmt(v: float | None) -> str:
    """A metric as a cell: three decimals, "-" where there is none.

    >>> fmt(0.51234), fmt(None), fmt(float("nan"))
    ('0.512', '-', '-')
    """
    return "-" if v is None or (isinstance(v, float) and np.isnan(v)) else f"{v:.3f}"


def table(results: list[tuple[str, dict]]) -> dict:
    """The table `rankers`: per ranker, parse rate, Spearman against the teacher and NDCG@k.

    >>> m = {"parse_rate": None, "spearman": 0.25, "ndcg@1": 0.5, "ndcg@3": 0.61234, "ndcg@5": 0.7}
    >>> t = table([("input order", m)])
    >>> t["columns"], t["rows"]
    (['ranker', 'parse', 'spearman vs teacher', 'NDCG@1', 'NDCG@3', 'NDCG@5'], [['input order', '-', '0.250', '0.500', '0.612', '0.700']])
    """
    rows = [[name, fmt(m["parse_rate"]), fmt(m["spearman"])] + [fmt(m[f"ndcg@{k}"]) for k in K_VALUES]
            for name, m in results]  # fmt: skip
    columns = ["ranker", "parse", "spearman vs teacher"] + [f"NDCG@{k}" for k in K_VALUES]
    return {"columns": columns, "align": "l" + "r" * (len(columns) - 1), "rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--qa_path", default="../shared/data/hotpotqa/rpt_distractor_dev_sample_test.jsonl")
    ap.add_argument("--max_questions", type=int, default=40)
    ap.add_argument("--train_dataset", required=True, help="The students' SFT set (leakage check).")
    ap.add_argument("--cross_encoder", default="", help="A trained cross-encoder folder (else no row).")
    ap.add_argument(
        "--base_model", default="smollm2-135m-instruct", help="The un-tuned model's row ('': none)."
    )
    ap.add_argument("--student", nargs="*", default=[], help="SFT student folders (final/ or checkpoint-N/).")
    ap.add_argument(
        "--out", default="runs/bench/verbal_reranker", help="the folder of results.json and table.md"
    )
    ap.add_argument("--beside", default=NOT_RECORDED, help="what shared the cores ('nothing' when alone)")
    args = ap.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    records, rows = held_out_rows(args.qa_path, args.max_questions, args.train_dataset)
    print(f"{len(records)} held-out questions, {len(rows)} pairs", file=sys.stderr)
    teacher = agreement(rows, k_values=K_VALUES)
    results = [("input order", ranking_metrics(rows, [-float(r["rank"]) for r in rows])),
               ("BM25 (10 passages)", ranking_metrics(rows, bm25_scores(rows)))]  # fmt: skip
    shuffles = [ranking_metrics(rows, [float(p) for p in random.Random(seed).sample(range(len(rows)), len(rows))])
                for seed in range(100)]  # fmt: skip
    mean = {f"ndcg@{k}": round(sum(m[f"ndcg@{k}"] for m in shuffles) / 100, 4) for k in K_VALUES}
    results.insert(1, ("random order (mean of 100 shuffles)", {"parse_rate": None, "spearman": None} | mean))
    if args.cross_encoder:
        results.append(
            ("MiniLM cross-encoder", ranking_metrics(rows, cross_encoder_scores(args.cross_encoder, records)))
        )
    if args.base_model:
        results += lm_metrics(str(resolve_model(args.base_model)), rows, out, f"{args.base_model} (un-tuned)")
    for path in args.student:
        results += lm_metrics(path, rows, out, f"student {path}")
    results.append(("teacher (rules over gold; ceiling)",
                    {"parse_rate": None, "spearman": 1.0} | {f"ndcg@{k}": teacher[f"ndcg@{k}"] for k in K_VALUES}))  # fmt: skip
    text = "\n".join(markdown_table(table(results)))
    print(text)
    (out / "table.md").write_text(text + "\n", encoding="utf-8")
    figures = {"args": vars(args), "questions": len(records), "pairs": len(rows), "results": dict(results),
               "student_by_teacher_score": CONFUSION}  # fmt: skip
    write_result(out / "results.json", figures, {"rankers": table(results)}, beside=args.beside)


if __name__ == "__main__":
    main()
