"""No shell anywhere: commands are argument lists, never strings built from host data."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PYTHON = [
    p
    for base in ("plugins", "src", "roles")
    for p in (REPO / base).rglob("*")
    if p.is_file() and (p.suffix == ".py" or p.read_bytes()[:40].startswith(b"#!/usr/bin/env python"))
]
FORBIDDEN = re.compile(r"shell\s*=\s*True|use_unsafe_shell\s*=\s*True|os\.system\(|os\.popen\(|commands\.getoutput")


def test_there_is_python_to_check():
    assert len(PYTHON) > 25


def test_no_shell_execution():
    hits = [
        f"{p.relative_to(REPO)}:{n}"
        for p in PYTHON
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if FORBIDDEN.search(line)
    ]
    assert not hits, hits


def _string_like(node: ast.AST) -> bool:
    """A str literal, an f-string, or string formatting/concatenation (a list + list is fine)."""
    if isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant) and isinstance(node.value, str)):
        return True
    if isinstance(node, ast.BinOp):
        return isinstance(node.op, ast.Mod) or _string_like(node.left) or _string_like(node.right)
    return False


def test_run_command_gets_argument_lists():
    """module.run_command("...") would go through a shell-like split of a string: only lists are allowed."""
    bad = []
    for path in PYTHON:
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "run_command":
                if node.args and _string_like(node.args[0]):
                    bad.append(f"{path.relative_to(REPO)}:{node.lineno}")
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("run", "Popen", "check_output", "call")
                and node.args
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "subprocess"
                and _string_like(node.args[0])
            ):
                bad.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert not bad, bad


def test_roles_use_no_shell_module():
    tasks = [p for p in (REPO / "roles").rglob("*.yml")] + list((REPO / "playbooks").glob("*.yml"))
    hits = [
        str(p.relative_to(REPO)) for p in tasks if re.search(r"^\s*(ansible\.builtin\.)?shell:", p.read_text(), re.M)
    ]
    assert not hits, hits


def test_bandit_is_clean():
    """bandit over src/ and plugins/ (`make lint` runs it too); an exception is `# nosec BXXX  # reason` on its line."""
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "bandit", "-q", "-r", "-f", "custom", "src", "plugins"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    nosec = [
        f"{p.relative_to(REPO)}:{n}: {line.strip()}"
        for p in PYTHON
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if "# nosec" in line
    ]
    # each exception names the test it silences and says why
    assert all(re.search(r"# nosec B\d{3}\s+# \w", line) for line in nosec), nosec


def test_the_threat_model_names_tests_that_exist():
    """docs/security.md backs each claim with a test: every test file and test it names exists (a renamed or removed
    test makes the page untrue), and each kind of attacker has its section."""
    text = (REPO / "docs" / "security.md").read_text()
    for section in ("A compromised GPU host", "A compromised execution node", "A local user on a GPU host", "A reader"):
        assert f"## {section}" in text, section
    named = re.findall(r"`(tests/[\w/]+\.py)((?:::\w+)?)`", text)
    # `::name` right after a cited file (", `::other`") belongs to the last file named
    refs, last = [], None
    for token in re.findall(r"`(tests/[\w/]+\.py(?:::\w+)?|::\w+)`", text):
        if token.startswith("::"):
            refs.append((last, token[2:]))
        else:
            last, _, name = token.partition("::")
            refs.append((last, name or None))
    assert "_TESTS" not in text, "a placeholder is left"
    assert len(named) >= 15 and len(refs) >= len(named)
    for path, name in refs:
        source = REPO / path
        assert source.is_file(), f"docs/security.md names {path}, which does not exist"
        if name:
            assert re.search(rf"^(async )?def {name}\(", source.read_text(), re.M), f"{path} has no test {name}"
