"""gpufleet.workers: the --worker URL (a node or user spelled like an ssh option refused; the destination after
``--``), which hosts go through which worker (option, inventory variable, direct) and which of their variables the
job carries (connection and gpufleet variables; vaulted ones decrypted only when carried), reading the worker's
events, and a worker whose SSH fails (a real ssh to a closed port on loopback, the real transmit and process): its
hosts unreachable with ssh's reason. What a node's stream can do: test_worker_stream.py."""

from __future__ import annotations

import json
import socket

import pytest

from gpufleet import paths, runner, workers
from gpufleet.exits import UsageError


def test_parse_url_defaults_and_parts():
    w = workers.parse_option("eu=ssh://ops@exec-eu.example:2222")
    assert (w.region, w.user, w.host, w.port, w.venv) == ("eu", "ops", "exec-eu.example", 2222, "/opt/gpufleet/venv")
    assert w.via == "worker:eu"
    assert w.collections == "/opt/gpufleet/collections"
    w = workers.parse_option("us=ssh://exec-us/srv/gf/venv/")
    assert (w.user, w.port, w.venv, w.collections) == (None, None, "/srv/gf/venv", "/srv/gf/collections")


@pytest.mark.parametrize(
    "text, says",
    [
        ("eu", "expected REGION=ssh://"),
        ("eu=http://node", "must be an ssh:// URL"),
        ("eu=ssh://user@node:99999", "port must be a number"),
        ("eu=ssh://user@node?x=1", "only ssh://user@exec-node"),
        ("e u=ssh://node", "REGION must be a name"),
        ("=ssh://node", "REGION must be a name"),
        ("eu=ssh://", "names no execution node"),
        ("eu=ssh://-oProxyCommand=sh", "execution node must be a host name or address"),
        ("eu=ssh://ops@-oProxyCommand=sh:22", "execution node must be a host name or address"),
        ("eu=ssh://-lroot@node", "the user must be a login name"),
    ],
)
def test_parse_option_errors_name_the_problem(text, says):
    with pytest.raises(UsageError, match=says):
        workers.parse_option(text)


def test_ssh_command_runs_the_venvs_worker():
    """The destination after ``--``; the remote command runs the venv's python on the node script with the venv
    and the job's size (read back as the node's shell would split it)."""
    import shlex

    w = workers.parse_option("eu=ssh://ops@node:2200/opt/my venv")
    cmd = w.ssh_command(["-i", "key"], 1234)
    assert cmd[0] == "ssh" and "BatchMode=yes" in cmd and cmd[-3:-1] == ["--", "ops@node"]
    assert cmd[cmd.index("-p") + 1] == "2200" and "-i" in cmd
    words = shlex.split(cmd[-1])
    assert words[:2] == ["test", "-x"] and words[2] == "/opt/my venv/bin/ansible-runner"
    tail = words[words.index("exec") :]
    assert tail == ["exec", "/opt/my venv/bin/python", "-c", workers.NODE_SCRIPT, "/opt/my venv", "1234"]


@pytest.fixture
def inventory(tmp_path):
    inv = tmp_path / "hosts.yml"
    inv.write_text(
        json.dumps(
            {
                "all": {
                    "vars": {"ansible_connection": "local"},
                    "children": {
                        "eu": {"hosts": {"eu1": {}, "eu2": {"x": 1}}},
                        "us": {"hosts": {"us1": {}}, "vars": {"gpufleet_worker": "ssh://ops@exec-us"}},
                        "apac": {
                            "hosts": {"ap1": {}},
                            "vars": {"gpufleet_worker": "ssh://exec-ap:22", "gpufleet_worker_region": "apac"},
                        },
                        "home": {"hosts": {"h1": {}}},
                    },
                }
            }
        )
    )
    paths.import_collection()
    return str(inv)


