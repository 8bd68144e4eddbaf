#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
# The module runs on the target; its action plugin (plugins/action/remediation_targets.py) hands it the policy layers
# (policy.LAYERS) and the roles' public variables from the controller.

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: remediation_targets
short_description: What each gpufleet remediation role must set on a host, from the policy the audit judges
version_added: "0.2.0"
description:
  - Merges the host's policy layers (C(gpufleet_policy), C(gpufleet_policy_group), C(gpufleet_policy_host),
    C(gpufleet_policy_overrides), filled in by the action plugin) and validates them once, with the audit's code;
    an invalid policy fails the host here, with the key's path and the allowed values, before anything changes.
  - Gathers the facts the audit gathers for the roles asked (host settings, the named NICs, the long-haul links)
    and runs every fixable rule's C(target) - the function next to the rule's check in C(rules/<area>.py) - so the
    value a role sets is the one the audit expects.
  - A role's public variable set in the inventory (for example C(host_tuning_swappiness)) takes the place of the
    policy's value for its target; each one set is listed in RV(overrides).
  - Judges each fixable rule with the audit's own check on the same facts and policy (RV(verdicts)); the roles set
    a rule's values only where it does not pass (RV(apply)). A passing rule's values already hold and are left
    alone, unless O(persist) is true or one of the rule's role variables is set (an explicit request); a rule the
    check cannot judge here (skip, error) is applied as before.
  - C(playbooks/remediate.yml) runs it once per host at the start and registers C(gpufleet_targets); a role run on
    its own runs it itself when C(gpufleet_targets) is not defined.
  - This module never changes anything.
author:
  - gpufleet contributors (@gpufleet)
options:
  roles:
    description: The roles whose targets to compute (only their facts are gathered).
    type: list
    elements: str
    choices: [nvidia_driver, host_tuning, network_tuning, gpu_runtime]
    default: [nvidia_driver, host_tuning, network_tuning, gpu_runtime]
  root:
    description: Read sysfs/procfs under this directory instead of C(/) (tests and containers).
    type: path
    default: /
  sample_seconds:
    description:
      - Seconds between the two readings of the NIC drop counters and the swap rate (what NET-RING-001 and the
        memory rules judge), as the audit's C(sample_seconds). V(0) reads once.
    type: float
    default: 1.0
  peer_timeout:
    description: Seconds to wait for each TCP connect when measuring links to the policy's C(peers) (0-60].
    type: float
    default: 3.0
  ethtool_path:
    description: Path of ethtool (default - searched in PATH).
    type: path
  persist:
    description:
      - Apply the rules that pass too, so that their values (already in effect) are made persistent (sysctl.d,
        limits.d, the boot-time apply scripts). C(playbooks/remediate.yml) passes C(gpufleet_remediate_persist)
        (C(gpufleet remediate --persist)).
    type: bool
    default: false
  policy:
    description:
      - The policy layers, first to last (C(policy.LAYERS)). The action plugin fills it in from the host's
        variables. Do not set it.
    type: list
    elements: raw
  role_vars:
    description:
      - The roles' public variables that can take a policy value's place, by name (null - not set). The action
        plugin fills it in from the host's variables. Do not set it.
    type: dict
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpufleet.tuning.attributes.read_only
  - gpufleet.tuning.gpu_reader
notes:
  - The GPU options (O(backend), O(nvml_library), O(nvidia_smi_path)) are used when C(gpu_runtime) is asked - its
    rules are judged from the GPUs' state, read as M(gpufleet.tuning.audit) reads it.
"""

EXAMPLES = r"""
- name: What the remediation roles will set on this host
  gpufleet.tuning.remediation_targets:
  register: gpufleet_targets

- name: Show the swappiness host_tuning will set
  ansible.builtin.debug:
    msg: "{{ gpufleet_targets.roles.host_tuning.swappiness }}"
"""

RETURN = r"""
policy:
  description: The host's effective policy (every key, defaults filled in), validated.
  returned: always
  type: dict
