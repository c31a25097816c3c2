"""Task metrics of a student during SFT: it generates on held-out rows with the live model being trained.

- verbal reranker: parse rate of `Comment: ... / Score: s`, exact score accuracy and Spearman against the
  teacher's scores (the SFT targets), NDCG@k of the student's ranking (score, then score-token logprob)
  against gold relevance where rows carry it. An unparsed output counts as wrong and ranks last.
- QREAM-FT: a fixed reader answers each question from the student's rewrite and from the golden rewrite
  (the SFT target); token F1 of both.

`TaskEval` is the TrainerCallback that computes them at every evaluation (and, with `at_start`, before the
first step) and logs them through the trainer as `eval_task_*`, next to the eval loss.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from transformers import TrainerCallback

from r3forge.annotate.report import agreement
from r3forge.annotate.verbal import ParsedAnnotation, parse_annotation, score_token_index, token_decoder
from r3forge.backends.base import Choice, GenerationRequest
from r3forge.backends.hf_local import HFLocalBackend, HFLocalConfig
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


def generate(model: Any, tokenizer: Any, prompts: Sequence[list[dict]], max_new_tokens: int,
             batch_size: int = 16) -> list[Choice]:  # fmt: skip
    """Greedy completions of chat prompts by `model` (train mode restored after), with top-5 logprobs."""
    backend = HFLocalBackend(model, tokenizer, batch_size)
    requests = [GenerationRequest(messages=p, max_tokens=max_new_tokens, top_logprobs=5) for p in prompts]
    return [r.choices[0] for r in backend.generate(requests)]


def verbal_metrics(
    rows: Sequence[dict], choices: Sequence[Choice], tokenizer: Any = None
) -> dict[str, float]:
    """Parse rate, score accuracy, Spearman vs the teacher's `score` and NDCG@k vs `relevance`.

    >>> rows = [{"question_id": "q", "doc_id": d, "score": s, "relevance": r} for d, s, r in
    ...         [("a", 5, 2), ("b", 1, 0), ("c", 2, 0)]]
    >>> outs = ["Comment: has it.\\nScore: 5", "Comment: no.\\nScore: 2", "no format"]
    >>> m = verbal_metrics(rows, [Choice(t, [], [], [], "stop") for t in outs])
    >>> m["parse_rate"], m["score_accuracy"], m["ndcg@1"]
    (0.6667, 0.3333, 1.0)
    """
    decode = token_decoder(tokenizer)
    student, teacher, ranked, parsed, correct = [], [], [], 0, 0
    for i, (row, choice) in enumerate(zip(rows, choices, strict=True)):
        p = parse_annotation(choice.text)
        score, logprob = 0, None
        if isinstance(p, ParsedAnnotation):
            parsed, correct, score = parsed + 1, correct + (p.score == int(row["score"])), p.score
            idx = score_token_index(choice, p.score_offset, decode)
            logprob = choice.logprobs[idx] if idx is not None and choice.logprobs else None
            student.append(p.score)
            teacher.append(int(row["score"]))
        ranked.append({"question_id": row["question_id"], "doc_id": row["doc_id"], "score": score,
                       "score_logprob": logprob, "relevance": row.get("relevance"), "rank": i})  # fmt: skip
    n = max(len(rows), 1)
    out = {"parse_rate": round(parsed / n, 4), "score_accuracy": round(correct / n, 4)}
    rho = spearman(student, teacher) if len(student) >= 2 else math.nan
    out["spearman"] = round(rho, 4) if not math.isnan(rho) else math.nan
    ndcg = agreement(ranked, k_values=K_VALUES)
    out |= {f"ndcg@{k}": ndcg[f"ndcg@{k}"] for k in K_VALUES if f"ndcg@{k}" in ndcg}
    return out


def rewrite_text(choice: Choice) -> str:
    """A student's rewrite, cleaned as QREAM cleans the teacher's (echo lines, loops, unfinished end)."""
    return trim_generation(strip_echo(choice.text), choice.finish_reason == "length")[0]


def qream_metrics(rows: Sequence[dict], rewrites: Sequence[str], reader: Any, few_shot: bool = True) -> dict:
    """Reader F1 from the student's rewrites and from the golden rewrites (`completion`), and the share of
    empty rewrites. `rows` need `question`, `answers`; `reader` is a GenerationBackend."""
    step = ReaderStep(few_shot=few_shot)
    items = []
    for i, (row, rewrite) in enumerate(zip(rows, rewrites, strict=True)):
        base = {"question_id": str(i), "question": row["question"], "answers": list(row["answers"])}
        items += [base | {"round": 1, "document": rewrite or "(empty)"},
                  base | {"round": 0, "document": row["completion"][-1]["content"]}]  # fmt: skip
    results = reader.generate([step.prompt(item) for item in items])
    f1 = [0.0 if isinstance(out := step.parse(item, r), Rejected) else out["s_perf"]
          for item, r in zip(items, results, strict=True)]  # fmt: skip
    n = max(len(rows), 1)
    return {"reader_f1": round(sum(f1[0::2]) / n, 4), "reader_f1_golden": round(sum(f1[1::2]) / n, 4),
            "empty_rewrites": round(sum(not r for r in rewrites) / n, 4)}  # fmt: skip


class TaskEval(TrainerCallback):
    """Task metrics at each evaluation (and at the start), logged through `trainer.log` as eval_task_*."""

    def __init__(self, trainer: Any, rows: Sequence[dict], task: str, max_new_tokens: int = 128,
                 batch_size: int = 16, reader_model: str = "", reader_few_shot: bool = True) -> None:  # fmt: skip
        self.trainer, self.rows, self.task = trainer, list(rows), task
        self.max_new_tokens, self.batch_size = max_new_tokens, batch_size
        self.reader_model, self.reader_few_shot = reader_model, reader_few_shot
        self._reader: HFLocalBackend | None = None
        self.at_start = True
        self.history: list[dict] = []

    def compute(self, model: Any) -> dict[str, float]:
        tokenizer = self.trainer.processing_class
        prompts = [row["prompt"] for row in self.rows]
        choices = generate(model, tokenizer, prompts, self.max_new_tokens, self.batch_size)
        if self.task == "verbal":
            return verbal_metrics(self.rows, choices, tokenizer)
        if self._reader is None:
            device = str(next(model.parameters()).device)
            self._reader = HFLocalBackend.from_config(HFLocalConfig(model=self.reader_model, device=device))
        return qream_metrics(
            self.rows, [rewrite_text(c) for c in choices], self._reader, self.reader_few_shot
        )

    def _log(self, model: Any, step: int) -> None:
        metrics = {f"eval_task_{k}": v for k, v in self.compute(model).items()}
        self.history.append({"step": step, **metrics})
        self.trainer.log(metrics)

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if self.at_start and state.global_step == 0:
            self._log(model, 0)

    def on_evaluate(self, args, state, control, model=None, **kwargs):
        self._log(model, state.global_step)
