# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""Plan NIC changes (MTU, offloads, rings, coalescing, channels) against what nic.read_nic reports, the commands
that make them, and the file that keeps them across reboots the way the host manages links.

Two guards keep a change from cutting a host off or renaming its NICs:

- ``uplink_status``: is the NIC on the path that reaches the host (it, or a bond/bridge/VLAN above it, carries a
  default route or the address of the current SSH connection)?
- ``.link`` files: ours matches the NIC on its permanent MAC and driver, never names it, and carries over the
  [Link] settings (naming included) of the file it takes the place of, because systemd applies only the first
  matching ``.link`` file (systemd.link(5)). ``link_match`` is a small [Match] evaluator used to find that file and
  the earlier ones that would make ours a no-op.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import fnmatch
import ipaddress
import json
import os
import re

from ansible_collections.gpufleet.tuning.plugins.module_utils import ifname, nic, rollback
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


# --- systemd .link persistence ---------------------------------------------------------------------

# systemd.link(5): "All link files are collectively sorted and processed in alphanumeric order, regardless of the
# directories in which they live. However, files with identical filenames replace each other" - /etc first, then
# /run, then /usr/local/lib and /usr/lib (/lib on hosts without a merged /usr). "The first (in alphanumeric order)
# of the link files that matches a given device is applied, all later files are ignored, even if they match as
# well."
LINK_DIRS = (
    "/etc/systemd/network",
    "/run/systemd/network",
    "/usr/local/lib/systemd/network",
    "/usr/lib/systemd/network",
    "/lib/systemd/network",
)
# Our file sorts late, so that any file an administrator, netplan (10-netplan-*.link) or cloud-init
# (10-cloud-init-*.link) wrote for the NIC comes first and keeps deciding (we then warn that ours is shadowed);
# and before 99-default.link (OriginalName=*, matches every NIC), or it would never apply at all.
LINK_PREFIX = "90-gpufleet-"
# Files of gpufleet 0.x (MACAddress= on the current MAC plus Name=): replaced by LINK_PREFIX files.
LEGACY_LINK_PREFIX = "60-gpufleet-"
MANAGED_HEADER = "# Managed by gpufleet (gpufleet.tuning.nic_settings)"
# PermanentMACAddress= in [Match] exists from systemd v245 (NEWS, v245); an older udevd ignores the unknown key and
# would apply the file to every NIC of the driver.
PERMANENT_MAC_SYSTEMD = 245

# The [Link] keys this module writes; everything else of the file ours replaces is carried over.
OWN_LINK_KEYS = frozenset(
    [
        "MTUBytes",
        "RxBufferSize",
        "TxBufferSize",
        "CombinedChannels",
        "RxChannels",
        "TxChannels",
        "UseAdaptiveRxCoalesce",
        "UseAdaptiveTxCoalesce",
        "RxCoalesceSec",
        "TxCoalesceSec",
    ]
    + list(LINK_FEATURES.values())
)


def link_file_name(name):
    return "%s%s.link" % (LINK_PREFIX, name)


def link_match_lines(nic_facts):
    """([Match] lines, how, note): PermanentMACAddress= + Driver= when the NIC has a permanent MAC (a bond member's
    current MAC is the bond's, shared by every member), else OriginalName= + Driver=."""
    lines, note = [], None
    if nic_facts.get("permanent_mac"):
        lines.append("PermanentMACAddress=%s" % nic_facts["permanent_mac"])
        how = "PermanentMACAddress"
    else:
        lines.append("OriginalName=%s" % nic_facts["name"])
        how = "OriginalName"
        note = nic_facts.get("permanent_mac_note") or "no permanent MAC address known"
    if nic_facts.get("driver"):
        lines.append("Driver=%s" % nic_facts["driver"])
    return lines, how, note


def link_file(name, match_lines, after, inherited=None, inherited_from=None, note=None, dropins=()):
    """systemd .link content. It never names the NIC itself: [Link] keys other than ours (NamePolicy=,
    MACAddressPolicy=, ...) are carried over from ``inherited_from``, the file that applies to the NIC today and
    that ours takes the place of, so the NIC keeps the name and MAC it gets now."""
    lines = [MANAGED_HEADER]
    if note:
        lines.append("# %s" % note)
    lines += ["[Match]"] + list(match_lines) + ["", "[Link]"]
    if inherited_from:
        lines.append("# Carried over from %s, which this file takes the place of for %s" % (inherited_from, name))
        for dropin in dropins:
            lines.append("# and from its drop-in %s" % dropin)
        lines.append("# (systemd.link(5): only the first matching .link file applies).")
    for key, value in inherited or []:
        if key not in OWN_LINK_KEYS:
            lines.append("%s=%s" % (key, value))
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


