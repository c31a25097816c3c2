"""Language-model rerankers: query likelihood (UPR) and a Yes/No relevance judgment.

* `QLMReranker`: log p(question | passage) under a causal LM (UPR, Sachan et al. 2022): the user turn asks
  for a question about the passage, the assistant turn is the question; the score is the mean log-prob of
  the question's tokens (the sum is kept in `extra`). One forward pass per batch of (question, passage)
  pairs, left-padded, with logits computed only at the question positions.
* `YesNoReranker`: any `GenerationBackend` answers "does the document help answer the question? Yes or No"
  with one greedy token and its top-k logprobs; the score is P(yes), summed over the top-k tokens that read
  "yes" (" Yes", "yes", ...).

    qlm = QLMReranker.from_config(QLMConfig())                           # embedded SmolLM2-135M-Instruct
    yes_no = YesNoReranker(HFLocalBackend.from_config(HFLocalConfig()), tokenizer)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import PreTrainedModel

from r3forge.backends.base import GenerationBackend, GenerationRequest, token_decoder
from r3forge.backends.hf_local import load_causal_lm
from r3forge.errors import ConfigError
from r3forge.rerank.base import Candidate, RerankOutput, check_inputs, flat_pairs, passage, split_flat

QLM_INSTRUCTION = "Passage: {passage}\nPlease write a question based on this passage."
YES_NO_PROMPT = (
    "Question: {question}\n\nDocument: {passage}\n\n"
    "Does the document help answer the question? Answer Yes or No."
)


@dataclass
class QLMConfig:
    model: str = field(
        default="smollm2-135m-instruct",
        metadata={"help": "Causal LM with a chat template: embedded short name, local folder or Hub id."},
    )
    dtype: str = field(default="float32", metadata={"help": "torch dtype: float32, bfloat16 or float16."})
    device: str = field(default="cpu", metadata={"help": "torch device, e.g. cpu or cuda:0."})
    batch_size: int = field(default=8, metadata={"help": "(question, passage) pairs per forward pass."})
    max_passage_tokens: int | None = field(
        default=384, metadata={"help": "Truncate each passage to this many tokens (None: no limit)."}
    )

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ConfigError(f"QLMConfig.batch_size must be >= 1, got {self.batch_size}")
        if self.max_passage_tokens is not None and self.max_passage_tokens < 1:
            raise ConfigError(f"QLMConfig.max_passage_tokens must be >= 1, got {self.max_passage_tokens}")


class QLMReranker:
    """Mean log p(question tokens | chat prompt with the passage) under a causal LM."""

    name = "qlm"

    def __init__(self, model: PreTrainedModel, tokenizer: Any, config: QLMConfig | None = None):
        self.model, self.tokenizer, self.config = model, tokenizer, config or QLMConfig()
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        if pad is None:
            raise ConfigError("QLMReranker: the tokenizer has neither a pad nor an eos token")
        self.pad_id: int = pad

    @classmethod
    def from_config(cls, config: QLMConfig) -> QLMReranker:
        model, tokenizer = load_causal_lm(config.model, config.dtype, config.device)
        return cls(model, tokenizer, config)

    def encode(self, question: str, candidate: Candidate) -> tuple[list[int], int]:
        """(prompt + question token ids, number of question tokens at the end)."""
        text = passage(candidate)
        limit = self.config.max_passage_tokens
        if limit is not None:
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
            text = self.tokenizer.decode(ids[:limit]) if len(ids) > limit else text
        messages = [{"role": "user", "content": QLM_INSTRUCTION.format(passage=text)}]
        prompt = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        prompt_ids = self.tokenizer(prompt, add_special_tokens=False)["input_ids"]
        question_ids = self.tokenizer(question, add_special_tokens=False)["input_ids"]
        if not question_ids:
            raise ValueError("QLMReranker.rerank: an empty question has no likelihood")
        return prompt_ids + question_ids, len(question_ids)

    @torch.inference_mode()
    def question_logprobs(self, rows: Sequence[tuple[list[int], int]]) -> list[list[float]]:
        """Per row (ids, q): the log-prob of each of its last q tokens given everything before ([q] each)."""
        width = max(len(ids) for ids, _ in rows)
        keep = max(q for _, q in rows) + 1  # positions whose logits predict question tokens (+ the last one)
        input_ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)  # [B, L], left-padded
        mask = torch.zeros((len(rows), width), dtype=torch.long)  # [B, L]
        for b, (ids, _) in enumerate(rows):
            input_ids[b, width - len(ids) :] = torch.tensor(ids)
            mask[b, width - len(ids) :] = 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)  # [B, L]: as if each row started at 0
        device = self.model.device
        out = self.model(
            input_ids=input_ids.to(device),
            attention_mask=mask.to(device),
            position_ids=positions.to(device),
            logits_to_keep=keep,
        )
        logprobs = out.logits.float().log_softmax(-1)  # [B, keep, V]: positions L-keep .. L-1
        targets = input_ids[:, width - keep + 1 :].to(device)  # [B, keep-1]: tokens L-keep+1 .. L-1
        token_lp = logprobs[:, :-1].gather(-1, targets[..., None]).squeeze(-1).cpu()  # [B, keep-1]
        return [token_lp[b, keep - 1 - q :].tolist() for b, (_, q) in enumerate(rows)]

    def rerank(
        self, questions: Sequence[str], candidates: Sequence[Sequence[Candidate]]
    ) -> list[RerankOutput]:
        check_inputs(questions, candidates, "QLMReranker")
        rows = [self.encode(q, c) for q, c in flat_pairs(questions, candidates)]
        by_length = sorted(range(len(rows)), key=lambda i: len(rows[i][0]))  # less padding per batch
        token_lps: list[list[float]] = [[] for _ in rows]
        was_training = self.model.training
        self.model.eval()
        try:
            for start in range(0, len(rows), self.config.batch_size):
                chunk = by_length[start : start + self.config.batch_size]
                for i, lps in zip(chunk, self.question_logprobs([rows[i] for i in chunk]), strict=True):
                    token_lps[i] = lps
        finally:
            self.model.train(was_training)
        outputs = []
        for lps in split_flat(token_lps, candidates):
            sums = [math.fsum(x) for x in lps]
            means = [s / len(x) for s, x in zip(sums, lps, strict=True)]
            outputs.append(
                RerankOutput(means, extra={"sum_logprob": sums, "question_tokens": len(lps[0]) if lps else 0})
            )
        return outputs


def answer_probability(top: dict[Any, float], word: str, decode: Callable[[list[int]], str] | None) -> float:
    """Sum of exp(logprob) over the top-k tokens that read `word` (stripped, lowercased); token-id keys need
    `decode`.

    >>> round(answer_probability({" Yes": -0.5, "yes": -2.0, "No": -1.5}, "yes", None), 4)
    0.7419
    """
    total = 0.0
    for key, logprob in top.items():
        if isinstance(key, str):
            text = key
        elif decode is None:
            raise ConfigError(
                "YesNoReranker: the backend returns token ids; pass its tokenizer to decode them"
            )
        else:
            text = decode([key])
        if text.strip().lower() == word:
            total += math.exp(logprob)
    return total


class YesNoReranker:
    """P(yes) of one greedy answer token to "does the document help answer the question? Yes or No".

    `tiebreak` is -P(no) (for candidates whose "Yes" is outside the top k); P(no) and the raw answer are in
    `extra`.
    """

    name = "yes_no"

    def __init__(self, backend: GenerationBackend, tokenizer: Any = None, top_logprobs: int = 20):
        if top_logprobs < 1:
            raise ConfigError(f"YesNoReranker: top_logprobs must be >= 1, got {top_logprobs}")
        self.backend, self.top_logprobs = backend, top_logprobs
        self.decode = token_decoder(tokenizer)

    def request(self, question: str, candidate: Candidate) -> GenerationRequest:
        content = YES_NO_PROMPT.format(question=question, passage=passage(candidate))
        return GenerationRequest(
            messages=[{"role": "user", "content": content}],
            temperature=0.0,
            max_tokens=1,
            top_logprobs=self.top_logprobs,
        )

    def rerank(
        self, questions: Sequence[str], candidates: Sequence[Sequence[Candidate]]
    ) -> list[RerankOutput]:
        check_inputs(questions, candidates, "YesNoReranker")
        pairs = flat_pairs(questions, candidates)
        results = self.backend.generate([self.request(q, c) for q, c in pairs]) if pairs else []
        yes, no, texts = [], [], []
        for result in results:
            choice = result.choices[0]
            top = choice.top_logprobs[0] if choice.top_logprobs else {}
            yes.append(answer_probability(top, "yes", self.decode))
            no.append(answer_probability(top, "no", self.decode))
            texts.append(choice.text)
        outputs = []
        for p_yes, p_no, raw in zip(*(split_flat(v, candidates) for v in (yes, no, texts)), strict=True):
            extra = {"p_no": p_no, "raw": raw}
            outputs.append(RerankOutput(p_yes, tiebreak=[-p for p in p_no], extra=extra))
        return outputs
