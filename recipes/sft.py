"""SFT distillation of the verbal reranker and QREAM-FT students: `main(config)` over TRL's SFTTrainer.

    python recipes/sft.py --config configs/sft/verbal_reranker_cpu.yaml
    accelerate launch --config_file configs/accelerate/zero3.yaml recipes/sft.py \
        --config configs/sft/verbal_reranker_qwen2.5-3b.yaml

The recipe's body lives in `r3forge/sft/recipe.py` (read it there), so that `r3forge sft` and
`accelerate launch -m r3forge.sft` run the same code from an installed package; this script is the same
entry point for launchers that take a file. To fork the recipe, copy that module here and edit it.
"""

import sys

from r3forge.config import parse_config
from r3forge.sft.config import SFT_CONFIGS
from r3forge.sft.recipe import main

if __name__ == "__main__":
    main(*parse_config(SFT_CONFIGS, sys.argv[1:], prog="recipes/sft.py"))
