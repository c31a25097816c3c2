"""A local model folder opened before any work (`open_local`, and `check_models` / `open_model` on top): the
embedded models open; a broken config, tokenizer or weights file is one `ConfigError` naming the file and
what is wrong. Weights are real safetensors / torch files of a few tensors, broken as a bad download or a
wrong path breaks them (random bytes, cut short, a missing shard)."""

from __future__ import annotations

import json
import os
import random
import shutil
import zipfile
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from r3forge.backends.open import LLMConfig
from r3forge.config import parse_config
from r3forge.errors import ConfigError
from r3forge.models import check_models, open_model
from r3forge.models.folder import open_local, safetensors_header

TENSORS = {"embed.weight": torch.zeros(4, 2), "head.weight": torch.ones(3, 2)}


def tiny_model(folder: Path, **extra: str) -> Path:
    """config.json, a two-tensor model.safetensors and a tokenizer_config.json; `extra`: more files."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    save_file(TENSORS, folder / "model.safetensors")
    (folder / "tokenizer_config.json").write_text("{}")
    for name, text in extra.items():
        (folder / name).write_text(text)
    return folder


def fails(path: Path, *expected: str, part: str = "model") -> None:
    """`open_local(path, part)` (a `.safetensors` file: its header) raises a `ConfigError` with `expected`."""
    with pytest.raises(ConfigError) as e:
        if path.suffix == ".safetensors":
            safetensors_header(path)
        else:
            open_local(path, part)  # type: ignore[arg-type]
    for text in expected:
        assert text in str(e.value), str(e.value)


def test_the_embedded_models_open(smollm2_path: Path, minilm_path: Path):
    assert open_model(str(smollm2_path)) == "folder"
    assert open_model(str(minilm_path)) == "folder"  # sentence-transformers: modules.json + config.json
    assert open_model("smollm2-135m-instruct") == "embedded"  # not opened here: prepared and verified on use


def test_safetensors_headers(tmp_path: Path):
    good = tiny_model(tmp_path / "m") / "model.safetensors"
    assert {k: v["shape"] for k, v in safetensors_header(good).items()} == {"embed.weight": [4, 2],
                                                                          "head.weight": [3, 2]}  # fmt: skip
    data = good.read_bytes()
    (tmp_path / "random.safetensors").write_bytes(random.Random(0).randbytes(2048))
    fails(tmp_path / "random.safetensors", "random.safetensors: not a safetensors file", "the file has 2048")
    (tmp_path / "cut.safetensors").write_bytes(data[:-4])
    fails(
        tmp_path / "cut.safetensors",
        "cut.safetensors: truncated: the header's tensors end at data byte 56, the file holds 52",
    )
    (tmp_path / "long.safetensors").write_bytes(data + b"\0" * 8)
    fails(tmp_path / "long.safetensors", "long.safetensors: has bytes past its last tensor")
    (tmp_path / "short.safetensors").write_bytes(b"\1\0")
    fails(tmp_path / "short.safetensors", "short.safetensors: not a safetensors file (2 bytes")
    header = b"[1, 2]  "
    (tmp_path / "list.safetensors").write_bytes(len(header).to_bytes(8, "little") + header)
    fails(
        tmp_path / "list.safetensors",
        "list.safetensors: not a safetensors file: its header is not a JSON object",
    )


def test_folder_faults_name_the_file(tmp_path: Path):
    model = tiny_model(tmp_path / "ok")
    open_local(model)
    (model / "model.safetensors").write_bytes(random.Random(0).randbytes(2048))
    fails(model, f"{model}/model.safetensors: not a safetensors file")
    (model / "model.safetensors").unlink()
    fails(model, f"{model}: config.json but no weights (none of model.safetensors")
    open_local(model, "tokenizer")  # a tokenizer needs no weights
    (model / "config.json").write_text("{}")
    fails(model, f"{model}/config.json: no 'model_type'")
    (model / "config.json").write_text('{"model_type": "llama",\n')
    fails(model, f"{model}/config.json:2: invalid JSON")
    tokenizer = tiny_model(tmp_path / "tok")
    (tokenizer / "tokenizer_config.json").unlink()
    fails(tokenizer, f"{tokenizer}: no tokenizer (none of tokenizer.json, tokenizer_config.json")
    (tokenizer / "tokenizer.json").write_text('{"version": "1.0"}')
    fails(tokenizer, f"{tokenizer}/tokenizer.json: not a tokenizers file")
    only = tmp_path / "only_tokenizer"
    only.mkdir()
    (only / "tokenizer_config.json").write_text("{}")
    open_local(only, "tokenizer")
    fails(only, f"{only}: holds a tokenizer but no model")


def test_sharded_and_bin_checkpoints(tmp_path: Path):
    sharded = tiny_model(tmp_path / "sharded")
    (sharded / "model.safetensors").rename(sharded / "model-00001-of-00002.safetensors")
    save_file({"lm.weight": torch.zeros(2)}, sharded / "model-00002-of-00002.safetensors")
    weight_map = {"embed.weight": "model-00001-of-00002.safetensors", "head.weight": "model-00001-of-00002.safetensors",
                  "lm.weight": "model-00002-of-00002.safetensors"}  # fmt: skip
    index = sharded / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    open_local(sharded)
    index.write_text(
        json.dumps({"weight_map": weight_map | {"extra.weight": "model-00002-of-00002.safetensors"}})
    )
    fails(sharded, f"{index}: 'extra.weight' is not in its shard model-00002-of-00002.safetensors")
    (sharded / "model-00002-of-00002.safetensors").unlink()
    fails(sharded, f"{index}: names the shard model-00002-of-00002.safetensors, which is missing")

    legacy = tiny_model(tmp_path / "bin")
    (legacy / "model.safetensors").unlink()
    torch.save(TENSORS, legacy / "pytorch_model.bin")  # a zip archive with data.pkl
    open_local(legacy)
    with zipfile.ZipFile(legacy / "pytorch_model.bin", "w") as archive:
        archive.writestr("readme.txt", "not a checkpoint")
    fails(legacy, "pytorch_model.bin: not a torch checkpoint (a zip archive without data.pkl)")
    (legacy / "pytorch_model.bin").write_bytes(b"<html>404</html>")
    fails(legacy, "pytorch_model.bin: not a torch checkpoint (neither a zip archive nor a pickle)")


def test_adapters_sentence_transformers_and_gguf(tmp_path: Path, smollm2_path: Path):
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA"}))
    (adapter / "tokenizer_config.json").write_text("{}")
    fails(adapter, f"{adapter}: adapter_config.json but no adapter weights")
    save_file({"q.lora_A.weight": torch.zeros(2, 2)}, adapter / "adapter_model.safetensors")
    open_local(adapter)
    (adapter / "adapter_config.json").write_text(
        json.dumps({"peft_type": "LORA", "base_model_name_or_path": str(smollm2_path)})
    )
    assert open_model(str(adapter)) == "folder"  # its base opens too
    (adapter / "adapter_config.json").write_text(
        json.dumps({"peft_type": "LORA", "base_model_name_or_path": str(tmp_path / "gone")})
    )
    with pytest.raises(
        ConfigError, match=rf"the base model '{tmp_path}/gone' of its adapter_config.json: .*not found"
    ):
        open_model(str(adapter))
    (adapter / "adapter_config.json").write_text("{}")
    fails(adapter, f"{adapter}/adapter_config.json: no 'peft_type'")

    encoder = tmp_path / "st"
    encoder.mkdir()
    modules = [
        {"idx": 0, "name": "0", "path": "0_Transformer", "type": "sentence_transformers.models.Transformer"}
    ]
    (encoder / "modules.json").write_text(json.dumps(modules))
    tiny_model(encoder / "0_Transformer")
    open_local(encoder)  # an older sentence-transformers folder: model and tokenizer in the module's folder
    (encoder / "0_Transformer" / "model.safetensors").unlink()
    fails(encoder, f"{encoder}/0_Transformer: config.json but no weights")

    (tmp_path / "model.gguf").write_bytes(b"GGUF" + bytes(12))
    open_local(tmp_path / "model.gguf")
    (tmp_path / "bad.gguf").write_bytes(b"<htm")
    fails(tmp_path / "bad.gguf", "bad.gguf: not a GGUF file")  # fmt: skip


def test_check_models_opens_local_folders_where_the_argument_was_set(tmp_path: Path):
    model = tiny_model(tmp_path / "m")
    os.remove(model / "model.safetensors")
    (llm,) = parse_config((LLMConfig,), ["--model", str(model)])
    with pytest.raises(
        ConfigError, match=rf"^flag '--model': model '{model}': {model}: config.json but no weights"
    ):
        check_models(llm)
    (tok,) = parse_config(
        (LLMConfig,), ["--backend", "openai", "--model", "served", "--tokenizer", str(model)]
    )
    check_models(tok)  # a tokenizer field: config and tokenizer only
    shutil.rmtree(model)
    model.mkdir()
    (model / "config.json").write_text("{}")
    with pytest.raises(
        ConfigError, match=rf"^flag '--tokenizer': model '{model}': {model}/config.json: no 'model_type'"
    ):
        check_models(tok)
