"""Every file gpufleet writes on a target goes through module_utils/fileio.write_atomic (temp file in the same
directory, fsync, rename): an interrupted run (SIGINT, a lost connection, a crash) leaves the old file or the new one,
never half of one. This test reads the code that runs on targets (modules, module_utils, the roles' boot scripts) and
fails on any other way of writing, creating, moving or removing a file, except the few listed below, each with the
reason it is safe."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TARGET_CODE = sorted(
    [*(REPO / "plugins" / "modules").glob("*.py"), *(REPO / "plugins" / "module_utils").glob("*.py")]
    + [p for p in (REPO / "roles").glob("*/files/*") if p.read_bytes()[:40].startswith(b"#!/usr/bin/env python")]
)

# (file, function, call) -> why it is not a half-writable file write.
ALLOWED = {
    ("plugins/module_utils/fileio.py", "write_atomic", "os.open"): "the atomic write's temp file (O_EXCL|O_NOFOLLOW)",
    ("plugins/module_utils/fileio.py", "write_atomic", "os.fdopen"): "the atomic write itself",
    ("plugins/module_utils/fileio.py", "write_atomic", "os.rename"): "the atomic write itself",
    ("plugins/module_utils/fileio.py", "write_atomic", "os.unlink"): "removes its own temp file on failure",
    ("plugins/module_utils/fileio.py", "_open_directory", "os.mkdir"): "creates the target's directory",
    ("plugins/module_utils/sysctl.py", "write_runtime", "open"): "a /proc/sys value: the kernel takes it whole",
    ("plugins/module_utils/sysfs_settings.py", "write_value", "open"): "a /sys attribute: the kernel takes it whole",
    ("plugins/module_utils/rollback_restore.py", "restore_value", "open"): "a /proc/sys or /sys value, as above",
    ("plugins/module_utils/rollback_restore.py", "restore_file", "os.unlink"): "removes a file the run created: atomic",
    ("plugins/module_utils/link_files.py", "remove_legacy", "os.unlink"): (
        "removes our own 60-gpufleet-<nic>.link of older releases (it renamed bond members), recorded for rollback "
        "first: atomic"
    ),
    ("plugins/module_utils/rollback.py", "record", "open"): "opens the empty flock file in append mode",
    ("plugins/module_utils/rollback.py", "record", "os.makedirs"): "creates the record directory",
    ("plugins/module_utils/lock.py", "acquire", "os.makedirs"): "creates the lock directory",
    ("plugins/module_utils/lock.py", "release", "os.unlink"): "removes the lock: atomic",
    ("roles/host_tuning/files/gpufleet-sysfs-apply", "main", "open"): "a /sys attribute at boot, as above",
}
ALWAYS_WRITES = {
    "os.rename",
    "os.replace",
    "os.unlink",
    "os.remove",
    "os.truncate",
    "os.symlink",
    "os.link",
    "os.makedirs",
    "os.mkdir",
    "shutil.copy",
    "shutil.copy2",
    "shutil.copyfile",
    "shutil.move",
    "shutil.rmtree",
    "tempfile.mkstemp",
    "tempfile.NamedTemporaryFile",
    "tempfile.mkdtemp",
}
WRITE_METHODS = {"write_text", "write_bytes", "touch", "rename", "replace", "unlink", "mkdir", "symlink_to"}
WRITE_FLAGS = {"O_WRONLY", "O_RDWR", "O_CREAT", "O_TRUNC", "O_APPEND"}


def _name(func: ast.expr) -> str:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return f"{_name(func.value)}.{func.attr}"
    return "?"


def _mode(call: ast.Call, position: int) -> ast.expr | None:
    for kw in call.keywords:
        if kw.arg == "mode":
            return kw.value
    return call.args[position] if len(call.args) > position else None


def _writes(call: ast.Call) -> str | None:
    """The call's name if it can write, create, move or remove a file, else None."""
    name = _name(call.func)
    if name in ALWAYS_WRITES:
        return name
    if name in ("open", "io.open", "os.fdopen", "codecs.open"):
        mode = _mode(call, 1)
        if mode is None:
            return None  # read-only text mode
        if not (isinstance(mode, ast.Constant) and isinstance(mode.value, str)):
            return name  # a mode we cannot read here: assume it writes
        return name if set(mode.value) & set("wax+") else None
    if name == "os.open":
        flags = (
            {n.attr for n in ast.walk(call.args[1]) if isinstance(n, ast.Attribute)} if len(call.args) > 1 else set()
        )
        return name if flags & WRITE_FLAGS else None
    if isinstance(call.func, ast.Attribute) and call.func.attr in WRITE_METHODS:
        if call.func.attr == "replace" and len(call.args) != 1:
            return None  # str.replace(old, new), not Path.replace(target)
        return f"*.{call.func.attr}"
    return None


def _calls(path: Path):
    tree = ast.parse(path.read_text(), filename=str(path))

    def visit(node: ast.AST, function: str):
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else function
            if isinstance(child, ast.Call):
                what = _writes(child)
                if what:
                    yield function, what, child.lineno
            yield from visit(child, inner)

    yield from visit(tree, "<module>")


def test_there_is_target_code_to_check():
    names = {p.name for p in TARGET_CODE}
    assert {
        "fileio.py",
        "sysctl_settings.py",
        "gpu_settings.py",
        "remediation_lock.py",
        "gpufleet-sysfs-apply",
    } <= names


def test_target_code_writes_files_only_through_write_atomic():
    found = {}
    for path in TARGET_CODE:
        rel = str(path.relative_to(REPO))
        for function, what, line in _calls(path):
            found.setdefault((rel, function, what), []).append(line)
    unexplained = {f"{rel}:{lines[0]} {function}(): {what}" for (rel, function, what), lines in found.items()}
    unexplained -= {f"{k[0]}:{found[k][0]} {k[1]}(): {k[2]}" for k in ALLOWED if k in found}
    assert not unexplained, "write through fileio.write_atomic, or add to ALLOWED with the reason: " + ", ".join(
        sorted(unexplained)
    )
    # every exception is still needed (a stale entry would hide a future write in the same place)
    assert set(ALLOWED) <= set(found), sorted(set(ALLOWED) - set(found))


def test_the_detector_sees_the_ways_of_writing(tmp_path):
    code = tmp_path / "bad.py"
    code.write_text(
        "import os, shutil\nfrom pathlib import Path\n"
        "def f(p):\n"
        "    open(p, 'w').write('x')\n"
        "    open(p, mode='ab')\n"
        "    open(p)\n"
        "    os.open(p, os.O_WRONLY | os.O_CREAT)\n"
        "    os.open(p, os.O_RDONLY)\n"
        "    Path(p).write_text('x')\n"
        "    shutil.copy(p, p + '.bak')\n"
        "    os.replace(p, p)\n"
        "    'a-b'.replace('-', '_')\n"
    )
    assert [(what, line) for _, what, line in _calls(code)] == [
        ("open", 4),
        ("open", 5),
        ("os.open", 7),
        ("*.write_text", 9),
        ("shutil.copy", 10),
        ("os.replace", 11),
    ]
