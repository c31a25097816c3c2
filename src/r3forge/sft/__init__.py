"""Supervised distillation: the SFT recipe (`recipe.main`), its configs, task metrics and run folder."""
