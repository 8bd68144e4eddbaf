"""execution-environment.yml: `ansible-builder create` writes a build context (Containerfile and _build/) that
installs the collection from its tarball, the Python and system dependencies, ansible-core and ansible-runner.
Building the image itself needs the base image from a registry, so it is not done here."""

from __future__ import annotations

import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
EE_FILE = REPO / "execution-environment.yml"
GALAXY = yaml.safe_load((REPO / "galaxy.yml").read_text())
TARBALL_NAME = f"{GALAXY['namespace']}-{GALAXY['name']}-{GALAXY['version']}.tar.gz"

pytestmark = pytest.mark.integration


def run(cmd: list, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=300, **kw)


@pytest.fixture(scope="module")
def context(tmp_path_factory) -> Path:
    builder = BIN / "ansible-builder"
    assert builder.exists(), "ansible-builder is missing: pip install -e '.[test]'"
    proc = run([BIN / "ansible-galaxy", "collection", "build", "--force", "--output-path", REPO / "build", REPO],
               cwd=REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ctx = tmp_path_factory.mktemp("ee") / "context"
    proc = run([builder, "create", "-f", EE_FILE, "-c", ctx, "--output-filename", "Containerfile", "-v", "2"],
               cwd=REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return ctx


def test_ee_definition_names_the_collection_version_of_galaxy_yml():
    ee = yaml.safe_load(EE_FILE.read_text())
    assert ee["version"] == 3
    srcs = [Path(f["src"]).name for f in ee["additional_build_files"]]
    assert TARBALL_NAME in srcs, f"execution-environment.yml must install {TARBALL_NAME} (galaxy.yml's version)"
    names = [Path(c["name"]).name for c in ee["dependencies"]["galaxy"]["collections"]]
    assert names == [TARBALL_NAME]


def test_context_installs_the_collection_from_its_tarball(context):
    containerfile = (context / "Containerfile").read_text()
    tarball = context / "_build" / "collections" / TARBALL_NAME
    with tarfile.open(tarball) as tar:
        assert "plugins/modules/audit.py" in tar.getnames()
    requirements = yaml.safe_load((context / "_build" / "requirements.yml").read_text())
    assert requirements["collections"] == [{"name": f"collections/{TARBALL_NAME}", "type": "file"}]
    assert "ansible-galaxy collection install" in containerfile and "-r requirements.yml" in containerfile


def test_context_has_python_and_system_dependencies(context):
    containerfile = (context / "Containerfile").read_text()
    python = (context / "_build" / "requirements.txt").read_text().split()
    assert {"nvidia-ml-py", "jinja2", "pyyaml"} <= set(python), python
    assert "ansible-core" in containerfile and "ansible-runner" in containerfile
    assert "COPY _build/requirements.txt" in containerfile and "COPY _build/bindep.txt" in containerfile
    from bindep.depends import Depends  # installed with ansible-builder

    depends = Depends((context / "_build" / "bindep.txt").read_text())
    dpkg = {rule[0] for rule in depends.active_rules(["platform:dpkg"])}
    rpm = {rule[0] for rule in depends.active_rules(["platform:rpm"])}
    assert {"ethtool", "iproute2"} <= dpkg, dpkg
    assert {"ethtool", "iproute"} <= rpm, rpm  # the base image is CentOS Stream (dnf)
