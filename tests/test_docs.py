"""The guides' result tables match what their result files render (tests/benchmarks/render_tables.py)."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

_SPEC = importlib.util.spec_from_file_location(
    "render_tables", Path(__file__).parent / "benchmarks" / "render_tables.py"
)
render_tables = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(render_tables)
TableError, main, render_guide = render_tables.TableError, render_tables.main, render_tables.render_guide

RESULT = {"tables": {"arms": {"columns": ["arm", "EM"], "align": "lr", "rows": [["raw", "0.364"]]}}}
RENDERED = "<!-- table: results/r.json#arms -->\n| arm | EM |\n|---|---:|\n| raw | 0.364 |\n<!-- /table -->"


def test_every_table_in_the_guides_matches_its_result_file():
    assert main(["--check"]) == 0  # on failure: run tests/benchmarks/render_tables.py, review the diff


def _repo(tmp_path: Path, guide: str) -> Path:
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "r.json").write_text(json.dumps(RESULT))
    (tmp_path / "README.md").write_text(guide)
    return tmp_path


def test_a_table_typed_by_hand_fails_the_check_and_rendering_fixes_it(tmp_path: Path, capsys):
    stale = RENDERED.replace("0.364", "0.400")
    root = _repo(tmp_path, f"# Results\n\n{stale}\n\nmore text\n")
    assert main(["--check"], root) == 1
    assert "README.md:3: table differs from its result file" in capsys.readouterr().err
    assert main([], root) == 0
    assert (root / "README.md").read_text() == f"# Results\n\n{RENDERED}\n\nmore text\n"
    assert main(["--check"], root) == 0


@pytest.mark.parametrize(
    "guide, message",
    [
        ("<!-- table: results/r.json#arms -->\n| x |\n", r"README.md:1: no <!-- /table -->"),
        (
            "<!-- table: results/gone.json#arms -->\n<!-- /table -->",
            r"README.md:1: result file results/gone.json",
        ),
        (
            "text\n<!-- table: results/r.json#seeds -->\n<!-- /table -->",
            r"README.md:2: .* no table 'seeds' \(it has: arms\)",
        ),
    ],
)
def test_a_marker_that_cannot_be_rendered_names_the_guide_line(tmp_path: Path, guide: str, message: str):
    root = _repo(tmp_path, guide)
    with pytest.raises(TableError, match=message):
        render_guide(guide, "README.md", root)


LINK = re.compile(r"\]\((?!https?://|mailto:)([^)\s]+)\)")


def anchors(markdown: str) -> set[str]:
    """GitHub's anchors of a markdown file's headings (lowercase; punctuation but - and _ dropped; spaces -).

    >>> sorted(anchors("# Two commands\\n## `bench_bm25.py`\\n```\\n# not a heading\\n```"))
    ['bench_bm25py', 'two-commands']
    """
    found, fenced = set(), False
    for line in markdown.splitlines():
        fenced ^= line.startswith("```")
        if not fenced and (m := re.match(r"#{1,6} (.+)", line)):
            found.add(re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-"))
    return found


def test_every_relative_link_in_the_guides_resolves():
    root = render_tables.ROOT
    guides = sorted({p for pattern in render_tables.GUIDES for p in root.glob(pattern)})
    broken = []
    for guide in guides:
        text = guide.read_text(encoding="utf-8")
        for m in LINK.finditer(text):
            path, _, anchor = m.group(1).partition("#")
            target = (guide.parent / path).resolve() if path else guide
            line = text.count("\n", 0, m.start()) + 1
            if not target.exists():
                broken.append(f"{guide.relative_to(root)}:{line}: {m.group(1)} (no such file)")
            elif (
                anchor
                and target.suffix == ".md"
                and anchor not in anchors(target.read_text(encoding="utf-8"))
            ):
                broken.append(f"{guide.relative_to(root)}:{line}: {m.group(1)} (no such heading)")
    assert broken == []
