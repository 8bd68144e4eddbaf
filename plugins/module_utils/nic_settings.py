# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Plan NIC changes (MTU, offloads, rings, coalescing, channels) against what nic.read_nic reports, the commands
that make them, and the file that keeps them across reboots the way the host manages links.

Two guards keep a change from cutting a host off or renaming its NICs, each in its own module: uplink.py (is the
NIC on the path that reaches the host? it, or a bond/bridge/VLAN above it, carries a default route or the address of
the current SSH connection) and link_files.py (the systemd ``.link`` file that keeps the settings at boot matches the
NIC on its permanent MAC and driver, never names it, and carries over the settings of the file it takes the place
of).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.gpufleet.tuning.plugins.module_utils import ifname, link_files, nic, rollback, uplink
from ansible_collections.gpufleet.tuning.plugins.module_utils.ethtool import Ethtool
from ansible_collections.gpufleet.tuning.plugins.module_utils.fileio import write_atomic
from ansible_collections.gpufleet.tuning.plugins.module_utils.hostfs import HostFS

# ethtool -K short names and the feature names `ethtool -k` prints.
FEATURE_ALIASES = {
    "tso": "tcp-segmentation-offload",
    "gso": "generic-segmentation-offload",
    "gro": "generic-receive-offload",
    "lro": "large-receive-offload",
    "sg": "scatter-gather",
    "rx": "rx-checksumming",
    "tx": "tx-checksumming",
    "rxvlan": "rx-vlan-offload",
    "txvlan": "tx-vlan-offload",
    "ntuple": "ntuple-filters",
    "rxhash": "receive-hashing",
}
SHORT = dict((v, k) for k, v in FEATURE_ALIASES.items())

COALESCE_KEYS = {
    "adaptive_rx": "adaptive-rx",
    "adaptive_tx": "adaptive-tx",
    "rx_usecs": "rx-usecs",
    "tx_usecs": "tx-usecs",
}
CHANNEL_KEYS = ("combined", "rx", "tx")


class NicSettingsError(Exception):
    pass


def _onoff(value):
    return "on" if value else "off"


def plan(nic, want):
    """(before, after, steps, unsupported) where each step is (field, argv-without-binary, tool)."""
    name = nic["name"]
    before, after, steps, unsupported = {}, {}, [], {}

    if want.get("mtu") is not None:
        before["mtu"], after["mtu"] = nic.get("mtu"), want["mtu"]
        if nic.get("mtu") != want["mtu"]:
            steps.append(("mtu", ["link", "set", "dev", name, "mtu", str(want["mtu"])], "ip"))

    if want.get("offloads"):
        current = nic.get("offloads")
        if current is None:
            unsupported["offloads"] = nic["unsupported"].get("offloads", "not reported")
        else:
            fixed = set(nic.get("offloads_fixed") or [])
            args = []
            for feature, value in sorted(want["offloads"].items()):
                long_name = FEATURE_ALIASES.get(feature, feature)
                if long_name not in current:
                    raise NicSettingsError(
                        "offloads.%s: %s has no such feature (it has: %s)" % (feature, name, ", ".join(sorted(current)))
                    )
                before.setdefault("offloads", {})[long_name] = current[long_name]
                after.setdefault("offloads", {})[long_name] = bool(value)
                if current[long_name] != bool(value):
                    if long_name in fixed:
                        unsupported["offloads." + long_name] = "fixed by the driver"
                        after["offloads"][long_name] = current[long_name]
                        continue
                    args += [SHORT.get(long_name, long_name), _onoff(value)]
            if args:
                steps.append(("offloads", ["-K", name] + args, "ethtool"))

    if want.get("rings"):
        rings = nic.get("rings")
        if not rings or rings.get("rx_max") is None:
            unsupported["rings"] = nic["unsupported"].get("rings", "not reported")
        else:
            _plan_counts("rings", ("rx", "tx"), want["rings"], rings, name, "-G", before, after, steps)

    if want.get("coalescing"):
        coal = nic.get("coalescing")
        if not coal:
            unsupported["coalescing"] = nic["unsupported"].get("coalescing", "not reported")
        else:
            args = []
            for key, value in sorted(want["coalescing"].items()):
                before.setdefault("coalescing", {})[key] = coal.get(key)
                after.setdefault("coalescing", {})[key] = value
                if coal.get(key) != value:
                    args += [COALESCE_KEYS[key], _onoff(value) if isinstance(value, bool) else str(value)]
            if args:
                steps.append(("coalescing", ["-C", name] + args, "ethtool"))

    if want.get("channels"):
        ch = nic.get("channels")
        if not ch:
            unsupported["channels"] = nic["unsupported"].get("channels", "not reported")
        else:
            _plan_counts("channels", CHANNEL_KEYS, want["channels"], ch, name, "-L", before, after, steps)
    return before, after, steps, unsupported


