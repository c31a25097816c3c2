"""Render the guides' result tables from their result files, or check that they match.

    .venv/bin/python tests/benchmarks/render_tables.py          # rewrite every marked table
    .venv/bin/python tests/benchmarks/render_tables.py --check  # exit 1 naming each guide:line that differs

A guide (`GUIDES`: README.md, ARCHITECTURE.md, the README.md of recipes/, configs/, launch/, data/ and of each
folder in tests/) marks a table by the result file
and the table name it is rendered from, a path relative to the repository root:

    <!-- table: tests/benchmarks/figures/student_cite.json#students -->
    | student | RA-R |
    |---|---:|
    | every label quotes | 0.716 |
    <!-- /table -->

A result file holds its tables as `{"tables": {name: {"columns": [...], "align": "lr...", "rows": [[...]]}}}`,
each cell the text to print: the script that measured the figures formats them, so a guide never holds a
figure typed by hand. `tests/test_docs.py` runs the check in the default suite.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# the front page, the architecture and each folder's guide (run folders and environments are not guides)
GUIDES = ("README.md", "ARCHITECTURE.md", "recipes/README.md", "configs/README.md", "launch/README.md")
GUIDES += ("data/README.md", "tests/*/README.md")
_OPEN = re.compile(r"^<!-- table: (?P<file>[^#\s]+)#(?P<name>[\w.-]+) -->$")
_CLOSE = "<!-- /table -->"


class TableError(ValueError):
    """A marked table cannot be rendered: the message starts with guide:line."""


def markdown_table(table: dict) -> list[str]:
    """The markdown lines of one result table (`align`: one l, r or c per column; default l).

    >>> markdown_table({"columns": ["arm", "EM"], "align": "lr", "rows": [["raw", "0.364"]]})
    ['| arm | EM |', '|---|---:|', '| raw | 0.364 |']
    """
    columns = [str(c).replace("|", "\\|") for c in table["columns"]]
    align = table.get("align", "l" * len(columns))
    if len(align) != len(columns) or set(align) - set("lrc"):
        raise ValueError(f"align {align!r}: one of l, r, c per column ({len(columns)} columns)")
    rule = {"l": "---", "r": "---:", "c": ":---:"}
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join(rule[a] for a in align) + "|"]
    for i, row in enumerate(table["rows"]):
        if len(row) != len(columns):
            raise ValueError(f"row {i} has {len(row)} cells for {len(columns)} columns")
        lines.append("| " + " | ".join(str(cell).replace("|", "\\|") for cell in row) + " |")
    return lines


def _load_table(file: str, name: str, root: Path, where: str) -> list[str]:
    path = root / file
    try:
        tables = json.loads(path.read_text(encoding="utf-8"))["tables"]
    except FileNotFoundError:
        raise TableError(f"{where}: result file {file} does not exist") from None
    except (ValueError, KeyError, TypeError) as e:
        raise TableError(f"{where}: {file} holds no 'tables' object ({e})") from None
    if name not in tables:
        raise TableError(f"{where}: {file} has no table {name!r} (it has: {', '.join(sorted(tables))})")
    try:
        return markdown_table(tables[name])
    except (ValueError, KeyError, TypeError) as e:
        raise TableError(f"{where}: {file}#{name}: {e}") from None


def render_guide(text: str, guide: str, root: Path = ROOT) -> tuple[str, list[str]]:
    """`text` with every marked table rendered from its result file, and the guide:line of each block that
    changed. `TableError` names guide:line for an unclosed block or a table that cannot be rendered."""
    lines, out, changed, i = text.split("\n"), [], [], 0
    while i < len(lines):
        out.append(lines[i])
        match = _OPEN.match(lines[i].strip())
        i += 1
        if match is None:
            continue
        where = f"{guide}:{i}"
        end = next((j for j in range(i, len(lines)) if lines[j].strip() == _CLOSE), None)
        if end is None:
            raise TableError(f"{where}: no {_CLOSE} after this table marker")
        table = _load_table(match["file"], match["name"], root, where)
        if lines[i:end] != table:
            changed.append(where)
        out += [*table, lines[end]]
        i = end + 1
    return "\n".join(out), changed


def guides(root: Path = ROOT) -> list[Path]:
    """The guides under `root` that may hold marked tables (`GUIDES`), each once, in path order."""
    return sorted({p for pattern in GUIDES for p in root.glob(pattern)})


def main(argv: list[str] | None = None, root: Path = ROOT) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="Change nothing; exit 1 if any table differs.")
    args = parser.parse_args(argv)
    stale = []
    for path in guides(root):
        name = str(path.relative_to(root))
        text = path.read_text(encoding="utf-8")
        rendered, changed = render_guide(text, name, root)
        stale += changed
        if changed and not args.check:
            path.write_text(rendered, encoding="utf-8")
    for where in stale:
        verb = "differs from its result file" if args.check else "rendered"
        print(f"{where}: table {verb}", file=sys.stderr)
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
