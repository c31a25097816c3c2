"""transformers backend: batched `generate` with left padding and top-k logprobs from the raw logits.

The fallback when vLLM is not installed, and the path training code uses (pass the live model being
trained). Prompts are built exactly as vLLM builds them, so the three backends see identical token ids:
chat messages go through the folder's chat template (`apply_chat_template(add_generation_prompt=True)`,
then tokenized without special tokens, as vLLM's chat endpoint does); raw prompts are tokenized with the
tokenizer's special tokens, as vLLM's completions endpoint does.

Sampling parameters come only from the request (the model's generation_config defaults, such as a
repetition penalty, are not applied), matching the vLLM backends (`--generation-config vllm`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig, PreTrainedModel

from r3forge.backends.base import (
    Choice,
    GenerationRequest,
    GenerationResult,
    Usage,
    split_reasoning,
    truncate_at_stop,
    with_n_choices,
)
from r3forge.models import resolve_model


def load_causal_lm(name: str, dtype: str = "float32", device: str = "cpu") -> tuple[PreTrainedModel, Any]:
    """(model in eval mode on `device`, tokenizer) of a causal LM run here for generation or scoring (an
    embedded short name, a local folder or a Hub id): what `HFLocalBackend`, the query-likelihood reranker,
    QREAM's orientation score and the demo load. A model being trained opens in `training/model.py`."""
    path = resolve_model(name)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype))
    return model.to(device).eval(), tokenizer


@dataclass
class HFLocalConfig:
    model: str = field(
        default="smollm2-135m-instruct",
        metadata={"help": "Embedded short name, local folder or Hub repo id."},
    )
    dtype: str = field(default="float32", metadata={"help": "torch dtype: float32, bfloat16 or float16."})
    device: str = field(default="cpu", metadata={"help": "torch device, e.g. cpu or cuda:0."})
    batch_size: int = field(default=8, metadata={"help": "Prompts per `generate` call (times n choices)."})


