"""module_utils/uplink.py, routes.py, link_files.py and nic_settings.py (issue 12 §3): the uplink guard's readers
(routes, addresses, stacked devices, the SSH connection above a reset environment) over fixture /proc and /sys
trees laid out like a bonded server (the lab kernel has no bonding module), and the systemd .link [Match]
evaluator, file precedence and generated files.

The bond case the brief asks for: eth0 and eth1 are members of bond0, VLAN bond0.100 on top carries the default
route -> both members are uplinks via bond0.100, eth2 is not; the two members share bond0's current MAC but have
distinct permanent MACs -> each gets a .link file that matches only itself and names nothing.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from ansible_collections.gpufleet.tuning.plugins.module_utils import link_files, routes, systemd_unit, uplink
from ansible_collections.gpufleet.tuning.plugins.module_utils import nic_settings as ns
from ansible_collections.gpufleet.tuning.plugins.module_utils.hostfs import HostFS

BOND_MAC = "0c:42:a1:00:00:01"  # the bond takes its first member's MAC and gives it to every member
PERM = {"eth0": "0c:42:a1:00:00:01", "eth1": "0c:42:a1:00:00:02", "eth2": "0c:42:a1:00:00:03"}

# /proc/net/route as the kernel prints it (tabs), default route on the VLAN above the bond.
PROC_ROUTE = (
    "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
    "bond0.100\t00000000\t0164A8C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n"
    "bond0.100\t0064A8C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n"
    "eth2\t00000A0A\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0\n"
)
# /proc/net/ipv6_route: a default on eth3, the kernel's "unreachable ::/0 dev lo" (RTF_REJECT, not up).
PROC_IPV6_ROUTE = (
    "00000000000000000000000000000000 00 00000000000000000000000000000000 00 "
    "fe800000000000000000000000000001 00000400 00000001 00000000 00000003     eth3\n"
    "fd000000000000000000000000000000 40 00000000000000000000000000000000 00 "
    "00000000000000000000000000000000 00000100 00000001 00000000 00000001     eth2\n"
    "00000000000000000000000000000000 00 00000000000000000000000000000000 00 "
    "00000000000000000000000000000000 ffffffff 00000001 00000000 00200200       lo\n"
)


def _link(path: Path, target: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(os.path.relpath(target, path.parent))


def bonded_root(tmp_path: Path) -> Path:
    """A /sys and /proc laid out as the kernel does for eth0+eth1 in bond0, VLAN bond0.100 on it, eth2 alone."""
    root = tmp_path / "root"
    devices = root / "sys/devices"
    where = {
        "eth0": devices / "pci0000:00/0000:3b:00.0/net/eth0",
        "eth1": devices / "pci0000:00/0000:3b:00.1/net/eth1",
        "eth2": devices / "pci0000:00/0000:5e:00.0/net/eth2",
        "bond0": devices / "virtual/net/bond0",
        "bond0.100": devices / "virtual/net/bond0.100",
    }
    for index, (name, path) in enumerate(where.items(), start=2):
        path.mkdir(parents=True)
        _link(root / "sys/class/net" / name, path)
        (path / "ifindex").write_text(f"{index}\n")
        (path / "type").write_text("1\n")
        mac = BOND_MAC if name != "eth2" else PERM["eth2"]
        (path / "address").write_text(mac + "\n")
        uevent = f"INTERFACE={name}\nIFINDEX={index}\n"
        if name == "bond0":
            uevent += "DEVTYPE=bond\n"
        if name == "bond0.100":
            uevent += "DEVTYPE=vlan\n"
        (path / "uevent").write_text(uevent)
        if name.startswith("eth"):
            _link(path / "device", path.parent.parent)
    for member in ("eth0", "eth1"):
        _link(where[member] / "upper_bond0", where["bond0"])
        _link(where[member] / "master", where["bond0"])
        _link(where["bond0"] / f"lower_{member}", where[member])
    _link(where["bond0"] / "upper_bond0.100", where["bond0.100"])
    _link(where["bond0.100"] / "lower_bond0", where["bond0"])
    (root / "proc/net").mkdir(parents=True)
    (root / "proc/net/route").write_text(PROC_ROUTE)
    (root / "proc/net/ipv6_route").write_text(PROC_IPV6_ROUTE)
    # udev's database entry for eth0 (ifindex 2)
    (root / "run/udev/data").mkdir(parents=True)
    (root / "run/udev/data/n2").write_text("I:1234\nE:ID_BUS=pci\nE:ID_NET_DRIVER=mlx5_core\nG:systemd\n")
    return root


# --- uplink guard ----------------------------------------------------------------------------------------------


def test_default_route_readers():
    assert routes.parse_proc_route(PROC_ROUTE) == {"bond0.100"}
    assert routes.parse_proc_ipv6_route(PROC_IPV6_ROUTE) == {"eth3"}
    ip_json = """[
      {"type": "unreachable", "dst": "default", "table": "200", "flags": []},
      {"dst": "default", "gateway": "10.1.0.1", "dev": "eth4", "table": "100", "flags": []},
      {"dst": "default", "table": "101", "flags": [],
       "nexthops": [{"gateway": "10.2.0.1", "dev": "eth5"}, {"gateway": "10.3.0.1", "dev": "eth6"}]},
      {"dst": "10.0.0.0/8", "dev": "eth7", "flags": []},
      {"type": "local", "dst": "127.0.0.1", "dev": "lo", "table": "local"}
    ]"""
    assert routes.parse_ip_route_json(ip_json) == {"eth4", "eth5", "eth6"}
    assert routes.parse_ip_route_json("not json") == set()


def test_bond_members_under_a_vlan_with_the_default_route_are_uplinks(tmp_path):
    fs = HostFS(str(bonded_root(tmp_path)))
    assert uplink.uppers(fs, "eth0") == ["bond0", "bond0.100"]
    assert uplink.uppers(fs, "eth2") == []
    default_devs = routes.parse_proc_route(fs.read("/proc/net/route"))
    for member in ("eth0", "eth1"):
        status = uplink.uplink_status(member, uplink.uppers(fs, member), default_devs, {}, None)
        assert status == {"default_route": True, "connection": False, "via": "bond0.100"}
    assert uplink.uplink_status("eth2", [], default_devs, {}, None) == {
        "default_route": False,
        "connection": False,
        "via": None,
    }
    # The bond itself carries nothing directly here; its VLAN does.
    assert uplink.uplink_status("bond0", uplink.uppers(fs, "bond0"), default_devs, {}, None)["via"] == "bond0.100"


def test_connection_address_through_the_bond():
    addrs = uplink.parse_ip_addr_json(
        '[{"ifname": "bond0", "addr_info": [{"family": "inet", "local": "192.168.100.7", "prefixlen": 24}]},'
        ' {"ifname": "eth2", "addr_info": [{"family": "inet6", "local": "fd00::7", "prefixlen": 64}]}]'
    )
    local = uplink.ssh_local_address({"SSH_CONNECTION": "192.168.100.1 51234 192.168.100.7 22"})
    assert local == "192.168.100.7"
    status = uplink.uplink_status("eth1", ["bond0", "bond0.100"], set(), addrs, local)
    assert status == {"default_route": False, "connection": True, "via": "bond0"}
    # IPv6 written in full (/proc/net/if_inet6) and IPv4-mapped forms compare equal to the short forms.
    inet6 = uplink.parse_if_inet6("fd000000000000000000000000000007 05 40 00 80     eth2\n")
    assert inet6 == {"eth2": {"fd00::7"}}
    assert uplink.ssh_local_address({"SSH_CONNECTION": "fd00::1 2 fd00:0::7 22"}) == "fd00::7"
    assert uplink.ssh_local_address({"SSH_CONNECTION": "::ffff:10.0.0.1 2 ::ffff:10.0.0.7 22"}) == "10.0.0.7"
    assert uplink.ssh_local_address({}) is None
    assert uplink.uplink_status("eth2", [], set(), inet6, "fd00::7")["connection"] is True


def test_ssh_connection_is_found_above_sudo(tmp_path):
    """sudo's env_reset drops SSH_CONNECTION; the shell sshd started (an ancestor) still has it."""
    proc = tmp_path / "proc"
    chain = {  # pid: (comm, ppid, environ)
        300: ("python3", 250, "PATH=/usr/bin\0HOME=/root\0"),
        250: ("sh) (x", 200, "PATH=/usr/bin\0"),  # a comm with spaces and ')' must not confuse the parser
        200: ("sudo", 150, None),  # unreadable
        150: ("sh", 100, "USER=ops\0SSH_CONNECTION=10.0.0.1 40000 10.0.0.7 22\0"),
        100: ("sshd", 1, "LANG=C\0"),
    }
    for pid, (comm, ppid, environ) in chain.items():
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "stat").write_text(f"{pid} ({comm}) S {ppid} {pid} {pid} 0 -1 4194560 ...\n")
        if environ is not None:
            (proc / str(pid) / "environ").write_text(environ)
    fs = HostFS(str(tmp_path))
    assert uplink.ancestor_ssh_connection(fs, 300) == "10.0.0.1 40000 10.0.0.7 22"
    assert uplink.ancestor_ssh_connection(fs, 100) is None


