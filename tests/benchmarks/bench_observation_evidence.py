"""How much of the evidence each kind of observation keeps: raw passages, the extractive stand-in and verbal
reranker students, on the same searches of the learning bench's held-out questions.

    .venv/bin/python tests/benchmarks/bench_observation_evidence.py --run runs/quickstart-<time> \\
        --student new=runs/student_evidence/release --student quickstart=runs/quickstart-<time>/reranker \\
        [--out runs/bench_observation_evidence.json] [--beside nothing]

The searches are fixed, so the arms differ only in the observation: every held-out question of the quickstart's
world (the hashed 20% GRPO never trains on, 109 questions) is searched the way the format warm start teaches
(`r3forge data agent-warmstart`, `agent/data.py: hops`): its sub-questions where it has them (a bridge or
comparison question), else the question itself. Each query goes through the search environment of configs/grpo/agent_world_cpu.yaml (BM25, 3
passages cut to 30 words; raw shows the top 2, verbal the reranker's top 2 with their comments and scores;
`agent/env.py: SearchEnv.observe`, the code GRPO and `eval agent` call). Per arm:

* `ra_r`: the share of questions whose final answer appears in any of its observations (RA-R as `eval agent`
  computes it, for this fixed search plan);
* `hop_recall`: the share of queries whose observation names that query's own answer (a sub-question's, or the
  question's), and `hop_recall_retrieved`: the share whose 3 retrieved passages do (what any reranker could keep;
  raw keeps only the retriever's top 2);
* `quote_faithfulness`: of the spans the shown comments quote, the share found verbatim in the passage it comments
  on (`metrics/qa.py: quotes_found`); `quote_rate`: the share of shown comments that quote at all;
* `words`: the mean words of an observation (what the policy reads);
* each arm's `ra_r` and `hop_recall` minus raw's, paired over the questions / queries, with a bootstrap 95% interval.

Students are evaluated in process (`--backend hf`, transformers greedy; GRPO serves them with vLLM, greedy as well)
with `reranker_max_tokens` 64, as in the GRPO YAML. It does not time anything.

The result file (`--out`, default `runs/bench_observation_evidence.json`; bench_student_evidence.sh writes
`RUN_DIR/observations.json`) holds the figures `run`, `backend` and `arms` (one object per arm with the keys above,
its per-question and per-query values and `ra_r_minus_raw` / `hop_minus_raw` as [difference, low, high]), the
table `observations` it prints, and the provenance (result_file.py); `--beside` records what shared the cores.
"""

from __future__ import annotations

import argparse
import re
import sys
from contextlib import ExitStack
from pathlib import Path

from render_tables import markdown_table
from result_file import NOT_RECORDED, write_result

from r3forge.agent.data import hops, is_heldout
from r3forge.agent.env import EnvConfig, SearchConfig, open_env
from r3forge.data.loaders import load_qa
from r3forge.metrics.qa import answer_in_text, quotes_found
from r3forge.metrics.stats import paired_bootstrap

_LINE = re.compile(r"^\[Doc \d+\] (.*) \(Relevance score: [^)]*\)$")


def plan(run: Path, limit: int | None) -> list[dict]:
    """Held-out questions with their searches: [{"id", "answers", "queries": [(query, its answers), ...]}]."""
    out = []
    for r in load_qa(str(run / "world" / "questions.jsonl")):
        if not is_heldout(r["id"], 0.2):
            continue
        queries = [(q, [a] if len(hops(r)) > 1 else list(r["answers"])) for q, a in hops(r)]
        out.append({"id": r["id"], "answers": list(r["answers"]), "queries": queries})
    return out[:limit]


def arm_search(name: str, spec: str, args: argparse.Namespace) -> tuple[SearchConfig, EnvConfig]:
    index = str(args.run / "index")
    env = EnvConfig(
        observation="raw" if name == "raw" else "verbal", num_retrieve=3, num_shown=2, doc_max_words=30
    )
    if name == "raw":
        return SearchConfig(index=index), env
    if name == "extractive":
        return SearchConfig(index=index, reranker_backend="extractive"), env
    search = SearchConfig(index=index, reranker_backend=args.backend, reranker_model=spec, reranker_tokenizer=spec,
                          reranker_serve=args.backend == "openai", reranker_max_tokens=64)  # fmt: skip
    return search, env


