"""Run gpufleet playbooks through ansible-runner's Python API and collect what each host returned."""

from __future__ import annotations

import os
import shlex
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpufleet import paths


@dataclass
class HostResult:
    """What one host returned: module results by task name, and how the host fared."""

    name: str
    status: str = "ok"  # ok | failed | unreachable
    message: str | None = None
    results: dict[str, Any] = field(default_factory=dict)


@dataclass
class RunResult:
    rc: int
    status: str
    hosts: dict[str, HostResult]
    events: list[dict[str, Any]] = field(default_factory=list)


def _host(hosts: dict[str, HostResult], name: str) -> HostResult:
    if name not in hosts:
        hosts[name] = HostResult(name)
    return hosts[name]


def _message(res: dict[str, Any]) -> str:
    msg = str(res.get("msg") or res.get("reason") or res.get("stderr") or "").strip()
    return msg.splitlines()[0] if msg else "failed"


def _clean(res: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in (res or {}).items() if not k.startswith("_ansible") and k != "invocation"}


def run_playbook(
    playbook: str,
    inventory: str,
    limit: str | None = None,
    extravars: dict[str, Any] | None = None,
    forks: int | None = None,
    quiet: bool = True,
    on_event: Callable[[dict[str, Any]], None] | None = None,
    keep_events: bool = False,
    tags: str | None = None,
    check: bool = False,
    diff: bool = False,
) -> RunResult:
    """Run ``playbook`` (a name under the collection's ``playbooks/``, or a path) against ``inventory``.

    A host's result for a task that registered with ``ignore_errors``/``ignore_unreachable`` is kept under the
    task name even when it failed; the host's status says how it fared.
    """
    import ansible_runner  # imported here: `gpufleet --help` should not pay for it

    root = paths.collection_root()
    playbook_path = Path(playbook) if os.sep in playbook else root / "playbooks" / playbook
    if not playbook_path.is_file():
        raise FileNotFoundError(f"playbook not found: {playbook_path}")
    inventory_path = Path(inventory).resolve()
    if not inventory_path.exists():
        raise FileNotFoundError(f"inventory not found: {inventory}")

    hosts: dict[str, HostResult] = {}
    events: list[dict[str, Any]] = []

    def handler(event: dict[str, Any]) -> bool:
        if keep_events:
            events.append(event)
        data = event.get("event_data") or {}
        name = data.get("host")
        kind = event.get("event")
        if name:
            task = data.get("task", "")
            res = _clean(data.get("res") or {})
            if kind == "runner_on_ok":
                _host(hosts, name).results[task] = res
            elif kind == "runner_on_failed":
                h = _host(hosts, name)
                h.results[task] = res
                h.status, h.message = "failed", f"{task}: {_message(res)}"
            elif kind == "runner_on_unreachable":
                h = _host(hosts, name)
                h.results[task] = {**res, "unreachable": True}
                h.status, h.message = "unreachable", _message(res)
        if on_event is not None:
            on_event(event)
        return True

    with tempfile.TemporaryDirectory(prefix="gpufleet-run-") as tmp:
        workdir = Path(tmp)
        envvars = {
            "ANSIBLE_CONFIG": str(root / "ansible.cfg"),
            "ANSIBLE_COLLECTIONS_PATH": paths.collections_path(root, workdir / "collections"),
            # ansible-runner starts `ansible-playbook` from PATH: use the one installed next to us.
            "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""),
            "ANSIBLE_RETRY_FILES_ENABLED": "false",
        }
        cmdline = []
        if limit:
            cmdline += ["--limit", limit]
        if forks:
            cmdline += ["--forks", str(forks)]
        if tags:
            cmdline += ["--tags", tags]
        if check:
            cmdline.append("--check")
        if diff:
            cmdline.append("--diff")
        (workdir / "runner").mkdir()
        r = ansible_runner.run(
            private_data_dir=str(workdir / "runner"),
            playbook=str(playbook_path),
            inventory=str(inventory_path),
            envvars=envvars,
            extravars=extravars or {},
            cmdline=shlex.join(cmdline) if cmdline else None,
            event_handler=handler,
            quiet=quiet,
            project_dir=str(root),
        )
    return RunResult(rc=r.rc, status=r.status, hosts=hosts, events=events)