# --- .link [Match] evaluator ---------------------------------------------------------------------------------------

MEMBER = {
    "name": "eth1", "mac": BOND_MAC, "permanent_mac": PERM["eth1"], "driver": "mlx5_core",
    "path": "pci-0000:3b:00.1", "type": "ether", "properties": {"ID_BUS": "pci"},
}  # fmt: skip


@pytest.mark.parametrize(
    "match, verdict",
    [
        ([("MACAddress", BOND_MAC)], "yes"),  # the current MAC: every bond member has it (the old bug)
        ([("PermanentMACAddress", PERM["eth1"].upper())], "yes"),
        ([("PermanentMACAddress", PERM["eth0"])], "no"),
        ([("PermanentMACAddress", f"{PERM['eth0']} {PERM['eth1']}")], "yes"),  # a list
        ([("OriginalName", "eth*")], "yes"),
        ([("OriginalName", "en* eth1")], "yes"),
        ([("OriginalName", "!eth1")], "no"),
        ([("OriginalName", "!eth0")], "yes"),  # only negative patterns: everything else matches
        ([("OriginalName", "eth*"), ("OriginalName", "!eth1")], "no"),  # assignments accumulate
        ([("OriginalName", "eth0"), ("OriginalName", ""), ("OriginalName", "eth1")], "yes"),  # empty resets
        ([("Driver", "mlx5_*"), ("PermanentMACAddress", PERM["eth1"])], "yes"),  # all keys must match
        ([("Driver", "ice"), ("PermanentMACAddress", PERM["eth1"])], "no"),
        ([("Path", "pci-0000:3b:00.*")], "yes"),
        ([("Type", "ether")], "yes"),
        ([("Type", "bond vlan")], "no"),
        ([("Property", "ID_BUS=usb")], "no"),  # systemd's 73-usb-net-by-mac.link
        ([("Property", "ID_BUS=pci")], "yes"),
        ([("Kind", "bond")], "maybe"),  # not evaluated here: may match
        ([("Host", "gpu-01"), ("Driver", "mlx5_core")], "maybe"),
        ([("Host", "gpu-01"), ("Driver", "ice")], "no"),  # a known key that fails decides
        ([], "no"),  # systemd ignores a file with an empty [Match]
    ],
)
def test_link_match(match, verdict):
    assert link_files.link_match(match, MEMBER)[0] == verdict


