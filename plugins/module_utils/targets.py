# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""What each remediation role must set on one host: every fixable rule's ``target`` (next to its check in
``rules/<area>.py``), run over the facts the audit gathers and the policy the audit judges.

The remediation runs ``gpufleet.tuning.remediation_targets`` once per host at its start; the roles read the result
(``gpufleet_targets.roles.<role>``) and set exactly it, so the audit's expected value and the role's value come from
one function. A role's public variable that takes the place of a policy value (``Rule.role_vars``) is given to the
rule's target and listed in ``overrides``.
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
    "gpu_runtime": (),
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


def compute(facts, policy, role_vars=None, roles=ROLES, catalog=None):
    """``{"roles": {role: {key: value}}, "overrides": [{variable, value, policy_key, policy_value}], "rules":
    {rule id: [keys]}}`` for ``facts`` (the audit's shape) and ``policy`` (validated).

    ``role_vars``: the public role variables by name; None means not set. Each override row names the policy key the
    variable replaces and the policy's value there (or, for a derived target with no policy key of its own, what the
    policy's arithmetic gives).
    """
    role_vars = dict((k, v) for k, v in (role_vars or {}).items() if v is not None)
    out = dict((role, {}) for role in roles)
    overrides, by_rule = [], {}
    for rule in fixable(roles, catalog):
        given = dict((rv.key, role_vars[rv.variable]) for rv in rule.role_vars if rv.variable in role_vars)
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
    return {"roles": out, "overrides": overrides, "rules": by_rule}


def interfaces(policy, role_vars=None):
    """The NICs whose facts the network targets read: ``network_tuning_interfaces`` when set, else the policy's
    ``network.interfaces`` (None: every NIC, as the audit reads them)."""
    given = (role_vars or {}).get("network_tuning_interfaces")
    return list(given) if given is not None else policy["network"]["interfaces"]
