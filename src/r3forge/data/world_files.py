"""The synthetic world's files: `write_world` puts a generated `World` (`synth_world.generate_world`) on disk,
atomically, as FlashRAG JSON lines, Hugging Face datasets, the world's facts (`world.json`) and a README card;
`main` is `r3forge data synth-world`.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path

import datasets

from r3forge.data.jsonio import write_json, write_jsonl
from r3forge.data.records import flashrag_contents
from r3forge.data.synth_world import Row, SynthWorldConfig, World, generate_world

FILES = {
    "corpus": "corpus.jsonl",
    "questions": "questions.jsonl",
    "passages": "passages.jsonl",
    "hf_corpus": "hf/corpus",
    "hf_questions": "hf/questions",
    "world": "world.json",
    "readme": "README.md",
}


def summarize(world: World) -> Row:
    """Counts for the README card and the CLI summary line."""
    metas = [json.loads(m) for m in world.questions["metadata"]]
    count = lambda items: dict(sorted(Counter(items).items()))  # noqa: E731
    return {
        "seed": world.config.seed,
        "passages": len(world.corpus),
        "passage_kinds": count(p["kind"] for p in world.passage_meta),
        "questions": len(world.questions),
        "question_types": count(m["type"] for m in metas),
        "question_relations": count("+".join(m["relations"]) for m in metas),
        "entities": count(e["type"] for e in world.entities),
        "facts": len(world.facts),
    }


def _write_files(world: World, out: Path) -> None:
    corpus = [{"id": r["id"], "contents": flashrag_contents(r["title"], r["text"])} for r in world.corpus]
    write_jsonl(out / FILES["corpus"], corpus)
    write_jsonl(out / FILES["passages"], world.corpus)
    rows = []
    for q in world.questions:
        meta = json.loads(q["metadata"]) | {"gold_passage_ids": q["gold_passage_ids"]}
        meta["sub_questions"] = q["sub_questions"]
        meta["passages"] = [{"id": p["id"], "relevance": p["relevance"]} for p in q["passages"]]
        rows.append(
            {"id": q["id"], "question": q["question"], "golden_answers": q["answers"], "metadata": meta}
        )
    write_jsonl(out / FILES["questions"], rows)
    bars = not datasets.are_progress_bars_disabled()
    datasets.disable_progress_bars()
    try:
        world.corpus.save_to_disk(str(out / FILES["hf_corpus"]))
        world.questions.save_to_disk(str(out / FILES["hf_questions"]))
    finally:
        if bars:
            datasets.enable_progress_bars()
    config = {k: v for k, v in asdict(world.config).items() if k != "output_dir"}  # same world, same bytes
    doc = {"config": config, "entities": world.entities, "facts": world.facts, "passages": world.passage_meta}
    write_json(out / FILES["world"], doc)
    (out / FILES["readme"]).write_text(readme_card(summarize(world), list(FILES.values())), encoding="utf-8")


def write_world(world: World, output_dir: str | os.PathLike[str]) -> dict[str, Path]:
    """Write `world` to `output_dir` atomically (a temp folder beside it, then rename); return the paths.

    An existing synth-world folder is replaced; any other non-empty folder is refused (FileExistsError).
    """
    out = Path(output_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.exists() and any(out.iterdir()) and not (out / FILES["world"]).exists():
        raise FileExistsError(f"{out}: exists and is not a synth-world folder; refusing to replace it")
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    umask = os.umask(0)
    os.umask(umask)
    try:
        tmp.chmod(0o777 & ~umask)  # mkdtemp makes it private; the final folder gets the usual mode
        _write_files(world, tmp)
        if out.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
            os.replace(out, old / "prev")
            os.replace(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return {k: out / v for k, v in FILES.items()}


def main(config: SynthWorldConfig) -> Row:
    """Generate the world for `config`, write it to `config.output_dir`, print a one-line summary."""
    t0 = time.perf_counter()
    world = generate_world(config)
    paths = write_world(world, config.output_dir)
    s = summarize(world) | {"output_dir": config.output_dir, "seconds": round(time.perf_counter() - t0, 2)}
    s["paths"] = {k: str(v) for k, v in paths.items()}
    kinds = ", ".join(f"{v} {k}" for k, v in s["passage_kinds"].items())
    types = ", ".join(f"{v} {k}" for k, v in s["question_types"].items())
    line = f"synth-world seed={s['seed']}: {s['passages']} passages ({kinds}), {s['questions']} questions"
    print(f"{line} ({types}) -> {s['output_dir']} in {s['seconds']}s")
    return s


def readme_card(summary: dict, files: list[str]) -> str:
    """The README.md card of a written world: seed, counts and the question-type histogram."""
    counts = lambda d: ", ".join(f"{v} {k}" for k, v in d.items())  # noqa: E731
    lines = [
        "# Synthetic world (r3forge `synth_world`)",
        "",
        "A fictional world invented from one seed, so no model can answer these questions from memory.",
        "",
        f"- seed: {summary['seed']}",
        f"- passages: {summary['passages']} ({counts(summary['passage_kinds'])})",
        f"- entities: {counts(summary['entities'])}; facts: {summary['facts']}",
        f"- questions: {summary['questions']} ({counts(summary['question_types'])})",
        "",
        "| question relations | count |",
        "|---|---|",
        *(f"| {k} | {v} |" for k, v in summary["question_relations"].items()),
        "",
        "Files: " + ", ".join(f"`{f}`" for f in files) + ".",
        "Passage metadata (entity, facts stated, kind: primary / paraphrase / distractor / conflict) is in",
        "`world.json`; conflict passages state a wrong value, hedged, and are never gold.",
    ]
    return "\n".join(lines) + "\n"