def _plan_counts(section, keys, wanted, current, name, flag, before, after, steps):
    """Rings (ethtool -G) and channels (ethtool -L): counts with a maximum each (``<key>_max``); a wanted value is a
    number or "max". Fills ``before``/``after`` under ``section`` and appends one ethtool step for the keys that
    change; a number above the NIC's maximum is refused."""
    args = []
    for key in keys:
        if key not in wanted:
            continue
        value = wanted[key]
        top = current.get(key + "_max")
        target = top if value == "max" else int(value)
        if top is not None and target > top:
            raise NicSettingsError("%s.%s: %d is above %s's maximum %d" % (section, key, target, name, top))
        before.setdefault(section, {})[key] = current.get(key)
        after.setdefault(section, {})[key] = target
        if current.get(key) != target:
            args += [key, str(target)]
    if args:
        steps.append((section, [flag, name] + args, "ethtool"))


# The udev rule sorts after 80-net-setup-link.rules, the rule that renames NICs (NAME="$env{ID_NET_NAME}" from the
# .link files' NamePolicy=), so that it can match the name the NIC ends up with. KERNEL== compares the kernel's name
# (eth0), never the name a NIC is renamed to (ens1f0). udev(7), NAME: "Match the name of a network interface. It can
# be used once the NAME key has been set in one of the preceding rules." A NIC no rule renamed has no NAME yet
# (NAME=="", the test 80-net-setup-link.rules itself uses) and keeps its kernel name, so KERNEL== covers it.
# (The permanent MAC is no choice here: sysfs has no attribute for it, only ethtool -P reads it.)
UDEV_PREFIX = "90-gpufleet-"
# Rules of older releases (KERNEL== only, before the renaming rule): removed when the new one is written.
LEGACY_UDEV_PREFIX = "60-gpufleet-"


def udev_rule_name(name):
    return "%s%s.rules" % (UDEV_PREFIX, name)


def udev_rule(name, after, ethtool, ip):
    """A udev rule that replays the settings when the interface appears (hosts without systemd-udevd .link),
    matched on the name the NIC has after renaming (see UDEV_PREFIX)."""
    runs = []
    if "mtu" in after:
        runs.append('ATTR{mtu}="%d"' % after["mtu"])
    for _field, argv, tool in plan_all_steps(name, after):
        runs.append('RUN+="%s %s"' % (ethtool if tool == "ethtool" else ip, " ".join(argv)))
    go, end = "gpufleet_%s" % name, "gpufleet_%s_end" % name
    lines = [
        link_files.MANAGED_HEADER,
        "# After 80-net-setup-link.rules: NAME== is the name the NIC was renamed to (udev(7)); a NIC nobody",
        "# renamed keeps its kernel name (NAME is still empty).",
        'ACTION!="add", GOTO="%s"' % end,
        'SUBSYSTEM!="net", GOTO="%s"' % end,
        'NAME=="%s", GOTO="%s"' % (name, go),
        'NAME=="", KERNEL=="%s", GOTO="%s"' % (name, go),
        'GOTO="%s"' % end,
        'LABEL="%s"' % go,
    ]
    return "\n".join(lines + runs + ['LABEL="%s"' % end]) + "\n"


def udev_legacy_path(fs, udev_dir, name):
    """Our rule of older releases for ``name`` (LEGACY_UDEV_PREFIX), or None when there is none of ours."""
    path = os.path.join(udev_dir, "%s%s.rules" % (LEGACY_UDEV_PREFIX, name))
    old = fs.read(path)
    return path if old is not None and old.startswith(link_files.MANAGED_HEADER) else None


