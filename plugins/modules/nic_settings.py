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
  - B(Uplink guard.) The module refuses (fails, nothing changed, not even a file) to change a NIC that is on the
    path that reaches the host, unless O(allow_uplink=true). A NIC is an uplink when it, or a bond, bridge, team,
    VLAN or macvlan stacked on it (sysfs C(upper_*) links and C(master), recursively), carries an IPv4 or IPv6
    default route (C(/proc/net/route), C(/proc/net/ipv6_route), and C(ip -j route show table all) for
    policy-routing tables; reject routes do not count), or has the local address of the current SSH connection
    (the third field of C(SSH_CONNECTION), from the module's environment or, because C(become) resets it, from the
    nearest ancestor process that has it). A bond member under a bond that carries the default route is an uplink.
    The refusal happens in check mode too, so check mode predicts the failure. RV(uplink) is returned always.
    When the NIC is already as asked there is nothing to refuse and the module returns C(ok).
  - B(.link files never rename NICs.) The file matches the NIC on C(PermanentMACAddress=) (the burnt-in MAC from
    C(ethtool -P); the current MAC in sysfs C(address) is shared by all members of a bond) plus C(Driver=); when
    the NIC has no permanent MAC (veth, many VFs), or systemd is older than v245 (no C(PermanentMACAddress=)), on
    C(OriginalName=) plus C(Driver=), with a warning. It never chooses a name - no C(Name=) or C(NamePolicy=) of
    its own. Because systemd-udevd applies only the first matching C(.link) file (systemd.link(5)), our file takes
    the place of the one that names the NIC today (usually C(99-default.link) with C(NamePolicy=)); its C([Link])
    settings other than ours are carried over unchanged (RV(persisted.replaces)) - without them the NIC would get
    its kernel name (C(eth0)) at the next boot.
  - The file is C(90-gpufleet-<name>.link), sorting after files an administrator, netplan (C(10-netplan-*.link))
    or cloud-init wrote, and before C(99-default.link). An earlier file that matches the same NIC makes ours a
    no-op at boot; the module warns and returns it as RV(link_shadowed_by). Our own file of older releases,
    C(60-gpufleet-<name>.link) (matched on the current MAC and set C(Name=)), is removed.
author:
  - gpufleet contributors (@gpufleet)
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
  link_search_dirs:
    description:
      - Directories systemd-udevd reads C(.link) files from, highest priority first (a file name in an earlier
        directory hides the same name in later ones). They are read to find an earlier file that shadows ours and
        the file ours takes the place of. O(link_dir) is always searched first.
    type: list
    elements: path
    default: [/etc/systemd/network, /run/systemd/network, /usr/local/lib/systemd/network, /usr/lib/systemd/network,
              /lib/systemd/network]
  allow_uplink:
    description:
      - Change the NIC even when it carries a default route or the current SSH connection (directly or through a
        bond, bridge or VLAN above it). Without it such a NIC is refused. Set it only for a NIC named on purpose.
    type: bool
    default: false
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
  - gpufleet.tuning.attributes.changing
  - gpufleet.tuning.rollback
"""

EXAMPLES = r"""
- name: Jumbo frames, full rings and offloads on the fabric NIC
  gpufleet.tuning.nic_settings:
    name: ens1f0np0
    mtu: 9000
    rings: {rx: max, tx: max}
    offloads: {gro: true, tso: true, gso: true}
  become: true

- name: The management NIC too, knowing it carries the default route
  gpufleet.tuning.nic_settings:
    name: eno1
    offloads: {gro: true}
    allow_uplink: true
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
  description: How the settings are kept across reboots.
  returned: always
  type: dict
  contains:
    method:
      description: networkmanager, link, udev or none.
      type: str
    path:
      description: The file written (or that would be), null when none.
      type: str
    changed:
      description: Whether the file changed (or would), including a removed file.
      type: bool
    match:
      description:
        - For a C(.link) file, what it matches the NIC on, C(PermanentMACAddress) or C(OriginalName) (with
          C(Driver=) in both cases); null otherwise.
      type: str
    replaces:
      description:
        - The C(.link) file that applies to the NIC today and whose other C([Link]) settings (naming, with its
          drop-ins) ours carries over; null when none matches.
      type: str
    removed:
      description: Files removed (our C(60-gpufleet-<name>.link) of older releases).
      type: list
      elements: str
