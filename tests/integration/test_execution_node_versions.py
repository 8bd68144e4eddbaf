"""playbooks/execution_node.yml gives the node exactly the collection of galaxy.yml's version and the pip wheel pip
chose (issue 26): not the last of a string sort of the controller's cache, where gpufleet-tuning-0.9.0.tar.gz sorts
after 0.10.0 and pip-9.0.0 after pip-26. The real playbook, from a copy of the collection whose galaxy.yml says
0.10.0, against this machine as the node (local connection, everything under the test's temp dir), with a stale
0.9.0 tarball (a real build) and a stale pip wheel in the cache."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _copy_collection(dest: Path, version: str) -> None:
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout.split(b"\0")
    for name in filter(None, (f.decode() for f in files)):
        src = REPO / name
        if src.is_file() and not src.is_symlink():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    _set_version(dest, version)


def _set_version(src: Path, version: str) -> None:
    galaxy = yaml.safe_load((src / "galaxy.yml").read_text())
    galaxy["version"] = version
    (src / "galaxy.yml").write_text(yaml.safe_dump(galaxy, sort_keys=False))


@pytest.mark.parametrize("stale", ["tarball", "pip"])
def test_the_node_gets_galaxy_yml_version_and_pips_own_wheel(tmp_path, stale):
    src, cache, node = tmp_path / "src", tmp_path / "cache", tmp_path / "node"
    if stale == "tarball":  # a real build of 0.9.0 left in the cache by an older checkout
        _copy_collection(src, "0.9.0")
        build = subprocess.run(
            [BIN / "ansible-galaxy", "collection", "build", src, "--output-path", cache / "collection"],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert build.returncode == 0, build.stdout + build.stderr
        assert (cache / "collection" / "gpufleet-tuning-0.9.0.tar.gz").is_file()
    else:  # a pip wheel whose name sorts after pip's current one (pip-9 > pip-26 as text)
        wheels = cache / f"wheels-cp{sys.version_info[0]}{sys.version_info[1]}-{os.uname().machine}"
        wheels.mkdir(parents=True)
        (wheels / "pip-9.0.0-py2.py3-none-any.whl").write_bytes(b"not a wheel: a stale file a string sort picks")
    _copy_collection(src, "0.10.0")

    inventory = tmp_path / "inventory.yml"
    host = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"node": host}}}))
    # extra vars, not the inventory: they win over play vars even in a playbook that still set these as play vars
    # (today's main did), so no run of this test can touch /opt/gpufleet or ~/.cache of this machine
    extra = tmp_path / "extra.json"
    extra.write_text(
        json.dumps(
            {
                "gpufleet_allow_local_changes": True,
                "gpufleet_node_root": str(node),
                "gpufleet_node_cache": str(cache),
                "gpufleet_node_python": sys.executable,
            }
        )
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_COLLECTIONS_PATH=str(REPO / ".collections"))
    run = subprocess.run(
        [BIN / "ansible-playbook", "-i", inventory, "-e", f"@{extra}", src / "playbooks" / "execution_node.yml"],
        capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path,
    )  # fmt: skip
    marker = node / "collections" / ".gpufleet-tuning.MANIFEST.json"
    assert marker.is_file(), run.stdout[-4000:] + run.stderr[-2000:]
    assert json.loads(marker.read_text())["collection_info"]["version"] == "0.10.0"
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    installed = node / "collections" / "ansible_collections" / "gpufleet" / "tuning" / "MANIFEST.json"
    assert json.loads(installed.read_text())["collection_info"]["version"] == "0.10.0"
    # the cache holds galaxy.yml's build only: an old tarball can never be picked again
    assert sorted(p.name for p in (cache / "collection").iterdir()) == ["gpufleet-tuning-0.10.0.tar.gz"]


def test_the_public_variables_can_be_set_in_the_inventory():
    """Play vars win over the inventory's host and group vars: a public variable set there would be ignored
    silently (an operator's gpufleet_node_root in group_vars, and the node got /opt/gpufleet)."""
    play = yaml.safe_load((REPO / "playbooks" / "execution_node.yml").read_text())[0]
    public = sorted(k for k in play.get("vars", {}) if not k.startswith("_"))
    assert public == []
    text = (REPO / "playbooks" / "execution_node.yml").read_text()
    for name in ("root", "python", "packages", "cache", "platforms"):
        assert f"gpufleet_node_{name} | default(" in text, name
