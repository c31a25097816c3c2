"""The tables of `bench_qream.sh` from its run folder (each table is printed only when its runs exist).

    .venv/bin/python tests/benchmarks/qream_tables.py runs/bench_qream [--beside nothing]

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

Everything printed also goes to the result file RUN_DIR/tables.json (`result_file.py`): the figures (`judges`,
`golden`, `rounds`, `hard_filter`, `heldout`, `curve`, `ablation`, `rag`; the notes printed under a table in
`notes`), the tables as `render_tables.py` prints them into a guide (`judges_<dataset>`, `golden`, `rounds`,
`hard_filter`, `heldout_<dataset>`, `curve`, `ablation_<dataset>_<split>`, `rag_hotpotqa`) and the provenance
(`--beside`: what shared the cores). The judges' and the RAG tables are the run's own table.md, read back.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import datasets
import torch
from agent_learning_tables import interval, show
from result_file import NOT_RECORDED, write_result
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
_PIPE = re.compile(r"(?<!\\)\|")  # a cell border: a | not escaped as \|


def load(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.is_file() else None


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def em(candidate: dict) -> float:
    """EM of the reader's answer from a QREAM candidate (its F1 is the candidate's S_perf)."""
    return exact_match(candidate["answer"], candidate["answers"]) if candidate["answer"] else 0.0


def mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def note(out: dict, name: str, text: str) -> None:
    """Print a note under table `name` and keep it in the figures' `notes`."""
    out.setdefault("notes", {}).setdefault(name, []).append(text)
    print(f"\n{text}")


def parse_markdown_table(text: str) -> tuple[dict | None, list[str]]:
    """The first markdown table of `text` as a result table (alignment from its rule row), and the other lines
    (blank lines and headings dropped); None when it holds no table.

    >>> table, notes = parse_markdown_table(
    ...     "# RAG\\n\\nF1 in %.\\n\\n| Method | a \\\\| b |\\n|:---|---:|\\n| **none** | 1.0 |\\n"
    ... )
    >>> table, notes
    ({'columns': ['Method', 'a | b'], 'align': 'lr', 'rows': [['**none**', '1.0']]}, ['F1 in %.'])
    >>> parse_markdown_table("_no results_\\n")
    (None, ['_no results_'])
    """

    def cells(line: str) -> list[str]:
        return [c.strip().replace("\\|", "|") for c in _PIPE.split(line.strip())[1:-1]]

    lines = text.splitlines()
    at = next((i for i, line in enumerate(lines) if line.lstrip().startswith("|")), None)
    notes = [line for line in lines if line.strip() and not line.lstrip().startswith(("|", "#"))]
    if at is None:
        return None, notes
    end = next((i for i in range(at, len(lines)) if not lines[i].lstrip().startswith("|")), len(lines))
    rule = [c.replace(" ", "") for c in cells(lines[at + 1])]
    align = "".join("c" if c[:1] == c[-1:] == ":" else "r" if c.endswith(":") else "l" for c in rule)
    table = {
        "columns": cells(lines[at]),
        "align": align,
        "rows": [cells(line) for line in lines[at + 2 : end]],
    }
    return table, notes


def judges_table(r: Path, out: dict) -> None:
    for d in DATASETS:
        if (md := r / f"probe_{d}" / "table.md").is_file():
            report = load(r / f"probe_{d}" / "report.json") or {}
            out.setdefault("judges", {})[d] = report
            table, notes = parse_markdown_table(md.read_text())
            title = f"Fact judges, {d} ({report.get('questions')} questions, {report.get('claims')} claims)"
            show_read_back(out, f"judges_{d}", title, table, notes)


def show_read_back(out: dict, name: str, title: str, table: dict | None, notes: list[str]) -> None:
    """Show a table read back from a run's table.md (its notes under it), or only its notes when it has none."""
    if table is not None:
        show(out, name, title, table)
    else:
        print(f"\n### {title}")
    for text in notes:
        note(out, name, text)


def golden_row(teacher: str, d: str, split: str, rep: dict) -> list:
    """One row of the golden-rewrite table from an `annotate qream` report.json.

    >>> golden_row("extractive", "world", "train", {"questions": 4, "golden": 3, "golden_mean_s_perf": 0.9,
    ...            "golden_mean_s_fact": 1.0, "dropped": {"no_pass": 1}})
    ['extractive', 'world', 'train', 4, 3, '0.75', '0.9', '1.0', "{'no_pass': 1}"]
    """
    rate = rep["golden"] / max(rep["questions"], 1)
    return [teacher, d, split, rep["questions"], rep["golden"], f"{rate:.2f}",
            f"{rep['golden_mean_s_perf']}", f"{rep['golden_mean_s_fact']}", f"{rep['dropped']}"]  # fmt: skip


