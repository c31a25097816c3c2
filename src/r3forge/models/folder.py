"""A local model folder opened cheaply, before any work: its config, its tokenizer and its weights' headers.

`open_local(path, part)` reads what a load would read first, and raises one `ConfigError` that names the file
and what is wrong, instead of a traceback minutes into a job:

* `config.json` (a transformers / sentence-transformers / cross-encoder folder): a JSON object with a
  `model_type`, as `AutoConfig` needs; `adapter_config.json` (a PEFT adapter): a JSON object with a
  `peft_type`; `modules.json` (sentence-transformers): its Transformer module's folder, opened the same way;
  `params.json` (Mistral's own format): a JSON object;
* the tokenizer: one of `TOKENIZER_FILES` is there, the JSON ones parse, and `tokenizer.json` loads as a
  `tokenizers` file (about half a second for SmolLM2's 49k vocabulary);
* the weights (`part="model"` only): a full model has safetensors (a sharded index and every shard it names)
  or `pytorch_model*.bin`, an adapter `adapter_model.safetensors|bin`; every safetensors header reads (the
  8-byte length, the JSON header, data offsets that cover the file exactly, as `safetensors` checks) and every
  `.bin` is a torch checkpoint (a zip archive with `data.pkl`, or a legacy pickle);
* a `.gguf` file: its magic number.

No tensor data is read: only each weights file's header (or a zip's directory).
"""

from __future__ import annotations

import json
import struct
import zipfile
from pathlib import Path
from typing import Any, Literal

from tokenizers import Tokenizer

from r3forge.errors import ConfigError

