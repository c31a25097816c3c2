"""Train a cross-encoder reranker from the embedded MiniLM on HotpotQA-format gold labels.

    r3forge train-cross-encoder --qa_path ../shared/data/hotpotqa/rpt_distractor_dev_sample_train.jsonl \\
        --output_dir runs/rerank/cross_minilm_hotpotqa \\
        --eval_path ../shared/data/hotpotqa/rpt_distractor_dev_sample_dev.jsonl

Every (question, own passage) pair of the QA records is one example, label 1 for a gold passage
(relevance > 0) and 0 otherwise; a one-logit head on the encoder learns them with binary cross-entropy
(sentence-transformers' `CrossEncoderTrainer`). The output folder loads with `CrossEncoder(path)` /
`CrossEncoderReranker`; `train_info.json` next to the weights records the settings, data counts, final
training loss and, with `eval_path`, NDCG@k / Recall@k of gold passages before (the records' own passage
order) and after reranking.
"""

from __future__ import annotations

import json
import random
import shutil
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import datasets
from sentence_transformers import CrossEncoder
from sentence_transformers.cross_encoder import CrossEncoderTrainer, CrossEncoderTrainingArguments
from sentence_transformers.cross_encoder.losses import BinaryCrossEntropyLoss
from transformers import set_seed

from r3forge.config import parse_config
from r3forge.data.loaders import load_qa
from r3forge.errors import ConfigError
from r3forge.metrics.ranking import ndcg_batch, recall_batch
from r3forge.models import check_models, resolve_model
from r3forge.rerank.base import Reranker, RetrieverOrder, order, passage, to_candidates
from r3forge.rerank.encoders import CrossEncoderConfig, CrossEncoderReranker
from r3forge.runfolder import claim_command, record_owner

INFO_FILE = "train_info.json"


