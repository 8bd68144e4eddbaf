"""A host's gres lines are the host's own account of itself, and a compromised host can lie (issue 26): a second
NodeName= or a newline would point Slurm's gres.conf lines of another node (or of every node) at it, a File= could
name any device. The controller writes NodeName= (the inventory's name) and Name=gpu itself and takes from a host only
Type, File, Cores, Links and Flags, each of its shape; anything else is dropped and the host named in a warning.
The real fragment writer (gpufleet topology --gres) into a real file."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report import topology as view

from gpufleet.commands import topology as command

REPO = Path(__file__).resolve().parents[2]
GOOD = "Name=gpu Type=a100 File=/dev/nvidia0 Cores=0-31,64-95 Links=-1,12 Flags=nvidia_gpu_env"
HOSTILE = [
    "Name=gpu Type=a100 File=/dev/nvidia0 NodeName=evil",
    "Name=gpu File=/dev/nvidia1\nNodeName=gpu01 Name=gpu File=/dev/nvidia7",
    "Name=gpu File=/dev/nvidia1\rNodeName=gpu01",
    "Name=gpu File=/dev/nvidia1 Count=64",
    "Name=gpu File=/dev/nvidia1 AutoDetect=off",
    "Name=gpu File=/etc/shadow",
    "Name=gpu File=/dev/nvidia1 File=/dev/nvidia2",
    "Name=gpu File=/dev/nvidia1 Cores=0-3;Name=mps",
    "Name=gpu File=/dev/nvidia1 Links=1,a",
    "Name=gpu File=/dev/nvidia1 Type=a100=x",
    "Name=gpu File=/dev/nvidia1 Flags=CountOnly,Bogus",
    "Name=gpu File=/dev/nvidia1 Type=a100  Cores=1",
    "Name=gpu File=/dev/nvidia1\tCores=1",
    "Name=gpu Type=a100",
    "Name=mps File=/dev/nvidia1",
    "NodeName=evil Name=gpu File=/dev/nvidia1",
]


def _host(*lines):
    return {"available": True, "gres": list(lines), "matrix": {}}


@pytest.mark.parametrize("line", HOSTILE)
def test_a_hostile_gres_line_is_dropped_and_the_host_named(line):
    warnings: list[str] = []
    assert view.gres_lines("gpu02", _host(GOOD, line), warnings) == [f"NodeName=gpu02 {GOOD}"]
    assert len(warnings) == 1 and warnings[0].startswith("gpu02: gres line ") and "dropped: " in warnings[0]
    assert "\n" not in warnings[0] and "\r" not in warnings[0]


def test_the_gres_file_holds_only_the_controllers_node_names_and_the_allowed_keys(tmp_path):
    target = tmp_path / "gres.conf"
    warnings: list[str] = []
    command.write_gres(str(target), {"gpu01": _host(GOOD), "gpu02": _host(GOOD, *HOSTILE)}, warnings)
    lines = target.read_text().splitlines()
    body = [line for line in lines if not line.startswith("#")]
    assert body == [f"NodeName=gpu01 {GOOD}", f"NodeName=gpu02 {GOOD}"]
    for line in body:
        keys = [field.split("=", 1)[0] for field in line.split(" ")]
        assert keys[:2] == ["NodeName", "Name"] and set(keys[2:]) <= set(view.GRES_KEYS)
    assert f"# gpu02: {len(HOSTILE)} gres line(s) dropped (not what gpufleet's module writes)" in lines
    assert len(warnings) == len(HOSTILE) and all(w.startswith("gpu02: ") for w in warnings)
    assert "evil" not in target.read_text()


def test_the_module_lines_of_every_shape_pass():
    """What module_utils/topology.py writes (with and without Type, Cores, Links) is kept as it is."""
    lines = [
        "Name=gpu File=/dev/nvidia0",
        "Name=gpu Type=rtx_6000_ada File=/dev/nvidia12 Cores=0,2,4-7",
        "Name=gpu Type=h100 File=/dev/nvidia3 Cores=56-111 Links=18,18,18,-1",
        "Name=gpu Type=gh200 File=/dev/nvidia1 Links=-1,6 Flags=nvidia_gpu_env,CountOnly",
    ]
    warnings: list[str] = []
    assert view.gres_lines("g-1.site", _host(*lines), warnings) == [f"NodeName=g-1.site {line}" for line in lines]
    assert warnings == []


def test_no_module_example_writes_into_a_shared_temporary_directory():
    """An example is copied as it is: one that writes into /tmp as root invites the redirection fileio refuses."""
    modules = sorted((REPO / "plugins" / "modules").glob("*.py"))
    assert any(p.name == "gpu_topology.py" for p in modules)
    for path in modules:
        examples = ast.literal_eval(
            next(
                node.value
                for node in ast.parse(path.read_text()).body
                if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "EXAMPLES"
            )
        )
        for key in ("dest", "path", "src"):
            assert not re.search(rf"\b{key}: *[\"']?/(var/)?tmp/", examples), (path.name, key)


def test_the_operators_gres_goes_to_a_sticky_directory_but_never_to_one_others_can_swap_in(tmp_path):
    """The controller's own output: a sticky shared directory (like /tmp) is safe for the O_EXCL temp + rename; a
    directory others can write without the sticky bit is refused with the fileio message, and nothing is written."""
    import os

    from ansible_collections.gpufleet.tuning.plugins.module_utils.fileio import UnsafeDirectory

    sticky, open_dir = tmp_path / "sticky", tmp_path / "open"
    for d, mode in ((sticky, 0o1777), (open_dir, 0o777)):
        d.mkdir()
        os.chmod(d, mode)
    command.write_gres(str(sticky / "gres.conf"), {"gpu01": _host(GOOD)})
    assert "NodeName=gpu01" in (sticky / "gres.conf").read_text()
    with pytest.raises(UnsafeDirectory, match="open"):
        command.write_gres(str(open_dir / "gres.conf"), {"gpu01": _host(GOOD)})
    assert list(open_dir.iterdir()) == []


@pytest.mark.parametrize("name", ["gpu01\n", "gpu01\nNodeName=evil", "gpu01 Name=gpu"])
def test_a_node_name_that_would_break_its_line_stops_the_write(tmp_path, name):
    """The inventory's name goes into NodeName=: a trailing newline ('$' matches before one) or a space is refused."""
    target = tmp_path / "gres.conf"
    with pytest.raises(view.GresError):
        command.write_gres(str(target), {name: _host(GOOD)})
    assert not target.exists()
