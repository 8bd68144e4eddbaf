"""Role prereqs on a local host whose Python lacks pynvml: installs it offline into a venv from a wheel the
controller fetched, switches the play's interpreter, and changes nothing on the second run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import labkit
import pytest
import yaml

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


# --- issue 25 §1: never a binding older than the one full facts need -------------------------------------------------
BINDING_WHEELS = Path(__file__).resolve().parents[2] / "build" / "wheels" / "nvml-bindings"


def _binding_wheel(pattern: str) -> Path:
    """A cached binding wheel (`make bindings`; fetched here when the cache is missing)."""
    found = sorted(BINDING_WHEELS.glob(pattern))
    if not found:
        repo = BINDING_WHEELS.parents[2]
        subprocess.run([str(repo / "scripts/fetch-nvml-bindings.sh"), sys.executable, str(BINDING_WHEELS)], check=True)
        found = sorted(BINDING_WHEELS.glob(pattern))
    assert found, pattern
    return found[-1]


@pytest.fixture(scope="module")
def old_binding_python(tmp_path_factory) -> Path:
    """A host Python that already imports an old binding: nvidia-ml-py3 7.352.0, the code of Ubuntu 22.04's
    python3-pynvml (packages.ubuntu.com/jammy/python3-pynvml), installed offline from the binding cache."""
    _binding_wheel("nvidia_ml_py3-7.352.0-*.whl")
    host = tmp_path_factory.mktemp("old-binding") / "python"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(host)], check=True)
    pip = [sys.executable, "-m", "pip", "--python", str(host / "bin/python"), "install", "--quiet", "--no-index"]
    subprocess.run([*pip, "--find-links", str(BINDING_WHEELS), "nvidia-ml-py3==7.352.0"], check=True)
    return host / "bin" / "python"


def _probe(python: Path) -> str:
    role_files = Path(__file__).resolve().parents[2] / "roles/prereqs/files/nvml_binding_probe.py"
    return subprocess.run([str(python), str(role_files)], capture_output=True, text=True, check=True).stdout.strip()


def test_a_host_with_an_old_binding_gets_the_venv(old_binding_python, tmp_path):
    """Today's role saw `import pynvml` succeed and installed nothing: the audit then ran on 7.352, without row
    remapping, MIG, NVLink, fabric or NUMA facts. Now the old binding stays where it is and gpufleet gets the venv."""
    assert _probe(old_binding_python) == "nvidia-ml-py3 7.352.0"
    wheel = _binding_wheel("nvidia_ml_py-13.*.whl")
    host = labkit.local_host(
        old_binding_python,
        prereqs_python=str(old_binding_python),
        prereqs_venv=str(tmp_path / "venv"),
        prereqs_controller_cache=str(tmp_path / "cache"),
        prereqs_wheel=str(wheel),
    )
    inventory = labkit.write_inventory(tmp_path, {"t1": host})
    (tmp_path / "play.yml").write_text(PLAY)
    first, changed = _run(tmp_path / "play.yml", inventory)
    assert first.hosts["t1"].status == "ok", first.hosts["t1"].message
    assert "Create the gpufleet venv" in [task for task, _ in changed]
    binding = first.hosts["t1"].results["Read GPUs"]["nvml"]["binding"]
    assert (binding["distribution"], binding["version"]) == ("nvidia-ml-py", wheel.name.split("-")[1])
    assert binding["module"].startswith(str(tmp_path / "venv"))
    assert _probe(old_binding_python) == "nvidia-ml-py3 7.352.0"  # the host's own binding is left alone
    second, changed = _run(tmp_path / "play.yml", inventory)
    assert second.hosts["t1"].status == "ok" and changed == []


def test_an_old_wheel_is_refused_before_anything_is_installed(system_python_without_pynvml, tmp_path):
    old = _binding_wheel("nvidia_ml_py-11.495.46-*.whl")
    host = labkit.local_host(
        system_python_without_pynvml,
        prereqs_python=system_python_without_pynvml,
        prereqs_venv=str(tmp_path / "venv"),
        prereqs_controller_cache=str(tmp_path / "cache"),
        prereqs_wheel=str(old),
    )
    (tmp_path / "role.yml").write_text(ROLE_ONLY)
    result, changed = _run(tmp_path / "role.yml", labkit.write_inventory(tmp_path, {"t1": host}))
    assert result.hosts["t1"].status == "failed"
    message = result.hosts["t1"].message
    assert f"prereqs_wheel: {old.name}" in message and "12.550" in message, message
    assert changed == [] and not (tmp_path / "venv").exists()


def test_the_role_and_the_rule_name_the_same_minimum():
    """SW-NVML-001's advice and the role's floor are the same release."""
    from ansible_collections.gpufleet.tuning.plugins.module_utils.rules import software

    defaults = yaml.safe_load((Path(__file__).resolve().parents[2] / "roles/prereqs/defaults/main.yml").read_text())
    assert defaults["prereqs_nvml_min_version"] == software.NVML_BINDING_FULL
