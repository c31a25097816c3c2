"""Shared fixtures. Every test runs offline: nothing may come from the Hugging Face Hub."""

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from r3forge.models import prepare_model

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    """The embedded chat model, materialized once under $R3FORGE_HOME (default ~/.cache/r3forge)."""
    return prepare_model("smollm2-135m-instruct")


@pytest.fixture(scope="session")
def minilm_path() -> Path:
    """The embedded sentence encoder, materialized once."""
    return prepare_model("all-minilm-l6-v2")


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """`../shared/data` next to the repo (override with R3FORGE_SHARED_DATA)."""
    path = Path(os.environ.get("R3FORGE_SHARED_DATA") or REPO_ROOT.parent / "shared" / "data")
    if not path.is_dir():
        pytest.skip(f"benchmark data folder not found at {path} (set R3FORGE_SHARED_DATA)")
    return path
