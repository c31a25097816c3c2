"""Where a model argument points, found before anything loads: a local folder, an embedded model, a Hub id.

`locate_model(name)` tries the three in that order and, when none fits, raises one `ConfigError` that says
what it looked for: the folder (with the nearest existing parent and the names close to the missing one),
the embedded names, and why `name` is no usable Hub id (not of the form org/name; a relative path under a
local folder; not in the local cache while HF_HUB_OFFLINE is set).

`check_models(*configs)` runs it on every model argument of a command's parsed configs, opens a local
folder or GGUF file cheaply (`open_model`, `r3forge.models.folder.open_local`: config, tokenizer, weights
headers; the base model an adapter names, too), and names the file:line or flag of a bad one
(`r3forge.config.where`). A field named `tokenizer` or `*_tokenizer` needs a tokenizer only, not weights.
A model argument is a field whose metadata has `"model"`: the backend fields that decide whether the model
loads here, the first non-empty one winning (`()`: it always does). A model loads here under the hf or vllm
backend; under openai it is the name a server answers to and is not checked, unless the field named by the
metadata's `"model_serve"` is true (the job starts that server itself). TRL's `ModelConfig.model_name_or_path` is one by name.

    sft --model_name_or_path runs/sft/finall
    r3forge sft: error: flag '--model_name_or_path': model 'runs/sft/finall' not found: no local folder
    /work/runs/sft/finall (runs/sft holds: final?); no embedded model of that name (smollm2-135m-instruct,
    all-minilm-l6-v2); as a Hub id: runs/ is a local folder, so this is a path
"""

from __future__ import annotations

import dataclasses
import difflib
from pathlib import Path
from typing import Any, Literal

from huggingface_hub import constants, try_to_load_from_cache
from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id

from r3forge.config import where
from r3forge.errors import ConfigError
from r3forge.models.embedded import EMBEDDED_MODELS, prepare_model
from r3forge.models.folder import adapter_base, open_local

# a folder is a model (or a tokenizer) when it holds one of these: transformers / vLLM, a PEFT adapter,
# sentence-transformers, Mistral's own format, a tokenizer alone
MODEL_FILES = ("config.json", "adapter_config.json", "modules.json", "params.json", "tokenizer_config.json")
LOCAL_BACKENDS = ("hf", "vllm")
# model arguments of config classes r3forge does not own, by field name
FOREIGN_MODEL_FIELDS = ("model_name_or_path",)


def locate_model(name: str, offline_cache: bool = True) -> str:
    """Where `name` is found, tried in this order: "folder" (or "file", a GGUF file), "embedded", "hub";
    otherwise `ConfigError` naming what was looked for. Nothing is loaded or downloaded. `offline_cache`:
    with HF_HUB_OFFLINE set, a Hub id must be in the local cache."""
    path = Path(name).expanduser()
    if path.exists():
        return _local_kind(name, path)
    if name in EMBEDDED_MODELS:
        return "embedded"
    hub = _hub_problem(name, offline_cache)
    if hub is None:
        return "hub"
    raise ConfigError(
        f"model {name!r} not found: no local folder {path.absolute()}{_near(path)}; no embedded model of "
        f"that name ({', '.join(EMBEDDED_MODELS)}); as a Hub id: {hub}"
    )


def resolve_model(name_or_path: str) -> str:
    """What to load `name_or_path` from: an embedded name -> its materialized folder (prepared on first use);
    a local folder or a Hub id as given (not looked up in the cache: a caller may want a local copy only);
    anything else `ConfigError` (`locate_model`)."""
    if locate_model(name_or_path, offline_cache=False) == "embedded":
        return str(prepare_model(name_or_path))
    return name_or_path


def resolve_vllm_model(name_or_path: str) -> str:
    """`resolve_model` for vLLM, which serves full models only: a LoRA adapter folder (an SFT run's `final/`
    with `adapter_config.json` and no `config.json`) is a `ConfigError` naming the command that merges it."""
    path = resolve_model(name_or_path)
    folder = Path(path)
    if (folder / "adapter_config.json").is_file() and not (folder / "config.json").is_file():
        run = folder.parent if folder.name == "final" else folder
        raise ConfigError(
            f"model {name_or_path!r} is a LoRA adapter, and vLLM serves full models: merge it first with "
            f"`r3forge export --run {run} --out <folder> --merge_lora true` and pass <folder>"
        )
    return path