def test_plan_option_inventory_variable_and_direct(inventory):
    names = ["eu1", "eu2", "us1", "ap1", "h1"]
    plan = workers.plan([inventory], names, ["eu=ssh://ops@exec-eu"])
    by = {w.region: hosts for w, hosts in plan.by_worker.items()}
    assert by == {"eu": ["eu1", "eu2"], "exec-us": ["us1"], "apac": ["ap1"]}
    assert plan.direct == ["h1"]
    assert plan.via() == {
        "eu1": "worker:eu",
        "eu2": "worker:eu",
        "us1": "worker:exec-us",
        "ap1": "worker:apac",
        "h1": "direct",
    }
    # what the region's job ships: connection and gpufleet variables, not Ansible's magic ones nor the others
    assert plan.hostvars["eu2"] == {"ansible_connection": "local"}
    assert plan.hostvars["ap1"] == {"ansible_connection": "local"}  # the routing variables stay here


def test_plan_option_wins_over_inventory_and_limit_is_kept(inventory):
    plan = workers.plan([inventory], ["us1"], ["us=ssh://other-node"])
    assert [(w.region, h) for w, h in plan.by_worker.items()] == [("us", ["us1"])]


def test_plan_without_workers_is_all_direct(inventory):
    plan = workers.plan([inventory], ["eu1", "h1"], [])
    assert plan.direct == ["eu1", "h1"] and not plan.by_worker


def test_plan_region_that_matches_no_host(inventory):
    with pytest.raises(UsageError, match="no host of the inventory is in 'mars'"):
        workers.plan([inventory], ["eu1"], ["mars=ssh://node"])


def test_plan_region_given_twice(inventory):
    with pytest.raises(UsageError, match="given twice"):
        workers.plan([inventory], ["eu1"], ["eu=ssh://a", "eu=ssh://b"])


def _event(kind, host, res, action="gpufleet.tuning.audit"):
    return {"event": kind, "event_data": {"host": host, "task": "Audit", "resolved_action": action, "res": res}}


def test_collect_reads_each_task_result_event():
    """runner.collect: the one reading of runner_on_* events, a direct run's and a worker's stream."""
    hosts = {}
    runner.collect(hosts, _event("runner_on_ok", "a", {"findings": [], "_ansible_no_log": False}))
    runner.collect(hosts, _event("runner_on_unreachable", "b", {"msg": "ssh: connect to host b: No route"}))
    runner.collect(hosts, _event("runner_on_failed", "c", {"msg": "boom\nmore"}))
    runner.collect(hosts, {"event": "playbook_on_start", "event_data": {}})
    assert set(hosts) == {"a", "b", "c"}
    assert hosts["a"].status == "ok" and hosts["a"].actions["gpufleet.tuning.audit"] == {"findings": []}
    assert hosts["b"].status == "unreachable" and hosts["b"].actions["gpufleet.tuning.audit"]["unreachable"]
    assert hosts["c"].status == "failed" and hosts["c"].message == "Audit: boom"


def test_unreachable_result_reads_as_unreachable_in_the_report():
    from ansible_collections.gpufleet.tuning.plugins.plugin_utils import fleet

    w = workers.parse_option("eu=ssh://node")
    entry = fleet.host_entry(workers.unreachable_result(w, "ssh ssh://node: Connection refused"))
    assert entry["status"] == "unreachable"
    assert entry["message"] == "worker eu (ssh://node) failed: ssh ssh://node: Connection refused"


def test_worker_whose_ssh_is_refused(tmp_path):
    """A real ssh to a loopback port nothing listens on: the job is packed (transmit), ssh fails, the processor
    sees the stream end; the run says why, with ssh's own words, and every host of the region is unreachable."""
    paths.import_collection()
    with socket.socket() as s:  # a free port, closed again: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    w = workers.parse_option(f"eu=ssh://nobody@127.0.0.1:{port}")
    plan = workers.Plan(by_worker={w: ["eu1", "eu2"]}, hostvars={"eu1": {}, "eu2": {}})
    outcome = workers.run_all(
        plan, [], "audit.yml", "gpufleet.tuning.audit", {}, ssh_args=["-o", "UserKnownHostsFile=/dev/null"]
    )
    (run,) = outcome.workers
    assert run.error and "Connection refused" in run.error, run.error
    assert set(outcome.results) == {"eu1", "eu2"}
    for result in outcome.results.values():
        assert result["unreachable"] and "Connection refused" in result["msg"]
    assert outcome.direct is None


