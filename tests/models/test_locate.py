"""Model arguments located before anything loads: a local folder, an embedded name, a Hub id, or one error
that says what was looked for and where the argument was set."""

from __future__ import annotations

from pathlib import Path

import pytest
from huggingface_hub import constants

from r3forge.backends.open import LLMConfig
from r3forge.config import parse_config
from r3forge.errors import ConfigError
from r3forge.models import check_models, locate_model, resolve_model, resolve_vllm_model


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    """runs/sft/final (a model folder), runs/sft/empty (no model files), runs/model.gguf."""
    (tmp_path / "runs" / "sft" / "final").mkdir(parents=True)
    (tmp_path / "runs" / "sft" / "final" / "config.json").write_text("{}")
    (tmp_path / "runs" / "sft" / "empty").mkdir()
    (tmp_path / "runs" / "model.gguf").write_bytes(b"GGUF")
    return tmp_path / "runs"


def test_folder_file_embedded_and_what_was_looked_for(runs: Path):
    assert locate_model(str(runs / "sft" / "final")) == "folder"
    assert locate_model(str(runs / "model.gguf")) == "file"
    assert locate_model("smollm2-135m-instruct") == "embedded"
    assert resolve_model(str(runs / "sft" / "final")) == str(runs / "sft" / "final")
    with pytest.raises(ConfigError) as e:
        locate_model(str(runs / "sft" / "finall"))
    assert str(e.value) == (
        f"model '{runs}/sft/finall' not found: no local folder {runs}/sft/finall ({runs}/sft holds: final?); "
        "no embedded model of that name (smollm2-135m-instruct, all-minilm-l6-v2); as a Hub id: not of the "
        "form org/name"
    )
    with pytest.raises(
        ConfigError, match=r"the folder .*/runs/sft holds none of config.json.*its model folder\(s\): final"
    ):
        locate_model(str(runs / "sft"))
    with pytest.raises(ConfigError, match=r"holds none of config\.json"):
        resolve_model(str(runs / "sft" / "empty"))


def test_hub_ids(runs: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(runs.parent)
    with pytest.raises(ConfigError, match=r"as a Hub id: runs/ is a local folder, so this is a path"):
        locate_model("runs/finall")  # org/name in form, but runs/ is here: a mistyped path
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    assert locate_model("Qwen/Qwen2.5-1.5B-Instruct") == "hub"  # not asked: nothing is downloaded
    assert resolve_model("Qwen/Qwen2.5-1.5B-Instruct") == "Qwen/Qwen2.5-1.5B-Instruct"
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ConfigError, match="not in the local Hugging Face cache, and HF_HUB_OFFLINE is set"):
        locate_model("nobody-r3forge/no-such-model")
    assert resolve_model("nobody-r3forge/no-such-model") == "nobody-r3forge/no-such-model"  # a load says why


def test_check_models_names_where_and_skips_served_names(tmp_path: Path):
    missing = str(tmp_path / "nope")
    (served,) = parse_config((LLMConfig,), ["--backend", "openai", "--model", missing])
    check_models(served)  # the name a server answers to: not looked for here
    (started,) = parse_config((LLMConfig,), ["--backend", "openai", "--serve", "true", "--model", missing])
    with pytest.raises(ConfigError, match=rf"^flag '--model': model '{missing}' not found"):
        check_models(started)  # the job starts that server itself: the model must be here
    yaml = tmp_path / "c.yaml"
    yaml.write_text(f"backend: hf\ntokenizer: {missing}\n")
    (local,) = parse_config((LLMConfig,), ["--config", str(yaml)])
    with pytest.raises(ConfigError, match=rf"^{yaml}:2: key 'tokenizer': model '{missing}' not found"):
        check_models(local)
    with pytest.raises(ConfigError, match=rf"^default 'model': model '{missing}' not found"):
        check_models(LLMConfig(model=missing))  # built in code


def test_vllm_refuses_a_lora_adapter_and_names_the_merge(tmp_path: Path):
    final = tmp_path / "run" / "final"
    final.mkdir(parents=True)
    (final / "adapter_config.json").write_text("{}")
    with pytest.raises(
        ConfigError, match=r"LoRA adapter.*r3forge export --run .*run --out <folder> --merge_lora"
    ):
        resolve_vllm_model(str(final))
    (final / "config.json").write_text("{}")  # a merged (full) model folder is served as it is
    assert resolve_vllm_model(str(final)) == str(final)
