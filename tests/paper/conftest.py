"""The paper-config tier's shared pieces: the one override list, the command runner, the servers and the
small real inputs (see tests/paper/README.md).

- `OVERRIDES`: the only keys a paper YAML gets overridden here, by group; `override_flags` refuses any other
  key, so every other key of the YAML runs as written;
- `run_command`: a command line as a user types it (`r3forge ...`, `accelerate launch ...`) from the repository
  root, its output in a log file; a failure shows the log's tail;
- `llm_server`: a real `vllm serve` of the embedded model (or of a run folder of the chain) under the name and
  with the flags of a header's server command (`headers.served_model`), started once per session;
- `retriever_url`: a real `r3forge serve retriever` over the e5 config's index (`e5_index`), built with the
  embedded MiniLM over a small real corpus: WIKI_PASSAGES FlashRAG Wikipedia passages plus the paragraphs of
  the HotpotQA questions the tier retrieves for (`r3forge data pool`);
- `hotpot`: HotpotQA slices of ../shared/data in FlashRAG's dataset format (the paper configs' qa_path) and in
  their own format (for `data pool` and `annotate rules`).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from r3forge.annotate.rules import RulesConfig, rules_main
from r3forge.backends.vllm_server import ServeLLMConfig, VLLMServer, free_port
from r3forge.data.cli import PoolConfig, pool
from r3forge.retrieval import RetrieverClient

from .headers import ServedModel, flag, header_command, served_model

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent  # the virtualenv's console scripts: r3forge, accelerate

# The one fixed set of overrides of the tier. Any key not listed runs as the paper YAML writes it.
OVERRIDES: dict[str, tuple[str, ...]] = {
    # a Hub model -> the embedded SmolLM2 / MiniLM; a cluster run folder (runs/...) -> the tier's own run of
    # the upstream config (GRPO's policy: the embedded model after the CPU recipe's format warm start). A
    # served model keeps the YAML's `model` (the name the server serves).
    "model paths": (
        "model_name_or_path",
        "tokenizer",
        "reader_model",
        "reranker_tokenizer",
        "encoder",
        "model",
    ),
    "sizes": (
        "max_questions",
        "top_n",
        "max_steps",
        "per_device_train_batch_size",
        "gradient_accumulation_steps",
        "steps_per_generation",
        "task_eval_samples",
        "max_eval_samples",
        "max_train_samples",
    ),
    "precision and device": ("bf16", "use_cpu", "use_vllm", "device"),
    "servers: loopback and free ports": ("base_url", "reader_base_url", "reranker_base_url", "retriever_url"),
    "data and output paths": (
        "qa_path",
        "dataset",
        "eval_dataset",
        "index",
        "corpus",
        "output",
        "output_dir",
        "input_dir",
        "judge_dir",
        "annotation_dir",
        "inputs",
        "runs",
        "run",
        "out",
    ),
}
OVERRIDE_KEYS = frozenset(key for keys in OVERRIDES.values() for key in keys)
CPU_TRAINING = {"bf16": "false", "use_cpu": "true"}  # the SFT / GRPO configs train in bf16 on GPUs
CPU_ACCELERATE = "configs/accelerate/cpu.yaml"  # for the headers' zero2 / zero3 (DeepSpeed on 4 GPUs)
MAX_SERVERS = 2  # vLLM servers alive at once (each holds its KV cache; the rewrite needs two)
# FlashRAG NQ in its dataset format (id, question, golden_answers): the NQ configs' qa_path
NQ_FLASHRAG = "flashrag/nq_test_toy.jsonl"
WIKI_PASSAGES = 50  # FlashRAG Wikipedia passages (flashrag/sample_data.jsonl) in the tier's corpus


# the tier's files in chain order (upstream runs first; a vLLM server is reused by the next test that asks
# for the same header command before MAX_SERVERS newer ones stop it)
CHAIN = ("test_headers", "test_retrieval_e5", "test_annotate_verbal_nq", "test_eval_igp", "test_annotate_qream",
         "test_sft_qream_ft", "test_rewrite_qream_ft", "test_sft_verbal_reranker", "test_grpo_agent")  # fmt: skip


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the tier's tests in CHAIN order, in the slots they were collected into (others stay put)."""
    here = Path(__file__).parent
    slots = [i for i, item in enumerate(items) if item.path.parent == here]
    rank = {name: n for n, name in enumerate(CHAIN)}
    ordered = sorted((items[i] for i in slots), key=lambda item: rank.get(item.path.stem, len(CHAIN)))
    for slot, item in zip(slots, ordered, strict=True):
        items[slot] = item


