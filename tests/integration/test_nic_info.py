"""nic_info through real Ansible (ansible-runner), one playbook run over every scenario.

- fixture hosts: a /sys + /proc/sys/net tree from tests/sim/host/netroot.py and the recorded outputs of
  five drivers served by tests/fixtures/ethtool/fake-ethtool (per-host FAKE_ETHTOOL_DIR);
- namespace hosts: a real veth pair in network namespaces created here, the module run inside them
  (ansible_python_interpreter is a wrapper doing `ip netns exec NS python`), with `ethtool -K` toggles,
  MTU, channels and per-namespace sysctls (net.ipv4.tcp_rmem, tcp_mtu_probing) set inside one of them;
- RTT to a TCP listener started here on 127.0.0.1, a closed port and an unresolvable name;
- operator errors: bad interface names, ethtool_path, root and peers fail with a message naming the option.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import labkit
import pytest
import yaml
from ansible_collections.gpufleet.tuning.plugins.module_utils import ethtool

from gpufleet.runner import run_playbook

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
ETHTOOL_FIX = REPO / "tests" / "fixtures" / "ethtool"
FAKE_ETHTOOL = ETHTOOL_FIX / "fake-ethtool"
TASK = "Read NIC state"

PLAYBOOK = f"""\
---
- name: Run nic_info against simulated and namespaced hosts
  hosts: all
  gather_facts: false
  environment:
    FAKE_ETHTOOL_DIR: "{{{{ fake_ethtool_dir | default('') }}}}"
    FAKE_ETHTOOL_STATE: "{{{{ fake_ethtool_state | default('') }}}}"
  tasks:
    - name: {TASK}
      gpufleet.tuning.nic_info:
        interfaces: "{{{{ nic_interfaces | default(omit) }}}}"
        root: "{{{{ nic_root | default('/') }}}}"
        ethtool_path: "{{{{ nic_ethtool_path | default(omit) }}}}"
        peers: "{{{{ nic_peers | default(omit) }}}}"
        peer_timeout: "{{{{ nic_peer_timeout | default(omit) }}}}"
        stats_interval: "{{{{ nic_stats_interval | default(omit) }}}}"
