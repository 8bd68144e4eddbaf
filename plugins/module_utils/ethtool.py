# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# Apache License 2.0 (see LICENSE)
"""ethtool: running it and reading what it prints.

``Ethtool(run, binary)`` runs a subcommand through ``run(argv) -> (rc, stdout, stderr)`` with an argument list,
never a shell string, and only for interface names that passed ``ifname.check_interface_name``.

ethtool output comes in two formats. For each subcommand (-i, -g, -k, -c, -l) ``--json`` is tried first;
an ethtool that does not know ``--json`` for that subcommand answers "bad command line argument(s)"
(6.1 rejects it for everything but -k), and the plain text is read instead. ``-S`` (driver statistics) is
read as text. The parsers are small pure functions over that output so that recorded outputs of real drivers
(tests/fixtures/ethtool) can be checked against each other; ``DROP_COUNTERS`` says which ``-S`` counters of
which driver mean a receive-ring overflow.

nic.py puts these answers together with sysfs into the ``network`` fact.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

from ansible_collections.gpufleet.tuning.plugins.module_utils.ifname import check_interface_name

# --- small value helpers -----------------------------------------------------------------------


class EthtoolParseError(ValueError):
    pass


_NA = ("n/a", "na", "")


def _int_or_none(value):
    if value is None:
        return None
    text = str(value).strip()
    if text.lower() in _NA:
        return None
    try:
        return int(text, 0) if text.lower().startswith("0x") else int(text)
    except ValueError:
        return None


def _onoff(value):
    text = (value or "").strip().lower()
    if text == "on":
        return True
    if text == "off":
        return False
    return None


def _split_field(line):
    """("key", "value") of a "key: value" line (value may contain ':'), or (None, None)."""
    key, sep, value = line.partition(":")
    if not sep:
        return None, None
    return key.strip(), value.strip()


def _json_objects(text, pairs=False):
    """The list of objects ethtool --json prints (``[ {...} ]``). With ``pairs``, each object is a list
    of (key, value) in output order, duplicates kept."""
    hook = list if pairs else None
    try:
        data = json.loads(text, object_pairs_hook=hook)
    except ValueError as exc:
        raise EthtoolParseError("not JSON: %s" % exc) from None
    if not isinstance(data, list) or not data:
        raise EthtoolParseError("expected a non-empty JSON list of objects")
    return data


def _first_object(text):
    obj = _json_objects(text)[0]
    if not isinstance(obj, dict):
        raise EthtoolParseError("expected a JSON object per device")
    return obj


# --- ethtool -i --------------------------------------------------------------------------------

DRIVER_KEYS = (
    ("driver", "driver"),
    ("version", "driver_version"),
    ("firmware-version", "firmware_version"),
    ("bus-info", "bus_info"),
)


def parse_driver_text(text):
    """``ethtool -i`` -> {driver, driver_version, firmware_version, bus_info}; empty values are None."""
    raw = {}
    for line in text.splitlines():
        key, value = _split_field(line)
        if key is not None and key not in raw:
            raw[key] = value
    if "driver" not in raw:
        raise EthtoolParseError("no 'driver:' line")
    return dict((ours, raw.get(theirs) or None) for theirs, ours in DRIVER_KEYS)


def parse_driver_json(text):
    """``ethtool --json -i``: no ethtool release seen so far has it; an object with the same keys as the
    text output is accepted should one appear."""
    obj = _first_object(text)
    if "driver" not in obj:
        raise EthtoolParseError("no 'driver' key")
    return dict((ours, (obj.get(theirs) or None)) for theirs, ours in DRIVER_KEYS)


# --- ethtool -g --------------------------------------------------------------------------------


def _two_section_counts(text, keys, header):
    """Parse the "Pre-set maximums:" / "Current hardware settings:" layout shared by -g and -l.

    Returns ({key: max}, {key: current}). Some ethtool builds print the values without the two
    section headers; the first occurrence of a key is then the maximum, the second the current value.
    """
    maxima, current = {}, {}
    section = None
    seen_header = False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith(header):
            seen_header = True
            continue
        if stripped.startswith("Pre-set maximums"):
            section = maxima
            continue
        if stripped.startswith("Current hardware settings"):
            section = current
            continue
        key, value = _split_field(stripped)
        if key not in keys:
            continue
        if section is None:
            section = maxima
        if section is maxima and key in maxima:
            section = current  # headerless layout: second block
        section.setdefault(key, _int_or_none(value))
    if not seen_header and not maxima and not current:
        raise EthtoolParseError("no %r header and no values" % header)
    return maxima, current


def parse_rings_text(text):
    """``ethtool -g`` -> {rx, tx, rx_max, tx_max} (None where the driver says n/a)."""
    maxima, current = _two_section_counts(text, ("RX", "TX"), "Ring parameters for")
    return {"rx": current.get("RX"), "tx": current.get("TX"), "rx_max": maxima.get("RX"), "tx_max": maxima.get("TX")}


def parse_rings_json(text):
    """``ethtool --json -g``: keys rx, tx, rx-max, tx-max (absent when the driver does not report them)."""
    obj = _first_object(text)
    return {
        "rx": _int_or_none(obj.get("rx")),
        "tx": _int_or_none(obj.get("tx")),
        "rx_max": _int_or_none(obj.get("rx-max")),
        "tx_max": _int_or_none(obj.get("tx-max")),
    }


# --- ethtool -k --------------------------------------------------------------------------------

_FEATURE_RE = re.compile(r"^\s*([A-Za-z0-9_.-]+):\s+(on|off)(?:\s+\[([^\]]*)\])?\s*$")

# Feature groups and the hardware sub-features that decide whether the group can be turned on. ethtool marks a
# group "[fixed]" only when every member is fixed, but a group also holds software flags that are always
# changeable (tx-tcp-mangleid-segmentation is in NETIF_F_ALL_TSO): a NIC without TSO (ENA) shows
# "tcp-segmentation-offload: off" with tx-tcp-segmentation and tx-tcp6-segmentation "off [fixed]", and
# `ethtool -K ... tso on` changes nothing. Such a group counts as fixed.
HARDWARE_MEMBERS = {
    "tcp-segmentation-offload": ("tx-tcp-segmentation", "tx-tcp6-segmentation"),
}


def _fixed_groups(features, fixed):
    """``fixed`` plus each group of HARDWARE_MEMBERS that is off and whose hardware members are all fixed off."""
    out = set(fixed)
    for group, members in HARDWARE_MEMBERS.items():
        if features.get(group) is False and all(m in out and features.get(m) is False for m in members):
            out.add(group)
    return sorted(out)


def parse_features_text(text):
    """``ethtool -k`` -> ({feature: active}, [features marked "[fixed]"]), every feature and sub-feature."""
    features, fixed = {}, []
    for line in text.splitlines():
        match = _FEATURE_RE.match(line)
        if not match:
            continue
        name, state, note = match.groups()
        features[name] = state == "on"
        if note == "fixed":
            fixed.append(name)
    if not features:
        raise EthtoolParseError("no 'feature: on|off' lines")
    return features, _fixed_groups(features, fixed)


def parse_features_json(text):
    """``ethtool --json -k``: {feature: {active, fixed, requested}}; ``fixed`` is null for a group whose
    members differ, true only when all of them are fixed (the same rule as "[fixed]" in the text)."""
    obj = _first_object(text)
    features, fixed = {}, []
    for name, value in obj.items():
        if not isinstance(value, dict) or "active" not in value:
            continue
        features[name] = bool(value["active"])
        if value.get("fixed") is True:
            fixed.append(name)
    if not features:
        raise EthtoolParseError("no feature objects")
    return features, _fixed_groups(features, fixed)


# --- ethtool -c --------------------------------------------------------------------------------

COALESCE_NUMBERS = (
    ("rx-usecs", "rx_usecs"),
    ("tx-usecs", "tx_usecs"),
    ("rx-frames", "rx_frames"),
    ("tx-frames", "tx_frames"),
)
_COALESCE_U32_KEYS = (
    "stats-block-usecs",
    "sample-interval",
    "pkt-rate-low",
    "pkt-rate-high",
    "rx-usecs",
    "rx-frames",
    "rx-usecs-irq",
    "rx-frames-irq",
    "tx-usecs",
    "tx-frames",
    "tx-usecs-irq",
    "tx-frames-irq",
    "rx-usecs-low",
    "rx-frame-low",
    "tx-usecs-low",
    "tx-frame-low",
    "rx-usecs-high",
    "rx-frame-high",
    "tx-usecs-high",
    "tx-frame-high",
)
_ADAPTIVE_RE = re.compile(r"Adaptive RX:\s*(\S+)\s+TX:\s*(\S+)")


def parse_coalesce_text(text):
    """``ethtool -c`` -> {adaptive_rx, adaptive_tx, rx_usecs, tx_usecs, rx_frames, tx_frames}."""
    out = {"adaptive_rx": None, "adaptive_tx": None}
    values = {}
    seen = False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("Coalesce parameters for"):
            seen = True
            continue
        match = _ADAPTIVE_RE.match(stripped)
        if match:
            out["adaptive_rx"], out["adaptive_tx"] = _onoff(match.group(1)), _onoff(match.group(2))
            seen = True
            continue
        key, value = _split_field(stripped)
        if key is not None and key not in values:
            values[key] = value
    if not seen and not values:
        raise EthtoolParseError("no 'Coalesce parameters' output")
    for theirs, ours in COALESCE_NUMBERS:
        out[ours] = _int_or_none(values.get(theirs))
    return out


def parse_coalesce_json(text):
    """``ethtool --json -c``.

    Releases with the January 2025 fix name the booleans adaptive-rx/adaptive-tx and
    cqe-mode-rx/cqe-mode-tx. Earlier ones printed both pairs as "rx"/"tx" (duplicate keys: a plain JSON
    load keeps the CQE pair and loses the adaptive one). Here an "rx"/"tx" seen before the first numeric key is adaptive
    moderation, one seen after it is CQE mode.
    """
    objects = _json_objects(text, pairs=True)
    items = objects[0]
    if not isinstance(items, list):
        raise EthtoolParseError("expected a JSON object per device")
    out = {"adaptive_rx": None, "adaptive_tx": None}
    numbers = {}
    numeric_seen = False
    for key, value in items:
        if key in _COALESCE_U32_KEYS:
            numeric_seen = True
            numbers.setdefault(key, value)
        elif key in ("adaptive-rx", "adaptive-tx"):
            out["adaptive_" + key[-2:]] = bool(value)
        elif key in ("rx", "tx") and not numeric_seen and isinstance(value, bool):
            out["adaptive_" + key] = value
    for theirs, ours in COALESCE_NUMBERS:
        out[ours] = _int_or_none(numbers.get(theirs))
    return out


# --- ethtool -l --------------------------------------------------------------------------------

CHANNEL_KEYS = (("RX", "rx"), ("TX", "tx"), ("Other", "other"), ("Combined", "combined"))


def parse_channels_text(text):
    """``ethtool -l`` -> {rx, tx, other, combined, rx_max, tx_max, other_max, combined_max}."""
    maxima, current = _two_section_counts(text, [k for k, _ours in CHANNEL_KEYS], "Channel parameters for")
    out = {}
    for theirs, ours in CHANNEL_KEYS:
        out[ours] = current.get(theirs)
    for theirs, ours in CHANNEL_KEYS:
        out[ours + "_max"] = maxima.get(theirs)
    return out


def parse_channels_json(text):
    """``ethtool --json -l`` (added to ethtool in April 2025): rx, tx, other, combined and their ``-max``."""
    obj = _first_object(text)
    out = {}
    for _theirs, ours in CHANNEL_KEYS:
        out[ours] = _int_or_none(obj.get(ours))
    for _theirs, ours in CHANNEL_KEYS:
        out[ours + "_max"] = _int_or_none(obj.get(ours + "-max"))
    return out


# --- ethtool -S: drop counters ------------------------------------------------------------------

_STATS_LINE_RE = re.compile(r"^\s*(\S.*?):\s+(-?\d+)\s*$")


def parse_stats_text(text):
    """``ethtool -S`` -> {counter: value}. Names are what the driver prints (``rx_out_of_buffer``,
    ``rx_dropped.nic``, ``queue_0_rx_cnt``, bnxt's ``[0]: rx_ucast_packets``); the value is the last
    field. Raises when there is no "NIC statistics:" header and no counter line."""
    stats = {}
    seen = False
    for line in text.splitlines():
        if line.strip().startswith("NIC statistics"):
            seen = True
            continue
        match = _STATS_LINE_RE.match(line)
        if match:
            stats.setdefault(match.group(1).strip(), int(match.group(2)))
    if not seen and not stats:
        raise EthtoolParseError("no 'NIC statistics:' header and no counters")
    return stats


# Driver -> counters of ``ethtool -S`` by what they mean, as regular expressions over the counter name.
#   ring       packets dropped because the receive ring had no free descriptor or buffer: a bigger ring (or a
#              CPU that drains it faster) is the fix; evidence for NET-RING-001.
#   other      drops elsewhere in the NIC (port buffer, PCIe): reported with the finding, not judged as rings.
#   allowance  packets the cloud shaped because the instance exceeded its own limits: not a ring, never fixed
#              by one; reported as information.
# Sources:
#   mlx5_core  kernel Documentation/networking/device_drivers/ethernet/mellanox/mlx5/counters.rst:
#              rx_out_of_buffer "number of times receive queue had no software buffers allocated for the
#              adapter's incoming traffic"; rx_discards_phy "dropped due to lack of buffers on a physical port
#              ... the adapter is congested".
#   ice        kernel Documentation/networking/device_drivers/ethernet/intel/ice.rst, "Rx Descriptor Ring
#              Size": rx_dropped (per VSI, descriptors ran out) -> increase the ring; "rx_dropped.nic can mean
#              that there is no PCIe bandwidth".
#   ixgbe      drivers/net/ethernet/intel/ixgbe/ixgbe_ethtool.c: rx_no_dma_resources (a queue with no free
#              descriptor drops, the default with several queues), rx_missed_errors (the packet buffer
#              overflowed while descriptors ran out).
#   igb/e1000e rx_no_buffer_count (RNBC: no descriptor in host memory), rx_missed_errors (MPC), igb's
#              per-queue rx_queue_N_drops (RQDPC).
#   ena        amzn-drivers kernel/linux/ena/ENA_Linux_Best_Practices.rst: "ENA device would drop packets if
#              Rx ring becomes full" (the device's rx_drops, also ifconfig's dropped; ena_ethtool.c); the
#              *_allowance_exceeded counters (ena_admin_eni_stats) count packets shaped because the instance
#              exceeded its bandwidth, PPS, conntrack or link-local allowance.
#   virtio_net, gve, bnxt_en, veth: no counter here means "the ring overflowed" (virtio's rx_drops are the
#              driver's own drops; a full virtqueue drops on the host, where the guest cannot count it), so
#              their rings are not judged.
DROP_COUNTERS = {
    "mlx5_core": {"ring": (r"rx_out_of_buffer",), "other": (r"rx_discards_phy",), "allowance": ()},
    "ice": {"ring": (r"rx_dropped",), "other": (r"rx_dropped\.nic",), "allowance": ()},
    "ixgbe": {"ring": (r"rx_no_dma_resources", r"rx_missed_errors"), "other": (), "allowance": ()},
    "igb": {"ring": (r"rx_no_buffer_count", r"rx_missed_errors", r"rx_queue_\d+_drops"), "other": (), "allowance": ()},
    "e1000e": {"ring": (r"rx_no_buffer_count", r"rx_missed_errors"), "other": (), "allowance": ()},
    "ena": {
        "ring": (r"rx_drops",),
        "other": (),
        "allowance": (
            r"bw_in_allowance_exceeded",
            r"bw_out_allowance_exceeded",
            r"pps_allowance_exceeded",
            r"conntrack_allowance_exceeded",
            r"linklocal_allowance_exceeded",
        ),
    },
}
DROP_KINDS = ("ring", "other", "allowance")


def drop_counters(driver, stats):
    """{kind: {counter: value}} of the counters in ``stats`` that DROP_COUNTERS lists for ``driver``;
    None when the driver has no entry."""
    table = DROP_COUNTERS.get(driver or "")
    if table is None:
        return None
    out = {}
    for kind in DROP_KINDS:
        patterns = [re.compile("^%s$" % p) for p in table[kind]]
        out[kind] = dict((name, value) for name, value in sorted(stats.items()) if any(p.match(name) for p in patterns))
    return out


# --- running ethtool ---------------------------------------------------------------------------

# section name -> (ethtool option, text parser, json parser)
SECTIONS = (
    ("driver", "-i", parse_driver_text, parse_driver_json),
    ("rings", "-g", parse_rings_text, parse_rings_json),
    ("offloads", "-k", parse_features_text, parse_features_json),
    ("coalescing", "-c", parse_coalesce_text, parse_coalesce_json),
    ("channels", "-l", parse_channels_text, parse_channels_json),
)

# What an ethtool says when it does not accept --json for a subcommand.
_JSON_REFUSED = (
    "bad command line argument",
    "unexpected parameter",
    "unrecognized option",
    "unrecognised option",
    "invalid option",
    "--json",
)


def _reason(rc, out, err):
    lines = [line.strip() for line in (err or out or "").splitlines() if line.strip()]
    # "netlink error: no device matches name (offset 24)" is followed by the errno text; keep the last.
    text = lines[-1] if lines else "no output"
    if text.startswith("netlink error: "):
        text = text[len("netlink error: ") :]
    return "%s (ethtool rc=%s)" % (text, rc)


class Ethtool:
    """Runs ethtool subcommands: ``--json`` first, the text output when this ethtool refuses ``--json``
    for that subcommand. Nothing is cached between interfaces, so a fixture directory may mix outputs of
    several ethtool releases."""

    def __init__(self, run, binary):
        self.run = run
        self.binary = binary

    def query(self, option, ifname, text_parser, json_parser):
        """(parsed value, "ethtool-json"|"ethtool-text", None) or (None, None, reason)."""
        check_interface_name(ifname)
        rc, out, err = self.run([self.binary, "--json", option, ifname])
        if rc == 0:
            if (out or "").lstrip().startswith("["):
                try:
                    return json_parser(out), "ethtool-json", None
                except EthtoolParseError as exc:
                    return None, None, "cannot parse 'ethtool --json %s' output: %s" % (option, exc)
            # Some releases print the text output when --json is not implemented for a subcommand.
            return self._parse_text(option, out, text_parser)
        message = "%s\n%s" % (err or "", out or "")
        if not any(marker in message for marker in _JSON_REFUSED):
            return None, None, _reason(rc, out, err)
        rc, out, err = self.run([self.binary, option, ifname])
        if rc != 0:
            return None, None, _reason(rc, out, err)
        return self._parse_text(option, out, text_parser)

    def statistics(self, ifname):
        """``ethtool -S``: ({counter: value}, None) or (None, reason). Text only: ethtool prints the driver's
        own counters as JSON only in newer releases (6.1 refuses ``--json -S``), and the names are the same."""
        check_interface_name(ifname)
        rc, out, err = self.run([self.binary, "-S", ifname])
        if rc != 0:
            return None, _reason(rc, out, err)
        try:
            return parse_stats_text(out or ""), None
        except EthtoolParseError as exc:
            return None, "cannot parse 'ethtool -S' output: %s" % exc

    @staticmethod
    def _parse_text(option, out, text_parser):
        try:
            return text_parser(out or ""), "ethtool-text", None
        except EthtoolParseError as exc:
            return None, None, "cannot parse 'ethtool %s' output: %s" % (option, exc)