class HFLocalBackend:
    """`GenerationBackend` over a transformers causal LM (no vLLM needed)."""

    name = "hf"

    def __init__(self, model: PreTrainedModel, tokenizer, batch_size: int = 8):
        self.model, self.tokenizer, self.batch_size = model, tokenizer, batch_size
        eos = model.generation_config.eos_token_id
        eos_ids = {*(eos if isinstance(eos, list) else [eos]), tokenizer.eos_token_id} - {None}
        self.eos_ids: list[int] = sorted(eos_ids)
        pad = tokenizer.pad_token_id
        self.pad_id: int = pad if pad is not None else self.eos_ids[0]

    @classmethod
    def from_config(cls, config: HFLocalConfig) -> HFLocalBackend:
        model, tokenizer = load_causal_lm(config.model, config.dtype, config.device)
        return cls(model, tokenizer, config.batch_size)

    def encode(self, request: GenerationRequest) -> list[int]:
        """Prompt token ids, built the way vLLM builds them (see the module docstring)."""
        if request.is_chat:
            text = self.tokenizer.apply_chat_template(
                list(request.messages), add_generation_prompt=True, tokenize=False
            )
            return self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return self.tokenizer(request.prompt, add_special_tokens=True)["input_ids"]

    def generate(self, requests: Sequence[GenerationRequest]) -> list[GenerationResult]:
        """Results in request order. Requests that share sampling settings are batched shortest prompt first:
        a batch is left-padded to its longest prompt, and on CPU the padded prefill is most of the cost."""
        prompts = [self.encode(r) for r in requests]
        groups: dict[tuple, list[int]] = defaultdict(list)
        for i, request in enumerate(requests):
            groups[request.sampling_key()].append(i)
        results: list[GenerationResult | None] = [None] * len(requests)
        was_training = self.model.training  # a model being trained: no dropout while generating
        self.model.eval()
        try:
            for indices in groups.values():
                indices = sorted(indices, key=lambda i: len(prompts[i]))  # stable: ties keep request order
                for start in range(0, len(indices), self.batch_size):
                    chunk = indices[start : start + self.batch_size]
                    outputs = self._generate_batch([requests[i] for i in chunk], [prompts[i] for i in chunk])
                    for i, out in zip(chunk, outputs, strict=True):
                        results[i] = out
        finally:
            self.model.train(was_training)
        return results  # type: ignore[return-value]

    def close(self) -> None:
        """Nothing to release (the model belongs to the caller)."""

    def _generation_config(self, request: GenerationRequest) -> GenerationConfig:
        sampling = request.temperature > 0
        extra = {"temperature": request.temperature, "top_p": request.top_p, "top_k": 0} if sampling else {}
        return GenerationConfig(
            max_new_tokens=request.max_tokens,
            do_sample=sampling,
            eos_token_id=self.eos_ids,
            pad_token_id=self.pad_id,
            stop_strings=list(request.stop) or None,
            output_logits=True,  # unprocessed logits: logprobs of the raw distribution, as vLLM returns
            return_dict_in_generate=True,
            **extra,
        )

    # no_grad, not inference_mode: the backend also generates with a model being trained (SFT task metrics);
    # under DeepSpeed ZeRO-3 the small gathered weights persist between steps, and gathered in inference
    # mode they are inference tensors the next training step cannot save for backward
    @torch.no_grad()
    def _generate_batch(
        self, requests: Sequence[GenerationRequest], prompts: Sequence[list[int]]
    ) -> list[GenerationResult]:
        """Requests that share one sampling key, with their prompt ids; each prompt is repeated for its n
        samples (once if greedy)."""
        first, reps = requests[0], requests[0].distinct_samples
        rows = [ids for ids in prompts for _ in range(reps)]  # B*n prompts, request-major
        batch = self.tokenizer.pad(
            {"input_ids": rows}, padding=True, padding_side="left", return_tensors="pt"
        ).to(self.model.device)  # input_ids, attention_mask: [B*n, P]
        with torch.random.fork_rng(devices=[]):
            if first.seed is not None:
                torch.manual_seed(first.seed)
            out = self.model.generate(
                **batch, generation_config=self._generation_config(first), tokenizer=self.tokenizer
            )
        new = out.sequences[:, batch["input_ids"].shape[1] :].cpu()  # [B*n, T]
        chosen, top = _token_logprobs(out.logits, new, first.top_logprobs)
        results = []
        for r, (request, prompt) in enumerate(zip(requests, prompts, strict=True)):
            choices = []
            for row in range(r * reps, (r + 1) * reps):
                ids = new[row].tolist()
                length, finish = self._cut(ids, request.stop)
                choice = self._choice(ids[:length], chosen[row][:length], top[row][:length], finish, request)
                choices.append(choice)
            usage = Usage(len(prompt), sum(len(c.token_ids) for c in choices))
            result = GenerationResult(choices, usage, prompt_token_ids=prompt, backend=self.name)
            results.append(with_n_choices(result, request.n))
        return results

    def _cut(self, ids: list[int], stop: Sequence[str]) -> tuple[int, str]:
        """Generated length and finish reason: up to the first EOS (kept, as vLLM keeps it) or stop string.

        Rows that finished early are padded by `generate`; the padding is what gets cut.
        """
        for t, token in enumerate(ids):
            if token in self.eos_ids:
                return t + 1, "stop"
            if (
                stop
                and truncate_at_stop(self.tokenizer.decode(ids[: t + 1], skip_special_tokens=True), stop)[1]
            ):
                return t + 1, "stop"
        return len(ids), "length"

    def _choice(self, ids, logprobs, top, finish: str, request: GenerationRequest) -> Choice:
        text, _ = truncate_at_stop(self.tokenizer.decode(ids, skip_special_tokens=True), request.stop)
        reasoning, text = split_reasoning(text)
        return Choice(text, ids, logprobs, top, finish, reasoning)


def _token_logprobs(
    step_logits: Sequence[torch.Tensor], new: torch.Tensor, k: int
) -> tuple[list[list[float]], list[list[dict[int, float]]]]:
    """Per row: each generated token's logprob ([T]) and its top-k ({id: logprob} best first, [T]).

    `step_logits`: T raw-logit tensors of [B*n, V] (`output_logits`); `new`: generated ids [B*n, T].
    """
    chosen, values, ids = [], [], []
    for t, logits in enumerate(step_logits):  # one step at a time: never a [B*n, T, V] tensor
        logprobs = logits.float().log_softmax(dim=-1)  # [B*n, V]
        chosen.append(logprobs.gather(-1, new[:, t, None].to(logprobs.device)).squeeze(-1).cpu())  # [B*n]
        if k:
            step_values, step_ids = logprobs.topk(k, dim=-1)  # [B*n, k]
            values.append(step_values.cpu())
            ids.append(step_ids.cpu())
    chosen_rows = torch.stack(chosen, dim=1).tolist()  # [B*n, T]
    if not k:
        return chosen_rows, [[{} for _ in row] for row in chosen_rows]
    ids_rows = torch.stack(ids, dim=1).tolist()  # [B*n, T, k]
    values_rows = torch.stack(values, dim=1).tolist()  # [B*n, T, k]
    top = [
        [dict(zip(i, v, strict=True)) for i, v in zip(row_ids, row_values, strict=True)]
        for row_ids, row_values in zip(ids_rows, values_rows, strict=True)
    ]
    return chosen_rows, top
