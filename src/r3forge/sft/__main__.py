"""`python -m r3forge.sft --config ...`: the entry point for `accelerate launch -m r3forge.sft` and torchrun."""

import sys

from r3forge.sft.recipe import cli

if __name__ == "__main__":
    sys.exit(cli())