# a tokenizer loads from one of these (fast, sentencepiece, BPE / WordPiece vocabularies, Mistral's tekken)
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "tokenizer.model",
    "vocab.json",
    "vocab.txt",
    "spiece.model",
    "sentencepiece.bpe.model",
    "tekken.json",
)
JSON_TOKENIZER_FILES = ("tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "vocab.json")
FULL_WEIGHTS = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")
SAFETENSORS_MAX_HEADER = 100_000_000  # what `safetensors` refuses to read ("header too large")
GGUF_MAGIC = b"GGUF"


def open_local(path: Path, part: Literal["model", "tokenizer"] = "model") -> None:
    """Open the local model folder (or GGUF file) `path` as a load of `part` would; `ConfigError` naming the
    file and what is wrong. `part="tokenizer"`: the config and tokenizer only, no weights."""
    if path.is_file():
        _check_gguf(path)
        return
    configs = [
        name for name in ("config.json", "adapter_config.json", "params.json") if (path / name).is_file()
    ]
    if "config.json" in configs:
        _read_config(path / "config.json", "model_type", "a config saved by save_pretrained has one")
        if part == "model" and "adapter_config.json" not in configs:  # an adapter's base has the weights
            _check_full_weights(path)
    if "adapter_config.json" in configs:
        _read_config(path / "adapter_config.json", "peft_type", "PEFT's save_pretrained writes it")
        if part == "model":
            _check_adapter_weights(path)
    if "params.json" in configs:
        _read_json(path / "params.json")
        if part == "model":
            _check_safetensors_files(path, sorted(path.glob("*.safetensors")), "consolidated.safetensors")
    modules = _transformer_modules(path) if (path / "modules.json").is_file() else []
    for module in modules:
        open_local(module, part)
    if part == "model" and not configs and not modules:
        raise ConfigError(
            f"{path}: holds a tokenizer but no model (no config.json, adapter_config.json, params.json, or "
            "modules.json naming a Transformer module)"
        )
    if configs or not modules:  # a sentence-transformers folder keeps its tokenizer in the module's folder
        _check_tokenizer(path)


def adapter_base(path: Path) -> str:
    """The base model a PEFT adapter folder names (`base_model_name_or_path`), or "" (none, or no adapter)."""
    config = path / "adapter_config.json"
    if not config.is_file():
        return ""
    base = _read_json(config).get("base_model_name_or_path")
    return base if isinstance(base, str) else ""


def safetensors_header(file: Path) -> dict[str, dict[str, Any]]:
    """Tensor name -> {"dtype", "shape", "data_offsets"} of a safetensors file, checked as `safetensors`
    checks it (the header fits, is a JSON object, and its data offsets cover the file exactly)."""
    size = file.stat().st_size
    if size < 8:
        raise ConfigError(
            f"{file}: not a safetensors file ({size} bytes, less than its 8-byte header length)"
        )
    with open(file, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        if length > min(size - 8, SAFETENSORS_MAX_HEADER):
            raise ConfigError(
                f"{file}: not a safetensors file: its first 8 bytes give a header of {length} bytes, the file "
                f"has {size} (corrupt, truncated or another format)"
            )
        raw = f.read(length)
    try:
        header = json.loads(raw.decode("utf-8"))
    except ValueError as e:
        raise ConfigError(f"{file}: not a safetensors file: its header is not JSON ({e})") from None
    if not isinstance(header, dict):
        raise ConfigError(f"{file}: not a safetensors file: its header is not a JSON object")
    header.pop("__metadata__", None)
    end = 0
    for name, entry in header.items():
        offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
        if not (
            isinstance(offsets, list)
            and len(offsets) == 2
            and all(isinstance(o, int) for o in offsets)
            and isinstance(entry.get("shape"), list)
        ):
            raise ConfigError(f"{file}: tensor {name!r} has no shape or data_offsets in the header")
        end = max(end, offsets[1])
    data = size - 8 - length
    if end != data:
        what = "truncated" if end > data else "has bytes past its last tensor"
        raise ConfigError(
            f"{file}: {what}: the header's tensors end at data byte {end}, the file holds {data}"
        )
    return header


def _check_gguf(file: Path) -> None:
    with open(file, "rb") as f:
        magic = f.read(4)
    if magic != GGUF_MAGIC:
        raise ConfigError(f"{file}: not a GGUF file (it starts with {magic!r}, not {GGUF_MAGIC!r})")


def _read_json(file: Path) -> dict[str, Any]:
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except UnicodeDecodeError as e:
        raise ConfigError(f"{file}: not valid UTF-8 ({e.reason} at byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"{file}:{e.lineno}: invalid JSON ({e.msg}, column {e.colno})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{file}: expected a JSON object, got {type(data).__name__}")
    return data


def _read_config(file: Path, key: str, hint: str) -> None:
    value = _read_json(file).get(key)
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{file}: no {key!r} ({hint}), so it names no model class to load")


def _check_tokenizer(folder: Path) -> None:
    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        raise ConfigError(f"{folder}: no tokenizer (none of {', '.join(TOKENIZER_FILES)})")
    for name in JSON_TOKENIZER_FILES:
        if (folder / name).is_file():
            _read_json(folder / name)
    if (folder / "tokenizer.json").is_file():
        try:
            Tokenizer.from_file(str(folder / "tokenizer.json"))
        except Exception as e:  # the tokenizers library raises a bare Exception
            raise ConfigError(f"{folder / 'tokenizer.json'}: not a tokenizers file ({e})") from None


def _check_full_weights(folder: Path) -> None:
    safetensors = [p for p in sorted(folder.glob("*.safetensors")) if p.name not in ADAPTER_WEIGHTS]
    bins = sorted(folder.glob("pytorch_model*.bin"))
    indexes = sorted(folder.glob("*.safetensors.index.json")) + sorted(
        folder.glob("pytorch_model*.bin.index.json")
    )
    if not (safetensors or bins or indexes):
        raise ConfigError(f"{folder}: config.json but no weights (none of {', '.join(FULL_WEIGHTS)})")
    for index in indexes:
        _check_index(index)
    if safetensors:
        _check_safetensors_files(folder, safetensors, "model.safetensors")
    for file in bins:
        _check_bin(file)


def _check_adapter_weights(folder: Path) -> None:
    found = [folder / name for name in ADAPTER_WEIGHTS if (folder / name).is_file()]
    if not found:
        raise ConfigError(
            f"{folder}: adapter_config.json but no adapter weights ({' or '.join(ADAPTER_WEIGHTS)})"
        )
    for file in found:
        if file.suffix == ".safetensors":
            safetensors_header(file)
        else:
            _check_bin(file)


def _check_safetensors_files(folder: Path, files: list[Path], expected: str) -> None:
    if not files:
        raise ConfigError(f"{folder}: no weights ({expected})")
    for file in files:
        if not safetensors_header(file):
            raise ConfigError(f"{file}: holds no tensors")


def _check_index(index: Path) -> None:
    """A sharded checkpoint's index: every shard it names is there; safetensors shards hold their tensors."""
    weight_map = _read_json(index).get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise ConfigError(f"{index}: no 'weight_map' (tensor name -> shard file)")
    shards: dict[str, list[str]] = {}
    for name, shard in weight_map.items():
        shards.setdefault(str(shard), []).append(name)
    for shard, names in shards.items():
        file = index.parent / shard
        if not file.is_file():
            raise ConfigError(f"{index}: names the shard {shard}, which is missing from {index.parent}")
        if file.suffix == ".safetensors":
            header = safetensors_header(file)
            if missing := [n for n in names if n not in header]:
                raise ConfigError(
                    f"{index}: {missing[0]!r} is not in its shard {shard} ({len(missing)} missing)"
                )


def _check_bin(file: Path) -> None:
    """A `torch.save` checkpoint: a zip archive holding `data.pkl`, or the legacy pickle format."""
    with open(file, "rb") as f:
        start = f.read(2)
    if zipfile.is_zipfile(file):
        try:
            with zipfile.ZipFile(file) as archive:
                if any(n.endswith("data.pkl") for n in archive.namelist()):
                    return
        except zipfile.BadZipFile as e:
            raise ConfigError(f"{file}: not a torch checkpoint (a broken zip archive: {e})") from None
        raise ConfigError(f"{file}: not a torch checkpoint (a zip archive without data.pkl)")
    if start[:1] != b"\x80":
        raise ConfigError(f"{file}: not a torch checkpoint (neither a zip archive nor a pickle)")


def _transformer_modules(folder: Path) -> list[Path]:
    """The folders of a sentence-transformers model's Transformer modules other than `folder` itself."""
    try:
        modules = json.loads((folder / "modules.json").read_text(encoding="utf-8"))
    except ValueError as e:
        raise ConfigError(f"{folder / 'modules.json'}: invalid JSON ({e})") from None
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        raise ConfigError(f"{folder / 'modules.json'}: expected a list of modules (objects with a path)")
    paths = [
        folder / str(m.get("path", "")) for m in modules if str(m.get("type", "")).endswith("Transformer")
    ]
    return [p for p in paths if p.resolve() != folder.resolve()]
