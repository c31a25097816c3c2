from pathlib import Path

from r3forge.demo import CONDITIONS, DemoConfig, main


def test_demo_end_to_end_writes_report(tmp_path: Path, smollm2_path: Path):
    config = DemoConfig(
        num_questions=4, world_passages=200, world_questions=30, max_new_tokens=6, output_root=str(tmp_path)
    )
    run = main(config)
    report = (run / "REPORT.md").read_text()
    for cond in CONDITIONS:
        assert f"| {cond} |" in report
    assert len((run / "predictions.jsonl").read_text().splitlines()) == 4
    assert (run / "world" / "corpus.jsonl").exists() and (run / "config.yaml").exists()
    assert "num_questions: 4" in (run / "config.yaml").read_text()