uplink:
  description: Whether the NIC is on the path that reaches the host.
  returned: always (also when the module refuses the change)
  type: dict
  sample: {default_route: true, connection: false, via: bond0}
  contains:
    default_route:
      description: The NIC, or a device stacked on it, carries an IPv4 or IPv6 default route.
      type: bool
    connection:
      description:
        - The NIC, or a device stacked on it, has the local address of the current SSH connection; null when
          that cannot be told (no C(ip) to read IPv4 addresses).
      type: bool
    via:
      description:
        - The bond, bridge or VLAN above the NIC that carries it; null when the NIC itself does, or when it is
          not an uplink.
      type: str
would_run:
  description: When the uplink guard refuses the change, the commands that would have run (none did).
  returned: on refusal
  type: list
  elements: str
link_shadowed_by:
  description: An earlier-sorting C(.link) file that matches the NIC, so that ours changes nothing at boot; null
    when none (or when no C(.link) file is written).
  returned: always
  type: str
  sample: /run/systemd/network/10-netplan-eth0.link
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.tuning.plugins.module_utils import ifname, nic, nic_settings, rollback
from ansible_collections.gpufleet.tuning.plugins.module_utils.ethtool import Ethtool
from ansible_collections.gpufleet.tuning.plugins.module_utils.hostfs import HostFS
from ansible_collections.gpufleet.tuning.plugins.module_utils.fileio import write_atomic

_COALESCE_TYPES = {"adaptive_rx": bool, "adaptive_tx": bool, "rx_usecs": int, "tx_usecs": int}


def _validate(module):
    p = module.params
    why = ifname.interface_name_error(p["name"])
    if why:
        module.fail_json(msg="name: invalid interface name %r: %s; %s" % (p["name"], why, ifname.IFNAME_RULE))
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


def _uplink(module, fs, name, run, ip_bin):
    """uplink_status for ``name``, plus why it could not be told (or None)."""
    default_devs = nic_settings.parse_proc_route(fs.read("/proc/net/route"))
    default_devs |= nic_settings.parse_proc_ipv6_route(fs.read("/proc/net/ipv6_route"))
    addresses, unknown = nic_settings.parse_if_inet6(fs.read("/proc/net/if_inet6")), None
    if ip_bin:
        # /proc/net/route shows the main table only; ip also lists policy-routing tables.
        for family in ("-4", "-6"):
            rc, out, _err = run([ip_bin, "-j", family, "route", "show", "table", "all"])
            if rc == 0:
                default_devs |= nic_settings.parse_ip_route_json(out)
        rc, out, _err = run([ip_bin, "-j", "addr", "show"])
        if rc == 0:
            for dev, addrs in nic_settings.parse_ip_addr_json(out).items():
                addresses.setdefault(dev, set()).update(addrs)
    connection = os.environ.get("SSH_CONNECTION") or nic_settings.ancestor_ssh_connection(fs, os.getpid())
    local = nic_settings.ssh_local_address({"SSH_CONNECTION": connection or ""})
    if local and ":" not in local and not ip_bin:
        unknown = "the NIC's IPv4 addresses cannot be read without ip (iproute2)"
    status = nic_settings.uplink_status(name, nic_settings.uppers(fs, name), default_devs, addresses, local)
    if unknown and not status["connection"]:
        status["connection"] = None
    return status, local, unknown


def _uplink_refusal(name, status, local, unknown):
    where = "%s (stacked on %s)" % (status["via"], name) if status["via"] else name
    reasons = []
    if status["default_route"]:
        reasons.append("%s carries a default route" % where)
    if status["connection"]:
        reasons.append("%s has the address of this connection (%s, from SSH_CONNECTION)" % (where, local))
    elif status["connection"] is None:
        reasons.append("it cannot be told whether %s carries this connection (%s): %s" % (name, local, unknown))
    return (
        "allow_uplink: %s is an uplink - %s; changing it can cut the host off, so nothing was changed. "
        "Set allow_uplink: true (the network_tuning role does so for NICs named in the policy's "
        "network.interfaces) to change it anyway." % (name, "; ".join(reasons))
    )


