"""QREAM: question-oriented rewriting of retrieved documents (Explore-then-Distill).

* `seeds`: stylistic seed questions unrelated to the targets (`sample_seeds`) and `SeedDocStep`, which
  writes a background document for each;
* `rewrite`: `RewriteStep` (QREAM-ICL, one round), `raw_retrieval` (r_raw), `first_tokens` (round n > 1
  rewrites the first l tokens of round n-1);
* `score`: the criteria as steps: `ReaderStep` (utility: hard filter + S_perf), `FactExtractStep` and
  `FactJudgeStep` (fidelity: one request per fact, S_fact);
* `select`: dual-criteria rejection sampling: `hard_filter`, `s_perf`, `s_fact`, `select_golden`.

The metrics s_orient and r_inc are in `r3forge.metrics.orientation`.
"""
