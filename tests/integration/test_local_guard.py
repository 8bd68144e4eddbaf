"""The playbooks never tune the controller by accident (issue 25, point 7).

`ansible-playbook playbooks/remediate.yml` without -i used ansible.cfg's inventory (localhost, local connection) and
changed the machine it ran on. Every playbook that changes hosts now starts with gpufleet.tuning.local_guard: a host
reached over the local connection (the inventory's ansible_connection, -c local) or at a loopback address is refused,
and the play stops for every host, unless the inventory sets gpufleet_allow_local_changes: true for it. The CLI
(`gpufleet remediate`, `gpufleet rollback`) refuses the same inventory before anything runs (exit 3).

Every run here is safe even where the guard is missing (today's main): check mode, a tag no task has (only the
`always` tasks run), and the lock and rollback records under the test's temp dir, so nothing on this machine can
change; the refusal is asserted to come before any other task.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gpufleet import exits

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
VARIABLE = "gpufleet_allow_local_changes"
GUARD_TASK = "Refuse to change the controller unless the inventory marks it (gpufleet_allow_local_changes)"
# The playbooks that only read: they keep working on localhost (`make audit`). Every other playbook changes hosts.
# links measures: a bounded iperf3 server and client, no setting changed.
READ_ONLY = {"audit", "probe", "topology", "links"}
CHANGING = sorted(p.stem for p in (REPO / "playbooks").glob("*.yml") if p.stem not in READ_ONLY)
NO_SUCH_TAG = "no-task-has-this-tag"


def _env() -> dict:
    """This test's environment without anything that would pick another ansible.cfg or inventory."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    return {**env, "PATH": f"{BIN}:{env.get('PATH', '')}", "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0"}


def _safe_vars(tmp: Path) -> list[str]:
    """Where a remediation or rollback would keep its lock and records: under ``tmp``, never this machine's /run or
    /var/lib; no privilege escalation."""
    extra = {
        "gpufleet_lock_path": str(tmp / "run" / "remediation.lock"),
        "gpufleet_rollback_dir": str(tmp / "rollback"),
        "gpufleet_become": False,
        "gpufleet_node_cache": str(tmp / "cache"),
        "prereqs_controller_cache": str(tmp / "cache"),
    }
    return ["-e", yaml.safe_dump(extra, default_flow_style=True).strip()]


def _playbook(name: str, tmp: Path, *args: str, tags: str = NO_SUCH_TAG) -> subprocess.CompletedProcess:
    """``ansible-playbook playbooks/<name>.yml --check --tags TAGS ARGS`` from the repository's root, as an operator
    runs it there (ansible.cfg of the checkout: without -i its inventory is localhost)."""
    argv = [str(BIN / "ansible-playbook"), f"playbooks/{name}.yml", "--check", "--tags", tags, *_safe_vars(tmp), *args]
    return subprocess.run(argv, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=300)


def _tasks(proc: subprocess.CompletedProcess) -> list[str]:
    return re.findall(r"^TASK \[(.+?)\] \*", proc.stdout, re.M)


def _recap(proc: subprocess.CompletedProcess, host: str) -> dict[str, int]:
    line = re.search(rf"^{re.escape(host)}\s*:\s*(.+)$", proc.stdout.split("PLAY RECAP")[-1], re.M)
    assert line, proc.stdout[-3000:] + proc.stderr[-2000:]
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", line.group(1))}


def _inventory(tmp: Path, hosts: dict[str, dict], name: str = "hosts.yml") -> Path:
    path = tmp / name
    base = {"ansible_python_interpreter": sys.executable}
    path.write_text(yaml.safe_dump({"all": {"hosts": {h: {**base, **v} for h, v in hosts.items()}}}))
    return path


def _refused(proc: subprocess.CompletedProcess, host: str) -> None:
    """The run failed at its first task, the guard, on ``host``, with a message that names the variable and the
    host, and no other task ran on any host."""
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0, text[-3000:]
    assert _tasks(proc) == [GUARD_TASK], text[-3000:]
    assert f"set {VARIABLE}: true for {host}" in text, text[-3000:]
    assert "machine Ansible runs on (the controller)" in text
    assert "Traceback" not in text
    assert _recap(proc, host)["failed"] == 1 and _recap(proc, host)["ok"] == 0


def test_the_read_only_and_changing_playbooks_are_the_ones_expected():
    """A new playbook is judged here: it changes hosts (and must start with the guard) unless listed read-only."""
    assert set(CHANGING) >= {"remediate", "rollback", "watch", "prereqs", "execution_node"}
    assert READ_ONLY <= {p.stem for p in (REPO / "playbooks").glob("*.yml")}


