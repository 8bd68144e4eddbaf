"""One policy wherever a finding is made (issue 29 point 1): the watch judges by the policy the audit judges by.

On the demo fleet (inventories/demo: its fleet-wide gpufleet_policy; plus a group layer of our own, from a second
inventory), the team's policy file is given to
`gpufleet audit --policy FILE` and to playbooks/watch.yml as `-e gpufleet_policy_file=FILE`: the policy in the
watch.json the role would write (check mode, its diff) is, host by host, the one the audit judged by (the report's
policy_digest). The same file given as `-e @FILE` (its keys as variables of their own, which nothing reads) stops
the run naming what to use, before anything is installed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import labkit
import pytest
import yaml

from gpufleet.runner import run_playbook

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "inventories" / "demo" / "hosts.yml"
sys.path.insert(0, str(REPO / "tests" / "sim"))
import demo  # noqa: E402

pytestmark = pytest.mark.integration

HOSTS = ("iad-h100-03", "fra-h100-01")
# The example: what watch.json held instead (info, null, null) when the file was not read.
POLICY = {"min_severity": "low", "software": {"driver_branch": 550}, "power": {"limit_pct": 90}}
CONFIG_TASK = "Write the checker's configuration (host, effective policy, audit options)"


def _watch(inventories, tmp, extravars):
    """playbooks/watch.yml in check mode with --diff on HOSTS: per host (status, message, the watch.json it would
    write or None). Where the role would install goes under ``tmp`` (nothing is written in check mode anyway)."""
    role_vars = {
        "watch_path": str(tmp / "sbin" / "gpufleet-watch"),
        "watch_config_file": str(tmp / "{{ inventory_hostname }}" / "watch.json"),
        "watch_unit_dir": str(tmp / "{{ inventory_hostname }}" / "units"),
        "watch_run_now": False,
        "watch_timer_enabled": False,
    }
    where = tmp / "watch.yml"
    where.write_text(yaml.safe_dump({"all": {"vars": role_vars}}))
    events = []
    result = run_playbook(
        "watch.yml",
        [*map(str, inventories), str(where)],
        limit=",".join(HOSTS),
        extravars=extravars,
        check=True,
        diff=True,
        on_event=events.append,
    )
    configs = {}
    for event in events:
        data = event.get("event_data") or {}
        if event.get("event") == "runner_on_ok" and data.get("task") == CONFIG_TASK:
            diff = data["res"]["diff"]
            configs[data["host"]] = json.loads((diff[0] if isinstance(diff, list) else diff)["after"])
    return {name: (result.hosts[name].status, result.hosts[name].message, configs.get(name)) for name in HOSTS}


def _digest(policy: dict) -> str:
    import hashlib

    return "sha256:" + hashlib.sha256(json.dumps(policy, sort_keys=True).encode("utf-8")).hexdigest()


def test_the_watch_judges_by_the_audits_policy_and_a_policy_nothing_reads_is_an_error(tmp_path, sim_lib):
    if not (REPO / "build" / "demo" / HOSTS[0]).is_dir():
        demo.build(REPO / "build" / "demo")
    group = tmp_path / "group.yml"
    group.write_text(
        yaml.safe_dump({"eu_west": {"vars": {"gpufleet_policy_group": {"memory": {"max_swappiness": 5}}}}})
    )
    inventories = (DEMO, group)
    policy_file = tmp_path / "policy.yml"
    policy_file.write_text(yaml.safe_dump(POLICY))

    audit = labkit.gpufleet(
        "audit",
        "-i",
        str(DEMO),
        "-i",
        str(group),
        "-l",
        ",".join(HOSTS),
        "--policy",
        str(policy_file),
        "--out",
        str(tmp_path / "r"),
    )
    assert audit.returncode in (0, 1), audit.stdout[-2000:] + audit.stderr[-2000:]
    report = json.loads((tmp_path / "r" / "last-partial" / "report.json").read_text())  # -l: latest not moved

    watch = _watch(inventories, tmp_path, {"gpufleet_policy_file": str(policy_file)})
    for name in HOSTS:
        status, message, config = watch[name]
        assert status == "ok" and config, (name, message)
        policy = config["policy"]
        judged = (policy["min_severity"], policy["software"]["driver_branch"], policy["power"]["limit_pct"])
        assert judged == ("low", 550, 90), name
        assert _digest(policy) == report["hosts"][name]["policy_digest"], name
    assert watch["fra-h100-01"][2]["policy"]["memory"]["max_swappiness"] == 5  # the group layer, per host
    assert watch["iad-h100-03"][2]["policy"]["site"] == "us_east"

    # -e @policy.yml: each key a variable of its own, read by nothing. An error naming what to use, not a no-op.
    stray = _watch(inventories, tmp_path, POLICY)
    for name in HOSTS:
        status, message, config = stray[name]
        assert status == "failed" and config is None, (name, message)
        assert "min_severity, power, software" in message and "gpufleet_policy_file" in message, message
