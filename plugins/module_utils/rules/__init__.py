# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""The rule catalog: one table that turns gathered facts into findings.

Every rule has an id (``GPU-PWR-001``), an area, a severity, a title, a rationale a fleet owner understands, the
sources it rests on (``references``), a pure check ``(facts, policy) -> result`` and a fix (role + tag, or manual
advice). Each area's rules live in their own file (``memory``, ``cpu``, ``network``, ``power``, ``health``,
``software``), every check next to its catalog entry; this package assembles them. The audit module runs them on the
target; remediation roles, tags, toggles and tests use the same ids.

``facts`` is ``{"gpu": <gpu_info result>, "host": <host_info host>, "network": <nic_info network>,
"links": {"source": ..., "peers": [{site, rtt_ms, bandwidth_gbps}]}, "probe": <gpu_probe sample>}``; any part may be
missing, and a rule whose facts are missing reports ``skip`` with the reason (the balance rules, ``balance``, read only
``probe``, which only ``gpufleet probe`` gathers).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.tuning.plugins.module_utils.policy import AREAS, SEVERITIES, PolicyError, from_option
from ansible_collections.gpufleet.tuning.plugins.module_utils.summary import count_findings
from ansible_collections.gpufleet.tuning.plugins.module_utils.rules import (
    balance,
    cpu,
    gpudirect,
    health,
    measured,
    memory,
    network,
    power,
    rdma,
    software,
)
from ansible_collections.gpufleet.tuning.plugins.module_utils.rules.base import (  # noqa: F401 (the package's API)
    STATUSES,
    Rule,
    long_haul_links,
    result,
    rtt_links,
    severity_rank,
    skip,
)

RULES = (
    memory.RULES + cpu.RULES + network.RULES + gpudirect.RULES + measured.RULES + power.RULES + health.RULES
    + software.RULES + balance.RULES + rdma.RULES
)
BY_ID = dict((r.id, r) for r in RULES)


def catalog():
    return [r.describe() for r in RULES]


def policy_from_module(module):
    """The ``policy`` option of a module that judges with this catalog (audit, gpu_probe), validated as
    ``policy.from_option`` does with these rule ids; a bad policy fails the module with the message that names the
    key and what it takes."""
    try:
        return from_option(module.params["policy"], known_rules=BY_ID)
    except PolicyError as exc:
        module.fail_json(msg=str(exc))


def evaluate(facts, policy, rules=RULES):
    """Run every rule; each finding carries the rule's metadata. A rule that raises becomes status 'error'."""
    findings = []
    min_rank = severity_rank(policy.get("min_severity") or "info")
    overrides = policy.get("rules") or {}
    for rule in rules:
        conf = overrides.get(rule.id) or {}
        severity = conf.get("severity") or rule.severity
        base = {"rule": rule.id, "area": rule.area, "title": rule.title, "fix": dict(rule.fix)}
        if conf.get("enabled") is False:
            res = skip("disabled by policy (rules.%s.enabled: false)" % rule.id)
        elif severity_rank(severity) > min_rank:
            res = skip("severity %s is below policy min_severity %s" % (severity, policy.get("min_severity")))
        else:
            try:
                res = rule.check(facts, policy)
            except Exception as exc:  # a rule bug must not hide the other findings
                res = result("error", message="%s: %s" % (type(exc).__name__, exc))
        if not conf.get("severity") and res.get("severity"):
            severity = res["severity"]
        res.pop("severity", None)
        base.update(res)
        base["severity"] = severity
        findings.append(base)
    return findings


def summarize(findings):
    """Counts by status, and by severity and area for fail/warn findings (``summary.count_findings``, the count a
    report's summary makes too)."""
    return count_findings(findings, STATUSES, SEVERITIES, AREAS)
