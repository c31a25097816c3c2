"""Multi-turn search rollouts, token-in/token-out: the ids of every turn are kept, never re-tokenized.

Per rollout the completion is built by appending, turn after turn, the policy's sampled ids (env_mask 1,
with their sampling logprobs) and the environment's ids (env_mask 0: observations, correction messages and
the closing EOS), each environment piece tokenized on its own. Environment text is encoded with the text of
a special token kept as text (`encode_text`): a document or comment containing "<|im_end|>" gets the ids of
its characters, never the control token's id. Turns are read from the text as sampled (`sampled_text`:
special tokens decoded as their own text, never dropped), so no special token's removal can join the text
around it into a tag ("<ans<|im_end|>wer>" is not "<answer>"). Loop (all rollouts advance together):

    turn t < max_turns:  generate until </search>, </answer>, EOS or the turn budget
        <answer>...</answer>   -> done
        <search> q </search>   -> the turn's queries go to `SearchEnv.observe` in one batched call;
                                  "\\n\\n<information>{body cut to max_obs_tokens}</information>\\n\\n" is appended
        anything else          -> the fixed correction message is appended
    turn t = max_turns:  one final generation; a search there is not executed
    end:                 EOS appended (env_mask 0) unless the policy ended with it; a rollout that runs out of
                         `max_completion_tokens` stops where it is (truncated, no EOS)

Policies: `HFPolicy` (transformers `generate` with the live model: CPU, and GPUs without vLLM) and
`VLLMPolicy` (a vLLM `LLM`, e.g. TRL's colocated engine: `trainer.vllm_generation.llm`). Both sample from
token ids and return each sampled token's logprob under the sampling temperature (as TRL computes it).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import torch
from transformers import StoppingCriteriaList, StopStringCriteria

from r3forge.agent.env import Observation, SearchEnv
from r3forge.errors import ConfigError

STOP = ("</search>", "</answer>")
# tag-free, so that the reward's format parser never reads the environment's own words as an action
CORRECTION = (
    "\nMy previous action is invalid. To search, I should write a short query between the search tags; "
    "to give the final answer, I should write it between the answer tags. Let me try again.\n"
)
_SEARCH = re.compile(r"<search>(.*?)</search>", re.DOTALL)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


@dataclass
class RolloutConfig:
    max_turns: int = field(
        default=4, metadata={"help": "T: search turns before the final answer turn (paper: 4)."}
    )
    max_turn_tokens: int = field(default=500, metadata={"help": "Tokens the policy may generate per turn."})
    max_obs_tokens: int = field(
        default=512, metadata={"help": "Token budget of one observation body (cut beyond it)."}
    )
    rollout_loop: Literal["auto", "async", "sync"] = field(
        default="auto",
        metadata={
            "help": "async: each rollout at its own pace, no turn-wide barrier (agent/async_rollout.py; "
            "continuous batching on a vLLM engine); sync: all rollouts take each turn together; auto: async "
            "on vLLM, sync on transformers `generate` (whose batches cannot be joined mid-way)."
        },
    )

    def __post_init__(self) -> None:
        if self.max_turns < 0 or min(self.max_turn_tokens, self.max_obs_tokens) < 1:
            raise ConfigError(f"RolloutConfig: need max_turns >= 0 and positive token budgets, got {self}")
        if self.rollout_loop not in ("auto", "async", "sync"):
            raise ConfigError(f"rollout_loop: {self.rollout_loop!r} is not one of auto, async, sync")


@dataclass
class Turn:
    """One generation: the sampled ids and their logprobs, and why it stopped."""

    ids: list[int]
    logprobs: list[float]
    finish: str  # "eos" | "stop" | "length"


@dataclass
class Rollout:
    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    env_mask: list[int] = field(default_factory=list)  # 1: sampled by the policy, 0: environment
    logprobs: list[float] = field(default_factory=list)  # sampling logprob (0.0 where env_mask is 0)
    searches: list[str] = field(default_factory=list)
    observations: list[Observation] = field(default_factory=list)
    turns: int = 0
    invalid_turns: int = 0
    finish: str = ""  # "answer" | "final" (final turn without an answer) | "truncated"

    def add(self, ids: Sequence[int], policy: bool, logprobs: Sequence[float] | None = None) -> None:
        self.completion_ids += list(ids)
        self.env_mask += [int(policy)] * len(ids)
        self.logprobs += list(logprobs) if logprobs is not None else [0.0] * len(ids)


class Policy(Protocol):
    """Samples one continuation per token-id prompt, stopping at `STOP`, EOS or `max_new_tokens`."""

    def generate(self, prompts: Sequence[list[int]], max_new_tokens: int) -> list[Turn]: ...


def stop_index(pieces: Sequence[str], stop: Sequence[str]) -> int | None:
    """Index of the token whose text completes the first stop string, from per-token texts.

    >>> stop_index(["<", "search", ">x</", "search", ">", "\\n"], ["</search>"])
    4
    >>> stop_index(["a", "b"], ["</search>"]) is None
    True
    """
    text, ends = "", []
    for piece in pieces:
        text += piece
        ends.append(len(text))
    hits = [m + len(s) for s in stop if (m := text.find(s)) >= 0]
    if not hits:
        return None
    first = min(hits)
    return next(t for t, end in enumerate(ends) if end >= first)


class HFPolicy:
    """transformers `generate` with a (live) causal LM; sampling logprobs from the raw logits / temperature."""

    def __init__(
        self, model: Any, tokenizer: Any, temperature: float = 1.0, top_p: float = 1.0, batch_size: int = 16
    ):
        self.model, self.tokenizer = model, tokenizer
        self.temperature, self.top_p, self.batch_size = temperature, top_p, batch_size
        self.eos_id = tokenizer.eos_token_id
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_id
        # built once: transformers rebuilds it from the whole vocabulary on every `generate(stop_strings=...)`
        # call (~0.5 s for SmolLM2's 49k tokens on a CPU core, once per turn and batch)
        self.stop = StoppingCriteriaList([StopStringCriteria(tokenizer, list(STOP))])

    @torch.no_grad()
    def generate(self, prompts: Sequence[list[int]], max_new_tokens: int) -> list[Turn]:
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))  # similar lengths share a batch
        out: list[Turn | None] = [None] * len(prompts)
        was_training = self.model.training
        self.model.eval()
        try:
            for start in range(0, len(order), self.batch_size):
                chunk = order[start : start + self.batch_size]
                for i, turn in zip(
                    chunk, self._batch([prompts[i] for i in chunk], max_new_tokens), strict=True
                ):
                    out[i] = turn
        finally:
            self.model.train(was_training)
        return out  # type: ignore[return-value]

    def _batch(self, prompts: Sequence[list[int]], max_new_tokens: int) -> list[Turn]:
        batch = self.tokenizer.pad(
            {"input_ids": list(prompts)}, padding=True, padding_side="left", return_tensors="pt"
        ).to(self.model.device)  # [B, P]
        sampling = self.temperature > 0
        out = self.model.generate(
            **batch,
            do_sample=sampling,
            max_new_tokens=max_new_tokens,
            eos_token_id=self.eos_id,
            pad_token_id=self.pad_id,
            stopping_criteria=self.stop,
            output_logits=True,
            return_dict_in_generate=True,
            **({"temperature": self.temperature, "top_p": self.top_p, "top_k": 0} if sampling else {}),
        )
        new = out.sequences[:, batch["input_ids"].shape[1] :]  # [B, T]
        scale = self.temperature if sampling else 1.0
        chosen = torch.stack(  # one step at a time, never a [B, T, V] tensor
            [
                (lg.float() / scale).log_softmax(-1).gather(-1, new[:, t, None]).squeeze(-1)
                for t, lg in enumerate(out.logits)
            ],
            dim=1,
        )  # [B, T]
        turns = []
        for row, lps in zip(new.tolist(), chosen.tolist(), strict=True):
            n, finish = len(row), "length"
            if self.eos_id in row:
                n, finish = row.index(self.eos_id) + 1, "eos"
            pieces = [self.tokenizer.decode([t]) for t in row[:n]]
            s = stop_index(pieces, STOP)
            if s is not None and (finish == "length" or s + 1 < n):
                n, finish = s + 1, "stop"
            turns.append(Turn(row[:n], lps[:n], finish))
        return turns


class VLLMPolicy:
    """A vLLM `LLM` (offline or TRL's colocated engine) sampling from token ids."""

    def __init__(self, llm: Any, eos_id: int, temperature: float = 1.0, top_p: float = 1.0):
        self.llm, self.eos_id, self.temperature, self.top_p = llm, eos_id, temperature, top_p

    def params(self, max_new_tokens: int) -> Any:
        """One turn's sampling: stop after a closing tag (kept), the sampled token's logprob. Stop strings are
        matched in the text with special tokens kept (as `HFPolicy`'s and `sampled_text` read it): a turn
        "</sea<|im_start|>rch>" does not stop there."""
        from vllm import SamplingParams  # only on this path (vLLM installed)

        return SamplingParams(
            n=1,
            temperature=self.temperature,
            top_p=self.top_p,
            max_tokens=max_new_tokens,
            stop=list(STOP),
            include_stop_str_in_output=True,
            logprobs=0,
            skip_special_tokens=False,
        )

    def turn(self, c: Any) -> Turn:
        """A vLLM `CompletionOutput` as a `Turn`."""
        ids = list(c.token_ids)
        lps = [step[t].logprob for step, t in zip(c.logprobs, ids, strict=True)]
        if ids and ids[-1] == self.eos_id:
            return Turn(ids, lps, "eos")
        return Turn(ids, lps, "stop" if c.finish_reason == "stop" else "length")

    def generate(self, prompts: Sequence[list[int]], max_new_tokens: int) -> list[Turn]:
        params = self.params(max_new_tokens)
        outputs = self.llm.generate([{"prompt_token_ids": list(p)} for p in prompts], params, use_tqdm=False)
        return [self.turn(o.outputs[0]) for o in outputs]


def turn_action(text: str) -> tuple[str, str]:
    """("answer", text) | ("search", query) | ("invalid", "") for one turn's text: its first action.

    >>> turn_action("I should look. <search> Thesick birth </search>")
    ('search', 'Thesick birth')
    >>> turn_action("<answer>1858</answer>")
    ('answer', '1858')
    >>> turn_action("<search></search>")
    ('invalid', '')
    """
    a, s = _ANSWER.search(text), _SEARCH.search(text)
    if a and (not s or a.start() < s.start()):
        return "answer", a.group(1).strip()
    if s and s.group(1).strip():
        return "search", s.group(1).strip()
    return "invalid", ""


def special_ids(tokenizer: Any) -> dict[int, str]:
    """The tokenizer's special tokens (id -> text): the ids that text must never become and that
    `skip_special_tokens=True` would drop."""
    return {i: t.content for i, t in tokenizer.added_tokens_decoder.items() if t.special}


def encode_text(tokenizer: Any, text: str) -> list[int]:
    """Environment text (an observation: documents, reranker comments) as ids with the text of a special
    token kept as text: "<|im_end|>" in a document is encoded as its characters, never as the special id."""
    return tokenizer.encode(text, add_special_tokens=False, split_special_tokens=True)


def check_text_encoding(tokenizer: Any) -> None:
    """Refuse a tokenizer that turns a special token's text into its id even with `split_special_tokens`:
    with it, a retrieved document could write control tokens into the policy's context."""
    for i, text in special_ids(tokenizer).items():
        if i in encode_text(tokenizer, text):
            raise ConfigError(
                f"tokenizer {getattr(tokenizer, 'name_or_path', type(tokenizer).__name__)}: "
                f"encodes the text {text!r} as its special id {i} even with "
                "split_special_tokens=True; observations need it so that document text never "
                "becomes a control token (use a transformers tokenizer that supports it)"
            )


def sampled_text(tokenizer: Any, ids: Sequence[int]) -> str:
    """A completion (or one turn) as the policy sampled it: every id decoded as itself, a special token as its
    own text (never dropped: dropping it could join "<ans" and "wer>" into a tag), without the EOS that
    closes it (dropped by id). What the rewards, `eval agent` and the turn parser read."""
    ids = list(ids)
    if ids and ids[-1] == tokenizer.eos_token_id:
        ids.pop()
    return tokenizer.decode(ids, skip_special_tokens=False)


def encode_prompt(tokenizer: Any, messages: list[dict[str, str]]) -> list[int]:
    """A chat prompt's ids as TRL and vLLM's chat endpoint build them (template, then no special tokens)."""
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


class Encoder:
    """Token ids of the environment's pieces, each tokenized on its own (`encode_text`: no special ids)."""

    def __init__(self, tokenizer: Any):
        check_text_encoding(tokenizer)
        self.tokenizer = tokenizer
        self.open = encode_text(tokenizer, "\n\n<information>")
        self.close = encode_text(tokenizer, "</information>\n\n")
        self.correction = encode_text(tokenizer, CORRECTION)

    def observation(self, body: str, max_tokens: int) -> list[int]:
        return self.open + encode_text(self.tokenizer, body)[:max_tokens] + self.close


def apply_turn(r: Rollout, turn: Turn, room: int, final: bool, enc: Encoder) -> str | None:
    """Append one policy turn (cut to `room`, the rollout's budget left) and what the environment adds
    without searching (EOS after an answer, the correction after an invalid turn); the query if it searches."""
    eos = enc.tokenizer.eos_token_id
    ids, lps = turn.ids[:room], turn.logprobs[:room]
    r.add(ids, True, lps)
    r.turns += 1
    action, arg = turn_action(sampled_text(enc.tokenizer, ids))
    full = len(ids) >= room  # the turn used the rollout's whole completion budget
    if full and action != "answer":
        r.finish = "truncated"
    elif action == "answer" or final:
        if (not ids or ids[-1] != eos) and not full:
            r.add([eos], False)
        r.finish = "answer" if action == "answer" else "final"
    elif action == "search":
        return arg
    else:
        r.invalid_turns += 1
        r.add(enc.correction, False)
    return None


def apply_observation(r: Rollout, query: str, obs: Observation, enc: Encoder, max_obs_tokens: int) -> None:
    r.searches.append(query)
    r.observations.append(obs)
    r.add(enc.observation(obs.text, max_obs_tokens), False)


def close_if_full(r: Rollout, max_completion_tokens: int) -> None:
    """An observation or correction may have used up the completion budget: cut to it, finished."""
    if not r.finish and len(r.completion_ids) >= max_completion_tokens:
        over = len(r.completion_ids) - max_completion_tokens
        if over:
            del r.completion_ids[-over:], r.env_mask[-over:], r.logprobs[-over:]
        r.finish = "truncated"


def per_rollout(max_completion_tokens: int | Sequence[int], n: int) -> list[int]:
    """One completion budget per rollout from one for all or one each.

    >>> per_rollout(64, 2), per_rollout([64, 32], 2)
    ([64, 64], [64, 32])
    """
    if isinstance(max_completion_tokens, int):
        return [max_completion_tokens] * n
    if len(max_completion_tokens) != n:
        raise ValueError(f"{len(max_completion_tokens)} completion budgets for {n} prompts")
    return list(max_completion_tokens)


def lockstep_rollouts(
    prompt_ids: Sequence[list[int]],
    policy: Policy,
    env: SearchEnv,
    tokenizer: Any,
    config: RolloutConfig,
    max_completion_tokens: int | Sequence[int],
    groups: Sequence[int] | None = None,
) -> list[Rollout]:
    """Roll out every prompt to the end (see the module docstring); one `Rollout` per prompt, in order.

    `max_completion_tokens` bounds all turns and observations of a rollout (GRPOConfig's
    max_completion_length in training): one budget for all, or one per prompt (`per_rollout`). `groups`: a
    group per prompt (e.g. the question whose samples `eval tts` rolls out together with other questions'):
    each turn's searches go to the environment per group, so de-duplication and reranker calls stay within a
    group; None: one call per turn for all. The turn-synchronous loop; `async_rollout.own_pace_rollouts` is
    the same per rollout without the turn-wide barrier."""
    enc = Encoder(tokenizer)
    rollouts = [Rollout(list(p)) for p in prompt_ids]
    budgets = per_rollout(max_completion_tokens, len(rollouts))
    group = [0] * len(rollouts) if groups is None else list(groups)
    if len(group) != len(rollouts):
        raise ValueError(f"{len(group)} groups for {len(rollouts)} prompts")
    active = list(range(len(rollouts)))
    for t in range(config.max_turns + 1):
        if not active:
            break
        # > 0 for every active rollout: one that fills the budget is finished at the end of its turn
        room = {i: budgets[i] - len(rollouts[i].completion_ids) for i in active}
        budget = min(config.max_turn_tokens, max(room[i] for i in active))
        turns = policy.generate([rollouts[i].prompt_ids + rollouts[i].completion_ids for i in active], budget)
        searching: list[tuple[int, str]] = []
        for i, turn in zip(active, turns, strict=True):
            query = apply_turn(rollouts[i], turn, room[i], t == config.max_turns, enc)
            if query is not None:
                searching.append((i, query))
        for g in dict.fromkeys(group[i] for i, _ in searching):  # groups in order of first appearance
            asked = [(i, q) for i, q in searching if group[i] == g]
            observations = env.observe([q for _, q in asked])
            for (i, query), obs in zip(asked, observations, strict=True):
                apply_observation(rollouts[i], query, obs, enc, config.max_obs_tokens)
        for i in active:
            close_if_full(rollouts[i], budgets[i])
        active = [i for i in active if not rollouts[i].finish]
    return rollouts