def plan_all_steps(name, after):
    """The ethtool commands that set everything in ``after`` (used for boot-time replays)."""
    steps = []
    offloads = after.get("offloads") or {}
    if offloads:
        args = []
        for feature, value in sorted(offloads.items()):
            args += [SHORT.get(feature, feature), _onoff(value)]
        steps.append(("offloads", ["-K", name] + args, "ethtool"))
    rings = after.get("rings") or {}
    if rings:
        steps.append(
            ("rings", ["-G", name] + [x for k in ("rx", "tx") if k in rings for x in (k, str(rings[k]))], "ethtool")
        )
    coal = after.get("coalescing") or {}
    if coal:
        args = []
        for key, value in sorted(coal.items()):
            args += [COALESCE_KEYS[key], _onoff(value) if isinstance(value, bool) else str(value)]
        steps.append(("coalescing", ["-C", name] + args, "ethtool"))
    channels = after.get("channels") or {}
    if channels:
        steps.append(
            (
                "channels",
                ["-L", name] + [x for k in CHANNEL_KEYS if k in channels for x in (k, str(channels[k]))],
                "ethtool",
            )
        )
    return steps


# The nic_settings module's work: validate, plan (read the NIC, refuse an uplink, nothing changed), apply (outside
# check mode, prior values recorded for rollback first) and diff.

COALESCE_TYPES = {"adaptive_rx": bool, "adaptive_tx": bool, "rx_usecs": int, "tx_usecs": int}


def validate(module):
    p = module.params
    why = ifname.interface_name_error(p["name"])
    if why:
        module.fail_json(msg="name: invalid interface name %r: %s; %s" % (p["name"], why, ifname.IFNAME_RULE))
    if p["mtu"] is not None and not 68 <= p["mtu"] <= 65535:
        module.fail_json(msg="mtu: %d is outside 68-65535" % p["mtu"])
    for field, keys in (("rings", ("rx", "tx")), ("channels", CHANNEL_KEYS)):
        for key, value in (p[field] or {}).items():
            if key not in keys:
                module.fail_json(msg="%s.%s: unknown key (allowed: %s)" % (field, key, ", ".join(keys)))
            if value != "max" and (isinstance(value, bool) or not str(value).isdigit() or int(value) < 1):
                module.fail_json(msg="%s.%s: must be a positive number or 'max', got %r" % (field, key, value))
    for key, value in (p["coalescing"] or {}).items():
        if key not in COALESCE_TYPES:
            module.fail_json(msg="coalescing.%s: unknown key (allowed: %s)" % (key, ", ".join(sorted(COALESCE_TYPES))))
        kind = COALESCE_TYPES[key]
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


def persist_method(module, name, requested):
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


def persist_plan(module, fs, name, current, settable, run, ethtool_bin, ip_bin):
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
    method = persist_method(module, name, p["persist_method"])
    plan["method"] = method
    if method == "link":
        path, text, extra, warnings, legacy = link_files.link_file_plan(
            module, fs, name, current, settable, run, ethtool_bin
        )
        plan.update(extra)
        plan["remove"] = legacy
    elif method == "udev":
        path = os.path.join(p["udev_dir"], udev_rule_name(name))
        text = udev_rule(name, settable, ethtool_bin or "/usr/sbin/ethtool", ip_bin or "/usr/sbin/ip")
        plan["remove"] = udev_legacy_path(fs, p["udev_dir"], name)
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


