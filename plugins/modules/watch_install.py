#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: watch_install
short_description: Install gpufleet's on-host checker, built from the module_utils the audit itself runs
version_added: "0.2.0"
description:
  - Builds the on-host checker (C(gpufleet-watch)) as one self-contained Python zip application from the
    collection's module_utils that Ansible shipped with this module (the audit's readers, rule catalog and policy),
    and installs it at O(path), executable, with O(python) as its interpreter. Nothing else is needed on the host
    at run time; Ansible is not.
  - The archive is deterministic, so a second run with the same collection changes nothing. The checker's version
    is C(g) and 12 hex digits of its sources' digest.
  - The M(gpufleet.tuning.watch) role uses it; see C(plugins/module_utils/watch/checker.py) for what the checker does.
author:
  - gpufleet contributors (@gpufleet)
options:
  path:
    description: Where the checker goes.
    type: path
    default: /usr/local/sbin/gpufleet-watch
  python:
    description:
      - Absolute path of the interpreter the checker runs with (its C(#!) line); it must import C(pynvml) to read
        GPUs through NVML (else the checker falls back on C(nvidia-smi), as the audit does).
      - Default, the interpreter running this module (the one the audit runs with).
    type: path
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpufleet.tuning.attributes.changing
"""

EXAMPLES = r"""
- name: Install the checker for the interpreter that imports pynvml
  gpufleet.tuning.watch_install:
    path: /usr/local/sbin/gpufleet-watch
    python: /opt/gpufleet/venv/bin/python
  become: true
"""

RETURN = r"""
path:
  description: Where the checker is.
  returned: always
  type: str
version:
  description: The checker's version (C(g) + 12 hex digits of the digest of its sources).
  returned: always
  type: str
  sample: g3f2a9c01b7de
previous_version:
  description: The version installed before this run, null if none (or not a gpufleet checker).
  returned: always
  type: str
sha256:
  description: Digest of the installed file.
  returned: always
  type: str
"""

import hashlib
import os
import re
import sys

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.tuning.plugins.module_utils.fileio import write_atomic
from ansible_collections.gpufleet.tuning.plugins.module_utils.watch import bundle

_VERSION_LINE = re.compile(rb"# gpufleet-watch (g[0-9a-f]{12}):")


def _installed_version(data):
    """The version recorded in an installed checker (read from its __main__ comment), None if not ours."""
    match = _VERSION_LINE.search(data or b"")
    return match.group(1).decode("ascii") if match else None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", default="/usr/local/sbin/gpufleet-watch"),
            python=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    path = module.params["path"]
    python = module.params["python"] or sys.executable
    if not os.path.isabs(python):
        module.fail_json(msg="python: must be an absolute path (the checker's #! line), got %s" % python)
    if not (os.path.isfile(python) and os.access(python, os.X_OK)):
        module.fail_json(msg="python: not an executable file: %s" % python)
    if os.path.isdir(path):
        module.fail_json(msg="path: %s is a directory; give the checker's file name" % path)

    data, version = bundle.build(python=python)
    try:
        with open(path, "rb") as f:
            before = f.read()
    except (IOError, OSError):
        before = None
    mode_ok = before is not None and (os.stat(path).st_mode & 0o777) == 0o755
    changed = before != data or not mode_ok
    previous = _installed_version(before) if before is not None else None
    if changed and not module.check_mode:
        write_atomic(path, data, mode=0o755)
    module.exit_json(
        changed=changed,
        path=path,
        version=version,
        previous_version=previous,
        sha256=hashlib.sha256(data).hexdigest(),
        diff={"before": "gpufleet-watch %s\n" % previous if before is not None else "",
              "after": "gpufleet-watch %s (%s)\n" % (version, python)},
    )


if __name__ == "__main__":
    main()
