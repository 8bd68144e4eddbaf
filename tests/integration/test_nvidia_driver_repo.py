"""Role nvidia_driver's apt version choice and pin file, against real apt without a container.

The lab repository of dummy packages (molecule/nvidia_driver/files/build-repo.sh) is read by the machine's own
apt-get/apt-cache, sandboxed under tmp_path (its own sources, lists, status and preferences: nothing of the
machine's apt changes). A playbook loads the role's defaults and vars/main.yml, lets the role's version logic
choose from `apt-cache madison` and renders the role's pin template; apt then says what it would install.
molecule/nvidia_driver runs the whole role in a container.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import labkit
import pytest

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "roles" / "nvidia_driver"
BUILD_REPO = REPO / "molecule" / "nvidia_driver" / "files" / "build-repo.sh"
TOOLS = ("dpkg-deb", "dpkg-scanpackages", "apt-get", "apt-cache")

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        any(shutil.which(t) is None for t in TOOLS),
        reason="needs dpkg-deb, dpkg-scanpackages (Debian package dpkg-dev), apt-get and apt-cache",
    ),
]

PLAY = """
- name: Choose versions and render the pin like the role
  hosts: localhost
  gather_facts: false
  vars_files:
    - {role}/defaults/main.yml
    - {role}/vars/main.yml
  tasks:
    - name: OS family
      ansible.builtin.setup:
        gather_subset: [min]
    - name: The role's targets (the branch), as the role computes them on its own
      ansible.builtin.include_tasks: {role}/tasks/targets.yml
    - name: A host without NVIDIA packages
      ansible.builtin.set_fact:
        __nvidia_driver_installed: {{}}
    - name: What the sources offer
      ansible.builtin.command:
        argv: "{{{{ ['apt-cache', 'madison', __nvidia_driver_names[0]] + __nvidia_driver_fm_names }}}}"
      environment:
        APT_CONFIG: "{apt_config}"
      register: __nvidia_driver_madison
      changed_when: false
    - name: The role's pin file
      ansible.builtin.template:
        src: {role}/templates/gpufleet-nvidia.pref.j2
        dest: "{pref}"
        mode: "0644"
    - name: The role's choices
      ansible.builtin.copy:
        content: >-
          {{{{ {{'driver': __nvidia_driver_apt_version, 'fm': __nvidia_driver_fm_apt_specs,
                'missing': __nvidia_driver_fm_missing, 'transaction': __nvidia_driver_apt_specs,
                'cleanup': __nvidia_driver_other_branch_installed}} | to_json }}}}
        dest: "{out}"
        mode: "0644"
