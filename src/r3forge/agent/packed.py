"""A GRPO training step that computes only what it trains: rollouts packed without padding, and the LM head
evaluated only at the tokens the policy sampled.

TRL's `GRPOTrainer` (1.16) scores a batch as `[B, P + C]`: every prompt left-padded to the longest prompt
and every completion right-padded to the longest completion, and its fused LM head scores every
completion position that is not padding, observation and reranker-comment tokens included (they are
masked out of the loss only afterwards). `PackedGRPOTrainer` overrides the one method that runs the
model for that (`_get_per_token_logps_and_entropies`, used for the trained policy, the old policy and the
reference model alike):

- **packed rows**: each rollout's real tokens (prompt + completion) are laid end to end in rows of at most
  `max_tokens_per_microbatch` tokens (first-fit decreasing), with `position_ids` restarting at 0 for each
  rollout and no attention mask, so transformers builds the block-causal mask (sdpa, eager) or runs
  varlen flash-attention (flash_attention_2/3) from the position ids: no token attends across rollouts,
  and no padding goes through the backbone;
- **mask-aware head**: the labels handed to TRL's fused head are -100 everywhere but where the loss mask
  (`completion_mask * tool_mask`, i.e. the rollout's env_mask) is 1, so the head and its log-softmax run
  only there (TRL's head compacts to labelled positions on CUDA, and on CPU with `compact_cpu_lm_head`);
  a rollout with nothing to score (a masked truncated completion) is not forwarded at all.

Everything after the forward is TRL's own: loss types, advantages, clipping, KL, importance-sampling
correction, entropy and logging read the same `[B, C]` tensors, zero where nothing was scored. Values
there never reach the loss: every term TRL builds from them is multiplied by that same mask. The
gradients equal the padded step's to float rounding (tests/agent/test_packed.py).

Rows are forwarded one at a time and kept in one autograd graph (TRL's one backward per batch follows);
under several processes the number of forwards is made equal on every rank (ZeRO-3 and FSDP gather
parameters per forward), with one-token rows that score nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from trl import GRPOTrainer

from r3forge.errors import ConfigError

MULTIMODAL = (
    "pixel_values",
    "image_grid_thw",
    "num_images",
    "pixel_attention_mask",
    "spatial_shapes",
    "num_tiles",
    "image_sizes",
    "token_type_ids",
    "mm_token_type_ids",
    "image_position_ids",
)


@dataclass
class Row:
    """One packed row: the tokens of several rollouts end to end, and where its scores go."""

    ids: list[torch.Tensor] = field(default_factory=list)  # per rollout: [n_i] its real tokens
    positions: list[torch.Tensor] = field(default_factory=list)  # per rollout: [n_i] 0..n_i-1
    labels: list[torch.Tensor] = field(default_factory=list)  # per rollout: [n_i] token or -100
    src: list[torch.Tensor] = field(default_factory=list)  # per rollout: scored places in the row's output
    dst: list[torch.Tensor] = field(default_factory=list)  # per rollout: their flat places in [B * C]
    tokens: int = 0


def pack(
    input_ids: torch.Tensor, attention_mask: torch.Tensor, score_mask: torch.Tensor, budget: int | None
) -> list[Row]:
    """Pack the real tokens of a TRL batch into rows of at most `budget` tokens (None: one row per rollout's
    length at least, i.e. the longest rollout).

    input_ids, attention_mask: [B, S] (S = P + C: left-padded prompts, right-padded completions);
    score_mask: [B, C], 1 where the completion token must be scored. A rollout whose completion scores
    nothing is left out (all rollouts scoring nothing: the first is kept, so the output stays connected to
    the model). The output of row r (`log_probs` [T_r - 1], TRL's fused head shifts by one) at `src` goes
    to the flat `[B * C]` places `dst`.

    >>> ids = torch.tensor([[0, 5, 6, 7, 8], [9, 10, 11, 0, 0]])
    >>> att = torch.tensor([[0, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    >>> score = torch.tensor([[1, 0, 1], [1, 0, 0]])  # C = 3: input columns 2, 3, 4
    >>> rows = pack(ids, att, score, budget=8)
    >>> [torch.cat(r.ids).tolist() for r in rows], [torch.cat(r.positions).tolist() for r in rows]
    ([[5, 6, 7, 8, 9, 10, 11]], [[0, 1, 2, 3, 0, 1, 2]])
    >>> torch.cat(rows[0].labels).tolist(), torch.cat(rows[0].src).tolist(), torch.cat(rows[0].dst).tolist()
    ([-100, 6, -100, 8, -100, -100, 11], [0, 2, 5], [0, 2, 3])
    """
    batch, width = input_ids.shape
    c = score_mask.shape[1]
    p = width - c
    score = score_mask.bool() & attention_mask[:, p:].bool()  # [B, C]
    keep = [b for b in range(batch) if score[b].any()] or [0]
    lengths = {b: int(attention_mask[b].sum()) for b in keep}
    if budget is not None:
        over = [b for b in keep if lengths[b] > budget]
        if over:
            b = over[0]
            raise ConfigError(
                f"max_tokens_per_microbatch: {budget} is shorter than a rollout of {lengths[b]} tokens (prompt "
                f"+ completion, batch row {b}); a rollout cannot be split across packed rows: raise it to at "
                f"least {max(lengths.values())}, or leave it unset (the longest rollout of each batch)"
            )
    cap = budget if budget is not None else max(lengths.values())
    rows: list[Row] = []
    for b in sorted(keep, key=lambda b: -lengths[b]):  # first-fit decreasing
        row = next((r for r in rows if r.tokens + lengths[b] <= cap), None)
        if row is None:
            row = Row()
            rows.append(row)
        cols = attention_mask[b].nonzero().squeeze(-1)  # [n] the real tokens' columns
        tokens = input_ids[b, cols]
        scored = (cols >= p) & score[b, (cols - p).clamp(min=0)]  # [n] this token is a scored label
        scored[0] = False  # a rollout's first token has nothing before it to be scored from
        at = scored.nonzero().squeeze(-1)  # [k] places in the rollout
        row.ids.append(tokens)
        row.positions.append(torch.arange(len(cols), device=input_ids.device))
        row.labels.append(tokens.masked_fill(~scored, -100))
        row.src.append(row.tokens + at - 1)  # the head's output t - 1 scores token t
        row.dst.append(b * c + cols[at] - p)
        row.tokens += len(cols)
    return rows


def score_rows(
    model: Any, rows: list[Row], shape: tuple[int, int], compute_entropy: bool, accelerator: Any
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Forward each packed row through the model with TRL's fused head and scatter the scored positions
    back to `[B, C]` (zeros elsewhere): (log-probs, entropies or None)."""
    values: list[torch.Tensor] = []
    entropies: list[torch.Tensor] = []
    places: list[torch.Tensor] = []
    for row in rows:
        ids = torch.cat(row.ids)[None]  # [1, T]
        with accelerator.autocast():
            out = model(
                input_ids=ids,
                position_ids=torch.cat(row.positions)[None],
                labels=torch.cat(row.labels)[None],
                fused_lm_head=True,
            )
        src = torch.cat(row.src)
        values.append(out.log_probs[0, src])  # out.log_probs: [1, T - 1]
        if compute_entropy:
            entropies.append(out.entropy[0, src])
        places.append(torch.cat(row.dst))
    dst = torch.cat(places)
    flat = torch.cat(values)
    logps = flat.new_zeros(shape[0] * shape[1]).index_put((dst,), flat).view(shape)
    if not compute_entropy:
        return logps, None
    ent = torch.cat(entropies)
    return logps, ent.new_zeros(shape[0] * shape[1]).index_put((dst,), ent).view(shape)


def pad_row(pad_id: int, device: torch.device) -> Row:
    """A one-token row that scores nothing: keeps the number of forwards equal across processes."""
    one = torch.tensor([pad_id], device=device)
    empty = torch.zeros(0, dtype=torch.long, device=device)
    return Row([one], [one * 0], [one * 0 - 100], [empty], [empty], 1)


class PackedGRPOTrainer(GRPOTrainer):
    """`GRPOTrainer` whose per-token log-probabilities come from packed rows scored only under the loss
    mask (module docstring). `max_tokens_per_microbatch`: tokens per packed row (None: the longest rollout
    of each batch, so nothing is refused)."""

    def __init__(self, *args: Any, max_tokens_per_microbatch: int | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.max_tokens_per_microbatch = max_tokens_per_microbatch
        self._score_mask: torch.Tensor | None = None  # [B, C] while TRL computes a batch's loss
        self._pending_env_mask: list[list[int]] | None = None  # the generation batch's env_mask
        self.packing_stats = {"padded_tokens": 0, "packed_tokens": 0, "scored_positions": 0, "forwards": 0}

    def _generate(self, prompts: list) -> tuple:
        out = super()._generate(prompts)
        self._pending_env_mask = out[2]  # tool_mask: env_mask as the rollout_func returned it, or None
        return out

    def _generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
        try:
            return super()._generate_and_score_completions(inputs)
        finally:
            self._pending_env_mask = None

    def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> torch.Tensor:
        mask = inputs["completion_mask"]
        self._score_mask = mask if "tool_mask" not in inputs else mask * inputs["tool_mask"]
        try:
            return super()._compute_loss(model, inputs)
        finally:
            self._score_mask = None

    def score_mask(self, attention_mask: torch.Tensor, c: int) -> torch.Tensor:
        """[B, C]: the loss mask of the batch being scored (in `_compute_loss`), the generation batch's
        env_mask (old / reference log-probs), or every completion token."""
        batch = attention_mask.shape[0]
        if self._score_mask is not None and self._score_mask.shape == (batch, c):
            return self._score_mask
        pending = self._pending_env_mask
        if pending is not None and len(pending) == batch and all(len(m) <= c for m in pending):
            rows = [torch.tensor(m + [0] * (c - len(m)), device=attention_mask.device) for m in pending]
            return torch.stack(rows) * attention_mask[:, -c:]
        return attention_mask[:, -c:]

    def _get_per_token_logps_and_entropies(
        self,
        model: Any,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        logits_to_keep: int,
        batch_size: int | None = None,
        compute_entropy: bool = False,
        compute_aux_loss: bool = False,
        **multimodal: Any,
    ) -> tuple:
        if compute_aux_loss or any(multimodal.get(k) is not None for k in MULTIMODAL):
            return super()._get_per_token_logps_and_entropies(
                model,
                input_ids,
                attention_mask,
                logits_to_keep,
                batch_size,
                compute_entropy,
                compute_aux_loss,
                **multimodal,
            )
        mask = self.score_mask(attention_mask, logits_to_keep)
        rows = pack(input_ids, attention_mask, mask, self.max_tokens_per_microbatch)
        if dist.is_available() and dist.is_initialized() and self.accelerator.num_processes > 1:
            count = torch.tensor(len(rows), device=input_ids.device)
            dist.all_reduce(count, op=dist.ReduceOp.MAX)
            pad_id = getattr(self.processing_class, "pad_token_id", None) or 0
            rows += [pad_row(pad_id, input_ids.device) for _ in range(int(count) - len(rows))]
        logps, entropies = score_rows(model, rows, tuple(mask.shape), compute_entropy, self.accelerator)
        step = {
            "padded_tokens": input_ids.numel(),
            "packed_tokens": sum(r.tokens for r in rows),
            "scored_positions": sum(len(i) for r in rows for i in r.src),
            "forwards": len(rows),
        }
        for key, value in step.items():
            self.packing_stats[key] += value
        # the trained batch (not old / reference log-probs) is logged, summed over ranks
        if self._score_mask is not None:
            totals = torch.tensor(list(step.values()), dtype=torch.float64, device=input_ids.device)
            totals = self.accelerator.reduce(totals, reduction="sum").tolist()
            mode = "train" if self.model.training else "eval"
            for key, value in zip(step, totals, strict=True):
                self._metrics[mode][f"packed/{key}"].append(value)
        return logps, entropies, None
