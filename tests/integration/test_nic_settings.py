"""nic_settings on a real veth pair inside a network namespace we create: MTU and offloads change in the
namespace only, what veth cannot do (rings) is reported, persistence files are written, the second run changes
nothing, check mode changes nothing, bad input fails clearly.

Issue 12 §3, in real namespaces: a NIC that carries the default route (IPv4 on a veth, IPv6 on a bridge above a
veth) or the SSH connection's local address is refused unless allow_uplink, while the data NIC beside it changes;
.link files match on the permanent MAC + driver and never name the NIC (two "bond members" with one current MAC
get one file each), an earlier netplan-style file that shadows ours is reported, the naming of the file ours takes
the place of (99-default.link) is carried over, and our old 60-gpufleet-*.link (MACAddress= + Name=) is removed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import labkit
import pytest

from gpufleet.runner import run_playbook

pytestmark = pytest.mark.integration
TASK = "Set NIC"

TASKS = """
- name: Set NIC
  gpufleet.tuning.nic_settings:
    name: "{{ nic }}"
    mtu: "{{ s.mtu | default(omit) }}"
    offloads: "{{ s.offloads | default(omit) }}"
    rings: "{{ s.rings | default(omit) }}"
    channels: "{{ s.channels | default(omit) }}"
    persist_method: "{{ s.persist_method | default('udev') }}"
    link_dir: "{{ out }}/network"
    link_search_dirs: "{{ search if s.persist_method | default('') == 'link' else omit }}"
    udev_dir: "{{ out }}/udev"
    strict: "{{ s.strict | default(false) }}"
    allow_uplink: "{{ s.allow_uplink | default(omit) }}"
    ethtool_path: "{{ s.ethtool_path | default(omit) }}"
    rollback_run_id: "{{ s.rollback_run_id | default(omit) }}"
    rollback_dir: "{{ s.rollback_dir | default(omit) }}"
  environment: "{{ s.environment | default({}) }}"
  check_mode: "{{ check | default(false) }}"
  diff: true
