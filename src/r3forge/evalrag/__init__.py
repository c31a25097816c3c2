"""Single-turn RAG evaluation: retrieve, rerank/admit, truncate, generate, score, and report the sweep."""
