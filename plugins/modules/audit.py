#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: audit
short_description: Gather GPU, host and network facts and evaluate the gpufleet rule catalog in one call
version_added: "0.1.0"
description:
  - Reads everything M(gpufleet.tuning.gpu_info), M(gpufleet.tuning.host_info) and M(gpufleet.tuning.nic_info)
    read, resolves the host's long-haul links (declared per site in the policy, or measured by timing TCP
    connects to named peers), and evaluates every rule of the catalog on the target.
  - "One call per host: on links with 150-250 ms of latency the audit costs one round trip, not one per setting."
  - Returns facts, findings (one per rule, with status pass, fail, warn, skip or error), counts, and the
    effective policy (with O(result=compact), facts, links, findings and policy in one JSON string). It never
    changes anything.
author:
  - gpufleet contributors (@gpufleet)
options:
  policy:
    description:
      - Partial policy merged over the documented defaults (see the README's policy table), or the list of policy
        layers, first to last (C(playbooks/audit.yml) passes C(gpufleet_policy), C(gpufleet_policy_group),
        C(gpufleet_policy_host), C(gpufleet_policy_overrides)); keys may be nested or dotted
        (C(memory.max_swappiness)), and each layer's dotted keys are expanded before the next layer is merged.
      - Unknown keys, wrong types, unknown rule ids and impossible links are rejected with the key's path.
    type: raw
    default: {}
  gather:
    description: Which facts to gather; rules whose facts are not gathered report V(skip).
    type: list
    elements: str
    choices: [gpu, host, network]
    default: [gpu, host, network]
  include_facts:
    description: Return the gathered facts as well as the findings.
    type: bool
    default: true
  result:
    description:
      - The shape of the result. V(full) returns C(facts), C(links), C(findings) and C(policy) as values of their
        own, for a play that reads them (C(audit.findings)).
      - V(compact) returns those four as one JSON string, C(audit_json), beside C(summary) and C(policy_digest)
        (the same data, for the controller to decode once). ansible-core copies a registered result value by value
        several times on the controller, so one string of ~50 KB costs it less than ~4,700 values (see
        C(docs/benchmarks.md)). C(playbooks/audit.yml) and C(gpufleet audit) use it; M(gpufleet.tuning.audit_report)
        reads either shape.
      - "A play reads a compact result's parts with C(from_json): C(audit.audit_json | from_json) is the full
        result's C(facts), C(links), C(findings) and C(policy); decode it once (C(set_fact)) rather than in every
        task that reads it."
    type: str
    choices: [full, compact]
    default: full
    version_added: "0.2.0"
  root:
    description: Root of the file system that C(/proc), C(/sys), C(/etc) and C(/usr/local) are read from.
    type: path
    default: /
  interfaces:
    description: NICs to audit; by default the policy's C(network.interfaces), else every physical NIC.
    type: list
    elements: str
  sample_seconds:
    description:
      - Interval over which swap-in and swap-out rates, the GPUs' error counters (NVLink, PCIe replay) and the NICs'
        ring-drop counters are sampled (the three samples overlap); V(0) disables sampling.
    type: float
    default: 1.0
  kernel_log:
    description: Where to scan for NVIDIA Xid and PCIe AER lines. V(auto) uses dmesg, then the journal (or
      C(kernel_log_file) when C(root) is not C(/)).
    type: str
    choices: [auto, dmesg, journal, file, none]
    default: auto
  kernel_log_file:
    description: Kernel log file read (under C(root)) when C(kernel_log=file).
    type: path
    default: /var/log/kern.log
  kernel_log_lines:
    description: Most recent kernel log lines scanned.
    type: int
    default: 5000
  kernel_log_since_hours:
    description: Window of the kernel log scanned, in hours.
    type: int
    default: 24
  ethtool_path:
    description: Path of C(ethtool); by default it is searched in C(PATH).
    type: path
  peer_timeout:
    description: Seconds to wait for each TCP connect when measuring links to the policy's C(peers).
    type: float
    default: 3.0
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpufleet.tuning.attributes.read_only
  - gpufleet.tuning.gpu_reader
requirements:
  - nvidia-ml-py (C(pynvml)) on GPU hosts, or C(nvidia-smi); C(ethtool) for NIC details.
notes:
  - The rule catalog, with ids, areas, severities and fixes, is listed in the README.
seealso:
  - module: gpufleet.tuning.gpu_info
  - module: gpufleet.tuning.host_info
  - module: gpufleet.tuning.nic_info
"""

EXAMPLES = r"""
- name: Audit a GPU server against the default policy
  gpufleet.tuning.audit:
  register: audit

- name: Audit with site links and a stricter MTU
  gpufleet.tuning.audit:
    policy:
      site: ap_southeast
      sites:
        ap_southeast:
          links:
            eu_west: {rtt_ms: 180, bandwidth_gbps: 1}
      network:
        min_mtu: 9000

- name: Audit in the compact shape (what playbooks/audit.yml does), then read its findings once
  gpufleet.tuning.audit:
    result: compact
  register: audit_compact

- name: Decode the compact result once
  ansible.builtin.set_fact:
    audit_findings: "{{ (audit_compact.audit_json | from_json).findings }}"

- name: Fail the play when a critical finding is present
  ansible.builtin.assert:
    that: audit.summary.by_severity.critical == 0
    fail_msg: "{{ audit.findings | selectattr('status', 'eq', 'fail') | map(attribute='rule') | list }}"
"""

RETURN = r"""
policy_digest:
  description: >-
    C(sha256:) and the SHA-256 of the effective policy (merged and validated, JSON with sorted keys) the host was
    judged by; two audits with the same digest judged by the same policy.
  returned: always
  type: str
facts:
  description: >-
    C(gpu) (as gpu_info returns it), C(host) (as host_info returns C(host)), C(network) (as nic_info returns
    C(network)), C(rdma) (the RDMA ports of /sys/class/infiniband: C(available), C(reason), C(interval_s) and
    C(ports), each with C(name), C(state), C(phys_state), C(rate_gbps), C(link_layer), C(netdevs), C(counters),
    C(deltas) and C(saturated)), C(gpudirect) (GPUDirect RDMA prerequisites where GPUs and RDMA devices share the
    host: C(applies), C(reason), C(rdma_devices), C(peer_memory) (nvidia_peermem loaded, DMA-BUF), C(acs) (per GPU,
    the bridges to its nearest RDMA NIC with their ACS Control register), C(iommu) and C(virtualization)).
  returned: when result is full (the default) and include_facts is true
  type: dict
audit_json:
  description: >-
    The full result's C(facts), C(links), C(findings) and C(policy), as one JSON object in a string (compact, no
    spaces); C(audit_json | from_json) gives them back, value for value.
  returned: when result is compact
  type: str
  version_added: "0.2.0"