"""
PLAY = labkit.play("nic_settings", tasks=TASKS)


@pytest.fixture
def netns(tmp_path):
    with labkit.namespace("gpfn") as name:
        labkit.veth(name, up=("gv0",))
        labkit.ns_exec(name, "ethtool", "-K", "gv0", "gro", "off")
        yield name, labkit.ns_python(tmp_path, name)


def _run(tmp: Path, wrapper: Path, settings: dict, nic="gv0", check=False):
    host = labkit.local_host(
        wrapper,
        nic=nic,
        s=settings,
        out=str(tmp / "out"),
        search=[str(tmp / "out/run-network"), str(tmp / "out/lib-network")],
    )
    return run_playbook(
        str(labkit.write_play(tmp, PLAY)),
        str(labkit.write_inventory(tmp, {"ns": host})),
        extravars={"check": check} if check else {},
    ).hosts["ns"]


def _ns(ns, *argv):
    return labkit.ns_exec(ns, *argv, check=False)


WANT = {"mtu": 9000, "offloads": {"gro": True, "tcp-segmentation-offload": True}, "rings": {"rx": "max"}}


def test_veth_in_namespace(tmp_path, netns):
    ns, wrapper = netns
    check = _run(tmp_path, wrapper, WANT, check=True)
    assert check.status == "ok", check.message
    assert check.results[TASK]["changed"] is True
    assert "mtu 1500" in _ns(ns, "ip", "link", "show", "gv0")  # check mode changed nothing
    assert not (tmp_path / "out").exists()

    first = _run(tmp_path, wrapper, WANT)
    res = first.results[TASK]
    assert first.status == "ok" and res["changed"] is True
    assert "mtu 9000" in _ns(ns, "ip", "link", "show", "gv0")
    assert "generic-receive-offload: on" in _ns(ns, "ethtool", "-k", "gv0")
    assert "rings" in res["unsupported"]  # veth has no ring parameters
    assert res["commands"][0].endswith("link set dev gv0 mtu 9000")
    rule = (tmp_path / "out/udev/90-gpufleet-gv0.rules").read_text()
    assert 'NAME=="gv0", GOTO="gpufleet_gv0"' in rule and 'ATTR{mtu}="9000"' in rule and "-K gv0" in rule

    second = _run(tmp_path, wrapper, WANT)
    assert second.results[TASK]["changed"] is False and second.results[TASK]["commands"] == []


def test_udev_rule_of_older_releases_is_replaced_not_doubled(tmp_path, netns):
    """Our 60-gpufleet-gv0.rules of older releases (KERNEL==, before 80-net-setup-link.rules, so a renamed NIC never
    matched) gives way to 90-gpufleet-gv0.rules: removed with a diff, check mode predicts it, so an upgraded host
    never has two rules for one NIC. A file of that name that is not ours is left alone."""
    _ns_name, wrapper = netns
    legacy = tmp_path / "out/udev/60-gpufleet-gv0.rules"
    legacy.parent.mkdir(parents=True)
    legacy.write_text(
        '# Managed by gpufleet (gpufleet.tuning.nic_settings)\nACTION=="add", SUBSYSTEM=="net", KERNEL=="gv0", '
        'ATTR{mtu}="4000"\n'
    )
    check = _run(tmp_path, wrapper, {"mtu": 4000}, check=True)
    assert check.status == "ok" and check.results[TASK]["persisted"]["removed"] == [str(legacy)]
    assert legacy.exists() and not (tmp_path / "out/udev/90-gpufleet-gv0.rules").exists()
    res = _run(tmp_path, wrapper, {"mtu": 4000})
    out = res.results[TASK]
    assert res.status == "ok" and out["changed"] is True, res.message
    assert out["persisted"]["removed"] == [str(legacy)] and not legacy.exists()
    assert sorted(p.name for p in legacy.parent.iterdir()) == ["90-gpufleet-gv0.rules"]
    assert any(d.get("after_header") == f"{legacy} (removed)" for d in out["diff"] if isinstance(d, dict))
    again = _run(tmp_path, wrapper, {"mtu": 4000})
    assert again.results[TASK]["changed"] is False


def test_rollback_of_the_udev_upgrade_brings_back_the_old_rule_alone(tmp_path, netns):
    """Rollback after the upgrade: the old 60-gpufleet-gv0.rules comes back and our 90- rule goes (not two rules)."""
    _ns_name, wrapper = netns
    legacy = tmp_path / "out/udev/60-gpufleet-gv0.rules"
    legacy.parent.mkdir(parents=True)
    old = (
        "# Managed by gpufleet (gpufleet.tuning.nic_settings)\n"
        'ACTION=="add", SUBSYSTEM=="net", KERNEL=="gv0", RUN+="/bin/true"\n'
    )
    legacy.write_text(old)
    rb = {"rollback_run_id": "r1", "rollback_dir": str(tmp_path / "rb")}
    res = _run(tmp_path, wrapper, {"mtu": 4000, **rb})
    assert res.status == "ok" and not legacy.exists(), res.message
    assert (tmp_path / "out/udev/90-gpufleet-gv0.rules").exists()
    play = labkit.play(
        "rollback",
        tasks=[
            {"name": "Roll back", "gpufleet.tuning.rollback": {"run_id": "r1", "rollback_dir": str(tmp_path / "rb")}}
        ],
    )
    host = labkit.local_host(wrapper)
    back = run_playbook(
        str(labkit.write_play(tmp_path, play)), str(labkit.write_inventory(tmp_path, {"ns": host}))
    ).hosts["ns"]
    assert back.status == "ok", back.message
    assert sorted(p.name for p in legacy.parent.iterdir()) == ["60-gpufleet-gv0.rules"]
    assert legacy.read_text() == old


def test_link_file_never_names_the_nic(tmp_path, netns):
    """veth has no permanent MAC: the file falls back to OriginalName= + Driver= and says so; it sets no Name=."""
    ns, wrapper = netns
    res = _run(tmp_path, wrapper, {"mtu": 4000, "persist_method": "link"})
    assert res.status == "ok", res.message
    out = res.results[TASK]
    text = (tmp_path / "out/network/90-gpufleet-gv0.link").read_text()
    assert "[Match]\nOriginalName=gv0\nDriver=veth\n" in text and "MTUBytes=4000" in text
    assert not [line for line in text.splitlines() if line.startswith(("Name=", "NamePolicy=", "MACAddress="))]
    assert out["persisted"]["match"] == "OriginalName" and out["link_shadowed_by"] is None
    assert any("no permanent MAC" in w for w in out.get("warnings", []))


@pytest.mark.parametrize(
    "nic, settings, message",
    [
        ("gv0;reboot", {"mtu": 9000}, "name: invalid interface name 'gv0;reboot'"),
        ("gv0", {"mtu": 70000}, "mtu: 70000 is outside 68-65535"),
        ("gv0", {"rings": {"rx": -1}}, "rings.rx: must be a positive number or 'max'"),
        ("gv0", {"offloads": {"warp-drive": True}}, "offloads.warp-drive: gv0 has no such feature"),
        ("gv0", {"rings": {"rx": "max"}, "strict": True}, "strict: gv0 does not support rings"),
        ("nosuch0", {"mtu": 9000}, "name: no such interface: nosuch0"),
    ],
)
def test_bad_input(tmp_path, netns, nic, settings, message):
    _, wrapper = netns
    res = _run(tmp_path, wrapper, settings, nic=nic)
    labkit.assert_clear_error(res, message)


# --- issue 12 §3: the uplink guard -------------------------------------------------------------------------------


def _sh(*argv):
    subprocess.run(argv, check=True, capture_output=True)


@pytest.fixture
def uplink_ns(tmp_path):
    """A namespace laid out like a GPU server: gm0 (management) carries the IPv4 default route, gd0 (data) has
    10.9.1.1/24 and no route out, gb0 is a port of bridge br9, which carries the IPv6 default route."""
    with labkit.namespace("gpfu") as name:
        ip = ["ip", "-n", name]
        for a, b in (("gm0", "gm1"), ("gd0", "gd1"), ("gb0", "gb1")):
            labkit.veth(name, a, b)
        _sh(*ip, "addr", "add", "10.9.0.1/24", "dev", "gm0")
        _sh(*ip, "route", "add", "default", "via", "10.9.0.2", "dev", "gm0")
        _sh(*ip, "addr", "add", "10.9.1.1/24", "dev", "gd0")
        _sh(*ip, "link", "add", "br9", "type", "bridge")
        _sh(*ip, "link", "set", "gb0", "master", "br9")
        _sh(*ip, "link", "set", "br9", "up")
        labkit.ns_exec(name, "sysctl", "-qw", "net.ipv6.conf.br9.disable_ipv6=0")
        _sh(*ip, "-6", "addr", "add", "fd09::1/64", "dev", "br9", "nodad")
        _sh(*ip, "-6", "route", "add", "default", "via", "fd09::2", "dev", "br9")
        yield name, labkit.ns_python(tmp_path, name)


def _mtu(ns, dev):
    return _ns(ns, "cat", f"/sys/class/net/{dev}/mtu").strip()


def test_default_route_nic_is_refused_data_nic_changes(tmp_path, uplink_ns):
    ns, wrapper = uplink_ns
    want = {"mtu": 4000, "offloads": {"gro": False}}
    check = _run(tmp_path, wrapper, want, nic="gm0", check=True)
    assert check.status == "failed"  # check mode predicts the refusal
    refused = _run(tmp_path, wrapper, want, nic="gm0")
    res = refused.results[TASK]
    assert refused.status == "failed"
    assert "allow_uplink: gm0 is an uplink - gm0 carries a default route" in refused.message
    assert "allow_uplink: true" in refused.message and "network.interfaces" in refused.message
    assert res["uplink"] == {"default_route": True, "connection": False, "via": None}
    assert _mtu(ns, "gm0") == "1500" and not (tmp_path / "out").exists()  # nothing changed, no file

    data = _run(tmp_path, wrapper, want, nic="gd0")
    assert data.status == "ok", data.message
    assert data.results[TASK]["uplink"] == {"default_route": False, "connection": False, "via": None}
    assert _mtu(ns, "gd0") == "4000"

    forced = _run(tmp_path, wrapper, {**want, "allow_uplink": True}, nic="gm0")
    assert forced.status == "ok", forced.message
    assert forced.results[TASK]["changed"] is True and _mtu(ns, "gm0") == "4000"
    assert forced.results[TASK]["uplink"]["default_route"] is True


def test_uplink_with_nothing_to_change_is_ok(tmp_path, uplink_ns):
    """The guard refuses changes, not runs: an uplink already as asked reports ok with its uplink status."""
    _ns_name, wrapper = uplink_ns
    res = _run(tmp_path, wrapper, {"mtu": 1500, "persist_method": "none"}, nic="gm0")
    assert res.status == "ok", res.message
    assert res.results[TASK]["changed"] is False and res.results[TASK]["uplink"]["default_route"] is True


def test_bridge_port_under_ipv6_default_route_is_refused(tmp_path, uplink_ns):
    ns, wrapper = uplink_ns
    res = _run(tmp_path, wrapper, {"mtu": 4000}, nic="gb0")
    assert res.status == "failed"
    assert "br9 (stacked on gb0) carries a default route" in res.message
    assert res.results[TASK]["uplink"] == {"default_route": True, "connection": False, "via": "br9"}
    assert _mtu(ns, "gb0") == "1500"


def test_nic_with_the_ssh_connection_address_is_refused(tmp_path, uplink_ns):
    ns, wrapper = uplink_ns
    env = {"SSH_CONNECTION": "10.9.1.2 50022 10.9.1.1 22"}
    res = _run(tmp_path, wrapper, {"mtu": 4000, "environment": env}, nic="gd0")
    assert res.status == "failed"
    assert "gd0 has the address of this connection (10.9.1.1, from SSH_CONNECTION)" in res.message
    assert res.results[TASK]["uplink"] == {"default_route": False, "connection": True, "via": None}
    assert _mtu(ns, "gd0") == "1500"
    other = _run(
        tmp_path, wrapper, {"mtu": 4000, "environment": {"SSH_CONNECTION": "10.9.7.2 1 10.9.7.1 22"}}, nic="gd0"
    )
    assert other.status == "ok", other.message  # a connection on another NIC does not block this one


def test_connection_found_above_a_reset_environment(tmp_path, uplink_ns, monkeypatch):
    """become (sudo) drops SSH_CONNECTION from the module's environment; the module finds it in an ancestor's.
    The interpreter wrapper clears it the way sudo's env_reset does, while ansible-playbook above keeps it."""
    ns, wrapper = uplink_ns
    wrapper.write_text(f'#!/bin/sh\nexec env -u SSH_CONNECTION ip netns exec {ns} {sys.executable} "$@"\n')
    monkeypatch.setenv("SSH_CONNECTION", "10.9.1.2 50022 10.9.1.1 22")
    res = _run(tmp_path, wrapper, {"mtu": 4000}, nic="gd0")
    assert res.status == "failed", "the module did not see the connection"
    assert res.results[TASK]["uplink"]["connection"] is True
    assert _mtu(ns, "gd0") == "1500"