class NicChange:
    """plan() reads the NIC and decides, apply() runs the commands and writes the boot-time file (never in check
    mode), diff() and result() report."""

    def __init__(self, module):
        self.module = module
        p = module.params
        self.name = p["name"]
        self.fs = HostFS("/")
        self.ethtool_bin = p["ethtool_path"] or module.get_bin_path("ethtool")
        self.ip_bin = module.get_bin_path("ip")
        self.current = self.uplink = None
        self.before, self.after, self.steps, self.unsupported = {}, {}, [], {}
        self.persist, self.commands, self.removed_old = None, [], None

    def run(self, argv):
        return self.module.run_command(argv, environ_update={"LC_ALL": "C", "LANG": "C"})

    def settable(self):
        return dict((k, v) for k, v in self.after.items() if k not in self.unsupported)

    def _binary(self, tool):
        return self.ethtool_bin if tool == "ethtool" else self.ip_bin

    def _plan_persist(self):
        self.persist, warnings = persist_plan(
            self.module, self.fs, self.name, self.current, self.settable(), self.run, self.ethtool_bin, self.ip_bin
        )
        self.removed_old = self.fs.read(self.persist["remove"]) if self.persist["remove"] else None
        return warnings

    def plan(self):
        module, p, name = self.module, self.module.params, self.name
        runner = Ethtool(self.run, self.ethtool_bin) if self.ethtool_bin else None
        self.current = nic.read_nic(self.fs, name, runner, None if self.ethtool_bin else "ethtool not found in PATH")
        if not self.current.get("present"):
            module.fail_json(msg="name: no such interface: %s" % name)
        self.uplink, local, unknown = uplink.read_uplink(module, self.fs, name, self.run, self.ip_bin)
        want = dict((field, p[field]) for field in ("mtu", "offloads", "rings", "coalescing", "channels"))
        try:
            self.before, self.after, self.steps, self.unsupported = plan(self.current, want)
        except NicSettingsError as exc:
            module.fail_json(msg=str(exc), uplink=self.uplink)
        if self.unsupported and p["strict"]:
            module.fail_json(
                msg="strict: %s does not support %s"
                % (name, ", ".join("%s (%s)" % kv for kv in sorted(self.unsupported.items()))),
                uplink=self.uplink,
            )
        for field, _argv, tool in self.steps:
            if tool == "ethtool" and not self.ethtool_bin:
                module.fail_json(msg="ethtool_path: ethtool is needed to change %s but was not found" % field)
            if tool == "ip" and not self.ip_bin:
                module.fail_json(msg="ip (iproute2) is needed to change the MTU but was not found")
        warnings = self._plan_persist()
        self.commands = [" ".join([self._binary(tool)] + argv) for _f, argv, tool in self.steps]
        is_uplink = self.uplink["default_route"] or self.uplink["connection"] is not False
        if is_uplink and not p["allow_uplink"] and (self.steps or self.persist["changed"]):
            module.fail_json(
                msg=uplink.uplink_refusal(name, self.uplink, local, unknown),
                uplink=self.uplink,
                before=self.before,
                after=self.after,
                commands=[],
                would_run=self.commands,
                link_shadowed_by=self.persist["shadowed_by"],
            )
        for warning in warnings:
            module.warn(warning)

    def apply(self):
        module = self.module
        if module.check_mode:
            return
        steps = self.steps
        records = [{"kind": "nic", "name": self.name, "field": f, "value": self.before.get(f)} for f, _a, _t in steps]
        rollback.record_for(module, records)
        for i, (field, argv, tool) in enumerate(steps):
            full = [self._binary(tool)] + argv
            rc, out, err = self.run(full)
            if rc != 0:
                reason = (err or out or "rc %d" % rc).strip().splitlines()[-1]
                if "not supported" in reason.lower() and not module.params["strict"]:
                    self.unsupported[field] = reason
                    self.after[field] = self.before.get(field)
                    continue
                module.fail_json(
                    msg="%s: %s failed: %s" % (field, " ".join(full), reason),
                    commands=self.commands[: i + 1],
                    uplink=self.uplink,
                )
        if any(field in self.unsupported for field, _a, _t in steps):
            # A setting the driver refused at run time is not persisted either.
            self._plan_persist()
        persist = self.persist
        if persist["path"] and persist["old"] != persist["text"]:
            rollback.record_for(module, [{"kind": "file", "path": persist["path"], "content": persist["old"]}])
            write_atomic(persist["path"], persist["text"])
        if persist["remove"]:
            rollback.record_for(module, [{"kind": "file", "path": persist["remove"], "content": self.removed_old}])
            link_files.remove_legacy(persist["remove"])

    def diff(self):
        fields = [s[0] for s in self.steps]
        diff = {
            "before": "".join("%s: %s\n" % kv for kv in sorted(self.before.items()) if kv[0] in fields),
            "after": "".join("%s: %s\n" % kv for kv in sorted(self.after.items()) if kv[0] in fields),
        }
        persist, files = self.persist, []
        if persist["path"] and persist["old"] != persist["text"]:
            path, before = persist["path"], persist["old"] or ""
            files.append({"before_header": path, "after_header": path, "before": before, "after": persist["text"]})
        if persist["remove"]:
            removed = persist["remove"]
            files.append(
                {
                    "before_header": removed,
                    "after_header": "%s (removed)" % removed,
                    "before": self.removed_old or "",
                    "after": "",
                }
            )
        return [diff] + files if files else diff

    def result(self):
        steps, persist = self.steps, self.persist
        changed = bool(steps) and not all(field in self.unsupported for field, _a, _t in steps)
        return dict(
            changed=changed or persist["changed"],
            before=self.before,
            after=self.after,
            commands=self.commands,
            unsupported=self.unsupported,
            persisted={
                "method": persist["method"],
                "path": persist["path"],
                "changed": persist["changed"],
                "match": persist["match"],
                "replaces": persist["replaces"],
                "removed": [persist["remove"]] if persist["remove"] else [],
            },
            uplink=self.uplink,
            link_shadowed_by=persist["shadowed_by"],
            diff=self.diff(),
        )
