"""Simulated GPU servers as podman containers for the watch's tests (role, Prometheus, Slurm), written once.

``gpu_container(name, state)`` starts a container from the lab's watch image (systemd as PID 1, Debian's
prometheus-node-exporter, Slurm and munge: scripts/lab-setup.sh) on the internal network gpufleet-lab, with the
simulated libnvidia-ml.so.1 as the system's library and ``state`` (tests/sim/nvml state text) at its default path;
``apply_watch`` runs the prereqs role (pynvml, offline from build/wheels) and the watch role in it through the podman
connection; ``set_gpu`` edits the simulated GPUs' state in place (atomically: the library re-reads the file on every
call); ``digest_inside`` hashes a container's tree. Containers are removed on exit.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
WATCH_IMAGE = "localhost/gpufleet-debian12-watch:current"
NETWORK = "gpufleet-lab"
STATE_PATH = "/etc/gpufleet-sim/nvml.state"
LIBRARY_PATH = "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"


def podman(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(["podman", *args], capture_output=True, text=True, check=check, timeout=timeout)


def exec_in(name: str, *cmd: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    return podman("exec", name, *cmd, check=check, timeout=timeout)


def require_image(image: str = WATCH_IMAGE) -> None:
    if podman("image", "exists", image, check=False).returncode != 0:
        pytest.fail(f"{image} is missing: scripts/lab-setup.sh builds it (make lab)")


def wait_for_systemd(name: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = exec_in(name, "systemctl", "is-system-running", check=False).stdout.strip()
        if state in ("running", "degraded"):
            return
        time.sleep(0.5)
    raise AssertionError(f"systemd in {name} did not come up in {timeout} s")


@contextlib.contextmanager
def gpu_container(
    name: str, state: str, sim_lib: Path, image: str = WATCH_IMAGE, extra: tuple[str, ...] = ()
) -> Iterator[str]:
    """A running systemd container ``name`` whose GPUs are the simulated ones described by ``state``."""
    require_image(image)
    podman("rm", "-f", "-t", "1", name, check=False)
    podman(
        "run",
        "-d",
        "--name",
        name,
        "--hostname",
        name,
        f"--network={NETWORK}",
        "--stop-timeout=1",
        *extra,
        image,
        "/sbin/init",
    )
    try:
        wait_for_systemd(name)
        exec_in(name, "mkdir", "-p", str(Path(STATE_PATH).parent))
        podman("cp", str(sim_lib), f"{name}:{LIBRARY_PATH}")
        write_state(name, state)
        exec_in(name, "ldconfig")  # pynvml dlopens the soname: the multiarch directory is found through ld.so.cache
        yield name
    finally:
        podman("rm", "-f", "-t", "1", name, check=False)


def write_state(name: str, state: str) -> None:
    """Replace the simulated GPUs' state file atomically (temp file, then rename, inside the container)."""
    subprocess.run(
        ["podman", "exec", "-i", name, "sh", "-c", f"cat > {STATE_PATH}.new && mv {STATE_PATH}.new {STATE_PATH}"],
        input=state,
        text=True,
        check=True,
        capture_output=True,
    )


def set_gpu(name: str, changes: dict[str, str | None]) -> None:
    """Set (or, with None, remove) state keys such as ``gpu.3.lost`` in the container's state file."""
    lines = exec_in(name, "cat", STATE_PATH).stdout.splitlines()
    keep = [line for line in lines if line.split("=", 1)[0] not in changes]
    keep += [f"{k}={v}" for k, v in changes.items() if v is not None]
    write_state(name, "\n".join(keep) + "\n")


def digest_inside(name: str, *paths: str) -> str:
    """One sha256 over every regular file under ``paths`` in the container (names and contents)."""
    script = "find " + " ".join(paths) + " -xdev -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum"
    return exec_in(name, "sh", "-c", script).stdout.split()[0]


def inventory(tmp: Path, hosts: dict[str, dict], group_vars: dict | None = None) -> Path:
    """An inventory of containers reached through podman exec (host name = container name)."""
    base = {
        "ansible_connection": "containers.podman.podman",
        "ansible_python_interpreter": "/usr/bin/python3",
        "prereqs_python": "/usr/bin/python3",
        "prereqs_controller_cache": str(REPO / "build" / "wheels"),
    }
    path = tmp / "watch-hosts.yml"
    path.write_text(
        yaml.safe_dump({"all": {"hosts": {h: {**base, **v} for h, v in hosts.items()}, "vars": group_vars or {}}})
    )
    return path


PLAY = """\
- name: gpufleet roles
  hosts: all
  gather_facts: false
  roles:
{roles}
"""


def apply_watch(
    tmp: Path,
    inventory_path: Path,
    extra_vars: dict | None = None,
    check: bool = False,
    timeout: float = 300,
    roles: tuple[str, ...] = ("prereqs", "watch"),
) -> tuple[subprocess.CompletedProcess, dict]:
    """ansible-playbook with ``roles`` (default: prereqs for pynvml, then the watch); returns the run and the JSON
    callback's stats (per host: changed, failures, ...). In check mode give ``roles=("watch",)`` on a host where
    prereqs already ran: prereqs' check mode points the interpreter at a venv it has not created."""
    play = tmp / "watch-play.yml"
    play.write_text(PLAY.format(roles="\n".join(f"    - role: gpufleet.tuning.{r}" for r in roles)))
    cmd = [str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", str(inventory_path), str(play)]
    if extra_vars:
        cmd += ["-e", json.dumps(extra_vars)]
    if check:
        cmd.append("--check")
    env = {
        "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".collections"),
        "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json",
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "PATH": f"{REPO / '.venv' / 'bin'}:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": str(Path.home()),
    }
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, check=False)
    try:
        stats = json.loads(proc.stdout).get("stats", {})
    except ValueError:
        stats = {}
    return proc, stats
