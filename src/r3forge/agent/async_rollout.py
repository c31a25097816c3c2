"""Multi-turn search rollouts without a turn-wide barrier: each rollout advances on its own.

`own_pace_rollouts` runs one coroutine per rollout, with the per-turn rules of `rollout.lockstep_rollouts`
(`apply_turn`, `apply_observation`, `close_if_full`), so ids, env_mask and logprobs are built the same way:

    rollout i:  turn -> (search) -> observation -> turn -> ... -> answer | final | truncated
                  |                   ^
                  v                   |
    policy:     requests of whichever rollouts are generating (continuous batching on vLLM)
    env:        `EnvBatcher`: the queries waiting when the environment is free go in one `observe` call
                (dedup stays), in a worker thread, so generation goes on while it retrieves and reranks

A rollout whose observation is back asks for its next turn at once; the others are not waited for.

Policies (`AsyncPolicy`): `VLLMStepPolicy` drives a vLLM `LLMEngine` (TRL's colocated `llm.llm_engine` or
r3forge's own) request by request with `add_request` / `step`, so a new turn joins the running batch and
reuses its context's KV blocks (prefix caching); `BatchedPolicy` adapts any `rollout.Policy` (the HF
`generate` fallback): the requests waiting when it is free go in one `generate` call.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from typing import Any, Protocol

from r3forge.agent.env import Observation, SearchEnv
from r3forge.agent.rollout import (
    Encoder,
    Policy,
    Rollout,
    RolloutConfig,
    Turn,
    VLLMPolicy,
    apply_observation,
    apply_turn,
    close_if_full,
    lockstep_rollouts,
    per_rollout,
)
from r3forge.errors import ConfigError


class AsyncPolicy(Protocol):
    """Samples one continuation of a token-id prompt, stopping at `STOP`, EOS or `max_new_tokens`."""

    async def generate(self, prompt: list[int], max_new_tokens: int) -> Turn: ...


class BatchedPolicy:
    """A synchronous `Policy` behind the async interface: one `generate` call (in a worker thread) for the
    requests waiting when the previous call returns, each cut to its own `max_new_tokens`."""

    def __init__(self, policy: Policy):
        self.policy = policy
        self.waiting: list[tuple[list[int], int, asyncio.Future]] = []
        self.driver: asyncio.Task | None = None
        self.calls = 0  # generate calls made (batches), for logs and tests

    async def generate(self, prompt: list[int], max_new_tokens: int) -> Turn:
        future = asyncio.get_running_loop().create_future()
        self.waiting.append((prompt, max_new_tokens, future))
        if self.driver is None or self.driver.done():
            self.driver = asyncio.create_task(self._drive())
        return await future

    async def _drive(self) -> None:
        await asyncio.sleep(0)  # let the rollouts that are ready now ask first
        while self.waiting:
            batch, self.waiting = self.waiting, []
            budget = max(n for _, n, _ in batch)
            try:
                turns = await asyncio.to_thread(self.policy.generate, [p for p, _, _ in batch], budget)
            except Exception as e:  # every waiting rollout sees the failure
                for *_, future in batch:
                    future.set_exception(e)
                continue
            self.calls += 1
            for (_, n, future), turn in zip(batch, turns, strict=True):
                if len(turn.ids) > n:  # a longer shared budget: cut where this request's budget ends
                    turn = Turn(turn.ids[:n], turn.logprobs[:n], "length")
                future.set_result(turn)


class VLLMStepPolicy:
    """Continuous batching on a vLLM v1 `LLMEngine`: each turn is one request, added while others run;
    `step()` runs in a worker thread, and a finished request resolves its rollout's turn at once.

    Sampling and the returned turns (sampled token's logprob) are `VLLMPolicy`'s."""

    def __init__(self, policy: VLLMPolicy):
        self.policy, self.engine = policy, policy.llm.llm_engine
        self.waiting: list[tuple[str, list[int], int]] = []
        self.futures: dict[str, asyncio.Future] = {}
        self.driver: asyncio.Task | None = None
        self.ids = itertools.count()
        self.steps = 0  # engine steps taken, for logs and tests

    async def generate(self, prompt: list[int], max_new_tokens: int) -> Turn:
        request_id = f"r3forge-{next(self.ids)}"
        future = asyncio.get_running_loop().create_future()
        self.futures[request_id] = future
        self.waiting.append((request_id, prompt, max_new_tokens))
        if self.driver is None or self.driver.done():
            self.driver = asyncio.create_task(self._drive())
        return await future

    async def _drive(self) -> None:
        try:
            while self.waiting or self.engine.has_unfinished_requests():
                for request_id, prompt, n in self.waiting:  # added between steps, never during one
                    prompt_ids = {"prompt_token_ids": list(prompt)}
                    self.engine.add_request(request_id, prompt_ids, self.policy.params(n))
                self.waiting = []
                outputs = await asyncio.to_thread(self.engine.step)
                self.steps += 1
                for o in outputs:
                    if o.finished and o.request_id in self.futures:
                        self.futures.pop(o.request_id).set_result(self.policy.turn(o.outputs[0]))
        except Exception as e:  # the engine failed: every rollout waiting on it sees why
            for future in self.futures.values():
                if not future.done():
                    future.set_exception(e)
            self.futures.clear()
            raise


class EnvBatcher:
    """The environment behind the async loop: queries that arrive while it is busy wait and go together in
    the next `SearchEnv.observe` call (which de-duplicates them), run in a worker thread."""

    def __init__(self, env: SearchEnv):
        self.env = env
        self.waiting: list[tuple[str, asyncio.Future]] = []
        self.driver: asyncio.Task | None = None
        self.calls = 0

    async def observe(self, query: str) -> Observation:
        future = asyncio.get_running_loop().create_future()
        self.waiting.append((query, future))
        if self.driver is None or self.driver.done():
            self.driver = asyncio.create_task(self._drive())
        return await future

    async def _drive(self) -> None:
        await asyncio.sleep(0)  # the queries of rollouts whose turns ended together go in one call
        while self.waiting:
            batch, self.waiting = self.waiting, []
            try:
                outs = await asyncio.to_thread(self.env.observe, [q for q, _ in batch])
            except Exception as e:
                for _, future in batch:
                    future.set_exception(e)
                continue
            self.calls += 1
            for (_, future), obs in zip(batch, outs, strict=True):
                future.set_result(obs)


async def _rollout(
    r: Rollout,
    policy: AsyncPolicy,
    env: EnvBatcher,
    enc: Encoder,
    config: RolloutConfig,
    max_completion_tokens: int,
) -> None:
    for t in range(config.max_turns + 1):
        room = max_completion_tokens - len(r.completion_ids)  # > 0 while the rollout is unfinished
        turn = await policy.generate(r.prompt_ids + r.completion_ids, min(config.max_turn_tokens, room))
        query = apply_turn(r, turn, room, t == config.max_turns, enc)
        if query is not None:
            apply_observation(r, query, await env.observe(query), enc, config.max_obs_tokens)
        close_if_full(r, max_completion_tokens)
        if r.finish:
            return


async def own_pace_rollouts_async(
    prompt_ids: Sequence[list[int]],
    policy: AsyncPolicy,
    env: SearchEnv | EnvBatcher,
    tokenizer: Any,
    config: RolloutConfig,
    max_completion_tokens: int | Sequence[int],
) -> list[Rollout]:
    """`own_pace_rollouts` inside a running event loop."""
    batcher = env if isinstance(env, EnvBatcher) else EnvBatcher(env)
    enc = Encoder(tokenizer)
    rollouts = [Rollout(list(p)) for p in prompt_ids]
    budgets = per_rollout(max_completion_tokens, len(rollouts))
    await asyncio.gather(
        *(_rollout(r, policy, batcher, enc, config, n) for r, n in zip(rollouts, budgets, strict=True))
    )
    return rollouts


def own_pace_rollouts(
    prompt_ids: Sequence[list[int]],
    policy: AsyncPolicy,
    env: SearchEnv | EnvBatcher,
    tokenizer: Any,
    config: RolloutConfig,
    max_completion_tokens: int | Sequence[int],
) -> list[Rollout]:
    """Roll out every prompt to the end, each at its own pace; one `Rollout` per prompt, in order. For greedy
    decoding the result equals `lockstep_rollouts`'s where the policy's output does not depend on its batch."""
    return asyncio.run(
        own_pace_rollouts_async(prompt_ids, policy, env, tokenizer, config, max_completion_tokens)
    )


def loop_for(policy: Policy, config: RolloutConfig) -> str:
    """ "async" or "sync": the loop `configured_rollouts` runs for this policy (`rollout_loop: auto` is async on
    vLLM)."""
    vllm = isinstance(policy, VLLMPolicy)
    return (
        "sync" if config.rollout_loop == "sync" or (config.rollout_loop == "auto" and not vllm) else "async"
    )


def context_budgets(
    prompt_ids: Sequence[list[int]], max_completion_tokens: int, context: int | None
) -> list[int]:
    """Each rollout's completion budget: `max_completion_tokens`, or less where the prompt and the whole
    rollout would not fit the engine's context (a rollout that reaches it ends `truncated`, as at the budget).

    >>> context_budgets([[1] * 100, [1] * 300], 400, 512), context_budgets([[1] * 100], 400, None)
    ([400, 212], [400])
    """
    budgets = [
        max_completion_tokens if context is None else min(max_completion_tokens, context - len(p))
        for p in prompt_ids
    ]
    if budgets and min(budgets) < 1:
        i = budgets.index(min(budgets))
        raise ConfigError(
            f"prompt {i} has {len(prompt_ids[i])} tokens: no room left in the engine's context of "
            f"{context} tokens (raise the engine's max_model_len or shorten the prompt)"
        )
    return budgets


def engine_context(policy: Policy) -> int | None:
    """The context length (prompt + generation) of a `VLLMPolicy`'s engine; None for other policies."""
    if not isinstance(policy, VLLMPolicy):
        return None
    return int(policy.llm.llm_engine.model_config.max_model_len)


def configured_rollouts(
    prompt_ids: Sequence[list[int]],
    policy: Policy,
    env: SearchEnv,
    tokenizer: Any,
    config: RolloutConfig,
    max_completion_tokens: int,
) -> list[Rollout]:
    """The loop `config.rollout_loop` names for a synchronous policy: a `VLLMPolicy`'s engine is stepped request by
    request (`VLLMStepPolicy`), any other policy is batched as its requests arrive (`BatchedPolicy`). On a vLLM
    engine each rollout also stops at the engine's context (`context_budgets`)."""
    budgets = context_budgets(prompt_ids, max_completion_tokens, engine_context(policy))
    if loop_for(policy, config) == "sync":
        return lockstep_rollouts(prompt_ids, policy, env, tokenizer, config, budgets)
    async_policy: AsyncPolicy = (
        VLLMStepPolicy(policy) if isinstance(policy, VLLMPolicy) else BatchedPolicy(policy)
    )
    return own_pace_rollouts(prompt_ids, async_policy, env, tokenizer, config, budgets)