def test_link_match_unknown_facts():
    facts = {"name": "gv0", "mac": "02:00:00:00:00:01", "driver": "veth", "path": None}
    assert link_files.link_match([("PermanentMACAddress", PERM["eth0"])], facts)[0] == "maybe"  # not read
    assert link_files.link_match([("Path", "pci-*")], facts)[0] == "no"  # a virtual NIC has no ID_PATH
    assert link_files.link_match([("Path", "!pci-*")], facts)[0] == "yes"
    assert link_files.link_match([("Property", "ID_BUS=usb")], facts) == (
        "maybe",
        ["Property= (the udev database has no entry for the NIC)"],
    )
    assert link_files.link_match([("PermanentMACAddress", PERM["eth0"])], dict(facts, permanent_mac=None))[0] == "no"
    renamed = dict(MEMBER, renamed=True)  # name_assign_type 4: the kernel's name is not known
    assert link_files.link_match([("OriginalName", "eth1")], renamed)[0] == "maybe"
    assert link_files.link_match([("OriginalName", "*")], renamed)[0] == "yes"


def test_parse_unit_file():
    text = "# c\n[Match]\n; c\nOriginalName=eth0 \\\n  eth1\nDriver = ice\n\n[Link]\nNamePolicy=keep kernel\n"
    assert systemd_unit.parse_unit_file(text) == {
        "Match": [("OriginalName", "eth0 eth1"), ("Driver", "ice")],
        "Link": [("NamePolicy", "keep kernel")],
    }


