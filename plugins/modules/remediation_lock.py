#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
# The module runs on the target (one attempt); its action plugin (plugins/action/remediation_lock.py) names the
# holder from the controller, retries while another run holds the lock and finds holders that are gone.

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: remediation_lock
short_description: Take or release the per-host lock that lets one gpufleet remediation run at a time
version_added: "0.1.0"
description:
  - C(playbooks/remediate.yml) and C(playbooks/rollback.yml) take this lock before their first change and release
    it in an C(always) section, so two remediations or rollbacks never change the same host at the same time.
  - The lock is a JSON file, by default C(/run/gpufleet/remediation.lock). C(/run) is a tmpfs, so a reboot clears
    it; it is never kept under C(/etc) or C(/var/lib/gpufleet).
  - It records its holder, the run id, the controller's host name and boot id, the C(ansible-playbook) process (pid
    and start time), the user and the time (the target's clock).
  - When another run holds the lock, the task waits up to O(timeout) seconds, asking again every 2 seconds, then
    fails with a message naming the holder. The other hosts of the play go on.
  - "A lock is stale, and taken over, when it is older than O(max_age) seconds, when its file cannot be read, or when
    its holder ran on this same controller (same host name and boot id) and that C(ansible-playbook) process is gone,
    for example after Ctrl-C or a crash. A lock held from another controller that died stays until it is O(max_age)
    seconds old, the host reboots, or someone removes the file."
  - Taking a lock this run already holds is a no-op. Releasing a lock held by another run changes nothing.
  - Returns C(changed=false). The lock is bookkeeping, not configuration, so a second remediation still reports
    zero changes (Molecule's idempotence step).
author:
  - gpufleet contributors (@gpufleet)
options:
  state:
    description: C(acquired) takes the lock, waiting for another holder; C(released) gives it back.
    type: str
    choices: [acquired, released]
    default: acquired
  path:
    description: The lock file. It must be on a tmpfs such as C(/run) so that a reboot clears it.
    type: path
    default: /run/gpufleet/remediation.lock
  run_id:
    description: "The remediation run id, shown to a run that has to wait. Letters, digits, C(_ . : -)."
    type: str
  timeout:
    description: Seconds to wait for another holder to release the lock before failing. Use V(0) to try once.
    type: int
    default: 300
  max_age:
    description: A lock held longer than this many seconds is stale and taken over.
    type: int
    default: 3600
  holder:
    description:
      - Who takes the lock. The action plugin fills it in from the controller. Do not set it.
    type: dict
  take_over:
    description:
      - The token of a holder the controller found gone. The action plugin fills it in. Do not set it.
    type: str
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpufleet.tuning.attributes.recording
attributes:
  check_mode:
    details:
      - In check mode the lock file is not written, because nothing on the host changes.
      - The task still waits while another run holds the lock, and fails the same way after O(timeout). A prediction
        made while another run is changing the host would be wrong.
notes:
  - Remove a lock by hand with C(rm /run/gpufleet/remediation.lock) on the host, only when you know its holder is
    gone.
"""

EXAMPLES = r"""
- name: Take the remediation lock (waits up to 10 minutes for another run)
  gpufleet.tuning.remediation_lock:
    state: acquired
    run_id: "{{ gpufleet_run_id }}"
    timeout: 600

- name: Release the remediation lock
  gpufleet.tuning.remediation_lock:
    state: released
"""

RETURN = r"""
acquired:
  description: Whether this run holds the lock now. In check mode, whether it could take it.
  returned: state=acquired
  type: bool
released:
  description: Whether this run held the lock and gave it back.
  returned: state=released
  type: bool
holder:
  description:
    - The lock record in force. It is this run's after taking the lock, or the other run's when the task failed.
    - It holds run_id, controller, controller_boot_id, pid, pid_start, user, token, acquired_at and acquired_epoch.
  returned: always
  type: dict
age:
  description: Seconds the lock in force has been held.
  returned: state=acquired
  type: float
waited:
  description: Seconds this task waited for another holder.
  returned: state=acquired
  type: float
released_epoch:
  description: When the lock was released (seconds since the epoch, the target's clock).
  returned: state=released and released
  type: float
previous:
  description: The stale lock record that was taken over, if any.
  returned: state=acquired
  type: dict
stale_reason:
  description: Why the previous lock was stale.
  returned: state=acquired
  type: str
path:
  description: The lock file.
  returned: always
  type: str
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.tuning.plugins.module_utils import lock
from ansible_collections.gpufleet.tuning.plugins.module_utils.rollback import run_id_error


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", choices=["acquired", "released"], default="acquired"),
            path=dict(type="path", default=lock.DEFAULT_PATH),
            run_id=dict(type="str"),
            timeout=dict(type="int", default=lock.DEFAULT_TIMEOUT),
            max_age=dict(type="int", default=lock.DEFAULT_MAX_AGE),
            holder=dict(type="dict"),
            take_over=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if not os.path.isabs(p["path"]) or os.path.basename(p["path"]) in ("", ".", ".."):
        module.fail_json(msg="path: %r must be an absolute path to a file" % p["path"])
    if p["run_id"] is not None and run_id_error(p["run_id"]):
        module.fail_json(msg="run_id: %s" % run_id_error(p["run_id"]))
    if p["timeout"] < 0:
        module.fail_json(msg="timeout: must be 0 or more seconds, got %d" % p["timeout"])
    if p["max_age"] < 1:
        module.fail_json(msg="max_age: must be at least 1 second, got %d" % p["max_age"])
    holder = p["holder"]
    if not holder or not holder.get("token"):
        module.fail_json(
            msg="holder: missing. The gpufleet.tuning.remediation_lock action plugin sets it; call the module "
            "by its name (gpufleet.tuning.remediation_lock) so that the action plugin runs"
        )
    try:
        if p["state"] == "released":
            result = lock.release(p["path"], holder["token"], check_mode=module.check_mode)
        else:
            holder = dict(holder, run_id=p["run_id"])
            result = lock.acquire(
                p["path"], holder, max_age=p["max_age"], take_over=p["take_over"], check_mode=module.check_mode
            )
    except (IOError, OSError) as exc:
        module.fail_json(msg="path: cannot use the lock %s: %s" % (p["path"], exc.strerror or exc))
    module.exit_json(changed=False, path=p["path"], **result)


if __name__ == "__main__":
    main()
