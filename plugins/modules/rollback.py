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
    M(gpufleet.tuning.nic_settings), M(gpufleet.tuning.route_congctl), M(gpufleet.tuning.rollback_snapshot)) and
    puts every value back, newest change first.
  - Files gpufleet created are removed (a symbolic link such as a C(.wants) link is unlinked, never its target);
    files it changed get their old content back.
  - Routes M(gpufleet.tuning.route_congctl) changed are re-created with their recorded attributes (C(ip route
    replace), with no C(congctl) when they had none); routes it created are deleted (C(ip route del)) while they
    still have the gateway and device it gave them.
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

import json
import os
import re
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.tuning.plugins.module_utils import gpu_settings as gs
from ansible_collections.gpufleet.tuning.plugins.module_utils import links, nic, nic_settings, nvml, rollback, sysctl
from ansible_collections.gpufleet.tuning.plugins.module_utils.ethtool import Ethtool
from ansible_collections.gpufleet.tuning.plugins.module_utils.fileio import write_atomic
from ansible_collections.gpufleet.tuning.plugins.module_utils.hostfs import HostFS
from ansible_collections.gpufleet.tuning.plugins.module_utils.nvml_session import NvmlInitError, nvml_session


_C = {"LC_ALL": "C", "LANG": "C"}


def _describe(entry):
    keys = [
        entry.get(k) for k in ("path", "key", "uuid", "setting", "name", "field", "prefix") if entry.get(k) is not None
    ]
    return "%s %s" % (entry["kind"], " ".join(str(k) for k in keys))


def _read_file(path):
    try:
        with open(path) as f:
            return f.read()
    except (IOError, OSError):
        return None


def restore_file(module, entry):
    path = entry["path"]
    if entry["content"] is None:
        # lexists: a link the run created goes even when its target is already gone; unlink removes the link itself.
        if not os.path.lexists(path):
            return False
        if not module.check_mode:
            os.unlink(path)
        return True
    if _read_file(path) == entry["content"]:
        return False
    if not module.check_mode:
        # The content was read through a link, so it goes back through it (the link stays a link).
        write_atomic(os.path.realpath(path), entry["content"])
    return True


def restore_route(module, entry):
    """Put a route route_congctl changed back as recorded, or delete the one it created. True when it (would) change."""
    ip_bin = module.get_bin_path("ip", required=True)
    prefix = entry["prefix"]
    family = "-6" if entry["family"] == "inet6" else "-4"
    rc, out, err = module.run_command([ip_bin, "-j", family, "route", "show", "exact", prefix], environ_update=_C)
    try:
        shown = json.loads(out or "[]") if rc == 0 else None
    except ValueError:
        shown = None
    if shown is None:
        module.fail_json(msg="restoring route %s: cannot read it: %s" % (prefix, (err or out).strip()))
    current = shown[0] if shown else None
    was = entry.get("route")
    if was is None:
        created = entry.get("created") or {}
        if current is None:
            return False
        if (current.get("gateway"), current.get("dev")) != (created.get("gateway"), created.get("dev")):
            module.warn(
                "route %s now goes via %s dev %s, not the path this run created it with (via %s dev %s): left alone"
                % (prefix, current.get("gateway"), current.get("dev"), created.get("gateway"), created.get("dev"))
            )
            return False
        argv = links.route_argv("del", prefix, created, metrics=False)
    else:
        argv = links.route_argv("replace", prefix, was, links.route_congctl_of(was))
        if (
            current is not None
            and links.route_argv("replace", prefix, current, links.route_congctl_of(current)) == argv
        ):
            return False
    if not module.check_mode:
        rc, out, err = module.run_command([ip_bin, family] + argv, environ_update=_C)
        if rc != 0:
            module.fail_json(
                msg="restoring route %s: ip %s failed: %s" % (prefix, " ".join(argv), (err or out).strip())
            )
    return True


def _shown(text):
    """A sysfs/procfs value as the kernel shows it; bracketed choices ("always [madvise] never") -> "madvise"."""
    m = re.search(r"\[([^\]]+)\]", text)
    return sysctl.normalize(m.group(1) if m else text)


def restore_value(module, path, value):
    current = _read_file(path)
    if current is not None and _shown(current) == sysctl.normalize(value):
        return False
    if not module.check_mode:
        with open(path, "w") as f:
            f.write(str(value) + "\n")
    return True


