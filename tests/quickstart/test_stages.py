"""The quickstart runner on its first, cheap stages (real subprocesses of the real commands): the plan, the
state file, resume, a failed stage's message and what a rerun does with its partial output."""

from __future__ import annotations

import json
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from r3forge.agent.config import GRPO_CONFIGS
from r3forge.agent.env import EnvConfig, SearchConfig
from r3forge.agent.evaluate import EVAL_AGENT_CONFIGS
from r3forge.agent.warmstart import WarmstartArgs
from r3forge.annotate.jobs import VERBAL_CONFIGS
from r3forge.annotate.rules import RulesConfig
from r3forge.config import parse_config
from r3forge.errors import ConfigError
from r3forge.evalrag.pipeline import EVAL_CONFIGS
from r3forge.quickstart.plan import STAGE_NAMES, QuickstartConfig, build_stages
from r3forge.quickstart.report import write_report
from r3forge.quickstart.stages import StageFailed, fill, find_run, main, read_state
from r3forge.sft.config import SFT_CONFIGS

TINY = dict(world_passages=200, world_questions=30, annotate_questions=2)
URLS = {"teacher_url": "http://127.0.0.1:1/v1", "student_url": "http://127.0.0.1:2/v1"}


def test_plan_covers_every_stage_and_its_flags_parse(tmp_path: Path):
    stages = build_stages(QuickstartConfig(), tmp_path / "run")
    assert tuple(s.name for s in stages) == STAGE_NAMES
    parsers = {("annotate", "verbal"): VERBAL_CONFIGS, ("sft",): SFT_CONFIGS, ("grpo",): GRPO_CONFIGS,
               ("eval", "rag"): EVAL_CONFIGS, ("eval", "agent"): EVAL_AGENT_CONFIGS}  # fmt: skip
    checked = 0
    for stage in stages:
        argv = fill(stage.argv, URLS)
        assert not any("{" in a for a in argv), stage.name
        for prefix, classes in parsers.items():
            if tuple(argv[: len(prefix)]) == prefix:
                parse_config(classes, argv[len(prefix) :])  # every flag exists and converts
                checked += 1
    assert checked == 7  # annotate, 2x sft, rag, 2x eval agent, grpo
    servers = {s.name: s.server for s in stages if s.server}
    assert servers == {"annotate": "teacher", "warmstart-data": "student", "warmstart-sft": "student",
                       "rag": "student", "agent-before": "student", "grpo": "student", "agent-after": "student"}  # fmt: skip
    # the student's stages run back to back: its vLLM server starts once
    roles = [s.server for s in stages]
    first, last = roles.index("student"), len(roles) - 1 - roles[::-1].index("student")
    assert set(roles[first : last + 1]) == {"student"}


def test_warm_start_shows_the_observations_grpo_shows(tmp_path: Path):
    """The format warm start's trajectories are built with GRPO's environment and reranker: the same
    observation format (verbal), documents, comment length and the same served student."""
    by = {s.name: fill(s.argv, URLS) for s in build_stages(QuickstartConfig(), tmp_path / "run")}
    _, warm_search, warm_env = parse_config(
        (WarmstartArgs, SearchConfig, EnvConfig), by["warmstart-data"][2:]
    )
    grpo = dict(zip(("script", "search", "env"), parse_config(GRPO_CONFIGS, by["grpo"][1:])[:3], strict=True))
    assert warm_env == grpo["env"] and warm_env.observation == "verbal"
    assert (warm_search.reranker_model, warm_search.reranker_base_url, warm_search.reranker_max_tokens) == (
        grpo["search"].reranker_model, grpo["search"].reranker_base_url, grpo["search"].reranker_max_tokens)  # fmt: skip


