"""Model identity: what a cache key or fingerprint records for "which model produced this".

A local folder is identified by its content, not its name: `runs/a/final` and `runs/b/final` are both
called `final`, and a checkpoint retrained into the same path keeps its path. `model_identity` returns
`<folder name>@<12 hex digits>`, a hash over the relative path, size and content digest of every file that
changes what the model computes (weights, config, tokenizer, chat template, adapter); training state,
logs, cards and nested `checkpoint-*` folders are left out. File digests (blake2b) are memoized in
`$R3FORGE_HOME/file-digests.json` by (absolute path, size, mtime), so a folder is read in full once.

A Hub id becomes `id@revision`: the revision given, else the commit the local Hugging Face cache resolves
`main` to, else the id alone (a served model name, or a model this machine has never downloaded). An
embedded short name (`smollm2-135m-instruct`) is its own identity: its weights are pinned by a package
version.

This module imports no torch: the annotation engine and the CLI use it before any model is loaded.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Any

from huggingface_hub import try_to_load_from_cache

from r3forge.errors import ConfigError
from r3forge.home import r3forge_home

# files and folders that never change what a model computes
SKIP_FILES = frozenset(
    {"training_args.bin", "trainer_state.json", "optimizer.pt", "scheduler.pt", "r3forge-manifest.json"}
)
SKIP_SUFFIXES = (".md", ".log", ".lock", ".tmp", ".pth")  # cards, logs, rng states
SKIP_DIRS = ("checkpoint-", ".", "runs", "logs", "__pycache__")
DIGESTS = "file-digests.json"
_lock = threading.Lock()


def model_identity(model: str, revision: str = "", served: bool = False) -> str:
    """The identity a cache records for `model` (a local folder, a Hub id or a served / embedded name).
    `served`: `model` is the name a server answers to, so its revision is the server's business (unless it is
    a folder on this machine too); the local cache is not asked, and every shard of a job records the same.

    >>> model_identity("openai/gpt-oss-120b", revision="b5c939d")
    'openai/gpt-oss-120b@b5c939d'
    >>> model_identity("smollm2-135m-instruct"), model_identity("verbal-reranker-1.5b", served=True)
    ('smollm2-135m-instruct', 'verbal-reranker-1.5b')
    """
    if os.path.isdir(model):
        return f"{Path(model).resolve().name}@{folder_digest(Path(model))[:12]}"
    if revision:
        return f"{model}@{revision}"
    if served:
        return model
    return f"{model}@{commit}" if (commit := cached_commit(model)) else model


def identity_folder(identity: str) -> str:
    """A folder name for the results of one model: its identity with path separators spelled out.

    >>> identity_folder("Qwen/Qwen2.5-7B-Instruct@a09a354"), identity_folder("final@3f2a9c1b0e4d")
    ('Qwen--Qwen2.5-7B-Instruct@a09a354', 'final@3f2a9c1b0e4d')
    """
    return identity.replace("/", "--").replace("\\", "--")


def folder_digest(folder: Path) -> str:
    """sha256 over (relative path, size, content digest) of the files of `folder` that define a model."""
    files = sorted(model_files(folder))
    if not files:
        raise FileNotFoundError(f"{folder}: no model files (config.json, weights, tokenizer) in this folder")
    memo = _read_memo()
    h, changed = hashlib.sha256(), False
    for path in files:
        stat = path.stat()
        key = str(path.resolve())
        entry = memo.get(key)
        if entry is None or entry[:2] != [stat.st_size, stat.st_mtime_ns]:
            entry, changed = [stat.st_size, stat.st_mtime_ns, _file_digest(path)], True
            memo[key] = entry
        h.update(f"{path.relative_to(folder).as_posix()}\0{stat.st_size}\0{entry[2]}\n".encode())
    if changed:
        _write_memo(memo)
    return h.hexdigest()


def model_files(folder: Path) -> list[Path]:
    """The files under `folder` that define the model (see SKIP_FILES, SKIP_SUFFIXES, SKIP_DIRS)."""
    out = []
    for root, dirs, names in os.walk(folder):
        dirs[:] = [d for d in dirs if not d.startswith(SKIP_DIRS)]
        for name in names:
            if name in SKIP_FILES or name.endswith(SKIP_SUFFIXES) or name.startswith("."):
                continue
            path = Path(root) / name
            if path.is_file():
                out.append(path)
    return out


def cached_commit(repo_id: str) -> str:
    """The commit the local Hugging Face cache resolves `main` of `repo_id` to ("" when not cached)."""
    if repo_id.count("/") != 1 or repo_id.startswith((".", "/")):
        return ""
    try:
        found = try_to_load_from_cache(repo_id, "config.json")
    except ValueError:  # not a valid repo id
        return ""
    if not isinstance(found, str):
        return ""
    parts = Path(found).parts
    return parts[parts.index("snapshots") + 1] if "snapshots" in parts else ""


def _file_digest(path: Path, chunk: int = 1 << 24) -> str:
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def _read_memo() -> dict[str, list]:
    try:
        memo = json.loads((r3forge_home() / DIGESTS).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return memo if isinstance(memo, dict) else {}


def _write_memo(memo: dict[str, list]) -> None:
    """Atomic replace (concurrent writers: the last one wins; every entry is still a true digest)."""
    path = r3forge_home() / DIGESTS
    memo = {key: entry for key, entry in memo.items() if os.path.exists(key)}  # forget deleted files
    with _lock:
        tmp = path.with_name(f"{DIGESTS}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps(memo), encoding="utf-8")
        tmp.replace(path)


def backend_model_id(backend: Any) -> str:
    """A stable model id for a backend: `model_id`, its config's `model`, or the HF model's path, as
    `model_identity` records it (a local folder by its content, not its machine-specific path)."""
    for candidate in (
        getattr(backend, "model_id", None),
        getattr(getattr(backend, "config", None), "model", None),
        getattr(getattr(getattr(backend, "model", None), "config", None), "name_or_path", None),
    ):
        if isinstance(candidate, str) and candidate:
            return model_identity(candidate)
    raise ConfigError("cannot tell the backend's model id: set EngineConfig.model (--model)")
