"""`r3forge annotate qream-judge-probe`: a labelled probe set for QREAM's fact judge, built from the data, and
the three judges (the paper's LLM verdict, the LLM's P(yes), the lexical fallback) scored on it.

    r3forge annotate qream-judge-probe --qa_path ../shared/data/hotpotqa/rpt_distractor_dev_sample_dev.jsonl \\
        --max_questions 60 --output_dir runs/qream/judge_probe --backend openai --serve true

Per question, r_raw is its top-K passages (own passages, or an index's top-K, as in `annotate qream`) and the
claims are:

    verbatim  (label 1)  a sentence of r_raw as written
    trimmed   (label 1)  a sentence of r_raw without its parentheses and trailing clauses (>= 5 words left)
    other     (label 0)  a sentence of another question's r_raw
    swapped   (label 0)  a sentence of r_raw with one capitalized name or number replaced by one from another
                         question's r_raw (same wording, a wrong fact)

The questions are split in two halves by a seeded hash: tau (of P(yes), or of the lexical overlap) is chosen
on the calibration half for accuracy and reported on the other; AUC is over all claims. Outputs: `claims.jsonl`
(every claim with each judge's score), `report.json`, `table.md`; the LLM's verdicts are cached in
`fact_judge/` and `fact_judge_prob/` (resumable).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from r3forge.backends.open import LLMConfig, open_llm
from r3forge.data.loaders import load_qa
from r3forge.errors import ConfigError
from r3forge.metrics.ranking import roc_auc
from r3forge.qream.pipeline import raw_retrievals
from r3forge.qream.score import FactJudgeStep, lexical_overlap
from r3forge.synth.engine import EngineConfig, run_step
from r3forge.synth.export import load_accepted
from r3forge.synth.job import RunConfig
from r3forge.text import STOPWORDS, complete_sentences

KINDS = ("verbatim", "trimmed", "other", "swapped")
_PAREN = re.compile(r"\s*\([^()]*\)")
_SWAPPABLE = re.compile(r"\b(?:\d[\d,.]*|[A-Z][a-z]+)\b")


@dataclass
class ProbeConfig:
    qa_path: str = field(metadata={"help": "Questions with their passages (r3forge load_qa)."})
    qa_format: str = field(default="auto", metadata={"help": "QA format for load_qa (auto: detect)."})
    max_questions: int = field(default=60, metadata={"help": "Questions to build claims from."})
    top_k: int = field(default=5, metadata={"help": "K, passages concatenated into r_raw.", "min": 1})
    index: str = field(
        default="", metadata={"help": "r_raw from this index's top-K; empty: each record's own passages."}
    )
    retriever_url: str = field(
        default="", metadata={"help": "r_raw from a running `r3forge serve retriever` instead of `index`."}
    )
    claims_per_kind: int = field(default=1, metadata={"help": "Claims of each kind per question."})
    seed: int = field(default=0, metadata={"help": "Seed of the claim draw and the calibration split."})
    judges: str = field(
        default="llm,prob,lexical",
        metadata={
            "help": "Comma list of judges: llm (generated verdict), prob (P(yes)), lexical (no model)."
        },
    )
    top_logprobs: int = field(default=20, metadata={"help": "prob: top-k logprobs of the answer token."})


def sentences(text: str, min_words: int = 5) -> list[str]:
    """The sentences of `text` with at least `min_words` words.

    >>> sentences("Paris is the capital of France. Short one. It has 2.1 million people today!")
    ['Paris is the capital of France.', 'It has 2.1 million people today!']
    """
    return [s for s in complete_sentences(text) if len(s.split()) >= min_words]


def trim(sentence: str) -> str | None:
    """The sentence without parentheses and after its first clause, or None when < 5 words would be left or
    nothing changes.

    >>> trim("Paris (French: Paris) is the capital of France, with 2.1 million people.")
    'Paris is the capital of France.'
    >>> trim("Paris is big.") is None
    True
    """
    short = _PAREN.sub("", sentence).split(", ")[0].split("; ")[0].strip().rstrip(".!?") + "."
    return short if len(short.split()) >= 5 and short != sentence else None


def swap(sentence: str, donors: list[str], rng: random.Random) -> str | None:
    """`sentence` with one capitalized word or number (not its first word) replaced by a token of the same
    kind from `donors` that `sentence` does not contain; None when there is none.

    >>> swap("The tower was built in 1889 in Paris.", ["Rome was founded in 753."], random.Random(0))
    'The tower was built in 753 in Paris.'
    """
    spots = [m for m in _SWAPPABLE.finditer(sentence) if m.start() > 0]
    rng.shuffle(spots)
    for m in spots:
        number = m.group()[0].isdigit()
        pool = sorted(
            {
                t
                for d in donors
                for t in _SWAPPABLE.findall(d)
                if t[0].isdigit() == number and t not in sentence and t.lower() not in STOPWORDS
            }
        )
        if pool:
            return sentence[: m.start()] + rng.choice(pool) + sentence[m.end() :]
    return None


def build_probe(records: list[dict], raws: list[str], claims_per_kind: int, seed: int) -> list[dict]:
    """One item per question (`raws`: its r_raw): `raw`, `facts` (its claims), `labels` and `kinds` aligned
    with them, and `half` (calibrate / test). Claims of one kind are distinct; a kind with no candidate is
    skipped."""
    rng = random.Random(seed)
    pools = [sentences(raw) for raw in raws]
    items = []
    for i, (record, raw, own) in enumerate(zip(records, raws, pools, strict=True)):
        others = [s for j, pool in enumerate(pools) if j != i for s in pool]
        if not own or not others:
            continue
        own_shuffled = rng.sample(own, len(own))
        drawn = {
            "verbatim": own_shuffled[:claims_per_kind],
            "trimmed": [t for t in map(trim, own_shuffled) if t][:claims_per_kind],
            "other": [s for s in rng.sample(others, min(len(others), 50)) if s not in raw][:claims_per_kind],
            "swapped": [
                t
                for t in (swap(s, rng.sample(others, min(len(others), 20)), rng) for s in own_shuffled)
                if t and t not in raw
            ][:claims_per_kind],
        }
        claims = [(c, kind) for kind in KINDS for c in dict.fromkeys(drawn[kind])]
        qid = str(record["id"])
        half = "calibrate" if int(hashlib.sha256(f"{seed}:{qid}".encode()).hexdigest(), 16) % 2 else "test"
        items.append(
            {
                "question_id": qid,
                "round": 0,
                "document": "",
                "raw": raw,
                "half": half,
                "facts": [c for c, _ in claims],
                "kinds": [k for _, k in claims],
                "labels": [int(k in ("verbatim", "trimmed")) for _, k in claims],
            }
        )
    return items


def best_threshold(scores: list[float], labels: list[int]) -> float:
    """The threshold t (supported: score >= t) with the highest accuracy; the lowest such t on ties.

    >>> best_threshold([0.1, 0.4, 0.6, 0.9], [0, 0, 1, 1])
    0.6
    """
    candidates = [*sorted(set(scores)), float("inf")]
    return max(candidates, key=lambda t: (accuracy(scores, labels, t), -t))


def accuracy(scores: list[float], labels: list[int], threshold: float) -> float:
    return sum((s >= threshold) == bool(y) for s, y in zip(scores, labels, strict=True)) / max(len(labels), 1)


def judge_table(
    claims: list[dict], judges: list[str], defaults: dict[str, float]
) -> dict[str, dict[str, Any]]:
    """Per judge: AUC (all claims), tau chosen on the calibration half, accuracy on the test half at that tau
    and at the judge's default threshold, and the share judged supported per claim kind (at the default)."""
    table = {}
    for judge in judges:
        rows = [c for c in claims if c[judge] is not None]
        cal, test = ([c for c in rows if c["half"] == h] for h in ("calibrate", "test"))
        tau = best_threshold([c[judge] for c in cal], [c["label"] for c in cal]) if cal else defaults[judge]
        table[judge] = {
            "claims": len(rows),
            "auc": roc_auc([c[judge] for c in rows], [c["label"] for c in rows]),
            "tau_calibrated": tau,
            "test_accuracy_calibrated": accuracy([c[judge] for c in test], [c["label"] for c in test], tau),
            "default_threshold": defaults[judge],
            "test_accuracy_default": accuracy(
                [c[judge] for c in test], [c["label"] for c in test], defaults[judge]
            ),
            "supported_by_kind": {
                k: round(
                    sum(c[judge] >= defaults[judge] for c in rows if c["kind"] == k)
                    / max(sum(c["kind"] == k for c in rows), 1),
                    3,
                )
                for k in KINDS
            },
        }
    return table