def test_the_student_learns_from_the_rule_teacher_unless_told_otherwise(tmp_path: Path):
    """Default: the rule teacher labels rules_questions reranker-world questions (the model teacher is still
    measured on its own questions); `reranker_teacher: model` exports the model teacher's annotations."""
    by = {s.name: fill(s.argv, URLS) for s in build_stages(QuickstartConfig(), tmp_path / "run")}
    assert by["export-sft"][:2] == ["annotate", "rules"]
    (rules,) = parse_config((RulesConfig,), by["export-sft"][2:])
    assert rules.max_questions == 30 and rules.qa_path.endswith("reranker-world/hf/questions")
    assert by["reranker-world"][by["reranker-world"].index("--num_questions") + 1] == "30"
    assert "sft/verbal_reranker_world_cpu.yaml" in by["reranker-sft"][2]
    assert rules.doc_max_words == 0 and not rules.sub_questions and not rules.cite_all
    assert "--num_train_epochs" not in by["reranker-sft"]
    # rules_agent_view: labelled as the agent will use it: passages cut as GRPO's environment cuts them, each
    # hop's query too; rules_cite_all: every comment quotes; reranker_epochs reaches the SFT
    config = QuickstartConfig(rules_agent_view=True, rules_cite_all=True, reranker_epochs=2)
    view = {s.name: fill(s.argv, URLS) for s in build_stages(config, tmp_path / "v")}
    (rules,) = parse_config((RulesConfig,), view["export-sft"][2:])
    grpo_env = parse_config(GRPO_CONFIGS, view["grpo"][1:])[2]
    assert rules.doc_max_words == grpo_env.doc_max_words == 30 and rules.sub_questions and rules.cite_all
    assert view["reranker-sft"][view["reranker-sft"].index("--num_train_epochs") + 1] == "2"
    model = {s.name: s.argv for s in build_stages(QuickstartConfig(reranker_teacher="model"), tmp_path / "r")}
    assert model["export-sft"][:2] == ("annotate", "export-sft")
    assert model["reranker-world"][model["reranker-world"].index("--num_questions") + 1] == "8"


def test_bad_settings_are_named():
    with pytest.raises(ConfigError, match="reranker_teacher: 'gpt' is not one of"):
        QuickstartConfig(reranker_teacher="gpt")
    with pytest.raises(ConfigError, match="stop_after: unknown stage 'wrld'"):
        QuickstartConfig(stop_after="wrld")
    with pytest.raises(ConfigError, match="grpo_steps"):
        QuickstartConfig(grpo_steps=0)
    with pytest.raises(ConfigError, match="reranker_epochs: must be > 0"):
        QuickstartConfig(reranker_epochs=0)


def test_runs_resumes_and_recovers_from_a_failed_stage(tmp_path: Path, smollm2_path: Path, capsys):
    config = QuickstartConfig(output_root=str(tmp_path), stop_after="reranker-world", **TINY)
    run = main(config)
    state = read_state(run)
    assert [n for n, r in state["stages"].items() if r["status"] == "done"] == [
        "models",
        "world",
        "reranker-world",
    ]
    assert (run / "world" / "corpus.jsonl").is_file() and (run / "logs" / "world.log").is_file()
    assert state["stages"]["world"]["command"].startswith("r3forge data synth-world --seed 0")
    assert not state["finished"]

    # the next stage cannot write its output: it fails, names itself and its log, keeps the earlier outputs
    (run / "index").write_text("in the way")
    config.stop_after = "index"
    with pytest.raises(StageFailed, match=r"stage 'index' failed \(exit code 1\)") as err:
        main(config)  # finds the unfinished run by its settings
    assert f"{run}/logs/index.log" in str(err.value) and "resume at 'index'" in str(err.value)
    assert read_state(run)["stages"]["index"]["status"] == "failed"
    assert (run / "world" / "corpus.jsonl").is_file()

    # the rerun resumes at the failed stage, moving its partial output aside (kept), and skips the done ones
    capsys.readouterr()
    assert main(config) == run
    log = capsys.readouterr().err
    assert "resuming at 'index'" in log and "== [2/" not in log
    assert (run / "index.interrupted-1").read_text() == "in the way"
    assert (run / "index" / "manifest.json").is_file() or any((run / "index").iterdir())
    state = read_state(run)
    index = state["stages"]["index"]
    assert index | {"seconds": 0} == {"status": "done", "attempts": 2, "seconds": 0,
                                     "command": index["command"], "peak_rss_gib": index["peak_rss_gib"],
                                     "peak_tree_rss_gib": index["peak_tree_rss_gib"]}  # fmt: skip
    # the stage's memory (a Python process that imports torch: well over 50 MiB, far under 8 GiB)
    assert 0.05 < index["peak_rss_gib"] < 8 and 0.05 < index["peak_tree_rss_gib"] < 8

    # a partial report from what ran so far: the stage table and the exact commands
    report = write_report(run, config, build_stages(config, run), state).read_text()
    assert f"| {index['peak_rss_gib']:.2f} | {index['peak_tree_rss_gib']:.2f} |" in report
    assert "| 4 | `index` |" in report and shlex.join(["--output", f"{run}/index"]) in report
    assert "## Resolved configs" in report and "world_questions: 30" in report


