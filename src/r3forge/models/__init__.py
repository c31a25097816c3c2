"""Embedded default models and model-name resolution."""

from r3forge.models.embedded import EMBEDDED_MODELS, prepare_model, resolve_model, verify_folder

__all__ = ["EMBEDDED_MODELS", "prepare_model", "resolve_model", "verify_folder"]