# --- issue 12 §3: .link files that never rename ------------------------------------------------------------------

PERM = {"gp0": "0c:42:a1:00:00:01", "gp1": "0c:42:a1:00:00:02"}


@pytest.fixture
def bond_like_ns(tmp_path, netns):
    """Two veths with one current MAC (what bond members look like: the bond gives all its members its own MAC;
    the kernel here has no bonding module) and an ethtool that reports their distinct burnt-in MACs for -P (veth
    has none) and is the real ethtool for everything else."""
    ns, wrapper = netns
    for dev, peer in (("gp0", "gq0"), ("gp1", "gq1")):
        _sh("ip", "-n", ns, "link", "add", dev, "type", "veth", "peer", "name", peer)
        _sh("ip", "-n", ns, "link", "set", dev, "address", "02:00:00:00:aa:01")
        _sh("ip", "-n", ns, "link", "set", dev, "up")
    ethtool = tmp_path / "ethtool-perm"
    cases = "".join(f"  {dev}) echo 'Permanent address: {mac}'; exit 0 ;;\n" for dev, mac in PERM.items())
    ethtool.write_text(
        f'#!/bin/sh\nif [ "$1" = "-P" ]; then\n  case "$2" in\n{cases}  esac\nfi\nexec {shutil.which("ethtool")} "$@"\n'
    )
    ethtool.chmod(0o755)
    return ns, wrapper, str(ethtool)


