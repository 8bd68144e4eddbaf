"""Modules shaped like ansible.posix's sysctl (issue 27 §2): a module file keeps its documentation, its argument spec
and a short main(); the work (validate, plan, apply outside check mode, diff) lives in module_utils, where it can be
read and tested on its own. Read over the AST of plugins/modules/*.py, so a new module is held to it too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
MODULES = sorted((REPO / "plugins" / "modules").glob("*.py"))
MAX_MAIN_LINES = 60

# module_utils files every function (methods and nested ones too) of which is held to the same length: nvml.py
# (issue 27 §2 names its _read_gpu, once 131 lines, now one function per section) and the rollback module's work.
WHOLE_FILES = ["plugins/module_utils/nvml.py", "plugins/module_utils/rollback_restore.py"]


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def _function(tree: ast.Module, name: str) -> ast.FunctionDef | None:
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    return None


def _lines(func: ast.FunctionDef) -> int:
    """Lines from the def to the function's last line (decorators aside)."""
    return func.end_lineno - func.lineno + 1


def _documentation(tree: ast.Module) -> dict:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "DOCUMENTATION" for t in node.targets
        ):
            return yaml.safe_load(node.value.value)
    raise AssertionError("no DOCUMENTATION")


def _is_changing(doc: dict) -> bool:
    """A module that can change a host: anything not documented with the read-only attributes fragment."""
    return "gpufleet.tuning.attributes.read_only" not in (doc.get("extends_documentation_fragment") or [])


def _action_only(path: Path) -> bool:
    """A documentation stub whose work an action plugin of the same name does on the controller."""
    return (REPO / "plugins" / "action" / path.name).is_file()


def _check_mode_keyword(func: ast.FunctionDef) -> list:
    """The supports_check_mode values given to each AnsibleModule(...) call in ``func``."""
    found = []
    for node in ast.walk(func):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "AnsibleModule":
            value = next((kw.value for kw in node.keywords if kw.arg == "supports_check_mode"), None)
            found.append(value.value if isinstance(value, ast.Constant) else value)
    return found


def test_there_are_modules_to_check():
    names = {p.stem for p in MODULES}
    assert {"nic_settings", "route_congctl", "sysctl_settings", "sysfs_settings", "gpu_info"} <= names


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.stem)
def test_module_main_is_short(path):
    rel = str(path.relative_to(REPO))
    main = _function(_tree(path), "main")
    if main is None and _action_only(path):
        pytest.skip(f"{rel}: documentation only, plugins/action/{path.name} does the work")
    assert main is not None, f"{rel}: no main()"
    assert _lines(main) <= MAX_MAIN_LINES, (
        f"{rel}: main() is {_lines(main)} lines (at most {MAX_MAIN_LINES}): move validate / plan / apply / diff "
        "into module_utils and keep main() to the argument spec and the calls"
    )


@pytest.mark.parametrize("rel", WHOLE_FILES)
def test_every_function_of_these_module_utils_is_short(rel):
    funcs = [n for n in ast.walk(_tree(REPO / rel)) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    assert funcs, f"{rel}: no functions found"
    long = sorted(f"{f.name}() {_lines(f)} lines" for f in funcs if _lines(f) > MAX_MAIN_LINES)
    assert not long, f"{rel}: functions longer than {MAX_MAIN_LINES} lines: {', '.join(long)}"


def test_the_length_check_sees_a_long_main(tmp_path):
    long_main = tmp_path / "long.py"
    long_main.write_text("def main():\n" + "    x = 1\n" * MAX_MAIN_LINES)
    assert _lines(_function(_tree(long_main), "main")) == MAX_MAIN_LINES + 1


def test_changing_modules_support_check_mode():
    changing = []
    for path in MODULES:
        tree = _tree(path)
        if not _is_changing(_documentation(tree)) or (_function(tree, "main") is None and _action_only(path)):
            continue
        changing.append(path.stem)
        values = _check_mode_keyword(_function(tree, "main"))
        assert values == [True], f"{path.name}: main() must build AnsibleModule(..., supports_check_mode=True)"
    # The modules that change hosts are found (a broken detector would check nothing).
    assert {
        "gpu_settings",
        "nic_settings",
        "route_congctl",
        "sysctl_settings",
        "sysfs_settings",
        "rollback",
        "nvidia_driver_reload",
    } <= set(changing)
