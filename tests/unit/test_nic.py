"""module_utils/ethtool.py, ifname.py and nic.py: ethtool parsers against recorded driver outputs, interface
names, the ethtool runner, sysfs/procfs readers, drop sampling. (RTT measurement: test_links.py.)

Every recorded interface under tests/fixtures/ethtool/<driver>/<ifname>/ is parsed from its text output
and checked against the values written in the tables DRIVER_INFO, RINGS, COALESCING, CHANNELS, OFFLOADS and LINK
(read off the recordings by hand), and every JSON variant must parse to exactly what its text counterpart gives.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import simulators
from ansible_collections.gpufleet.tuning.plugins.module_utils import ethtool, nic, rdma
from ansible_collections.gpufleet.tuning.plugins.module_utils.hostfs import HostFS
from ansible_collections.gpufleet.tuning.plugins.module_utils.ifname import (
    InvalidInterfaceName,
    check_interface_name,
    interface_name_error,
)
from ansible_collections.gpufleet.tuning.plugins.module_utils.policy import DEFAULTS

REPO = Path(__file__).resolve().parents[2]
ETHTOOL_FIX = REPO / "tests" / "fixtures" / "ethtool"
FAKE_ETHTOOL = ETHTOOL_FIX / "fake-ethtool"

SECTION_FILES = {
    "driver": ("driver", ethtool.parse_driver_text, ethtool.parse_driver_json),
    "rings": ("show-ring", ethtool.parse_rings_text, ethtool.parse_rings_json),
    "offloads": ("show-features", ethtool.parse_features_text, ethtool.parse_features_json),
    "coalescing": ("show-coalesce", ethtool.parse_coalesce_text, ethtool.parse_coalesce_json),
    "channels": ("show-channels", ethtool.parse_channels_text, ethtool.parse_channels_json),
}


netroot = simulators.netroot()


def _ch(rx=None, tx=None, other=None, combined=None, rx_max=None, tx_max=None, other_max=None, combined_max=None):
    return {
        "rx": rx,
        "tx": tx,
        "other": other,
        "combined": combined,
        "rx_max": rx_max,
        "tx_max": tx_max,
        "other_max": other_max,
        "combined_max": combined_max,
    }


def _coal(arx, atx, rx_usecs, rx_frames, tx_usecs, tx_frames):
    return {
        "adaptive_rx": arx,
        "adaptive_tx": atx,
        "rx_usecs": rx_usecs,
        "tx_usecs": tx_usecs,
        "rx_frames": rx_frames,
        "tx_frames": tx_frames,
    }


def _rings(rx, tx, rx_max, tx_max):
    return {"rx": rx, "tx": tx, "rx_max": rx_max, "tx_max": tx_max}


# What each recording says, read off the recorded files by hand: one table a subcommand, keyed by (driver, interface).
# ethtool -i: driver version, firmware version, bus address (the driver is the key's).
DRIVER_INFO = {
    ("virtio_net", "eth0"): ("1.0.0", None, "0000:00:03.0"),
    ("mlx5_core", "enp1s0f0np0"): ("6.8.12-8-pve", "14.32.1900 (MT_2420110034)", "0000:01:00.0"),
    ("mlx5_core", "ens1f0np0"): ("6.1.132-147.221.amzn2023.x86_64", "28.40.1000 (MT_0000000834)", "0000:05:00.0"),
    ("mlx5_core", "eth0"): ("6.8.0-49-generic", "22.41.1000 (MT_0000000359)", "0000:41:00.0"),
    ("ice", "eth0"): ("6.6.58-0-lts", "2.50 0x800077a8 1.2960.0", "0000:e1:00.0"),
    ("ena", "ens5"): ("6.8.0-1044-aws", None, "0000:7e:00.0"),
    ("bnxt_en", "enp193s0f0np0"): ("6.6.43", "220.0.59.0/pkg 220.0.83.0", "0000:c1:00.0"),
}
# ethtool -g
RINGS = {
    ("virtio_net", "eth0"): _rings(256, 256, 256, 256),
    ("mlx5_core", "enp1s0f0np0"): _rings(1024, 1024, 8192, 8192),
    ("mlx5_core", "ens1f0np0"): _rings(1024, 1024, 8192, 8192),
    ("mlx5_core", "eth0"): _rings(1024, 1024, 8192, 8192),
    ("ice", "eth0"): _rings(2048, 256, 8160, 8160),
    ("ena", "ens5"): _rings(1024, 1024, 16384, 1024),
    ("bnxt_en", "enp193s0f0np0"): _rings(511, 511, 2047, 2047),
}
# ethtool -c
COALESCING = {
    ("virtio_net", "eth0"): _coal(False, None, 0, 1, 0, 1),
    ("mlx5_core", "enp1s0f0np0"): _coal(True, True, 8, 128, 8, 128),
    ("mlx5_core", "ens1f0np0"): _coal(True, True, 8, 128, 8, 128),
    ("mlx5_core", "eth0"): _coal(False, False, 33, 88, 158, 128),
    ("ice", "eth0"): _coal(True, True, 50, None, 50, None),
    ("ena", "ens5"): _coal(False, False, 0, 0, 0, 0),
    ("bnxt_en", "enp193s0f0np0"): _coal(True, None, 10, 15, 28, 30),
}
# ethtool -l
CHANNELS = {
    ("virtio_net", "eth0"): _ch(combined=1, combined_max=1),
    ("mlx5_core", "enp1s0f0np0"): _ch(combined=12, combined_max=12),
    ("mlx5_core", "ens1f0np0"): _ch(combined=64, combined_max=64),
    ("mlx5_core", "eth0"): _ch(combined=63, combined_max=63),
    ("ice", "eth0"): _ch(0, 0, 1, 32, 32, 32, 1, 32),
    ("ena", "ens5"): _ch(combined=4, combined_max=4),
    ("bnxt_en", "enp193s0f0np0"): _ch(0, 0, None, 20, 32, 32, None, 32),
}
# ethtool -k: some features on, some off, some fixed, some not fixed.
OFFLOADS = {
    ("virtio_net", "eth0"): {
        "on": [
            "tcp-segmentation-offload",
            "generic-segmentation-offload",
            "generic-receive-offload",
            "rx-checksumming",
            "tx-checksumming",
            "scatter-gather",
            "rx-gro-hw",
        ],
        "off": ["large-receive-offload", "tx-checksum-ipv4", "ntuple-filters"],
        "fixed": ["rx-checksumming", "large-receive-offload", "highdma", "rx-gro-hw"],
        "not_fixed": ["tx-checksumming", "generic-receive-offload", "tcp-segmentation-offload"],
    },
    ("mlx5_core", "enp1s0f0np0"): {
        "on": ["tcp-segmentation-offload", "generic-receive-offload", "receive-hashing", "macsec-hw-offload"],
        "off": ["large-receive-offload", "rx-gro-hw", "hw-tc-offload"],
        "fixed": ["highdma", "rx-gro-hw", "tx-checksum-ipv4", "tls-hw-tx-offload"],
        "not_fixed": ["large-receive-offload", "macsec-hw-offload", "ntuple-filters"],
    },
    ("mlx5_core", "ens1f0np0"): {
        "on": ["tcp-segmentation-offload", "generic-receive-offload"],
        "off": ["large-receive-offload", "rx-gro-hw", "macsec-hw-offload"],
        "fixed": ["macsec-hw-offload", "highdma"],
        "not_fixed": ["rx-gro-hw", "large-receive-offload"],
    },
    ("mlx5_core", "eth0"): {
        "on": ["tcp-segmentation-offload", "generic-receive-offload"],
        "off": ["large-receive-offload"],
        "fixed": ["highdma"],
        "not_fixed": ["rx-gro-hw"],
    },
    ("ice", "eth0"): {
        "on": ["tcp-segmentation-offload", "generic-receive-offload", "ntuple-filters", "tx-checksum-sctp"],
        "off": ["large-receive-offload", "loopback"],
        "fixed": ["large-receive-offload", "rx-fcs"],
        "not_fixed": ["highdma", "loopback"],
    },
    ("ena", "ens5"): {
        "on": [
            "generic-segmentation-offload",
            "generic-receive-offload",
            "tx-checksumming",
            "tx-checksum-ipv4",
            "receive-hashing",
        ],
        "off": ["tcp-segmentation-offload", "rx-checksumming", "large-receive-offload"],
        "fixed": ["rx-checksumming", "tx-tcp-segmentation", "large-receive-offload", "tcp-segmentation-offload"],
        "not_fixed": ["generic-receive-offload"],  # TSO: no hardware TSO, so the group counts as fixed
    },
    ("bnxt_en", "enp193s0f0np0"): {
        "on": ["tcp-segmentation-offload", "generic-receive-offload", "rx-gro-hw", "rx-checksumming"],
        "off": ["large-receive-offload", "ntuple-filters"],
        "fixed": ["highdma", "vlan-challenged"],
        "not_fixed": ["large-receive-offload", "rx-gro-hw"],
    },
}
# /sys/class/net/<interface>/speed and mtu, as recorded next to the ethtool outputs: speed, MTU
LINK = {
    ("virtio_net", "eth0"): (-1, 1400),
    ("mlx5_core", "enp1s0f0np0"): (25000, 1500),
    ("mlx5_core", "ens1f0np0"): (200000, 9000),
    ("mlx5_core", "eth0"): (100000, 9000),
    ("ice", "eth0"): (100000, 1500),
    ("ena", "ens5"): (-1, 9001),
    ("bnxt_en", "enp193s0f0np0"): (100000, 9000),
}
RECORDINGS = sorted(DRIVER_INFO)


def recorded_interfaces():
    found = []
    for driver_dir in sorted(p for p in ETHTOOL_FIX.iterdir() if p.is_dir()):
        for if_dir in sorted(p for p in driver_dir.iterdir() if p.is_dir()):
            found.append((driver_dir.name, if_dir.name))
    return found


def json_variants():
    out = []
    for driver, ifname in recorded_interfaces():
        for section, (fname, _t, _j) in SECTION_FILES.items():
            if (ETHTOOL_FIX / driver / ifname / (fname + ".json")).exists():
                out.append((driver, ifname, section))
    return out


def _read(driver, ifname, fname):
    return (ETHTOOL_FIX / driver / ifname / fname).read_text()


def _ids(params):
    return ["/".join(p) for p in params]


def test_every_recording_has_expectations_and_all_five_subcommands():
    for table in (DRIVER_INFO, RINGS, COALESCING, CHANNELS, OFFLOADS, LINK):
        assert set(recorded_interfaces()) == set(table)
    assert {d for d, _ in RECORDINGS} == {"mlx5_core", "ice", "ena", "virtio_net", "bnxt_en"}
    for driver, ifname in RECORDINGS:
        folder = ETHTOOL_FIX / driver / ifname
        for fname, _t, _j in SECTION_FILES.values():
            assert (folder / fname).is_file(), f"{driver}/{ifname}: no {fname}"
        assert (folder / "speed").is_file() and (folder / "mtu").is_file()
        assert (ETHTOOL_FIX / driver / "README.md").is_file(), f"{driver}: sources not documented"


@pytest.mark.parametrize("driver, ifname", RECORDINGS, ids=_ids(RECORDINGS))
def test_text_parsers_on_recorded_output(driver, ifname):
    key = (driver, ifname)
    version, firmware, bus = DRIVER_INFO[key]
    assert ethtool.parse_driver_text(_read(driver, ifname, "driver")) == {
        "driver": driver,
        "driver_version": version,
        "firmware_version": firmware,
        "bus_info": bus,
    }
    assert ethtool.parse_rings_text(_read(driver, ifname, "show-ring")) == RINGS[key]
    assert ethtool.parse_coalesce_text(_read(driver, ifname, "show-coalesce")) == COALESCING[key]
    assert ethtool.parse_channels_text(_read(driver, ifname, "show-channels")) == CHANNELS[key]
    features, fixed = ethtool.parse_features_text(_read(driver, ifname, "show-features"))
    for name in OFFLOADS[key]["on"]:
        assert features[name] is True, name
    for name in OFFLOADS[key]["off"]:
        assert features[name] is False, name
    for name in OFFLOADS[key]["fixed"]:
        assert name in fixed, name
    for name in OFFLOADS[key]["not_fixed"]:
        assert name not in fixed, name
    # Every top-level feature the rule catalog looks at (NET-OFFL-001's default list) is present, and LRO.
    for name in (*DEFAULTS["network"]["offloads"], "large-receive-offload"):
        assert name in features, name
    assert fixed == sorted(fixed)
    assert (int(_read(driver, ifname, "speed")), int(_read(driver, ifname, "mtu"))) == LINK[key]


@pytest.mark.parametrize("driver, ifname, section", json_variants(), ids=_ids(json_variants()))
def test_json_and_text_agree(driver, ifname, section):
    fname, text_parser, json_parser = SECTION_FILES[section]
    from_text = text_parser(_read(driver, ifname, fname))
    from_json = json_parser(_read(driver, ifname, fname + ".json"))
    assert from_json == from_text


def test_json_variants_cover_every_json_capable_subcommand():
    sections = {s for _d, _i, s in json_variants()}
    assert sections == {"rings", "offloads", "coalescing", "channels"}  # ethtool has no --json for -i
    assert len(json_variants()) >= 12


def test_features_json_real_recording_counts():
    # The virtio_net JSON is ethtool 6.1's own output on this project's lab VM.
    features, fixed = ethtool.parse_features_json(_read("virtio_net", "eth0", "show-features.json"))
    raw = json.loads(_read("virtio_net", "eth0", "show-features.json"))[0]
    assert len(features) == len(raw) - 1  # every key but ifname
    assert len(fixed) == sum(1 for k, v in raw.items() if k != "ifname" and v["fixed"] is True)


def test_coalesce_json_duplicate_keys_of_older_ethtool():
    # ethtool before the January 2025 fix printed adaptive and CQE booleans both as "rx"/"tx" (the sample
    # in the patch that renamed them). A plain dict load keeps the CQE pair: adaptive RX would read as on.
    text = _read("mlx5_core", "eth0", "show-coalesce.json")
    assert json.loads(text)[0]["rx"] is True
    got = ethtool.parse_coalesce_json(text)
    assert got["adaptive_rx"] is False and got["adaptive_tx"] is False
    assert (got["rx_usecs"], got["rx_frames"], got["tx_usecs"], got["tx_frames"]) == (33, 88, 158, 128)


def test_coalesce_json_new_keys_and_cqe_only():
    new = '[ {"ifname": "x", "adaptive-rx": false, "adaptive-tx": true, "rx-usecs": 3, "cqe-mode-rx": true} ]'
    assert ethtool.parse_coalesce_json(new)["adaptive_rx"] is False
    assert ethtool.parse_coalesce_json(new)["adaptive_tx"] is True
    # Old format, driver without adaptive moderation but with CQE mode: the pair comes after the numbers.
    old = '[ {"ifname": "x", "rx-usecs": 3, "tx-usecs": 16, "rx": true, "tx": false} ]'
    got = ethtool.parse_coalesce_json(old)
    assert got["adaptive_rx"] is None and got["adaptive_tx"] is None and got["tx_usecs"] == 16


# ethtool -g of a Marvell AQC113 (atlantic), from systemd/systemd#41289: this ethtool printed no section
# headers, so the first RX/TX are the maxima and the second the current sizes.
HEADERLESS_RING = (
    "Ring parameters for eth0:\nRX:\t\t\t8184\nRX Mini:\t\tn/a\nRX Jumbo:\t\tn/a\nTX:\t\t\t8184\n"
    "TX push buff len:\tn/a\nHDS thresh:\t\tn/a\nRX:\t\t\t2048\nRX Mini:\t\tn/a\nRX Jumbo:\t\tn/a\n"
    "TX:\t\t\t4096\nRX Buf Len:\t\tn/a\nCQE Size:\t\tn/a\nTX Push:\t\toff\nRX Push:\t\toff\n"
    "TX push buff len:\tn/a\nTCP data split:\t\tn/a\nHDS thresh:\t\tn/a\n"
)


def test_ring_text_without_section_headers():
    assert ethtool.parse_rings_text(HEADERLESS_RING) == {"rx": 2048, "tx": 4096, "rx_max": 8184, "tx_max": 8184}


def test_channels_json_as_published():
    # `ethtool -j -l` example from the patch adding it (April 2025), first device.
    text = (
        '[ {"ifname": "eth0", "rx-max": 32, "tx-max": 32, "combined-max": 32, "rx": 0, "tx": 0, '
        '"combined": 20}, {"ifname": "veth0", "rx-max": 80, "tx-max": 80, "rx": 1, "tx": 1} ]'
    )
    assert ethtool.parse_channels_json(text) == _ch(0, 0, None, 20, 32, 32, None, 32)


@pytest.mark.parametrize(
    "parser, text",
    [
        (ethtool.parse_driver_text, "netlink error: Operation not supported\n"),
        (ethtool.parse_rings_text, ""),
        (ethtool.parse_features_text, "Features for eth0:\n"),
        (ethtool.parse_coalesce_text, ""),
        (ethtool.parse_channels_text, "garbage\n"),
        (ethtool.parse_rings_json, "[ ]"),
        (ethtool.parse_features_json, "{not json"),
        (ethtool.parse_coalesce_json, '{"rx": true}'),
        (ethtool.parse_channels_json, "[ 1 ]"),
    ],
)
def test_parsers_reject_what_is_not_their_output(parser, text):
    with pytest.raises(ethtool.EthtoolParseError):
        parser(text)


# --- interface names -----------------------------------------------------------------------------

GOOD_NAMES = [
    "eth0",
    "enp1s0f0np0",
    "ens1f0np0",
    "enP1s11f0np0",
    "bond0.100",
    "veth_a",
    "ib0",
    "a",
    "x" * 15,
    "eno1@if3",
    "br-lan",
]
BAD_NAMES = {
    "": "empty",
    "eth0;reboot": "';'",
    "../x": "'/'",
    "x" * 16: "longer than 15",
    "$(id)": "'$'",
    "-s": "starts with '-'",
    ".hidden": "starts with '.'",
    "..": "'.' and '..'",
    "eth 0": "whitespace",
    "eth0\n": "whitespace",
    "eth0:1": "':'",
    "a|b": "'|'",
    "`id`": "'`'",
    "eth\u00e9": "'\u00e9'",
}


@pytest.mark.parametrize("name", GOOD_NAMES)
def test_valid_interface_names(name):
    assert interface_name_error(name) is None
    assert check_interface_name(name) == name


@pytest.mark.parametrize("name", sorted(BAD_NAMES), ids=repr)
def test_invalid_interface_names(name):
    why = interface_name_error(name)
    assert why is not None and BAD_NAMES[name] in why
    with pytest.raises(InvalidInterfaceName, match="1-15 characters"):
        check_interface_name(name)


# --- the ethtool runner --------------------------------------------------------------------------


class FakeRun:
    """run(argv) stand-in: answers from a dict keyed by the argv tuple, records every call."""

    def __init__(self, answers):
        self.answers = answers
        self.calls = []

    def __call__(self, argv):
        assert isinstance(argv, list) and all(isinstance(a, str) for a in argv)
        self.calls.append(tuple(argv))
        return self.answers.get(tuple(argv), (1, "", "netlink error: Operation not supported\n"))


BAD_ARGS = (1, "", "ethtool: bad command line argument(s)\nFor more information run ethtool -h\n")


def test_json_refused_falls_back_to_text():
    ring = _read("mlx5_core", "enp1s0f0np0", "show-ring")
    run = FakeRun({("ethtool", "--json", "-g", "eth0"): BAD_ARGS, ("ethtool", "-g", "eth0"): (0, ring, "")})
    value, source, reason = ethtool.Ethtool(run, "ethtool").query(
        "-g", "eth0", ethtool.parse_rings_text, ethtool.parse_rings_json
    )
    assert (value["rx_max"], source, reason) == (8192, "ethtool-text", None)
    assert run.calls == [("ethtool", "--json", "-g", "eth0"), ("ethtool", "-g", "eth0")]


def test_json_accepted():
    text = _read("mlx5_core", "ens1f0np0", "show-ring.json")
    run = FakeRun({("ethtool", "--json", "-g", "eth0"): (0, text, "")})
    value, source, reason = ethtool.Ethtool(run, "ethtool").query(
        "-g", "eth0", ethtool.parse_rings_text, ethtool.parse_rings_json
    )
    assert (value["rx"], source, reason) == (1024, "ethtool-json", None)
    assert len(run.calls) == 1


def test_unsupported_operation_is_a_reason_without_text_retry():
    run = FakeRun({})
    value, source, reason = ethtool.Ethtool(run, "/usr/sbin/ethtool").query(
        "-c", "veth0", ethtool.parse_coalesce_text, ethtool.parse_coalesce_json
    )
    assert value is None and source is None
    assert reason == "Operation not supported (ethtool rc=1)"
    assert run.calls == [("/usr/sbin/ethtool", "--json", "-c", "veth0")]


def test_text_printed_despite_json_flag():
    text = _read("virtio_net", "eth0", "show-channels")
    run = FakeRun({("ethtool", "--json", "-l", "eth0"): (0, text, "")})
    value, source, _ = ethtool.Ethtool(run, "ethtool").query(
        "-l", "eth0", ethtool.parse_channels_text, ethtool.parse_channels_json
    )
    assert source == "ethtool-text" and value["combined"] == 1


def test_invalid_name_never_reaches_ethtool():
    run = FakeRun({})
    with pytest.raises(InvalidInterfaceName):
        ethtool.Ethtool(run, "ethtool").query("-i", "eth0;reboot", ethtool.parse_driver_text, ethtool.parse_driver_json)
    with pytest.raises(InvalidInterfaceName):
        nic.collect(HostFS("/"), run, interfaces=["ok0", "$(id)"])
    assert run.calls == []


# --- sysfs / procfs through HostFS ---------------------------------------------------------------


def _fake_run(directory):
    env = {**os.environ, "FAKE_ETHTOOL_DIR": str(directory)}

    def run(argv):
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
        return proc.returncode, proc.stdout, proc.stderr

    return run


def test_collect_from_fixture_root_and_fake_ethtool(tmp_path):
    root = netroot.build_netroot(
        tmp_path / "root",
        nics=[
            {"name": "ens1f0np0", "driver": "mlx5_core", "mtu": 9000, "speed": 200000, "numa_node": 1},
            {"name": "enp1s0f0np0", "driver": "mlx5_core", "speed": 25000, "numa_node": -1},
            {"name": "eth0", "driver": "mlx5_core", "speed": -1},
            {"name": "veth0", "driver": "veth", "physical": False, "speed": 10000},
        ],
        infiniband=[
            {"device": "mlx5_0", "port": 1, "rate_gbps": 400},
            {
                "device": "mlx5_1",
                "port": 1,
                "state": "DOWN",
                "phys_state": "Disabled",
                "rate_gbps": 100,
                "link_layer": "Ethernet",
            },
        ],
    )
    waits = []
    net = nic.collect(
        HostFS(str(root)), _fake_run(ETHTOOL_FIX / "mlx5_core"), ethtool=str(FAKE_ETHTOOL), sleep=waits.append
    )
    assert waits == [1.0]  # one wait between the two ethtool -S readings, for all three NICs
    by_name = {n["name"]: n for n in net["nics"]}
    assert list(by_name) == ["enp1s0f0np0", "ens1f0np0", "eth0"]  # physical only, sorted; no veth0
    cx7 = by_name["ens1f0np0"]
    assert cx7["present"] and cx7["physical"] and cx7["numa_node"] == 1 and cx7["mtu"] == 9000
    assert cx7["speed_mbps"] == 200000 and cx7["duplex"] == "full" and cx7["operstate"] == "up"
    assert cx7["source"] == "ethtool-json"
    assert cx7["sources"] == {
        "driver": "ethtool-text",
        "rings": "ethtool-json",
        "offloads": "ethtool-json",
        "coalescing": "ethtool-json",
        "channels": "ethtool-json",
        "drops": "ethtool-text",
    }
    assert cx7["drops"]["ring"] == {"rx_out_of_buffer": {"total": 0, "delta": 0}}
    assert cx7["drops"]["other"] == {"rx_discards_phy": {"total": 0, "delta": 0}}
    assert cx7["rings"] == RINGS[("mlx5_core", "ens1f0np0")]
    assert cx7["unsupported"] == {}
    cx4 = by_name["enp1s0f0np0"]
    assert cx4["numa_node"] is None and "numa_node" in cx4["unsupported"]
    assert cx4["sources"]["rings"] == "ethtool-text" and cx4["sources"]["offloads"] == "ethtool-json"
    assert by_name["eth0"]["speed_mbps"] is None and "-1" in by_name["eth0"]["unsupported"]["speed_mbps"]
    assert net["infiniband"] == [
        {
            "device": "mlx5_0",
            "port": 1,
            "state": "ACTIVE",
            "phys_state": "LinkUp",
            "rate_gbps": 400.0,
            "link_layer": "InfiniBand",
        },
        {
            "device": "mlx5_1",
            "port": 1,
            "state": "DOWN",
            "phys_state": "Disabled",
            "rate_gbps": 100.0,
            "link_layer": "Ethernet",
        },
    ]
    assert net["peers"] == []


def test_named_interfaces_missing_virtual_and_unknown_to_ethtool(tmp_path):
    root = netroot.build_netroot(
        tmp_path / "root",
        nics=[
            {"name": "veth0", "driver": "veth", "physical": False},
            {"name": "ens9", "driver": "ice", "bus_info": "0000:e1:00.0"},
        ],
    )
    net = nic.collect(
        HostFS(str(root)),
        _fake_run(ETHTOOL_FIX / "ice"),
        interfaces=["veth0", "nope0", "ens9"],
        ethtool=str(FAKE_ETHTOOL),
    )
    veth, missing, ens9 = net["nics"]
    assert veth["present"] and not veth["physical"] and veth["numa_node"] is None
    assert missing["present"] is False and missing["driver"] is None and missing["rings"] is None
    assert "no such interface" in missing["unsupported"]["present"]
    # ens9 exists in sysfs but the recorded ethtool knows no such device: sysfs gives driver and bus.
    assert ens9["driver"] == "ice" and ens9["bus_info"] == "0000:e1:00.0"
    assert "Cannot get driver information: No such device (ethtool rc=71)" == ens9["unsupported"]["driver"]
    assert ens9["unsupported"]["rings"] == "No such device (ethtool rc=1)"
    assert ens9["source"] is None and ens9["rings"] is None


def test_without_ethtool(tmp_path):
    root = netroot.build_netroot(tmp_path / "root", nics=[{"name": "ens5", "driver": "ena", "mtu": 9001}])
    net = nic.collect(HostFS(str(root)), FakeRun({}), ethtool=None, ethtool_missing="ethtool not found in PATH")
    (ens5,) = net["nics"]
    assert ens5["driver"] == "ena" and ens5["mtu"] == 9001 and ens5["source"] is None
    for section in ("rings", "offloads", "coalescing", "channels"):
        assert ens5[section] is None
        assert ens5["unsupported"][section] == "ethtool not available: ethtool not found in PATH"
    assert ens5["offloads_fixed"] == []


def test_physical_excludes_lo_bridges_and_veth(tmp_path):
    root = netroot.build_netroot(
        tmp_path / "root",
        nics=[
            {"name": "lo", "physical": False},
            {"name": "br0", "physical": False},
            {"name": "eth0"},
            {"name": "vethx", "driver": "veth"},  # a veth with a device link still is not a NIC
        ],
    )
    (root / "sys/class/net/br0/bridge").mkdir()
    fs = HostFS(str(root))
    assert nic.list_interfaces(fs) == ["br0", "eth0", "lo", "vethx"]
    assert [n for n in nic.list_interfaces(fs) if nic.is_physical(fs, n)] == ["eth0"]


def test_tcp_stock_defaults(tmp_path):
    root = netroot.build_netroot(tmp_path / "root", nics=[])
    assert nic.read_tcp(HostFS(str(root))) == {
        "rmem": [4096, 131072, 6291456],
        "wmem": [4096, 16384, 4194304],
        "rmem_max": 212992,
        "wmem_max": 212992,
        "congestion_control": "cubic",
        "available_congestion_control": ["reno", "cubic"],
        "allowed_congestion_control": ["reno", "cubic"],
        "default_qdisc": "fq_codel",
        "mtu_probing": 0,
        "slow_start_after_idle": 1,
        "unsupported": {},
    }
    assert (root / "proc/sys/net/ipv4/tcp_rmem").read_text() == "4096\t131072\t6291456\n"


def test_tcp_namespace_like_and_malformed(tmp_path):
    root = netroot.build_netroot(
        tmp_path / "root",
        nics=[],
        tcp={
            "default_qdisc": None,
            "available_congestion_control": None,
            "rmem": "4096 87380 67108864",
            "congestion_control": "bbr",
            "mtu_probing": 1,
        },
    )
    (root / "proc/sys/net/ipv4/tcp_wmem").write_text("4096 16384\n")
    tcp = nic.read_tcp(HostFS(str(root)))
    assert tcp["rmem"] == [4096, 87380, 67108864] and tcp["congestion_control"] == "bbr" and tcp["mtu_probing"] == 1
    assert tcp["default_qdisc"] is None and tcp["unsupported"]["default_qdisc"].startswith("not present:")
    assert tcp["available_congestion_control"] == [] and "available_congestion_control" in tcp["unsupported"]
    assert tcp["wmem"] is None and "unexpected value" in tcp["unsupported"]["wmem"]
    assert set(tcp["unsupported"]) == {"default_qdisc", "available_congestion_control", "wmem"}


def test_unreadable_sysfs_file_is_a_reason(tmp_path):
    # Reading /sys/class/net/X/speed of a link that is down fails with EINVAL: exists, but unreadable.
    root = netroot.build_netroot(tmp_path / "root", nics=[{"name": "eth0", "speed": None}])
    (root / "sys/class/net/eth0/speed").mkdir()
    got = nic.read_nic(HostFS(str(root)), "eth0")
    assert got["speed_mbps"] is None and got["unsupported"]["speed_mbps"].startswith("unreadable:")


@pytest.mark.parametrize(
    "text, rate",
    [
        ("400 Gb/sec (4X NDR)\n", 400.0),
        ("2.5 Gb/sec (1X SDR)", 2.5),
        ("56 Gb/sec (4X FDR)", 56.0),
        ("", None),
        ("fast", None),
    ],
)
def test_ib_rate(text, rate):
    # nic.collect's infiniband fact is rdma.port_states: one parser of /sys/class/infiniband.
    assert rdma.parse_rate(text)[0] == rate


# --- fake-ethtool itself (the demo fleet relies on it) ---------------------------------------------


def _fake(args, directory=ETHTOOL_FIX / "mlx5_core"):
    env = {**os.environ, "FAKE_ETHTOOL_DIR": str(directory)}
    proc = subprocess.run([str(FAKE_ETHTOOL), *args], capture_output=True, text=True, env=env, check=False)
    return proc.returncode, proc.stdout, proc.stderr


def test_fake_ethtool_answers_like_ethtool():
    rc, out, _ = _fake(["--json", "-g", "ens1f0np0"])
    assert rc == 0 and out == _read("mlx5_core", "ens1f0np0", "show-ring.json")
    rc, out, _ = _fake(["--show-ring", "enp1s0f0np0"])
    assert rc == 0 and out == _read("mlx5_core", "enp1s0f0np0", "show-ring")
    rc, _, err = _fake(["--json", "-g", "enp1s0f0np0"])
    assert rc == 1 and "bad command line argument" in err
    rc, _, err = _fake(["-i", "nope0"])
    assert rc == 71 and "No such device" in err
    rc, _, err = _fake(["-l", "nope0"])
    assert rc == 1 and "No such device" in err
    rc, _, err = _fake(["-K", "eth0", "tso", "off"])
    assert rc == 1 and "bad command line argument" in err
    rc, _, err = _fake(["-g", "../virtio_net/eth0"])
    assert rc == 1 and "No such device" in err


def test_fake_ethtool_unsupported_operation(tmp_path):
    (tmp_path / "veth0").mkdir()
    (tmp_path / "veth0" / "show-channels").write_text("Channel parameters for veth0:\n")
    rc, _, err = _fake(["-c", "veth0"], tmp_path)
    assert rc == 1 and err.strip() == "netlink error: Operation not supported"
    rc, _, err = _fake(["--json", "-c", "veth0"], tmp_path)
    assert rc == 1 and "Operation not supported" in err


# --- ethtool -S: drop counters (NET-RING-001's evidence) ------------------------------------------------


def _drop_counters(ring, other=None, allowance=None):
    return {"ring": ring, "other": other or {}, "allowance": allowance or {}}


def _ena_allowance(pps):
    """ENA's five allowance counters as recorded: every one 0 but pps_allowance_exceeded."""
    return {
        "bw_in_allowance_exceeded": 0,
        "bw_out_allowance_exceeded": 0,
        "pps_allowance_exceeded": pps,
        "conntrack_allowance_exceeded": 0,
        "linklocal_allowance_exceeded": 0,
    }


