"""The multi-turn search agent (Verbal-R3 generator alignment): the output format and its reward
(`reward`), the search environment (`env`), token-in/token-out rollouts (`rollout`), the GRPO recipe
(`grpo`, `config`), its questions and data steps (`data`, `warmstart`), `r3forge eval agent` (`evaluate`)
and relevance-guided test-time scaling (`tts`)."""
