"""Bad inputs to every command that takes a config: one line naming the file:line, key or flag, exit code 1,
no traceback, and before any model loads (each case takes well under a second once the modules are
imported). Commands x cases, through the real CLI (`r3forge.cli.main`, in this process): unknown keys and
flags, wrong types, missing and malformed files, sizes of 0 or below, fractions outside [0, 1], model
arguments that name no model, and the malformed / empty / non-UTF-8 datasets of `sft`. A new command or
config field gets its case here."""

from __future__ import annotations

import itertools
import json
import random
import shlex
from pathlib import Path

import pytest

from r3forge.cli import main

NO_MODEL = ("model '{d}/no-such-model' not found", "no local folder", "no embedded model", "as a Hub id")
SFT = "sft --output_dir {o} --bf16 false --report_to none"
GRPO = "grpo --output_dir {o} --bf16 false --report_to none --per_device_train_batch_size 5 --index {d}/idx"
VERBAL = "annotate verbal --qa_path {d}/qa.jsonl --output_dir {o}"
RAG = "eval rag --qa_path {d}/qa.jsonl --output_dir {o}"
QREAM = "annotate qream --qa_path {d}/qa.jsonl --output_dir {o}"
REWRITE = "rewrite --qa_path {d}/qa.jsonl --output_dir {o}"
RULES = "annotate rules --qa_path {d}/qa.jsonl --output_dir {o}"
EXPORT_SFT = "annotate export-sft --input_dir {o} --output_dir {o}/export"
AGENT = "eval agent --dataset {d}/qa.jsonl --output_dir {o} --index {d}/idx"
TTS = "eval tts --dataset {d}/qa.jsonl --output_dir {o} --index {d}/idx"
FILTER = "data filter-closed-book --qa_path {d}/qa.jsonl --output {o}/filtered.jsonl"
WARMSTART = "data agent-warmstart --dataset {d}/qa.jsonl --output {o}/warm.jsonl --index {d}/idx"
CROSS = "train-cross-encoder --qa_path {d}/qa.jsonl --output_dir {o}"
INDEX = "index build --corpus {d}/corpus.jsonl --output {o}/index"

