"""Releases of trained models: an SFT run folder -> a release folder (weights, tokenizer, chat template,
generation config, model card) -> a Hugging Face Hub model repo."""

from r3forge.release.card import model_card
from r3forge.release.export import ReleaseError, RunFolderError, RunInfo, export_run, read_run
from r3forge.release.push import PushError, push_folder

__all__ = [
    "PushError",
    "ReleaseError",
    "RunFolderError",
    "RunInfo",
    "export_run",
    "model_card",
    "push_folder",
    "read_run",
]