# --- .link files ---------------------------------------------------------------------------------------------------

DEFAULT_LINK = (
    "[Match]\nOriginalName=*\n\n[Link]\nNamePolicy=keep kernel database onboard slot path\n"
    "AlternativeNamesPolicy=database onboard slot path\nMACAddressPolicy=persistent\n"
)
USB_LINK = "[Match]\nOriginalName=*\nProperty=ID_BUS=usb\n\n[Link]\nNamePolicy=database mac\n"


def _facts(fs, name):
    return link_files.link_facts(fs, name, "mlx5_core", f"0000:3b:00.{name[-1]}", PERM[name])


def test_link_facts_from_sysfs_and_udev(tmp_path):
    fs = HostFS(str(bonded_root(tmp_path)))
    eth0 = _facts(fs, "eth0")
    assert eth0 == {
        "name": "eth0", "renamed": False, "driver": "mlx5_core", "mac": BOND_MAC, "permanent_mac": PERM["eth0"],
        "path": "pci-0000:3b:00.0", "type": "ether",
        "properties": {"ID_BUS": "pci", "ID_NET_DRIVER": "mlx5_core"},
    }  # fmt: skip
    assert "properties" not in _facts(fs, "eth1")  # no udev database entry: Property= is "maybe"
    bond = link_files.link_facts(fs, "bond0", "bonding", None, None)
    assert bond["path"] is None and bond["type"] == "bond" and bond["permanent_mac"] is None
    assert "permanent_mac" not in link_files.link_facts(fs, "eth2", None, None, "unknown")


def test_bond_members_get_files_matching_only_themselves(tmp_path):
    fs = HostFS(str(bonded_root(tmp_path)))
    members = {name: _facts(fs, name) for name in ("eth0", "eth1")}
    assert members["eth0"]["mac"] == members["eth1"]["mac"]
    for name, facts in members.items():
        lines, how, note = link_files.link_match_lines(facts)
        assert (lines, how, note) == ([f"PermanentMACAddress={PERM[name]}", "Driver=mlx5_core"], "PermanentMACAddress",
                                      None)  # fmt: skip
        text = link_files.link_file(name, lines, {"mtu": 9000})
        parsed = systemd_unit.parse_unit_file(text)
        assert not [k for k, _v in parsed["Link"] if k in ("Name", "NamePolicy")]
        assert parsed["Link"] == [("MTUBytes", "9000")]
        # The file matches its own member and not the other one, whose current MAC is the same.
        verdicts = {other: link_files.link_match(parsed["Match"], members[other])[0] for other in members}
        assert verdicts == {n: ("yes" if n == name else "no") for n in members}


def test_fallback_without_permanent_mac():
    lines, how, note = link_files.link_match_lines({"name": "gv0", "driver": "veth", "permanent_mac": None})
    assert (lines, how) == (["OriginalName=gv0", "Driver=veth"], "OriginalName")
    assert "no permanent MAC" in note
    assert link_files.link_match_lines({"name": "x0", "driver": None, "permanent_mac": None})[0] == ["OriginalName=x0"]
    assert link_files.parse_permanent_address("Permanent address: 00:00:00:00:00:00\n") is None
    assert link_files.parse_permanent_address("Permanent address: 0C:42:A1:00:00:02\n") == "0c:42:a1:00:00:02"
    assert link_files.parse_systemd_version("252\n") == 252
    assert link_files.parse_systemd_version("252.22-1~deb12u1\n") == 252
    assert link_files.parse_systemd_version("") is None