def parse_unit_file(text):
    """{section: [(key, value), ...]} of a systemd-style ini file (comments '#'/';', backslash continuations)."""
    sections, current, pending = {}, None, ""
    for raw in (text or "").splitlines():
        line = pending + raw.strip()
        pending = ""
        if line.endswith("\\"):
            pending = line[:-1].rstrip() + " "
            continue
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1].strip(), [])
            continue
        if current is None or "=" not in line:
            continue
        key, value = line.split("=", 1)
        current.append((key.strip(), value.strip()))
    return sections


def _norm_mac(value):
    digits = "".join(c for c in (value or "").lower() if c in "0123456789abcdef")
    return digits if len(digits) == 12 else None


def _strv_test(patterns, value):
    """systemd's net_condition_test_strv: '!'-prefixed patterns exclude; when any positive pattern exists one
    must match; an empty list matches."""
    if not patterns:
        return True
    matched, positive = False, False
    for pattern in patterns:
        invert = pattern.startswith("!")
        if invert:
            pattern = pattern[1:]
        else:
            positive = True
        if value is not None and fnmatch.fnmatchcase(value, pattern):
            if invert:
                return False
            matched = True
    return matched if positive else True


def _match_lists(pairs):
    """Key -> list of words, the way systemd accumulates them: each assignment appends its whitespace-separated
    words (each prefixed with '!' when the assignment starts with '!'); an empty assignment resets the list."""
    lists = {}
    for key, value in pairs:
        if not value:
            lists[key] = []
            continue
        invert = value.startswith("!")
        words = value[1:].split() if invert else value.split()
        lists.setdefault(key, []).extend(("!" + w) if invert else w for w in words)
    return lists


GLOB_KEYS = {"OriginalName": "name", "Driver": "driver", "Path": "path", "Type": "type"}
MAC_KEYS = {"MACAddress": "mac", "PermanentMACAddress": "permanent_mac"}


def link_match(match_pairs, facts):
    """("yes" | "no" | "maybe", [why]) for a [Match] section against one NIC.

    ``facts``: name (compared by OriginalName=; when ``renamed`` only "*" is sure to match), mac, permanent_mac
    (None: the NIC has none; missing key: unknown), driver, path (udev ID_PATH, None for a virtual NIC), type
    (networkctl's type: DEVTYPE, else "ether"...), properties (udev properties, or None when the udev database
    cannot be read). A value that is not known, and a key this evaluator does not know, give "maybe" with the
    reason."""
    if not match_pairs:
        # systemd >= 246: "No valid settings found in the [Match] section, ignoring file."
        return "no", ["empty [Match] section (systemd ignores the file)"]
    unknown = []
    for key, words in sorted(_match_lists(match_pairs).items()):
        if key in GLOB_KEYS:
            field = GLOB_KEYS[key]
            if key == "OriginalName" and facts.get("renamed") and not (words and all(w == "*" for w in words)):
                # udev compares the name the kernel gave; a renamed NIC's is not recorded anywhere we can read.
                unknown.append("OriginalName= (%s was renamed; its kernel name is not known)" % facts.get("name"))
                continue
            if field not in facts:
                unknown.append("%s= (the NIC's %s is not known)" % (key, field))
                continue
            if not _strv_test(words, facts[field]):
                return "no", ["%s= does not match %r" % (key, facts[field])]
        elif key in MAC_KEYS:
            field = MAC_KEYS[key]
            if not words:
                continue
            if field not in facts:
                unknown.append("%s= (the NIC's %s is not known)" % (key, field))
                continue
            wanted = set(_norm_mac(w.lstrip("!")) for w in words)
            if _norm_mac(facts[field]) not in wanted:
                return "no", ["%s= does not list %s" % (key, facts[field] or "(none)")]
        elif key == "Property":
            props = facts.get("properties")
            if props is None:
                unknown.append("Property= (the udev database has no entry for the NIC)")
                continue
            for word in words:
                invert = word.startswith("!")
                prop, _eq, pattern = word.lstrip("!").partition("=")
                hit = prop in props and fnmatch.fnmatchcase(props[prop], pattern or "*")
                if hit == invert:
                    return "no", ["Property=%s does not match" % word]
        else:
            unknown.append("%s= (not evaluated here)" % key)
    if unknown:
        return "maybe", unknown
    return "yes", []


