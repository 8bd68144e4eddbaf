"""What the role and module tests share to run Ansible against this machine as a stand-in host, written once:

- ``play``, ``local_host``, ``write_inventory``, ``write_play``: a play's text, a local-connection host's variables,
  an inventory of such hosts, a play file;
- ``sim_gpu_host``, ``SIM_NVML``: a local host whose GPUs are the simulated NVML library's (tests/sim/nvml), and
  the play environment that points pynvml at it;
- ``run``: a playbook run (gpufleet.runner, as the CLI runs them) with the tasks that changed something;
- ``on_localhost``: ``ansible`` or ``ansible-playbook`` itself against localhost;
- ``gpufleet``: the CLI (``python -m gpufleet.cli``), its output captured;
- ``digest``: one hash over a tree's files, to tell that check mode wrote nothing;
- ``namespace``: a network namespace of the test's own (skipped where ``ip netns add`` is not permitted), with
  ``veth`` for its NICs, ``ns_exec`` and ``ns_python`` (a Python that runs inside it: a host's
  ansible_python_interpreter, so the modules see the namespace's NICs and per-namespace sysctls);
- ``listener``: a TCP port on loopback that accepts and closes, a peer the link measurement can reach.
"""

from __future__ import annotations

import contextlib
import hashlib
import shutil
import socket
import subprocess
import sys
import textwrap
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from gpufleet.runner import run_playbook

# A role left out on runs with the extra variable audit_only=true: the same play audits before and after a fix.
SKIP_ON_AUDIT_ONLY = "not (audit_only | default(false))"


def play(
    name: str, *, roles: tuple[str, ...] = (), tasks: str | list = "", audit_only: bool = False, **keywords
) -> str:
    """YAML text of one play on all hosts, facts not gathered: the gpufleet.tuning ``roles`` (with ``audit_only``,
    each when SKIP_ON_AUDIT_ONLY), then ``tasks`` (the task list, or its YAML text); ``keywords`` are more play
    keywords (environment, check_mode, ...)."""
    body: dict = {"name": name, "hosts": "all", "gather_facts": False, **keywords}
    if roles:
        when = {"when": SKIP_ON_AUDIT_ONLY} if audit_only else {}
        body["roles"] = [{"role": f"gpufleet.tuning.{role}", **when} for role in roles]
    if tasks:
        body["tasks"] = yaml.safe_load(textwrap.dedent(tasks)) if isinstance(tasks, str) else tasks
    return yaml.safe_dump([body], sort_keys=False, width=120)


def audit_play(name: str, **args) -> str:
    """A play whose one task, "Audit", runs the audit module on each host of a simulated fleet with the host's own
    environment (``gpufleet_environment``: the simulated NVML), fixture root (``gpufleet_audit_root``) and policy
    (``test_policy``, default none); ``args`` are more arguments of the module."""
    audit = {"policy": "{{ test_policy | default({}) }}", "root": "{{ gpufleet_audit_root }}", "sample_seconds": 0}
    task = {"name": "Audit", "gpufleet.tuning.audit": {**audit, **args}}
    return play(name, tasks=[task], environment="{{ gpufleet_environment }}")


def local_host(python: str | Path = sys.executable, **variables) -> dict:
    """A host Ansible reaches with the local connection, its modules run by ``python``; marked as meant to be
    changed (``gpufleet_allow_local_changes``: the changing playbooks refuse a local host otherwise)."""
    return {
        "ansible_connection": "local",
        "ansible_python_interpreter": str(python),
        "gpufleet_allow_local_changes": True,
        **variables,
    }


# The play environment of simulated-GPU hosts: the simulated libnvidia-ml.so.1 first on the loader's path, its state
# file from the host's variables (sim_gpu_host sets both).
SIM_NVML = {"LD_LIBRARY_PATH": "{{ sim_lib_dir }}", "FAKE_NVML_STATE": "{{ sim_state }}"}


def sim_gpu_host(sim_lib: Path, state: Path, **variables) -> dict:
    """A local host whose GPUs are those of the simulated library ``sim_lib`` with state file ``state``, for plays
    with ``environment=SIM_NVML``."""
    return local_host(sim_lib_dir=str(sim_lib.parent), sim_state=str(state), **variables)


def audit_root_host(sim_lib: Path, root: Path, state: Path, **variables) -> dict:
    """A local host audited under fixture ``root`` (``gpufleet_audit_root``) with the GPUs of the simulated library's
    state file ``state`` (``gpufleet_environment``), for the plays of ``audit_play``."""
    return local_host(
        gpufleet_audit_root=str(root),
        gpufleet_environment={"LD_LIBRARY_PATH": str(sim_lib.parent), "FAKE_NVML_STATE": str(state)},
        **variables,
    )


def sysfs_bus(state: dict[str, str], i: int) -> str:
    """GPU ``i``'s bus id in a simulated NVML state, NVML's "00000000:18:00.0" as sysfs's "0000:18:00.0"."""
    return "0000:" + state[f"gpu.{i}.pci_bus_id"].split(":", 1)[1].lower()


