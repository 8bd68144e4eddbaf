#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: rollback_snapshot
short_description: Record files' current content (or absence) for gpufleet rollback before a role writes them
version_added: "0.1.0"
description:
  - Roles call it before M(ansible.builtin.copy) or M(ansible.builtin.template) writes a file, so that
    M(gpufleet.tuning.rollback) can restore the old content, or remove a file the run created.
  - Records only the first state of each file in a run. Changes nothing on the host except the rollback record;
    returns C(changed=false). Does nothing without C(rollback_run_id) or in check mode.
author:
  - gpufleet contributors (@gpufleet)
options:
  paths:
    description: Absolute paths of the files about to be written.
    type: list
    elements: path
    required: true
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpufleet.tuning.attributes.recording
  - gpufleet.tuning.rollback
"""

EXAMPLES = r"""
- name: Remember the limits file before writing it
  gpufleet.tuning.rollback_snapshot:
    paths: [/etc/security/limits.d/90-gpufleet.conf]
    rollback_run_id: "{{ gpufleet_run_id }}"
"""

RETURN = r"""
recorded:
  description: Paths recorded (empty without a run id or in check mode).
  returned: always
  type: list
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.tuning.plugins.module_utils import rollback
from ansible_collections.gpufleet.tuning.plugins.module_utils.fileio import read_text


def main():
    argument_spec = dict(paths=dict(type="list", elements="path", required=True))
    argument_spec.update(rollback.ARGUMENT_SPEC)
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    rollback.check_params(module)
    entries = []
    for path in module.params["paths"]:
        if not os.path.isabs(path):
            module.fail_json(msg="paths: %r is not an absolute path" % path)
        entries.append({"kind": "file", "path": path, "content": read_text(path)})
    rollback.record_for(module, entries)
    recorded = [e["path"] for e in entries] if module.params["rollback_run_id"] and not module.check_mode else []
    module.exit_json(changed=False, recorded=recorded)


if __name__ == "__main__":
    main()
