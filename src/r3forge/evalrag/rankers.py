"""Each method's scores of every question's candidates, computed once and saved per question under
`rerank/<method>-<settings hash>.jsonl` (reused by any rerun whose settings and candidates match).

What a method saves per question ("scored"):
- rerankers (none, biencoder, cross_encoder, qlm, yesno, verbal): `scores`, `tiebreak`, `notes`;
- ig / igp (one set of probes, shared): `ig`, `nu_question`, `nu` (NU(q | d) per candidate), `scores` = ig;
- igp_set: the greedy picks with T_p = -inf up to the largest M, each round's gain, and round 0's `ig`.
Questions go to a method in chunks of `batch_size` (one progress bar step each); inside a chunk every
request is one batched backend call.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from r3forge.backends.open import LLM, LLMConfig, open_llm
from r3forge.errors import ConfigError
from r3forge.evalrag.config import EvalRagConfig, RerankModelsConfig
from r3forge.identity import model_identity
from r3forge.igp.probe import ProbeConfig, probe_gains
from r3forge.igp.select import SelectConfig
from r3forge.igp.setaware import greedy_select
from r3forge.rerank import (
    BiEncoderConfig,
    BiEncoderReranker,
    CrossEncoderConfig,
    CrossEncoderReranker,
    QLMConfig,
    QLMReranker,
    RetrieverOrder,
    VerbalConfig,
    VerbalReranker,
    YesNoReranker,
    passage,
)
from r3forge.rerank.extractive import EXTRACTIVE_VERSION, ExtractiveVerbalReranker

# methods that share one saved set of probes
PROBES = {"ig": "ig", "igp": "ig", "igp_set": "igp_set"}


def fingerprint(method: str, config: EvalRagConfig, models: RerankModelsConfig, generator: LLM) -> str:
    """What a method's scores depend on besides the candidates: its model and settings."""
    setting: dict[str, Any] = {"method": PROBES.get(method, method), "generator": generator.model_id}
    if method in PROBES:
        setting |= {"k": config.probe_k, "mt": config.probe_max_steps}
        if method == "igp_set":
            setting["max_m"] = max(config.top_m)
    elif method == "verbal":
        setting |= {
            "reranker": _identity(models.reranker_model, models),
            "max_tokens": models.reranker_max_tokens,
        }
        if models.reranker_rank_by != "score":  # saved scores of earlier runs keep their key
            setting["rank_by"] = models.reranker_rank_by
    elif method == "yesno":
        setting["reranker"] = _identity(models.yesno_model, models)
    elif method == "extractive":
        setting["rule"] = EXTRACTIVE_VERSION
    elif method != "none":
        setting["model"] = model_identity(
            {
                "biencoder": models.biencoder_model,
                "qlm": models.qlm_model,
                "cross_encoder": models.cross_encoder_model,
            }[method]
        )
    return hashlib.sha256(json.dumps(setting, sort_keys=True).encode("utf-8")).hexdigest()[:12]


def _identity(model: str, models: RerankModelsConfig) -> str:
    """A verbal / YesNo reranker's identity ("": the generator's, already in the fingerprint)."""
    return model_identity(model, served=models.reranker_backend == "openai") if model else ""


def candidates_sha(question: dict) -> str:
    """The identity of one question's candidates (question text, ids and texts, in order)."""
    blob = json.dumps(
        [question["question"], [[c.id, c.text] for c in question["candidates"]]], ensure_ascii=False
    )
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


