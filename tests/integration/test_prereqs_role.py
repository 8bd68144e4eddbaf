"""Role prereqs on a local host whose Python lacks pynvml: installs it offline into a venv from a wheel the
controller fetched, switches the play's interpreter, and changes nothing on the second run."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from gpufleet.runner import run_playbook

pytestmark = pytest.mark.integration
SYSTEM_PYTHON = "/usr/bin/python3"

PLAY = """
- name: Prereqs, then a gpufleet module
  hosts: all
  gather_facts: false
  roles:
    - role: gpufleet.tuning.prereqs
  tasks:
    - name: Read GPUs
      gpufleet.tuning.gpu_info:
"""


@pytest.fixture(scope="module")
def system_python_without_pynvml():
    if not Path(SYSTEM_PYTHON).exists():
        pytest.skip(f"{SYSTEM_PYTHON} not present")
    if subprocess.run([SYSTEM_PYTHON, "-c", "import pynvml"], capture_output=True).returncode == 0:
        pytest.skip(f"{SYSTEM_PYTHON} already imports pynvml")
    return SYSTEM_PYTHON


def test_prereqs_installs_offline_and_is_idempotent(system_python_without_pynvml, tmp_path):
    inv = {
        "all": {
            "hosts": {
                "t1": {
                    "ansible_connection": "local",
                    "ansible_python_interpreter": system_python_without_pynvml,
                    "prereqs_python": system_python_without_pynvml,
                    "prereqs_venv": str(tmp_path / "venv"),
                    "prereqs_controller_cache": str(tmp_path / "cache"),
                }
            }
        }
    }
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inv))
    (tmp_path / "play.yml").write_text(PLAY)

    def run():
        events = []
        result = run_playbook(str(tmp_path / "play.yml"), str(tmp_path / "hosts.yml"), on_event=events.append)
        changed = [
            e["event_data"]["task"]
            for e in events
            if e.get("event") == "runner_on_ok" and (e["event_data"].get("res") or {}).get("changed")
        ]
        return result, changed

    first, changed = run()
    assert first.hosts["t1"].status == "ok", first.hosts["t1"].message
    assert "Copy nvidia-ml-py into the venv" in changed and "Create the gpufleet venv" in changed
    info = first.hosts["t1"].results["Read GPUs"]
    assert info["nvml"]["source"] == "pynvml"  # the module ran with the venv's Python, which imports pynvml
    assert subprocess.run([str(tmp_path / "venv/bin/python"), "-c", "import pynvml"]).returncode == 0

    second, changed = run()
    assert second.hosts["t1"].status == "ok"
    assert changed == []