def override_flags(**overrides: object) -> list[str]:
    """`--key value` for each override; only OVERRIDE_KEYS are allowed (appended to a command line: the
    last value of a flag wins)."""
    unknown = sorted(set(overrides) - OVERRIDE_KEYS)
    assert not unknown, f"{unknown} are not in the tier's override list (tests/paper/conftest.py OVERRIDES)"
    argv: list[str] = []
    for key, value in overrides.items():
        argv += [f"--{key}", str(value).lower() if isinstance(value, bool) else str(value)]
    return argv


def paper_args(config: str, **overrides: object) -> list[str]:
    """`--config configs/<config>` and the `override_flags`."""
    return ["--config", f"configs/{config}", *override_flags(**overrides)]


def run_command(command: list[str], log: Path, timeout_s: float = 1800) -> str:
    """Run `command` (its first word a console script of the virtualenv) from the repository root; returns
    its output, which also goes to `log`. Fails with the log's tail on a non-zero exit."""
    log.parent.mkdir(parents=True, exist_ok=True)
    argv = [str(BIN / command[0]), *command[1:]]
    start = time.monotonic()
    with open(log, "w", encoding="utf-8") as out:
        out.write(f"$ {' '.join(command)}\n")
        out.flush()
        proc = subprocess.run(argv, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                              timeout=timeout_s, check=False)  # fmt: skip
    text = log.read_text(encoding="utf-8", errors="replace")
    tail = "\n".join(text.replace("\r", "\n").splitlines()[-40:])
    assert proc.returncode == 0, f"exit {proc.returncode}: {' '.join(command)}\nlog {log}:\n{tail}"
    print(f"[paper] {time.monotonic() - start:.0f}s: {' '.join(command)}", file=sys.stderr)
    return text


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def flashrag_row(record: dict) -> dict:
    """A HotpotQA record (HF distractor format) as a FlashRAG dataset row."""
    meta = {"type": record["type"], "level": record["level"]}
    return {
        "id": record["id"],
        "question": record["question"],
        "golden_answers": [record["answer"]],
        "metadata": meta,
    }


def named_answer(record: dict) -> bool:
    """A comparison question that names its (non yes/no) answer: a small reader that echoes the question's
    options contains the gold answer, so QREAM's hard filter can pass and the chain gets golden rewrites."""
    answer = record["answer"].lower()
    return (
        record["type"] == "comparison"
        and answer not in ("yes", "no")
        and answer in record["question"].lower()
    )


@pytest.fixture(scope="session")
def paper_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("paper")


@pytest.fixture(scope="session")
def hotpot(shared_data: Path, paper_root: Path) -> dict[str, Path]:
    """HotpotQA slices: `train` / `dev` (FlashRAG format; the first 6 of each name their answer, then 6 more
    questions: QREAM's stylistic seeds come from the rest of qa_path), `raw` (all 24 in the HF format) and
    `retrieved` (the 12 that the tier retrieves for, HF format: their paragraphs join the corpus)."""
    picked: dict[str, list[dict]] = {}
    for split, source in (("train", "train"), ("dev", "dev")):
        rows = [
            json.loads(line)
            for line in (shared_data / f"hotpotqa/rpt_distractor_dev_sample_{source}.jsonl").open()
        ]
        named = [r for r in rows if named_answer(r)][:6]
        picked[split] = named + [r for r in rows if r not in named][:6]
    out = paper_root / "data"
    files = {split: write_jsonl(out / f"hotpotqa_{split}.jsonl", [flashrag_row(r) for r in rows])
             for split, rows in picked.items()}  # fmt: skip
    files["raw"] = write_jsonl(out / "hotpotqa_raw.jsonl", picked["train"] + picked["dev"])
    files["retrieved"] = write_jsonl(
        out / "hotpotqa_retrieved.jsonl", picked["train"][:6] + picked["dev"][:6]
    )
    return files


