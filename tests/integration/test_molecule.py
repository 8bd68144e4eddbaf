"""Every Molecule scenario under molecule/ (`molecule test -s NAME`): real podman containers from local images,
the real audit playbook, testinfra checks. `make test` prepares the lab first (scripts/lab-setup.sh,
scripts/fetch-collections.sh); see molecule/README.md."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = sorted(p.parent.name for p in (REPO / "molecule").glob("*/molecule.yml"))
COLLECTIONS = ("containers/podman", "ansible/posix", "community/general")
IMAGE_RE = re.compile(r"^\s*image:\s*(\S+)", re.M)
# "[default > verify] Executed: Failed" (NO_COLOR) or "default ➜ verify: Executed: Failed"
STEP_RE = re.compile(r"\[?([\w.-]+)(?: > | ➜ )(\w+)\]?:? Executed: Failed")
ANSI_RE = re.compile(r"\x1b\[[0-9;]*m")

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("podman") is None, reason="podman is not installed (make test installs it)"),
]


def _lab_ready(scenario: str) -> None:
    """Fail (not skip) with the command that fixes it when the lab was not set up."""
    missing = [c for c in COLLECTIONS if not (REPO / ".collections" / "ansible_collections" / c).is_dir()]
    assert not missing, f"collections {missing} missing: run scripts/fetch-collections.sh"
    text = (REPO / "molecule" / scenario / "molecule.yml").read_text()
    for image in IMAGE_RE.findall(text):
        probe = subprocess.run(["podman", "image", "exists", image], capture_output=True)
        assert probe.returncode == 0, f"image {image} not built: run scripts/lab-setup.sh (as root)"


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_molecule_scenario(scenario, sim_lib):
    _lab_ready(scenario)
    bin_dir = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        # molecule runs ansible-playbook and the testinfra verifier's `pytest` by name: this venv's, first.
        "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
        "ANSIBLE_ROLES_PATH": str(REPO / "roles"),
        "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".collections"),
        "NO_COLOR": "1",
        "PY_COLORS": "0",
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
    }
    proc = subprocess.run(
        [sys.executable, "-m", "molecule", "test", "-s", scenario],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=900,
    )
    if proc.returncode != 0:
        lines = ANSI_RE.sub("", proc.stdout).splitlines()
        failed = [i for i, line in enumerate(lines) if STEP_RE.search(line)]
        steps = ", ".join(dict.fromkeys("/".join(STEP_RE.search(lines[i]).groups()) for i in failed)) or "unknown"
        # The output of the step that failed (molecule then cleans up), else the end of everything.
        shown = lines[max(0, failed[0] - 200) : failed[0] + 1] if failed else lines[-150:]
        pytest.fail(
            f"molecule test -s {scenario}: rc {proc.returncode}, failed step: {steps}\n" + "\n".join(shown),
            pytrace=False,
        )