def read_saved(path: Path) -> dict[str, dict]:
    """(question id, candidates sha) -> scored, from a scores file; a line cut by a kill is ignored."""
    saved = {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            saved[(row["id"], row["candidates_sha"])] = row["scored"]
    return saved


def score_method(
    method: str,
    questions: list[dict],
    config: EvalRagConfig,
    models: RerankModelsConfig,
    roles: tuple[LLMConfig, LLM],
    stack: ExitStack,
    nu_cache: dict,
) -> dict[str, dict]:
    """question id -> scored. Saved per question in `rerank/<method>-<settings hash>.jsonl` as each chunk
    finishes: a killed or extended run (more questions, new T_p or M) scores only what is missing.
    `roles`: the generator's config and the open generator; `nu_cache`: question -> NU(q), one dict per run,
    so IG and set-aware IGP probe each question's NU(q) once."""
    folder = Path(config.output_dir) / "rerank"
    folder.mkdir(parents=True, exist_ok=True)
    name = PROBES.get(method, method)
    _, generator = roles
    path = folder / f"{name}-{fingerprint(method, config, models, generator)}.jsonl"
    saved = read_saved(path)
    out = {q["id"]: saved[key] for q in questions if (key := (q["id"], candidates_sha(q))) in saved}
    todo = [q for q in questions if q["id"] not in out]
    if not todo:
        return out
    chunks = [todo[i : i + config.batch_size] for i in range(0, len(todo), config.batch_size)]
    compute = scorer(method, config, models, roles, stack, nu_cache)
    with open(path, "a", encoding="utf-8") as f:
        for chunk in tqdm(chunks, desc=f"score {name}", disable=not config.progress, file=sys.stderr):
            scored = compute(chunk)
            for q in chunk:
                row = {"id": q["id"], "candidates_sha": candidates_sha(q), "scored": scored[q["id"]]}
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
            f.flush()
            os.fsync(f.fileno())
            out |= scored
    return out


def reranker_llm(
    model: str, models: RerankModelsConfig, roles: tuple[LLMConfig, LLM], stack: ExitStack
) -> LLM:
    """The verbal / YesNo LLM (`model`: `reranker_model` or `yesno_model`): the generator itself unless the
    model or `reranker_backend` / `reranker_base_url` name another."""
    generator_cfg, generator = roles
    if not (model or models.reranker_backend or models.reranker_base_url):
        return generator
    cfg = LLMConfig(
        backend=models.reranker_backend or generator_cfg.backend,  # type: ignore[arg-type]
        model=model or generator_cfg.model,
        base_url=models.reranker_base_url or generator_cfg.base_url,
        device=generator_cfg.device,
    )
    return stack.enter_context(open_llm(cfg))


def scorer(
    method: str,
    config: EvalRagConfig,
    models: RerankModelsConfig,
    roles: tuple[LLMConfig, LLM],
    stack: ExitStack,
    nu_cache: dict,
) -> Any:
    """A function chunk -> {question id: scored} for `method`."""
    generator_cfg, generator = roles
    probe = ProbeConfig(k=config.probe_k, max_steps=config.probe_max_steps)
    if method in ("ig", "igp"):
        return lambda chunk: _ig(chunk, generator, probe, nu_cache)
    if method == "igp_set":
        select = SelectConfig(top_m=max(config.top_m))
        return lambda chunk: _greedy(chunk, generator, probe, select, nu_cache)
    if method == "none":
        reranker: Any = RetrieverOrder()
    elif method == "extractive":
        reranker = ExtractiveVerbalReranker()
    elif method == "biencoder":
        cfg = BiEncoderConfig(encoder=models.biencoder_model, device=generator_cfg.device, batch_size=64)
        reranker = BiEncoderReranker.from_config(cfg)
    elif method == "cross_encoder":
        if not models.cross_encoder_model:
            raise ConfigError(
                "methods: cross_encoder needs `cross_encoder_model` (a CrossEncoder checkpoint)"
            )
        cross = CrossEncoderConfig(model=models.cross_encoder_model, device=generator_cfg.device)
        reranker = CrossEncoderReranker.from_config(cross)
    elif method == "qlm":
        qlm = QLMConfig(model=models.qlm_model or generator_cfg.model, device=generator_cfg.device)
        reranker = QLMReranker.from_config(qlm)
    else:
        llm = reranker_llm(
            models.yesno_model if method == "yesno" else models.reranker_model, models, roles, stack
        )
        if method == "yesno":
            reranker = YesNoReranker(llm.backend, llm.tokenizer)
        else:
            verbal = VerbalConfig(max_tokens=models.reranker_max_tokens, rank_by=models.reranker_rank_by)
            reranker = VerbalReranker(llm.backend, llm.tokenizer, verbal)
    return lambda chunk: _rerank(chunk, reranker)


def _rerank(chunk: list[dict], reranker: Any) -> dict[str, dict]:
    outs = reranker.rerank([q["question"] for q in chunk], [q["candidates"] for q in chunk])
    return {
        q["id"]: {
            "scores": [_num(s) for s in o.scores],
            "tiebreak": None if o.tiebreak is None else [_num(t) for t in o.tiebreak],
            "notes": o.notes,
        }
        for q, o in zip(chunk, outs, strict=True)
    }


def _num(x: float | None) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


def _ig(chunk: list[dict], generator: LLM, probe: ProbeConfig, cache: dict) -> dict[str, dict]:
    docs = [[passage(c) for c in q["candidates"]] for q in chunk]
    gains = probe_gains(generator.backend, [q["question"] for q in chunk], docs, probe, cache)
    return {
        q["id"]: {
            "ig": g.ig,
            "scores": g.ig,
            "nu_question": g.question.nu,
            "nu": [c.nu for c in g.conditional],
        }
        for q, g in zip(chunk, gains, strict=True)
    }


def _greedy(
    chunk: list[dict], generator: LLM, probe: ProbeConfig, select: SelectConfig, cache: dict
) -> dict[str, dict]:
    docs = [[passage(c) for c in q["candidates"]] for q in chunk]
    sels = greedy_select(generator.backend, [q["question"] for q in chunk], docs, probe, select, cache)
    out = {}
    for q, s in zip(chunk, sels, strict=True):
        round0 = s.round_gains[0] if s.round_gains else {}
        out[q["id"]] = {
            "picks": list(s.indices),
            "gains": list(s.gains),
            "nu_question": s.nu_question,
            "ig": [round0.get(i, math.nan) for i in range(len(q["candidates"]))],
            "nu": list(s.nu),
            "probes": s.probes,
        }
    return out