def link_files(fs, dirs):
    """The .link files systemd-udevd would read from ``dirs`` (highest priority first), as sorted
    [(file name, path)]: one path per file name, the first directory's wins; masked files (empty, or links to
    /dev/null) are left out."""
    chosen = {}
    for directory in dirs:
        for path in fs.glob(directory.rstrip("/") + "/*.link"):
            base = path.rsplit("/", 1)[-1]
            if base in chosen:
                continue
            chosen[base] = path
    out = []
    for base in sorted(chosen):
        path = chosen[base]
        if fs.realpath(path) == "/dev/null" or not (fs.read(path) or "").strip():
            continue
        out.append((base, path))
    return out


def link_sections(fs, dirs, base, text):
    """(sections, drop-in paths) of one .link file merged with its drop-ins: systemd.link(5), "a drop-in directory
    foo.link.d/ may exist. All files with the suffix .conf from this directory will be merged in the alphanumeric
    order and parsed after the main file itself" (a drop-in name in a higher-priority directory hides the same
    name in lower ones). Later assignments of a key win or append, as in systemd, so the pairs are kept in order."""
    sections = parse_unit_file(text)
    chosen = {}
    for directory in dirs:
        for path in fs.glob("%s/%s.d/*.conf" % (directory.rstrip("/"), base)):
            chosen.setdefault(path.rsplit("/", 1)[-1], path)
    used = []
    for name in sorted(chosen):
        extra = fs.read(chosen[name])
        if not (extra or "").strip():
            continue
        used.append(chosen[name])
        for section, pairs in parse_unit_file(extra).items():
            sections.setdefault(section, []).extend(pairs)
    return sections, used


def link_neighbours(fs, dirs, ours, facts):
    """What the other .link files mean for our file ``ours`` (a file name) on this NIC:
    {"shadowed_by": path of the first earlier file that matches (ours is then a no-op) or None,
     "maybe": [(path, reasons)] earlier files that may match,
     "replaces": (path, [Link] pairs with its drop-ins') of the first later file that matches (ours takes its
     place) or None, "replaces_dropins": [paths],
     "replaces_maybe": [(path, reasons)] later files before it that may match}."""
    out = {"shadowed_by": None, "maybe": [], "replaces": None, "replaces_dropins": [], "replaces_maybe": []}
    for base, path in link_files(fs, dirs):
        if base == ours:
            continue
        text = fs.read(path) or ""
        if base < ours and text.startswith(MANAGED_HEADER) and base.startswith(LEGACY_LINK_PREFIX):
            # Our own old file for this NIC is removed by this run; others are judged like any file.
            if base == LEGACY_LINK_PREFIX + ours.replace(LINK_PREFIX, "", 1):
                continue
        sections, dropins = link_sections(fs, dirs, base, text)
        verdict, why = link_match(sections.get("Match", []), facts)
        if base < ours:
            if verdict == "yes" and out["shadowed_by"] is None:
                out["shadowed_by"] = path
            elif verdict == "maybe":
                out["maybe"].append((path, why))
        elif out["replaces"] is None:
            if verdict == "yes":
                out["replaces"] = (path, sections.get("Link", []))
                out["replaces_dropins"] = dropins
            elif verdict == "maybe":
                out["replaces_maybe"].append((path, why))
    return out


def parse_permanent_address(text):
    """``ethtool -P`` output -> the permanent MAC (lower case), or None when the NIC has none (all zeros)."""
    for line in (text or "").splitlines():
        if line.strip().lower().startswith("permanent address:"):
            value = line.split(":", 1)[1].strip().lower()
            digits = _norm_mac(value)
            if digits is None or digits == "0" * 12:
                return None
            return value
    return None


def parse_systemd_version(text):
    """``udevadm --version`` ("252" or "252.22-1~deb12u1") -> 252, or None."""
    head = (text or "").strip().split(".", 1)[0].split("-", 1)[0].split()
    return int(head[0]) if head and head[0].isdigit() else None


