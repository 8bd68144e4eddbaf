#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: sysctl_settings
short_description: Set kernel parameters now and at boot through one gpufleet drop-in file, reporting who else sets them
version_added: "0.1.0"
description:
  - Writes C(settings) to a drop-in file owned by gpufleet (the whole file is managed) and applies them to the
    running kernel.
  - Before writing, reports every other sysctl file that sets the same keys, whether a later file overrides
    gpufleet's value at boot (for example C(/etc/sysctl.d/99-sysctl.conf)), and the active TuneD profile's
    sysctls.
  - Inside a network namespace or container some keys are global or read-only (C(net.core.rmem_max)); those are
    written to the file but reported under C(not_settable) with "must be set on the host" instead of failing.
author:
  - gpufleet contributors (@gpufleet)
options:
  settings:
    description: 'Kernel parameters and values, e.g. C({net.ipv4.tcp_rmem: "4096 131072 268435456"}).'
    type: dict
    required: true
  file:
    description: The drop-in file gpufleet owns.
    type: path
    default: /etc/sysctl.d/60-gpufleet.conf
  apply:
    description: Also set the values in the running kernel (C(/proc/sys)).
    type: bool
    default: true
  root:
    description: Root of the file system for C(/proc/sys) and the sysctl files (a mounted image or test tree).
    type: path
    default: /
  at_least:
    description:
      - Keys of C(settings) whose values are minimums. Where the running kernel already has a larger number (field
        by field, e.g. the maximum of C(net.ipv4.tcp_rmem)), that number is kept, in the kernel and in the file,
        instead of being lowered. Every key listed must be in C(settings).
    type: list
    elements: str
    default: []
  at_most:
    description:
      - Keys of C(settings) whose values are maximums (the mirror of O(at_least)). Where the running kernel already
        has a smaller number (an owner's C(vm.swappiness) 1 against a wanted 10), that number is kept, in the kernel
        and in the file, instead of being raised. Every key listed must be in C(settings), and not in O(at_least).
    type: list
    elements: str
    default: []
    version_added: "0.2.0"
  header:
    description: Comment written at the top of the file.
    type: str
    default: "Managed by gpufleet (gpufleet.tuning). Local changes will be overwritten."
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpufleet.tuning.attributes.changing
  - gpufleet.tuning.rollback
notes:
  - Boot order follows systemd-sysctl and C(sysctl --system); the last file setting a key wins.
"""

EXAMPLES = r"""
- name: Host memory settings for GPU servers
  gpufleet.tuning.sysctl_settings:
    file: /etc/sysctl.d/60-gpufleet.conf
    settings:
      vm.swappiness: 10
      kernel.numa_balancing: 0
  become: true
  register: sysctl

- name: Show conflicts
  ansible.builtin.debug:
    var: sysctl.overridden
"""

RETURN = r"""
file:
  description: C(path) and whether its content C(changed).
  returned: always
  type: dict
runtime:
  description: Per key C(before), C(after) and C(changed) in the running kernel.
  returned: always
  type: dict
not_settable:
  description: Keys that cannot be set here, with the reason (for example read-only in a network namespace).
  returned: always
  type: dict
others:
  description: Per key, other sysctl files that set it, with their values.
  returned: always
  type: dict
overridden:
  description: Keys whose boot value comes from a later file with a different value (C(by), C(value)).
  returned: always
  type: dict
tuned:
  description: Active TuneD profile and the keys it sets that gpufleet also sets (null without TuneD).
  returned: always
  type: dict
kept:
  description: >-
    Keys of C(at_least) where the running value was larger, and of C(at_most) where it was smaller, with C(wanted),
    C(running) and C(kept).
  returned: always
  type: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.tuning.plugins.module_utils import rollback, sysctl
from ansible_collections.gpufleet.tuning.plugins.module_utils.fileio import write_atomic
from ansible_collections.gpufleet.tuning.plugins.module_utils.hostfs import HostFS

DEFAULT_HEADER = "Managed by gpufleet (gpufleet.tuning). Local changes will be overwritten."


def main():
    module = AnsibleModule(
        argument_spec=dict(
            settings=dict(type="dict", required=True),
            file=dict(type="path", default="/etc/sysctl.d/60-gpufleet.conf"),
            apply=dict(type="bool", default=True),
            root=dict(type="path", default="/"),
            at_least=dict(type="list", elements="str", default=[]),
            at_most=dict(type="list", elements="str", default=[]),
            header=dict(type="str", default=DEFAULT_HEADER),
            **rollback.ARGUMENT_SPEC,
        ),
        supports_check_mode=True,
    )
    p = module.params
    if not os.path.isdir(p["root"]):
        module.fail_json(msg="root: not a directory: %s" % p["root"])
    if not p["file"].endswith(".conf") or not p["file"].startswith("/"):
        module.fail_json(msg="file: must be an absolute path ending in .conf, got %s" % p["file"])
    settings = {}
    for key, value in (p["settings"] or {}).items():
        why = sysctl.key_error(key)
        if why:
            module.fail_json(msg="settings: %r is %s" % (key, why))
        if value is None or isinstance(value, dict) or "\n" in str(value):
            module.fail_json(msg="settings.%s: value must be a number, a string or a list, got %r" % (key, value))
        settings[key] = sysctl.normalize(value)
    for option in ("at_least", "at_most"):
        unknown = sorted(set(p[option]) - set(settings))
        if unknown:
            module.fail_json(msg="%s: %s not in settings (keys: %s)"
                                 % (option, ", ".join(unknown), ", ".join(sorted(settings))))
    both = sorted(set(p["at_least"]) & set(p["at_most"]))
    if both:
        module.fail_json(msg="at_least and at_most: %s is in both (a key is a minimum or a maximum)" % ", ".join(both))

    fs = HostFS(p["root"])
    kept = {}
    for option, keep in (("at_least", sysctl.at_least), ("at_most", sysctl.at_most)):
        for key in p[option]:
            running, _reason = sysctl.read_runtime(fs, key)
            value = keep(settings[key], running)
            if value != settings[key]:
                kept[key] = {"wanted": settings[key], "running": running, "kept": value}
                settings[key] = value
    own = p["file"]
    text = sysctl.render_file(settings, p["header"])
    current_text = fs.read(own)
    file_changed = current_text != text

    report = sysctl.who_sets(fs, list(settings), own)
    others = dict((k, v["set_by"]) for k, v in report.items() if v["set_by"])
    overridden = {}
    for key, info in report.items():
        if info["boot_winner"] and info["boot_winner"] != own and info["boot_value"] != settings[key]:
            # gpufleet's file will be written; does a file applied after it set the key differently?
            if (
                sorted([os.path.basename(own), os.path.basename(info["boot_winner"])])[-1] != os.path.basename(own)
                or info["boot_winner"] == sysctl.SYSCTL_CONF
            ):
                overridden[key] = {"by": info["boot_winner"], "value": info["boot_value"]}
    tuned = sysctl.tuned_profile(fs)
    if tuned is not None:
        tuned = {
            "profile": tuned["profile"],
            "conflicts": dict((k, v) for k, v in tuned["sysctl"].items() if k in settings and v != settings[k]),
        }
    for key, info in sorted(overridden.items()):
        module.warn("%s: %s sets %s after gpufleet's %s, so it wins at boot" % (key, info["by"], info["value"], own))
    if tuned and tuned["conflicts"]:
        module.warn(
            "TuneD profile %s also sets %s: it re-applies its values when it starts; put gpufleet's values in "
            "a TuneD profile or stop TuneD" % (tuned["profile"], ", ".join(sorted(tuned["conflicts"])))
        )

    rollback.check_params(module)
    if file_changed:
        rollback.record_for(module, [{"kind": "file", "path": fs.path(own), "content": current_text}])
    runtime, not_settable = {}, {}
    for key in sorted(settings):
        before, reason = sysctl.read_runtime(fs, key)
        entry = {"before": before, "after": settings[key] if reason is None else before, "changed": False}
        if reason is not None:
            not_settable[key] = reason + ": must be set on the host"
        elif p["apply"] and before != settings[key]:
            # Known before any write, so that check mode predicts what the real run can set.
            blocked = sysctl.settable(fs, key)
            if blocked is not None:
                not_settable[key] = blocked
                entry["after"] = before
                runtime[key] = entry
                continue
            entry["changed"] = True
            if not module.check_mode:
                rollback.record_for(module, [{"kind": "sysctl", "key": key, "value": before, "root": p["root"]}])
                failure = sysctl.write_runtime(fs, key, settings[key])
                if failure is not None:
                    not_settable[key] = failure
                    entry.update(after=before, changed=False)
                else:
                    now, _error = sysctl.read_runtime(fs, key)
                    entry["after"] = now
        runtime[key] = entry

    if file_changed and not module.check_mode:
        try:
            write_atomic(fs.path(own), text)
        except (IOError, OSError) as exc:
            module.fail_json(msg="file: cannot write %s: %s" % (own, exc))

    changed = file_changed or any(v["changed"] for v in runtime.values())
    diff = [{"before_header": own, "after_header": own, "before": current_text or "", "after": text}]
    diff.append(
        {
            "before_header": "runtime",
            "after_header": "runtime",
            "before": "".join("%s = %s\n" % (k, v["before"]) for k, v in sorted(runtime.items()) if v["changed"]),
            "after": "".join("%s = %s\n" % (k, settings[k]) for k, v in sorted(runtime.items()) if v["changed"]),
        }
    )
    module.exit_json(
        changed=changed,
        file={"path": own, "changed": file_changed},
        runtime=runtime,
        not_settable=not_settable,
        others=others,
        overridden=overridden,
        tuned=tuned,
        kept=kept,
        diff=diff,
    )


if __name__ == "__main__":
    main()
