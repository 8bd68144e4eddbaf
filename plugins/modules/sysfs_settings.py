#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: sysfs_settings
short_description: Set sysfs attributes (CPU governor, transparent hugepages) now and record them for boot
version_added: "0.1.0"
description:
  - Writes each C(settings) value to every sysfs file its path pattern matches, when the current value differs.
  - Reads bracketed choices the way the kernel shows them (C(always [madvise] never) is C(madvise)).
  - Records the settings in C(config_file) (JSON) so the C(gpufleet-sysfs) boot unit installed by the
    M(gpufleet.tuning.host_tuning) role re-applies them; sysfs values do not survive a reboot.
  - A file that cannot be written here (read-only C(/sys) in a container) is reported under C(not_settable).
author:
  - gpufleet contributors (@gpufleet)
options:
  settings:
    description:
      - Sysfs path patterns (globs under C(/sys)) and the value each matching file must hold.
    type: dict
    required: true
  config_file:
    description: JSON file the boot unit reads; empty to not record anything.
    type: path
    default: /etc/gpufleet/sysfs.json
  root:
    description: Root of the file system (a mounted image or test tree).
    type: path
    default: /
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpufleet.tuning.attributes.changing
  - gpufleet.tuning.rollback
"""

EXAMPLES = r"""
- name: Performance governor and THP madvise
  gpufleet.tuning.sysfs_settings:
    settings:
      /sys/devices/system/cpu/cpu*/cpufreq/scaling_governor: performance
      /sys/kernel/mm/transparent_hugepage/enabled: madvise
  become: true
"""

RETURN = r"""
files:
  description: Per sysfs file C(before), C(after) and C(changed).
  returned: always
  type: dict
not_settable:
  description: Files that could not be written here, with the reason.
  returned: always
  type: dict
unmatched:
  description: Patterns that matched no file on this host (for example no cpufreq in a VM).
  returned: always
  type: list
"""

import errno
import json
import os
import re

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.tuning.plugins.module_utils import rollback
from ansible_collections.gpufleet.tuning.plugins.module_utils.hostfs import HostFS
from ansible_collections.gpufleet.tuning.plugins.module_utils.fileio import write_atomic

_PATTERN = re.compile(r"^/sys/[A-Za-z0-9_*.:/-]+$")
_BRACKET = re.compile(r"\[([^\]]+)\]")


def current_value(text):
    if text is None:
        return None
    m = _BRACKET.search(text)
    return m.group(1) if m else text.strip()


def main():
    module = AnsibleModule(
        argument_spec=dict(
            settings=dict(type="dict", required=True),
            config_file=dict(type="path", default="/etc/gpufleet/sysfs.json"),
            root=dict(type="path", default="/"),
            **rollback.ARGUMENT_SPEC,
        ),
        supports_check_mode=True,
    )
    p = module.params
    if not os.path.isdir(p["root"]):
        module.fail_json(msg="root: not a directory: %s" % p["root"])
    settings = {}
    for pattern, value in (p["settings"] or {}).items():
        if not _PATTERN.match(pattern) or ".." in pattern:
            module.fail_json(
                msg="settings: %r is not a sysfs path pattern (absolute, under /sys, letters, digits, "
                "'_-.:/*' only)" % pattern
            )
        if value is None or isinstance(value, (dict, list)) or not re.match(r"^[A-Za-z0-9_.-]+$", str(value)):
            module.fail_json(msg="settings.%s: value must be a single word, got %r" % (pattern, value))
        settings[pattern] = str(value)

    rollback.check_params(module)
    fs = HostFS(p["root"])
    files, not_settable, unmatched = {}, {}, []
    for pattern, value in sorted(settings.items()):
        paths = fs.glob(pattern)
        if not paths:
            unmatched.append(pattern)
            continue
        for path in paths:
            before = current_value(fs.read(path))
            entry = {"before": before, "after": value, "changed": before != value}
            if entry["changed"] and not module.check_mode:
                rollback.record_for(module, [{"kind": "sysfs", "path": fs.path(path), "value": before}])
                try:
                    with open(fs.path(path), "w") as f:
                        f.write(value + "\n")
                except (IOError, OSError) as exc:
                    reason = os.strerror(exc.errno) if exc.errno else str(exc)
                    if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
                        reason += ": /sys is read-only here (container); set it on the host"
                    not_settable[path] = reason
                    entry.update(after=before, changed=False)
            files[path] = entry

    config_changed = False
    if p["config_file"]:
        text = json.dumps({"settings": settings}, indent=2, sort_keys=True) + "\n"
        config_changed = fs.read(p["config_file"]) != text
        if config_changed and not module.check_mode:
            rollback.record_for(module, [{"kind": "file", "path": fs.path(p["config_file"]),
                                          "content": fs.read(p["config_file"])}])
            try:
                write_atomic(fs.path(p["config_file"]), text)
            except (IOError, OSError) as exc:
                module.fail_json(msg="config_file: cannot write %s: %s" % (p["config_file"], exc))

    changed = config_changed or any(e["changed"] for e in files.values())
    diff = {
        "before": "".join("%s: %s\n" % (k, v["before"]) for k, v in sorted(files.items()) if v["changed"]),
        "after": "".join("%s: %s\n" % (k, v["after"]) for k, v in sorted(files.items()) if v["changed"]),
    }
    module.exit_json(changed=changed, files=files, not_settable=not_settable, unmatched=unmatched, diff=diff)


if __name__ == "__main__":
    main()