def restore_gpus(module, entries):
    """Let gpu_settings plan and apply the prior values of GPU entries, in one NVML session."""
    if not entries:
        return [], []
    nv = nvml.load_pynvml(module.params["nvml_library"])
    with nvml_session(nv):
        done = gs.restore(nv, entries, module.check_mode)
    return [_describe(e) for e, changed in done if changed], [_describe(e) for e, changed in done if not changed]


def restore_nics(module, entries):
    restored, unchanged = [], []
    by_name = {}
    for e in entries:
        by_name.setdefault(e["name"], []).append(e)
    ethtool_bin = module.params["ethtool_path"] or module.get_bin_path("ethtool")
    ip_bin = module.get_bin_path("ip")

    def run(argv):
        return module.run_command(argv, environ_update={"LC_ALL": "C", "LANG": "C"})

    for name, items in sorted(by_name.items()):
        current = nic.read_nic(
            HostFS("/"),
            name,
            Ethtool(run, ethtool_bin) if ethtool_bin else None,
            None if ethtool_bin else "ethtool not found",
        )
        want = dict((e["field"], e["value"]) for e in items if e["value"] is not None)
        _before, _after, steps, _unsupported = nic_settings.plan(current, want)
        changed_fields = set(s[0] for s in steps)
        for e in items:
            (restored if e["field"] in changed_fields else unchanged).append(_describe(e))
        if module.check_mode:
            continue
        for field, argv, tool in steps:
            full = [ethtool_bin if tool == "ethtool" else ip_bin] + argv
            rc, out, err = run(full)
            if rc != 0:
                module.fail_json(msg="restoring %s of %s failed: %s" % (field, name, (err or out).strip()))
    return restored, unchanged


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
    run_id = p["run_id"]
    if run_id == "latest":
        run_id = rollback.latest(p["rollback_dir"])
        if run_id is None:
            module.fail_json(
                msg="rollback_dir: no rollback record in %s (nothing was remediated here)" % p["rollback_dir"]
            )
    elif rollback.run_id_error(run_id):
        module.fail_json(msg="run_id: %r %s" % (run_id, rollback.run_id_error(run_id)))
    try:
        data = rollback.load(p["rollback_dir"], run_id)
    except (IOError, OSError):
        # missing_record: the CLI tells "this run never changed this host" (e.g. interrupted before it got here)
        # from a real failure.
        module.fail_json(msg="run_id: no record %s in %s" % (run_id, p["rollback_dir"]), missing_record=True)
    except ValueError as exc:
        module.fail_json(msg="run_id: record %s is not valid JSON: %s" % (run_id, exc))

    restored, unchanged = [], []
    entries = list(reversed(data.get("entries") or []))
    for e in entries:
        if e["kind"] == "file":
            (restored if restore_file(module, e) else unchanged).append(_describe(e))
        elif e["kind"] == "sysctl":
            path = HostFS(e.get("root") or "/").path(sysctl.proc_path(e["key"]))
            if e["value"] is None:
                unchanged.append(_describe(e))
                continue
            try:
                (restored if restore_value(module, path, e["value"]) else unchanged).append(_describe(e))
            except (IOError, OSError) as exc:
                module.fail_json(msg="restoring %s failed: %s" % (e["key"], exc))
        elif e["kind"] == "sysfs":
            (restored if restore_value(module, e["path"], e["value"]) else unchanged).append(_describe(e))
        elif e["kind"] == "route":
            (restored if restore_route(module, e) else unchanged).append(_describe(e))
    try:
        r, u = restore_gpus(module, [e for e in entries if e["kind"] == "gpu"])
    except gs.SettingsError as exc:
        module.fail_json(msg="restoring GPU settings failed: %s" % exc)
    except NvmlInitError as exc:
        module.fail_json(
            msg="restoring GPU settings failed: NVML could not be initialised: %s" % nvml.error_name(exc.error)
        )
    restored += r
    unchanged += u
    r, u = restore_nics(module, [e for e in entries if e["kind"] == "nic"])
    restored += r
    unchanged += u

    if restored and not module.check_mode:
        data["rolled_back_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        write_atomic(
            rollback.path_for(p["rollback_dir"], run_id), json.dumps(data, indent=2, sort_keys=True), mode=0o600
        )
    module.exit_json(changed=bool(restored), run_id=run_id, restored=restored, unchanged=unchanged)


if __name__ == "__main__":
    main()
