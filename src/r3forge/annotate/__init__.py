"""Teacher annotation steps for distillation (Verbal-R3 verbal reranker) and their SFT export.

    from r3forge.annotate import VerbalAnnotationStep, qa_items, export_sft, ExportSFTConfig

* `verbal`: `VerbalAnnotationStep` (a `r3forge.synth` step), `parse_annotation`, `qa_items`,
  `VerbalAnnotateConfig` + `main`;
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
    "VerbalAnnotateConfig": "verbal",
    "VerbalAnnotationStep": "verbal",
    "load_template": "verbal",
    "parse_annotation": "verbal",
    "qa_items": "verbal",
    "ExportSFTConfig": "export",
    "build_sft": "export",
    "export_sft": "export",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'r3forge.annotate' has no attribute {name!r}")
    return getattr(importlib.import_module(f"r3forge.annotate.{_EXPORTS[name]}"), name)
