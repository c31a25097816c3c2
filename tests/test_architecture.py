"""The import contract of ARCHITECTURE.md, checked with import-linter (`[tool.importlinter]` in pyproject.toml)."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import r3forge.recipes.grpo
import r3forge.recipes.sft

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
# the packages that use annotation itself: the command table, the quickstart (it annotates), the verbal reranker
# (the teacher's step run by a student), SFT's task eval (a student scored on the teacher's task)
ANNOTATION_USERS = ("annotate", "cli", "quickstart", "rerank", "sft")
# the recipes are above every package, so no module imports them; these name them by string (ARCHITECTURE.md):
# the command table (`r3forge sft|grpo`) and the `python -m` entry points of accelerate / torchrun
RECIPE_EDGES = [
    "src/r3forge/agent/grpo.py: r3forge.recipes.grpo",
    "src/r3forge/cli.py: r3forge.recipes.grpo:cli",
    "src/r3forge/cli.py: r3forge.recipes.sft:cli",
    "src/r3forge/sft/__main__.py: r3forge.recipes.sft",
]


def lint(src: Path, config: Path, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(src)}
    return subprocess.run([str(LINT_IMPORTS), "--no-cache", str(config)], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=300)  # fmt: skip


def test_no_upward_imports_and_no_package_cycles():
    out = lint(ROOT / "src", ROOT / "pyproject.toml", ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "1 kept, 0 broken" in out.stdout


def test_the_contract_catches_an_upward_import_and_an_unplaced_package(tmp_path: Path):
    shutil.copytree(ROOT / "src" / "r3forge", tmp_path / "src" / "r3forge")
    loaders = tmp_path / "src" / "r3forge" / "data" / "loaders.py"
    loaders.write_text(
        loaders.read_text() + "\n\ndef _upward():\n    from r3forge.agent import env  # noqa\n"
    )
    (tmp_path / "src" / "r3forge" / "newpkg").mkdir()
    (tmp_path / "src" / "r3forge" / "newpkg" / "__init__.py").write_text("")
    out = lint(tmp_path / "src", ROOT / "pyproject.toml", tmp_path)
    assert out.returncode == 1
    assert "r3forge.data.loaders -> r3forge.agent.env" in out.stdout
    assert "r3forge.newpkg" in out.stdout


def imported_names(node: ast.AST) -> list[str]:
    """The modules an import statement names (`from a import b`: both `a` and `a.b`); [] for other nodes."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom):
        return [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
    return []


def annotate_importers(src: Path) -> list[str]:
    """`file:line` of every import of `r3forge.annotate` outside ANNOTATION_USERS (recipes included)."""
    found = []
    for path in sorted([*(src / "r3forge").rglob("*.py"), *(src.parent / "recipes").glob("*.py")]):
        parts = (
            path.relative_to(src / "r3forge").parts if path.is_relative_to(src / "r3forge") else ("recipes",)
        )
        if parts[0].removesuffix(".py") in ANNOTATION_USERS:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = imported_names(node)
            if any(n == "r3forge.annotate" or n.startswith("r3forge.annotate.") for n in names):
                found.append(f"{path.relative_to(src.parent)}:{node.lineno}")
    return found


def test_annotate_is_imported_only_by_its_users(tmp_path: Path):
    assert annotate_importers(ROOT / "src") == []
    shutil.copytree(ROOT / "src" / "r3forge", tmp_path / "src" / "r3forge")
    (tmp_path / "recipes").mkdir()
    bm25 = tmp_path / "src" / "r3forge" / "retrieval" / "bm25.py"
    bm25.write_text(bm25.read_text() + "\n\ndef _x():\n    from r3forge import annotate  # noqa\n")
    (tmp_path / "recipes" / "r.py").write_text("import r3forge.annotate.rules\n")
    assert annotate_importers(tmp_path / "src") == [
        "recipes/r.py:1",
        f"src/r3forge/retrieval/bm25.py:{len(bm25.read_text().splitlines())}",
    ]


def recipe_edges(src: Path) -> list[str]:
    """`file: name` of every import of `r3forge.recipes` and every string naming it (runpy, the command table)."""
    found = []
    for path in sorted((src / "r3forge").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = imported_names(node)
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                names = [node.value]
            found += [
                f"{path.relative_to(src.parent)}: {n}" for n in names if n.startswith("r3forge.recipes")
            ]
    return sorted(found)


def test_only_the_declared_edges_reach_the_recipes(tmp_path: Path):
    assert recipe_edges(ROOT / "src") == RECIPE_EDGES
    shutil.copytree(ROOT / "src" / "r3forge", tmp_path / "src" / "r3forge")
    env = tmp_path / "src" / "r3forge" / "agent" / "env.py"
    env.write_text(env.read_text() + "\n\ndef _x():\n    from r3forge.recipes import grpo  # noqa\n")
    assert "src/r3forge/agent/env.py: r3forge.recipes" in recipe_edges(tmp_path / "src")


def test_the_wheel_lists_every_package_and_the_recipes():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    found = {".".join(p.parent.relative_to(ROOT / "src").parts) for p in (ROOT / "src").rglob("__init__.py")}
    assert set(data["packages"]) == found | {"r3forge.recipes"}
    assert data["package-dir"]["r3forge.recipes"] == "recipes"
    assert Path(r3forge.recipes.sft.__file__).resolve() == ROOT / "recipes" / "sft.py"
    assert callable(r3forge.recipes.grpo.main)
