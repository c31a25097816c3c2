"""Run folders know their owner (`r3forge.runfolder`): the module on real folders, then the real commands on
folders of other commands and other settings. Every refusal comes before a model loads: no test loads one."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from r3forge.cli import main
from r3forge.runfolder import (
    OWNER,
    RunFolderError,
    check,
    claim,
    move_aside,
    read_owner,
    record_owner,
    settings,
)

SAMPLING = {"temperature": 0.0, "max_tokens": 256, "model": "teacher"}


def test_first_use_records_the_owner_and_the_same_run_resumes(tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert claim(out, "annotate verbal", SAMPLING) is None
    owner = read_owner(out)
    assert (owner["kind"], owner["settings"], owner["format"]) == (
        "annotate verbal",
        SAMPLING,
        "r3forge.owner/2",
    )
    (out / "accepted-00000-of-00001.jsonl").write_text('{"key": "k"}\n')
    assert claim(out, "annotate verbal", dict(SAMPLING)) is None  # the same run: resumed, nothing moved
    assert (out / "accepted-00000-of-00001.jsonl").is_file()


def test_other_settings_and_other_kinds_are_refused_naming_the_difference(tmp_path: Path) -> None:
    out = tmp_path / "run"
    claim(out, "annotate verbal", SAMPLING)
    (out / "manifest.json").write_text("{}")
    hotter = SAMPLING | {"temperature": 0.7, "max_tokens": 128}
    with pytest.raises(RunFolderError) as err:
        claim(out, "annotate verbal", hotter)
    message = str(err.value)
    assert message.startswith(f"{out}: belongs to a `annotate verbal` run with other settings (")
    assert "temperature: 0.0 there vs 0.7 here; max_tokens: 256 there vs 128 here" in message
    assert "pass --overwrite true" in message and "\n" not in message
    with pytest.raises(
        RunFolderError, match=r"belongs to `annotate verbal` \(owner.json\), not to `eval rag`"
    ):
        check(out, "eval rag", {})
    assert read_owner(out)["settings"] == SAMPLING  # a refusal changes nothing


def test_free_settings_may_change_and_are_recorded(tmp_path: Path) -> None:
    out = tmp_path / "run"
    claim(out, "sft", {"learning_rate": 1e-4, "max_eval_samples": None})
    (out / "checkpoint-1").mkdir()
    later = {"learning_rate": 1e-4, "max_eval_samples": 80}
    with pytest.raises(RunFolderError, match="max_eval_samples: None there vs 80 here"):
        claim(out, "sft", later)  # not free: refused
    assert claim(out, "sft", later, free=("max_eval_samples",)) is None
    assert read_owner(out)["settings"] == later  # owner.json holds the values of the latest run
    with pytest.raises(RunFolderError, match=r"learning_rate: 0\.0001 there vs 0\.0003 here"):
        claim(out, "sft", {"learning_rate": 3e-4, "max_eval_samples": 80}, free=("max_eval_samples",))


def test_a_claimed_folder_with_nothing_written_yet_is_free(tmp_path: Path) -> None:
    out = tmp_path / "run"
    claim(out, "eval rag", {"qa_path": "a"})  # e.g. the command then failed on its input,
    (out / "config.yaml").write_text("qa_path: a\n")  # having written only its resolved config
    claim(out, "eval rag", {"qa_path": "b"})
    claim(out, "sft", {"dataset": "b"})
    assert read_owner(out)["kind"] == "sft"
    (out / "run.json").write_text("{}")
    with pytest.raises(RunFolderError, match="belongs to `sft`"):
        claim(out, "eval rag", {"qa_path": "b"})


def test_overwrite_moves_the_old_contents_aside_and_deletes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "run"
    claim(out, "annotate verbal", SAMPLING)
    (out / "accepted-00000-of-00001.jsonl").write_text('{"key": "k"}\n')
    aside = claim(out, "eval rag", {"qa_path": "q"}, overwrite=True)
    assert aside is not None and aside.parent == tmp_path and aside.name.startswith("run.replaced-")
    assert (aside / "accepted-00000-of-00001.jsonl").read_text() == '{"key": "k"}\n'
    assert read_owner(aside)["kind"] == "annotate verbal"
    assert sorted(p.name for p in out.iterdir()) == [OWNER] and read_owner(out)["kind"] == "eval rag"
    # the same run overwritten: a fresh start too, and a second move the same second gets its own name
    (out / "rows.jsonl").write_text("{}\n")
    again = claim(out, "eval rag", {"qa_path": "q"}, overwrite=True)
    assert again is not None and again != aside and (again / "rows.jsonl").is_file()


def test_folders_without_an_owner(tmp_path: Path) -> None:
    """Made before owner records: adopted by the kind that wrote them, refused by another; a folder of the
    user's own files is adopted and never moved, even with overwrite."""
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    (legacy / "manifest.json").write_text("{}")
    (legacy / "accepted-00000-of-00001.jsonl").write_text("")
    with pytest.raises(
        RunFolderError, match=r"holds another run's files \(manifest.json\) and no owner.json"
    ):
        claim(legacy, "sft", {})
    claim(legacy, "annotate verbal", SAMPLING, legacy=("manifest.json",))
    assert read_owner(legacy)["kind"] == "annotate verbal"

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    assert claim(mine, "eval rag", {}, overwrite=True) is None
    assert (mine / "notes.txt").read_text() == "keep" and read_owner(mine)["kind"] == "eval rag"


