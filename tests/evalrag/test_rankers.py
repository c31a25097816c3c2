"""What each method's saved scores are keyed on: a change of its own model re-scores it, nothing else does."""

from __future__ import annotations

from r3forge.backends.open import LLM
from r3forge.evalrag.config import EvalRagConfig, RerankModelsConfig
from r3forge.evalrag.rankers import fingerprint

GENERATOR = LLM(backend=None, tokenizer=None, model_id="smollm2-135m-instruct")


def test_fingerprint_follows_each_methods_own_model():
    config = EvalRagConfig(qa_path="unused.jsonl")
    base = RerankModelsConfig()
    student = RerankModelsConfig(reranker_model="runs/release/verbal")
    asker = RerankModelsConfig(yesno_model="other-llm")
    # the verbal student changes verbal's key only; a YesNo model changes yesno's only
    assert fingerprint("verbal", config, student, GENERATOR) != fingerprint("verbal", config, base, GENERATOR)
    assert fingerprint("yesno", config, student, GENERATOR) == fingerprint("yesno", config, base, GENERATOR)
    assert fingerprint("yesno", config, asker, GENERATOR) != fingerprint("yesno", config, base, GENERATOR)
    # ig and igp share one set of probes; K changes it, M does not (set-aware depends on the largest M)
    assert fingerprint("ig", config, base, GENERATOR) == fingerprint("igp", config, base, GENERATOR)
    wider = EvalRagConfig(qa_path="unused.jsonl", probe_k=20)
    assert fingerprint("igp", wider, base, GENERATOR) != fingerprint("igp", config, base, GENERATOR)
    fewer = EvalRagConfig(qa_path="unused.jsonl", top_m=[1, 3])
    assert fingerprint("igp", fewer, base, GENERATOR) == fingerprint("igp", config, base, GENERATOR)
    assert fingerprint("igp_set", fewer, base, GENERATOR) != fingerprint("igp_set", config, base, GENERATOR)
    # the extractive stand-in loads no model: no model setting moves its key, and it is not `none`'s
    assert fingerprint("extractive", config, student, GENERATOR) == fingerprint(
        "extractive", config, base, GENERATOR
    )
    assert fingerprint("extractive", config, base, GENERATOR) != fingerprint("none", config, base, GENERATOR)