def check_models(*configs: Any) -> None:
    """`locate_model` on every model argument of `configs` (a command's parsed configs, which share one
    namespace of fields) that loads here, and `open_model` on a local one; `ConfigError` naming the
    file:line or flag of the first bad one."""
    values = {f.name: getattr(c, f.name) for c in configs for f in dataclasses.fields(c)}
    for config in configs:
        for f in dataclasses.fields(config):
            name = getattr(config, f.name)
            if not isinstance(name, str) or not name or not _loads_here(f, values):
                continue
            tokenizer_only = f.name == "tokenizer" or f.name.endswith("_tokenizer")
            try:
                open_model(name, "tokenizer" if tokenizer_only else "model")
            except ConfigError as e:
                raise ConfigError(f"{where(config, f.name)}: {e}") from None


def open_model(name: str, part: Literal["model", "tokenizer"] = "model") -> str:
    """`locate_model(name)`, and a local folder or file opened as a load of `part` would open it
    (`open_local`); the base model an adapter names (`base_model_name_or_path`) is located and opened too.
    `ConfigError` naming the model, the file and what is wrong."""
    kind = locate_model(name)
    if kind not in ("folder", "file"):
        return kind
    path, base = Path(name).expanduser(), ""
    try:
        open_local(path, part)
        base = adapter_base(path) if part == "model" else ""
        if base and locate_model(base) in ("folder", "file"):
            open_local(Path(base).expanduser())
    except ConfigError as e:
        of_base = f"the base model {base!r} of its adapter_config.json: " if base else ""
        raise ConfigError(f"model {name!r}: {of_base}{e}") from None
    return kind


def _loads_here(f: dataclasses.Field, values: dict[str, Any]) -> bool:
    if f.name in FOREIGN_MODEL_FIELDS:
        return True
    if "model" not in f.metadata:
        return False
    when = f.metadata.get("model_when")  # (field, values): the model is used only while field is one of them
    if when and when[0] in values and values[when[0]] not in when[1]:
        return False
    backend = next((values[k] for k in f.metadata["model"] if values.get(k)), None)
    serve = f.metadata.get("model_serve")
    return backend is None or backend in LOCAL_BACKENDS or bool(serve and values.get(serve))


def _local_kind(name: str, path: Path) -> str:
    if path.is_file():
        if path.suffix.lower() == ".gguf":
            return "file"
        raise ConfigError(f"model {name!r}: {path} is a file, not a model folder")
    if any((path / f).is_file() for f in MODEL_FILES):
        return "folder"
    inside = sorted(p.name for p in path.iterdir() if any((p / f).is_file() for f in MODEL_FILES))
    hint = f"; its model folder(s): {', '.join(inside)}" if inside else ""
    raise ConfigError(f"model {name!r}: the folder {path} holds none of {', '.join(MODEL_FILES)}{hint}")


def _near(path: Path) -> str:
    """' (runs/sft holds: final?)': the nearest existing parent, and its names close to the missing one."""
    missing, parent = path.absolute(), path.absolute().parent
    while not parent.is_dir() and parent != parent.parent:
        missing, parent = parent, parent.parent
    try:
        names = [p.name for p in parent.iterdir()]
    except OSError:
        return ""
    close = difflib.get_close_matches(missing.name, names, n=3, cutoff=0.8)
    return f" ({parent} holds: {', '.join(close)}?)" if close else ""


def _hub_problem(name: str, offline_cache: bool) -> str | None:
    """Why `name` is no usable Hub id, or None."""
    try:
        validate_repo_id(name)
    except HFValidationError:
        return "not of the form org/name"
    cached = isinstance(try_to_load_from_cache(name, "config.json"), str)
    head = name.split("/")[0]
    if "/" in name and Path(head).is_dir() and not cached:
        return f"{head}/ is a local folder, so this is a path"
    if offline_cache and constants.is_offline_mode() and not cached:
        return "not in the local Hugging Face cache, and HF_HUB_OFFLINE is set"
    return None
