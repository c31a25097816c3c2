"""Teacher annotation steps for distillation (Verbal-R3 verbal reranker) and their SFT export.

    from r3forge.annotate import VerbalAnnotationStep, qa_items, export_sft, ExportSFTConfig

* `verbal`: `VerbalAnnotationStep` (a `r3forge.synth` step), `parse_annotation`;
* `judge`: `AnnotationJudgeStep` (`JudgeStep` in 0.1.0, still importable), a second model approving
  annotations (QREAM's fact judge is `r3forge.qream.score.FactJudgeStep`); `paraphrase`: `ParaphraseStep`,
  the paraphrased-context baseline;
* the teacher and judge open through `r3forge.backends.open` (`LLMConfig`, `open_llm`);
* `qa_items` (own passages) and `retrieved_items` (a retriever's top-n): the (question, document) pairs, from
  `r3forge.retrieval.pairs`;
* `jobs`: the `r3forge annotate verbal|judge|paraphrase` configs and mains;
* `report`: acceptance, score distribution, NDCG@k of teacher scores vs gold (`annotation_report`);
* `export`: accepted annotations -> prompt/completion chat `DatasetDict` (`ExportSFTConfig`, `export_sft`).

Names are imported on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Checks": "verbal",
    "DEMOS": "verbal",
    "PROMPT_VERSION": "verbal",
    "REASONS": "verbal",
    "VerbalAnnotateConfig": "jobs",
    "PairsConfig": "jobs",
    "RunConfig": "r3forge.synth.job",
    "JudgeConfig": "jobs",
    "ParaphraseConfig": "jobs",
    "verbal_main": "jobs",
    "judge_main": "jobs",
    "paraphrase_main": "jobs",
    "AnnotationJudgeStep": "judge",
    "JudgeStep": "judge",  # the old name of AnnotationJudgeStep
    "ParaphraseStep": "paraphrase",
    "retrieved_items": "r3forge.retrieval.pairs",
    "annotation_report": "report",
    "VerbalAnnotationStep": "verbal",
    "load_template": "verbal",
    "parse_annotation": "verbal",
    "qa_items": "r3forge.retrieval.pairs",
    "ExportSFTConfig": "export",
    "build_sft": "export",
    "export_sft": "export",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'r3forge.annotate' has no attribute {name!r}")
    module = _EXPORTS[name]
    return getattr(importlib.import_module(module if "." in module else f"r3forge.annotate.{module}"), name)
