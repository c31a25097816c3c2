"""QREAM as the optional post-step of `r3forge eval rag`: after truncation, the kept passages of a sweep point
are rewritten into one question-oriented document, and the generator answers from that document instead.

With `rewrite: icl | ft`, every row of the sweep gets a twin `<method>+qream` (same question, M, T_p), so
the table shows each selection with and without the rewrite, and NTE compares both against `none`:

    r3forge eval rag --config configs/eval/igp_hotpotqa_cpu.yaml --rewrite icl \\
        --rewrite_demos_from runs/annotate/qream_hotpotqa_cpu

Rewrites go through the synthesis engine under `<output_dir>/rewrite/` (cached by question + the rewritten
text + demos, resumable). A rewrite that fails (too short, cut off) falls back to the kept passages, and the
row says why (`rewrite_fallback`). A point with nothing kept stays closed-book in its twin.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from r3forge.backends.open import LLM, LLMConfig
from r3forge.errors import ConfigError
from r3forge.evalrag.answer import evidence_sha
from r3forge.metrics.efficiency import input_tokens
from r3forge.qream.pipeline import role
from r3forge.qream.rewrite import FTRewriteStep, RewriteStep, rewrite_item, rewrite_key
from r3forge.qream.seeds import load_demos
from r3forge.synth.engine import EngineConfig, run_step
from r3forge.synth.export import load_accepted, rejected_keys

SUFFIX = "+qream"


@dataclass
class QreamStepConfig:
    rewrite: Literal["none", "icl", "ft"] = field(
        default="none",
        metadata={
            "help": "QREAM post-step on the kept passages: none; icl (the rewriter with the stylistic demos "
            "of `rewrite_demos_from`); ft (a QREAM-FT checkpoint as `rewriter_model`). Adds `<method>+qream` rows."
        },
    )
    rewrite_demos_from: str = field(
        default="",
        metadata={"help": "icl: an `annotate qream` or `r3forge rewrite` folder whose seeds/ are the demos."},
    )
    rewriter_model: str = field(
        default="",
        metadata={
            "help": "The rewriter (ft: the QREAM-FT checkpoint); empty: the generator.",
            "model": ("rewriter_backend", "backend"),
        },
    )
    rewriter_backend: str = field(default="", metadata={"help": "Rewriter backend; empty: the generator's."})
    rewriter_base_url: str = field(
        default="", metadata={"help": "Rewriter API root; empty: the generator's."}
    )
    rewrite_max_tokens: int = field(default=256, metadata={"help": "Max new tokens of a rewrite."})

    def __post_init__(self) -> None:
        if self.rewrite not in ("none", "icl", "ft"):
            raise ConfigError(f"rewrite: must be none, icl or ft, got {self.rewrite!r}")
        if self.rewrite == "icl" and not self.rewrite_demos_from:
            raise ConfigError(
                "rewrite: icl needs `rewrite_demos_from` (a folder with seeds/, from annotate qream)"
            )
        if self.rewrite == "ft" and not self.rewriter_model:
            raise ConfigError("rewrite: ft needs `rewriter_model` (a QREAM-FT checkpoint)")


def rewriter_config(cfg: QreamStepConfig, generator: LLMConfig) -> LLMConfig:
    """The rewriter's model config: the generator's, with the `rewriter_*` overrides."""
    return role(generator, cfg, "rewriter")


def rewrite_step(cfg: QreamStepConfig, questions: list[dict]) -> Any:
    """The synthesis step of the rewrite: `RewriteStep` with the demos of `rewrite_demos_from` (whose seed
    questions must not be evaluation questions), or `FTRewriteStep`."""
    if cfg.rewrite == "ft":
        return FTRewriteStep(max_tokens=cfg.rewrite_max_tokens)
    demos = load_demos(cfg.rewrite_demos_from, questions, "rewrite_demos_from")
    return RewriteStep(demos, max_tokens=cfg.rewrite_max_tokens)


def _ref(record: dict) -> tuple:
    return tuple(rewrite_key(record).values())


def rewrite_all(items: list[dict], step: Any, rewriter: LLM, engine: EngineConfig) -> dict[tuple, dict]:
    """(question id, evidence sha) of every answer item with documents -> {"documents": [the rewrite] (or
    the kept passages on failure), "fallback": the reject reason or ""}."""
    todo = {(it["question_id"], evidence_sha(it["documents"])): it for it in items if it["documents"]}
    jobs = {
        key: rewrite_item(
            {"id": it["question_id"], "question": it["question"], "answers": it["answers"]},
            "\n\n".join(it["documents"]),
            1,
        )
        for key, it in todo.items()
    }
    run_step(step, list({_ref(j): j for j in jobs.values()}.values()), rewriter.backend, engine)
    done = {_ref(r): r["rewrite"] for r in load_accepted(engine.output_dir)}
    failed = {tuple(key.values()): r["reason"] for key, r in rejected_keys(engine.output_dir)}
    out = {}
    for key, job in jobs.items():
        ref = _ref(job)
        text = done.get(ref)
        out[key] = {
            "documents": [text] if text else todo[key]["documents"],
            "fallback": "" if text else failed.get(ref, "missing"),
        }
    return out


def add_twins(
    rows: list[dict], items: list[dict], rewritten: dict[tuple, dict], tokenizer: Any
) -> tuple[list[dict], list[dict]]:
    """Rows and answer items with a `<method>+qream` twin of every row (answered from the rewrite).

    >>> key = ("q", evidence_sha(["long text"]))
    >>> rows = [{"method": "none", "question_id": "q", "_key": key, "evidence_tokens": 9}]
    >>> items = [{"question_id": "q", "question": "Q?", "answers": [], "documents": ["long text"]}]
    >>> r, i = add_twins(rows, items, {key: {"documents": ["short"], "fallback": ""}}, None)
    >>> [(x["method"], x["evidence_tokens"], x.get("rewrite_fallback")) for x in r], len(i)
    ([('none', 9, None), ('none+qream', 1, '')], 2)
    """
    by_key = {(it["question_id"], evidence_sha(it["documents"])): it for it in items}
    new_items = dict(by_key)
    twins = []
    for row in rows:
        after = rewritten.get(row["_key"])
        twin = dict(row) | {"method": row["method"] + SUFFIX, "rewrite_fallback": None}
        if after is not None:
            docs = after["documents"]
            key = (row["question_id"], evidence_sha(docs))
            new_items.setdefault(key, by_key[row["_key"]] | {"documents": docs})
            twin |= {
                "_key": key,
                "evidence_tokens": sum(input_tokens(docs, tokenizer)),
                "rewrite_fallback": after["fallback"],
            }
        twins.append(twin)
    return rows + twins, list(new_items.values())
