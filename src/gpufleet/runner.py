"""Run gpufleet playbooks through ansible-runner and collect what each host returned."""

from __future__ import annotations

import os
import sys
import tempfile
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


def _host(hosts: dict[str, HostResult], name: str) -> HostResult:
    if name not in hosts:
        hosts[name] = HostResult(name)
    return hosts[name]


def _message(res: dict[str, Any]) -> str:
    msg = res.get("msg") or res.get("reason") or res.get("stderr") or "failed"
    return str(msg).strip().splitlines()[0] if str(msg).strip() else "failed"


def run_playbook(
    playbook: str,
    inventory: str,
    limit: str | None = None,
    extravars: dict[str, Any] | None = None,
    forks: int | None = None,
    quiet: bool = True,
) -> RunResult:
    """Run ``playbook`` (a name under the collection's ``playbooks/``, or a path) against ``inventory``."""
    import ansible_runner  # imported here: `gpufleet --help` should not pay for it

    root = paths.collection_root()
    playbook_path = Path(playbook) if os.sep in playbook else root / "playbooks" / playbook
    if not playbook_path.is_file():
        raise FileNotFoundError(f"playbook not found: {playbook_path}")
    inventory_path = Path(inventory).resolve()
    if not inventory_path.exists():
        raise FileNotFoundError(f"inventory not found: {inventory}")

    hosts: dict[str, HostResult] = {}

    def on_event(event: dict[str, Any]) -> bool:
        data = event.get("event_data") or {}
        name = data.get("host")
        kind = event.get("event")
        if not name:
            return True
        if kind == "runner_on_ok":
            res = {
                k: v for k, v in (data.get("res") or {}).items() if not k.startswith("_ansible") and k != "invocation"
            }
            _host(hosts, name).results[data.get("task", "")] = res
        elif kind == "runner_on_failed" and not data.get("ignore_errors"):
            h = _host(hosts, name)
            h.status, h.message = "failed", f"{data.get('task')}: {_message(data.get('res') or {})}"
        elif kind == "runner_on_unreachable":
            h = _host(hosts, name)
            h.status, h.message = "unreachable", _message(data.get("res") or {})
        return True

    with tempfile.TemporaryDirectory(prefix="gpufleet-run-") as tmp:
        workdir = Path(tmp)
        bindir = str(Path(sys.executable).parent)
        envvars = {
            "ANSIBLE_CONFIG": str(root / "ansible.cfg"),
            "ANSIBLE_COLLECTIONS_PATH": paths.collections_path(root, workdir / "collections"),
            # ansible-runner starts `ansible-playbook` from PATH: use the one installed next to us.
            "PATH": bindir + os.pathsep + os.environ.get("PATH", ""),
            "ANSIBLE_RETRY_FILES_ENABLED": "false",
        }
        cmdline = []
        if limit:
            cmdline += ["--limit", limit]
        if forks:
            cmdline += ["--forks", str(forks)]
        (workdir / "runner").mkdir()
        r = ansible_runner.run(
            private_data_dir=str(workdir / "runner"),
            playbook=str(playbook_path),
            inventory=str(inventory_path),
            envvars=envvars,
            extravars=extravars or {},
            cmdline=" ".join(cmdline) if cmdline else None,
            event_handler=on_event,
            quiet=quiet,
            project_dir=str(root),
        )
    return RunResult(rc=r.rc, status=r.status, hosts=hosts)
