# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: effective_policy
short_description: A host's effective gpufleet policy, merged and validated exactly as the audit does it
version_added: "0.2.0"
description:
  - Takes the policy layers in the audit's order (C(gpufleet_policy), C(gpufleet_policy_group),
    C(gpufleet_policy_host), C(gpufleet_policy_overrides)), merges them over the documented defaults and validates
    the result with the same code the M(gpufleet.tuning.audit) module runs on the target
    (C(module_utils/policy.py)), so a remediation role fixes exactly what the audit judged.
  - An invalid policy fails the task with the key's path and the allowed values.
options:
  _input:
    description: The policy layers, first to last; C(null) layers are skipped.
    type: list
    elements: dict
    required: true
"""

EXAMPLES = r"""
- name: The host's policy, as the audit sees it
  ansible.builtin.set_fact:
    gpufleet_effective_policy: >-
      {{ [gpufleet_policy | default({}), gpufleet_policy_group | default({}), gpufleet_policy_host | default({}),
          gpufleet_policy_overrides | default({})] | gpufleet.tuning.effective_policy }}
"""

RETURN = r"""
_value:
  description: The complete policy (every key of C(gpufleet policy), defaults filled in).
  type: dict
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.tuning.plugins.module_utils import policy as policy_mod
from ansible_collections.gpufleet.tuning.plugins.module_utils import rules
from ansible_collections.gpufleet.tuning.plugins.plugin_utils.fleet import plain

# The inventory variables, in merge order; the audit playbook, the CLI and every role use these names.
LAYERS = policy_mod.LAYERS


def effective_policy(layers):
    if isinstance(layers, dict):
        layers = [layers]
    if not isinstance(layers, (list, tuple)):
        raise AnsibleFilterError(
            "effective_policy: expected a list of policy layers (%s), got %s"
            % (", ".join(LAYERS), type(layers).__name__)
        )
    try:
        merged = policy_mod.merge_layers([plain(layer) for layer in layers], names=LAYERS)
        return policy_mod.validate(merged, known_rules=rules.BY_ID)
    except policy_mod.PolicyError as exc:
        raise AnsibleFilterError("effective_policy: %s" % exc) from exc


class FilterModule:
    def filters(self):
        return {"effective_policy": effective_policy}