def test_write_later_and_other_ranks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "index"
    claim(out, "index build", {"kind": "bm25"}, write=False)  # a command that renames its folder into place
    assert not out.exists()
    out.mkdir()
    (out / "index.json").write_text("{}")
    record_owner(out, "index build", {"kind": "bm25"})
    assert read_owner(out)["settings"] == {"kind": "bm25"}
    monkeypatch.setenv("RANK", "1")  # torchrun's other processes: rank 0 checks and writes
    assert claim(tmp_path / "other", "sft", {}) is None and not (tmp_path / "other").exists()


def test_settings_leave_out_runtime_knobs_and_name_models_by_content(
    tmp_path: Path, smollm2_path: Path
) -> None:
    from r3forge.backends.open import LLMConfig
    from r3forge.synth.job import RunConfig

    copy = tmp_path / "a" / "final"
    shutil.copytree(smollm2_path, copy)
    teacher = LLMConfig(backend="openai", model=str(copy), base_url="http://node:8000/v1", api_key="secret")
    run = RunConfig(output_dir="x", batch_size=4, concurrency=8, shard="1/2", overwrite=True)
    got = settings([teacher, run, {"batch_size": 2}], drop=["max_logprobs"])
    assert got["model"].startswith("final@") and got["batch_size"] == 2  # a mapping is taken as given
    assert not {"base_url", "api_key", "output_dir", "concurrency", "shard", "overwrite"} & set(got)
    relative = os.path.relpath(copy)
    assert settings([LLMConfig(model=relative)])["model"] == got["model"]  # the same folder, another path


def test_the_working_directory_is_never_moved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(RunFolderError, match="working directory"):
        move_aside(".")


# ------------------------------------------------------------------------------------------- the commands


@pytest.fixture
def qa(tmp_path: Path) -> Path:
    """A question without passages: `annotate verbal` has nothing to send, so it runs without a teacher."""
    path = tmp_path / "qa.jsonl"
    path.write_text(json.dumps({"id": "q1", "question": "Who wrote Hamlet?", "golden_answers": ["Shakespeare"],
                                "metadata": {"passages": []}}) + "\n")  # fmt: skip
    return path


def verbal(qa: Path, out: Path, *flags: str) -> list[str]:
    """`annotate verbal` to an openai endpoint nobody serves: the folder is claimed before anything connects."""
    return ["annotate", "verbal", "--qa_path", str(qa), "--backend", "openai", "--base_url",
            "http://127.0.0.1:9/v1", "--model", "teacher", "--output_dir", str(out), "--progress", "false", *flags]  # fmt: skip


def error(capsys: pytest.CaptureFixture[str]) -> str:
    return capsys.readouterr().err.strip().splitlines()[-1]


