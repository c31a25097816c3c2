"""Information Gain Pruning: evidence reranked and pruned by how much it lowers the generator's normalized
top-K entropy (`uncertainty`)."""