"""

BAD_NAMES = {
    "bad_semicolon": ("eth0;reboot", "contains ';'"),
    "bad_dotdot": ("../x", "contains '/'"),
    "bad_long": ("eth0123456789abc", "longer than 15 characters"),
    "bad_subst": ("$(id)", "contains '$', '(', ')'"),
}


def load_netroot():
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpufleet_sim_netroot", REPO / "tests/sim/host/netroot.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _sh(*argv, check=True):
    return subprocess.run(list(argv), capture_output=True, text=True, check=check)


def recorded(driver):
    """[(ifname, speed, mtu)] of the recorded interfaces of ``driver``."""
    out = []
    for folder in sorted(p for p in (ETHTOOL_FIX / driver).iterdir() if p.is_dir()):
        out.append((folder.name, int((folder / "speed").read_text()), int((folder / "mtu").read_text())))
    return out


DRIVERS = ["mlx5_core", "ice", "ena", "virtio_net", "bnxt_en"]


class Namespaces:
    """Two network namespaces with a veth pair each: `plain` as created, `tuned` changed from inside."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.names = {"plain": f"gpft{os.getpid()}p", "tuned": f"gpft{os.getpid()}t"}
        self.created: list[str] = []
        self.skip_reason = None
        self.wrappers: dict[str, str] = {}
        self.expect_channels = None
        self.host_sysctls_before = self.host_sysctls()

    @staticmethod
    def host_sysctls():
        return {k: Path(f"/proc/sys/net/ipv4/{k}").read_text() for k in ("tcp_rmem", "tcp_mtu_probing")}

    def setup(self):
        if shutil.which("ip") is None:
            self.skip_reason = "iproute2 (ip) is not installed"
            return
        if shutil.which("ethtool") is None:
            self.skip_reason = "ethtool is not installed (apt-get install ethtool)"
            return
        for key, ns in self.names.items():
            res = _sh("ip", "netns", "add", ns, check=False)
            if res.returncode != 0:
                self.skip_reason = f"ip netns add is not permitted here: {res.stderr.strip()}"
                return
            self.created.append(ns)
            _sh("ip", "-n", ns, "link", "add", "va", "type", "veth", "peer", "name", "vb")
            for dev in ("lo", "va", "vb"):
                _sh("ip", "-n", ns, "link", "set", dev, "up")
            wrapper = self.tmp / f"python-in-{key}"
            wrapper.write_text(f'#!/bin/sh\nexec ip netns exec {ns} {sys.executable} "$@"\n')
            wrapper.chmod(0o755)
            self.wrappers[key] = str(wrapper)
        plain, tuned = self.names["plain"], self.names["tuned"]
        # Everything below runs inside the namespaces: the host's settings are never touched.
        _sh("ip", "netns", "exec", plain, "ethtool", "-K", "va", "tso", "on", "gro", "on")
        _sh("ip", "netns", "exec", tuned, "ethtool", "-K", "va", "tso", "off", "gro", "off")
        _sh("ip", "-n", tuned, "link", "set", "va", "mtu", "9000")
        for key, value in (("tcp_rmem", "4096 87380 67108864"), ("tcp_mtu_probing", "1")):
            _sh("ip", "netns", "exec", tuned, sys.executable, "-c",
                "import sys; open(sys.argv[1], 'w').write(sys.argv[2])", f"/proc/sys/net/ipv4/{key}", value)
        if (os.cpu_count() or 1) >= 2 and _sh("ip", "netns", "exec", tuned, "ethtool", "-L", "va", "rx", "2",
                                              "tx", "2", check=False).returncode == 0:
            self.expect_channels = 2

    def in_ns(self, key, *argv):
        return _sh("ip", "netns", "exec", self.names[key], *argv, check=False)

    def teardown(self):
        for ns in self.created:
            _sh("ip", "netns", "del", ns, check=False)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("nic_info")
    netroot = load_netroot()
    base = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    hosts: dict[str, dict] = {}

    # (a) one simulated host per driver, every recorded interface of it, default discovery.
    for driver in DRIVERS:
        nics = [{"name": name, "driver": driver, "speed": speed, "mtu": mtu, "numa_node": n % 2}
                for n, (name, speed, mtu) in enumerate(recorded(driver))]
        root = netroot.build_netroot(tmp / f"root-{driver}", nics=nics)
        hosts[f"fx_{driver}"] = {**base, "nic_root": str(root), "nic_ethtool_path": str(FAKE_ETHTOOL),
                                 "fake_ethtool_dir": str(ETHTOOL_FIX / driver)}

    # A host with several drivers (a directory of links), a NIC the recordings do not know, a virtual
    # interface, a missing one, tuned TCP and InfiniBand.
    mixed_dir = tmp / "ethtool-mixed"
    mixed_dir.mkdir()
    for link, target in {"eth0": "mlx5_core/ens1f0np0", "eth1": "ice/eth0", "eth2": "ena/ens5",
                         "eth4": "mlx5_core/eth0"}.items():
        os.symlink(ETHTOOL_FIX / target, mixed_dir / link)
    mixed_root = netroot.build_netroot(
        tmp / "root-mixed",
        nics=[{"name": "eth0", "driver": "mlx5_core", "speed": 200000, "mtu": 9000, "numa_node": 1},
              {"name": "eth1", "driver": "ice", "speed": 100000},
              {"name": "eth2", "driver": "ena", "speed": -1, "mtu": 9001},
              {"name": "eth3", "driver": "bnxt_en", "bus_info": "0000:c1:00.0"},
              {"name": "eth4", "driver": "mlx5_core", "operstate": "down", "speed": None},
              {"name": "docker0", "physical": False, "driver": None, "operstate": "down"}],
        tcp={"rmem": [4096, 87380, 67108864], "wmem": [4096, 65536, 67108864], "rmem_max": 67108864,
             "wmem_max": 67108864, "congestion_control": "bbr",
             "available_congestion_control": ["reno", "cubic", "bbr"], "default_qdisc": "fq", "mtu_probing": 1},
        infiniband=[{"device": "mlx5_2", "port": 1, "rate_gbps": 400},
                    {"device": "mlx5_3", "port": 1, "state": "DOWN", "phys_state": "Polling", "rate_gbps": 400}],
    )
    # FAKE_ETHTOOL_STATE: the second `ethtool -S` reading finds the counters of show-stats.after (eth4's
    # rx_out_of_buffer and eth2's pps_allowance_exceeded grow between the two readings).
    (tmp / "ethtool-state").mkdir()
    hosts["fx_mixed"] = {**base, "nic_root": str(mixed_root), "nic_ethtool_path": str(FAKE_ETHTOOL),
                         "fake_ethtool_dir": str(mixed_dir), "fake_ethtool_state": str(tmp / "ethtool-state"),
                         "nic_interfaces": ["eth0", "eth1", "eth2", "eth3", "eth4", "docker0", "eth9"]}

    # The machine the tests run on, as it is (ethtool from PATH).
    hosts["real_host"] = dict(base)

    # (c) RTT to a listener started here, a closed port, a name that does not resolve.
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(32)
    closed = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    closed.bind(("127.0.0.1", 0))
    closed_port = closed.getsockname()[1]
    closed.close()
    peers = [{"name": "local", "host": "127.0.0.1", "port": listener.getsockname()[1]},
             {"name": "closed", "host": "127.0.0.1", "port": closed_port},
             {"name": "nowhere", "host": "no-such-host.invalid"}]
    hosts["rtt"] = {**base, "nic_interfaces": [], "nic_peers": peers, "nic_peer_timeout": 2}

    # (d) operator errors.
    for host, (name, _why) in BAD_NAMES.items():
        hosts[host] = {**base, "nic_interfaces": ["lo", name]}
    hosts["bad_ethtool_path"] = {**base, "nic_ethtool_path": "/nonexistent/ethtool"}
    hosts["bad_root"] = {**base, "nic_root": str(tmp / "no-such-root")}
    hosts["bad_peer_port"] = {**base, "nic_interfaces": [],
                              "nic_peers": [{"name": "x", "host": "127.0.0.1", "port": 70000}]}
    hosts["bad_peer_timeout"] = {**base, "nic_interfaces": [], "nic_peer_timeout": 0}
    hosts["bad_stats_interval"] = {**base, "nic_interfaces": [], "nic_stats_interval": 30}

    # (b) real veth pairs in network namespaces; from here on, always delete them.
    ns = Namespaces(tmp)
    inside = {}
    try:
        try:
            ns.setup()
        except subprocess.CalledProcessError as exc:
            raise AssertionError(f"namespace setup failed: {exc.cmd}: {exc.stderr}") from exc
        if ns.skip_reason is None:
            hosts["ns_plain"] = {**base, "ansible_python_interpreter": ns.wrappers["plain"],
                                 "nic_interfaces": ["va", "vb"]}
            hosts["ns_tuned"] = {**base, "ansible_python_interpreter": ns.wrappers["tuned"], "nic_interfaces": ["va"]}
            hosts["ns_discover"] = {**base, "ansible_python_interpreter": ns.wrappers["plain"]}

        inventory = tmp / "hosts.yml"
        inventory.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
        playbook = tmp / "nic_info.yml"
        playbook.write_text(PLAYBOOK)
        result = run_playbook(str(playbook), str(inventory), forks=8)
        # What the namespaces looked like from inside, for comparison.
        if ns.skip_reason is None:
            for key in ("plain", "tuned"):
                inside[key] = {
                    "tcp_rmem": ns.in_ns(key, "cat", "/proc/sys/net/ipv4/tcp_rmem").stdout,
                    "json_k": ns.in_ns(key, "ethtool", "--json", "-k", "va").returncode == 0,
                }
    finally:
        listener.close()
        ns.teardown()
    assert set(result.hosts) == set(hosts), f"missing hosts: {set(hosts) - set(result.hosts)}"
    return {"hosts": result.hosts, "ns": ns, "inside": inside, "peers": peers}


