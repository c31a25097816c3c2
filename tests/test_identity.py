"""Model identity: a local folder by its content (two `final/` folders differ, a copy does not), a Hub id by
id@revision (from the local Hugging Face cache), a served or embedded name as given."""

from __future__ import annotations

import shutil
from pathlib import Path

import huggingface_hub.constants
import pytest

from r3forge.identity import folder_digest, model_identity


def checkpoint(folder: Path, weights: bytes) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text('{"model_type": "llama"}')
    (folder / "model.safetensors").write_bytes(weights)
    (folder / "tokenizer.json").write_text("{}")
    return folder


def test_folders_named_alike_differ_by_content_and_a_copy_keeps_its_identity(tmp_path: Path) -> None:
    a = checkpoint(tmp_path / "a" / "final", b"\x00" * 1000)
    b = checkpoint(tmp_path / "b" / "final", b"\x00" * 999 + b"\x01")  # same size, one byte apart
    ida, idb = model_identity(str(a)), model_identity(str(b))
    assert ida.startswith("final@") and idb.startswith("final@") and ida != idb
    copy = shutil.copytree(a, tmp_path / "c" / "final")
    assert model_identity(str(copy)) == ida  # the content, not the path or the file times
    (a / "tokenizer.json").write_text('{"added": 1}')  # the tokenizer is part of what the model computes
    assert model_identity(str(a)) != ida


def test_training_state_cards_and_checkpoints_do_not_change_the_identity(tmp_path: Path) -> None:
    a = checkpoint(tmp_path / "final", b"weights")
    before = folder_digest(a)
    (a / "README.md").write_text("a card")
    (a / "trainer_state.json").write_text("{}")
    (a / "training_args.bin").write_bytes(b"args")
    checkpoint(a / "checkpoint-10", b"other weights")
    assert folder_digest(a) == before
    (a / "model.safetensors").write_bytes(b"weightz")
    assert folder_digest(a) != before
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no model files"):
        folder_digest(tmp_path / "empty")


def test_hub_ids_take_the_cached_commit_served_names_stay(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    repo = tmp_path / "models--Qwen--Qwen2.5-3B-Instruct"
    commit = "aa8e72537993ba99e69dfaafa59ed015b17504d1"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    (repo / "snapshots" / commit).mkdir(parents=True)
    (repo / "snapshots" / commit / "config.json").write_text("{}")
    assert model_identity("Qwen/Qwen2.5-3B-Instruct") == f"Qwen/Qwen2.5-3B-Instruct@{commit}"
    assert model_identity("Qwen/Qwen2.5-3B-Instruct", revision="v1") == "Qwen/Qwen2.5-3B-Instruct@v1"
    assert model_identity("Qwen/Qwen2.5-3B-Instruct", served=True) == "Qwen/Qwen2.5-3B-Instruct"
    assert model_identity("Qwen/Qwen2.5-7B-Instruct") == "Qwen/Qwen2.5-7B-Instruct"  # not in the cache