roles:
  description:
    - Per role, its targets by key (the keys each role's tasks read; C(docs/architecture.md) lists them).
  returned: always
  type: dict
  sample:
    nvidia_driver: {"driver_branch": 550}
    host_tuning: {"swappiness": 10, "thp_defrag": "madvise", "memlock": "unlimited", "governor": "performance"}
    network_tuning: {"buffer_bytes": 90000000, "congestion_control": "bbr", "mtu": {"ens1": 9000}}
    gpu_runtime: {"persistence_mode": true, "power_limit": "100%", "power_limit_at_least": true, "ecc_mode": true}
rules:
  description: Per fixable rule, the target keys its C(target) function set.
  returned: always
  type: dict
  sample: {"HOST-MEM-002": ["swappiness"]}
verdicts:
  description:
    - Per fixable rule of the roles asked, its status as the audit's check gives it on the facts gathered here
      (pass, fail, warn, skip, error; the policy's C(rules) and C(min_severity) included).
  returned: always
  type: dict
  sample: {"HOST-MEM-002": "pass", "HOST-CPU-001": "fail", "GPU-PWR-001": "pass"}
apply:
  description:
    - The rules whose values the roles set, in catalog order - every rule that does not pass; a passing rule only
      with O(persist) or when one of its role variables is set; never a rule in RV(turned_off). The roles skip the
      tasks of the others.
  returned: always
  type: list
  elements: str
  sample: ["HOST-CPU-001"]
turned_off:
  description:
    - The fixable rules the policy turned off here (C(rules.<id>.enabled) false, or a severity below
      C(min_severity)) and no role variable asks for, in catalog order. The audit skips them and the roles leave
      them alone - also in a file they write whole for another rule (the sysctl.d files, sysfs.json, a NIC's
      persistence file), so the host keeps its own value for their keys.
  returned: always
  type: list
  elements: str
  sample: ["HOST-MEM-005"]
passing:
  description: The fixable rules whose check passes on this host (their values already hold).
  returned: always
  type: list
  elements: str
  sample: ["HOST-MEM-002", "GPU-PWR-001"]
failing:
  description: The fixable rules whose check fails or warns on this host.
  returned: always
  type: list
  elements: str
  sample: ["HOST-CPU-001"]
overrides:
  description: The roles' public variables that took a policy value's place.
  returned: always
  type: list
  elements: dict
  sample:
    - {"variable": "host_tuning_swappiness", "value": 1, "policy_key": "memory.max_swappiness", "policy_value": 10}
links:
  description: The host's long-haul links as the audit resolves them (when network_tuning is asked).
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
# First: every module_utils file below is then compiled once per run, not twice (zipimport_once.py says why).
from ansible_collections.gpufleet.tuning.plugins.module_utils import zipimport_once  # noqa: F401  # pylint: disable=unused-import
from ansible_collections.gpufleet.tuning.plugins.module_utils import audit_core, gpu, rules, targets
from ansible_collections.gpufleet.tuning.plugins.module_utils.policy import PolicyError, from_option

ROLES = list(targets.ROLES)


def gather(module, policy, roles, role_vars):
    """The audit's facts for ``roles`` (plus ``links``), or {} when their targets read none."""
    parts = targets.gather_for(roles)
    if not parts:
        return {}
    p = module.params
    res = audit_core.run(
        module,
        policy,
        root=p["root"],
        gather=parts,
        interfaces=targets.interfaces(policy, role_vars),
        sample_seconds=p["sample_seconds"],
        kernel_log="none",
        ethtool=p["ethtool_path"],
        peer_timeout=p["peer_timeout"],
    )
    return dict(res["facts"], links=res["links"])


def main():
    module = AnsibleModule(
        argument_spec=dict(
            gpu.READER_SPEC,
            roles=dict(type="list", elements="str", choices=ROLES, default=ROLES),
            sample_seconds=dict(type="float", default=1.0),
            peer_timeout=dict(type="float", default=3.0),
            ethtool_path=dict(type="path"),
            policy=dict(type="list", elements="raw"),
            role_vars=dict(type="dict"),
            persist=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    p = module.params
    gpu.check_reader_params(module)
    if not 0 <= p["sample_seconds"] <= 60:
        module.fail_json(msg="sample_seconds: must be between 0 and 60, got %s" % p["sample_seconds"])
    if not 0 < p["peer_timeout"] <= 60:
        module.fail_json(msg="peer_timeout: must be > 0 and <= 60, got %s" % p["peer_timeout"])
    try:
        policy = from_option(p["policy"] or [], known_rules=rules.BY_ID)
    except PolicyError as exc:
        module.fail_json(msg="policy: %s" % exc)
    role_vars = p["role_vars"] or {}
    unknown = sorted(set(role_vars) - set(targets.role_variables()))
    if unknown:
        module.fail_json(
            msg="role_vars: unknown variable(s) %s (allowed: %s)"
            % (", ".join(unknown), ", ".join(targets.role_variables()))
        )
    roles = [r for r in ROLES if r in p["roles"]]
    facts = gather(module, policy, roles, role_vars)
    try:
        out = targets.compute(facts, policy, role_vars, roles=roles, persist=p["persist"])
    except ValueError as exc:  # a role variable the target cannot use: the message names it and what it takes
        module.fail_json(msg="role_vars: %s" % exc)
    module.exit_json(changed=False, policy=policy, links=facts.get("links") or {}, **out)


if __name__ == "__main__":
    main()