@pytest.fixture(scope="session")
def paper_corpus(shared_data: Path, hotpot: dict[str, Path], paper_root: Path) -> list[Path]:
    """The tier's retrieval corpus: FlashRAG Wikipedia passages and the HotpotQA questions' own paragraphs."""
    out = paper_root / "corpus"
    with open(shared_data / "flashrag/sample_data.jsonl", encoding="utf-8") as f:
        wiki = [json.loads(next(f)) for _ in range(WIKI_PASSAGES)]
    pooled = out / "hotpotqa_paragraphs.jsonl"
    pool(PoolConfig(qa_path=str(hotpot["retrieved"]), output=str(pooled)))  # `r3forge data pool`
    return [write_jsonl(out / "wiki_sample.jsonl", wiki), pooled]


@pytest.fixture(scope="session")
def e5_index(paper_corpus: list[Path], paper_root: Path) -> tuple[Path, str]:
    """`r3forge index build --config configs/retrieval/e5_base_hnsw.yaml` over the tier's corpus with the
    embedded MiniLM on CPU: (index folder, the command's output)."""
    out = paper_root / "indexes" / "e5-base-hnsw"
    args = paper_args("retrieval/e5_base_hnsw.yaml", output=out, encoder="all-minilm-l6-v2", device="cpu")
    corpus = [str(p) for p in paper_corpus]
    log = run_command(["r3forge", "index", "build", *args[:2], "--corpus", *corpus, *args[2:]],
                      paper_root / "logs" / "index-e5.log")  # fmt: skip
    return out, log


@pytest.fixture(scope="session")
def retriever_url(e5_index: tuple[Path, str], paper_root: Path) -> Iterator[str]:
    """`r3forge serve retriever --index <e5 index> --port <free>` (the paper headers' retriever server)."""
    port = free_port()
    log = open(paper_root / "logs" / "retriever.log", "w", encoding="utf-8")  # noqa: SIM115
    cmd = [str(BIN / "r3forge"), "serve", "retriever", "--index", str(e5_index[0]), "--port", str(port)]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        with RetrieverClient(url, timeout=5, max_retries=40, backoff=0.5, max_backoff=2) as client:
            assert client.health()["count"] > WIKI_PASSAGES
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


@pytest.fixture(scope="session")
def llm_server(paper_root: Path) -> Iterator[Callable[[ServedModel], VLLMServer]]:
    """`llm_server(spec)`: a started `vllm serve` of `spec` (same spec: the same server); at most MAX_SERVERS
    run at once, the least recently asked for is stopped first."""
    live: OrderedDict[ServedModel, VLLMServer] = OrderedDict()

    def get(spec: ServedModel) -> VLLMServer:
        if spec in live:
            live.move_to_end(spec)
            return live[spec]
        while len(live) >= MAX_SERVERS:
            live.popitem(last=False)[1].stop()
        slug = "".join(c if c.isalnum() else "-" for c in spec.name)[-60:]
        config = ServeLLMConfig(model=spec.model, served_model_name=spec.name, port=0, max_logprobs=spec.max_logprobs,
                                max_model_len=spec.max_model_len, cpu_kvcache_gib=2,
                                log_file=str(paper_root / "logs" / f"vllm-{slug}.log"))  # fmt: skip
        live[spec] = VLLMServer(config, spec.extra).start()
        return live[spec]

    yield get
    for server in live.values():
        server.stop()