_ARPHRD = {"1": "ether", "32": "infiniband", "772": "loopback", "776": "sit", "768": "ipip", "65534": "none"}


def link_facts(fs, name, driver, bus_info, permanent_mac):
    """What [Match] keys compare, for one NIC. ``permanent_mac``: the address, None when the NIC has none, or
    the string "unknown"."""
    base = "/sys/class/net/%s" % name
    facts = {"name": name, "driver": driver}
    # name_assign_type 4 (NET_NAME_RENAMED): userspace renamed it, OriginalName= sees another name.
    facts["renamed"] = (fs.read(base + "/name_assign_type") or "").strip() == "4"
    facts["mac"] = (fs.read(base + "/address") or "").strip() or None
    if permanent_mac != "unknown":
        facts["permanent_mac"] = permanent_mac
    if not fs.exists(base + "/device"):
        facts["path"] = None  # a virtual NIC has no ID_PATH
    elif bus_info and len(bus_info.split(":")) == 3:
        facts["path"] = "pci-%s" % bus_info  # udev's path_id for a PCI function
    devtype = None
    for line in (fs.read(base + "/uevent") or "").splitlines():
        if line.startswith("DEVTYPE="):
            devtype = line.split("=", 1)[1].strip()
    kind = _ARPHRD.get((fs.read(base + "/type") or "").strip())
    if devtype or kind:
        facts["type"] = devtype or kind
    ifindex = (fs.read(base + "/ifindex") or "").strip()
    db = fs.read("/run/udev/data/n%s" % ifindex) if ifindex.isdigit() else None
    if db is not None:
        facts["properties"] = dict(
            line[2:].split("=", 1) for line in db.splitlines() if line.startswith("E:") and "=" in line
        )
    return facts


# --- uplink guard ------------------------------------------------------------------------------------

# Route types that do not send traffic out of a device (rtnetlink(7) RTN_*).
_NOT_FORWARDING = ("unreachable", "blackhole", "prohibit", "throw")
RTF_UP, RTF_REJECT = 0x0001, 0x0200


def parse_proc_route(text):
    """Devices with an IPv4 default route in /proc/net/route (main table): destination and mask 00000000."""
    devs = set()
    for line in (text or "").splitlines()[1:]:
        f = line.split()
        if len(f) >= 8 and f[1] == "00000000" and f[7] == "00000000":
            try:
                flags = int(f[3], 16)
            except ValueError:
                continue
            if flags & RTF_UP and not flags & RTF_REJECT:
                devs.add(f[0])
    return devs


def parse_proc_ipv6_route(text):
    """Devices with an IPv6 default route (::/0) in /proc/net/ipv6_route (every table). Reject routes (the
    kernel's "unreachable ::/0 dev lo") do not count."""
    devs = set()
    for line in (text or "").splitlines():
        f = line.split()
        if len(f) >= 10 and f[0] == "0" * 32 and f[1] == "00":
            try:
                flags = int(f[8], 16)
            except ValueError:
                continue
            if flags & RTF_UP and not flags & RTF_REJECT and f[9] != "lo":
                devs.add(f[9])
    return devs


def parse_ip_route_json(text):
    """Devices with a default route in ``ip -j route show table all`` output (policy-routing tables too)."""
    try:
        routes = json.loads(text or "[]")
    except ValueError:
        return set()
    devs = set()
    for route in routes if isinstance(routes, list) else []:
        if not isinstance(route, dict) or route.get("dst") not in ("default", "0.0.0.0/0", "::/0"):
            continue
        if route.get("type") in _NOT_FORWARDING:
            continue
        for hop in [route] + list(route.get("nexthops") or []):
            if isinstance(hop, dict) and hop.get("dev") and hop.get("dev") != "lo":
                devs.add(hop["dev"])
    return devs


def parse_ip_addr_json(text):
    """{device: set of addresses} from ``ip -j addr show``."""
    try:
        links = json.loads(text or "[]")
    except ValueError:
        return {}
    out = {}
    for link in links if isinstance(links, list) else []:
        if not isinstance(link, dict) or not link.get("ifname"):
            continue
        addrs = out.setdefault(link["ifname"], set())
        for info in link.get("addr_info") or []:
            if isinstance(info, dict) and info.get("local"):
                addrs.add(_norm_ip(info["local"]))
    return out