def test_sigterm_stops_the_stage_and_a_rerun_resumes_it(tmp_path: Path, smollm2_path: Path, capsys):
    """SIGTERM (a scheduler, `kill`) mid-stage: the stage's process goes down with the quickstart, which says
    where it stopped; the same command then resumes at that stage."""
    flags = [f"--{k}={' '.join(map(str, v)) if isinstance(v, list) else v}" for k, v in TINY.items()]
    argv = [sys.executable, "-m", "r3forge", "quickstart", "--output_root", str(tmp_path), "--stop_after",
            "index", *flags]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # wait for the world stage's child to run
        states = list(tmp_path.glob("quickstart-*/state.json"))
        if (
            states
            and read_state(states[0].parent).get("stages", {}).get("world", {}).get("status") == "running"
        ):
            break
        time.sleep(0.2)
    else:
        proc.kill()
        pytest.fail("the world stage never started")
    run = states[0].parent
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    err = proc.communicate(timeout=60)[1]
    assert proc.returncode == 128 + signal.SIGTERM
    assert f"interrupted during 'world'; the finished stages are kept in {run}" in err
    children = subprocess.run(["pgrep", "-f", f"synth-world.*{run}"], capture_output=True, text=True).stdout
    assert children.strip() == "", "the stage's process outlived the quickstart"
    assert read_state(run)["stages"]["world"]["status"] == "running"

    capsys.readouterr()
    config = QuickstartConfig(output_root=str(tmp_path), stop_after="index", **TINY)
    assert main(config) == run
    assert "resuming at 'world'" in capsys.readouterr().err
    assert read_state(run)["stages"]["world"]["attempts"] == 2 and (run / "world" / "corpus.jsonl").is_file()


def test_find_run_matches_settings(tmp_path: Path):
    config = QuickstartConfig(output_root=str(tmp_path), **TINY)
    run, state = find_run(config)
    assert state == {} and run.parent == tmp_path and run.name.startswith("quickstart-")
    run.mkdir()
    (run / "state.json").write_text(json.dumps({"settings": {"seed": 5}, "stages": {}, "finished": False}))
    assert find_run(config)[0] != run  # other settings: not resumed
    with pytest.raises(ConfigError, match=r"other settings \(.*world_questions"):
        find_run(QuickstartConfig(run_dir=str(run), **TINY))


@pytest.mark.slow
def test_the_whole_quickstart_small(tmp_path: Path, smollm2_path: Path):
    """Every stage for real (two vLLM servers, two SFTs, GRPO), at toy sizes: ~10 min on 2 cores."""
    config = QuickstartConfig(output_root=str(tmp_path), world_passages=300, world_questions=60,
                              annotate_questions=3, docs_per_question=4, rules_questions=4, reranker_eval_samples=10, rag_questions=4,
                              rag_thresholds=[0.0], warmstart_questions=8, grpo_steps=2, agent_questions=4)  # fmt: skip
    run = main(config)
    state = read_state(run)
    assert state["finished"] and all(r["status"] == "done" for r in state["stages"].values())
    report = (run / "REPORT.md").read_text()
    for heading in ("## 1. Teacher annotation", "## 2. Verbal reranker student", "## 3. Single-turn RAG",
                    "## 4. Search agent", "## Next: the same recipes at paper scale"):  # fmt: skip
        assert heading in report
    assert "| after GRPO |" in report and (run / "grpo_reward.png").is_file()
    assert list((run / "rag").glob("pareto_*.png")) and (run / "reranker" / "config.json").is_file()