# (driver, interface, file) -> the drop counters ethtool.drop_counters finds, read off the files by hand.
EXPECTED_DROPS = {
    ("mlx5_core", "ens1f0np0", "show-stats"): _drop_counters({"rx_out_of_buffer": 0}, {"rx_discards_phy": 0}),
    ("mlx5_core", "enp1s0f0np0", "show-stats"): _drop_counters({"rx_out_of_buffer": 48211}, {"rx_discards_phy": 0}),
    ("mlx5_core", "eth0", "show-stats"): _drop_counters({"rx_out_of_buffer": 1203944}, {"rx_discards_phy": 0}),
    ("mlx5_core", "eth0", "show-stats.after"): _drop_counters({"rx_out_of_buffer": 1207310}, {"rx_discards_phy": 0}),
    ("ice", "eth0", "show-stats"): _drop_counters({"rx_dropped": 0}, {"rx_dropped.nic": 1532}),
    ("ena", "ens5", "show-stats"): _drop_counters({"rx_drops": 0}, allowance=_ena_allowance(1182)),
    ("ena", "ens5", "show-stats.after"): _drop_counters({"rx_drops": 0}, allowance=_ena_allowance(1390)),
    # virtio_net: a real recording of this lab VM; its rx_drops are the driver's own, not a ring overflow.
    ("virtio_net", "eth0", "show-stats"): None,
}


