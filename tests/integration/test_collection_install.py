"""The collection installed the Galaxy way: `ansible-galaxy collection build`, then `collection install --offline`
into an empty collections path; from that copy alone the audit playbook runs and writes its reports, ansible-doc
documents the modules, and the gpufleet CLI works (GPUFLEET_COLLECTION)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
GALAXY = yaml.safe_load((REPO / "galaxy.yml").read_text())
TARBALL = REPO / "build" / f"{GALAXY['namespace']}-{GALAXY['name']}-{GALAXY['version']}.tar.gz"

# What may sit at the top of the tarball (galaxy.yml's comment says why); anything new must be a decision.
SHIPPED_TOP = {
    "MANIFEST.json", "FILES.json", "README.md", "CHANGELOG.md", "LICENSE", "COPYING", "ansible.cfg", "bindep.txt",
    "changelogs", "docs", "inventories", "meta", "monitoring", "playbooks", "plugins", "roles", "tests",
}
REQUIRED = [
    "playbooks/audit.yml", "plugins/modules/audit.py", "plugins/action/audit_report.py",
    "plugins/plugin_utils/report/templates/report.html.j2", "meta/runtime.yml", "ansible.cfg", "bindep.txt",
    "inventories/local/hosts.yml", "inventories/example/inventory/hosts.yml", "tests/sanity/ignore-2.19.txt",
    "playbooks/watch.yml", "roles/watch/tasks/main.yml", "plugins/modules/watch_install.py",
    "monitoring/prometheus/gpufleet-alerts.yml", "monitoring/grafana/gpufleet-dashboard.json",
    "plugins/strategy/linear.py",
]
MAX_BYTES = 1024 * 1024

pytestmark = pytest.mark.integration


def run(cmd: list, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=300, **kw)


def clean_env(**extra: str) -> dict[str, str]:
    """No trace of the checkout's Ansible setup: no ANSIBLE_*/GPUFLEET_* from outside, no sys.path scanning."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "GPUFLEET_"))}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["ANSIBLE_COLLECTIONS_SCAN_SYS_PATH"] = "false"
    env["ANSIBLE_NOCOLOR"] = "1"
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def tarball() -> Path:
    proc = run([BIN / "ansible-galaxy", "collection", "build", "--force", "--output-path", REPO / "build", REPO],
               cwd=REPO, env=clean_env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert TARBALL.is_file(), proc.stdout
    return TARBALL


@pytest.fixture(scope="module")
def installed(tarball, tmp_path_factory) -> tuple[Path, Path]:
    """(collections path, collection root) of a copy installed from the tarball alone."""
    base = tmp_path_factory.mktemp("galaxy-install")
    collections = base / "collections"
    collections.mkdir()  # empty: nothing but what the install puts there
    proc = run([BIN / "ansible-galaxy", "collection", "install", "--offline", "-p", collections, tarball],
               cwd=base, env=clean_env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    root = collections / "ansible_collections" / GALAXY["namespace"] / GALAXY["name"]
    manifest = json.loads((root / "MANIFEST.json").read_text())
    assert manifest["collection_info"]["version"] == GALAXY["version"]
    assert not (root / "galaxy.yml").exists()  # an installed copy, not a checkout
    return collections, root


@pytest.fixture
def local_inventory(tmp_path) -> Path:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"localhost": {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
    }}}}))
    return inventory


def test_tarball_ships_the_collection_and_nothing_else(tarball):
    with tarfile.open(tarball) as tar:
        names = tar.getnames()
    top = {n.split("/")[0] for n in names}
    assert top <= SHIPPED_TOP, f"unexpected in the tarball (ship it in SHIPPED_TOP or add to build_ignore): " \
                               f"{sorted(top - SHIPPED_TOP)}"
    missing = [r for r in REQUIRED if r not in names]
    assert not missing, missing
    assert {n.split("/")[1] for n in names if n.startswith("tests/") and n.count("/")} == {"sanity"}
    assert not [n for n in names if n.endswith((".pyc", ".so", ".o")) or "__pycache__" in n.split("/")]
    assert not [n for n in names if n.startswith("inventories/demo")]  # needs the simulated fleet of a checkout
    # every module and module_util of the checkout ships
    for sub in ("plugins/modules", "plugins/module_utils", "plugins/action", "playbooks"):
        for path in (REPO / sub).iterdir():
            if path.is_file() and path.suffix in (".py", ".yml"):
                assert f"{sub}/{path.name}" in names, f"{sub}/{path.name} does not ship"
    assert tarball.stat().st_size < MAX_BYTES, f"{tarball.stat().st_size} bytes"


def test_audit_playbook_runs_from_the_installed_copy(installed, local_inventory, tmp_path):
    collections, root = installed
    out = tmp_path / "reports"
    proc = run(
        [BIN / "ansible-playbook", "-i", local_inventory, root / "playbooks" / "audit.yml",
         "-e", f"gpufleet_report_dir={out}", "-e", "gpufleet_sample_seconds=0"],
        cwd=tmp_path, env=clean_env(ANSIBLE_COLLECTIONS_PATH=str(collections)),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((out / "latest" / "report.json").read_text())
    assert report["schema"] == "gpufleet.report/v1"
    assert report["hosts"]["localhost"]["status"] == "ok", report["hosts"]["localhost"]
    assert report["summary"]["hosts"]["total"] == 1
    for name in ("report.html", "junit.xml", "gpufleet.prom"):
        assert (out / "latest" / name).is_file()


def test_ansible_doc_from_the_installed_copy(installed, tmp_path):
    collections, root = installed
    env = clean_env(ANSIBLE_COLLECTIONS_PATH=str(collections))
    proc = run([BIN / "ansible-doc", "-t", "module", "gpufleet.tuning.audit"], cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "gpufleet.tuning.audit" in proc.stdout and str(root) in proc.stdout
    doc = json.loads(run([BIN / "ansible-doc", "--json", "-t", "module", "gpufleet.tuning.audit"],
                         cwd=tmp_path, env=env).stdout)
    assert Path(doc["gpufleet.tuning.audit"]["doc"]["filename"]).is_relative_to(root)
    # every module documents itself from the installed copy
    listed = run([BIN / "ansible-doc", "--json", "-t", "module", "-l", "gpufleet.tuning"], cwd=tmp_path, env=env)
    assert listed.returncode == 0, listed.stderr
    modules = {f"gpufleet.tuning.{p.stem}" for p in (root / "plugins" / "modules").glob("*.py")}
    assert set(json.loads(listed.stdout)) == modules


def test_cli_runs_against_the_installed_copy(installed, local_inventory, tmp_path):
    _, root = installed
    env = clean_env(GPUFLEET_COLLECTION=str(root))
    where = run([sys.executable, "-c", "from gpufleet import paths; print(paths.collection_root())"],
                cwd=tmp_path, env=env)
    assert where.stdout.strip() == str(root.resolve()), where.stderr
    out = tmp_path / "cli-reports"
    proc = run([sys.executable, "-m", "gpufleet.cli", "audit", "-i", local_inventory, "--out", out],
               cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((out / "latest" / "report.json").read_text())
    assert report["hosts"]["localhost"]["status"] == "ok"
    catalog = run([sys.executable, "-m", "gpufleet.cli", "catalog"], cwd=tmp_path, env=env)
    assert catalog.returncode == 0 and "GPU-MEM-001" in catalog.stdout, catalog.stderr