def test_mentions_worker_reads_the_inventory_files(tmp_path, inventory):
    assert workers.mentions_worker([inventory])
    plain = tmp_path / "plain"
    (plain / "group_vars").mkdir(parents=True)
    (plain / "hosts.yml").write_text("all: {hosts: {a: {}}}\n")
    (plain / "group_vars" / "all.yml").write_text("gpufleet_policy: {}\n")
    assert not workers.mentions_worker([str(plain)])
    (plain / "group_vars" / "eu.yml").write_text("gpufleet_worker: ssh://exec-eu\n")
    assert workers.mentions_worker([str(plain / "hosts.yml"), str(plain)])


def test_ctrl_c_stops_the_workers_and_keeps_the_hosts_unanswered(tmp_path):
    """SIGINT while only workers run (an ssh that waits on a ProxyCommand that never answers: a hung link): the
    workers' ssh is killed at once, the outcome says SIGINT, and the region's hosts have no result (the report marks
    them interrupted) instead of being called unreachable."""
    import os
    import signal
    import threading
    import time

    paths.import_collection()
    w = workers.parse_option("eu=ssh://nobody@hung.invalid")
    plan = workers.Plan(by_worker={w: ["eu1"]}, hostvars={"eu1": {}})
    threading.Timer(1.5, os.kill, (os.getpid(), signal.SIGINT)).start()
    started = time.monotonic()
    outcome = workers.run_all(
        plan, [], "audit.yml", "gpufleet.tuning.audit", {}, ssh_args=["-o", "ProxyCommand=sleep 8"]
    )
    assert time.monotonic() - started < 15
    assert outcome.interrupted == "SIGINT"
    assert outcome.results == {"eu1": None}
    assert not workers._LIVE


def test_runs_use_the_quiet_strategy_unless_the_environment_names_one(tmp_path, monkeypatch):
    """The CLI's runs, direct and packed for a worker, select gpufleet.tuning.linear (plugins/strategy/linear.py);
    a user's ANSIBLE_STRATEGY is left to win."""
    from gpufleet import runner

    monkeypatch.delenv("ANSIBLE_STRATEGY", raising=False)
    assert runner.strategy_env() == {"ANSIBLE_STRATEGY": "gpufleet.tuning.linear"}
    playbook = tmp_path / "audit.yml"
    playbook.write_text("- hosts: all\n  tasks: []\n")
    job = workers.pack(tmp_path / "job", playbook, {"h1": {}}, {}, workers.parse_option("eu=ssh://exec-eu"))
    assert job["envvars"]["ANSIBLE_STRATEGY"] == "gpufleet.tuning.linear"
    monkeypatch.setenv("ANSIBLE_STRATEGY", "ansible.builtin.free")
    assert runner.strategy_env() == {}
    job = workers.pack(tmp_path / "job2", playbook, {"h1": {}}, {}, workers.parse_option("eu=ssh://exec-eu"))
    assert "ANSIBLE_STRATEGY" not in job["envvars"]


def test_plan_ships_connection_and_gpufleet_variables_only(tmp_path):
    """A group's database password and unrelated variables stay on the controller; what reaches the host
    (connection, become, interpreter) and gpufleet's policy layers and settings go."""
    inv = tmp_path / "hosts.yml"
    group_vars = {
        "ansible_host": "10.0.0.5",
        "ansible_user": "ops",
        "ansible_become": True,
        "ansible_become_method": "sudo",
        "ansible_ssh_common_args": "-o ProxyJump=bastion",
        "ansible_python_interpreter": "/usr/bin/python3",
        "gpufleet_policy_group": {"gpu.power_limit_w": 400},
        "gpufleet_sample_seconds": 0.5,
        "db_password": "s3cret",
        "monitoring_token": "t0ken",
        "ansible_vault_notes": "not a connection variable",
    }
    inv.write_text(json.dumps({"all": {"children": {"eu": {"hosts": {"eu1": {}}, "vars": group_vars}}}}))
    plan = workers.plan([str(inv)], ["eu1"], ["eu=ssh://exec-eu"])
    shipped = plan.hostvars["eu1"]
    dropped = {"db_password", "monitoring_token", "ansible_vault_notes"}
    assert shipped == {k: v for k, v in group_vars.items() if k not in dropped}


