"""r3forge: distillation and RL fine-tuning of the evidence path of retrieval-augmented generation."""

__version__ = "0.1.0"