def _link_plan(module, fs, name, current, settable, run, ethtool_bin):
    """(path, text, extra results, warnings) for the systemd .link file, and the legacy file to remove."""
    p = module.params
    warnings = []
    permanent = "unknown"
    perm_note = None
    if ethtool_bin:
        rc, out, err = run([ethtool_bin, "-P", name])
        if rc == 0:
            permanent = nic_settings.parse_permanent_address(out)
            if permanent is None:
                perm_note = "ethtool -P reports no permanent MAC address for %s" % name
        else:
            perm_note = "ethtool -P %s failed: %s" % (name, (err or out or "rc %d" % rc).strip())
    else:
        perm_note = "ethtool not found: the permanent MAC address of %s is not known" % name
    facts = nic_settings.link_facts(fs, name, current.get("driver"), current.get("bus_info"), permanent)
    match_facts = {"name": name, "driver": current.get("driver"), "permanent_mac": None}
    match_facts["permanent_mac_note"] = perm_note
    if permanent not in (None, "unknown"):
        udevadm = module.get_bin_path("udevadm")
        version = None
        if udevadm:
            rc, out, _err = run([udevadm, "--version"])
            version = nic_settings.parse_systemd_version(out) if rc == 0 else None
        if version is not None and version < nic_settings.PERMANENT_MAC_SYSTEMD:
            match_facts["permanent_mac_note"] = "systemd %d predates PermanentMACAddress= (v%d)" % (
                version,
                nic_settings.PERMANENT_MAC_SYSTEMD,
            )
        else:
            match_facts["permanent_mac"] = permanent
    match_lines, how, note = nic_settings.link_match_lines(match_facts)
    if how == "OriginalName":
        note = "%s; matched on OriginalName= + Driver= instead of PermanentMACAddress=" % note
        warnings.append("%s.link: %s" % (name, note))
        if (fs.read("/sys/class/net/%s/name_assign_type" % name) or "").strip() == "4":
            warnings.append(
                "%s was renamed after the kernel named it: OriginalName=%s may not match it at boot" % (name, name)
            )
    if not current.get("driver"):
        warnings.append("%s.link: the driver of %s is not known: the file matches without Driver=" % (name, name))
    ours = nic_settings.link_file_name(name)
    dirs = [p["link_dir"]] + [d for d in p["link_search_dirs"] if d.rstrip("/") != p["link_dir"].rstrip("/")]
    near = nic_settings.link_neighbours(fs, dirs, ours, facts)
    if near["shadowed_by"]:
        warnings.append(
            "%s sorts before %s and matches %s: systemd applies only the first matching .link file "
            "(systemd.link(5)), so ours changes nothing at boot; put the settings in that file (or the tool that "
            "writes it, e.g. netplan) instead" % (near["shadowed_by"], ours, name)
        )
    for path, why in near["maybe"]:
        warnings.append(
            "%s sorts before %s and may match %s (%s): if it does, ours changes nothing at boot"
            % (path, ours, name, "; ".join(why))
        )
    for path, why in near["replaces_maybe"]:
        warnings.append(
            "%s may match %s (%s); its [Link] settings are not carried over into %s"
            % (path, name, "; ".join(why), ours)
        )
    inherited_from = near["replaces"][0] if near["replaces"] else None
    inherited = near["replaces"][1] if near["replaces"] else None
    text = nic_settings.link_file(
        name, match_lines, settable, inherited, inherited_from, note, near["replaces_dropins"]
    )
    extra = {"match": how, "replaces": inherited_from, "shadowed_by": near["shadowed_by"]}
    legacy = os.path.join(p["link_dir"], nic_settings.LEGACY_LINK_PREFIX + "%s.link" % name)
    old_legacy = fs.read(legacy)
    if old_legacy is None or not old_legacy.startswith(nic_settings.MANAGED_HEADER):
        legacy = None
    return os.path.join(p["link_dir"], ours), text, extra, warnings, legacy


def _persist_plan(module, fs, name, current, settable, run, ethtool_bin, ip_bin):
    """What persistence would write: {"method", "path", "text", "old", "changed", "remove", ...}, warnings."""
    p = module.params
    plan = {
        "method": "none",
        "path": None,
        "text": None,
        "old": None,
        "changed": False,
        "remove": None,
        "match": None,
        "replaces": None,
        "shadowed_by": None,
    }
    warnings = []
    if not (p["persist"] and settable and p["persist_method"] != "none"):
        return plan, warnings
    method = _detect(module, name, p["persist_method"])
    plan["method"] = method
    if method == "link":
        path, text, extra, warnings, legacy = _link_plan(module, fs, name, current, settable, run, ethtool_bin)
        plan.update(extra)
        plan["remove"] = legacy
    elif method == "udev":
        path = os.path.join(p["udev_dir"], "60-gpufleet-%s.rules" % name)
        text = nic_settings.udev_rule(name, settable, ethtool_bin or "/usr/sbin/ethtool", ip_bin or "/usr/sbin/ip")
    else:
        path, text = None, None
        warnings.append(
            "NetworkManager manages %s: set the values in its connection profile "
            "(nmcli connection modify <profile> 802-3-ethernet.mtu ... ethtool.ring-rx ...)" % name
        )
    plan["path"], plan["text"] = path, text
    if path:
        plan["old"] = fs.read(path)
        plan["changed"] = plan["old"] != text
    plan["changed"] = plan["changed"] or bool(plan["remove"])
    return plan, warnings