def parse_if_inet6(text):
    """{device: set of IPv6 addresses} from /proc/net/if_inet6."""
    out = {}
    for line in (text or "").splitlines():
        f = line.split()
        if len(f) >= 6 and len(f[0]) == 32:
            addr = ":".join(re.findall("....", f[0]))
            out.setdefault(f[5], set()).add(_norm_ip(addr))
    return out


def _norm_ip(text):
    text = (text or "").split("%", 1)[0].strip()
    try:
        addr = ipaddress.ip_address(text)
    except ValueError:
        return text
    mapped = getattr(addr, "ipv4_mapped", None)
    return str(mapped or addr)


def ssh_local_address(environ):
    """The server-side address of SSH_CONNECTION ("client port server port"), or None."""
    fields = (environ.get("SSH_CONNECTION") or "").split()
    return _norm_ip(fields[2]) if len(fields) >= 4 else None


def ancestor_ssh_connection(fs, pid, limit=64):
    """SSH_CONNECTION from the environment of the nearest ancestor of ``pid`` that has it: become (sudo, su)
    resets the environment, but the login shell sshd started above it keeps the variable."""
    seen = 0
    while pid and pid > 1 and seen < limit:
        seen += 1
        env = fs.read("/proc/%d/environ" % pid)
        if env:
            for item in env.split("\0"):
                if item.startswith("SSH_CONNECTION="):
                    return item.split("=", 1)[1]
        stat = fs.read("/proc/%d/stat" % pid) or ""
        # pid (comm) state ppid ...: comm may hold spaces and parentheses, so split after the last ')'.
        rest = stat.rsplit(")", 1)[-1].split()
        pid = int(rest[1]) if len(rest) > 1 and rest[1].isdigit() else 0
    return None


def uppers(fs, name, limit=16):
    """Devices stacked on ``name`` (bond, bridge, team, VLAN, macvlan...), nearest first, from the sysfs
    ``upper_*`` links and ``master``, recursively."""
    out, queue = [], [name]
    while queue and len(out) < limit:
        dev = queue.pop(0)
        base = "/sys/class/net/%s" % dev
        found = [p.rsplit("/", 1)[-1].replace("upper_", "", 1) for p in fs.glob(base + "/upper_*")]
        if fs.exists(base + "/master"):
            found.append(fs.realpath(base + "/master").rstrip("/").rsplit("/", 1)[-1])
        for upper in found:
            if upper and upper not in out and upper != name:
                out.append(upper)
                queue.append(upper)
    return out


def uplink_status(name, upper_devs, default_devs, addresses, local_address):
    """{"default_route", "connection", "via"}: whether ``name`` or a device stacked on it carries a default route
    or the local address of the current connection; ``via``: the upper device that does (None when the NIC
    itself does, or nothing does)."""
    status = {"default_route": False, "connection": False, "via": None}
    for dev in [name] + list(upper_devs):
        route = dev in default_devs
        conn = bool(local_address) and local_address in addresses.get(dev, set())
        if route or conn:
            if not (status["default_route"] or status["connection"]) and dev != name:
                status["via"] = dev
            status["default_route"] = status["default_route"] or route
            status["connection"] = status["connection"] or conn
    return status


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


def read_uplink(module, fs, name, run, ip_bin):
    """uplink_status for ``name``, plus why it could not be told (or None)."""
    default_devs = parse_proc_route(fs.read("/proc/net/route"))
    default_devs |= parse_proc_ipv6_route(fs.read("/proc/net/ipv6_route"))
    addresses, unknown = parse_if_inet6(fs.read("/proc/net/if_inet6")), None
    if ip_bin:
        # /proc/net/route shows the main table only; ip also lists policy-routing tables.
        for family in ("-4", "-6"):
            rc, out, _err = run([ip_bin, "-j", family, "route", "show", "table", "all"])
            if rc == 0:
                default_devs |= parse_ip_route_json(out)
        rc, out, _err = run([ip_bin, "-j", "addr", "show"])
        if rc == 0:
            for dev, addrs in parse_ip_addr_json(out).items():
                addresses.setdefault(dev, set()).update(addrs)
    connection = os.environ.get("SSH_CONNECTION") or ancestor_ssh_connection(fs, os.getpid())
    local = ssh_local_address({"SSH_CONNECTION": connection or ""})
    if local and ":" not in local and not ip_bin:
        unknown = "the NIC's IPv4 addresses cannot be read without ip (iproute2)"
    status = uplink_status(name, uppers(fs, name), default_devs, addresses, local)
    if unknown and not status["connection"]:
        status["connection"] = None
    return status, local, unknown


