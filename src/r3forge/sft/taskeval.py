"""Task metrics of a student during SFT: it generates on held-out rows with the live model being trained.

- verbal reranker: parse rate of `Comment: ... / Score: s`, exact score accuracy and Spearman against the
  teacher's scores (the SFT targets), NDCG@k of the student's ranking (score, then score-token logprob)
  against gold relevance where rows carry it, and quote faithfulness: the share of the spans its comments
  quote that the passage holds verbatim (`quote_rate`: the share of comments that quote at all). An
  unparsed output counts as wrong and ranks last.
- QREAM-FT: a fixed reader answers each question from the student's rewrite and from the golden rewrite
  (the SFT target); token F1 of both.

`TaskEval` is the TrainerCallback that computes them at every evaluation (and, with `at_start`, before the
first step) and logs them through the trainer as `eval_task_*`, next to the eval loss.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from r3forge.annotate.report import agreement
from r3forge.annotate.verbal import (
    ParsedAnnotation,
    expected_score,
    parse_annotation,
    score_logprobs,
    score_token_index,
)
from r3forge.backends.base import Choice, GenerationRequest, token_decoder
from r3forge.backends.hf_local import HFLocalBackend
from r3forge.backends.open import LLMConfig, open_llm
from r3forge.data.jsonio import write_jsonl
from r3forge.metrics.qa import quotes_found
from r3forge.metrics.ranking import spearman
from r3forge.qream.rewrite import strip_echo, trim_generation
from r3forge.qream.score import ReaderStep
from r3forge.synth.engine import Rejected

K_VALUES = (1, 3, 5)


def whole_questions(rows: Sequence[dict], n: int) -> list[dict]:
    """The first rows of the split, extended to whole questions (NDCG needs all of a question's documents),
    until at least `n` rows.

    >>> [r["q"] for r in whole_questions([{"question_id": q, "q": q} for q in "aabbbc"], 3)]
    ['a', 'a', 'b', 'b', 'b']
    """
    out: list[dict] = []
    for row in rows:
        if len(out) >= n and row["question_id"] != out[-1]["question_id"]:
            break
        out.append(row)
    return out


def generate(
    model: Any, tokenizer: Any, prompts: Sequence[list[dict]], max_new_tokens: int, batch_size: int = 16
) -> list[Choice]:
    """Greedy completions of chat prompts by `model` (train mode restored after), with top-5 logprobs."""
    backend = HFLocalBackend(model, tokenizer, batch_size)
    requests = [GenerationRequest(messages=p, max_tokens=max_new_tokens, top_logprobs=5) for p in prompts]
    return [r.choices[0] for r in backend.generate(requests)]


def verbal_records(rows: Sequence[dict], choices: Sequence[Choice], tokenizer: Any = None) -> list[dict]:
    """One record a row: the student's text, its parsed score (None when unparsed), score-token logprob and
    expected score (from the digit logprobs at the score token), next to the teacher's score and the gold
    relevance."""
    decode = token_decoder(tokenizer)
    records = []
    for row, choice in zip(rows, choices, strict=True):
        p = parse_annotation(choice.text)
        score, logprob, expected = None, None, None
        if isinstance(p, ParsedAnnotation):
            score = p.score
            idx = score_token_index(choice, p.score_offset, decode)
            logprob = choice.logprobs[idx] if idx is not None and choice.logprobs else None
            if idx is not None and choice.top_logprobs:
                expected = expected_score(score_logprobs(choice.top_logprobs[idx], decode))
        # the passage: rows of an older export lack doc_text; their prompt holds it (and the question)
        passage = row.get("doc_text") or row["prompt"][-1]["content"]
        quotes, found = quotes_found(p.comment, passage) if isinstance(p, ParsedAnnotation) else (0, 0)
        records.append(
            {
                "question_id": row["question_id"],
                "doc_id": row["doc_id"],
                "teacher_score": int(row["score"]),
                "relevance": row.get("relevance"),
                "student_score": score,
                "score_logprob": logprob,
                "expected_score": expected,
                "quotes": quotes,
                "quotes_found": found,
                "text": choice.text,
            }
        )
    return records


def verbal_metrics(records: Sequence[dict]) -> dict[str, float]:
    """Parse rate, score accuracy, Spearman vs the teacher's score and NDCG@k vs `relevance` (argmax score
    with logprob tie-break; `expected_ndcg@k` by the expected score where the records have it), from
    `verbal_records`, and the quote rate and faithfulness of the parsed comments (NaN: nothing quoted). An
    unparsed output counts as wrong and ranks last.

    >>> rows = [{"question_id": "q", "doc_id": d, "score": s, "relevance": r, "doc_text": "Ann is 3."}
    ...         for d, s, r in [("a", 5, 2), ("b", 1, 0), ("c", 2, 0)]]
    >>> outs = ['Comment: "Ann is 3" has it.\\nScore: 5', 'Comment: "Ann is 4".\\nScore: 2', "no format"]
    >>> m = verbal_metrics(verbal_records(rows, [Choice(t, [], [], [], "stop") for t in outs]))
    >>> m["parse_rate"], m["score_accuracy"], m["ndcg@1"], m["quote_rate"], m["quote_faithfulness"]
    (0.6667, 0.3333, 1.0, 1.0, 0.5)
    """
    parsed = [r for r in records if r["student_score"] is not None]
    n = max(len(records), 1)
    correct = sum(r["student_score"] == r["teacher_score"] for r in parsed)
    out = {"parse_rate": round(len(parsed) / n, 4), "score_accuracy": round(correct / n, 4)}
    student, teacher = [r["student_score"] for r in parsed], [r["teacher_score"] for r in parsed]
    rho = spearman(student, teacher) if len(student) >= 2 else math.nan
    out["spearman"] = round(rho, 4) if not math.isnan(rho) else math.nan
    quotes = sum(r.get("quotes", 0) for r in parsed)
    out["quote_rate"] = (
        round(sum(r.get("quotes", 0) > 0 for r in parsed) / len(parsed), 4) if parsed else math.nan
    )
    out["quote_faithfulness"] = (
        round(sum(r.get("quotes_found", 0) for r in parsed) / quotes, 4) if quotes else math.nan
    )
    ranked = [
        {
            "question_id": r["question_id"],
            "doc_id": r["doc_id"],
            "score": r["student_score"] or 0,
            "score_logprob": r["score_logprob"],
            "relevance": r["relevance"],
            "rank": i,
            "expected_score": r.get("expected_score") if r["student_score"] is not None else 0.0,
        }
        for i, r in enumerate(records)
    ]
    ndcg = agreement(ranked, k_values=K_VALUES)
    out |= {
        f"{m}@{k}": ndcg[f"{m}@{k}"]
        for m in ("ndcg", "expected_ndcg")
        for k in K_VALUES
        if f"{m}@{k}" in ndcg
    }
    return out


def rewrite_text(choice: Choice) -> str:
    """A student's rewrite, cleaned as QREAM cleans the teacher's (echo lines, loops, unfinished end)."""
    return trim_generation(strip_echo(choice.text), choice.finish_reason == "length")[0]


def qream_records(
    rows: Sequence[dict], rewrites: Sequence[str], reader: Any, few_shot: bool = True
) -> list[dict]:
    """A fixed reader answers each question from the student's rewrite and from the golden rewrite
    (`completion`); one record a row with both token F1s. `rows` need `question`, `answers`; `reader` is a
    GenerationBackend."""
    step = ReaderStep(few_shot=few_shot)
    items = []
    for i, (row, rewrite) in enumerate(zip(rows, rewrites, strict=True)):
        base = {"question_id": str(i), "question": row["question"], "answers": list(row["answers"])}
        items += [
            base | {"round": 1, "document": rewrite or "(empty)"},
            base | {"round": 0, "document": row["completion"][-1]["content"]},
        ]
    results = reader.generate([step.prompt(item) for item in items])
    f1 = [
        0.0 if isinstance(out := step.parse(item, r), Rejected) else out["s_perf"]
        for item, r in zip(items, results, strict=True)
    ]
    return [
        {
            "question": row["question"],
            "answers": list(row["answers"]),
            "rewrite": rewrite,
            "reader_f1": f1[2 * i],
            "reader_f1_golden": f1[2 * i + 1],
        }
        for i, (row, rewrite) in enumerate(zip(rows, rewrites, strict=True))
    ]


def qream_metrics(records: Sequence[dict]) -> dict[str, float]:
    """Mean reader F1 from the student's and the golden rewrites, and the share of empty rewrites.

    >>> qream_metrics([{"rewrite": "x", "reader_f1": 1.0, "reader_f1_golden": 0.5},
    ...                {"rewrite": "", "reader_f1": 0.0, "reader_f1_golden": 0.5}])
    {'reader_f1': 0.5, 'reader_f1_golden': 0.5, 'empty_rewrites': 0.5}
    """
    n = max(len(records), 1)
    return {
        "reader_f1": round(sum(r["reader_f1"] for r in records) / n, 4),
        "reader_f1_golden": round(sum(r["reader_f1_golden"] for r in records) / n, 4),
        "empty_rewrites": round(sum(not r["rewrite"] for r in records) / n, 4),
    }


class TaskEval(TrainerCallback):
    """Task metrics at each evaluation (and at the start), logged through `trainer.log` as eval_task_*; with
    `out_dir`, each evaluation's per-row generations go to `<out_dir>/step_<N>.jsonl`."""

    def __init__(
        self,
        trainer: Any,
        rows: Sequence[dict],
        task: str,
        max_new_tokens: int = 128,
        batch_size: int = 16,
        reader: tuple[str, bool] = ("", True),
        out_dir: Path | None = None,
    ) -> None:
        self.trainer, self.rows, self.task = trainer, list(rows), task
        self.max_new_tokens, self.batch_size = max_new_tokens, batch_size
        self.reader_model, self.reader_few_shot = reader
        self.out_dir = out_dir
        self._reader: HFLocalBackend | None = None
        self._opened = ExitStack()  # the reader, opened by open_llm on first use
        self.at_start = True
        self.history: list[dict] = []

    def compute(self, model: Any) -> tuple[dict[str, float], list[dict]]:
        """(metrics, per-row records) of the model as it is now."""
        tokenizer = self.trainer.processing_class
        prompts = [row["prompt"] for row in self.rows]
        choices = generate(model, tokenizer, prompts, self.max_new_tokens, self.batch_size)
        if self.task == "verbal":
            records = verbal_records(self.rows, choices, tokenizer)
            return verbal_metrics(records), records
        if self._reader is None:
            device = str(next(model.parameters()).device)
            reader = LLMConfig(backend="hf", model=self.reader_model, device=device)
            self._reader = self._opened.enter_context(open_llm(reader)).backend
        rewrites = [rewrite_text(c) for c in choices]
        records = qream_records(self.rows, rewrites, self._reader, self.reader_few_shot)
        return qream_metrics(records), records

    def _log(self, model: Any, step: int) -> None:
        values, records = self.compute(model)
        metrics = {f"eval_task_{k}": v for k, v in values.items()}
        self.history.append({"step": step, **metrics})
        if self.out_dir is not None and self.trainer.is_world_process_zero():
            write_jsonl(self.out_dir / f"step_{step:06d}.jsonl", records)
        self.trainer.log(metrics)

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if self.at_start and state.global_step == 0:
            self._log(model, 0)

    def on_evaluate(self, args, state, control, model=None, **kwargs):
        self._log(model, state.global_step)

    def on_train_end(self, args, state, control, **kwargs):
        self._opened.close()  # a later evaluate() opens the reader again
        self._reader = None