def assert_clear_error(res, message: str) -> None:
    """A host's result (runner.HostResult) for bad input: failed, with ``message`` in its error and no Python
    traceback (a clean fail_json naming the field)."""
    assert res.status == "failed", (res.status, res.message)
    assert message in res.message, res.message
    assert "Traceback" not in res.message, res.message


def findings_of(results: dict, name: str, task: str = "Audit") -> tuple[dict, dict]:
    """({rule: finding}, facts) of host ``name``'s audit task in a run's per-host results; the host must be ok."""
    host = results[name]
    assert host.status == "ok", host.message
    res = host.results[task]
    return {f["rule"]: f for f in res["findings"]}, res["facts"]


def write_inventory(tmp: Path, hosts: dict[str, dict], name: str = "hosts.yml") -> Path:
    """``tmp/name``: an inventory of ``hosts`` (host name -> variables), all in group ``all``."""
    path = tmp / name
    path.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    return path


def write_play(tmp: Path, text: str, name: str = "play.yml") -> Path:
    path = tmp / name
    path.write_text(text)
    return path


def run_hosts(tmp: Path, play: str, hosts: dict[str, dict], **kwargs) -> dict:
    """Write ``play`` and an inventory of ``hosts`` (host name -> variables) under ``tmp`` and run it
    (``run_playbook(..., **kwargs)``): the per-host results by name."""
    return run_playbook(str(write_play(tmp, play)), str(write_inventory(tmp, hosts)), **kwargs).hosts


def run(play: Path, inventory: Path, **kwargs):
    """``run_playbook(play, inventory, **kwargs)`` and the ``event_data`` of every task result that changed
    something (runner_on_ok events, in order; ``sorted({d["task"] for d in changed})`` names the tasks)."""
    events: list[dict] = []
    result = run_playbook(str(play), str(inventory), on_event=events.append, **kwargs)
    changed = [
        e["event_data"]
        for e in events
        if e.get("event") == "runner_on_ok" and (e["event_data"].get("res") or {}).get("changed")
    ]
    return result, changed


def changed_tasks(changed: list[dict]) -> list[str]:
    """The names of the tasks in ``run``'s changed results, sorted, each once."""
    return sorted({d["task"] for d in changed})


def on_localhost(tool: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """``tool`` (``ansible``, ``ansible-playbook``) of this test's virtualenv with ``args``, against localhost over the
    local connection, its modules run by this test's Python; output captured as text."""
    target = ["localhost"] if tool == "ansible" else ["-i", "localhost,"]
    python = "ansible_python_interpreter=" + sys.executable
    argv = [str(Path(sys.executable).parent / tool), *target, "-c", "local", "-e", python, *args]
    return subprocess.run(argv, env=env, capture_output=True, text=True)


def gpufleet(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """``gpufleet ARGS`` run by this test's Python, output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "gpufleet.cli", *args], capture_output=True, text=True, timeout=timeout
    )


def digest(root: Path) -> str:
    """A hash over the names and contents of the regular files under ``root`` (links are not followed)."""
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file() and not p.is_symlink():
            h.update(str(p).encode() + p.read_bytes())
    return h.hexdigest()


@contextlib.contextmanager
def namespace(prefix: str, tools: tuple[str, ...] = ("ip", "ethtool")) -> Iterator[str]:
    """A new network namespace named ``prefix-<random>``, deleted afterwards; the test is skipped when ``tools``
    are missing or this machine does not let us create one."""
    if not all(shutil.which(t) for t in tools):
        pytest.skip(f"{' and '.join(tools)} needed (make test installs them)")
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    if subprocess.run(["ip", "netns", "add", name], capture_output=True).returncode != 0:
        pytest.skip("ip netns add is not permitted here")
    try:
        yield name
    finally:
        subprocess.run(["ip", "netns", "delete", name], capture_output=True)


def ns_exec(ns: str, *cmd: str, check: bool = True) -> str:
    """Run ``cmd`` inside namespace ``ns``; its standard output."""
    return subprocess.run(["ip", "netns", "exec", ns, *cmd], check=check, capture_output=True, text=True).stdout


def veth(ns: str, name: str = "gv0", peer: str = "gv1", up: tuple[str, ...] | None = None) -> None:
    """A veth pair ``name``/``peer`` inside ``ns``; ``up``: the ends set up (default both)."""
    subprocess.run(["ip", "-n", ns, "link", "add", name, "type", "veth", "peer", "name", peer], check=True)
    for dev in (name, peer) if up is None else up:
        subprocess.run(["ip", "-n", ns, "link", "set", dev, "up"], check=True)


def ns_python(tmp: Path, ns: str) -> Path:
    """``tmp/python-in-ns``: this test's Python, run inside ``ns``."""
    wrapper = tmp / "python-in-ns"
    wrapper.write_text(f'#!/bin/sh\nexec ip netns exec {ns} {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


@contextlib.contextmanager
def listener() -> Iterator[int]:
    """A TCP port on 127.0.0.1 that accepts every connection and closes it, served by a thread until the block
    ends; yields the port."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    stop = threading.Event()

    def accept():
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
                conn.close()
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield sock.getsockname()[1]
    finally:
        stop.set()
        thread.join(2)
        sock.close()
