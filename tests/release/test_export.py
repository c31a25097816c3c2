"""`r3forge export`: SFT run folders built from the embedded SmolLM2 (a full fine-tune with one perturbed
weight, a LoRA run with non-zero B matrices) -> release folders that load with transformers / PEFT and
give the same logits as the trained model; the model card; errors; a push to a loopback fake of the Hub's
upload API (the real Hub cannot be reached from the tests)."""

from __future__ import annotations

import base64
import json
import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import huggingface_hub
import pytest
import torch
import yaml
from peft import AutoPeftModelForCausalLM, LoraConfig, PeftModel, get_peft_model
from safetensors import safe_open
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

from r3forge.config import missing_help
from r3forge.errors import ConfigError
from r3forge.release import (
    PushError,
    ReleaseError,
    RunFolderError,
    export_run,
    model_card,
    push_folder,
    read_run,
)
from r3forge.release.card import curve_summary
from r3forge.release.cli import ExportArgs
from r3forge.release.cli import main as export_cli

HUB_BASE = "HuggingFaceTB/SmolLM2-135M-Instruct"
MESSAGES = [{"role": "user", "content": "Which passage says when Peibrette Thesick was born?"}]
CONFIG = {"learning_rate": 2e-5, "num_train_epochs": 1, "max_length": 1024, "lora_r": 4, "packing": False}
METRICS = [
    {"step": 10, "epoch": 0.25, "loss": 2.5},
    {"step": 20, "epoch": 0.5, "loss": 1.75},
    {"step": 20, "epoch": 0.5, "eval_loss": 1.9, "eval_spearman": 0.41},
    {"step": 30, "epoch": 0.75, "loss": 1.5},
    {"step": 40, "epoch": 1.0, "loss": 1.25},
    {"step": 40, "epoch": 1.0, "eval_loss": 1.6, "eval_spearman": 0.52},
]
FINAL_METRICS = {"eval_loss": 1.6, "eval_spearman": 0.52, "train_runtime": 81.5}


def write_records(run: Path, **meta: Any) -> None:
    """run.json, config.yaml, metrics.jsonl and final_metrics.json as the SFT recipe writes them."""
    run.mkdir(parents=True, exist_ok=True)
    record = {
        "recipe": "sft",
        "task": "verbal",
        "base_model": "smollm2-135m-instruct",
        "base_model_id": None,
        "datasets": ["r3forge/verbal-sft", "data/verbal_sft/train.jsonl"],
        "lora": False,
        "git_commit": "0123abcd",
        "r3forge_version": "0.1.0",
        "started": "2025-01-01T10:00:00Z",
        "finished": "2025-01-01T10:05:00Z",
        **meta,
    }
    (run / "run.json").write_text(json.dumps(record, indent=2))
    (run / "config.yaml").write_text(yaml.safe_dump(CONFIG, sort_keys=False))
    (run / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in METRICS))
    (run / "final_metrics.json").write_text(json.dumps(FINAL_METRICS))


def chat_inputs(folder: Path | str) -> dict[str, torch.Tensor]:
    tokenizer = AutoTokenizer.from_pretrained(folder)
    return tokenizer.apply_chat_template(
        MESSAGES, add_generation_prompt=True, return_dict=True, return_tensors="pt"
    )