def _ok(fleet, name) -> dict:
    host = fleet["hosts"][name]
    assert host.status == "ok", f"{name}: {host.status}: {host.message}"
    res = host.results[TASK]
    assert res["changed"] is False
    return res["network"]


def _nics(net) -> dict:
    return {n["name"]: n for n in net["nics"]}


def _needs_ns(fleet):
    if fleet["ns"].skip_reason:
        pytest.skip(fleet["ns"].skip_reason)


# --- (a) recorded drivers through fake-ethtool -------------------------------------------------


@pytest.mark.parametrize("driver", DRIVERS)
def test_recorded_driver_end_to_end(fleet, driver):
    net = _ok(fleet, f"fx_{driver}")
    nics = _nics(net)
    assert sorted(nics) == sorted(name for name, _s, _m in recorded(driver))
    for n, (name, speed, mtu) in enumerate(recorded(driver)):
        got = nics[name]
        folder = ETHTOOL_FIX / driver / name
        assert got["present"] is True and got["physical"] is True
        assert got["driver"] == driver
        assert got["mtu"] == mtu and got["numa_node"] == n % 2 and got["operstate"] == "up"
        assert got["speed_mbps"] == (speed if speed > 0 else None)
        # The module's values are exactly what the recorded text says, whatever format it read.
        drv = ethtool.parse_driver_text((folder / "driver").read_text())
        assert {k: got[k] for k in drv} == drv
        assert got["rings"] == ethtool.parse_rings_text((folder / "show-ring").read_text())
        assert got["coalescing"] == ethtool.parse_coalesce_text((folder / "show-coalesce").read_text())
        assert got["channels"] == ethtool.parse_channels_text((folder / "show-channels").read_text())
        features, fixed = ethtool.parse_features_text((folder / "show-features").read_text())
        assert got["offloads"] == features and got["offloads_fixed"] == fixed
        # Per section, JSON was used exactly where the recording has it.
        for section, fname in (("rings", "show-ring"), ("offloads", "show-features"),
                               ("coalescing", "show-coalesce"), ("channels", "show-channels"),
                               ("driver", "driver")):
            want = "ethtool-json" if (folder / f"{fname}.json").exists() else "ethtool-text"
            assert got["sources"][section] == want, f"{name} {section}"
        assert got["source"] == "ethtool-json"  # every recording has at least -k JSON
        expected_unsupported = set()
        # ethtool -S: read (twice) for drivers with a ring-overflow counter; the same counters as the recording.
        if driver in ethtool.DROP_COUNTERS:
            want = ethtool.drop_counters(driver, ethtool.parse_stats_text((folder / "show-stats").read_text()))
            assert {k: {c: v["total"] for c, v in got["drops"][k].items()} for k in want} == want
            assert all(v["delta"] == 0 for k in want for v in got["drops"][k].values())  # no state: nothing grows
            assert got["drops"]["interval_s"] >= 0.9 and got["sources"]["drops"] == "ethtool-text"
        else:
            assert got["drops"] is None and f"driver {driver} has no ethtool -S counter" in got["unsupported"]["drops"]
            expected_unsupported.add("drops")
        if speed <= 0:
            expected_unsupported.add("speed_mbps")
        if not drv["firmware_version"]:
            expected_unsupported.add("firmware_version")
        assert set(got["unsupported"]) == expected_unsupported, got["unsupported"]
    assert net["tcp"]["rmem"] == [4096, 131072, 6291456] and net["tcp"]["congestion_control"] == "cubic"
    assert net["infiniband"] == [] and net["peers"] == []