def _match(text):
    return text.split("[Match]\n", 1)[1].split("\n\n", 1)[0].splitlines()


def test_bond_members_sharing_a_mac_get_their_own_link_files(tmp_path, bond_like_ns):
    ns, wrapper, ethtool = bond_like_ns
    assert _ns(ns, "cat", "/sys/class/net/gp0/address") == _ns(ns, "cat", "/sys/class/net/gp1/address")
    for dev in ("gp0", "gp1"):
        res = _run(tmp_path, wrapper, {"mtu": 9000, "persist_method": "link", "ethtool_path": ethtool}, nic=dev)
        assert res.status == "ok", res.message
        assert res.results[TASK]["persisted"]["match"] == "PermanentMACAddress"
    for dev in ("gp0", "gp1"):
        text = (tmp_path / f"out/network/90-gpufleet-{dev}.link").read_text()
        # Matches only this member: its own burnt-in MAC (and driver), never the shared current MAC.
        assert _match(text) == [f"PermanentMACAddress={PERM[dev]}", "Driver=veth"]
        assert not [line for line in text.splitlines() if line.startswith(("Name=", "NamePolicy="))]
        assert "MTUBytes=9000" in text
    assert _ns(ns, "ip", "-br", "link", "show", "gp0").startswith("gp0")  # and nothing was renamed now