def _write(path: Path, text: str):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_link_file_precedence_and_masking(tmp_path):
    root = tmp_path
    _write(root / "usr/lib/systemd/network/99-default.link", DEFAULT_LINK)
    _write(root / "etc/systemd/network/99-default.link", "[Match]\nOriginalName=*\n\n[Link]\nNamePolicy=mac\n")
    _write(root / "usr/lib/systemd/network/73-usb-net-by-mac.link", USB_LINK)
    (root / "etc/systemd/network/73-usb-net-by-mac.link").symlink_to("/dev/null")  # masked
    _write(root / "run/systemd/network/10-netplan-eth0.link", "[Match]\nPermanentMACAddress=x\n")
    _write(root / "run/systemd/network/20-empty.link", "")  # masked too
    fs = HostFS(str(root))
    assert link_files.link_files(fs, link_files.LINK_DIRS) == [
        ("10-netplan-eth0.link", "/run/systemd/network/10-netplan-eth0.link"),
        ("99-default.link", "/etc/systemd/network/99-default.link"),  # /etc hides /usr/lib's file of that name
    ]


def test_neighbours_shadow_replace_and_legacy(tmp_path):
    root = bonded_root(tmp_path)
    _write(root / "usr/lib/systemd/network/99-default.link", DEFAULT_LINK)
    _write(root / "usr/lib/systemd/network/73-usb-net-by-mac.link", USB_LINK)
    _write(root / "usr/lib/systemd/network/95-kind.link", "[Match]\nKind=!bond\n\n[Link]\nNamePolicy=path\n")
    # netplan matched eth0 on its permanent MAC and names it: ours for eth0 is a no-op.
    netplan = f"[Match]\nPermanentMACAddress={PERM['eth0']}\n\n[Link]\nName=eth0\nWakeOnLan=off\n"
    _write(root / "run/systemd/network/10-netplan-eth0.link", netplan)
    # gpufleet 0.x files: MACAddress= (the shared MAC) + Name=.
    for member in ("eth0", "eth1"):
        old = f"{link_files.MANAGED_HEADER}\n[Match]\nMACAddress={BOND_MAC}\n\n[Link]\nName={member}\nMTUBytes=9000\n"
        _write(root / f"etc/systemd/network/60-gpufleet-{member}.link", old)
    fs = HostFS(str(root))

    eth0 = link_files.link_neighbours(fs, link_files.LINK_DIRS, link_files.link_file_name("eth0"), _facts(fs, "eth0"))
    assert eth0["shadowed_by"] == "/run/systemd/network/10-netplan-eth0.link"
    # eth0 has a udev entry (ID_BUS=pci): 73-usb-net-by-mac.link does not match; 99-default.link is replaced.
    assert eth0["replaces"] == ("/usr/lib/systemd/network/99-default.link",
                                systemd_unit.parse_unit_file(DEFAULT_LINK)["Link"])  # fmt: skip
    # 95-kind.link comes first after ours, but Kind= is not evaluated here: reported, not carried over.
    assert [p for p, _why in eth0["replaces_maybe"]] == ["/usr/lib/systemd/network/95-kind.link"]

    eth1 = link_files.link_neighbours(fs, link_files.LINK_DIRS, link_files.link_file_name("eth1"), _facts(fs, "eth1"))
    # eth1's own old file is being replaced, but eth0's old file matches eth1 too (shared MAC): reported.
    assert eth1["shadowed_by"] == "/etc/systemd/network/60-gpufleet-eth0.link"
    # No udev entry for eth1: whether the (earlier) USB file matches cannot be told: reported as "maybe".
    assert [p for p, _why in eth1["maybe"]] == ["/usr/lib/systemd/network/73-usb-net-by-mac.link"]
    assert eth1["replaces"][0] == "/usr/lib/systemd/network/99-default.link"


