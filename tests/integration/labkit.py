"""What the role and module tests share to run Ansible against this machine as a stand-in host, written once:

- ``local_host``, ``write_inventory``, ``write_play``: a local-connection host's variables, an inventory of such
  hosts, a play file;
- ``run``: a playbook run (gpufleet.runner, as the CLI runs them) with the tasks that changed something;
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
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from gpufleet.runner import run_playbook


def local_host(python: str | Path = sys.executable, **variables) -> dict:
    """A host Ansible reaches with the local connection, its modules run by ``python``."""
    return {"ansible_connection": "local", "ansible_python_interpreter": str(python), **variables}


def write_inventory(tmp: Path, hosts: dict[str, dict], name: str = "hosts.yml") -> Path:
    """``tmp/name``: an inventory of ``hosts`` (host name -> variables), all in group ``all``."""
    path = tmp / name
    path.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    return path


def write_play(tmp: Path, text: str, name: str = "play.yml") -> Path:
    path = tmp / name
    path.write_text(text)
    return path


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
