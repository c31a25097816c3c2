"""Embedded default models and model-name resolution."""

from r3forge.models.embedded import EMBEDDED_MODELS, prepare_model, verify_folder
from r3forge.models.locate import (
    check_models,
    locate_model,
    open_model,
    resolve_model,
    resolve_vllm_model,
)

__all__ = [
    "EMBEDDED_MODELS",
    "check_models",
    "locate_model",
    "open_model",
    "prepare_model",
    "resolve_model",
    "resolve_vllm_model",
    "verify_folder",
]
