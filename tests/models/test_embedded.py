import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from datasets import Dataset
from sentence_transformers import SentenceTransformer
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import SFTConfig, SFTTrainer

from r3forge.errors import ConfigError, ModelPrepareError
from r3forge.models import EMBEDDED_MODELS, prepare_model, resolve_model, verify_folder
from r3forge.models.cli import ChatConfig, chat
from r3forge.models.embedded import MANIFEST, SMOLLM2, _locate_source


def test_materialized_folder_is_plain_hf_checkpoint(smollm2_path: Path):
    files = {p.name for p in smollm2_path.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "generation_config.json", MANIFEST} <= files
    config = json.loads((smollm2_path / "config.json").read_text())
    assert "quantization_config" not in config and config["model_type"] == "llama"
    assert verify_folder(smollm2_path, full=True) == []
    tok = AutoTokenizer.from_pretrained(smollm2_path)
    assert tok.chat_template and tok.eos_token == "<|im_end|>"
    manifest = json.loads((smollm2_path / MANIFEST).read_text())
    assert manifest["source_sha256"] == SMOLLM2.source_sha256


def test_same_logits_as_the_gguf_model(smollm2_path: Path):
    gguf = _locate_source(SMOLLM2)
    ref = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    ours = AutoModelForCausalLM.from_pretrained(smollm2_path, dtype=torch.float32)
    assert not getattr(ours, "is_quantized", False) and getattr(ours, "hf_quantizer", None) is None
    ids = AutoTokenizer.from_pretrained(smollm2_path)("Retrieval helps small models.", return_tensors="pt")
    with torch.no_grad():
        assert torch.equal(ref(**ids).logits, ours(**ids).logits)


def test_greedy_chat_20_tokens_offline(smollm2_path: Path):
    assert os.environ["HF_HUB_OFFLINE"] == "1"
    text = chat(ChatConfig(prompt="What is the capital of France?", max_new_tokens=20))
    assert "Paris" in text
    # deterministic: greedy twice gives the same text
    assert chat(ChatConfig(prompt="What is the capital of France?", max_new_tokens=20)) == text


def test_trl_can_train_the_materialized_model(smollm2_path: Path, tmp_path: Path):
    model = AutoModelForCausalLM.from_pretrained(smollm2_path, dtype=torch.float32)
    before = model.model.layers[0].mlp.down_proj.weight.detach().clone()
    data = Dataset.from_list(
        [
            {
                "prompt": [{"role": "user", "content": f"Say {w}."}],
                "completion": [{"role": "assistant", "content": w}],
            }
            for w in ["alpha", "beta", "gamma", "delta"]
        ]
    )
    args = SFTConfig(
        output_dir=str(tmp_path),
        max_steps=1,
        per_device_train_batch_size=2,
        learning_rate=1e-3,
        use_cpu=True,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        max_length=64,
    )
    trainer = SFTTrainer(
        model=model,
        args=args,
        train_dataset=data,
        processing_class=AutoTokenizer.from_pretrained(smollm2_path),
    )
    trainer.train()
    assert not torch.equal(before, model.model.layers[0].mlp.down_proj.weight.detach())


def test_encoder_loads_offline_and_embeds(minilm_path: Path):
    assert verify_folder(minilm_path, full=True) == []
    encoder = SentenceTransformer(str(minilm_path), device="cpu")
    emb = encoder.encode(
        ["A cat sits on the mat.", "A kitten is sitting on a rug.", "Stock markets fell."],
        normalize_embeddings=True,
    )
    assert emb.shape == (3, 384)
    assert emb[0] @ emb[1] > emb[0] @ emb[2] + 0.3


def test_resolve_and_unknown_names(smollm2_path: Path):
    assert resolve_model("smollm2-135m-instruct") == str(smollm2_path)
    assert resolve_model(str(smollm2_path)) == str(smollm2_path)  # a local folder, as given
    with pytest.raises(
        ConfigError, match="model '/some/local/path' not found: no local folder /some/local/path"
    ):
        resolve_model("/some/local/path")  # Hub ids: tests/models/test_locate.py
    with pytest.raises(ModelPrepareError, match="unknown embedded model 'nope'"):
        prepare_model("nope")
    assert set(EMBEDDED_MODELS) == {"smollm2-135m-instruct", "all-minilm-l6-v2"}


def test_prepare_is_idempotent_and_repairs_corruption(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("R3FORGE_HOME", str(tmp_path))
    folder = prepare_model("all-minilm-l6-v2")
    stamp = (folder / MANIFEST).stat().st_mtime_ns
    assert prepare_model("all-minilm-l6-v2") == folder
    assert (folder / MANIFEST).stat().st_mtime_ns == stamp  # reused, not rewritten
    with open(folder / "vocab.txt", "ab") as f:  # corrupt one file
        f.write(b"junk")
    assert verify_folder(folder) and "vocab.txt" in verify_folder(folder)[0]
    repaired = prepare_model("all-minilm-l6-v2")
    assert verify_folder(repaired, full=True) == []
    assert not list(tmp_path.glob("models/.tmp-*")) and not list(tmp_path.glob("models/.trash-*"))


def test_killed_prepare_leaves_no_loadable_half_folder_and_rerun_succeeds(tmp_path: Path):
    env = {**os.environ, "R3FORGE_HOME": str(tmp_path)}
    cmd = [sys.executable, "-m", "r3forge", "models", "prepare", "--models", "smollm2-135m-instruct"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    models = tmp_path / "models"
    deadline = time.time() + 240
    # kill while the weights are being written into the temporary folder
    while time.time() < deadline and not list(models.glob(".tmp-smollm2-135m-instruct-*/model.safetensors")):
        assert proc.poll() is None, "prepare finished before it could be killed"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (models / "smollm2-135m-instruct").exists()
    assert list(models.glob(".tmp-smollm2-135m-instruct-*"))  # the half folder is only a temp sibling
    rerun = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    final = models / "smollm2-135m-instruct"
    assert verify_folder(final, full=True) == [] and not list(models.glob(".tmp-*"))
    assert AutoModelForCausalLM.from_pretrained(final).config.vocab_size == 49152


VLLM_SCRIPT = """
import sys
from vllm import LLM, SamplingParams

if __name__ == "__main__":
    llm = LLM(model=sys.argv[1], dtype="float32", enforce_eager=True, max_model_len=1024)
    params = SamplingParams(temperature=0, max_tokens=20)
    out = llm.chat([{"role": "user", "content": "What is the capital of France?"}], params)
    print("TEXT=" + out[0].outputs[0].text)
"""


@pytest.mark.slow
def test_vllm_loads_the_materialized_model(smollm2_path: Path, tmp_path: Path):
    script = tmp_path / "load_vllm.py"
    script.write_text(VLLM_SCRIPT)
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}
    proc = subprocess.run(
        [sys.executable, str(script), str(smollm2_path)], env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Paris" in proc.stdout.split("TEXT=", 1)[1]
