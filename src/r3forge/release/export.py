"""An SFT run folder -> a release folder that loads with plain `transformers` (or PEFT) and vLLM.

The run folder is the SFT recipe's output (`run.json`, `config.yaml`, `metrics.jsonl`,
`final_metrics.json`, `final/`). A release is what a user downloads: only the files needed to load and
chat with the model (safetensors, config, generation config, tokenizer and chat template) plus the model
card `README.md`; optimizer states, trainer checkpoints and logs stay in the run folder.

Three shapes, depending on the run:

* full fine-tune: `final/`'s weights (safetensors; `.bin` weights are re-saved as safetensors);
* LoRA, unmerged: the adapter (`adapter_model.safetensors` + `adapter_config.json`, whose
  `base_model_name_or_path` becomes run.json's `base_model_id` when known, so `AutoPeftModelForCausalLM`
  finds the base on the Hub);
* LoRA with `merge_lora`: the base (`resolve_model(base_model)`) with the adapter merged in, saved as a
  normal transformers checkpoint, so plain `from_pretrained` and `vllm serve` load it without PEFT.

The run folder is only read. The release is written into a temporary sibling of `out_dir` and renamed into
place once complete and verified, so a failed export never leaves a half-written folder (nor destroys an old
one). Verified: the run's `final/` opens before anything is written (`r3forge.models.folder.open_local`:
config, tokenizer, every weights header), and the release's weights load into its architecture (on the meta
device: every tensor of the config there, with its shape) before it is renamed into place.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from peft import PeftModel
from safetensors.torch import save_file
from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig
from transformers.utils import logging as hf_logging

from r3forge.config import load_yaml_with_lines
from r3forge.errors import ConfigError, R3ForgeError
from r3forge.models import resolve_model
from r3forge.models.folder import open_local
from r3forge.release.card import default_license, model_card

RUN_JSON, CONFIG_YAML, METRICS_JSONL, FINAL_METRICS, FINAL = (
    "run.json",
    "config.yaml",
    "metrics.jsonl",
    "final_metrics.json",
    "final",
)
TASKS = ("verbal", "qream", "generic")
# tokenizer files a release carries (whichever the run has); the chat template may live in any of the
# `chat_template.*` files or inside tokenizer_config.json
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "chat_template.jinja",
    "chat_template.json",
)
ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")


class ReleaseError(R3ForgeError, RuntimeError):
    """An export (or push) could not be done: the message names the path and what to do."""


class RunFolderError(ReleaseError):
    """The run folder breaks the SFT run-folder contract: the message names the missing file or field."""


@dataclass
class RunInfo:
    """What an export needs from a run folder, validated by `read_run`."""

    path: Path
    meta: dict[str, Any]  # run.json
    config: dict[str, Any]  # config.yaml
    final_metrics: dict[str, Any]
    metrics: list[dict[str, Any]] = field(default_factory=list)  # metrics.jsonl (empty if absent)

    @property
    def final(self) -> Path:
        return self.path / FINAL

    @property
    def lora(self) -> bool:
        return bool(self.meta["lora"])


def read_run(run_dir: str | os.PathLike[str]) -> RunInfo:
    """Validate an SFT run folder and load its records; `RunFolderError` names the missing file/field.

    `metrics.jsonl` is optional (logging may be off); everything else in the contract is required, because
    a release without its config, metrics or tokenizer cannot be documented or used.
    """
    root = Path(run_dir)
    if not root.is_dir():
        raise RunFolderError(f"{root}: not a folder (expected an SFT run folder with {RUN_JSON})")
    meta = _read_json(root / RUN_JSON, f"not an r3forge run folder (the SFT recipe writes {RUN_JSON})")
    _check_meta(meta, root / RUN_JSON)
    if not (root / CONFIG_YAML).is_file():
        raise RunFolderError(f"{root / CONFIG_YAML}: missing (the resolved training config of the run)")
    config, _ = load_yaml_with_lines(root / CONFIG_YAML)
    final_metrics = _read_json(root / FINAL_METRICS, "missing (written when training finishes)")
    run = RunInfo(root, meta, config, final_metrics, _read_jsonl(root / METRICS_JSONL))
    _check_final(run)
    return run


def _read_json(path: Path, missing: str) -> dict[str, Any]:
    if not path.is_file():
        raise RunFolderError(f"{path}: {missing}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:
        raise RunFolderError(f"{path}: invalid JSON ({e})") from e
    if not isinstance(data, dict):
        raise RunFolderError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    records = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as e:
            raise RunFolderError(f"{path}:{number}: invalid JSON ({e})") from e
        if not isinstance(record, dict):
            raise RunFolderError(f"{path}:{number}: expected a JSON object per line")
        records.append(record)
    return records


def _check_meta(meta: dict[str, Any], path: Path) -> None:
    for key in ("recipe", "task", "base_model", "lora"):
        if key not in meta:
            raise RunFolderError(f"{path}: missing field '{key}'")
    if meta["recipe"] != "sft":
        raise RunFolderError(f"{path}: field 'recipe' is {meta['recipe']!r}; only 'sft' runs can be exported")
    if meta["task"] not in TASKS:
        raise RunFolderError(f"{path}: field 'task' is {meta['task']!r}; expected one of {list(TASKS)}")
    if not isinstance(meta["base_model"], str) or not meta["base_model"]:
        raise RunFolderError(f"{path}: field 'base_model' must be a non-empty string")
    if not isinstance(meta["lora"], bool):
        raise RunFolderError(f"{path}: field 'lora' must be true or false, got {meta['lora']!r}")
    if not isinstance(meta.get("datasets") or [], list):
        raise RunFolderError(f"{path}: field 'datasets' must be a list of names/paths")


def _check_final(run: RunInfo) -> None:
    final = run.final
    if not final.is_dir():
        raise RunFolderError(f"{final}: missing (the trained model folder of the run)")
    if run.lora:
        if not (final / "adapter_config.json").is_file():
            raise RunFolderError(f"{final / 'adapter_config.json'}: missing (run.json says lora: true)")
        if not any((final / name).is_file() for name in ADAPTER_WEIGHTS):
            raise RunFolderError(f"{final}: no adapter weights ({' or '.join(ADAPTER_WEIGHTS)})")
    else:
        if not (final / "config.json").is_file():
            raise RunFolderError(f"{final / 'config.json'}: missing (run.json says lora: false)")
        if not _weight_files(final):
            raise RunFolderError(f"{final}: no model weights (*.safetensors or pytorch_model*.bin)")
    if not (final / "tokenizer_config.json").is_file():
        raise RunFolderError(f"{final / 'tokenizer_config.json'}: missing (the release needs the tokenizer)")
    if not _has_chat_template(final):
        raise RunFolderError(
            f"{final}: no chat template (chat_template.jinja, chat_template.json or 'chat_template' in "
            "tokenizer_config.json); save the tokenizer of the trained model there"
        )
    try:
        open_local(final)
    except ConfigError as e:
        raise RunFolderError(f"{final}: the trained model does not open: {e}") from None


def _weight_files(folder: Path) -> list[Path]:
    safetensors = sorted(folder.glob("*.safetensors"))
    return safetensors or sorted(folder.glob("pytorch_model*.bin"))


def _has_chat_template(folder: Path) -> bool:
    if (folder / "chat_template.jinja").is_file() or (folder / "chat_template.json").is_file():
        return True
    config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    return bool(config.get("chat_template"))


def export_run(
    run_dir: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    merge_lora: bool = False,
    license: str | None = None,
    repo_id: str | None = None,
    overwrite: bool = False,
) -> Path:
    """Write the release folder of an SFT run into `out_dir` and return it.

    `merge_lora` merges a LoRA adapter into its base (no effect on a full fine-tune). `license` is the
    card's license id (default: the base model's if its README is available locally, else `other`);
    `repo_id` is the Hub repo the card's loading snippets name. A non-empty `out_dir` is replaced only
    with `overwrite=True`; `out_dir` may not overlap the run folder.
    """
    run = read_run(run_dir)
    out = Path(out_dir)
    _check_target(run.path, out, overwrite)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        adapter_config = None
        if run.lora and merge_lora:
            _save_merged(run, tmp)
        elif run.lora:
            adapter_config = _copy_adapter(run, tmp)
        else:
            _copy_full(run.final, tmp)
        for name in TOKENIZER_FILES:
            if (run.final / name).is_file():
                shutil.copyfile(run.final / name, tmp / name)
        _ensure_generation_config(run, tmp, adapter=adapter_config is not None)
        card = model_card(run, license or default_license(run), repo_id, adapter_config)
        (tmp / "README.md").write_text(card, encoding="utf-8")
        _verify_release(tmp, out, adapter=adapter_config is not None)
        tmp.chmod(0o755)  # mkdtemp creates 0700; a release folder is shared like any HF folder
        _swap_into_place(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _check_target(run_dir: Path, out: Path, overwrite: bool) -> None:
    run_abs, out_abs = run_dir.resolve(), out.resolve()
    if out_abs == run_abs or run_abs in out_abs.parents or out_abs in run_abs.parents:
        raise ReleaseError(
            f"{out}: overlaps the run folder {run_dir}; export to a folder outside it (the run is never "
            "modified)"
        )
    if out.exists() and not out.is_dir():
        raise ReleaseError(f"{out}: exists and is not a folder")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise ReleaseError(f"{out}: exists and is not empty; pass overwrite=True (--overwrite) to replace it")


def _copy_full(final: Path, out: Path) -> None:
    """Copy a full fine-tune's safetensors and configs; `.bin` weights are loaded and re-saved."""
    weights = _weight_files(final)
    if weights[0].suffix == ".safetensors":
        for path in [*weights, *final.glob("*.safetensors.index.json")]:
            shutil.copyfile(path, out / path.name)
        for name in ("config.json", "generation_config.json"):
            if (final / name).is_file():
                shutil.copyfile(final / name, out / name)
        return
    model = AutoModelForCausalLM.from_pretrained(final, dtype="auto")
    model.save_pretrained(out)  # transformers >= 5 always writes safetensors


