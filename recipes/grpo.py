"""GRPO of the multi-turn search agent (Verbal-R3 generator alignment): `main(config)` over TRL's GRPOTrainer
with a token-in/token-out `rollout_func` whose env_mask keeps observation and reranker tokens out of the loss.

    python recipes/grpo.py --config configs/grpo/agent_world_cpu.yaml
    accelerate launch --config_file configs/accelerate/zero3.yaml recipes/grpo.py \
        --config configs/grpo/agent_qwen2.5-3b.yaml

The recipe's body lives in `r3forge/agent/grpo.py` (read it there, with rollout.py, env.py and reward.py), so
that `r3forge grpo` and `accelerate launch -m r3forge.agent.grpo` run the same code from an installed
package; this script is the same entry point for launchers that take a file.
"""

import sys

from r3forge.agent.grpo import main, parse

if __name__ == "__main__":
    main(*parse(sys.argv[1:], "recipes/grpo.py"))