def measure(name: str, spec: str, questions: list[dict], args: argparse.Namespace) -> dict:
    search, env_config = arm_search(name, spec, args)
    queries = [q for item in questions for q, _ in item["queries"]]
    with ExitStack() as stack:
        env = open_env(stack, search, env_config)
        observations = env.observe(queries)
        retrieved = env.retriever.search(queries, 3)
        docs = [env.retriever.get([pid for pid, _ in h]) for h in retrieved]
    it = iter(zip(observations, docs, strict=True))
    ra_r, hops, hops_retrieved, words, quotes, found, comments, quoting = [], [], [], [], 0, 0, 0, 0
    for item in questions:
        seen = []
        for _, answers in item["queries"]:
            obs, ds = next(it)
            seen.append(obs.text)
            hops.append(float(answer_in_text(answers, obs.text)))
            cut = [" ".join(str(d["text"]).split()[: env_config.doc_max_words]) for d in ds]
            hops_retrieved.append(float(answer_in_text(answers, cut)))
            words.append(len(obs.text.split()))
            if env_config.observation == "verbal":
                texts = obs.docs_text.split("\n")[
                    1::2
                ]  # title, text per shown passage (cut texts are one line)
                for line, text in zip(obs.text.split("\n"), texts, strict=False):
                    m = _LINE.match(line)
                    if m and not m.group(1).startswith("(Title: "):  # an unparsed output shows the passage
                        comments += 1
                        n, k = quotes_found(m.group(1), text)
                        quotes, found, quoting = quotes + n, found + k, quoting + (n > 0)
        ra_r.append(float(answer_in_text(item["answers"], seen)))
    mean = lambda xs: round(sum(xs) / len(xs), 4) if xs else None  # noqa: E731
    return {"arm": name, "model": spec or None, "questions": len(questions), "queries": len(queries),
            "ra_r": mean(ra_r), "hop_recall": mean(hops), "hop_recall_retrieved": mean(hops_retrieved),
            "quote_rate": round(quoting / comments, 4) if comments else None,
            "quote_faithfulness": round(found / quotes, 4) if quotes else None, "words": mean(words),
            "per_question_ra_r": ra_r, "per_query_hop": hops}  # fmt: skip


def add_differences(results: list[dict]) -> None:
    """Each arm's `ra_r_minus_raw` and `hop_minus_raw`: [mean difference from raw (the first arm), 95% low, high],
    paired over the questions / queries."""
    raw = results[0]
    for r in results:
        for key in ("per_question_ra_r", "per_query_hop"):
            d, lo, hi = paired_bootstrap(raw[key], r[key])
            r[key.replace("per_question_", "").replace("per_query_", "") + "_minus_raw"] = [d, lo, hi]


def table(results: list[dict]) -> dict:
    """The table `observations`: per arm, its evidence, quotes, words and its differences from raw (the first arm).

    >>> arm = {"arm": "raw", "questions": 2, "queries": 3, "ra_r": 0.5, "hop_recall": 0.6667,
    ...        "hop_recall_retrieved": 1.0, "quote_rate": None, "quote_faithfulness": None, "words": 61.25,
    ...        "ra_r_minus_raw": [0.0, 0.0, 0.0], "hop_minus_raw": [0.0, 0.0, 0.0]}
    >>> other = arm | {"arm": "extractive", "ra_r": 0.25, "ra_r_minus_raw": [-0.25, -0.5, 0.0]}
    >>> t = table([arm, other])
    >>> t["rows"][0][-3:], t["rows"][1][3], t["rows"][1][-2:]
    (['61.2', '', ''], '0.250', ['-0.250 [-0.500, +0.000]', '+0.000 [+0.000, +0.000]'])
    """
    fmt = lambda x: "-" if x is None else f"{x:.3f}"  # noqa: E731
    rows = []
    for i, r in enumerate(results):
        diffs = [
            "" if i == 0 else "{:+.3f} [{:+.3f}, {:+.3f}]".format(*r[k])
            for k in ("ra_r_minus_raw", "hop_minus_raw")
        ]
        rows.append([r["arm"], str(r["questions"]), str(r["queries"]), fmt(r["ra_r"]), fmt(r["hop_recall"]),
                     fmt(r["hop_recall_retrieved"]), fmt(r["quote_rate"]), fmt(r["quote_faithfulness"]),
                     "-" if r["words"] is None else f"{r['words']:.1f}", *diffs])  # fmt: skip
    columns = ["observation", "questions", "queries", "RA-R", "hop recall", "(retrieved)", "quote rate",
               "quote faithfulness", "words", "RA-R - raw [95% CI]", "hop recall - raw [95% CI]"]  # fmt: skip
    return {"columns": columns, "align": "lrrrrrrrrll", "rows": rows}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run", type=Path, required=True, help="A finished quickstart run (world/, index/).")
    p.add_argument(
        "--student", action="append", default=[], help="NAME=FOLDER of a verbal reranker (repeat)."
    )
    p.add_argument("--backend", default="hf", choices=("hf", "vllm", "openai"), help="How students run.")
    p.add_argument(
        "--max_questions", type=int, default=None, help="First N held-out questions (default all)."
    )
    p.add_argument(
        "--out", type=Path, default=Path("runs/bench_observation_evidence.json"), help="the result file"
    )
    p.add_argument("--beside", default=NOT_RECORDED, help="what shared the cores ('nothing' when alone)")
    args = p.parse_args(argv)
    arms = [("raw", ""), ("extractive", "")] + [tuple(s.split("=", 1)) for s in args.student]
    if any(len(a) != 2 or not Path(a[1]).is_dir() for a in arms[2:]):
        sys.exit(f"--student takes NAME=FOLDER with an existing folder, got {args.student}")
    questions = plan(args.run, args.max_questions)
    results = [measure(name, spec, questions, args) for name, spec in arms]
    add_differences(results)
    print("\n".join(markdown_table(table(results))))
    figures = {"run": str(args.run), "backend": args.backend, "arms": results}
    write_result(args.out, figures, {"observations": table(results)}, beside=args.beside)
    print(f"\nwritten: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