def _copy_adapter(run: RunInfo, out: Path) -> dict[str, Any]:
    """Copy the adapter as safetensors and point its config at the Hub base model when run.json knows it."""
    final = run.final
    if (final / "adapter_model.safetensors").is_file():
        shutil.copyfile(final / "adapter_model.safetensors", out / "adapter_model.safetensors")
    else:
        state = torch.load(final / "adapter_model.bin", map_location="cpu", weights_only=True)
        save_file({k: v.contiguous() for k, v in state.items()}, out / "adapter_model.safetensors")
    config = json.loads((final / "adapter_config.json").read_text(encoding="utf-8"))
    if run.meta.get("base_model_id"):
        config["base_model_name_or_path"] = run.meta["base_model_id"]
    (out / "adapter_config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return config


def _save_merged(run: RunInfo, out: Path) -> None:
    """Load the base, apply the adapter and merge it into the weights (`merge_and_unload`)."""
    base_name = run.meta["base_model"]
    try:
        base = AutoModelForCausalLM.from_pretrained(resolve_model(base_name), dtype="auto")
    except (OSError, ValueError) as e:
        raise ReleaseError(
            f"merge_lora: cannot load the base model '{base_name}' named in {run.path / RUN_JSON} ({e}); "
            "it must be an embedded short name, a local folder or a Hub id reachable from here"
        ) from e
    model = PeftModel.from_pretrained(base, str(run.final)).merge_and_unload()
    model.save_pretrained(out)


def _ensure_generation_config(run: RunInfo, out: Path, adapter: bool) -> None:
    """Write generation_config.json if the export has none: from the run's, else from the model config.

    Sampling defaults and stop ids live there; vLLM and `generate` read it, so a release should carry one.
    An unmerged adapter takes the base model's (when the base is available locally).
    """
    target = out / "generation_config.json"
    if target.is_file():
        return
    if (run.final / "generation_config.json").is_file():
        shutil.copyfile(run.final / "generation_config.json", target)
        return
    source = out
    if adapter:
        source = Path(resolve_model(run.meta["base_model"]))
        if not (source / "config.json").is_file():
            return  # a Hub base: PEFT and vLLM use the base's own generation config
        if (source / "generation_config.json").is_file():
            shutil.copyfile(source / "generation_config.json", target)
            return
    GenerationConfig.from_model_config(AutoConfig.from_pretrained(source)).save_pretrained(out)


def _verify_release(tmp: Path, out: Path, adapter: bool) -> None:
    """The release in `tmp` opens (config, tokenizer, weights headers) and, unless it is an adapter (whose
    base is elsewhere), its weights load into the architecture of its config.json on the meta device (every
    tensor read, none kept): no missing tensor, none of another shape. `ReleaseError` naming `out` otherwise."""
    try:
        open_local(tmp)
    except ConfigError as e:
        raise ReleaseError(f"{out}: not written: the release does not open: {e}") from None
    if adapter:
        return
    bar = hf_logging.is_progress_bar_enabled()
    verbosity = hf_logging.get_verbosity()
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()  # the load report is ours to write
    try:
        _, info = AutoModelForCausalLM.from_pretrained(
            tmp, device_map="meta", output_loading_info=True, ignore_mismatched_sizes=True
        )
    except (OSError, ValueError, RuntimeError) as e:
        raise ReleaseError(f"{out}: not written: its weights do not load ({e})") from None
    finally:
        hf_logging.set_verbosity(verbosity)
        if bar:
            hf_logging.enable_progress_bar()
    problems = [
        f"{len(info[k])} {k.replace('_keys', '')}, e.g. {_tensor(info[k])}"
        for k in ("missing_keys", "mismatched_keys")
        if info[k]
    ]
    if problems:
        raise ReleaseError(
            f"{out}: not written: its weights do not fit its config.json ({'; '.join(problems)}); "
            "the run's final/ holds weights of another architecture or size"
        )


def _tensor(entries: Any) -> str:
    """The first of transformers' missing keys (names) or mismatched keys ((name, checkpoint, model shape))."""
    entry = sorted(entries, key=str)[0]
    if isinstance(entry, tuple) and len(entry) == 3:
        name, weights, model = entry
        return f"{name} is {list(weights)} in the weights, {list(model)} by the config"
    return str(entry)


def _swap_into_place(tmp: Path, out: Path) -> None:
    if not out.exists():
        os.replace(tmp, out)
        return
    trash = Path(tempfile.mkdtemp(prefix=f".{out.name}.trash-", dir=out.parent))
    os.replace(out, trash / out.name)
    os.replace(tmp, out)
    shutil.rmtree(trash, ignore_errors=True)