def test_every_stats_recording_has_expectations():
    found = {(p.parts[-3], p.parts[-2], p.name) for p in ETHTOOL_FIX.glob("*/*/show-stats*")}
    assert found == set(EXPECTED_DROPS)


@pytest.mark.parametrize("driver, ifname, fname", sorted(EXPECTED_DROPS), ids=_ids(sorted(EXPECTED_DROPS)))
def test_stats_recordings_parse_to_their_drop_counters(driver, ifname, fname):
    stats = ethtool.parse_stats_text(_read(driver, ifname, fname))
    assert len(stats) >= 20 and all(isinstance(v, int) for v in stats.values())
    assert ethtool.drop_counters(driver, stats) == EXPECTED_DROPS[(driver, ifname, fname)]


def test_virtio_rx_drops_are_not_ring_drops():
    stats = ethtool.parse_stats_text(_read("virtio_net", "eth0", "show-stats"))
    assert stats["rx_drops"] == 0 and stats["rx0_kicks"] == 3457
    assert ethtool.drop_counters("virtio_net", dict(stats, rx_drops=99)) is None
    # The same name on ENA is the device's count of packets dropped with the Rx ring full.
    assert ethtool.drop_counters("ena", {"rx_drops": 99})["ring"] == {"rx_drops": 99}


