"""playbooks/prereqs.yml, the README walkthrough's step 2, run as an operator runs it: `ansible-playbook` with an
inventory, against a local host whose Python lacks pynvml. Offline: the wheel comes from the controller (a wheel
file named with prereqs_wheel), never from the target's network. --check installs nothing; the real run makes
pynvml importable in the venv and prints the interpreter to put in the inventory; a second run changes nothing."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
SYSTEM_PYTHON = "/usr/bin/python3"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """An nvidia-ml-py wheel on the controller: the one the Molecule scenarios keep under build/wheels, else
    downloaded once (pip download, as the role does)."""
    if not Path(SYSTEM_PYTHON).exists():
        pytest.skip(f"{SYSTEM_PYTHON} not present")
    if subprocess.run([SYSTEM_PYTHON, "-c", "import pynvml"], capture_output=True).returncode == 0:
        pytest.skip(f"{SYSTEM_PYTHON} already imports pynvml")
    found = sorted((REPO / "build" / "wheels").glob("nvidia_ml_py-*.whl"))
    if found:
        return found[-1]
    dest = tmp_path_factory.mktemp("wheels")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--dest",
            str(dest),
            "nvidia-ml-py>=12.550",
        ],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        pytest.skip(f"no nvidia-ml-py wheel under build/wheels and none downloadable: {proc.stderr[-300:]}")
    return sorted(dest.glob("nvidia_ml_py-*.whl"))[-1]


def _playbook(tmp_path: Path, wheel: Path, *extra: str) -> subprocess.CompletedProcess:
    inventory = {
        "all": {
            "hosts": {
                "gpu-01": {
                    "ansible_connection": "local",
                    "ansible_python_interpreter": SYSTEM_PYTHON,
                    "gpufleet_become": False,  # the lab runs as root; a fleet becomes root through sudo
                    "gpufleet_allow_local_changes": True,  # installs only under tmp_path
                    "prereqs_nvml_method": "wheel",
                    "prereqs_python": SYSTEM_PYTHON,
                    "prereqs_venv": str(tmp_path / "opt-gpufleet-venv"),
                    "prereqs_wheel": str(wheel),
                    "prereqs_controller_cache": str(tmp_path / "cache"),
                }
            }
        }
    }
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    env = {**os.environ, "PATH": f"{REPO / '.venv' / 'bin'}:{os.environ['PATH']}", "ANSIBLE_NOCOLOR": "1"}
    return subprocess.run(
        [
            str(REPO / ".venv" / "bin" / "ansible-playbook"),
            "playbooks/prereqs.yml",
            "-i",
            str(tmp_path / "hosts.yml"),
            *extra,
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _changed(proc: subprocess.CompletedProcess) -> int:
    recap = re.search(r"gpu-01\s*:\s*ok=\d+\s+changed=(\d+)\s+unreachable=0\s+failed=0", proc.stdout)
    assert recap, proc.stdout[-3000:] + proc.stderr[-2000:]
    return int(recap.group(1))


def test_prereqs_playbook_check_then_install_then_nothing(tmp_path, wheel):
    venv_python = tmp_path / "opt-gpufleet-venv" / "bin" / "python"

    checked = _playbook(tmp_path, wheel, "--check", "--diff")
    assert checked.returncode == 0, checked.stdout[-3000:] + checked.stderr[-2000:]
    assert _changed(checked) > 0  # it says what it would install...
    assert not (tmp_path / "opt-gpufleet-venv").exists()  # ...and installs nothing

    real = _playbook(tmp_path, wheel)
    assert real.returncode == 0, real.stdout[-3000:] + real.stderr[-2000:]
    assert _changed(real) > 0
    assert subprocess.run([str(venv_python), "-c", "import pynvml"]).returncode == 0
    assert f"set ansible_python_interpreter: {venv_python} for this host" in real.stdout

    again = _playbook(tmp_path, wheel)
    assert again.returncode == 0, again.stdout[-3000:]
    assert _changed(again) == 0
    assert f"set ansible_python_interpreter: {venv_python} for this host" in again.stdout
