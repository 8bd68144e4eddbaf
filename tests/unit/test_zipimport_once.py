"""zipimport_once (plugins/module_utils/zipimport_once.py): a module's zip is compiled once per import, not twice,
and imports give the same modules. Run in a fresh interpreter per case (it patches zipimport in its process), with
this interpreter and every other CPython 3.8+ found on the machine."""

from __future__ import annotations

import glob
import json
import subprocess
import sys
from pathlib import Path

import pytest

SHIM = Path(__file__).resolve().parents[2] / "plugins" / "module_utils" / "zipimport_once.py"

# Imports pkg.a (which imports pkg.b) from a zip, counting compile() per file with an audit hook (3.8+).
SCRIPT = r"""
import collections, json, os, sys, tempfile, zipfile
shim, mode = sys.argv[1], sys.argv[2]
z = os.path.join(tempfile.mkdtemp(), "payload.zip")
with zipfile.ZipFile(z, "w") as f:
    f.writestr("pkg/__init__.py", "X = 1\n")
    f.writestr("pkg/a.py", "from pkg import b\nA = b.B + 1\n")
    f.writestr("pkg/b.py", "B = 41\n")
    f.writestr("zipimport_once.py", open(shim).read())
counts = collections.Counter()
sys.addaudithook(lambda event, args: counts.update([os.path.basename(str(args[1]))])
                 if event == "compile" and args[1] and "pkg" in str(args[1]) else None)
sys.path.insert(0, z)
installed = None
if mode == "on":
    import zipimport_once
    installed = zipimport_once.install()
import pkg.a
print(json.dumps({"installed": installed, "A": pkg.a.A, "file": os.path.relpath(pkg.a.__file__, z),
                  "package": pkg.__path__[0] == os.path.join(z, "pkg"), "counts": counts,
                  "version": list(sys.version_info[:2])}))
"""


def interpreters():
    """This interpreter and the CPythons 3.8+ on the machine (the audit hook counting compiles needs 3.8)."""
    found = {sys.executable}
    for path in glob.glob("/root/.pyenv/versions/3.*/bin/python3") + glob.glob("/usr/bin/python3.1[0-9]"):
        minor = Path(path).resolve().name.replace("python", "").split(".")
        if len(minor) == 2 and minor[1].isdigit() and int(minor[1]) >= 8:
            found.add(path)
    return sorted(found)


def run(python, mode):
    out = subprocess.run([python, "-I", "-c", SCRIPT, str(SHIM), mode], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.parametrize("python", interpreters())
def test_each_file_compiled_once_with_the_same_result(python):
    before, after = run(python, "off"), run(python, "on")
    assert (after["A"], after["file"], after["package"]) == (before["A"], before["file"], before["package"]) == (
        42, "pkg/a.py", True)
    assert before["counts"] == {"__init__.py": 2, "a.py": 2, "b.py": 2}  # CPython's double compile
    if tuple(after["version"]) >= (3, 10):
        assert after["installed"] is True
        assert after["counts"] == {"__init__.py": 1, "a.py": 1, "b.py": 1}
    else:  # 3.8 and 3.9 load through load_module: left as they are
        assert after["installed"] is False and after["counts"] == before["counts"]


MODULES = Path(__file__).resolve().parents[2] / "plugins" / "modules"
# The modules that gather (each imports most of module_utils): the shim must come before their first module_utils.
GATHERING = ("audit", "remediation_targets", "gpu_probe", "gpu_info", "host_info", "nic_info", "gpu_topology",
             "gpu_settings")


@pytest.mark.parametrize("name", GATHERING)
def test_gathering_modules_install_it_before_their_module_utils(name):
    lines = (MODULES / f"{name}.py").read_text().splitlines()
    ours = [i for i, line in enumerate(lines) if line.startswith("from ansible_collections.gpufleet.tuning.plugins")]
    assert ours and "import zipimport_once" in lines[ours[0]], f"{name}: zipimport_once is not its first module_utils"