def test_stats_parser_names_with_colons_and_bad_input():
    text = "NIC statistics:\n     [0]: rx_ucast_packets: 12\n     rx_dropped.nic: 3\n     rx_queue_1_drops: 4\n"
    assert ethtool.parse_stats_text(text) == {"[0]: rx_ucast_packets": 12, "rx_dropped.nic": 3, "rx_queue_1_drops": 4}
    assert ethtool.drop_counters("igb", ethtool.parse_stats_text(text))["ring"] == {"rx_queue_1_drops": 4}
    with pytest.raises(ethtool.EthtoolParseError):
        ethtool.parse_stats_text("no statistics here\n")


class TwoReadings:
    """run(argv) for ethtool -S: the first reading of a NIC from ``first``, later ones from ``later``."""

    def __init__(self, first, later):
        self.first, self.later, self.seen = first, later, []

    def __call__(self, argv):
        assert argv[:2] == ["ethtool", "-S"]
        name = argv[2]
        table = self.later if name in self.seen else self.first
        self.seen.append(name)
        if name not in table:
            return 1, "", "netlink error: Operation not supported\n"
        return 0, table[name], ""


def _stats(**counters):
    return "NIC statistics:\n" + "".join(f"     {k}: {v}\n" for k, v in counters.items())


def _nics(*specs):
    return [dict(nic._empty_nic(name), present=True, driver=driver) for name, driver in specs]


