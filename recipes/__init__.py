"""The training recipes, one readable script per job, installed as `r3forge.recipes`:

* `sft.py`: SFT distillation of the verbal reranker and QREAM-FT students (`r3forge sft`);
* `grpo.py`: GRPO of the multi-turn search agent with masked observation / reranker tokens (`r3forge grpo`).

Each reads top to bottom: parse the config, load the data, the model, build the trainer, train, save. The
parts they call live in `r3forge.sft` and `r3forge.agent`.
"""