@pytest.mark.parametrize("name", CHANGING)
def test_changing_playbook_without_inventory_refuses_the_controller(name, tmp_path):
    """No -i: ansible.cfg's inventory, localhost over the local connection. Refused at the first task, even when
    --tags selects nothing else (the guard is tagged always)."""
    proc = _playbook(name, tmp_path)
    _refused(proc, "localhost")
    assert "localhost is reached over the local connection (local)" in proc.stdout
    assert not (tmp_path / "run").exists() and not (tmp_path / "rollback").exists()


def test_remediate_in_full_check_mode_refuses_before_any_role(tmp_path):
    """Without --tags too (every role selected): nothing but the guard runs."""
    proc = _playbook("remediate", tmp_path, tags="all")
    _refused(proc, "localhost")


def test_marked_inventory_proceeds(tmp_path):
    """The same local host, marked as intended: the guard passes and the play goes on (the always-tagged tasks
    after it run; check mode, a tag no role has)."""
    inventory = _inventory(tmp_path, {"localhost": {"ansible_connection": "local", VARIABLE: True}})
    proc = _playbook("remediate", tmp_path, "-i", str(inventory))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    tasks = _tasks(proc)
    assert tasks[0] == GUARD_TASK and "Name this remediation run (rollback records use it)" in tasks
    assert "Release the remediation lock" in tasks
    assert _recap(proc, "localhost")["failed"] == 0


@pytest.mark.parametrize("value", ["yes", "true", "True", "1", "on"])
def test_the_mark_takes_ansible_booleans_from_the_command_line(value, tmp_path):
    inventory = _inventory(tmp_path, {"lab-1": {"ansible_connection": "local"}})
    proc = _playbook("remediate", tmp_path, "-i", str(inventory), "-e", f"{VARIABLE}={value}")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert _tasks(proc)[:2] == [GUARD_TASK, "Name this remediation run (rollback records use it)"]
    assert "refusing to change" not in proc.stdout


@pytest.mark.parametrize("value", ["false", "no"])
def test_a_false_mark_refuses(value, tmp_path):
    inventory = _inventory(tmp_path, {"lab-1": {"ansible_connection": "local", VARIABLE: value}})
    _refused(_playbook("remediate", tmp_path, "-i", str(inventory)), "lab-1")


def test_local_connection_from_the_command_line_is_refused(tmp_path):
    """-c local turns an SSH host of the inventory into this machine: the connection Ansible really uses is
    judged, not the inventory's variable."""
    inventory = _inventory(tmp_path, {"gpu-01": {"ansible_host": "192.0.2.10"}})
    _refused(_playbook("remediate", tmp_path, "-i", str(inventory), "-c", "local"), "gpu-01")


@pytest.mark.parametrize("connection", ["local", "ansible.builtin.local"])
def test_local_connection_by_any_name_is_refused(connection, tmp_path):
    inventory = _inventory(tmp_path, {"gpu-01": {"ansible_connection": connection}})
    _refused(_playbook("watch", tmp_path, "-i", str(inventory)), "gpu-01")


@pytest.mark.parametrize("address", ["127.0.0.1", "::1", "localhost"])
def test_ssh_to_a_loopback_address_is_refused(address, tmp_path):
    """ssh to this machine is this machine too; the guard decides on the controller, without connecting."""
    inventory = _inventory(tmp_path, {"gpu-01": {"ansible_connection": "ssh", "ansible_host": address}})
    proc = _playbook("remediate", tmp_path, "-i", str(inventory))
    _refused(proc, "gpu-01")
    assert f"gpu-01 is reached at the loopback address {address}" in proc.stdout


def test_one_refused_host_stops_the_play_for_every_host(tmp_path):
    """An inventory that names the controller by accident is a wrong inventory: no host is changed, not even the
    marked one."""
    inventory = _inventory(
        tmp_path,
        {"lab-1": {"ansible_connection": "local", VARIABLE: True}, "controller": {"ansible_connection": "local"}},
    )
    proc = _playbook("remediate", tmp_path, "-i", str(inventory))
    assert proc.returncode != 0
    assert _tasks(proc) == [GUARD_TASK], proc.stdout[-3000:]
    assert _recap(proc, "controller")["failed"] == 1
    assert "set gpufleet_allow_local_changes: true for controller" in proc.stdout
    assert "for lab-1" not in proc.stdout


