"""Import rules over the AST of src/ and plugins/ (issue 27): no module reaches into another of ours for a private
name (``from x import _name``, ``x._name``): what two modules share is public in its one home. And the CLI
(src/gpufleet) imports no action plugin: what an action and the CLI share lives in plugin_utils or module_utils."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OURS = ("gpufleet", "ansible_collections.gpufleet")

# Private names still reached into, each with who removes the entry (and why it is not done yet). Empty is the goal.
ALLOWED: set[tuple[str, str]] = set()


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _ours(module: str | None, level: int) -> bool:
    return level > 0 or (module or "").split(".")[0] == OURS[0] or (module or "").startswith(OURS[1])


def _sources() -> list[Path]:
    return sorted(p for top in ("src", "plugins") for p in (REPO / top).rglob("*.py"))


def private_reaches(path: Path) -> list[str]:
    """``module._name`` and ``from module import _name`` in one file, where module is ours: ``LINE what``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    bound: set[str] = set()  # names bound to our modules (or to what they export)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            bound |= {(a.asname or a.name).split(".")[0] for a in node.names if _ours(a.name, 0)}
        elif isinstance(node, ast.ImportFrom) and _ours(node.module, node.level):
            for alias in node.names:
                bound.add(alias.asname or alias.name)
                if _private(alias.name):
                    found.append(f"{node.lineno} from {'.' * node.level}{node.module or ''} import {alias.name}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr) and isinstance(node.value, ast.Name):
            if node.value.id in bound:
                found.append(f"{node.lineno} {node.value.id}.{node.attr}")
    return found


def test_no_module_imports_a_private_name_of_another():
    found = []
    for path in _sources():
        rel = path.relative_to(REPO).as_posix()
        for where in private_reaches(path):
            line, what = where.split(" ", 1)
            if (rel, what) not in ALLOWED:
                found.append(f"{rel}:{line}: {what}")
    assert not found, "private names used across modules (make them public in their one home):\n" + "\n".join(found)


def test_the_allow_list_names_only_what_is_still_there():
    """An entry whose reach is gone must leave the list (so the list only shrinks)."""
    seen = {(p.relative_to(REPO).as_posix(), w.split(" ", 1)[1]) for p in _sources() for w in private_reaches(p)}
    assert ALLOWED <= seen, sorted(ALLOWED - seen)


def test_the_cli_imports_no_action_plugin():
    found = []
    for path in sorted((REPO / "src").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
            found += [f"{path.relative_to(REPO)}:{node.lineno}: {n}" for n in names if ".plugins.action" in f".{n}"]
    assert not found, "the CLI imports an action plugin (share through plugin_utils or module_utils):\n" + "\n".join(
        found
    )


def test_the_checks_see_a_private_reach(tmp_path):
    """The reader itself: each form it must catch, and what it must leave alone."""
    src = tmp_path / "m.py"
    src.write_text(
        "import argparse\n"
        "from gpufleet.runner import _clean, collect\n"
        "from ansible_collections.gpufleet.tuning.plugins.module_utils import nvml\n"
        "from . import base as b\n"
        "x = nvml._text(1) + b._get(2) + argparse._SubParsersAction + nvml.__name__ + collect._ok\n"
    )
    assert sorted(private_reaches(src)) == sorted(
        ["2 from gpufleet.runner import _clean", "5 nvml._text", "5 b._get", "5 collect._ok"]
    )


def test_one_plain_copier():
    """Ansible's values made plain JSON: fleet.plain is the one copier (the report, a worker's host variables, the
    effective_policy filter), imported where needed, not copied."""
    homes = [
        f"{path.relative_to(REPO).as_posix()}:{node.name}"
        for path in _sources()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.FunctionDef) and node.name.strip("_") == "plain"
    ]
    assert homes == ["plugins/plugin_utils/fleet.py:plain"]
