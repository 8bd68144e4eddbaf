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
  - A host without any rollback record (never remediated) has nothing to restore; with O(run_id=latest) the task
    succeeds, changes nothing and returns RV(nothing_to_restore). A named O(run_id) without a record fails.
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
  - gpufleet.tuning.attributes
attributes:
  check_mode:
    support: full
    details: Reports what would be restored (RV(restored)) and changes nothing, the record included.
  diff_mode:
    support: full
    details: The value now and the recorded one of each entry restored, of every kind - a file's content, a sysctl
      or sysfs value, a GPU setting, a NIC setting (one line per offload or ring), a route as C(ip route) shows it,
      the rules and routes of gpufleet's own routing table.
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
  description: The run that was rolled back; null when there was nothing to restore.
  returned: success
  type: str
nothing_to_restore:
  description:
    - True when O(run_id=latest) and the host has no rollback record (no remediation run changed it); the task
      then succeeds and changes nothing.
  returned: success
  type: bool
  version_added: 0.2.0
diff:
  description:
    - In diff mode, for each entry that is (or in check mode would be) restored, of every kind (file, sysctl,
      sysfs, gpu, nic, route, route_table), the host's value now (C(before)) and the recorded one (C(after)), both
      headers the entry as in RV(restored). A GPU or NIC setting is one line, its name and value; a route is one
      line as C(ip route) shows it, empty when the run created it (it is deleted); a routing table, its rules and
      routes now, and empty after.
  returned: success, in diff mode
  type: list
  elements: dict
  version_added: 0.2.0
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
    if data is None:  # run_id latest and no record: never remediated here
        module.exit_json(
            changed=False, run_id=None, restored=[], unchanged=[], nothing_to_restore=True,
            msg="nothing to restore: no remediation run is recorded in %s" % p["rollback_dir"],
        )  # fmt: skip
    diffs = [] if module._diff else None
    # Newest change first: the record lists the changes in the order they were made.
    restored, unchanged = rr.restore(module, list(reversed(data.get("entries") or [])), diffs)
    if restored and not module.check_mode:
        rr.mark_rolled_back(p["rollback_dir"], run_id, data)
    result = dict(changed=bool(restored), run_id=run_id, restored=restored, unchanged=unchanged)
    if diffs is not None:
        result["diff"] = diffs
    module.exit_json(nothing_to_restore=False, **result)


if __name__ == "__main__":
    main()