def test_sample_drops_reads_twice_with_one_wait():
    run = TwoReadings(
        {"ens1": _stats(rx_out_of_buffer=10, rx_discards_phy=0), "ens5": _stats(rx_drops=0, pps_allowance_exceeded=5)},
        {"ens1": _stats(rx_out_of_buffer=42, rx_discards_phy=0), "ens5": _stats(rx_drops=0, pps_allowance_exceeded=9)},
    )
    nics = _nics(("ens1", "mlx5_core"), ("ens5", "ena"), ("eth0", "virtio_net"))
    waits, ticks = [], iter([100.0, 101.25])
    nic.sample_drops(nics, ethtool.Ethtool(run, "ethtool"), 1.0, sleep=waits.append, clock=lambda: next(ticks))
    assert waits == [1.0] and run.seen == ["ens1", "ens5", "ens1", "ens5"]  # virtio_net is never asked
    ens1, ens5, eth0 = nics
    assert ens1["drops"] == {
        "interval_s": 1.25,
        "ring": {"rx_out_of_buffer": {"total": 42, "delta": 32}},
        "other": {"rx_discards_phy": {"total": 0, "delta": 0}},
        "allowance": {},
    }
    assert ens5["drops"]["allowance"]["pps_allowance_exceeded"] == {"total": 9, "delta": 4}
    assert ens5["drops"]["ring"] == {"rx_drops": {"total": 0, "delta": 0}}
    assert eth0["drops"] is None and "virtio_net has no ethtool -S counter" in eth0["unsupported"]["drops"]