def test_recorded_values_that_matter_for_long_links(fleet):
    ice = _nics(_ok(fleet, "fx_ice"))["eth0"]
    assert ice["rings"] == {"rx": 2048, "tx": 256, "rx_max": 8160, "tx_max": 8160}
    ena = _nics(_ok(fleet, "fx_ena"))["ens5"]
    assert ena["offloads"]["tcp-segmentation-offload"] is False and "tx-tcp-segmentation" in ena["offloads_fixed"]
    assert ena["mtu"] == 9001 and ena["rings"]["rx_max"] == 16384
    mlx = _nics(_ok(fleet, "fx_mlx5_core"))
    assert mlx["eth0"]["coalescing"]["adaptive_rx"] is False  # duplicate-key JSON read right
    assert mlx["ens1f0np0"]["channels"]["combined"] == 64
    assert mlx["ens1f0np0"]["firmware_version"] == "28.40.1000 (MT_0000000834)"
    bnxt = _nics(_ok(fleet, "fx_bnxt_en"))["enp193s0f0np0"]
    assert bnxt["coalescing"]["adaptive_rx"] is True and bnxt["coalescing"]["adaptive_tx"] is None
    virtio = _nics(_ok(fleet, "fx_virtio_net"))["eth0"]
    assert virtio["speed_mbps"] is None and "-1" in virtio["unsupported"]["speed_mbps"]