def _remove_legacy(path):
    """Remove our own .link file of older releases (60-gpufleet-<name>.link: MACAddress= on the current MAC, which
    bond members share, plus Name=). Removing a file is atomic; the content is recorded for rollback first."""
    os.unlink(path)


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
            link_search_dirs=dict(type="list", elements="path", default=list(nic_settings.LINK_DIRS)),
            udev_dir=dict(type="path", default="/etc/udev/rules.d"),
            strict=dict(type="bool", default=False),
            allow_uplink=dict(type="bool", default=False),
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

    runner = Ethtool(run, ethtool_bin) if ethtool_bin else None
    current = nic.read_nic(fs, name, runner, None if ethtool_bin else "ethtool not found in PATH")
    if not current.get("present"):
        module.fail_json(msg="name: no such interface: %s" % name)
    uplink, local, unknown = _uplink(module, fs, name, run, ip_bin)
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
        module.fail_json(msg=str(exc), uplink=uplink)
    if unsupported and p["strict"]:
        module.fail_json(
            msg="strict: %s does not support %s"
            % (name, ", ".join("%s (%s)" % kv for kv in sorted(unsupported.items()))),
            uplink=uplink,
        )
    for _field, _argv, tool in steps:
        if tool == "ethtool" and not ethtool_bin:
            module.fail_json(msg="ethtool_path: ethtool is needed to change %s but was not found" % _field)
        if tool == "ip" and not ip_bin:
            module.fail_json(msg="ip (iproute2) is needed to change the MTU but was not found")

    def settable():
        return dict((k, v) for k, v in after.items() if k not in unsupported)

    persist, warnings = _persist_plan(module, fs, name, current, settable(), run, ethtool_bin, ip_bin)
    planned = [" ".join([ethtool_bin if tool == "ethtool" else ip_bin] + argv) for _f, argv, tool in steps]
    is_uplink = uplink["default_route"] or uplink["connection"] is not False
    if is_uplink and not p["allow_uplink"] and (steps or persist["changed"]):
        module.fail_json(
            msg=_uplink_refusal(name, uplink, local, unknown),
            uplink=uplink,
            before=before,
            after=after,
            commands=[],
            would_run=planned,
            link_shadowed_by=persist["shadowed_by"],
        )
    for warning in warnings:
        module.warn(warning)

    rollback.record_for(
        module,
        [{"kind": "nic", "name": name, "field": field, "value": before.get(field)} for field, _argv, _tool in steps],
    )
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
            module.fail_json(
                msg="%s: %s failed: %s" % (field, " ".join(full), reason), commands=commands, uplink=uplink
            )

    changed = bool(steps) and not all(field in unsupported for field, _a, _t in steps)
    if any(field in unsupported for field, _a, _t in steps):
        # A setting the driver refused at run time is not persisted either.
        persist, _again = _persist_plan(module, fs, name, current, settable(), run, ethtool_bin, ip_bin)
    persisted = {
        "method": persist["method"],
        "path": persist["path"],
        "changed": persist["changed"],
        "match": persist["match"],
        "replaces": persist["replaces"],
        "removed": [persist["remove"]] if persist["remove"] else [],
    }
    file_diffs = []
    if persist["path"] and persist["old"] != persist["text"]:
        file_diffs.append(
            {
                "before_header": persist["path"],
                "after_header": persist["path"],
                "before": persist["old"] or "",
                "after": persist["text"],
            }
        )
        if not module.check_mode:
            rollback.record_for(module, [{"kind": "file", "path": persist["path"], "content": persist["old"]}])
            write_atomic(persist["path"], persist["text"])
    if persist["remove"]:
        old = fs.read(persist["remove"])
        file_diffs.append(
            {
                "before_header": persist["remove"],
                "after_header": "%s (removed)" % persist["remove"],
                "before": old or "",
                "after": "",
            }
        )
        if not module.check_mode:
            rollback.record_for(module, [{"kind": "file", "path": persist["remove"], "content": old}])
            _remove_legacy(persist["remove"])
    changed = changed or persist["changed"]

    diff = {
        "before": "".join("%s: %s\n" % kv for kv in sorted(before.items()) if kv[0] in [s[0] for s in steps]),
        "after": "".join("%s: %s\n" % kv for kv in sorted(after.items()) if kv[0] in [s[0] for s in steps]),
    }
    if file_diffs:
        diff = [diff] + file_diffs
    module.exit_json(
        changed=changed,
        before=before,
        after=after,
        commands=commands,
        unsupported=unsupported,
        persisted=persisted,
        uplink=uplink,
        link_shadowed_by=persist["shadowed_by"],
        diff=diff,
    )


if __name__ == "__main__":
    main()