def test_sample_drops_counter_reset_single_reading_and_errors():
    run = TwoReadings({"ens1": _stats(rx_out_of_buffer=500)}, {"ens1": _stats(rx_out_of_buffer=3)})
    (ens1,) = nics = _nics(("ens1", "mlx5_core"))
    nic.sample_drops(nics, ethtool.Ethtool(run, "ethtool"), 1.0, sleep=lambda s: None)
    assert ens1["drops"]["ring"] == {"rx_out_of_buffer": {"total": 3, "delta": None}}  # driver reloaded between
    run = TwoReadings({"ens1": _stats(rx_out_of_buffer=500)}, {})
    (ens1,) = nics = _nics(("ens1", "mlx5_core"))
    waits = []
    nic.sample_drops(nics, ethtool.Ethtool(run, "ethtool"), 0, sleep=waits.append)
    assert waits == [] and ens1["drops"]["interval_s"] is None
    assert ens1["drops"]["ring"] == {"rx_out_of_buffer": {"total": 500, "delta": None}}
    (ens1,) = nics = _nics(("ens1", "mlx5_core"))
    nic.sample_drops(nics, ethtool.Ethtool(TwoReadings({}, {}), "ethtool"), 1.0, sleep=waits.append)
    assert waits == [] and ens1["drops"] is None  # nothing read, nothing waited for
    assert ens1["unsupported"]["drops"] == "Operation not supported (ethtool rc=1)"


