#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: links_info
short_description: A host's long-haul links, resolved exactly as the audit resolves them
version_added: "0.2.0"
description:
  - Resolves the host's links with the audit's own code (C(module_utils/links.py)) - declared per site in the
    policy (C(site), C(sites)), or measured by timing TCP connects to the policy's C(peers) from this host - and
    splits them the way the network rules judge them - C(long) links (RTT at or above
    C(network.long_link_rtt_ms)) decide NET-TCP-002, NET-TCP-003 and NET-TCP-004; C(sized) links (with a
    bandwidth) size the NET-TCP-001 buffers.
  - Remediation roles call it so that a fix applies only where the audit would judge the rule.
  - This module never changes anything.
author:
  - gpufleet contributors (@gpufleet)
options:
  policy:
    description:
      - The host's policy (usually the effective policy, C(gpufleet_effective_policy)); validated with the audit's
        code, so an unknown key or an impossible link fails with the key's path.
    type: dict
    default: {}
  peer_timeout:
    description: Seconds to wait for each TCP connect when measuring links to the policy's C(peers) (0-60].
    type: float
    default: 3.0
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpufleet.tuning.attributes.read_only
"""

EXAMPLES = r"""
- name: The links the audit judges this host by
  gpufleet.tuning.links_info:
    policy: "{{ gpufleet_effective_policy }}"
  register: links

- name: Only on hosts with long links
  ansible.builtin.debug:
    msg: "long links to {{ links.long | map(attribute='site') | join(', ') }}"
  when: links.long | length > 0
"""

RETURN = r"""
links:
  description: The resolved links, as the audit reports them (C(source), C(site), C(peers), C(errors)).
  returned: always
  type: dict
long:
  description: Links with C(rtt_ms) at or above C(network.long_link_rtt_ms), each with its C(prefixes) from the policy.
  returned: always
  type: list
  elements: dict
sized:
  description: Links with a bandwidth (the ones NET-TCP-001 sizes buffers from).
  returned: always
  type: list
  elements: dict
prefixes:
  description: The C(prefixes) of the long links (C(sites.SITE.links.PEER.prefixes)), deduplicated, in order.
  returned: always
  type: list
  elements: str
long_link_rtt_ms:
  description: The threshold used.
  returned: always
  type: float
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.tuning.plugins.module_utils import links, rules
from ansible_collections.gpufleet.tuning.plugins.module_utils.policy import PolicyError, validate


def main():
    module = AnsibleModule(
        argument_spec=dict(
            policy=dict(type="dict", default={}),
            peer_timeout=dict(type="float", default=3.0),
        ),
        supports_check_mode=True,
    )
    params = module.params
    try:
        policy = validate(params["policy"], known_rules=rules.BY_ID)
    except PolicyError as exc:
        module.fail_json(msg="policy: %s" % exc)
    if not 0 < params["peer_timeout"] <= 60:
        module.fail_json(msg="peer_timeout: must be > 0 and <= 60, got %s" % params["peer_timeout"])
    resolved = links.resolve(policy, measure=lambda peers: links.measure_rtt(peers, timeout=params["peer_timeout"]))
    long_links, sized, prefixes = links.classify(policy, resolved)
    module.exit_json(
        changed=False,
        links=resolved,
        long=long_links,
        sized=sized,
        prefixes=prefixes,
        long_link_rtt_ms=float(policy["network"]["long_link_rtt_ms"]),
    )


if __name__ == "__main__":
    main()
