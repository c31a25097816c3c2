"""The SFT recipe on the embedded model: completion-only loss at token level (prompt masked, end-of-turn
learned), full and LoRA runs of a few steps that change the weights, the run folder, resume, and refusals."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import datasets
import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import SFTTrainer

from r3forge.annotate.export import sft_row
from r3forge.annotate.verbal import load_template, parse_annotation, score_token_index
from r3forge.backends.base import Choice, token_decoder
from r3forge.config import parse_config
from r3forge.errors import ConfigError, DataFormatError
from r3forge.recipes.sft import main
from r3forge.release.export import export_run
from r3forge.sft.config import SFT_CONFIGS
from r3forge.training.cpu import bound_cpu_heap

ROWS = [
    {"prompt": [{"role": "user", "content": f"Is document {i} about question {i}?"}],
     "completion": [{"role": "assistant", "content": f"Comment: It names item {i}.\nScore: {1 + i % 5}"}],
     "question_id": f"q{i // 3}", "doc_id": f"d{i}", "score": 1 + i % 5, "relevance": int(i % 5 == 4)}
    for i in range(12)
]  # fmt: skip


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("sftdata") / "dsd"
    datasets.DatasetDict({"train": datasets.Dataset.from_list(ROWS[:9]),
                          "validation": datasets.Dataset.from_list(ROWS[9:])}).save_to_disk(str(path))  # fmt: skip
    return path


def configs(data: Path, out: Path, *extra: str):
    argv = ["--dataset", str(data), "--task", "verbal", "--output_dir", str(out), "--bf16", "false"]
    argv += ["--max_steps", "2", "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "1"]
    argv += ["--learning_rate", "1e-3", "--max_length", "128", "--report_to", "none", "--save_steps", "1"]
    argv += [
        "--save_total_limit",
        "1",
    ]  # a full checkpoint of the 135M model with Adam state is 1.6 GB of disk
    argv += ["--logging_steps", "1", "--task_eval_samples", "3", "--task_eval_max_new_tokens", "16"]
    argv += ["--gradient_checkpointing", "false", "--use_cpu", "true", *extra]
    return parse_config(SFT_CONFIGS, argv)


def test_completion_only_loss_at_token_level(data: Path, smollm2_path: Path, tmp_path: Path) -> None:
    *_, training = configs(data, tmp_path / "mask")
    training.completion_only_loss = True
    tokenizer = AutoTokenizer.from_pretrained(smollm2_path)
    model = AutoModelForCausalLM.from_pretrained(smollm2_path)
    trainer = SFTTrainer(model=model, args=training, processing_class=tokenizer,
                         train_dataset=datasets.load_from_disk(str(data))["train"])  # fmt: skip
    example = trainer.train_dataset[0]
    labels = trainer.data_collator([example])["labels"][0].tolist()
    ids = example["input_ids"]
    # the prompt, exactly as inference builds it, is the masked prefix
    text = tokenizer.apply_chat_template(ROWS[0]["prompt"], add_generation_prompt=True, tokenize=False)
    prompt_ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert ids[: len(prompt_ids)] == list(prompt_ids)
    assert all(label == -100 for label in labels[: len(prompt_ids)])
    learned = [t for t, label in zip(ids, labels, strict=True) if label != -100]
    assert learned == ids[len(prompt_ids) :]  # every completion token is learned ...
    assert tokenizer.decode(learned).startswith("Comment: It names item 0.\nScore: 1")
    end_of_turn = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert end_of_turn in learned  # ... including the end of the turn: the student learns to stop


def test_score_first_variant_at_token_level(smollm2_path: Path, tmp_path: Path) -> None:
    """The score-first variant (`annotate rules/export-sft --score_first`) through the real tokenizer and the
    SFT collator: the score digit is among the first learned tokens, and on the real model's token ids the
    parser and `score_token_index` find that token (whose logprob breaks ties)."""
    record = {"question": "Which city hosts the Louvre?", "doc_title": "Louvre", "comment": "It names Paris.",
              "doc_text": "The Louvre is in Paris.", "question_id": "q", "doc_id": "d", "score": 5}  # fmt: skip
    row = sft_row(record, load_template()[0], score_first=True)
    path = tmp_path / "dsd"
    datasets.DatasetDict({"train": datasets.Dataset.from_list([row] * 2)}).save_to_disk(str(path))
    *_, training = configs(path, tmp_path / "sf", "--max_length", "512")
    tokenizer = AutoTokenizer.from_pretrained(smollm2_path)
    trainer = SFTTrainer(model=AutoModelForCausalLM.from_pretrained(smollm2_path), args=training,
                         processing_class=tokenizer, train_dataset=datasets.load_from_disk(str(path))["train"])  # fmt: skip
    example = trainer.train_dataset[0]
    labels = trainer.data_collator([example])["labels"][0].tolist()
    learned = [t for t, label in zip(example["input_ids"], labels, strict=True) if label != -100]
    assert tokenizer.decode(learned).startswith("Score: 5\nComment: It names Paris.")
    digit = [i for i, t in enumerate(learned) if tokenizer.decode([t]).strip() == "5"]
    assert digit and digit[0] <= 3  # the decision comes before any comment token
    text = tokenizer.decode(learned, skip_special_tokens=True)
    parsed = parse_annotation(text)
    choice = Choice(text, learned, [-0.5] * len(learned), [], "stop")
    assert (
        parsed.score == 5
        and score_token_index(choice, parsed.score_offset, token_decoder(tokenizer)) == digit[0]
    )


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    return {k: v for f in sorted(folder.glob("*.safetensors")) for k, v in load_file(f).items()}


def test_full_run_changes_weights_and_writes_the_run_folder(data: Path, smollm2_path: Path, tmp_path: Path):
    out = tmp_path / "full"
    metrics = main(*configs(data, out, "--model_name_or_path", str(smollm2_path)))
    trained, base = _weights(out / "final"), _weights(smollm2_path)
    changed = [k for k in base if k in trained and not torch.equal(base[k], trained[k])]
    assert len(changed) > 10
    for name in ("run.json", "config.yaml", "metrics.jsonl", "final_metrics.json"):
        assert (out / name).is_file(), name
    run = json.loads((out / "run.json").read_text())
    assert run["lora"] is False and run["task"] == "verbal" and run["finished"]
    final = json.loads((out / "final_metrics.json").read_text())  # strict JSON (NaN -> null)
    assert final["task_before"]["step"] == 0 and final["task_after"]["step"] == 2
    assert "eval_loss" in metrics and 0.0 <= final["task_after"]["eval_task_parse_rate"] <= 1.0
    logged = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert {row["step"] for row in logged if "loss" in row} == {1, 2}
    assert any("eval_task_parse_rate" in row for row in logged)
    generations = sorted(p.name for p in (out / "task_eval").glob("*.jsonl"))
    assert generations == ["step_000000.jsonl", "step_000002.jsonl"]
    rows = [json.loads(line) for line in (out / "task_eval" / "step_000002.jsonl").read_text().splitlines()]
    assert rows and {"question_id", "doc_id", "teacher_score", "student_score", "text"} <= set(rows[0])
    assert (out / "final" / "tokenizer_config.json").is_file() and (
        out / "final" / "chat_template.jinja"
    ).is_file()

    # the run folder exports as it is, to a release with the same logits as final/
    release = export_run(out, tmp_path / "release")
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    with torch.no_grad():
        a = AutoModelForCausalLM.from_pretrained(out / "final")(ids).logits
        b = AutoModelForCausalLM.from_pretrained(release)(ids).logits
    assert torch.equal(a, b) and (release / "README.md").is_file()
    shutil.rmtree(release)  # disk: CI machines may have a few GB free

    # the folder holds a run: refused without resume/overwrite; resumed from checkpoint-2 to step 3
    with pytest.raises(ConfigError, match="holds a run"):
        main(*configs(data, out, "--model_name_or_path", str(smollm2_path)))
    main(*configs(data, out, "--model_name_or_path", str(smollm2_path), "--max_steps", "3",
                  "--resume_from_checkpoint", "auto"))  # fmt: skip
    logged = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in logged if "loss" in row] == [1, 2, 3]  # step 3 only, after the resume
    assert (out / "checkpoint-3").is_dir()


def test_lora_run_trains_only_the_adapter(
    data: Path, smollm2_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Also `bf16: auto` with the CPU's bf16 units forced off: fp32, and run.json says so and why."""
    monkeypatch.setenv("R3FORGE_CPU_BF16", "0")
    out = tmp_path / "lora"
    lora = [
        "--use_peft",
        "true",
        "--lora_r",
        "4",
        "--lora_alpha",
        "8",
        "--lora_target_modules",
        "q_proj",
        "v_proj",
    ]
    main(*configs(data, out, "--model_name_or_path", str(smollm2_path), "--task_eval_samples", "0", *lora,
                  "--bf16", "auto"))  # fmt: skip
    adapter = _weights(out / "final")
    assert (out / "final" / "adapter_config.json").is_file() and not (
        out / "final" / "model.safetensors"
    ).exists()
    b = [v for k, v in adapter.items() if "lora_B" in k]
    assert b and any(v.abs().sum() > 0 for v in b)  # B starts at zero: non-zero means it was trained
    run = json.loads((out / "run.json").read_text())
    assert run["lora"] is True and run["precision"]["mixed_precision"] == "fp32"
    assert "auto -> False: R3FORGE_CPU_BF16=0" in run["precision"]["set_by"] and run["precision"][
        "device"
    ].startswith("cpu: ")


