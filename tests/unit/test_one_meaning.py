"""One meaning per name (issue 27): "commands" are the CLI's subcommands (src/gpufleet/commands/), "workers" the
execution nodes a region's hosts are audited from (src/gpufleet/workers.py). Running external programs on a target
is module_utils/programs.py; ansible-core's fork processes are forks, a reading thread is a thread."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# Code that neither holds the CLI's subcommands nor drives or reports the execution nodes (the report's "workers"
# section and bench/workers.py do: the same meaning).
NODES = {REPO / "bench" / "workers.py", *(REPO / "plugins" / "plugin_utils" / "report").glob("*.py")}
ELSEWHERE = sorted(
    {*(REPO / "plugins").rglob("*.py"), *(REPO / "bench").glob("*.py"), *(REPO / "bench" / "benchlib").glob("*.py")}
    - NODES
)
ANSIBLE_CORE_NAMES = {"_workers", "WorkerProcess"}  # ansible-core's own: StrategyBase._workers, its fork class


def _names(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            yield node.id
        elif isinstance(node, ast.Attribute):
            yield node.attr
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield node.name
        elif isinstance(node, ast.arg):
            yield node.arg
        elif isinstance(node, ast.alias):
            yield node.asname or ""


def test_commands_are_only_the_clis_subcommands():
    assert (REPO / "src" / "gpufleet" / "commands" / "__init__.py").is_file()
    stray = [str(p.relative_to(REPO)) for p in ELSEWHERE if p.stem == "commands"]
    assert not stray, stray
    assert (REPO / "plugins" / "module_utils" / "programs.py").is_file()


def test_workers_are_only_the_execution_nodes():
    found = []
    for path in ELSEWHERE:
        if "__pycache__" in path.parts:
            continue
        for name in _names(ast.parse(path.read_text(encoding="utf-8"))):
            if "worker" in name.lower() and name not in ANSIBLE_CORE_NAMES:
                found.append((str(path.relative_to(REPO)), name))
    assert not found, found