def test_drop_ins_of_the_replaced_file_are_carried_over(tmp_path):
    """99-default.link.d/*.conf (the way systemd's own file says to change it) is part of what ours replaces."""
    _write(tmp_path / "usr/lib/systemd/network/99-default.link", DEFAULT_LINK)
    _write(tmp_path / "etc/systemd/network/99-default.link.d/50-names.conf", "[Link]\nNamePolicy=path\n")
    _write(tmp_path / "usr/lib/systemd/network/99-default.link.d/50-names.conf", "[Link]\nNamePolicy=mac\n")
    _write(tmp_path / "run/systemd/network/99-default.link.d/10-match.conf", "[Match]\nDriver=ice\n")
    fs = HostFS(str(tmp_path))
    facts = {"name": "eth1", "driver": "ice", "mac": BOND_MAC, "permanent_mac": PERM["eth1"], "path": None}
    near = link_files.link_neighbours(fs, link_files.LINK_DIRS, link_files.link_file_name("eth1"), facts)
    assert near["replaces"][1][-1] == ("NamePolicy", "path")  # /etc's drop-in hides /usr/lib's, applied last
    assert near["replaces_dropins"] == [
        "/run/systemd/network/99-default.link.d/10-match.conf",
        "/etc/systemd/network/99-default.link.d/50-names.conf",
    ]
    text = link_files.link_file("eth1", [], {"mtu": 9000}, near["replaces"][1], near["replaces"][0], None,
                        near["replaces_dropins"])  # fmt: skip
    assert text.index("NamePolicy=keep kernel") < text.index("NamePolicy=path\n")  # the later one wins in systemd
    # A drop-in's [Match] narrows the file: with Driver=ice it no longer applies to an mlx5 NIC.
    other = link_files.link_neighbours(
        fs, link_files.LINK_DIRS, link_files.link_file_name("eth1"), dict(facts, driver="mlx5_core")
    )
    assert other["replaces"] is None


def test_naming_carried_over_from_the_replaced_file():
    inherited = systemd_unit.parse_unit_file(DEFAULT_LINK + "MTUBytes=1500\nWakeOnLan=off\n")["Link"]
    text = link_files.link_file(
        "eth1", [f"PermanentMACAddress={PERM['eth1']}"], {"mtu": 9000}, inherited, "/usr/lib/99-default.link"
    )
    link = systemd_unit.parse_unit_file(text)["Link"]
    assert link == [
        ("NamePolicy", "keep kernel database onboard slot path"),
        ("AlternativeNamesPolicy", "database onboard slot path"),
        ("MACAddressPolicy", "persistent"),
        ("WakeOnLan", "off"),
        ("MTUBytes", "9000"),  # ours, not the replaced file's 1500
    ]
    assert "# Carried over from /usr/lib/99-default.link" in text
    assert "10-netplan-eth1.link" < link_files.link_file_name("eth1") < "99-default.link"


# --- plan(): rings (ethtool -G) and channels (ethtool -L), counts below a maximum ----------------------------------

MLX = {
    "name": "ens1f0",
    "unsupported": {},
    "rings": {"rx": 1024, "tx": 1024, "rx_max": 8192, "tx_max": 8192},
    "channels": {"rx": None, "tx": None, "other": 0, "combined": 16, "rx_max": None, "tx_max": None,
                 "other_max": 0, "combined_max": 63},
}  # fmt: skip


def test_plan_rings_and_channels_to_max_or_a_number():
    before, after, steps, unsupported = ns.plan(
        MLX, {"rings": {"rx": "max", "tx": 1024}, "channels": {"combined": "max"}}
    )
    assert before == {"rings": {"rx": 1024, "tx": 1024}, "channels": {"combined": 16}}
    assert after == {"rings": {"rx": 8192, "tx": 1024}, "channels": {"combined": 63}}
    assert steps == [
        ("rings", ["-G", "ens1f0", "rx", "8192"], "ethtool"),  # tx is already 1024: not in the command
        ("channels", ["-L", "ens1f0", "combined", "63"], "ethtool"),
    ]
    assert unsupported == {}
    _, _, steps, _ = ns.plan(MLX, {"rings": {"rx": 1024}, "channels": {"combined": 16}})
    assert steps == []  # nothing to change: no step


@pytest.mark.parametrize(
    "want, message",
    [
        ({"rings": {"tx": 9000}}, "rings.tx: 9000 is above ens1f0's maximum 8192"),
        ({"channels": {"combined": 64}}, "channels.combined: 64 is above ens1f0's maximum 63"),
    ],
)
def test_plan_refuses_counts_above_the_maximum(want, message):
    with pytest.raises(ns.NicSettingsError, match=message):
        ns.plan(MLX, want)


def test_plan_rings_and_channels_unsupported_without_facts():
    nic = {"name": "veth0", "unsupported": {"rings": "Operation not supported"}, "rings": None, "channels": None}
    _, _, steps, unsupported = ns.plan(nic, {"rings": {"rx": "max"}, "channels": {"combined": 2}})
    assert steps == [] and unsupported == {"rings": "Operation not supported", "channels": "not reported"}
