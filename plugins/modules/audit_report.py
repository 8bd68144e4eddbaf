#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
# This file only documents the audit_report action plugin (plugins/action/audit_report.py), which runs on the
# controller.

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: audit_report
short_description: Write the fleet report of a gpufleet audit on the controller
version_added: "0.1.0"
description:
  - Collects every play host's registered M(gpufleet.tuning.audit) result (either shape of its C(result) option; a
    compact one's C(audit_json) is decoded once, here) and writes C(report.json),
    C(report.html), C(junit.xml) and C(gpufleet.prom) to C(out_dir/<timestamp>/), pointing C(out_dir/latest) at it
    when the run is the complete view of the fleet (no C(--limit), no host left interrupted), else
    C(out_dir/last-partial); C(latest) then stays on the last complete run, for scrapers and diffs.
  - Runs on the controller (use C(run_once) and C(delegate_to=localhost)); unreachable and failed hosts are
    reported as such.
author:
  - gpufleet contributors (@gpufleet)
options:
  out_dir:
    description: Directory that receives one sub-directory per run and the C(latest) and C(last-partial) links.
    type: path
    required: true
  result_var:
    description: Name of the variable each host registered the audit result in.
    type: str
    default: gpufleet_audit
  hosts:
    description: Hosts to report; by default every host of the play (C(ansible_play_hosts_all)).
    type: list
    elements: str
  started_at:
    description: ISO 8601 time the run started; by default the time the report is written.
    type: str
  policy_sources:
    description: Where the policy came from (files, inventory), recorded in the report.
    type: list
    elements: str
    default: []
  stamp:
    description: Name of the run directory; by default the UTC time C(YYYYmmddTHHMMSSZ).
    type: str
  fail_on:
    description:
      - Severity at or above which a failing finding makes the verdict 1 (V(none) - findings never do). Hosts not
        audited always make it 2. C(playbooks/audit.yml) fails the run on a non-zero verdict, as C(gpufleet audit)
        exits with it.
    type: str
    choices: [critical, high, medium, low, info, none]
    default: none
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpufleet.tuning.attributes.recording
attributes:
  check_mode:
    details: Reports are written in check mode too; they change nothing on the hosts.
"""

EXAMPLES = r"""
- name: Write the fleet report
  gpufleet.tuning.audit_report:
    out_dir: "{{ playbook_dir }}/../reports"
  run_once: true
  delegate_to: localhost
"""

RETURN = r"""
verdict:
  description: >-
    C(code) (0 clean, 1 findings at or above C(fail_on), 2 hosts not audited - the exit codes of C(gpufleet audit)),
    C(reason) (null when 0) and C(fail_on).
  returned: success
  type: dict
  sample: {code: 2, reason: "exit 2: 1 host not audited (unreachable: 1)", fail_on: none}
report_dir: {description: The run's report directory., returned: success, type: str}
files:
  description: >-
    Paths of report.json, report.html, junit.xml and gpufleet.prom, C(dir), and the link moved: C(latest) or
    C(last-partial).
  returned: success
  type: dict
summary: {description: Counts of hosts and findings., returned: success, type: dict}
worst_severity: {description: "Worst severity among failing findings, or null.", returned: success, type: str}
failing: {description: Host name to the rule ids that fail or warn., returned: success, type: dict}
"""
