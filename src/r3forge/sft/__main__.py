"""`python -m r3forge.sft --config ...` (the entry point of `accelerate launch -m r3forge.sft` and torchrun):
runs the recipe `recipes/sft.py`, installed as `r3forge.recipes.sft`."""

import runpy

if __name__ == "__main__":
    runpy.run_module("r3forge.recipes.sft", run_name="__main__", alter_sys=True)
