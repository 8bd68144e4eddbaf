#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: nic_settings
short_description: Set a NIC's MTU, offloads, rings, coalescing and channels, and keep them across reboots
version_added: "0.1.0"
description:
  - Reads the NIC like M(gpufleet.tuning.nic_info), changes only what differs with C(ip link) and C(ethtool),
    and writes the settings where the host manages links so they survive a reboot.
  - Persistence, by C(persist_method=auto), in this order - NetworkManager (C(nmcli connection modify)) when it
    manages the device; a systemd C(.link) file when systemd-udevd runs (it applies .link files at boot, with or
    without systemd-networkd); otherwise a udev rule that replays the commands.
  - A value the driver does not support (rings or coalescing on veth, a fixed feature) is reported under
    C(unsupported), not failed, unless C(strict).
author:
  - gpufleet team (!UNKNOWN)
options:
  name:
    description: Interface name (1-15 characters of letters, digits, C(_ . @ -)).
    type: str
    required: true
  mtu:
    description: MTU in bytes (68-65535).
    type: int
  offloads:
    description: Feature name (as C(ethtool -k) prints it, or a short alias such as C(gro), C(tso)) to on/off.
    type: dict
  rings:
    description: C(rx) and C(tx) ring sizes, numbers or C(max).
    type: dict
  coalescing:
    description: C(adaptive_rx), C(adaptive_tx) (booleans), C(rx_usecs), C(tx_usecs) (numbers).
    type: dict
  channels:
    description: C(combined), C(rx), C(tx) channel counts, numbers or C(max).
    type: dict
  persist:
    description: Keep the settings across reboots.
    type: bool
    default: true
  persist_method:
    description: How to keep them; C(auto) detects what manages the link.
    type: str
    choices: [auto, networkmanager, link, udev, none]
    default: auto
  link_dir:
    description: Directory for the systemd C(.link) file.
    type: path
    default: /etc/systemd/network
  udev_dir:
    description: Directory for the udev rule.
    type: path
    default: /etc/udev/rules.d
  strict:
    description: Fail when the NIC does not support a requested setting.
    type: bool
    default: false
  ethtool_path:
    description: Path of ethtool; searched in C(PATH) by default.
    type: path
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpufleet.tuning.rollback
attributes:
  platform:
    platforms: posix
    support: full
  check_mode:
    support: full
  diff_mode:
    support: full
"""

EXAMPLES = r"""
- name: Jumbo frames, full rings and offloads on the fabric NIC
  gpufleet.tuning.nic_settings:
    name: ens1f0np0
    mtu: 9000
    rings: {rx: max, tx: max}
    offloads: {gro: true, tso: true, gso: true}
  become: true
"""

RETURN = r"""
before:
  description: Current values of the requested settings.
  returned: always
  type: dict
after:
  description: Values after the run (or that a run would set in check mode).
  returned: always
  type: dict
commands:
  description: Commands run (or that would run in check mode).
  returned: always
  type: list
unsupported:
  description: Settings the NIC cannot change here, with the reason.
  returned: always
  type: dict
persisted:
  description: C(method) (networkmanager, link, udev or none), C(path), and whether it C(changed).
  returned: always
  type: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.tuning.plugins.module_utils import nic, nic_settings, rollback
from ansible_collections.gpufleet.tuning.plugins.module_utils.hostfs import HostFS
from ansible_collections.gpufleet.tuning.plugins.module_utils.fileio import write_atomic

_COALESCE_TYPES = {"adaptive_rx": bool, "adaptive_tx": bool, "rx_usecs": int, "tx_usecs": int}


def _validate(module):
    p = module.params
    why = nic.interface_name_error(p["name"])
    if why:
        module.fail_json(msg="name: invalid interface name %r: %s; %s" % (p["name"], why, nic.IFNAME_RULE))
    if p["mtu"] is not None and not 68 <= p["mtu"] <= 65535:
        module.fail_json(msg="mtu: %d is outside 68-65535" % p["mtu"])
    for field, keys in (("rings", ("rx", "tx")), ("channels", nic_settings.CHANNEL_KEYS)):
        for key, value in (p[field] or {}).items():
            if key not in keys:
                module.fail_json(msg="%s.%s: unknown key (allowed: %s)" % (field, key, ", ".join(keys)))
            if value != "max" and (isinstance(value, bool) or not str(value).isdigit() or int(value) < 1):
                module.fail_json(msg="%s.%s: must be a positive number or 'max', got %r" % (field, key, value))
    for key, value in (p["coalescing"] or {}).items():
        if key not in _COALESCE_TYPES:
            module.fail_json(msg="coalescing.%s: unknown key (allowed: %s)" % (key, ", ".join(sorted(_COALESCE_TYPES))))
        kind = _COALESCE_TYPES[key]
        if (
            kind is bool
            and not isinstance(value, bool)
            or kind is int
            and (isinstance(value, bool) or not isinstance(value, int) or value < 0)
        ):
            module.fail_json(
                msg="coalescing.%s: must be %s, got %r"
                % (key, "true/false" if kind is bool else "a number >= 0", value)
            )
    for key, value in (p["offloads"] or {}).items():
        if not isinstance(value, bool):
            module.fail_json(msg="offloads.%s: must be true or false, got %r" % (key, value))
        if not key.replace("-", "").isalnum():
            module.fail_json(msg="offloads: %r is not a feature name" % key)