@dataclass
class TrainCrossEncoderConfig:
    qa_path: str = field(metadata={"help": "QA records with graded passages (e.g. HotpotQA distractor)."})
    output_dir: str = field(metadata={"help": "Folder for the trained cross-encoder (CrossEncoder(path))."})
    base_model: str = field(
        default="all-minilm-l6-v2",
        metadata={"help": "Encoder to start from: embedded short name, local folder or Hub id.", "model": ()},
    )
    max_questions: int | None = field(
        default=None, metadata={"help": "Use only the first N questions of qa_path (default: all)."}
    )
    epochs: float = field(default=1.0, metadata={"help": "Passes over the (question, passage) pairs."})
    negatives_per_question: int | None = field(
        default=None,
        metadata={"help": "Keep this many non-gold passages per question, drawn with `seed` (default: all)."},
    )
    max_steps: int = field(default=-1, metadata={"help": "Stop after this many steps (-1: run all epochs)."})
    batch_size: int = field(default=16, metadata={"help": "Pairs per training step."})
    lr: float = field(
        default=5e-5,
        metadata={"help": "Peak learning rate (warmup over the first tenth, then linear decay)."},
    )
    seed: int = field(default=0, metadata={"help": "Seed of the head's initialization and shuffling."})
    max_length: int = field(default=256, metadata={"help": "Truncate each pair to this many tokens."})
    eval_path: str | None = field(
        default=None, metadata={"help": "Held-out QA records: gold-passage ranking metrics after training."}
    )
    eval_questions: int = field(default=50, metadata={"help": "First N questions of eval_path to score."})
    eval_k: int = field(default=2, metadata={"help": "Cut-off k of the NDCG@k / Recall@k evaluation."})
    overwrite: bool = field(
        default=False, metadata={"help": "Move an existing output folder aside to <folder>.replaced-<time>."}
    )

    def __post_init__(self) -> None:
        if self.negatives_per_question is not None and self.negatives_per_question < 0:
            raise ConfigError(f"negatives_per_question must be >= 0, got {self.negatives_per_question}")
        for name in ("batch_size", "max_length", "eval_questions", "eval_k"):
            if getattr(self, name) < 1:
                raise ConfigError(f"TrainCrossEncoderConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.epochs <= 0 and self.max_steps <= 0:
            raise ConfigError("TrainCrossEncoderConfig: need epochs > 0 or max_steps > 0")
        if self.lr <= 0:
            raise ConfigError(f"TrainCrossEncoderConfig.lr must be > 0, got {self.lr}")


def pair_dataset(
    records: Iterable[dict[str, Any]], negatives: int | None = None, seed: int = 0
) -> datasets.Dataset:
    """Columns question, passage, label (1.0 gold, 0.0 not); records without a gold passage are skipped.
    With `negatives`, each question keeps all its gold passages and that many others drawn at random.

    >>> rec = {"question": "Who?", "passages": [{"id": "a", "title": "A", "text": "x", "relevance": 2},
    ...                                         {"id": "b", "title": "", "text": "y", "relevance": 0}]}
    >>> list(pair_dataset([rec])["label"])
    [1.0, 0.0]
    """
    rng = random.Random(seed)
    rows: dict[str, list] = {"question": [], "passage": [], "label": []}
    for record in records:
        candidates = to_candidates(record["passages"])
        if not any(c.relevance > 0 for c in candidates):
            continue
        if negatives is not None:
            others = [i for i, c in enumerate(candidates) if c.relevance <= 0]
            drop = set(others) - set(rng.sample(others, min(negatives, len(others))))
            candidates = [c for i, c in enumerate(candidates) if i not in drop]
        for c in candidates:
            rows["question"].append(record["question"])
            rows["passage"].append(passage(c))
            rows["label"].append(float(c.relevance > 0))
    return datasets.Dataset.from_dict(rows)


def gold_ranking_metrics(
    reranker: Reranker, records: Sequence[dict[str, Any]], k: int = 2, batch_questions: int = 16
) -> dict[str, float]:
    """Mean NDCG@k (linear gain on graded relevance) and Recall@k of the records' gold passages after
    `reranker` orders each record's own passages."""
    rankings, qrels = [], []
    for start in range(0, len(records), batch_questions):
        chunk = records[start : start + batch_questions]
        candidates = [to_candidates(r["passages"]) for r in chunk]
        outs = reranker.rerank([r["question"] for r in chunk], candidates)
        for cands, out in zip(candidates, outs, strict=True):
            rankings.append([cands[i].id for i in order(out)])
            qrels.append({c.id: max(c.relevance, 0) for c in cands})
    if not rankings:
        raise ValueError("gold_ranking_metrics: no records to evaluate")
    return {
        f"ndcg@{k}": float(ndcg_batch(rankings, qrels, k).mean()),
        f"recall@{k}": float(recall_batch(rankings, qrels, k).mean()),
        "questions": len(rankings),
    }


def _prepare_output(output_dir: Path, overwrite: bool) -> None:
    if output_dir.is_file() or (output_dir.is_dir() and any(output_dir.iterdir())):
        if not overwrite:
            raise ConfigError(
                f"output_dir {output_dir} is not empty; pass --overwrite true or choose another"
            )
        if not (output_dir / INFO_FILE).is_file():
            raise ConfigError(f"output_dir {output_dir} holds something else than a trained cross-encoder")
        shutil.rmtree(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)


def main(config: TrainCrossEncoderConfig) -> dict[str, Any]:
    """Train, save the model to `output_dir`, write `train_info.json`; returns that info."""
    out = Path(config.output_dir)
    records = load_qa(config.qa_path)
    if config.max_questions is not None:
        records = records.select(range(min(config.max_questions, len(records))))
    data = pair_dataset(records, config.negatives_per_question, config.seed)
    if len(data) == 0:
        raise ConfigError(f"qa_path {config.qa_path}: no record has a gold passage (relevance > 0) to learn")
    _prepare_output(out, config.overwrite)
    set_seed(config.seed)
    started = time.time()
    model = CrossEncoder(resolve_model(config.base_model), num_labels=1, max_length=config.max_length)
    args = CrossEncoderTrainingArguments(
        output_dir=str(out / "trainer"),
        num_train_epochs=config.epochs,
        max_steps=config.max_steps,
        per_device_train_batch_size=config.batch_size,
        learning_rate=config.lr,
        warmup_steps=0.1,  # a float: a share of the steps (transformers 5)
        dataloader_pin_memory=False,
        seed=config.seed,
        save_strategy="no",
        logging_steps=10,
        report_to="none",
        disable_tqdm=True,
    )
    trainer = CrossEncoderTrainer(
        model=model, args=args, train_dataset=data, loss=BinaryCrossEntropyLoss(model)
    )
    result = trainer.train()
    model.save_pretrained(str(out))
    shutil.rmtree(out / "trainer", ignore_errors=True)
    info: dict[str, Any] = {
        "config": asdict(config),
        "questions": len(records),
        "pairs": len(data),
        "positives": int(sum(data["label"])),
        "steps": result.global_step,
        "train_loss": result.training_loss,
        "train_seconds": round(time.time() - started, 1),
        "log_history": trainer.state.log_history,
    }
    if config.eval_path:
        held_ds = load_qa(config.eval_path).select_columns(["question", "passages"])
        held = list(held_ds.select(range(min(config.eval_questions, len(held_ds)))))
        reranker = CrossEncoderReranker(model, CrossEncoderConfig(model=str(out)))
        info["eval"] = {
            "retriever_order": gold_ranking_metrics(RetrieverOrder(), held, config.eval_k),
            "cross_encoder": gold_ranking_metrics(reranker, held, config.eval_k),
        }
    (out / INFO_FILE).write_text(json.dumps(info, indent=1, default=str) + "\n", encoding="utf-8")
    return info


def cli(argv: list[str] | None = None) -> int:
    (config,) = parse_config(
        (TrainCrossEncoderConfig,), sys.argv[1:] if argv is None else argv, prog="r3forge train-cross-encoder"
    )
    check_models(config)
    kind = "train-cross-encoder"
    wanted = claim_command(kind, config.output_dir, [config], config.overwrite, (INFO_FILE,), write=False)
    info = main(config)
    record_owner(config.output_dir, kind, wanted)
    summary = {
        k: info[k] for k in ("questions", "pairs", "positives", "steps", "train_loss", "train_seconds")
    }
    print(json.dumps({**summary, "eval": info.get("eval"), "output_dir": config.output_dir}, indent=1))
    return 0
