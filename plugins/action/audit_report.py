# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

# Documentation: plugins/modules/audit_report.py

from collections.abc import Mapping

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.gpufleet.tuning.plugins.plugin_utils import fleet
from ansible_collections.gpufleet.tuning.plugins.plugin_utils.report import writer


# The options plugins/modules/audit_report.py documents, validated by ActionBase.validate_argument_spec (the
# module argument spec validator, as a module's own AnsibleModule would): unknown options, a missing out_dir and
# wrong types fail with Ansible's own message naming the option.
ARGUMENT_SPEC = dict(
    out_dir=dict(type="path", required=True),
    result_var=dict(type="str", default="gpufleet_audit"),
    hosts=dict(type="list", elements="str"),
    started_at=dict(type="str"),
    policy_sources=dict(type="list", elements="str", default=[]),
    stamp=dict(type="str"),
    fail_on=dict(type="str", default="none", choices=["critical", "high", "medium", "low", "info", "none"]),
)


def _policy_site(hostvars, name):
    """The host's ``site`` from its policy layers (``fleet.host_site``; the --policy layer is an extra var here),
    or None when its variables cannot be read."""
    try:
        host = hostvars[name]
    except Exception:  # a host Ansible cannot give the variables of: its site stays unknown
        return None
    return fleet.host_site(host)


def _registered(hostvars, name, var):
    """The host's registered audit result as the module returned it (full or compact: ``fleet.expand`` reads both,
    decoding a compact one once), or None.

    Read untemplated (``hostvars.raw_get``): a module's result holds data, not templates, and templating each
    host's ~50 KB result through ``hostvars[name]`` cost more controller CPU than building the report (profiled
    with bench/audit_scale.py; figures in docs/benchmarks.md)."""
    try:
        host = hostvars.raw_get(name) if hasattr(hostvars, "raw_get") else hostvars[name]
    except KeyError:
        return None
    value = host.get(var) if isinstance(host, Mapping) else None
    return value if isinstance(value, dict) else None


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        out_dir = args["out_dir"]
        if not out_dir:
            raise AnsibleActionFail("out_dir: must not be empty (the directory that receives the reports)")
        var = args["result_var"]
        names = args.get("hosts") or task_vars.get("ansible_play_hosts_all") or []
        hostvars = task_vars.get("hostvars", {})
        results, sites = {}, {}
        for name in names:
            results[str(name)] = res = _registered(hostvars, name, var)
            if not fleet.answered(res):
                sites[str(name)] = _policy_site(hostvars, name)
        sources = task_vars.get("ansible_inventory_sources") or []
        report = fleet.build_report(
            results,
            started_at=args.get("started_at"),
            inventory=", ".join(str(s) for s in sources) or None,
            limit=task_vars.get("ansible_limit"),
            policy_sources=args.get("policy_sources") or [],
            sites=sites,
        )
        try:
            writer.check_writable(out_dir)
            files = writer.write_all(report, out_dir, stamp=args.get("stamp"))
        except (OSError, ValueError, writer.ReportDirError) as exc:
            raise AnsibleActionFail("out_dir: cannot write reports to %s: %s" % (out_dir, exc)) from exc
        result.update(
            changed=False,
            report_dir=str(files["json"].parent) if "json" in files else str(out_dir),
            files={k: str(v) for k, v in files.items()},
            summary=report["summary"],
            worst_severity=fleet.worst_severity(report),
            failing=fleet.failing(report),
        )
        # The run's verdict, as `gpufleet audit`'s exit code: playbooks/audit.yml fails the run on it.
        code, reason = fleet.verdict(report, args["fail_on"])
        result["verdict"] = {"code": code, "reason": reason, "fail_on": args["fail_on"]}
        return result