links:
  description: The host's long-haul links and where they came from.
  returned: when result is full (the default)
  type: dict
  contains:
    source:
      description: V(declared), V(measured), V(mixed) or V(none).
      type: str
    site:
      description: The host's site from the policy.
      type: str
    peers:
      description: One entry per peer site with C(site), C(rtt_ms), C(bandwidth_gbps), C(source).
      type: list
      elements: dict
    errors:
      description: Peers that could not be measured, with the reason.
      type: list
      elements: dict
findings:
  description: One finding per rule of the catalog.
  returned: when result is full (the default)
  type: list
  elements: dict
  contains:
    rule: {description: Rule id., type: str, sample: GPU-PWR-001}
    status: {description: "pass, fail, warn, skip or error.", type: str}
    severity: {description: "critical, high, medium, low or info.", type: str}
    area: {description: "memory, cpu, network, power, software or health.", type: str}
    title: {description: What the rule checks., type: str}
    observed: {description: What was found., type: raw}
    expected: {description: What the policy wants., type: raw}
    message: {description: One line for people., type: str}
    fix: {description: "C(role) and C(tag) that fix it, or C(manual) advice.", type: dict}
    items: {description: Per-GPU or per-NIC details of a failure., type: list}
summary:
  description: Counts C(by_status), and C(by_severity) and C(by_area) of failing and warning findings.
  returned: always
  type: dict
policy:
  description: The effective policy (defaults merged with the C(policy) option).
  returned: when result is full (the default)
  type: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule
# First: every module_utils file below is then compiled once per run, not twice (zipimport_once.py says why).
from ansible_collections.gpufleet.tuning.plugins.module_utils import zipimport_once  # noqa: F401  # pylint: disable=unused-import
from ansible_collections.gpufleet.tuning.plugins.module_utils import audit_core, gpu, ifname, rules


def main():
    argument_spec = dict(gpu.READER_SPEC)
    argument_spec.update(
        policy=dict(type="raw", default={}),
        gather=dict(type="list", elements="str", choices=["gpu", "host", "network"],
                    default=["gpu", "host", "network"]),
        include_facts=dict(type="bool", default=True),
        result=dict(type="str", default="full", choices=list(audit_core.RESULT_SHAPES)),
        interfaces=dict(type="list", elements="str"),
        sample_seconds=dict(type="float", default=1.0),
        kernel_log=dict(type="str", default="auto", choices=["auto", "dmesg", "journal", "file", "none"]),
        kernel_log_file=dict(type="path", default="/var/log/kern.log"),
        kernel_log_lines=dict(type="int", default=5000),
        kernel_log_since_hours=dict(type="int", default=24),
        ethtool_path=dict(type="path"),
        peer_timeout=dict(type="float", default=3.0),
    )
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    params = module.params

    policy = rules.policy_from_module(module)
    gpu.check_reader_params(module)
    if not 0 <= params["sample_seconds"] <= 10:
        module.fail_json(msg="sample_seconds: must be between 0 and 10, got %s" % params["sample_seconds"])
    if not 1 <= params["kernel_log_lines"] <= 100000:
        module.fail_json(msg="kernel_log_lines: must be between 1 and 100000, got %s" % params["kernel_log_lines"])
    if not 0 < params["peer_timeout"] <= 60:
        module.fail_json(msg="peer_timeout: must be > 0 and <= 60, got %s" % params["peer_timeout"])
    interfaces = params["interfaces"] if params["interfaces"] is not None else policy["network"]["interfaces"]
    if interfaces is not None:
        for name in interfaces:
            why = ifname.interface_name_error(name)
            if why is not None:
                module.fail_json(msg="interfaces: invalid interface name %r: %s; %s" % (name, why, ifname.IFNAME_RULE))
    ethtool_path = params["ethtool_path"]
    if ethtool_path and not (os.path.isfile(ethtool_path) and os.access(ethtool_path, os.X_OK)):
        module.fail_json(msg="ethtool_path: not an executable file: %s (give the path of ethtool, "
                             "or leave it unset to search PATH)" % ethtool_path)

    result = audit_core.run(module, policy, root=params["root"], gather=params["gather"], interfaces=interfaces,
                            sample_seconds=params["sample_seconds"], kernel_log=params["kernel_log"],
                            kernel_log_file=params["kernel_log_file"], kernel_log_lines=params["kernel_log_lines"],
                            kernel_log_since_hours=params["kernel_log_since_hours"], ethtool=ethtool_path,
                            peer_timeout=params["peer_timeout"])

    shaped = audit_core.module_result(result, policy, include_facts=params["include_facts"], shape=params["result"])
    module.exit_json(changed=False, **shaped)


if __name__ == "__main__":
    main()