def test_mixed_host(fleet):
    net = _ok(fleet, "fx_mixed")
    assert [n["name"] for n in net["nics"]] == ["eth0", "eth1", "eth2", "eth3", "eth4", "docker0", "eth9"]
    nics = _nics(net)
    assert nics["eth0"]["driver"] == "mlx5_core" and nics["eth0"]["speed_mbps"] == 200000
    assert nics["eth0"]["numa_node"] == 1 and nics["eth0"]["sources"]["channels"] == "ethtool-json"
    assert nics["eth1"]["driver"] == "ice" and nics["eth1"]["rings"]["rx_max"] == 8160
    assert nics["eth2"]["driver"] == "ena" and nics["eth2"]["mtu"] == 9001
    # eth3: in sysfs, unknown to the recorded ethtool: sysfs gives the driver, ethtool's error the reasons.
    eth3 = nics["eth3"]
    assert eth3["present"] and eth3["driver"] == "bnxt_en" and eth3["bus_info"] == "0000:c1:00.0"
    assert eth3["rings"] is None and "No such device" in eth3["unsupported"]["rings"]
    assert eth3["source"] is None
    # Two ethtool -S readings a second apart (one wait for the host): eth4's ring overflowed in between; ENA's
    # allowance counter grew (the instance's limit, apart from the ring counter); ice's port drops did not move.
    assert nics["eth4"]["drops"]["ring"] == {"rx_out_of_buffer": {"total": 1207310, "delta": 3366}}
    assert 0.9 <= nics["eth4"]["drops"]["interval_s"] < 5
    assert nics["eth2"]["drops"]["ring"] == {"rx_drops": {"total": 0, "delta": 0}}
    assert nics["eth2"]["drops"]["allowance"]["pps_allowance_exceeded"] == {"total": 1390, "delta": 208}
    assert nics["eth1"]["drops"]["other"] == {"rx_dropped.nic": {"total": 1532, "delta": 0}}
    assert nics["eth0"]["drops"]["ring"] == {"rx_out_of_buffer": {"total": 0, "delta": 0}}
    assert eth3["drops"] is None and "bnxt_en has no ethtool -S counter" in eth3["unsupported"]["drops"]
    eth4 = nics["eth4"]
    assert eth4["operstate"] == "down" and eth4["speed_mbps"] is None
    assert eth4["unsupported"]["speed_mbps"].startswith("not present:")
    docker0 = nics["docker0"]
    assert docker0["present"] and docker0["physical"] is False and docker0["numa_node"] is None
    eth9 = nics["eth9"]
    assert eth9["present"] is False and eth9["offloads"] is None and eth9["offloads_fixed"] == []
    tcp = net["tcp"]
    assert tcp["rmem"] == [4096, 87380, 67108864] and tcp["wmem"] == [4096, 65536, 67108864]
    assert tcp["rmem_max"] == 67108864 and tcp["congestion_control"] == "bbr" and tcp["default_qdisc"] == "fq"
    assert tcp["available_congestion_control"] == ["reno", "cubic", "bbr"] and tcp["mtu_probing"] == 1
    assert tcp["unsupported"] == {}
    assert net["infiniband"] == [
        {"device": "mlx5_2", "port": 1, "state": "ACTIVE", "phys_state": "LinkUp", "rate_gbps": 400.0,
         "link_layer": "InfiniBand"},
        {"device": "mlx5_3", "port": 1, "state": "DOWN", "phys_state": "Polling", "rate_gbps": 400.0,
         "link_layer": "InfiniBand"},
    ]


def test_real_host(fleet):
    net = _ok(fleet, "real_host")
    for entry in net["nics"]:
        name = entry["name"]
        assert entry["present"] and entry["physical"]
        assert os.path.exists(f"/sys/class/net/{name}/device")
        link = os.path.realpath(f"/sys/class/net/{name}/device/driver")
        if shutil.which("ethtool"):
            assert entry["driver"] == os.path.basename(link), entry["unsupported"]
    assert "lo" not in _nics(net)
    assert net["tcp"]["rmem"] == [int(x) for x in Path("/proc/sys/net/ipv4/tcp_rmem").read_text().split()]
    assert net["tcp"]["congestion_control"] == Path("/proc/sys/net/ipv4/tcp_congestion_control").read_text().strip()


# --- (b) real veth pairs in network namespaces ---------------------------------------------------