def test_fake_ethtool_second_statistics_reading(tmp_path):
    env = {**os.environ, "FAKE_ETHTOOL_DIR": str(ETHTOOL_FIX / "mlx5_core"), "FAKE_ETHTOOL_STATE": str(tmp_path)}

    def stats():
        proc = subprocess.run([str(FAKE_ETHTOOL), "-S", "eth0"], capture_output=True, text=True, env=env, check=False)
        return ethtool.parse_stats_text(proc.stdout)["rx_out_of_buffer"]

    assert [stats(), stats(), stats()] == [1203944, 1207310, 1207310]
    rc, out, _ = _fake(["-S", "eth0"])  # without a state directory every reading is the first one
    assert rc == 0 and out == _read("mlx5_core", "eth0", "show-stats")
    rc, _, err = _fake(["--json", "-S", "eth0"])  # like ethtool 6.1
    assert rc == 1 and "bad command line argument" in err


def test_tso_without_hardware_tso_counts_as_fixed():
    """ENA has no TSO: tx-tcp-segmentation and tx-tcp6-segmentation are "off [fixed]" while the software flag
    tx-tcp-mangleid-segmentation is not, so ethtool does not mark the group fixed; `tso on` changes nothing, so
    NET-OFFL-001 must not ask for it (issue 13: AWS p5 reference host)."""
    from ansible_collections.gpufleet.tuning.plugins.module_utils import ethtool as et

    text = (ETHTOOL_FIX / "ena" / "ens5" / "show-features").read_text()
    features, fixed = et.parse_features_text(text)
    assert features["tcp-segmentation-offload"] is False and "tcp-segmentation-offload" in fixed
    features, fixed = et.parse_features_json((ETHTOOL_FIX / "ena" / "ens5" / "show-features.json").read_text())
    assert "tcp-segmentation-offload" in fixed
    # mlx5 has TSO: the group stays changeable
    text = (ETHTOOL_FIX / "mlx5_core" / "ens1f0np0" / "show-features").read_text()
    assert "tcp-segmentation-offload" not in et.parse_features_text(text)[1]