def golden_table(r: Path, out: dict) -> None:
    columns = ["teacher", "dataset", "split", "questions", "golden", "rate", "golden S_perf", "golden S_fact",
               "dropped"]  # fmt: skip
    table = {"columns": columns, "align": "lllrrrrrl", "rows": []}
    for teacher, prefix in (("extractive", "ext"), ("ICL (135M)", "iclgold")):
        for d in DATASETS:
            for split in ("train", "heldout"):
                rep = load(r / f"{prefix}_{d}_{split}" / "report.json")
                if rep:
                    keep = ("questions", "golden", "golden_mean_s_perf", "golden_mean_s_fact", "dropped")
                    out.setdefault("golden", {}).setdefault(teacher, {}).setdefault(d, {})[split] = {
                        k: rep[k] for k in keep
                    } | {"rate": rep["golden"] / max(rep["questions"], 1)}
                    table["rows"].append(golden_row(teacher, d, split, rep))
    show(out, "golden", "Golden rewrites (dual criteria, echo guard)", table)


def rounds_table(r: Path, out: dict) -> None:
    """Golden rate with the first n rounds of candidates only: how much each exploration round adds."""
    table = {
        "columns": ["dataset", "split", "questions", *(f"rounds <= {n}" for n in range(1, 6))],
        "align": "llr" + "r" * 5,
        "rows": [],
    }
    for d in DATASETS:
        for split in ("train", "heldout"):
            cands = rows(r / f"ext_{d}_{split}" / "candidates.jsonl")
            if not cands:
                continue
            questions = len({c["question_id"] for c in cands})
            cells, rates = [], {}
            for n in range(1, 6):
                kept = [dict(c) for c in cands if c["round"] <= n]
                if n > max(c["round"] for c in cands):
                    cells.append("")
                    continue
                selected, _ = select_all(kept, "dual")
                rates[n] = sum(c["golden"] for c in selected) / questions
                cells.append(f"{rates[n]:.2f}")
            out.setdefault("rounds", {}).setdefault(d, {})[split] = {
                "questions": questions,
                "golden_rate": rates,
            }
            table["rows"].append([d, split, questions, *cells])
    title = "Golden rate by exploration rounds (extractive teacher; round n: its best 2n sentences)"
    show(out, "rounds", title, table)


def contains_answer(text: str, answers: list[str]) -> bool:
    """Some gold answer, SQuAD-normalized, inside the normalized text.

    >>> contains_answer("It was built in 1889 in Paris.", ["1889"]), contains_answer("Paris.", ["Rome"])
    (True, False)
    """
    norm = normalize_answer(text)
    return any(a and a in norm for a in map(normalize_answer, answers))


def hard_filter_table(r: Path, tokenizer, out: dict) -> None:
    """Rewriter or reader? Per round: the answer string in the candidate, and the reader's passes with and
    without it (the hard filter: a gold answer inside the fixed reader's answer); r_raw as the reference."""
    columns = ["dataset", "split", "evidence", "TK", "answer in it", "reader passes", "passes, answer in it",
               "passes, answer not in it", "golden"]  # fmt: skip
    table = {"columns": columns, "align": "lllrrrrrr", "rows": []}
    for d in DATASETS:
        for split in ("train", "heldout"):
            cands = rows(r / f"ext_{d}_{split}" / "candidates.jsonl")
            if not cands:
                continue
            raw = {c["question_id"]: (c["raw"], c["answers"]) for c in cands}
            has = sum(contains_answer(text, answers) for text, answers in raw.values())
            tk = mean(input_tokens([text for text, _ in raw.values()], tokenizer))
            figures = {"r_raw": {"questions": len(raw), "tk": tk, "answer_in_it": has}, "rounds": {}}
            table["rows"].append([d, split, f"r_raw ({len(raw)} q)", f"{tk:.0f}", has, "", "", "", ""])
            for n in sorted({c["round"] for c in cands}):
                these = [c for c in cands if c["round"] == n]
                inside = [contains_answer(c["document"], c["answers"]) for c in these]
                tk = mean(input_tokens([c["document"] for c in these], tokenizer))
                f = {
                    "candidates": len(these),
                    "tk": tk,
                    "answer_in_it": sum(inside),
                    "reader_passes": sum(c["passes"] for c in these),
                    "passes_answer_in_it": sum(c["passes"] and i for c, i in zip(these, inside, strict=True)),
                    "passes_answer_not_in_it": sum(
                        c["passes"] and not i for c, i in zip(these, inside, strict=True)
                    ),
                    "golden": sum(bool(c["golden"]) for c in these),
                }
                figures["rounds"][n] = f
                table["rows"].append([d, split, f"round {n} ({len(these)})", f"{tk:.0f}", f["answer_in_it"],
                                      f["reader_passes"], f["passes_answer_in_it"], f["passes_answer_not_in_it"],
                                      f["golden"]])  # fmt: skip
            out.setdefault("hard_filter", {}).setdefault(d, {})[split] = figures
    show(out, "hard_filter", "Where the hard filter fails (extractive teacher; reader: SmolLM2-135M)", table)