# (argv, what the one-line message must name); {d} is the folder of the files below
CASES = [
    # config files: unknown key, wrong type, missing, bad YAML, not a mapping, duplicate key
    (f"{VERBAL} --config {{d}}/typo.yaml", ("typo.yaml:2: unknown key 'max_question'", "'max_questions'?")),
    (f"{VERBAL} --config {{d}}/wrongtype.yaml", ("wrongtype.yaml:1: key 'max_questions': invalid value 'many'",)),
    (f"{VERBAL} --config {{d}}/nope.yaml", ("nope.yaml: cannot read config file",)),
    (f"{VERBAL} --config {{d}}/bad.yaml", ("bad.yaml:3: invalid YAML",)),
    (f"{VERBAL} --config {{d}}/list.yaml", ("list.yaml:1: a config file must be a mapping",)),
    (f"{RAG} --config {{d}}/dup.yaml", ("dup.yaml:2: duplicate key 'batch_size' (first at line 1)",)),
    # a non-UTF-8 YAML; a mapping where a list or a number goes
    (f"{RAG} --config {{d}}/latin1.yaml", ("latin1.yaml:2: not UTF-8 text (byte 0xe9",)),
    (f"{RAG} --config {{d}}/map_list.yaml", ("map_list.yaml:1: key 'top_m': expected a list, got a mapping",)),
    (f"{RAG} --config {{d}}/map_int.yaml", ("map_int.yaml:1: key 'batch_size': expected a single value",)),
    # sizes that mean nothing: a cadence of 0 steps, a negative max_steps other than -1
    (f"{SFT} --dataset {{d}}/rows.jsonl --save_steps 0", ("flag '--save_steps': must be > 0", "got 0")),
    (f"{SFT} --dataset {{d}}/rows.jsonl --eval_steps 0", ("flag '--eval_steps': must be > 0",)),
    (f"{SFT} --dataset {{d}}/rows.jsonl --max_steps -5", ("flag '--max_steps': must be >= 1 or -1 (the epochs decide), got -5",)),
    (f"{GRPO} --dataset {{d}}/qa.jsonl --max_steps 0", ("flag '--max_steps': must be >= 1 or -1",)),
    (f"{SFT} --dataset {{d}}/rows.jsonl --bf16 maybe", ("argument --bf16", "'maybe'", "or auto")),
    (f"{SFT} --dataset {{d}}/rows.jsonl --config {{d}}/typo_sft.yaml", ("typo_sft.yaml:1: unknown key 'learning_rat'",)),
    (f"{GRPO} --dataset {{d}}/qa.jsonl --config {{d}}/typo.yaml", ("typo.yaml:2: unknown key 'max_question'",)),
    (f"{REWRITE} --config {{d}}/typo.yaml", ("typo.yaml:2: unknown key 'max_question'", "'max_questions'?")),
    (f"{QREAM} --config {{d}}/bad.yaml", ("bad.yaml:3: invalid YAML",)),
    (f"{INDEX} --config {{d}}/typo.yaml", ("typo.yaml:2: unknown key 'max_question'",)),
    ("serve retriever --index {d}/idx --config {d}/typo.yaml", ("typo.yaml:2: unknown key 'max_question'",)),
    ("quickstart --config {d}/typo.yaml", ("typo.yaml:2: unknown key 'max_question'",)),
    ("quickstart --config {d}/bad.yaml", ("bad.yaml:3: invalid YAML",)),
    ("quickstart --config {d}/wrongtype_qs.yaml", ("wrongtype_qs.yaml:1: key 'grpo_steps': invalid value 'three'",)),
    # flags: unknown, wrong type, a required one missing
    (f"{RAG} --batchsize 4", ("unknown flag '--batchsize'", "'--batch_size'?")),
    (f"{RAG} --batch_size abc", ("argument --batch_size", "invalid int value: 'abc'")),
    ("eval rag --output_dir {o}", ("required: --qa_path",)),
    (f"{SFT} --dataset {{d}}/rows.jsonl --per_device_train_batch_size two", ("--per_device_train_batch_size", "'two'")),
    ("annotate verbal --qa_path {d}/qa.jsonl", ("required: --output_dir",)),
    ("data pool --qa_path {d}/qa.jsonl", ("required: --output",)),
    # sizes of 0 or below, fractions outside [0, 1]: flags and YAML keys
    (f"{RAG} --batch_size 0", ("flag '--batch_size': must be >= 1, got 0",)),
    (f"{RAG} --batch_size -1", ("flag '--batch_size': must be >= 1, got -1",)),
    (f"{RAG} --max_questions 0", ("flag '--max_questions': must be >= 1 or unset", "got 0")),
    (f"{RAG} --max_questions -1", ("flag '--max_questions': must be >= 1 or unset", "got -1")),
    (f"{RAG} --top_m 5 0", ("flag '--top_m': must be >= 1, got 0",)),
    (f"{RAG} --num_candidates 0", ("flag '--num_candidates': must be >= 1",)),
    (f"{RAG} --gpu_memory_utilization 1.5", ("flag '--gpu_memory_utilization': must be in [0, 1], got 1.5",)),
    (f"{RAG} --config {{d}}/zero_batch.yaml", ("zero_batch.yaml:2: key 'batch_size': must be >= 1, got 0",)),
    (f"{VERBAL} --max_questions -1", ("flag '--max_questions': must be >= 1 or unset", "got -1")),
    (f"{VERBAL} --max_questions 0", ("flag '--max_questions': must be >= 1 or unset", "got 0")),
    (f"{VERBAL} --batch_size 0", ("flag '--batch_size': must be >= 1",)),
    (f"{VERBAL} --concurrency 0", ("flag '--concurrency': must be >= 1",)),
    (f"{VERBAL} --copy_max_fraction 1.5", ("flag '--copy_max_fraction': must be in [0, 1]",)),
    (f"{VERBAL} --temperature -1", ("flag '--temperature': must be >= 0",)),
    ("annotate judge --annotation_dir {o} --output_dir {o} --max_items 0", ("'--max_items': must be >= 1",)),
    ("annotate paraphrase --qa_path {d}/qa.jsonl --output_dir {o} --max_copied 2", ("'--max_copied': must be in [0, 1]",)),
    (f"{QREAM} --rounds 0", ("flag '--rounds': must be >= 1",)),
    (f"{QREAM} --top_k 0", ("flag '--top_k': must be >= 1",)),
    (f"{QREAM} --validation_fraction 1.5", ("flag '--validation_fraction': must be in [0, 1]",)),
    ("annotate qream-judge-probe --qa_path {d}/qa.jsonl --output_dir {o} --max_questions 0", ("'--max_questions': must be >= 1",)),
    (f"{RULES} --max_questions 0", ("flag '--max_questions': must be >= 1 or unset",)),
    (f"{RULES} --config {{d}}/frac.yaml", ("frac.yaml:1: key 'validation_fraction': must be in [0, 1], got 1.5",)),
    (f"{RULES} --doc_max_words -1", ("flag '--doc_max_words': must be >= 0",)),
    (f"{EXPORT_SFT} --validation_fraction -0.1", ("flag '--validation_fraction': must be in [0, 1]",)),
    (f"{EXPORT_SFT} --max_per_score 0", ("flag '--max_per_score': must be >= 1 or unset",)),
    (f"{SFT} --dataset {{d}}/rows.jsonl --per_device_train_batch_size 0", ("'--per_device_train_batch_size': must be >= 1, got 0",)),
    (f"{SFT} --dataset {{d}}/rows.jsonl --per_device_train_batch_size -1", ("'--per_device_train_batch_size': must be >= 1, got -1",)),
    (f"{SFT} --dataset {{d}}/rows.jsonl --gradient_accumulation_steps 0", ("'--gradient_accumulation_steps': must be >= 1",)),
    (f"{SFT} --dataset {{d}}/rows.jsonl --max_train_samples 0", ("'--max_train_samples': must be >= 1 or unset",)),
    (f"{SFT} --dataset {{d}}/rows.jsonl --lora_dropout 1.5", ("'--lora_dropout': must be in [0, 1]",)),
    (f"{SFT} --dataset {{d}}/rows.jsonl --learning_rate=-0.1", ("'--learning_rate': must be >= 0",)),
    (f"{SFT} --dataset {{d}}/rows.jsonl --config {{d}}/sft_batch.yaml", ("sft_batch.yaml:1: key 'per_device_train_batch_size': must be >= 1",)),
    (f"{GRPO} --dataset {{d}}/qa.jsonl --num_generations 0", ("'--num_generations': must be >= 1",)),
    (f"{GRPO} --dataset {{d}}/qa.jsonl --heldout_fraction 1.5", ("'--heldout_fraction': must be in [0, 1]",)),
    (f"{GRPO} --dataset {{d}}/qa.jsonl --max_completion_length 0", ("'--max_completion_length': must be >= 1",)),
    (f"{GRPO} --dataset {{d}}/qa.jsonl --rollout_loop fast", ("--rollout_loop", "invalid choice: 'fast'", "'async'")),
    (f"{GRPO} --dataset {{d}}/qa.jsonl --rollout_engine vllm --use_vllm true", ("rollout_engine: vllm", "use_vllm: true", "pick one")),
    (f"{GRPO} --dataset {{d}}/qa.jsonl --rollout_engine_kv_gib 0", ("'--rollout_engine_kv_gib': must be >= 1",)),
    (f"{GRPO} --dataset {{d}}/qa.jsonl --max_tokens_per_microbatch 0", ("'--max_tokens_per_microbatch': must be >= 1",)),
    (f"{REWRITE} --top_k 0", ("flag '--top_k': must be >= 1",)),
    (f"{REWRITE} --max_questions -1", ("flag '--max_questions': must be >= 1 or unset",)),
    (f"{INDEX} --kind dense --batch_size 0", ("flag '--batch_size': must be >= 1",)),
    (f"{INDEX} --chunk_size 0", ("flag '--chunk_size': must be >= 1",)),
    ("serve retriever --index {d}/idx --port 70000", ("flag '--port': must be in [0, 65535], got 70000",)),
    ("serve retriever --index {d}/idx --max_topk 0", ("flag '--max_topk': must be >= 1",)),
    # a regex that is none, fields whose order is wrong, a file output over a folder or in another run's folder
    (f"{INDEX} --token_pattern (", ("flag '--token_pattern': not a valid regex '('", "missing ), unterminated")),
    (f"{INDEX} --config {{d}}/regex.yaml", ("regex.yaml:1: key 'token_pattern'", "has 2 groups")),
    ("serve retriever --index {d}/idx --default_topk 500 --max_topk 10", ("default_topk (500) is over max_topk (10)",)),
    ("annotate paraphrase --qa_path {d}/qa.jsonl --output_dir {o} --min_ratio 3 --max_ratio 2", ("min_ratio (3) is over max_ratio (2)",)),
    ("data pool --qa_path {d}/qa.jsonl --output {d}/emptydir", ("flag '--output': {d}/emptydir is a folder",)),
    ("data pool --qa_path {d}/qa.jsonl --output {d}/qa.jsonl/pool.jsonl", ("{d}/qa.jsonl is a file, not a folder",)),
    ("data pool --qa_path {d}/qa.jsonl --config {d}/pool_out.yaml", ("pool_out.yaml:1: key 'output'", "inside {d}/sftrun, the run folder of `sft`")),
    ("data pool --qa_path {d}/qa.jsonl --output {d}/sftrun/metrics.jsonl", ("flag '--output'", "inside {d}/sftrun, the run folder of `sft`")),
    ("data filter-closed-book --qa_path {d}/qa.jsonl --output {d}/sftrun/metrics.jsonl", ("flag '--output'", "inside {d}/sftrun, the run folder of `sft`")),
    ("data agent-warmstart --dataset {d}/qa.jsonl --index {d}/idx --output {d}/sftrun/eval/warm.jsonl", ("flag '--output'", "inside {d}/sftrun, the run folder of `sft`")),
    ("data agent-warmstart --dataset {d}/qa.jsonl --index {d}/idx --output {d}/emptydir", ("flag '--output': {d}/emptydir is a folder",)),
    ("data synth-world --output_dir {o}/w --num_questions 0", ("flag '--num_questions': must be >= 1",)),
    ("data synth-world --output_dir {o}/w --config {d}/world.yaml", ("world.yaml:1: key 'two_hop_fraction': must be in [0, 1]",)),
    ("data show --path {d}/qa.jsonl --num_records -1", ("flag '--num_records': must be >= 0",)),
    (f"{FILTER} --samples 0", ("flag '--samples': must be >= 1",)),
    (f"{WARMSTART} --max_questions 0", ("flag '--max_questions': must be >= 1",)),
    (f"{AGENT} --batch_size 0", ("flag '--batch_size': must be >= 1",)),
    (f"{AGENT} --reranker_backend extractive --reranker_serve true", ("reranker_serve: the extractive reranker is no model",)),
    (f"{AGENT} --reranker_backend oracle", ("--reranker_backend", "invalid choice: 'oracle'", "'extractive'")),
    (f"{TTS} --samples 0", ("flag '--samples': must be >= 1",)),
    ("quickstart --grpo_steps 0", ("flag '--grpo_steps': must be >= 1",)),
    ("quickstart --rag_questions -1", ("flag '--rag_questions': must be >= 1",)),
    ("demo --batch_size 0", ("flag '--batch_size': must be >= 1",)),
    (f"{CROSS} --batch_size 0", ("flag '--batch_size': must be >= 1",)),
    ("models chat --prompt hi --max_new_tokens 0", ("flag '--max_new_tokens': must be >= 1",)),
    # a model argument that names no model: what was looked for, where it was set
    (f"{VERBAL} --model {{d}}/no-such-model", ("flag '--model'", *NO_MODEL)),
    (f"{RAG} --model {{d}}/no-such-model", ("flag '--model'", *NO_MODEL)),
    (f"{RAG} --methods verbal --reranker_model {{d}}/no-such-model", ("flag '--reranker_model'", *NO_MODEL)),
    (f"{RAG} --config {{d}}/model.yaml", ("model.yaml:2: key 'model'", *NO_MODEL)),
    (f"{SFT} --dataset {{d}}/rows.jsonl --model_name_or_path {{d}}/no-such-model", ("flag '--model_name_or_path'", *NO_MODEL)),
    (f"{SFT} --dataset {{d}}/rows.jsonl --model_name_or_path {{d}}/emptydir", ("emptydir holds none of config.json",)),
    (f"{SFT} --dataset {{d}}/rows.jsonl --model_name_or_path {{d}}/runs/sft/finall", ("runs/sft holds: final?",)),
    (f"{SFT} --dataset {{d}}/rows.jsonl --model_name_or_path {{d}}/rows.jsonl", ("rows.jsonl is a file, not a model folder",)),
    (f"{SFT} --dataset {{d}}/rows.jsonl --task qream --reader_model {{d}}/no-such-model", ("flag '--reader_model'", *NO_MODEL)),
    (f"{GRPO} --dataset {{d}}/qa.jsonl --model_name_or_path {{d}}/no-such-model", ("flag '--model_name_or_path'", *NO_MODEL)),
    (f"{REWRITE} --model {{d}}/no-such-model", ("flag '--model'", *NO_MODEL)),
    (f"{QREAM} --reader_model {{d}}/no-such-model", ("flag '--reader_model'", *NO_MODEL)),
    (f"{AGENT} --model {{d}}/no-such-model", ("flag '--model'", *NO_MODEL)),
    (f"{FILTER} --model {{d}}/no-such-model", ("flag '--model'", *NO_MODEL)),
    (f"{CROSS} --base_model {{d}}/no-such-model", ("flag '--base_model'", *NO_MODEL)),
    (f"{INDEX} --kind dense --encoder {{d}}/no-such-model", ("flag '--encoder'", *NO_MODEL)),
    ("models chat --prompt hi --model {d}/no-such-model", ("flag '--model'", *NO_MODEL)),
    ("serve llm --model {d}/no-such-model --dry_run", ("flag '--model'", *NO_MODEL)),
    ("demo --model {d}/no-such-model", ("flag '--model'", *NO_MODEL)),
    # datasets: missing, malformed, empty, not UTF-8, rows without the columns, of two types
    (f"{SFT} --dataset {{d}}/nope.jsonl", ("dataset {d}/nope.jsonl: no such file or folder",)),
    (f"{SFT} --dataset {{d}}/malformed.jsonl", ("malformed.jsonl:2: invalid JSON",)),
    (f"{SFT} --dataset {{d}}/empty.jsonl", ("empty.jsonl: empty file",)),
    (f"{SFT} --dataset {{d}}/latin1.jsonl", ("latin1.jsonl:2: not valid UTF-8",)),
    (f"{SFT} --dataset {{d}}/nocompletion.jsonl", ("nocompletion.jsonl:2: missing column(s) ['completion']",)),
    (f"{SFT} --dataset {{d}}/mixed.jsonl", ("mixed.jsonl:2: 'prompt' is a list here but text on line 1",)),
    (f"{SFT} --dataset {{d}}/array.json", ("array.json:1: expected a JSON object per row, got int",)),
    (f"{SFT} --dataset {{d}}/emptydir", ("emptydir: a folder, but not a saved Dataset",)),
    (f"{SFT} --dataset {{d}}/rows.csv", ("rows.csv: neither a DatasetDict folder nor a .jsonl/.json file",)),
    ("eval rag --qa_path {d}/nope.jsonl --output_dir {o}", ("no such data file: {d}/nope.jsonl",)),
    ("eval rag --qa_path {d}/empty.jsonl --output_dir {o}", ("empty.jsonl: empty file",)),
    ("annotate verbal --qa_path {d}/nope.jsonl --output_dir {o}", ("no such data file: {d}/nope.jsonl",)),
    ("annotate verbal --qa_path {d}/malformed_qa.jsonl --output_dir {o}", ("malformed_qa.jsonl:2: invalid JSON",)),
    ("rewrite --qa_path {d}/nope.jsonl --output_dir {o} --seed_qa_path {d}/qa.jsonl", ("no such data file: {d}/nope.jsonl",)),
    (f"{GRPO} --dataset {{d}}/nope.jsonl", ("no such data file: {d}/nope.jsonl",)),
    ("index build --corpus {d}/nope.jsonl --output {o}/index", ("no such data file: {d}/nope.jsonl",)),
    ("data show --path {d}/latin1_qa.jsonl", ("latin1_qa.jsonl:2: not valid UTF-8",)),
    ("data pool --qa_path {d}/nope.jsonl --output {o}/pool.jsonl", ("no such data file: {d}/nope.jsonl",)),
]  # fmt: skip