@pytest.fixture(scope="session")
def verbal_sft_data(hotpot: dict[str, Path], paper_root: Path) -> Path:
    """The verbal reranker's SFT set: `r3forge annotate rules` over HotpotQA (the teacher's prompt and format,
    scores from the gold supporting facts). The chain's own set (annotate verbal -> export-sft) is empty with
    the embedded teacher: without few-shot demos the 135M model never writes the `Comment:` line."""
    out = paper_root / "annotate" / "rules_hotpotqa_sft"
    rules_main(RulesConfig(qa_path=str(hotpot["raw"]), output_dir=str(out)))  # `r3forge annotate rules`
    return out


@pytest.fixture(scope="session")
def sft_run(verbal_sft_data: Path, smollm2_path: Path, paper_root: Path) -> Callable[[str], tuple[Path, str]]:
    """`sft_run(config)`: the verbal reranker SFT of `configs/sft/<config>` (once per config): the header's
    `accelerate launch ... -m r3forge.sft` on one CPU process (configs/accelerate/cpu.yaml), 2 optimizer
    steps of per-device 4 x grad-accum 1; (run folder, the command's output)."""
    done: dict[str, tuple[Path, str]] = {}

    def get(config: str) -> tuple[Path, str]:
        if config not in done:
            out = paper_root / "sft" / Path(config).stem
            args = paper_args(f"sft/{config}", dataset=verbal_sft_data, model_name_or_path=smollm2_path,
                              output_dir=out, max_steps=2, gradient_accumulation_steps=1, task_eval_samples=4,
                              max_eval_samples=4, **CPU_TRAINING)  # fmt: skip
            launch = header_command(f"sft/{config}", "accelerate", "launch")
            launch = [CPU_ACCELERATE if token == flag(launch, "--config_file") else token for token in launch]
            done[config] = (
                out,
                run_command([*launch, *args[2:]], paper_root / "logs" / f"sft-{Path(config).stem}.log"),
            )
        return done[config]

    return get


@pytest.fixture(scope="session")
def qream_run(hotpot, retriever_url, llm_server, smollm2_path, paper_root) -> tuple[Path, str]:
    """`r3forge annotate qream --config configs/annotate/qream_llama3_8b.yaml` (its header's command) on 6
    HotpotQA train questions, r_raw from the tier's retriever, rewriter = reader = fact judge: the header's
    `launch/serve_vllm.sh meta-llama/Meta-Llama-3-8B-Instruct --max-model-len 8192`; (run folder, output)."""
    config = "annotate/qream_llama3_8b.yaml"
    server = llm_server(served_model(header_command(config, "launch/serve_vllm.sh"), str(smollm2_path)))
    out = paper_root / "annotate" / "qream_hotpotqa_llama3_8b"
    cmd = header_command(config, "r3forge", "annotate", "qream")
    cmd += override_flags(qa_path=hotpot["train"], max_questions=6, retriever_url=retriever_url,
                          base_url=server.base_url, tokenizer=smollm2_path, output_dir=out)  # fmt: skip
    return out, run_command([*cmd, "--progress", "false"], paper_root / "logs" / "annotate-qream.log", 2400)


@pytest.fixture(scope="session")
def qream_sft_run(qream_run, smollm2_path, paper_root) -> tuple[Path, str]:
    """The QREAM-FT student: the header's `accelerate launch -m r3forge.sft` of
    configs/sft/qream_ft_llama3.2-1b.yaml on one CPU process over the QREAM run's sft/ (2 steps)."""
    config = "sft/qream_ft_llama3.2-1b.yaml"
    data, out = qream_run[0] / "sft", paper_root / "sft" / "qream_llama32_1b"
    launch = header_command(config, "accelerate", "launch")
    launch = [CPU_ACCELERATE if token == flag(launch, "--config_file") else token for token in launch]
    launch += override_flags(dataset=data, model_name_or_path=smollm2_path, reader_model=smollm2_path,
                             output_dir=out, max_steps=2, gradient_accumulation_steps=1, task_eval_samples=2,
                             max_eval_samples=2, **CPU_TRAINING)  # fmt: skip
    if not (data / "validation").is_dir():  # too few golden questions for a held-out one: eval on train
        launch += override_flags(eval_dataset=data / "train.jsonl")
    return out, run_command(launch, paper_root / "logs" / "sft-qream.log", 2400)
