# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Plan NIC changes (MTU, offloads, rings, coalescing, channels) against what nic.read_nic reports, the commands
that make them, and the file that keeps them across reboots the way the host manages links."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

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

# systemd.link(5) keys for what we set.
LINK_FEATURES = {
    "tcp-segmentation-offload": "TCPSegmentationOffload",
    "generic-segmentation-offload": "GenericSegmentationOffload",
    "generic-receive-offload": "GenericReceiveOffload",
    "large-receive-offload": "LargeReceiveOffload",
    "rx-checksumming": "ReceiveChecksumOffload",
    "tx-checksumming": "TransmitChecksumOffload",
}
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
            args = []
            for side in ("rx", "tx"):
                if side not in want["rings"]:
                    continue
                value = want["rings"][side]
                top = rings.get(side + "_max")
                target = top if value == "max" else int(value)
                if top is not None and target > top:
                    raise NicSettingsError("rings.%s: %d is above %s's maximum %d" % (side, target, name, top))
                before.setdefault("rings", {})[side] = rings.get(side)
                after.setdefault("rings", {})[side] = target
                if rings.get(side) != target:
                    args += [side, str(target)]
            if args:
                steps.append(("rings", ["-G", name] + args, "ethtool"))

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
            args = []
            for key in CHANNEL_KEYS:
                if key not in want["channels"]:
                    continue
                value = want["channels"][key]
                top = ch.get(key + "_max")
                target = top if value == "max" else int(value)
                if top is not None and target > top:
                    raise NicSettingsError("channels.%s: %d is above %s's maximum %d" % (key, target, name, top))
                before.setdefault("channels", {})[key] = ch.get(key)
                after.setdefault("channels", {})[key] = target
                if ch.get(key) != target:
                    args += [key, str(target)]
            if args:
                steps.append(("channels", ["-L", name] + args, "ethtool"))
    return before, after, steps, unsupported


def link_file(name, mac, after):
    """systemd .link content keeping the interface's name (a matching .link replaces 99-default.link's naming)."""
    lines = ["# Managed by gpufleet (gpufleet.tuning.nic_settings)", "[Match]"]
    lines.append("MACAddress=%s" % mac if mac else "OriginalName=%s" % name)
    lines += ["", "[Link]", "Name=%s" % name]
    if "mtu" in after:
        lines.append("MTUBytes=%d" % after["mtu"])
    rings = after.get("rings") or {}
    if "rx" in rings:
        lines.append("RxBufferSize=%d" % rings["rx"])
    if "tx" in rings:
        lines.append("TxBufferSize=%d" % rings["tx"])
    for feature, value in sorted((after.get("offloads") or {}).items()):
        if feature in LINK_FEATURES:
            lines.append("%s=%s" % (LINK_FEATURES[feature], "true" if value else "false"))
    channels = after.get("channels") or {}
    for key, link_key in (("combined", "CombinedChannels"), ("rx", "RxChannels"), ("tx", "TxChannels")):
        if key in channels:
            lines.append("%s=%d" % (link_key, channels[key]))
    coal = after.get("coalescing") or {}
    if "adaptive_rx" in coal:
        lines.append("UseAdaptiveRxCoalesce=%s" % ("true" if coal["adaptive_rx"] else "false"))
    if "adaptive_tx" in coal:
        lines.append("UseAdaptiveTxCoalesce=%s" % ("true" if coal["adaptive_tx"] else "false"))
    if "rx_usecs" in coal:
        lines.append("RxCoalesceSec=%dus" % coal["rx_usecs"])
    if "tx_usecs" in coal:
        lines.append("TxCoalesceSec=%dus" % coal["tx_usecs"])
    return "\n".join(lines) + "\n"


def udev_rule(name, after, ethtool, ip):
    """A udev rule that replays the settings when the interface appears (hosts without systemd-udevd .link)."""
    runs = []
    if "mtu" in after:
        runs.append('ATTR{mtu}="%d"' % after["mtu"])
    for _field, argv, tool in plan_all_steps(name, after):
        runs.append('RUN+="%s %s"' % (ethtool if tool == "ethtool" else ip, " ".join(argv)))
    head = 'ACTION=="add", SUBSYSTEM=="net", KERNEL=="%s"' % name
    return "# Managed by gpufleet (gpufleet.tuning.nic_settings)\n%s\n" % (
        "\n".join("%s, %s" % (head, r) for r in runs)
    )


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