# a model folder that is there but does not open (random bytes for weights, no weights, a config.json of {}),
# for every model argument of the commands that load one; a release whose weights are random bytes; rewrite
# with an index folder that holds no index (before any seed document is generated)
BAD_MODEL_FOLDERS = {"corrupt": "corrupt/model.safetensors: not a safetensors file",
                     "noweights": "noweights: config.json but no weights",
                     "emptyconfig": "emptyconfig/config.json: no 'model_type'"}  # fmt: skip
MODEL_ARGS = (f"{VERBAL} --model", f"{QREAM} --model", f"{RAG} --model", f"{REWRITE} --model",
              f"{SFT} --dataset {{d}}/rows.jsonl --model_name_or_path", f"{INDEX} --kind dense --encoder")  # fmt: skip
CASES += [
    (f"{arg} {{d}}/models/{name}", (f"flag '{arg.split()[-1]}': model '{{d}}/models/{name}'", f"{{d}}/models/{text}"))
    for arg in MODEL_ARGS for name, text in BAD_MODEL_FOLDERS.items()
]  # fmt: skip
CASES += [
    ("export --run {d}/badrun --out {o}/release", ("{d}/badrun/final/model.safetensors: not a safetensors file",)),
    (f"{REWRITE} --seed_qa_path {{d}}/qa.jsonl --index {{d}}/emptydir",
     ("flag '--index': {d}/emptydir/index.json: missing", "not an index built by `r3forge index build`")),
]  # fmt: skip

