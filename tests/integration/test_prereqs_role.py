"""Role prereqs on a local host whose Python lacks pynvml: installs it offline into a venv from a wheel the
controller fetched, switches the play's interpreter, and changes nothing on the second run."""

from __future__ import annotations

import subprocess
from pathlib import Path

import labkit
import pytest

pytestmark = pytest.mark.integration
SYSTEM_PYTHON = "/usr/bin/python3"

PLAY = labkit.play(
    "Prereqs, then a gpufleet module", roles=("prereqs",), tasks="- name: Read GPUs\n  gpufleet.tuning.gpu_info:\n"
)


@pytest.fixture(scope="module")
def system_python_without_pynvml():
    if not Path(SYSTEM_PYTHON).exists():
        pytest.skip(f"{SYSTEM_PYTHON} not present")
    if subprocess.run([SYSTEM_PYTHON, "-c", "import pynvml"], capture_output=True).returncode == 0:
        pytest.skip(f"{SYSTEM_PYTHON} already imports pynvml")
    return SYSTEM_PYTHON


ROLE_ONLY = labkit.play("Prereqs", roles=("prereqs",))


CONTROLLER_TASKS = {"Download the wheel on the controller", "Unpack the wheel on the controller"}


def _inventory(tmp_path: Path, python: str) -> Path:
    host = labkit.local_host(
        python,
        prereqs_python=python,
        prereqs_venv=str(tmp_path / "venv"),
        prereqs_controller_cache=str(tmp_path / "cache"),
    )
    return labkit.write_inventory(tmp_path, {"t1": host})


def _run(play: Path, inventory: Path, check: bool = False):
    result, changed = labkit.run(play, inventory, check=check, diff=True)
    return result, [(d["task"], d["res"].get("diff")) for d in changed]


def test_prereqs_installs_offline_and_is_idempotent(system_python_without_pynvml, tmp_path):
    inventory = _inventory(tmp_path, system_python_without_pynvml)
    (tmp_path / "play.yml").write_text(PLAY)

    def run():
        result, changed = _run(tmp_path / "play.yml", inventory)
        return result, [task for task, _diff in changed]

    first, changed = run()
    assert first.hosts["t1"].status == "ok", first.hosts["t1"].message
    assert "Copy nvidia-ml-py into the venv" in changed and "Create the gpufleet venv" in changed
    info = first.hosts["t1"].results["Read GPUs"]
    assert info["nvml"]["source"] == "pynvml"  # the module ran with the venv's Python, which imports pynvml
    assert subprocess.run([str(tmp_path / "venv/bin/python"), "-c", "import pynvml"]).returncode == 0

    second, changed = run()
    assert second.hosts["t1"].status == "ok"
    assert changed == []


def test_prereqs_check_mode_is_a_promise(system_python_without_pynvml, tmp_path):
    """--check writes nothing on the target and predicts, task by task and diff by diff, what the real run does."""
    inventory = _inventory(tmp_path, system_python_without_pynvml)
    (tmp_path / "role.yml").write_text(ROLE_ONLY)
    checked, predicted = _run(tmp_path / "role.yml", inventory, check=True)
    assert checked.hosts["t1"].status == "ok", checked.hosts["t1"].message
    assert not (tmp_path / "venv").exists()
    # The controller's wheel cache fills during check mode already (the target's diff needs the files).
    predicted = [(task, diff) for task, diff in predicted if task not in CONTROLLER_TASKS]
    real, done = _run(tmp_path / "role.yml", inventory)
    assert real.hosts["t1"].status == "ok", real.hosts["t1"].message
    assert [task for task, _ in done] == [task for task, _ in predicted]
    assert "Create the gpufleet venv" in [task for task, _ in done]

    def without_headers(diff):
        parts = diff if isinstance(diff, list) else [diff]
        return [{k: v for k, v in (p or {}).items() if not k.endswith("_header")} for p in parts]

    assert [without_headers(d) for _, d in done] == [without_headers(d) for _, d in predicted]