def uplink_refusal(name, status, local, unknown):
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


def link_file_plan(module, fs, name, current, settable, run, ethtool_bin):
    """(path, text, extra results, warnings) for the systemd .link file, and the legacy file to remove."""
    p = module.params
    warnings = []
    permanent = "unknown"
    perm_note = None
    if ethtool_bin:
        rc, out, err = run([ethtool_bin, "-P", name])
        if rc == 0:
            permanent = parse_permanent_address(out)
            if permanent is None:
                perm_note = "ethtool -P reports no permanent MAC address for %s" % name
        else:
            perm_note = "ethtool -P %s failed: %s" % (name, (err or out or "rc %d" % rc).strip())
    else:
        perm_note = "ethtool not found: the permanent MAC address of %s is not known" % name
    facts = link_facts(fs, name, current.get("driver"), current.get("bus_info"), permanent)
    match_facts = {"name": name, "driver": current.get("driver"), "permanent_mac": None}
    match_facts["permanent_mac_note"] = perm_note
    if permanent not in (None, "unknown"):
        udevadm = module.get_bin_path("udevadm")
        version = None
        if udevadm:
            rc, out, _err = run([udevadm, "--version"])
            version = parse_systemd_version(out) if rc == 0 else None
        if version is not None and version < PERMANENT_MAC_SYSTEMD:
            match_facts["permanent_mac_note"] = "systemd %d predates PermanentMACAddress= (v%d)" % (
                version,
                PERMANENT_MAC_SYSTEMD,
            )
        else:
            match_facts["permanent_mac"] = permanent
    match_lines, how, note = link_match_lines(match_facts)
    if how == "OriginalName":
        note = "%s; matched on OriginalName= + Driver= instead of PermanentMACAddress=" % note
        warnings.append("%s.link: %s" % (name, note))
        if (fs.read("/sys/class/net/%s/name_assign_type" % name) or "").strip() == "4":
            warnings.append(
                "%s was renamed after the kernel named it: OriginalName=%s may not match it at boot" % (name, name)
            )
    if not current.get("driver"):
        warnings.append("%s.link: the driver of %s is not known: the file matches without Driver=" % (name, name))
    ours = link_file_name(name)
    dirs = [p["link_dir"]] + [d for d in p["link_search_dirs"] if d.rstrip("/") != p["link_dir"].rstrip("/")]
    near = link_neighbours(fs, dirs, ours, facts)
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
    text = link_file(
        name, match_lines, settable, inherited, inherited_from, note, near["replaces_dropins"]
    )
    extra = {"match": how, "replaces": inherited_from, "shadowed_by": near["shadowed_by"]}
    legacy = os.path.join(p["link_dir"], LEGACY_LINK_PREFIX + "%s.link" % name)
    old_legacy = fs.read(legacy)
    if old_legacy is None or not old_legacy.startswith(MANAGED_HEADER):
        legacy = None
    return os.path.join(p["link_dir"], ours), text, extra, warnings, legacy


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
        path, text, extra, warnings, legacy = link_file_plan(module, fs, name, current, settable, run, ethtool_bin)
        plan.update(extra)
        plan["remove"] = legacy
    elif method == "udev":
        path = os.path.join(p["udev_dir"], "60-gpufleet-%s.rules" % name)
        text = udev_rule(name, settable, ethtool_bin or "/usr/sbin/ethtool", ip_bin or "/usr/sbin/ip")
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


def remove_legacy(path):
    """Remove our own .link file of older releases (60-gpufleet-<name>.link: MACAddress= on the current MAC, which
    bond members share, plus Name=). Removing a file is atomic; the content is recorded for rollback first."""
    os.unlink(path)


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
        self.uplink, local, unknown = read_uplink(module, self.fs, name, self.run, self.ip_bin)
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
                msg=uplink_refusal(name, self.uplink, local, unknown),
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
            remove_legacy(persist["remove"])

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