def format_table(table: dict[str, dict[str, Any]]) -> str:
    head = ["judge", "claims", "AUC", "tau (calibrated)", "test acc @ tau", "default", "test acc @ default"]
    head += [f"supported: {k}" for k in KINDS]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for judge, t in table.items():
        auc = "-" if t["auc"] is None else f"{t['auc']:.3f}"
        cells = [
            judge,
            str(t["claims"]),
            auc,
            f"{t['tau_calibrated']:.3g}",
            f"{t['test_accuracy_calibrated']:.3f}",
            f"{t['default_threshold']:.3g}",
            f"{t['test_accuracy_default']:.3f}",
            *(f"{t['supported_by_kind'][k]:.3f}" for k in KINDS),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def probe_main(config: ProbeConfig, llm_cfg: LLMConfig, run: RunConfig) -> dict[str, Any]:
    judges = [j.strip() for j in config.judges.split(",") if j.strip()]
    unknown = sorted(set(judges) - {"llm", "prob", "lexical"})
    if unknown or not judges:
        raise ConfigError(
            f"judges: unknown {unknown} (choose from llm, prob, lexical), got {config.judges!r}"
        )
    records = list(load_qa(config.qa_path, config.qa_format))[: config.max_questions]
    raw = raw_retrievals(config, records)  # type: ignore[arg-type]  # reads index, retriever_url, top_k
    items = build_probe(records, [raw[str(r["id"])] for r in records], config.claims_per_kind, config.seed)
    if not items:
        raise ConfigError(f"{config.qa_path}: no question with sentences of >= 5 words to build claims from")
    out = Path(run.output_dir)
    scores: dict[str, dict[tuple[str, int], float | None]] = {}
    model_judges = [j for j in judges if j != "lexical"]
    if model_judges:
        with open_llm(llm_cfg) as llm:
            for judge in model_judges:
                scoring, folder = (
                    ("probability", "fact_judge_prob") if judge == "prob" else ("verdict", "fact_judge")
                )
                step = FactJudgeStep(
                    scoring=scoring, top_logprobs=config.top_logprobs, tokenizer=llm.tokenizer
                )
                engine = EngineConfig(
                    output_dir=str(out / folder),
                    model=llm.model_id,
                    batch_size=run.batch_size,
                    concurrency=run.concurrency,
                    progress=run.progress,
                )
                run_step(step, items, llm.backend, engine)
                done = {r["question_id"]: r for r in load_accepted(out / folder)}
                key = "p_yes" if judge == "prob" else "supported"
                scores[judge] = {
                    (q, i): None if v is None else float(v)
                    for q, r in done.items()
                    for i, v in enumerate(r[key])
                }
    claims = []
    for item in items:
        for i, (fact, label, kind) in enumerate(
            zip(item["facts"], item["labels"], item["kinds"], strict=True)
        ):
            row = {
                "question_id": item["question_id"],
                "half": item["half"],
                "kind": kind,
                "label": label,
                "fact": fact,
                "lexical": lexical_overlap(fact, item["raw"]),
            }
            claims.append(row | {j: scores[j].get((item["question_id"], i)) for j in model_judges})
    defaults = {"llm": 1.0, "prob": 0.5, "lexical": 0.8}
    table = judge_table(claims, judges, defaults)
    figures = {"questions": len(items), "claims": len(claims), "model": llm_cfg.model, "judges": table}
    out.mkdir(parents=True, exist_ok=True)
    (out / "claims.jsonl").write_text(
        "".join(json.dumps(c, ensure_ascii=False) + "\n" for c in claims), "utf-8"
    )
    (out / "report.json").write_text(json.dumps(figures, indent=1) + "\n", encoding="utf-8")
    (out / "table.md").write_text(format_table(table), encoding="utf-8")
    print(format_table(table), file=sys.stdout)
    return figures


PROBE_CONFIGS = (ProbeConfig, LLMConfig, RunConfig)
