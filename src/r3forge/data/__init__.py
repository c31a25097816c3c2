"""Canonical records, dataset loaders and the synthetic world generator."""