def logits(model: torch.nn.Module, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """Logits in float64 (weights upcast exactly), so a comparison sees the export's error, not the
    rounding noise of a float32 forward pass through 30 layers (~1e-4 on logits of ~30)."""
    with torch.no_grad():
        return model.eval().double()(**inputs).logits


def read_card(folder: Path) -> tuple[dict[str, Any], str]:
    text = (folder / "README.md").read_text()
    assert text.startswith("---\n")
    _, meta, body = text.split("---\n", 2)
    return yaml.safe_load(meta), body


@pytest.fixture(scope="module")
def full_run(smollm2_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A full fine-tune: the base with one layer's q_proj scaled, saved without generation_config.json."""
    run = tmp_path_factory.mktemp("full") / "run"
    model = AutoModelForCausalLM.from_pretrained(smollm2_path, dtype=torch.float32)
    with torch.no_grad():
        model.model.layers[3].self_attn.q_proj.weight.mul_(1.5)
    model.save_pretrained(run / "final")
    AutoTokenizer.from_pretrained(smollm2_path).save_pretrained(run / "final")
    (run / "final" / "generation_config.json").unlink()  # the export must write one
    write_records(run, base_model=str(smollm2_path), base_model_id=HUB_BASE, datasets=["r3forge/verbal-sft"])
    return run


@pytest.fixture(scope="module")
def full_export(full_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return export_run(full_run, tmp_path_factory.mktemp("release") / "full", repo_id="me/verbal-full")


@dataclass
class LoraRun:
    path: Path
    inputs: dict[str, torch.Tensor]
    logits: torch.Tensor  # of the in-memory PEFT model that was saved


@pytest.fixture(scope="module")
def lora_run(smollm2_path: Path, tmp_path_factory: pytest.TempPathFactory) -> LoraRun:
    """A LoRA run on the embedded short name; B matrices are random so the adapter changes the logits."""
    run = tmp_path_factory.mktemp("lora") / "run"
    base = AutoModelForCausalLM.from_pretrained(smollm2_path, dtype=torch.float32)
    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.02)
    model.save_pretrained(run / "final")
    AutoTokenizer.from_pretrained(smollm2_path).save_pretrained(run / "final")
    write_records(run, lora=True, task="qream")
    inputs = chat_inputs(run / "final")
    return LoraRun(run, inputs, logits(model, inputs))


def test_full_export_gives_the_trained_logits(full_run: Path, full_export: Path, smollm2_path: Path):
    files = {p.name for p in full_export.iterdir()}
    assert {"model.safetensors", "config.json", "generation_config.json", "README.md"} <= files
    assert {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"} <= files
    assert not any(name.endswith(".bin") for name in files)
    inputs = chat_inputs(full_export)
    assert torch.equal(inputs["input_ids"], chat_inputs(full_run / "final")["input_ids"])
    exported = logits(AutoModelForCausalLM.from_pretrained(full_export, dtype=torch.float32), inputs)
    trained = logits(AutoModelForCausalLM.from_pretrained(full_run / "final", dtype=torch.float32), inputs)
    assert torch.equal(exported, trained)
    name = "model.layers.3.self_attn.q_proj.weight"  # the export is the fine-tune, not the base
    with (
        safe_open(full_export / "model.safetensors", "pt") as new,
        safe_open(smollm2_path / "model.safetensors", "pt") as old,
    ):
        assert torch.equal(new.get_tensor(name), old.get_tensor(name) * 1.5)
    generation = GenerationConfig.from_pretrained(full_export)
    assert generation.eos_token_id == 2 and generation.bos_token_id == 1


def test_full_export_card(full_export: Path):
    meta, body = read_card(full_export)
    assert meta["base_model"] == HUB_BASE and meta["base_model_relation"] == "finetune"
    assert meta["datasets"] == ["r3forge/verbal-sft"]
    assert meta["library_name"] == "transformers" and meta["pipeline_tag"] == "text-generation"
    assert {"r3forge", "verbal", "sft"} <= set(meta["tags"])
    assert meta["license"] == "apache-2.0"  # from the embedded base model's README
    assert "verbal reranker" in body
    config_rows = [
        "`learning_rate` | 2e-05",
        "`num_train_epochs` | 1",
        "`max_length` | 1024",
        "`packing` | false",
    ]
    assert all(f"| {row} |" in body for row in config_rows)
    assert "| `eval_spearman` | 0.52 |" in body and "| `train_runtime` | 81.5 |" in body
    assert "| `eval_spearman` | 2 | 0.52 | 40 |" in body and "| `eval_loss` | 2 | 1.6 | 40 |" in body
    assert "4 logged training steps (last step 40)" in body
    assert 'AutoModelForCausalLM.from_pretrained("me/verbal-full")' in body
    assert "vllm serve me/verbal-full" in body and "PeftModel" not in body
    assert "`0123abcd`" in body and "r3forge 0.1.0" in body


def fp64_atol(model: torch.nn.Module, logits: torch.Tensor, fp32) -> float:
    """Two float64 forwards of the same fp32 weights: 2·sqrt(L·k)·2^-53·max|logit| (~1e-12); an adapter
    left out or scaled wrongly moves the logits by its effect (> 1e-1)."""
    return fp32.atol(logits.abs().max(), fp32.forward_length(model.config)) * 2.0**-29  # u64 = u32·2^-29


def test_lora_export_unmerged_loads_with_peft(lora_run: LoraRun, tmp_path: Path, fp32):
    out = export_run(lora_run.path, tmp_path / "adapter", license="mit")
    assert {p.name for p in out.iterdir()} >= {
        "adapter_model.safetensors",
        "adapter_config.json",
        "README.md",
    }
    assert not (out / "model.safetensors").exists()
    model = AutoPeftModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    exported = logits(model, chat_inputs(out))
    assert (exported - lora_run.logits).abs().max() <= fp64_atol(model, lora_run.logits, fp32)
    meta, body = read_card(out)
    assert meta["library_name"] == "peft" and meta["license"] == "mit" and "base_model" not in meta
    assert {"qream", "lora", "peft"} <= set(meta["tags"])
    assert (
        meta["datasets"] == ["r3forge/verbal-sft"] and "`data/verbal_sft/train.jsonl`" in body
    )  # a local path
    assert "AutoPeftModelForCausalLM" in body and "--enable-lora" in body
    assert "is not a Hub repo id" in body  # the run recorded no base_model_id


def test_lora_export_unmerged_points_at_the_hub_base(
    lora_run: LoraRun, smollm2_path: Path, tmp_path: Path, fp32
):
    run = tmp_path / "run"
    shutil.copytree(lora_run.path, run)
    write_records(run, lora=True, task="qream", base_model_id=HUB_BASE)
    out = export_run(run, tmp_path / "adapter")
    assert json.loads((out / "adapter_config.json").read_text())["base_model_name_or_path"] == HUB_BASE
    assert (
        json.loads((run / "final" / "adapter_config.json").read_text())["base_model_name_or_path"] != HUB_BASE
    )
    meta, body = read_card(out)
    assert meta["base_model"] == HUB_BASE and meta["base_model_relation"] == "adapter"
    assert f"vllm serve {HUB_BASE} --enable-lora" in body and "is not a Hub repo id" not in body
    base = AutoModelForCausalLM.from_pretrained(smollm2_path, dtype=torch.float32)
    exported = logits(PeftModel.from_pretrained(base, out), lora_run.inputs)
    assert (exported - lora_run.logits).abs().max() <= fp64_atol(base, lora_run.logits, fp32)


def test_bin_adapter_weights_become_safetensors(lora_run: LoraRun, tmp_path: Path):
    run = tmp_path / "run"
    shutil.copytree(lora_run.path, run)
    weights = load_file(run / "final" / "adapter_model.safetensors")
    (run / "final" / "adapter_model.safetensors").unlink()
    torch.save(weights, run / "final" / "adapter_model.bin")
    out = export_run(run, tmp_path / "adapter")
    assert not (out / "adapter_model.bin").exists()
    exported = load_file(out / "adapter_model.safetensors")
    assert exported.keys() == weights.keys() and all(torch.equal(exported[k], weights[k]) for k in weights)


def test_lora_export_merged_loads_with_transformers(lora_run: LoraRun, tmp_path: Path, fp32):
    out = export_run(lora_run.path, tmp_path / "merged", merge_lora=True)
    files = {p.name for p in out.iterdir()}
    assert {"model.safetensors", "config.json", "generation_config.json", "chat_template.jinja"} <= files
    assert not any(name.startswith("adapter_") for name in files)
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    # the merged weights W + s·BA are rounded to fp32 once (relative u each) in q_proj and v_proj (inner
    # length: hidden) of every layer, and the float64 forward adds nothing to that: a chain of L·2·hidden
    # perturbed terms, sqrt(L·2·hidden)·u·max|logit| (~4e-4 at |logit| ≈ 35). A merge with the wrong
    # scale or a layer left unmerged moves the logits by the adapter's effect (> 1e-1)
    cfg = model.config
    n = cfg.num_hidden_layers * 2 * cfg.hidden_size
    atol = fp32.atol(lora_run.logits.abs().max(), n) / 2  # one computation rounded, the other exact
    assert (logits(model, chat_inputs(out)) - lora_run.logits).abs().max() <= atol
    meta, body = read_card(out)
    assert meta["library_name"] == "transformers" and "LoRA, merged into the base" in body


def test_run_folder_errors_name_the_path(full_run: Path, tmp_path: Path):
    small = tmp_path / "run"
    write_records(small)
    (small / "final").mkdir()
    with pytest.raises(RunFolderError, match=r"config\.json: missing"):
        export_run(small, tmp_path / "a")
    shutil.rmtree(small / "final")
    with pytest.raises(RunFolderError, match=rf"{small / 'final'}: missing"):
        export_run(small, tmp_path / "a")
    (small / "run.json").write_text(json.dumps({"recipe": "sft", "task": "verbal", "lora": False}))
    with pytest.raises(RunFolderError, match=r"run\.json: missing field 'base_model'"):
        export_run(small, tmp_path / "a")
    (small / "run.json").unlink()
    with pytest.raises(RunFolderError, match=rf"{small / 'run.json'}: not an r3forge run folder"):
        export_run(small, tmp_path / "a")
    assert not (tmp_path / "a").exists()


def test_weights_that_do_not_load_are_not_shipped(full_run: Path, tmp_path: Path):
    """Random bytes for weights fail before anything is written; weights of another size than config.json
    says fail the load check of the written release, which is then removed: no release, no temporary folder."""
    run = tmp_path / "run"
    shutil.copytree(full_run, run)
    config = json.loads((run / "final" / "config.json").read_text())
    (run / "final" / "config.json").write_text(json.dumps(config | {"intermediate_size": 1024}))
    with pytest.raises(
        ReleaseError,
        match=r"release: not written: its weights do not fit its config\.json \(90 mismatched, e\.g\. "
        r"model\.layers\.0\.mlp\.down_proj\.weight is \[576, 1536\] in the weights, \[576, 1024\] by the config",
    ):
        export_run(run, tmp_path / "out" / "release")
    assert not list((tmp_path / "out").iterdir())
    (run / "final" / "model.safetensors").write_bytes(bytes(range(256)) * 8)  # 2 KB that are no safetensors
    with pytest.raises(
        RunFolderError,
        match=rf"{run / 'final'}: the trained model does not open: .*model\.safetensors: not a safetensors",
    ):
        export_run(run, tmp_path / "out" / "release")
    assert not list((tmp_path / "out").iterdir())


def test_output_folder_is_protected(full_run: Path, full_export: Path, tmp_path: Path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(ReleaseError, match=rf"{out}: exists and is not empty; pass overwrite=True"):
        export_run(full_run, out)
    assert (out / "keep.txt").read_text() == "mine"
    with pytest.raises(ReleaseError, match="overlaps the run folder"):
        export_run(full_run, full_run / "release")
    with pytest.raises(ReleaseError, match="overlaps the run folder"):
        export_run(full_run, full_run.parent, overwrite=True)
    assert (full_run / "final" / "model.safetensors").is_file()


def test_long_configs_fold_and_nested_metrics_flatten(full_run: Path):
    run = read_run(full_run)
    run.config = {**{f"option_{i}": i for i in range(40)}, "learning_rate": 2e-5, "seed": 7}
    run.final_metrics = {"eval_loss": 1.6, "task_after": {"step": 40, "eval_task_spearman": 0.5}}
    body = model_card(run, "other", None, None)
    key = body.index("Key hyperparameters")
    details = body.index("<details>")
    assert key < body.index("| `learning_rate` | 2e-05 |") < details
    assert "All 42 fields" in body and details < body.index("| `option_39` | 39 |")
    assert "| `task_after.eval_task_spearman` | 0.5 |" in body


def test_curve_summary():
    summary = curve_summary(METRICS)
    assert summary["logged_steps"] == 4 and summary["last_step"] == 40
    assert (summary["first_loss"], summary["last_loss"]) == (2.5, 1.25)
    assert summary["evals"]["eval_spearman"] == {"evaluations": 2, "last": 0.52, "step": 40}


# --- push --------------------------------------------------------------------------------------------------


class FakeHub:
    """A loopback stand-in for the Hub routes `create_repo`, `create_branch` and `upload_folder` call
    (repo create, branch create, validate-yaml of the README, preupload, commit): every file is answered "regular" at preupload, so it arrives inline (base64) in the commit NDJSON.
    With `token` set, requests without `Authorization: Bearer <token>` get a 401."""

    def __init__(self, token: str | None = None):
        self.token = token
        self.repos: list[dict] = []
        self.branches: list[tuple[str, str]] = []
        self.commits: list[dict] = []  # {"repo", "revision", "header", "files": {path: bytes}}
        self.validated: list[dict] = []  # {"content", "repoType"} of validate-yaml calls
        self.unknown: list[str] = []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                if hub.token and self.headers.get("authorization") != f"Bearer {hub.token}":
                    return self.reply(401, {"error": "Invalid credentials in Authorization header"})
                parts = self.path.split("?")[0].strip("/").split("/")
                if parts[:2] == ["api", "validate-yaml"]:  # upload_folder checks the card's metadata first
                    payload = json.loads(body)
                    hub.validated.append(payload)
                    meta = yaml.safe_load(payload["content"].split("---\n", 2)[1])
                    errors = [] if isinstance(meta, dict) else [{"message": "no metadata mapping"}]
                    return self.reply(400 if errors else 200, {"errors": errors, "warnings": []})
                if parts[:3] == ["api", "repos", "create"]:
                    payload = json.loads(body)
                    hub.repos.append(payload)
                    return self.reply(200, {"url": f"{hub.url}/{payload['organization']}/{payload['name']}"})
                if len(parts) == 6 and parts[:2] == ["api", "models"]:
                    repo, action, ref = f"{parts[2]}/{parts[3]}", parts[4], parts[5]
                    if action == "branch":
                        hub.branches.append((repo, ref))
                        return self.reply(200, {})
                    if action == "preupload":
                        files = [
                            {"path": f["path"], "uploadMode": "regular", "shouldIgnore": False, "oid": None}
                            for f in json.loads(body)["files"]
                        ]
                        return self.reply(200, {"files": files})
                    if action == "commit":
                        lines = [json.loads(line) for line in body.splitlines() if line.strip()]
                        files = {
                            x["value"]["path"]: base64.b64decode(x["value"]["content"])
                            for x in lines
                            if x["key"] == "file"
                        }
                        header = next(x["value"] for x in lines if x["key"] == "header")
                        hub.commits.append({"repo": repo, "revision": ref, "header": header, "files": files})
                        oid = f"{len(hub.commits):040x}"
                        return self.reply(
                            200, {"commitUrl": f"{hub.url}/{repo}/commit/{oid}", "commitOid": oid}
                        )
                hub.unknown.append(self.path)
                return self.reply(404, {"error": f"no route {self.path}"})

            def reply(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:  # keep pytest output clean
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeHub:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def online(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tests run with HF_HUB_OFFLINE=1; the fake Hub is on loopback, so let huggingface_hub talk."""
    monkeypatch.setattr(huggingface_hub.constants, "is_offline_mode", lambda: False)


@pytest.fixture
def fake_hub(online) -> Iterator[FakeHub]:
    with FakeHub(token="hf_test") as hub:
        yield hub


@pytest.fixture(scope="module")
def adapter_export(lora_run: LoraRun, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An unmerged LoRA release: small files, so the fake Hub gets them inline."""
    return export_run(lora_run.path, tmp_path_factory.mktemp("release") / "adapter", repo_id="me/qream")


def test_push_uploads_every_file_to_the_branch(adapter_export: Path, fake_hub: FakeHub):
    url = push_folder(
        adapter_export, "me/qream", private=True, revision="v1", token="hf_test", endpoint=fake_hub.url
    )
    assert url == f"{fake_hub.url}/me/qream/commit/{1:040x}"
    assert fake_hub.repos == [
        {"name": "qream", "organization": "me", "visibility": "private", "type": "model"}
    ]
    assert fake_hub.branches == [("me/qream", "v1")]
    (commit,) = fake_hub.commits
    assert commit["repo"] == "me/qream" and commit["revision"] == "v1" and not fake_hub.unknown
    local = {
        str(p.relative_to(adapter_export)): p.read_bytes() for p in adapter_export.rglob("*") if p.is_file()
    }
    assert commit["files"] == local
    assert fake_hub.validated == [{"content": local["README.md"].decode(), "repoType": "model"}]


def test_push_errors_say_what_to_do(adapter_export: Path, fake_hub: FakeHub, tmp_path: Path, monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr("r3forge.release.push.get_token", lambda: None)
    where = rf"push to {fake_hub.url}/me/qream failed"
    with pytest.raises(
        PushError, match=where + r": .*no Hub token found: set HF_TOKEN.*huggingface-cli login"
    ):
        push_folder(adapter_export, "me/qream", endpoint=fake_hub.url)
    with pytest.raises(PushError, match=r"the token was rejected"):
        push_folder(adapter_export, "me/qream", token="hf_wrong", endpoint=fake_hub.url)
    with pytest.raises(PushError, match=r"http://127\.0\.0\.1:9/me/qream failed: .*cannot reach"):
        push_folder(adapter_export, "me/qream", token="hf_test", endpoint="http://127.0.0.1:9")
    with pytest.raises(PushError, match="not a release folder"):
        push_folder(tmp_path, "me/qream", endpoint=fake_hub.url)
    monkeypatch.setattr(huggingface_hub.constants, "is_offline_mode", lambda: True)
    with pytest.raises(PushError, match="HF_HUB_OFFLINE is set"):
        push_folder(adapter_export, "me/qream", token="hf_test", endpoint=fake_hub.url)
    assert fake_hub.commits == []


def test_cli_exports_and_pushes(lora_run: LoraRun, fake_hub: FakeHub, tmp_path: Path, capsys):
    out = tmp_path / "release"
    argv = ["--run", str(lora_run.path), "--out", str(out), "--push", "me/cli", "--license", "cc-by-4.0"]
    assert export_cli([*argv, "--hub_endpoint", fake_hub.url, "--hub_token", "hf_test"]) == 0
    assert f"pushed {out} -> {fake_hub.url}/me/cli/commit/" in capsys.readouterr().out
    assert fake_hub.repos[0]["visibility"] == "public" and fake_hub.branches == []
    assert fake_hub.commits[0]["revision"] == "main"
    assert read_card(out)[0]["license"] == "cc-by-4.0"
    assert 'from_pretrained("me/cli")' in fake_hub.commits[0]["files"]["README.md"].decode()
    with pytest.raises(ConfigError, match=r"--private only apply with --push"):
        export_cli(["--run", str(lora_run.path), "--out", str(tmp_path / "x"), "--private"])
    with pytest.raises(ConfigError, match=r"unknown flag .--merge.*did you mean .--merge_lora."):
        export_cli(["--run", str(lora_run.path), "--out", str(tmp_path / "x2"), "--merge"])


def test_every_cli_field_has_help():
    assert missing_help(ExportArgs) == []


# --- vLLM --------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_vllm_loads_the_full_export(full_export: Path):
    """vLLM (CPU build) serves the export as is: greedy tokens match transformers' on the same folder."""
    pytest.importorskip("vllm")
    # imported here, not at the top: importing vLLM costs seconds that the default (not slow) run skips
    from r3forge.backends import GenerationRequest, HFLocalBackend, HFLocalConfig
    from r3forge.backends.vllm_engine import VLLMEngineBackend, VLLMEngineConfig

    request = GenerationRequest(messages=MESSAGES, max_tokens=8)
    expected = HFLocalBackend.from_config(HFLocalConfig(model=str(full_export))).generate([request])
    engine = VLLMEngineBackend(VLLMEngineConfig(model=str(full_export), max_model_len=512, cpu_kvcache_gib=1))
    try:
        (result,) = engine.generate([request])
    finally:
        engine.close()
    assert result.choices[0].token_ids == expected[0].choices[0].token_ids
    assert result.choices[0].text


def test_full_finetune_of_the_embedded_model_names_its_upstream_repo(tmp_path: Path):
    """A full fine-tune's card carries the embedded model's upstream repo as lineage; an adapter's does not
    (its base weights are the dequantized GGUF, not the upstream ones)."""
    from r3forge.release.card import base_hub_id
    from r3forge.release.export import RunInfo

    run = RunInfo(tmp_path, {"base_model": "smollm2-135m-instruct", "base_model_id": None}, {}, {})
    assert base_hub_id(run) == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert base_hub_id(run, adapter=True) is None
    assert base_hub_id(RunInfo(tmp_path, {"base_model": "/models/mine"}, {}, {})) is None