def test_commands_refuse_a_folder_of_another_run_before_loading_anything(
    qa: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "annotate"
    assert main(verbal(qa, out)) == 0
    assert read_owner(out)["kind"] == "annotate verbal" and (out / "manifest.json").is_file()

    # other sampling settings: refused, naming them and the flag
    assert main(verbal(qa, out, "--temperature", "0.7")) == 1
    line = error(capsys)
    assert line.startswith("r3forge annotate") and "Traceback" not in line
    assert f"error: {out}: belongs to a `annotate verbal` run with other settings (" in line
    assert "temperature: 0.0 there vs 0.7 here" in line and "--overwrite true" in line
    # the same settings: resumed (a new base_url, more questions and another concurrency are not settings)
    flags = ("--base_url", "http://127.0.0.1:10/v1", "--max_questions", "5", "--concurrency", "4")
    assert main(verbal(qa, out, *flags)) == 0
    assert main(verbal(qa, out, "--dry_run", "true")) == 0  # a dry run checks and writes nothing
    before = sorted(p.name for p in out.iterdir())

    # other commands: refused before any model or data loads
    assert main(["eval", "rag", "--qa_path", str(qa), "--output_dir", str(out)]) == 1
    assert error(capsys).endswith(
        f"error: {out}: belongs to `annotate verbal` (owner.json), not to `eval rag`; pass --overwrite true to "
        "move it aside (to <folder>.replaced-<time>) and start afresh, or choose another folder"
    )
    sft = ["sft", "--dataset", str(qa), "--output_dir", str(out), "--bf16", "false", "--report_to", "none"]
    assert main(sft) == 1
    assert "belongs to `annotate verbal` (owner.json), not to `sft`" in error(capsys)
    assert sorted(p.name for p in out.iterdir()) == before  # nothing was written into the annotation folder

    # --overwrite true: the annotation run moves aside, whole, and the new run starts in an empty folder
    assert main(verbal(qa, out, "--temperature", "0.7", "--overwrite", "true")) == 0
    (aside,) = tmp_path.glob("annotate.replaced-*")
    assert sorted(p.name for p in aside.iterdir()) == before
    assert (
        read_owner(aside)["settings"]["temperature"] == 0.0
        and read_owner(out)["settings"]["temperature"] == 0.7
    )


def test_a_folder_made_before_owner_records(
    tmp_path: Path, qa: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An `eval rag` folder of an earlier r3forge (config.yaml, rows.jsonl, no owner.json): `sft` refuses it
    (it once overwrote such a config.yaml); `eval rag` itself adopts it."""
    out = tmp_path / "eval"
    out.mkdir()
    (out / "config.yaml").write_text("qa_path: x\n")
    (out / "rows.jsonl").write_text("{}\n")
    sft = ["sft", "--dataset", str(qa), "--output_dir", str(out), "--bf16", "false", "--report_to", "none"]
    assert main(sft) == 1
    assert "holds another run's files (rows.jsonl) and no owner.json naming `sft`" in error(capsys)
    assert (out / "config.yaml").read_text() == "qa_path: x\n" and not (out / OWNER).exists()
    check(out, "eval rag", {}, legacy=("config.yaml", "rows.jsonl"))  # what `eval rag` passes: its own files


def test_synth_world_same_settings_replace_other_settings_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "world"
    world = ["data", "synth-world", "--num_passages", "60", "--num_questions", "4", "--output_dir", str(out)]
    assert main([*world, "--seed", "0"]) == 0
    corpus = (out / "corpus.jsonl").read_text()
    assert main([*world, "--seed", "0"]) == 0 and (out / "corpus.jsonl").read_text() == corpus  # same bytes
    assert main([*world, "--seed", "1"]) == 1
    assert "other settings (seed: 0 there vs 1 here)" in error(capsys)
    assert main([*world, "--seed", "1", "--overwrite", "true"]) == 0
    (aside,) = tmp_path.glob("world.replaced-*")
    assert (aside / "corpus.jsonl").read_text() == corpus and read_owner(out)["settings"]["seed"] == 1


def test_a_file_output_is_refused_inside_another_run_and_written_beside_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`data pool` (as `data filter-closed-book` and `data agent-warmstart`) writes one file: not into an SFT
    run's folder (nor a folder below it), nor over a folder; into a plain folder, or a quickstart run's folder
    (which holds its stages' outputs, e.g. warmstart.jsonl) but not over the quickstart's own records."""
    qa = tmp_path / "qa.jsonl"
    qa.write_text(json.dumps({"_id": "q1", "question": "Who wrote Hamlet?", "answer": "Shakespeare",
                              "context": [["Hamlet", ["Hamlet is a play by William Shakespeare."]]],
                              "supporting_facts": [["Hamlet", 0]]}) + "\n")  # fmt: skip
    run = tmp_path / "runs" / "sft-run"
    record_owner(run, "sft", {"dataset": "d"})
    (run / "metrics.jsonl").write_text('{"loss": 1.0}\n')
    quick = tmp_path / "runs" / "quickstart-1"
    record_owner(quick, "quickstart", {"seed": 0})

    def pool(out: Path) -> int:
        return main(["data", "pool", "--qa_path", str(qa), "--output", str(out)])

    for out in (run / "metrics.jsonl", run / "sub" / "corpus.jsonl"):
        assert pool(out) == 1
        assert error(capsys).endswith(
            f"error: flag '--output': {out} is inside {run}, the run folder of `sft` (owner.json); write it "
            "outside that folder"
        )
    assert pool(run) == 1 and f"flag '--output': {run} is a folder" in error(capsys)
    assert pool(quick / OWNER) == 1 and "would replace a record of the `quickstart` run" in error(capsys)
    assert pool(qa / "corpus.jsonl") == 1 and f"{qa} is a file, not a folder" in error(capsys)
    assert sorted(p.name for p in run.iterdir()) == ["metrics.jsonl", OWNER]  # nothing written, no .tmp
    assert (run / "metrics.jsonl").read_text() == '{"loss": 1.0}\n'
    assert pool(quick / "corpus.jsonl") == 0 and pool(tmp_path / "data" / "corpus.jsonl") == 0
    assert (quick / "corpus.jsonl").read_text() == (tmp_path / "data" / "corpus.jsonl").read_text() != ""
