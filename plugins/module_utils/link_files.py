# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""systemd ``.link`` files for a NIC's settings at boot: ours matches the NIC on its permanent MAC and
driver, never names it, and carries over the [Link] settings (naming included) of the file it takes the place of,
because systemd applies only the first matching ``.link`` file (systemd.link(5)). ``link_match`` is a small [Match]
evaluator used to find that file and the earlier ones that would make ours a no-op; ``link_file_plan`` puts it
together for nic_settings, and our files of older releases (``LEGACY_LINK_PREFIX``) are removed."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import fnmatch
import os

from ansible_collections.gpufleet.tuning.plugins.module_utils import systemd_unit

# systemd.link(5) keys for what we set.
LINK_FEATURES = {
    "tcp-segmentation-offload": "TCPSegmentationOffload",
    "generic-segmentation-offload": "GenericSegmentationOffload",
    "generic-receive-offload": "GenericReceiveOffload",
    "large-receive-offload": "LargeReceiveOffload",
    "rx-checksumming": "ReceiveChecksumOffload",
    "tx-checksumming": "TransmitChecksumOffload",
}

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
    sections = systemd_unit.parse_unit_file(text)
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
        for section, pairs in systemd_unit.parse_unit_file(extra).items():
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


def remove_legacy(path):
    """Remove our own file of older releases: 60-gpufleet-<name>.link (MACAddress= on the current MAC, which bond
    members share, plus Name=) or 60-gpufleet-<name>.rules (KERNEL==, which a renamed NIC never matches). Removing
    a file is atomic; the content is recorded for rollback first."""
    os.unlink(path)