QA = {"_id": "q1", "question": "Who wrote Hamlet?", "answer": "Shakespeare", "type": "bridge", "level": "easy",
      "context": [["Hamlet", ["Hamlet is a play by William Shakespeare.", "It is set in Denmark."]],
                  ["Macbeth", ["Macbeth is a tragedy."]]],
      "supporting_facts": [["Hamlet", 0]]}  # fmt: skip
ROW = {
    "prompt": [{"role": "user", "content": "Is it?"}],
    "completion": [{"role": "assistant", "content": "Yes."}],
}
FILES = {
    "typo.yaml": "# a typo on line 2\nmax_question: 3\n",
    "typo_sft.yaml": "learning_rat: 1e-5\n",
    "wrongtype.yaml": "max_questions: many\n",
    "wrongtype_qs.yaml": "grpo_steps: three\n",
    "bad.yaml": "seed: 1\nbatch_size: 4\n  indented: 1\n",
    "list.yaml": "- qa_path\n- x.jsonl\n",
    "map_list.yaml": "top_m: {a: 1}\n",
    "map_int.yaml": "batch_size:\n  a: 1\n",
    "dup.yaml": "batch_size: 4\nbatch_size: 8\n",
    "zero_batch.yaml": "max_questions: 10\nbatch_size: 0\n",
    "frac.yaml": "validation_fraction: 1.5\n",
    "sft_batch.yaml": "per_device_train_batch_size: 0\n",
    "world.yaml": "two_hop_fraction: 1.5\n",
    "model.yaml": "max_questions: 10\nmodel: {d}/no-such-model\n",
    "qa.jsonl": json.dumps(QA) + "\n",
    "malformed_qa.jsonl": json.dumps(QA) + '\n{"id": "q2", "question": \n',
    "corpus.jsonl": json.dumps({"id": "p1", "contents": '"Hamlet"\nA play.'}) + "\n",
    "rows.jsonl": json.dumps(ROW) + "\n",
    "rows.csv": "prompt,completion\na,b\n",
    "malformed.jsonl": json.dumps(ROW) + '\n{"prompt": [\n',
    "empty.jsonl": "",
    "nocompletion.jsonl": json.dumps(ROW) + "\n" + json.dumps({"prompt": "only a prompt"}) + "\n",
    "mixed.jsonl": json.dumps({"prompt": "text", "completion": "c"}) + "\n" + json.dumps(ROW) + "\n",
    "array.json": "[1, 2]\n",
    "runs/sft/final/config.json": "{}\n",
    "models/corrupt/config.json": '{"model_type": "llama"}\n',
    "models/corrupt/tokenizer_config.json": "{}\n",
    "models/noweights/config.json": '{"model_type": "llama"}\n',
    "models/noweights/tokenizer_config.json": "{}\n",
    "models/emptyconfig/config.json": "{}\n",
    "badrun/run.json": json.dumps(
        {"recipe": "sft", "task": "verbal", "base_model": "smollm2-135m-instruct", "lora": False}
    ),
    "badrun/config.yaml": "learning_rate: 2.0e-5\n",
    "badrun/final_metrics.json": "{}\n",
    "badrun/final/config.json": '{"model_type": "llama"}\n',
    "badrun/final/tokenizer_config.json": json.dumps({"chat_template": "{{ messages }}"}),
    "regex.yaml": "token_pattern: '(\\w)(\\w)'\n",
    "pool_out.yaml": "output: {d}/sftrun/metrics.jsonl\n",
    "sftrun/owner.json": json.dumps({"format": "r3forge.owner/1", "kind": "sft", "settings": {}}) + "\n",
    "sftrun/metrics.jsonl": '{"loss": 1.0}\n',
}