def test_bad_inputs(data: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no split 'dev'"):
        main(*configs(data, tmp_path / "a", "--eval_split", "dev"))
    with pytest.raises(ConfigError, match=r"eval_split 'train' of dataset .* is the training split"):
        main(*configs(data, tmp_path / "t", "--eval_split", "train"))  # e.g. --eval_dataset '' over a YAML's
    with pytest.raises(ConfigError, match="missing: no such file or folder"):
        main(*configs(tmp_path / "missing", tmp_path / "b"))
    bare = tmp_path / "bare.jsonl"
    bare.write_text(json.dumps({"text": "x"}) + "\n")
    with pytest.raises(
        DataFormatError, match=r"bare.jsonl:1: missing column\(s\) \['prompt', 'completion'\]"
    ):
        main(*configs(bare, tmp_path / "c"))


@pytest.mark.skipif(torch.cuda.is_available(), reason="bf16 is valid with a GPU")
def test_bf16_without_gpu_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="bf16: false"):
        parse_config(SFT_CONFIGS, ["--dataset", "x", "--output_dir", str(tmp_path), "--bf16", "true"])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_bound_cpu_heap_sets_glibcs_threshold_unless_the_user_did(monkeypatch: pytest.MonkeyPatch) -> None:
    """glibc accepts the fixed mmap threshold (RSS of the CPU reranker run: 14 GiB at step 62 without it,
    4-8 GiB with it; see `bound_cpu_heap`); a user's MALLOC_MMAP_THRESHOLD_ is left alone."""
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    assert bound_cpu_heap() is True
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "4194304")
    assert bound_cpu_heap() is False