def test_earlier_netplan_link_file_is_reported(tmp_path, netns):
    _ns_name, wrapper = netns
    run_dir = tmp_path / "out/run-network"
    run_dir.mkdir(parents=True)
    netplan = run_dir / "10-netplan-gv0.link"
    netplan.write_text("[Match]\nOriginalName=gv0\n\n[Link]\nWakeOnLan=off\n")
    res = _run(tmp_path, wrapper, {"mtu": 4000, "persist_method": "link"})
    assert res.status == "ok", res.message
    out = res.results[TASK]
    assert out["link_shadowed_by"] == str(netplan)
    assert any(str(netplan) in w and "changes nothing at boot" in w for w in out["warnings"])


def test_naming_of_the_replaced_file_is_carried_over_and_old_file_removed(tmp_path, netns):
    """Ours takes the place of 99-default.link for this NIC (only the first match applies): its NamePolicy= etc. are
    carried over, or the NIC would come up with its kernel name. Our 60-gpufleet-gv0.link of older releases
    (MACAddress= + Name=) is removed, with a diff, and check mode predicts both."""
    _ns_name, wrapper = netns
    lib = tmp_path / "out/lib-network"
    lib.mkdir(parents=True)
    (lib / "99-default.link").write_text(
        "[Match]\nOriginalName=*\n\n[Link]\nNamePolicy=keep kernel database onboard slot path\n"
        "AlternativeNamesPolicy=database onboard slot path\nMACAddressPolicy=persistent\n"
    )
    legacy = tmp_path / "out/network/60-gpufleet-gv0.link"
    legacy.parent.mkdir(parents=True)
    legacy.write_text(
        "# Managed by gpufleet (gpufleet.tuning.nic_settings)\n[Match]\nMACAddress=02:00:00:00:aa:01\n\n"
        "[Link]\nName=gv0\nMTUBytes=4000\n"
    )
    check = _run(tmp_path, wrapper, {"mtu": 4000, "persist_method": "link"}, check=True)
    assert check.status == "ok" and check.results[TASK]["persisted"]["removed"] == [str(legacy)]
    assert legacy.exists() and not (tmp_path / "out/network/90-gpufleet-gv0.link").exists()
    res = _run(tmp_path, wrapper, {"mtu": 4000, "persist_method": "link"})
    out = res.results[TASK]
    assert res.status == "ok" and out["changed"] is True
    assert out["persisted"]["replaces"] == str(lib / "99-default.link")
    assert out["persisted"]["removed"] == [str(legacy)] and not legacy.exists()
    text = (tmp_path / "out/network/90-gpufleet-gv0.link").read_text()
    assert "NamePolicy=keep kernel database onboard slot path\n" in text and "MACAddressPolicy=persistent" in text
    assert not [line for line in text.splitlines() if line.startswith("Name=")]
    again = _run(tmp_path, wrapper, {"mtu": 4000, "persist_method": "link"})
    assert again.results[TASK]["changed"] is False


# --- our [Match] evaluator against systemd-udevd's own ------------------------------------------------------------

