"""nvidia_driver's SW-CUDA-001 check (tasks/cuda.yml) through real Ansible against toolkit directories.

CUDA minor-version compatibility (NVIDIA's CUDA compatibility guide): a toolkit runs on any branch from its major's
first one (12.x >= 525, 13.x >= 580); a newer minor than the branch's CUDA version is reported, never refused; a
newer major is refused unless a cuda-compat package (cuda-X.Y/compat/libcuda.so.*) covers it.
"""

from __future__ import annotations

import sys

import pytest
import yaml

from gpufleet.runner import run_playbook

pytestmark = pytest.mark.integration

PLAYBOOK = """
- name: SW-CUDA-001
  hosts: all
  gather_facts: false
  tasks:
    - name: Check the CUDA toolkits against the branch
      ansible.builtin.include_role:
        name: gpufleet.tuning.nvidia_driver
        tasks_from: cuda
      vars:
        nvidia_driver_branch: "{{ test_branch }}"
        nvidia_driver_cuda_toolkit_dir: "{{ test_dir }}"
        nvidia_driver_required_cuda: "{{ test_required | default(none) }}"
"""

# host -> (branch, toolkit directories, cuda-compat packages {cuda: driver}, nvidia_driver_required_cuda)
CASES = {
    # The demo's fra-a100-02: branch 535 (CUDA 12.2) with 12.2 and 12.4 toolkits. Refused before issue 13.
    "minor_gap": ("535", ["12.2", "12.4"], {}, None),
    "required_minor": ("550", [], {}, "12.8"),
    "same_major": ("570", ["12.8", "11.8"], {}, None),
    "major_gap": ("550", ["12.4", "13.0"], {}, None),
    "below_major_minimum": ("520", ["12.0"], {}, None),
    "compat_covers": ("550", ["13.0"], {"13.0": "580.65.06"}, None),
    "compat_too_old": ("535", ["13.0", "12.8"], {"12.8": "570.86.15"}, None),
}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cuda")
    hosts = {}
    for name, (branch, toolkits, compat, required) in CASES.items():
        base = tmp / name
        base.mkdir()
        for version in toolkits:
            (base / f"cuda-{version}").mkdir()
        for cuda, driver in compat.items():
            (base / f"cuda-{cuda}" / "compat").mkdir(parents=True, exist_ok=True)
            (base / f"cuda-{cuda}" / "compat" / f"libcuda.so.{driver}").write_text("")
        hosts[name] = {
            "ansible_connection": "local",
            "ansible_python_interpreter": sys.executable,
            "test_branch": branch,
            "test_dir": str(base),
        }
        if required:
            hosts[name]["test_required"] = required
    (tmp / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    (tmp / "play.yml").write_text(PLAYBOOK)
    run = run_playbook(str(tmp / "play.yml"), str(tmp / "hosts.yml"), keep_events=True)
    return run


def _debug_messages(run, host):
    out = []
    for event in run.events:
        data = event.get("event_data") or {}
        if event.get("event") == "runner_on_ok" and data.get("host") == host:
            msg = (data.get("res") or {}).get("msg")
            if isinstance(msg, str):
                out.append(msg)
    return out


@pytest.mark.parametrize("name", ["minor_gap", "required_minor", "same_major"])
def test_minor_gap_is_reported_not_refused(results, name):
    host = results.hosts[name]
    assert host.status == "ok", host.message
    messages = " ".join(_debug_messages(results, name))
    if name != "same_major":
        assert "warning, not refused" in messages and "PTX" in messages
    else:
        assert "warning" not in messages


@pytest.mark.parametrize("name, words", [("major_gap", "cannot run CUDA 13.0"), ("below_major_minimum", "12.0")])
def test_major_gap_is_refused(results, name, words):
    host = results.hosts[name]
    assert host.status == "failed"
    assert "SW-CUDA-001" in host.message and words in host.message


def test_cuda_compat_covers_a_newer_major(results):
    host = results.hosts["compat_covers"]
    assert host.status == "ok", host.message
    assert any("through cuda-compat" in m for m in _debug_messages(results, "compat_covers"))


def test_cuda_compat_of_an_older_version_does_not_cover(results):
    host = results.hosts["compat_too_old"]
    assert host.status == "failed" and "cannot run CUDA 13.0" in host.message
    assert "12.8" not in host.message.split("cannot run", 1)[1].split(":")[0]