"""


@pytest.fixture(scope="module")
def lab_repo(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("nvidia-repo") / "repo"
    subprocess.run([str(BUILD_REPO), str(out)], check=True, capture_output=True, text=True)
    return out


@pytest.fixture
def apt(tmp_path, lab_repo):
    """Run apt-get/apt-cache against only the lab repository, with state under tmp_path."""
    root = tmp_path / "apt"
    for d in (
        "state/lists/partial",
        "cache/archives/partial",
        "etc/apt.conf.d",
        "etc/preferences.d",
        "etc/sources.list.d",
        "log",
    ):
        (root / d).mkdir(parents=True)
    (root / "status").write_text("")
    (root / "etc" / "sources.list").write_text(f"deb [trusted=yes] file:{lab_repo} ./\n")
    conf = root / "apt.conf"
    conf.write_text(
        f'Dir "{root}/";\nDir::State "state";\nDir::State::status "{root}/status";\nDir::Cache "cache";\n'
        f'Dir::Etc "etc";\nDir::Log "log";\nDir::Bin::methods "/usr/lib/apt/methods";\nDebug::NoLocking "true";\n'
        'APT::Sandbox::User "root";\n'
    )
    env = {**os.environ, "APT_CONFIG": str(conf), "LC_ALL": "C"}

    def run(*args: str) -> str:
        return subprocess.run(args, env=env, check=True, capture_output=True, text=True).stdout

    run("apt-get", "update", "-qq")
    run.config = conf
    run.pref = root / "etc" / "preferences.d" / "gpufleet-nvidia.pref"
    return run


def _role(tmp_path: Path, apt, **extra) -> dict:
    """Run the role's version choice and pin template with these variables; return its choices."""
    out = tmp_path / "choices.json"
    play = tmp_path / "play.yml"
    play.write_text(PLAY.format(role=ROLE, apt_config=apt.config, pref=apt.pref, out=out))
    extra.setdefault("nvidia_driver_branch", "550")
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".collections"), "ANSIBLE_NOCOLOR": "1"}
    proc = labkit.on_localhost("ansible-playbook", "-e", json.dumps(extra), str(play), env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    return json.loads(out.read_text())


def _candidate(apt, name: str) -> str:
    out = apt("apt-cache", "policy", name)
    return next(line.split()[-1] for line in out.splitlines() if line.strip().startswith("Candidate:"))


def test_without_the_pin_apt_would_leave_the_branch(apt):
    """The lab's trap is real: a newer version from another branch is apt's choice when nothing pins."""
    assert _candidate(apt, "nvidia-driver-550") == "560.35.03-0gpufleet1"
    assert _candidate(apt, "nvidia-fabricmanager-550") == "550.127.05-1"


def test_branch_pin_keeps_driver_and_fabric_manager_together(tmp_path, apt):
    choices = _role(tmp_path, apt, nvidia_driver_fabricmanager=True)
    assert (choices["driver"], choices["fm"], choices["missing"]) == (
        "550.90.07-1",
        ["nvidia-fabricmanager-550=550.90.07-1", "libnvidia-nscq-550=550.90.07-1"],
        [],
    )
    # One apt transaction: never a driver without the fabric manager of its version (issue 25).
    assert choices["transaction"] == [
        "nvidia-driver-550=550.90.07-1",
        "nvidia-dkms-550=550.90.07-1",
        "nvidia-fabricmanager-550=550.90.07-1",
        "libnvidia-nscq-550=550.90.07-1",
    ]
    assert _candidate(apt, "nvidia-driver-550") == "550.90.07-1"
    assert _candidate(apt, "nvidia-dkms-550") == "550.90.07-1"
    assert _candidate(apt, "nvidia-fabricmanager-550") == "550.90.07-1"
    assert _candidate(apt, "libnvidia-nscq-550") == "550.90.07-1"
    # What the role installs resolves in one transaction (dependencies included).
    sim = apt("apt-get", "-s", "install", *choices["transaction"])
    assert "Inst nvidia-driver-550 (550.90.07-1" in sim


def test_exact_version_pin(tmp_path, apt):
    choices = _role(tmp_path, apt, nvidia_driver_version="550.54.15-1")
    assert (choices["driver"], choices["fm"]) == ("550.54.15-1", [])
    assert "Pin: version 550.54.15-1" in apt.pref.read_text()
    assert _candidate(apt, "nvidia-driver-550") == "550.54.15-1"


def test_fabric_manager_missing_in_the_drivers_version_is_reported(tmp_path, apt):
    """No libnvidia-nscq-550 550.54.15: named for nvidia_driver_preflight, which refuses the change (issue 25)."""
    choices = _role(tmp_path, apt, nvidia_driver_version="550.54.15-1", nvidia_driver_fabricmanager=True)
    assert choices["fm"] == ["nvidia-fabricmanager-550=550.54.15-1", "libnvidia-nscq-550="]
    assert choices["missing"] == ["libnvidia-nscq-550 550.54.15"]


def test_fabric_package_installed_at_the_drivers_version_is_not_missing(tmp_path, apt):
    """A package the sources no longer offer but that is installed at the driver's version is what is wanted."""
    installed = {
        "libnvidia-nscq-550": [{"name": "libnvidia-nscq-550", "version": "550.54.15-1", "source": "apt"}],
    }
    choices = _role(
        tmp_path,
        apt,
        nvidia_driver_version="550.54.15-1",
        nvidia_driver_fabricmanager=True,
        __nvidia_driver_installed=installed,
    )
    assert choices["fm"] == ["nvidia-fabricmanager-550=550.54.15-1", "libnvidia-nscq-550=550.54.15-1"]
    assert choices["missing"] == []


HGX_535 = {
    name: [{"name": name, "version": "535.183.01-1", "source": "apt"}]
    for name in ("nvidia-driver-535", "nvidia-dkms-535", "nvidia-fabricmanager-535", "libnvidia-nscq-535")
}


def test_cleanup_never_removes_an_unreplaced_fabric_manager(tmp_path, apt):
    """Fabric not managed (the owner's false): a branch change removes the old driver but leaves fabric manager
    and NSCQ alone - removing them would leave an NVSwitch system without its NVLink fabric (issue 25)."""
    choices = _role(tmp_path, apt, nvidia_driver_fabricmanager=False, __nvidia_driver_installed=HGX_535)
    assert choices["cleanup"] == ["nvidia-dkms-535", "nvidia-driver-535"]
    assert choices["transaction"] == ["nvidia-driver-550=550.90.07-1", "nvidia-dkms-550=550.90.07-1"]


def test_managed_fabric_is_replaced_in_the_drivers_transaction(tmp_path, apt):
    """Managed: the 550 fabric packages come in the driver's transaction, then the 535 ones may go."""
    choices = _role(tmp_path, apt, nvidia_driver_fabricmanager=True, __nvidia_driver_installed=HGX_535)
    assert choices["cleanup"] == sorted(HGX_535)
    assert choices["transaction"][2:] == ["nvidia-fabricmanager-550=550.90.07-1", "libnvidia-nscq-550=550.90.07-1"]


def test_imex_moves_where_installed(tmp_path, apt):
    installed = {**HGX_535, "nvidia-imex-535": [{"name": "nvidia-imex-535", "version": "535.183.01-1"}]}
    choices = _role(tmp_path, apt, nvidia_driver_fabricmanager=True, __nvidia_driver_installed=installed)
    # The lab repository has no nvidia-imex-550: named, so the change is refused.
    assert choices["fm"][-1] == "nvidia-imex-550="
    assert choices["missing"] == ["nvidia-imex-550 550.90.07"]


def test_other_branch(tmp_path, apt):
    choices = _role(tmp_path, apt, nvidia_driver_branch="535")
    assert choices["driver"] == "535.183.01-1"
    assert _candidate(apt, "nvidia-driver-535") == "535.183.01-1"
    # The 550 packages are outside the 535 pin: not pinned up, not pinned down.
    assert "Pin: version 535.*" in apt.pref.read_text()


def test_unknown_branch_chooses_nothing(tmp_path, apt):
    """The role then stops with 'no version of nvidia-driver-560 on branch 560 in the apt sources'."""
    assert _role(tmp_path, apt, nvidia_driver_branch="560")["driver"] == ""


def test_branch_from_the_policy(tmp_path, apt):
    """nvidia_driver_branch unset: the branch is the policy's software.driver_branch (what SW-DRV-001 checks)."""
    choices = _role(tmp_path, apt, nvidia_driver_branch=None, gpufleet_policy={"software": {"driver_branch": 535}})
    assert choices["driver"] == "535.183.01-1"
    assert "Pin: version 535.*" in apt.pref.read_text()


def test_role_variable_wins_over_the_policy(tmp_path, apt):
    choices = _role(tmp_path, apt, nvidia_driver_branch="550", gpufleet_policy={"software": {"driver_branch": 535}})
    assert choices["driver"] == "550.90.07-1"


def test_installed_version_of_the_branch_is_kept_by_default(tmp_path, apt):
    """nvidia_driver_upgrade defaults to false: a host on 550.54.15 stays there (install only what is missing)."""
    installed = {"nvidia-driver-550": [{"name": "nvidia-driver-550", "version": "550.54.15-1", "source": "apt"}]}
    assert _role(tmp_path, apt, __nvidia_driver_installed=installed)["driver"] == "550.54.15-1"
    upgrade = _role(tmp_path, apt, __nvidia_driver_installed=installed, nvidia_driver_upgrade=True)
    assert upgrade["driver"] == "550.90.07-1"