UDEV_SCRIPT = r"""
import json, subprocess, sys
sys.path.insert(0, "/repo/.collections")
from ansible_collections.gpufleet.tuning.plugins.module_utils import link_files, systemd_unit
from ansible_collections.gpufleet.tuning.plugins.module_utils.hostfs import HostFS

def sh(*argv):
    proc = subprocess.run(argv, capture_output=True, text=True)
    return proc.stdout + proc.stderr
for dev, peer in (("va0", "va1"), ("vb0", "vb1")):
    sh("ip", "link", "add", dev, "type", "veth", "peer", "name", peer)
    sh("ip", "link", "set", dev, "address", "02:00:00:00:aa:01")  # one current MAC, like bond members
fs, d, out = HostFS("/"), "/etc/systemd/network", []
subprocess.run(["mkdir", "-p", d])

def applied(dev):
    text = sh("udevadm", "test-builtin", "net_setup_link", "/sys/class/net/" + dev)
    # "va0: Config file /etc/systemd/network/50-case.link is applied"
    return [line.split("Config file ", 1)[1].split()[0] for line in text.splitlines()
            if "Config file " in line and "appl" in line]

for case in json.loads(sys.argv[1]):
    with open(d + "/50-case.link", "w") as f:
        f.write("[Match]\n" + "\n".join(case) + "\n\n[Link]\nMTUBytes=1400\n")
    for dev in ("va0", "vb0"):
        facts = link_files.link_facts(fs, dev, "veth", None, None)
        match = systemd_unit.parse_unit_file(open(d + "/50-case.link").read()).get("Match", [])
        ours = link_files.link_match(match, facts)[0]
        out.append({"case": case, "dev": dev, "systemd": applied(dev) == [d + "/50-case.link"], "ours": ours})
subprocess.run(["rm", "-f", d + "/50-case.link"])
facts = link_files.link_facts(fs, "va0", "veth", None, None)
with open(d + "/10-netplan-va0.link", "w") as f:
    f.write("[Match]\nOriginalName=va0\n\n[Link]\nWakeOnLan=off\n")
near = link_files.link_neighbours(fs, link_files.LINK_DIRS, link_files.link_file_name("va0"), facts)
out.append({"shadow": near["shadowed_by"], "systemd": applied("va0")})
print(json.dumps(out))
"""
MATCH_CASES = [
    ["MACAddress=02:00:00:00:aa:01"],
    ["PermanentMACAddress=02:00:00:00:aa:01"],
    ["OriginalName=!va*"],
    ["OriginalName=v?0 zz"],
    ["OriginalName=va*", "OriginalName=!va0"],
    ["OriginalName=va0", "OriginalName=", "OriginalName=vb0"],
    ["Driver=veth", "OriginalName=vb0"],
    ["Driver=mlx5_core"],
    ["Type=ether"],
    ["Type=bond"],
    ["Path=pci-*"],
    ["Path=!pci-*"],
]


def test_match_evaluator_agrees_with_systemd_udevd(tmp_path):
    """In a container of our own (own network namespace), systemd-udevd's `udevadm test-builtin net_setup_link`
    says which .link file applies to two veths with one current MAC; our evaluator must say the same for each
    [Match] case, and find the netplan-style file that systemd applies instead of ours. Needs an image with udev
    (GPUFLEET_UDEV_IMAGE, default the lab's systemd image)."""
    image = os.environ.get("GPUFLEET_UDEV_IMAGE", "localhost/gpufleet-debian12-systemd:current")
    if not shutil.which("podman") or subprocess.run(["podman", "image", "exists", image]).returncode != 0:
        pytest.skip(f"podman image {image} is not here")
    if subprocess.run(["podman", "run", "--rm", "--network", "none", image, "sh", "-c", "command -v udevadm"],
                      capture_output=True).returncode != 0:  # fmt: skip
        pytest.skip(f"{image} has no udevadm (install udev in it, or set GPUFLEET_UDEV_IMAGE)")
    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        ["podman", "run", "--rm", "--network", "none", "--cap-add", "NET_ADMIN", "-v", f"{repo}:/repo:ro", image,
         "python3", "-c", UDEV_SCRIPT, json.dumps(MATCH_CASES)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    *cases, shadow = json.loads(proc.stdout)
    assert len(cases) == 2 * len(MATCH_CASES)
    disagree = [c for c in cases if c["ours"] != ("yes" if c["systemd"] else "no")]
    assert not disagree, disagree
    assert shadow["systemd"] == [shadow["shadow"]] == ["/etc/systemd/network/10-netplan-va0.link"]
