# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""What each remediation role must set on one host: every fixable rule's ``target`` (next to its check in
``rules/<area>.py``), run over the facts the audit gathers and the policy the audit judges.

The remediation runs ``gpufleet.tuning.remediation_targets`` once per host at its start; the roles read the result
(``gpufleet_targets.roles.<role>``) and set exactly it, so the audit's expected value and the role's value come from
one function. A role's public variable that takes the place of a policy value (``Rule.role_vars``) is given to the
rule's target and listed in ``overrides``.

A role sets a rule's values only where the rule needs fixing: the audit's own check, run on the same facts and policy
(``rules.evaluate``), does not pass (``apply``). A rule that passes is left alone - its values already hold - unless
the play asks to make them persistent as well (``persist``: ``gpufleet_remediate_persist``) or one of the rule's role
variables is set (an explicit request to set that value). Rules that share one fix (GPU-ECC-001 and GPU-ECC-002) are
applied together. A rule the policy turned off (``rules.<id>.enabled: false``, or below ``min_severity``) is not
applied either: the owner chose not to judge it, and the fix reads the policy the audit judged. A rule the check
cannot judge here (skip: its facts are not readable; or error) keeps being applied, as before: the role's own modules
change only what differs.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.tuning.plugins.module_utils import rules

# The roles that apply targets, in the order remediate.yml runs them (nvidia_driver first: opt-in).
ROLES = ("nvidia_driver", "host_tuning", "network_tuning", "gpu_runtime")

# What each role's targets need gathered on the host (module_utils/audit_core.py GATHER names).
GATHER = {
    "nvidia_driver": (),
    "host_tuning": ("host",),
    "network_tuning": ("host", "network"),
    "gpu_runtime": ("gpu",),
}


def fixable(roles=ROLES, catalog=None):
    """The catalog's rules that have a target, for ``roles``."""
    return [r for r in (catalog or rules.RULES) if r.target is not None and r.fix["role"] in roles]


def role_variables(roles=ROLES, catalog=None):
    """Every public role variable that can take a policy value's place, in catalog order (unique)."""
    out = []
    for rule in fixable(roles, catalog):
        for rv in rule.role_vars:
            if rv.variable not in out:
                out.append(rv.variable)
    return out


def gather_for(roles):
    """The fact groups the targets of ``roles`` read."""
    out = []
    for role in roles:
        for part in GATHER.get(role, ()):
            if part not in out:
                out.append(part)
    return tuple(out)


def _dotted(policy, key):
    node = policy
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return None, False
        node = node[part]
    return node, True


# Role variables that choose what a target covers (which NICs), not a value to set: setting one alone is not a
# request to apply the rule on a host where it passes.
SELECTORS = ("network_tuning_interfaces",)

# The statuses of a rule that is applied without being asked (``persist`` or a role variable): anything but a pass.
PASSING = ("pass",)


def turned_off(rule, policy):
    """Whether the policy turned ``rule`` off for this host: ``rules.<id>.enabled: false``, or a severity below
    ``min_severity`` (the audit skips both, ``rules.evaluate``). The fix then leaves the rule alone too - the owner
    chose not to judge it - unless one of its role variables asks for a value."""
    conf = (policy.get("rules") or {}).get(rule.id) or {}
    if conf.get("enabled") is False:
        return True
    floor = rules.severity_rank(policy.get("min_severity") or "info")
    return rules.severity_rank(conf.get("severity") or rule.severity) > floor


def verdicts(facts, policy, roles=ROLES, catalog=None):
    """``{rule id: status}`` of every fixable rule of ``roles``: the audit's own judgement (``rules.evaluate``: the
    policy's ``rules.<id>.enabled``, severities and min_severity included) on ``facts`` and ``policy``."""
    return dict((f["rule"], f["status"]) for f in rules.evaluate(facts, policy, fixable(roles, catalog)))


def compute(facts, policy, role_vars=None, roles=ROLES, catalog=None, persist=False):
    """``{"roles": {role: {key: value}}, "overrides": [{variable, value, policy_key, policy_value}], "rules":
    {rule id: [keys]}, "verdicts": {rule id: status}, "apply": [rule id], "turned_off": [rule id], "passing":
    [rule id], "failing": [rule id]}`` for ``facts`` (the audit's shape) and ``policy`` (validated).

    ``role_vars``: the public role variables by name; None means not set. Each override row names the policy key the
    variable replaces and the policy's value there (or, for a derived target with no policy key of its own, what the
    policy's arithmetic gives).

    ``apply``: the rules whose values the roles set, in catalog order - every rule whose check does not pass
    (``verdicts``) or that shares its target function with such a rule, and a passing one only when ``persist`` is
    true; never a rule the policy turned off (``turned_off``: disabled, or below min_severity); and any rule one of
    whose role variables (not a ``SELECTORS`` one) is set. ``passing``: the rules whose check passes;
    ``failing``: those that fail or warn. ``turned_off``: the rules the policy turned off and no role variable
    asks for, in catalog order - a file the roles write whole for another rule (sysctl.d, sysfs.json, a NIC's
    persistence file) leaves their keys out, so the host keeps its own value there, at runtime and at boot.
    """
    role_vars = dict((k, v) for k, v in (role_vars or {}).items() if v is not None)
    out = dict((role, {}) for role in roles)
    overrides, by_rule, apply, off = [], {}, [], []
    judged = verdicts(facts, policy, roles, catalog)
    # Rules that share one fix (one target function: GPU-ECC-001's ECC on and GPU-ECC-002's pending mode) are
    # applied together: the value the fix sets holds only where every one of them passes.
    unheld = set(r.target for r in fixable(roles, catalog) if judged[r.id] not in PASSING and not turned_off(r, policy))
    for rule in fixable(roles, catalog):
        given = dict((rv.key, role_vars[rv.variable]) for rv in rule.role_vars if rv.variable in role_vars)
        asked = any(rv.variable in role_vars and rv.variable not in SELECTORS for rv in rule.role_vars)
        if asked or not turned_off(rule, policy) and (rule.target in unheld or persist):
            apply.append(rule.id)
        elif turned_off(rule, policy):  # and not asked: an asked rule is applied above
            off.append(rule.id)
        values = rule.target(facts, policy, given)
        by_rule[rule.id] = sorted(values)
        out[rule.fix["role"]].update(values)
        if not given:
            continue
        plain = rule.target(facts, policy, {})
        for rv in rule.role_vars:
            if rv.variable not in role_vars or any(o["variable"] == rv.variable for o in overrides):
                continue
            # A policy_key may depend on the policy (GPU-PWR-002: power.limit_w, limit_pct or min_power_limit_pct).
            key = rv.policy_key(policy) if callable(rv.policy_key) else rv.policy_key
            value, found = _dotted(policy, key)
            overrides.append(
                {
                    "variable": rv.variable,
                    "value": role_vars[rv.variable],
                    "policy_key": key,
                    "policy_value": value if found else plain.get(rv.key),
                }
            )
    return {
        "roles": out,
        "overrides": overrides,
        "rules": by_rule,
        "verdicts": judged,
        "apply": apply,
        "turned_off": off,
        "passing": [r for r in judged if judged[r] == "pass"],
        "failing": [r for r in judged if judged[r] in ("fail", "warn")],
    }


def interfaces(policy, role_vars=None):
    """The NICs whose facts the network targets read: ``network_tuning_interfaces`` when set, else the policy's
    ``network.interfaces`` (None: every NIC, as the audit reads them)."""
    given = (role_vars or {}).get("network_tuning_interfaces")
    return list(given) if given is not None else policy["network"]["interfaces"]