def heldout_arms(r: Path, d: str, ft: list[dict]) -> dict[str, list[tuple[str, str, float, float]]]:
    """The held-out arms of dataset `d`: name -> (qid, doc, em, f1) per question."""
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
    return arms


def heldout_table(r: Path, model, tokenizer, out: dict) -> None:
    for d in DATASETS:
        ft = rows(r / f"ft_{d}" / "evidence.jsonl")
        if not ft:
            continue
        questions = {x["question_id"]: x["question"] for x in ft}
        arms = heldout_arms(r, d, ft)
        raw_by_id = {a[0]: a for a in arms["r_raw"]}
        raw_of = {a[0]: a[1] for a in arms["r_raw"]}
        columns = [
            "evidence",
            "EM",
            "F1",
            "F1 / raw",
            "TK",
            "TK / raw",
            "s_orient",
            "r_inc (sentences, lexical)",
        ]
        table = {"columns": columns, "align": "lrrrrrrr", "rows": []}
        figures = {"questions": len(questions), "arms": {}}
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
            f = {"questions": len(arm), "em": mean([a[2] for a in arm]), "f1": f1,
                 "f1_over_raw": f1 / base_f1 if base_f1 else float("nan"), "tk": tk, "tk_over_raw": tk / base_tk,
                 "s_orient": orient, "r_inc": inc}  # fmt: skip
            figures["arms"][name] = f
            table["rows"].append([name, f"{f['em']:.3f}", f"{f1:.3f}", f"{f['f1_over_raw']:.2f}", f"{tk:.0f}",
                                  f"{f['tk_over_raw']:.2f}", f"{orient:.3f}", f"{inc:.3f}"])  # fmt: skip
        gain = paired_bootstrap([x["f1_raw"] for x in ft], [x["f1_rewrite"] for x in ft])
        rewritten = sum(x["rewrite"] is not None for x in ft)
        figures |= {"student_f1_gain": gain, "rewritten": rewritten, "evaluated": len(ft)}
        out.setdefault("heldout", {})[d] = figures
        name = f"heldout_{d}"
        title = f"Held-out {d} ({len(questions)} questions; reader: SmolLM2-135M, two demos)"
        show(out, name, title, table)
        note(out, name, f"Student F1 - r_raw F1, paired bootstrap 95%: {interval(gain)}; "
                        f"rewritten {rewritten} of {len(ft)} (the rest fall back to r_raw).")  # fmt: skip
        note(
            out,
            name,
            "(EM of the extractive and golden rows: S_perf = 1, the reader's F1 of 1.0; their F1 is S_perf. "
            "r_inc here: the share of the evidence's sentences of 5+ words that the lexical judge does not find "
            "in r_raw, an offline stand-in for the LLM fact extractor + judge.)",
        )


def curve_row(d: str, size: int, rep: dict, gain: tuple[float, float, float]) -> list:
    """One row of the learning curve from a `rewrite` report.json and the student's paired F1 gain.

    >>> curve_row("world", 40, {"rewritten": 9, "questions": 10, "f1_raw": 0.2, "f1_rewrite": 0.25,
    ...           "tk_ratio": 0.5}, (0.05, -0.01, 0.1))
    ['world', 40, '9 / 10', '0.200', '0.250', '+0.050 [-0.010, +0.100]', '0.50']
    """
    return [d, size, f"{rep['rewritten']} / {rep['questions']}", f"{rep['f1_raw']:.3f}", f"{rep['f1_rewrite']:.3f}",
            interval(gain), f"{rep['tk_ratio']:.2f}"]  # fmt: skip