def _vaulted(plain: str, password: bytes = b"lab-vault-pw") -> str:
    from ansible.parsing.vault import VaultLib, VaultSecret

    text = VaultLib([("default", VaultSecret(password))]).encrypt(plain)
    text = text.decode() if isinstance(text, bytes) else text
    return "!vault |\n" + "".join(f"      {line}\n" for line in text.splitlines())


def _vault_inventory(tmp_path, **vaulted: str):
    lines = ["all:", "  children:", "    eu:", "      hosts: {eu1: {}}", "      vars:"]
    lines.append("        ansible_connection: local")
    for name, value in vaulted.items():
        lines.append(f"        {name}: " + _vaulted(value).replace("\n      ", "\n          ").rstrip("\n"))
    inv = tmp_path / "hosts.yml"
    inv.write_text("\n".join(lines) + "\n")
    return str(inv)


def test_plan_with_an_unrelated_vaulted_variable_needs_no_password(tmp_path, monkeypatch):
    """A vaulted group variable the audit does not read is neither decrypted nor shipped: planning works without
    a vault password (it stopped with Ansible's ReferenceError)."""
    monkeypatch.delenv("ANSIBLE_VAULT_PASSWORD_FILE", raising=False)
    monkeypatch.delenv("ANSIBLE_VAULT_IDENTITY_LIST", raising=False)
    inv = _vault_inventory(tmp_path, db_password="s3cret")
    plan = workers.plan([inv], ["eu1"], ["eu=ssh://exec-eu"])
    assert plan.hostvars["eu1"] == {"ansible_connection": "local"}


def test_plan_decrypts_a_vaulted_variable_the_worker_needs(tmp_path, monkeypatch):
    """A vaulted become password and policy layer: decrypted on the controller with the vault password Ansible is
    configured with (ANSIBLE_VAULT_PASSWORD_FILE, as a direct run reads it) and shipped in clear; the unrelated
    vaulted variable is not shipped."""
    pw = tmp_path / "vault-pw"
    pw.write_text("lab-vault-pw\n")
    monkeypatch.setenv("ANSIBLE_VAULT_PASSWORD_FILE", str(pw))
    inv = _vault_inventory(tmp_path, ansible_become_password="b3come", gpufleet_environment="X", db_password="s3cret")
    plan = workers.plan([inv], ["eu1"], ["eu=ssh://exec-eu"])
    assert plan.hostvars["eu1"] == {
        "ansible_connection": "local",
        "ansible_become_password": "b3come",
        "gpufleet_environment": "X",
    }


@pytest.mark.parametrize("password", [None, "wrong-password"])
def test_plan_says_which_vaulted_variable_it_cannot_open(tmp_path, monkeypatch, password):
    monkeypatch.delenv("ANSIBLE_VAULT_IDENTITY_LIST", raising=False)
    if password:
        pw = tmp_path / "vault-pw"
        pw.write_text(password + "\n")
        monkeypatch.setenv("ANSIBLE_VAULT_PASSWORD_FILE", str(pw))
        says = "ansible_become_password of host eu1 is vault-encrypted and cannot be decrypted"
    else:
        monkeypatch.delenv("ANSIBLE_VAULT_PASSWORD_FILE", raising=False)
        says = "ansible_become_password of host eu1 is vault-encrypted and the worker needs it: give its vault password"
    inv = _vault_inventory(tmp_path, ansible_become_password="b3come")
    with pytest.raises(UsageError, match=says):
        workers.plan([inv], ["eu1"], ["eu=ssh://exec-eu"])


def test_plan_opens_no_vault_for_direct_hosts(tmp_path, monkeypatch):
    """A direct host's vaulted become password is the direct run's business (ansible-playbook reads the inventory
    itself): planning does not need its vault password and keeps nothing vaulted for it."""
    monkeypatch.delenv("ANSIBLE_VAULT_PASSWORD_FILE", raising=False)
    monkeypatch.delenv("ANSIBLE_VAULT_IDENTITY_LIST", raising=False)
    inv = _vault_inventory(tmp_path, ansible_become_password="b3come")
    plan = workers.plan([inv], ["eu1"], [])
    assert plan.direct == ["eu1"] and plan.hostvars["eu1"] == {"ansible_connection": "local"}