@pytest.mark.parametrize("value", ["maybe", "2", "[]"])
def test_a_bad_mark_is_refused_naming_the_variable_and_the_values(value, tmp_path):
    inventory = _inventory(tmp_path, {"gpu-01": {"ansible_host": "192.0.2.10", VARIABLE: yaml.safe_load(value)}})
    proc = _playbook("remediate", tmp_path, "-i", str(inventory))
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0 and _tasks(proc) == [GUARD_TASK], text[-3000:]
    assert f"{VARIABLE}: " in text and "is not a boolean; allowed values: true or false" in text, text[-3000:]
    assert "Traceback" not in text


def test_tasks_delegated_to_localhost_are_not_refused(tmp_path):
    """The guard judges the host the play changes; a later task delegated to localhost (a report, a download into
    the controller's cache, as execution_node.yml does) runs."""
    play = [
        {
            "name": "Delegation",
            "hosts": "all",
            "gather_facts": False,
            "tasks": [
                {"name": "Guard", "gpufleet.tuning.local_guard": None, "any_errors_fatal": True},
                {
                    "name": "On the controller",
                    "ansible.builtin.command": {"argv": ["true"]},
                    "delegate_to": "localhost",
                    "changed_when": False,
                },
            ],
        }
    ]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    inventory = _inventory(tmp_path, {"gpu-01": {"ansible_host": "192.0.2.10"}})
    argv = [
        str(BIN / "ansible-playbook"),
        "-i",
        str(inventory),
        str(tmp_path / "play.yml"),
        "-e",
        f"ansible_python_interpreter={sys.executable}",
    ]
    proc = subprocess.run(argv, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    recap = _recap(proc, "gpu-01")
    assert recap["ok"] == 2 and recap["failed"] == 0 and recap["unreachable"] == 0, proc.stdout[-3000:]


def test_read_only_playbook_still_runs_on_localhost(tmp_path):
    """topology.yml reads: the default inventory (localhost) is still fine for it, as for `make audit`."""
    argv = [str(BIN / "ansible-playbook"), "playbooks/topology.yml"]
    proc = subprocess.run(argv, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert GUARD_TASK not in proc.stdout and _recap(proc, "localhost")["failed"] == 0


# --------------------------------------------------------------------------------------------- the CLI


def _gpufleet(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gpufleet.cli", *args], capture_output=True, text=True, timeout=600, env=_env()
    )


def _cli_inventory(tmp: Path, **variables) -> Path:
    """One local host whose lock and records would be under ``tmp``."""
    host = {
        "ansible_connection": "local",
        "gpufleet_become": False,
        "gpufleet_lock_path": str(tmp / "run" / "remediation.lock"),
        "gpufleet_rollback_dir": str(tmp / "rollback"),
        **variables,
    }
    return _inventory(tmp, {"controller": host})


@pytest.mark.parametrize(
    "command",
    [
        # --check and a tag no role has: even where the CLI did not refuse, nothing here could change.
        ["remediate", "--check", "--tags", NO_SUCH_TAG, "--host-timeout", "60"],
        ["rollback", "--check"],
    ],
)
def test_cli_refuses_a_local_inventory_before_anything_runs(command, tmp_path):
    inventory = _cli_inventory(tmp_path)
    out = tmp_path / "reports"
    extra = ["--out", str(out)] if command[0] == "remediate" else []
    proc = _gpufleet(command[0], "-i", str(inventory), *command[1:], *extra)
    assert proc.returncode == exits.EXIT_USAGE, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"set {VARIABLE}: true for controller" in proc.stderr
    assert f"`gpufleet {command[0]}` changes the hosts it runs on" in proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    # Nothing ran: no audit report, no playbook output.
    assert not list(out.rglob("report.json"))
    assert "remediating" not in proc.stderr and "restored" not in proc.stdout


def test_cli_bad_mark_is_a_usage_error(tmp_path):
    inventory = _cli_inventory(tmp_path, **{VARIABLE: "sometimes"})
    proc = _gpufleet("rollback", "-i", str(inventory), "--check")
    assert proc.returncode == exits.EXIT_USAGE, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "controller: gpufleet_allow_local_changes: 'sometimes' is not a boolean; allowed values: true or false" in (
        proc.stderr
    )
    assert "Traceback" not in proc.stderr


def test_cli_marked_inventory_runs_the_playbook(tmp_path):
    """Marked: the rollback playbook runs (and finds no record under the temp dir: nothing to restore, exit 0)."""
    inventory = _cli_inventory(tmp_path, **{VARIABLE: True})
    proc = _gpufleet("rollback", "-i", str(inventory), "--check")
    assert proc.returncode == exits.EXIT_OK, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "refusing" not in proc.stdout + proc.stderr
    assert "controller: nothing to restore" in proc.stdout