def _detect(module, name, requested):
    if requested != "auto":
        return requested
    nmcli = module.get_bin_path("nmcli")
    if nmcli and os.path.isdir("/run/NetworkManager"):
        rc, out, _err = module.run_command([nmcli, "-g", "GENERAL.STATE", "device", "show", name])
        if rc == 0 and "unmanaged" not in out:
            return "networkmanager"
    if os.path.isdir("/run/systemd/system") and os.path.isdir("/run/udev"):
        return "link"
    return "udev"


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            mtu=dict(type="int"),
            offloads=dict(type="dict"),
            rings=dict(type="dict"),
            coalescing=dict(type="dict"),
            channels=dict(type="dict"),
            persist=dict(type="bool", default=True),
            persist_method=dict(type="str", default="auto", choices=["auto", "networkmanager", "link", "udev", "none"]),
            link_dir=dict(type="path", default="/etc/systemd/network"),
            udev_dir=dict(type="path", default="/etc/udev/rules.d"),
            strict=dict(type="bool", default=False),
            ethtool_path=dict(type="path"),
            **rollback.ARGUMENT_SPEC,
        ),
        supports_check_mode=True,
    )
    _validate(module)
    rollback.check_params(module)
    p = module.params
    name = p["name"]
    fs = HostFS("/")
    ethtool_bin = p["ethtool_path"] or module.get_bin_path("ethtool")
    ip_bin = module.get_bin_path("ip")

    def run(argv):
        return module.run_command(argv, environ_update={"LC_ALL": "C", "LANG": "C"})

    runner = nic.Ethtool(run, ethtool_bin) if ethtool_bin else None
    current = nic.read_nic(fs, name, runner, None if ethtool_bin else "ethtool not found in PATH")
    if not current.get("present"):
        module.fail_json(msg="name: no such interface: %s" % name)
    want = {
        "mtu": p["mtu"],
        "offloads": p["offloads"],
        "rings": p["rings"],
        "coalescing": p["coalescing"],
        "channels": p["channels"],
    }
    try:
        before, after, steps, unsupported = nic_settings.plan(current, want)
    except nic_settings.NicSettingsError as exc:
        module.fail_json(msg=str(exc))
    if unsupported and p["strict"]:
        module.fail_json(
            msg="strict: %s does not support %s"
            % (name, ", ".join("%s (%s)" % kv for kv in sorted(unsupported.items())))
        )
    for _field, _argv, tool in steps:
        if tool == "ethtool" and not ethtool_bin:
            module.fail_json(msg="ethtool_path: ethtool is needed to change %s but was not found" % _field)
        if tool == "ip" and not ip_bin:
            module.fail_json(msg="ip (iproute2) is needed to change the MTU but was not found")

    rollback.record_for(module, [{"kind": "nic", "name": name, "field": field, "value": before.get(field)}
                                 for field, _argv, _tool in steps])
    commands = []
    for field, argv, tool in steps:
        full = [ethtool_bin if tool == "ethtool" else ip_bin] + argv
        commands.append(" ".join(full))
        if module.check_mode:
            continue
        rc, out, err = run(full)
        if rc != 0:
            reason = (err or out or "rc %d" % rc).strip().splitlines()[-1]
            if "not supported" in reason.lower() and not p["strict"]:
                unsupported[field] = reason
                after[field] = before.get(field)
                continue
            module.fail_json(msg="%s: %s failed: %s" % (field, " ".join(full), reason), commands=commands)

    changed = bool(steps) and not all(field in unsupported for field, _a, _t in steps)
    persisted = {"method": "none", "path": None, "changed": False}
    settable = dict((k, v) for k, v in after.items() if k not in unsupported)
    if p["persist"] and settable and p["persist_method"] != "none":
        method = _detect(module, name, p["persist_method"])
        persisted["method"] = method
        if method == "link":
            path = os.path.join(p["link_dir"], "60-gpufleet-%s.link" % name)
            mac = (fs.read("/sys/class/net/%s/address" % name) or "").strip() or None
            text = nic_settings.link_file(name, mac, settable)
        elif method == "udev":
            path = os.path.join(p["udev_dir"], "60-gpufleet-%s.rules" % name)
            text = nic_settings.udev_rule(name, settable, ethtool_bin or "/usr/sbin/ethtool", ip_bin or "/usr/sbin/ip")
        else:
            path, text = None, None
            module.warn(
                "NetworkManager manages %s: set the values in its connection profile "
                "(nmcli connection modify <profile> 802-3-ethernet.mtu ... ethtool.ring-rx ...)" % name
            )
        persisted["path"] = path
        if path:
            old = fs.read(path)
            persisted["changed"] = old != text
            persisted["diff"] = {"before_header": path, "after_header": path, "before": old or "", "after": text}
            if persisted["changed"] and not module.check_mode:
                rollback.record_for(module, [{"kind": "file", "path": path, "content": old}])
                write_atomic(path, text)
        changed = changed or persisted["changed"]

    diff = {
        "before": "".join("%s: %s\n" % kv for kv in sorted(before.items()) if kv[0] in [s[0] for s in steps]),
        "after": "".join("%s: %s\n" % kv for kv in sorted(after.items()) if kv[0] in [s[0] for s in steps]),
    }
    if persisted.get("diff"):
        diff = [diff, persisted.pop("diff")]
    module.exit_json(
        changed=changed,
        before=before,
        after=after,
        commands=commands,
        unsupported=unsupported,
        persisted=persisted,
        diff=diff,
    )


if __name__ == "__main__":
    main()