def test_namespace_defaults(fleet):
    _needs_ns(fleet)
    net = _ok(fleet, "ns_plain")
    va, vb = net["nics"]
    assert (va["name"], vb["name"]) == ("va", "vb")
    for entry in (va, vb):
        assert entry["present"] and entry["physical"] is False and entry["driver"] == "veth"
        assert entry["mtu"] == 1500 and entry["operstate"] == "up" and entry["numa_node"] is None
        # veth has no rings or coalescing: the ethtool error is the reason, not a failure.
        assert entry["rings"] is None and "Operation not supported" in entry["unsupported"]["rings"]
        assert entry["coalescing"] is None and "Operation not supported" in entry["unsupported"]["coalescing"]
        assert entry["channels"]["rx"] == 1 and entry["channels"]["tx"] == 1
        assert entry["sources"]["driver"] == "ethtool-text"
        # veth answers ethtool -S (XDP and peer counters) but has no ring to overflow: not read, said why.
        assert entry["drops"] is None and "driver veth has no ethtool -S counter" in entry["unsupported"]["drops"]
        want = "ethtool-json" if fleet["inside"]["plain"]["json_k"] else "ethtool-text"
        assert entry["sources"]["offloads"] == want
    assert va["offloads"]["tcp-segmentation-offload"] is True
    assert va["offloads"]["generic-receive-offload"] is True
    tcp = net["tcp"]
    assert tcp["rmem"] == [int(x) for x in fleet["inside"]["plain"]["tcp_rmem"].split()]
    # Global sysctls hidden inside a namespace are facts with a reason.
    assert tcp["default_qdisc"] is None and tcp["unsupported"]["default_qdisc"].startswith("not present:")
    assert isinstance(tcp["rmem_max"], int)


def test_namespace_toggles_change_what_is_reported(fleet):
    _needs_ns(fleet)
    plain = _nics(_ok(fleet, "ns_plain"))["va"]
    tuned_net = _ok(fleet, "ns_tuned")
    (tuned,) = tuned_net["nics"]
    assert tuned["offloads"]["tcp-segmentation-offload"] is False
    assert tuned["offloads"]["generic-receive-offload"] is False
    assert plain["offloads"]["tcp-segmentation-offload"] is True
    assert tuned["mtu"] == 9000 and plain["mtu"] == 1500
    if fleet["ns"].expect_channels:
        assert tuned["channels"]["rx"] == tuned["channels"]["tx"] == fleet["ns"].expect_channels
    assert tuned_net["tcp"]["rmem"] == [4096, 87380, 67108864]
    assert tuned_net["tcp"]["mtu_probing"] == 1
    assert tuned_net["tcp"]["rmem"] != _ok(fleet, "ns_plain")["tcp"]["rmem"]


def test_namespace_has_no_physical_nics(fleet):
    _needs_ns(fleet)
    assert _ok(fleet, "ns_discover")["nics"] == []


def test_host_sysctls_untouched(fleet):
    _needs_ns(fleet)
    assert Namespaces.host_sysctls() == fleet["ns"].host_sysctls_before
    listed = _sh("ip", "netns", "list").stdout
    assert not any(name in listed for name in fleet["ns"].names.values()), "namespaces left behind"


# --- (c) RTT -------------------------------------------------------------------------------------


def test_rtt_to_listener_closed_port_and_unresolvable(fleet):
    net = _ok(fleet, "rtt")
    assert net["nics"] == []
    local, closed, nowhere = net["peers"]
    assert local["name"] == "local" and local["port"] == fleet["peers"][0]["port"]
    assert isinstance(local["rtt_ms"], float) and 0 <= local["rtt_ms"] < 1000 and local["error"] is None
    assert closed["rtt_ms"] is None and "refused" in closed["error"].lower()
    assert nowhere["rtt_ms"] is None and nowhere["error"].startswith("cannot resolve")
    assert nowhere["port"] == 22


# --- (d) operator errors -------------------------------------------------------------------------


def _no_traceback(res):
    """A clean fail_json: no Python traceback anywhere in the result, and no facts."""
    assert "Traceback" not in res.message
    failed = res.results.get(TASK, {})  # kept by the runner when it records failed tasks
    assert "network" not in failed
    assert "Traceback (most recent call last)" not in str(failed)


@pytest.mark.parametrize("host", sorted(BAD_NAMES))
def test_bad_interface_names_fail_clearly(fleet, host):
    name, why = BAD_NAMES[host]
    res = fleet["hosts"][host]
    assert res.status == "failed"
    assert f"interfaces: invalid interface name {name!r}: {why}" in res.message
    assert "1-15 characters" in res.message
    _no_traceback(res)


@pytest.mark.parametrize(
    "host, message",
    [
        ("bad_ethtool_path", "ethtool_path: not an executable file: /nonexistent/ethtool"),
        ("bad_root", "root: not a directory"),
        ("bad_peer_port", "peers[0].port: must be 1-65535, got 70000"),
        ("bad_peer_timeout", "peer_timeout: must be a number of seconds above 0"),
        ("bad_stats_interval", "stats_interval: must be a number of seconds from 0 to 10, got 30.0"),
    ],
)
def test_bad_options_fail_clearly(fleet, host, message):
    res = fleet["hosts"][host]
    labkit.assert_clear_error(res, message)
    _no_traceback(res)