def curve_table(r: Path, out: dict) -> None:
    """The student at 3+ training sizes, held out: reader F1 and TK of its rewrites against r_raw's."""
    sized = sorted(int(f.name.split("_")[-1]) for f in r.glob("ft_data_*") if f.name.split("_")[-1].isdigit())
    sizes = [(n, f"ft_{n}") for n in sized] + [(None, "ft")]
    if not any((r / f"{prefix}_{d}" / "report.json").is_file() for _, prefix in sizes for d in DATASETS):
        return
    columns = [
        "dataset",
        "train rows",
        "rewritten",
        "F1 raw",
        "F1 student",
        "student - raw [95%]",
        "TK / raw",
    ]
    table = {"columns": columns, "align": "lrrrrlr", "rows": []}
    for d in DATASETS:
        for n, prefix in sizes:
            ev = rows(r / f"{prefix}_{d}" / "evidence.jsonl")
            rep = load(r / f"{prefix}_{d}" / "report.json")
            if not ev or not rep:
                continue
            size = n if n is not None else len(rows_of_dataset(r / "ft_data"))
            gain = paired_bootstrap([x["f1_raw"] for x in ev], [x["f1_rewrite"] for x in ev])
            keep = ("rewritten", "questions", "f1_raw", "f1_rewrite", "tk_ratio")
            out.setdefault("curve", {}).setdefault(d, []).append(
                {"train_rows": size, "run": prefix} | {k: rep[k] for k in keep} | {"f1_gain": gain}
            )
            table["rows"].append(curve_row(d, size, rep, gain))
    show(out, "curve", "Learning curve: QREAM-FT student by golden rewrites seen (held out)", table)


def rows_of_dataset(folder: Path) -> list:
    """The training rows of a saved DatasetDict folder ([] when absent)."""
    if not folder.is_dir():
        return []
    return list(datasets.load_from_disk(str(folder))["train"])


def rag_table(r: Path, out: dict) -> None:
    if (md := r / "rag_hotpotqa" / "table.md").is_file():
        out.setdefault("rag", {})["hotpotqa"] = load(r / "rag_hotpotqa" / "summary.json")
        table, notes = parse_markdown_table(md.read_text())
        title = "eval rag --rewrite ft, held-out HotpotQA (own 10 paragraphs; generator SmolLM2-135M)"
        show_read_back(out, "rag_hotpotqa", title, table, notes)


def ablation_table(r: Path, tokenizer, out: dict) -> None:
    for d, split in ((d, split) for d in DATASETS for split in ("train", "heldout")):
        cands = rows(r / f"ext_{d}_{split}" / "candidates.jsonl")
        if not cands:
            continue
        questions = len({c["question_id"] for c in cands})
        columns = [
            "selection",
            "golden questions",
            "reader F1 of the kept",
            "S_fact of the kept",
            "TK of the kept",
        ]
        table = {"columns": columns, "align": "lrrrr", "rows": []}
        figures = {"questions": questions, "selections": {}}
        for mode in ("dual", "utility", "fidelity", "none"):
            selected, _ = select_all([dict(c) for c in cands], mode)
            kept = [c for c in selected if c["golden"]]
            tk = mean(input_tokens([c["document"] for c in kept], tokenizer)) if kept else float("nan")
            f1, s_fact = mean([c["s_perf"] for c in kept]), mean([c["s_fact"] for c in kept])
            figures["selections"][mode] = {
                "golden_questions": len(kept),
                "f1": f1,
                "s_fact": s_fact,
                "tk": tk,
            }
            table["rows"].append([mode, len(kept), f"{f1:.3f}", f"{s_fact:.3f}", f"{tk:.0f}"])
        out.setdefault("ablation", {}).setdefault(d, {})[split] = figures
        title = f"Selection ablation, extractive candidates, {d} {split} ({questions} q)"
        show(out, f"ablation_{d}_{split}", title, table)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "run_dir", type=Path, nargs="?", default=Path("runs/bench_qream"), help="bench_qream.sh's"
    )
    ap.add_argument("--beside", default=NOT_RECORDED, help="what shared the cores ('nothing' when alone)")
    args = ap.parse_args(argv)
    r = args.run_dir
    if not r.is_dir():
        print(f"{r}: no such run folder", file=sys.stderr)
        return 1
    out: dict = {"run_dir": str(r)}
    path = resolve_model("smollm2-135m-instruct")
    tokenizer = AutoTokenizer.from_pretrained(path)
    judges_table(r, out)
    golden_table(r, out)
    rounds_table(r, out)
    hard_filter_table(r, tokenizer, out)
    with torch.no_grad():
        heldout_table(r, AutoModelForCausalLM.from_pretrained(path).eval(), tokenizer, out)
    curve_table(r, out)
    ablation_table(r, tokenizer, out)
    rag_table(r, out)
    write_result(r / "tables.json", out, out.pop("tables", {}), beside=args.beside)
    print(f"\nresult: {r / 'tables.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