@pytest.fixture(scope="module")
def d(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bad")
    for name, text in FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text.replace("{d}", str(root)), encoding="utf-8")
    (root / "latin1.jsonl").write_bytes(
        json.dumps(ROW).encode() + b'\n{"prompt": "caf\xe9", "completion": "x"}\n'
    )
    (root / "latin1_qa.jsonl").write_bytes(json.dumps(QA).encode() + b'\n{"question": "caf\xe9"}\n')
    (root / "latin1.yaml").write_bytes(b"batch_size: 4\nmodel: caf\xe9\n")
    (root / "emptydir").mkdir()
    for name in ("models/corrupt/model.safetensors", "badrun/final/model.safetensors"):
        (root / name).write_bytes(random.Random(0).randbytes(2048))  # 2 KB of random bytes
    (root / "idx").mkdir()
    return root


def test_at_least_51_cases_over_every_command_that_takes_a_config():
    commands = {
        " ".join(itertools.takewhile(lambda w: not w.startswith("--"), argv.split())) for argv, _ in CASES
    }
    assert len(CASES) >= 51
    assert {"annotate verbal", "annotate qream", "annotate rules", "eval rag", "sft", "grpo", "rewrite",
            "index build", "serve retriever", "data synth-world", "quickstart"} <= commands  # fmt: skip


@pytest.mark.parametrize(("argv", "expected"), CASES, ids=[f"{i:03d}" for i in range(len(CASES))])
def test_bad_input_is_one_line_naming_where(
    argv: str, expected: tuple[str, ...], d: Path, tmp_path: Path, capsys
) -> None:
    """{o}: an output folder of the case's own."""
    args = shlex.split(argv.replace("{d}", str(d)).replace("{o}", str(tmp_path / "out")))
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    line = err.strip().splitlines()[-1]
    assert line.startswith(f"r3forge {args[0]}"), err
    for text in expected:
        assert text.replace("{d}", str(d)) in line, line


def test_rewrite_checks_its_index_before_generating(d: Path, tmp_path: Path, capsys) -> None:
    """An index folder that holds no index fails before the rewriter loads: no seeds/ (nor any output)."""
    out = tmp_path / "out"
    argv = f"{REWRITE} --seed_qa_path {{d}}/qa.jsonl --index {{d}}/emptydir"
    assert main(shlex.split(argv.replace("{d}", str(d)).replace("{o}", str(out)))) == 1
    assert "index.json: missing" in capsys.readouterr().err
    assert not (out / "seeds").exists() and not out.exists()
