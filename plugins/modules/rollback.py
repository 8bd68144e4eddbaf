#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: rollback
short_description: Restore what a gpufleet remediation run changed on a host
version_added: "0.1.0"
description:
  - Reads the rollback record a remediation run left in C(rollback_dir) (prior values recorded by
    M(gpufleet.tuning.gpu_settings), M(gpufleet.tuning.sysctl_settings), M(gpufleet.tuning.sysfs_settings),
    M(gpufleet.tuning.nic_settings), M(gpufleet.tuning.route_congctl), M(gpufleet.tuning.route_follow),
    M(gpufleet.tuning.rollback_snapshot)) and
    puts every value back, newest change first.
  - Files gpufleet created are removed (a symbolic link such as a C(.wants) link is unlinked, never its target);
    files it changed get their old content back.
  - Routes M(gpufleet.tuning.route_congctl) changed are re-created with their recorded attributes (C(ip route
    replace), with no C(congctl) when they had none); routes it created are deleted (C(ip route del)) while they
    still have the gateway and device it gave them.
  - The routing table of M(gpufleet.tuning.route_follow) is emptied and its rules removed, after stopping
    C(gpufleet-route-follow.service) where systemd runs it.
  - Only what differs is changed, so a second rollback changes nothing. ECC and MIG modes go back to their prior
    pending mode and need a reboot, as when they were changed.
author:
  - gpufleet contributors (@gpufleet)
options:
  run_id:
    description: The run to roll back; C(latest) is the newest record on the host.
    type: str
    default: latest
  rollback_dir:
    description: Where rollback records are kept.
    type: path
    default: /var/lib/gpufleet/rollback
  nvml_library:
    description: Path of C(libnvidia-ml.so.1) when the driver is outside the loader's search path.
    type: path
  ethtool_path:
    description: Path of ethtool; searched in C(PATH) by default.
    type: path
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpufleet.tuning.attributes.recording
"""

EXAMPLES = r"""
- name: Undo the last remediation
  gpufleet.tuning.rollback:
  become: true

- name: Undo a given run
  gpufleet.tuning.rollback:
    run_id: "20261129T201500Z"
  become: true
"""

RETURN = r"""
run_id:
  description: The run that was rolled back.
  returned: success
  type: str
restored:
  description: What was (or in check mode would be) put back.
  returned: success
  type: list
unchanged:
  description: Entries already at their prior value.
  returned: success
  type: list
missing_record:
  description: True when the task failed because this host has no record of O(run_id) (the run changed nothing here).
  returned: failure
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.tuning.plugins.module_utils import rollback
from ansible_collections.gpufleet.tuning.plugins.module_utils import rollback_restore as rr


def main():
    module = AnsibleModule(
        argument_spec=dict(
            run_id=dict(type="str", default="latest"),
            rollback_dir=dict(type="path", default=rollback.DEFAULT_DIR),
            nvml_library=dict(type="path"),
            ethtool_path=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    run_id, data = rr.load_record(module, p["rollback_dir"], p["run_id"])
    # Newest change first: the record lists the changes in the order they were made.
    restored, unchanged = rr.restore(module, list(reversed(data.get("entries") or [])))
    if restored and not module.check_mode:
        rr.mark_rolled_back(p["rollback_dir"], run_id, data)
    module.exit_json(changed=bool(restored), run_id=run_id, restored=restored, unchanged=unchanged)


if __name__ == "__main__":
    main()
