"""What both training recipes (`recipes/sft.py`, `recipes/grpo.py`) are built from: the run folder and its claim
(`run.py`: which settings decide the trained model), complete checkpoints and resume (`checkpoints.py`), the
starting model in its training precision (`model.py`) and the CPU settings (`cpu.py`).
"""
