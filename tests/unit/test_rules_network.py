"""The rules of rules/network.py: NET-MTU-001, NET-RING-001, NET-OFFL-001 and NET-TCP-001..004, a passing and a failing
case each (CASES), and their tests.

NET-MTU-001 and NET-RING-001 judge what the vendors say matters (issue 13 §2).

MTU: against the MTU the policy declares for the NIC's network (network.mtu by name or glob, network.min_mtu for a
jumbo-frame fabric); with nothing declared only below the IPv6 minimum 1280. Rings: against the drivers' own
ring-overflow counters read twice (nic_info ``drops``), never against the ratio to the maximum.
The facts of the last tests come from the real reader (module_utils/nic.py) over recorded ``ethtool -S`` outputs.
"""

from __future__ import annotations

import os
import subprocess

import pytest
import rule_cases
from ansible_collections.gpufleet.tuning.plugins.module_utils import nic as nic_mod
from ansible_collections.gpufleet.tuning.plugins.module_utils import rules
from ansible_collections.gpufleet.tuning.plugins.module_utils.hostfs import HostFS
from ansible_collections.gpufleet.tuning.plugins.module_utils.policy import PolicyError, validate
from ansible_collections.gpufleet.tuning.plugins.module_utils.rules import network
from rule_cases import evaluate, nics, set_, tcp
from rule_facts import healthy
from test_nic import ETHTOOL_FIX, FAKE_ETHTOOL, netroot

# rule id -> (mutation that still passes (None: the healthy host), mutation that fails[, policy for both])
CASES = {
    # Nothing declared: a cloud's own MTU (GCP 1460) passes; below the IPv6 minimum 1280 fails.
    "NET-MTU-001": (lambda f: nics(f)[0].update(mtu=1460), lambda f: nics(f)[0].update(mtu=1200)),
    # Rings far below their maximum with no drops pass; a ring-drop counter growing between readings fails.
    "NET-RING-001": (
        lambda f: nics(f)[0]["rings"].update(rx=1024, tx=1024),
        lambda f: nics(f)[0]["drops"]["ring"]["rx_out_of_buffer"].update(total=1207310, delta=3366),
    ),
    "NET-OFFL-001": (None, lambda f: nics(f)[1]["offloads"].update({"generic-receive-offload": False})),
    "NET-TCP-001": (None, lambda f: tcp(f).update(rmem=[4096, 131072, 6291456], wmem=[4096, 16384, 4194304])),
    "NET-TCP-002": (None, set_(tcp, congestion_control="cubic")),
    "NET-TCP-003": (None, set_(tcp, mtu_probing=0)),
    "NET-TCP-004": (None, set_(tcp, slow_start_after_idle=1)),
}

test_rule_passes, test_rule_fails = rule_cases.pass_and_fail(CASES)


def _nic(name, mtu=1500, driver="gve", rings=None, drops=None):
    return {
        "name": name,
        "present": True,
        "physical": True,
        "operstate": "up",
        "mtu": mtu,
        "driver": driver,
        "rings": rings,
        "drops": drops,
    }


def _mtu(policy, *nics):
    return network.check_mtu({"network": {"nics": list(nics)}}, validate(policy))


def _rings(*nics, policy=None):
    return network.check_rings({"network": {"nics": list(nics)}}, validate(policy or {}))


# --- NET-MTU-001 -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "what, mtu",
    [
        ("Google Cloud gVNIC on the VPC default", 1460),  # old rule: fail (global floor 1500)
        ("VXLAN / OpenStack overlay", 1450),  # old rule: fail
        ("standard Ethernet", 1500),
        ("AWS inside a VPC", 9001),
        ("IPv6 minimum", 1280),
    ],
)
def test_nothing_declared_a_clouds_own_mtu_passes(what, mtu):
    finding = _mtu({}, _nic("ens4", mtu))
    assert finding["status"] == "pass", (what, finding)
    assert finding["expected"] == {"ens4": ">= 1280 (IPv6 minimum MTU (RFC 8200), nothing declared)"}


def test_nothing_declared_below_the_ipv6_minimum_fails():
    finding = _mtu({}, _nic("ens4", 1200))
    assert finding["status"] == "fail"
    assert finding["items"] == [
        {
            "nic": "ens4",
            "mtu": 1200,
            "expected": 1280,
            "kind": "floor",
            "source": "IPv6 minimum MTU (RFC 8200), nothing declared",
        }
    ]
    assert "IPv6" in finding["message"] and "network.mtu" in finding["message"]


def test_declared_mtu_is_matched_exactly_both_ways():
    policy = {"network": {"mtu": {"ens4": 1460}}}
    assert _mtu(policy, _nic("ens4", 1460))["status"] == "pass"
    low, high = _mtu(policy, _nic("ens4", 1400)), _mtu(policy, _nic("ens4", 1500))
    assert low["status"] == high["status"] == "fail"
    assert "below the network's 1460 (network.mtu.ens4)" in low["message"]
    assert "above the network's 1460 (network.mtu.ens4)" in high["message"]  # frames the VPC drops
    assert high["items"][0]["kind"] == "exact" and high["expected"] == {"ens4": "== 1460 (network.mtu.ens4)"}


def test_globs_exact_name_and_longest_glob_win():
    policy = {"network": {"mtu": {"ens*": 9001, "ens1f*": 9000, "ens1f1np1": 1500, "ib*": 4092}}}
    pol = validate(policy)["network"]
    assert network.declared_mtu(pol, "ens5") == (9001, "ens*")
    assert network.declared_mtu(pol, "ens1f0np0") == (9000, "ens1f*")
    assert network.declared_mtu(pol, "ens1f1np1") == (1500, "ens1f1np1")
    assert network.declared_mtu(pol, "eth0") == (None, None)
    finding = _mtu(policy, _nic("ens5", 9001), _nic("ens1f0np0", 9000), _nic("ens1f1np1", 1500), _nic("eth0", 1460))
    assert finding["status"] == "pass" and "ens1f0np0, ens1f1np1, ens5" in finding["message"]


def test_a_later_layer_removes_a_declaration_with_null():
    # fleet: every ens* NIC on the 9000 fabric; this host's ens4 is its cloud NIC (gpufleet_policy_host).
    layers = validate({"network": {"mtu": {"ens*": 9000, "ens4": None}}})["network"]
    assert network.mtu_expectation(layers, "ens4")["kind"] == "floor"
    assert network.mtu_expectation(layers, "ens5") == {"kind": "exact", "value": 9000, "source": "network.mtu.ens*"}


def test_jumbo_fabric_floor_as_the_demo_fleet_declares_it():
    policy = {"network": {"min_mtu": 9000}}  # inventories/demo, tests/integration/simfleet.py
    assert _mtu(policy, _nic("ens1", 9000), _nic("ens2", 9216))["status"] == "pass"
    finding = _mtu(policy, _nic("ens1", 1500))
    assert finding["status"] == "fail" and "below the fabric's 9000 (network.min_mtu)" in finding["message"]
    # A declared network MTU beats the floor for that NIC (the cloud NIC next to the fabric).
    assert _mtu({"network": {"min_mtu": 9000, "mtu": {"ens4": 1460}}}, _nic("ens4", 1460))["status"] == "pass"


@pytest.mark.parametrize(
    "policy, message",
    [
        ({"network": {"mtu": {"eth0": 70000}}}, "policy.network.mtu.eth0: an MTU is an integer from 68 to 65535"),
        ({"network": {"mtu": {"eth0": "1460"}}}, "policy.network.mtu.eth0: an MTU is an integer"),
        ({"network": {"mtu": {"eth0": True}}}, "policy.network.mtu.eth0: an MTU is an integer"),
        ({"network": {"mtu": {"": 1460}}}, "policy.network.mtu: keys are interface names or globs"),
        ({"network": {"mtu": [1460]}}, "policy.network.mtu: expected dict"),
        ({"network": {"min_mtu": 40}}, "policy.network.min_mtu: an MTU is an integer from 68 to 65535"),
        ({"network": {"ring_min_fraction": 0.5}}, "policy.network.ring_min_fraction: unknown key"),
    ],
)
def test_bad_mtu_policy_names_the_key(policy, message):
    with pytest.raises(PolicyError, match=message.replace(".", r"\.")):
        validate(policy)


# --- NET-RING-001 ------------------------------------------------------------------------------------------


def _drops(ring, other=None, allowance=None, interval=1.0):
    def counters(values):
        return {k: {"total": t, "delta": d} for k, (t, d) in (values or {}).items()}

    return {"interval_s": interval, "ring": counters(ring), "other": counters(other), "allowance": counters(allowance)}


STOCK_RINGS = {
    "mlx5_core": {"rx": 1024, "tx": 1024, "rx_max": 8192, "tx_max": 8192},
    "ice": {"rx": 2048, "tx": 256, "rx_max": 8160, "tx_max": 8160},
    "ena": {"rx": 1024, "tx": 1024, "rx_max": 16384, "tx_max": 1024},
}


@pytest.mark.parametrize(
    "driver, counter", [("mlx5_core", "rx_out_of_buffer"), ("ice", "rx_dropped"), ("ena", "rx_drops")]
)
def test_stock_rings_without_drops_pass(driver, counter):
    # The old rule failed every one of these: defaults far below the hardware maximum.
    finding = _rings(_nic("ens1", driver=driver, rings=STOCK_RINGS[driver], drops=_drops({counter: (0, 0)})))
    assert finding["status"] == "pass", finding


def test_growing_ring_counter_fails_with_the_rate_and_the_ring():
    nic = _nic(
        "ens1", driver="mlx5_core", rings=STOCK_RINGS["mlx5_core"], drops=_drops({"rx_out_of_buffer": (1207310, 3366)})
    )
    finding = _rings(nic)
    assert finding["status"] == "fail"
    assert finding["items"] == [
        {"nic": "ens1", "rx": 1024, "rx_max": 8192, "counters": {"rx_out_of_buffer": 3366}, "interval_s": 1.0}
    ]
    assert "rx_out_of_buffer +3366 in 1.0 s (rx ring 1024 of 8192)" in finding["message"]


@pytest.mark.parametrize(
    "name, driver, rings, drops, expect, said",
    [
        (  # growing at the maximum points at the CPU
            "ens1",
            "mlx5_core",
            {"rx": 8192, "tx": 8192, "rx_max": 8192, "tx_max": 8192},
            _drops({"rx_out_of_buffer": (90, 5)}),
            {"status": "fail"},
            ["already the maximum"],
        ),
        (  # a cumulative count only is a low warning
            "ens1",
            "mlx5_core",
            STOCK_RINGS["mlx5_core"],
            _drops({"rx_out_of_buffer": (48211, 0)}),
            {"status": "warn", "severity": "low"},
            ["since the driver loaded, none during the sample: ens1 rx_out_of_buffer 48211"],
        ),
        (  # ENA's allowance is the instance's limit, reported as information
            "ens5",
            "ena",
            STOCK_RINGS["ena"],
            _drops({"rx_drops": (0, 0)}, allowance={"pps_allowance_exceeded": (1390, 208)}),
            {"status": "warn", "severity": "info"},
            ["allowance (its limits, not rings): ens5 pps_allowance_exceeded +208"],
        ),
        (  # with ring drops as well, the ring is the finding and the allowance is said next to it
            "ens5",
            "ena",
            STOCK_RINGS["ena"],
            _drops({"rx_drops": (12, 12)}, allowance={"pps_allowance_exceeded": (1390, 208)}),
            {"status": "fail"},
            ["rx_drops +12", "allowance"],
        ),
        (  # other NIC drops are named but not judged as rings
            "eth0",
            "ice",
            STOCK_RINGS["ice"],
            _drops({"rx_dropped": (0, 0)}, other={"rx_dropped.nic": (1600, 68)}),
            {"status": "pass"},
            ["rx_dropped.nic +68"],
        ),
        (  # drivers without a ring counter are not judged
            "eth0",
            "virtio_net",
            {"rx": 256, "tx": 256, "rx_max": 1024, "tx_max": 1024},
            None,
            {"status": "skip"},
            ["no NIC reports a ring-overflow counter"],
        ),
    ],
    ids=["at-maximum", "cumulative-only", "ena-allowance", "ena-ring-and-allowance", "other-drops", "no-counter"],
)
def test_ring_verdicts(name, driver, rings, drops, expect, said):
    finding = _rings(_nic(name, driver=driver, rings=rings, drops=drops))
    assert {k: finding[k] for k in expect} == expect, finding
    for text in said:
        assert text in finding["message"]


# --- NET-TCP-001..004 judged against the declared long-haul links; NET-MTU-001 against a declared floor --------


def test_no_declared_links_skips_long_haul_rules():
    facts = healthy()
    facts["links"] = {"source": "none", "peers": []}
    tcp(facts).update(congestion_control="cubic", rmem=[4096, 131072, 6291456])
    findings = evaluate(facts)
    for rule_id in ("NET-TCP-001", "NET-TCP-002", "NET-TCP-003", "NET-TCP-004"):
        assert findings[rule_id]["status"] == "skip"


def test_bbr_unavailable_is_a_warning():
    facts = healthy()
    tcp(facts).update(congestion_control="cubic", available_congestion_control=["reno", "cubic"])
    assert evaluate(facts)["NET-TCP-002"]["status"] == "warn"


def test_congestion_control_per_route():
    """network.congestion_control_scope: routes judges the routes to the long-haul peers' prefixes, not the host
    default (which stays the owner's: cubic here)."""
    link = {"rtt_ms": 180, "bandwidth_gbps": 1, "prefixes": ["198.51.100.0/24", "2001:db8:100::/48"]}
    scope = {
        "site": "ap",
        "sites": {"ap": {"links": {"eu_west": link}}},
        "network": {"congestion_control_scope": "routes"},
    }
    facts = healthy()
    tcp(facts).update(congestion_control="cubic")
    facts["network"]["routes"] = {"198.51.100.0/24": "bbr", "2001:db8:100::/48": "bbr"}
    assert evaluate(facts, scope)["NET-TCP-002"]["status"] == "pass"
    assert evaluate(facts)["NET-TCP-002"]["status"] == "fail"  # scope host: the default is judged
    facts["network"]["routes"]["2001:db8:100::/48"] = None
    finding = evaluate(facts, scope)["NET-TCP-002"]
    assert finding["status"] == "fail" and "2001:db8:100::/48" in finding["message"]
    del facts["network"]["routes"]
    assert evaluate(facts, scope)["NET-TCP-002"]["status"] == "skip"
    del link["prefixes"]
    finding = evaluate(facts, scope)["NET-TCP-002"]
    assert finding["status"] == "fail" and "no prefix is declared" in finding["message"]


def test_tcp_buffer_threshold_is_four_bdp():
    facts = healthy()  # 180 ms x 1 Gbit/s -> BDP 22.5 MB, 4x = 90 MB
    tcp(facts).update(rmem=[4096, 131072, 90_000_000], wmem=[4096, 16384, 90_000_000])
    assert evaluate(facts)["NET-TCP-001"]["status"] == "pass"
    tcp(facts).update(rmem=[4096, 131072, 89_999_999])
    finding = evaluate(facts)["NET-TCP-001"]
    assert finding["status"] == "fail" and finding["expected"]["tcp_rmem_max"] == ">= 90000000"
    assert "4.0 x bandwidth-delay product" in finding["message"]
    two = evaluate(facts, {"network": {"buffer_factor": 2.0}})["NET-TCP-001"]
    assert two["status"] == "pass" and two["expected"]["tcp_rmem_max"] == ">= 45000000"


def test_mtu_policy_for_jumbo_fabrics():
    facts = healthy()
    nics(facts)[0]["mtu"] = 1500
    finding = evaluate(facts, {"network": {"min_mtu": 9000}})["NET-MTU-001"]
    assert finding["status"] == "fail" and finding["items"] == [
        {"nic": "ens1", "mtu": 1500, "expected": 9000, "kind": "min", "source": "network.min_mtu"}
    ]


# --- from recorded ethtool -S through the real reader ----------------------------------------------------------


def _collected(tmp_path, nics, folder, state=True):
    root = netroot.build_netroot(tmp_path / "root", nics=nics)
    env = {**os.environ, "FAKE_ETHTOOL_DIR": str(folder)}
    if state:
        (tmp_path / "state").mkdir()
        env["FAKE_ETHTOOL_STATE"] = str(tmp_path / "state")

    def run(argv):
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
        return proc.returncode, proc.stdout, proc.stderr

    return {"network": nic_mod.collect(HostFS(str(root)), run, ethtool=str(FAKE_ETHTOOL), sleep=lambda s: None)}


def test_recorded_mlx5_nics_judged_by_their_counters(tmp_path):
    facts = _collected(
        tmp_path,
        [{"name": n, "driver": "mlx5_core"} for n in ("ens1f0np0", "enp1s0f0np0", "eth0")],
        ETHTOOL_FIX / "mlx5_core",
    )
    finding = rules.network.check_rings(facts, validate({}))
    assert finding["status"] == "fail"
    assert [i["nic"] for i in finding["items"]] == ["eth0"]  # grew 1203944 -> 1207310 between the readings
    assert finding["items"][0]["counters"] == {"rx_out_of_buffer": 3366}
    # Every one of them runs mlx5's default ring, 1024 of 8192: the old rule failed all three.
    assert {(n["rings"]["rx"], n["rings"]["rx_max"]) for n in facts["network"]["nics"]} == {(1024, 8192)}
    alone = rules.network.check_rings(facts, validate({"network": {"interfaces": ["enp1s0f0np0"]}}))
    assert alone["status"] == "warn" and "rx_out_of_buffer 48211" in alone["message"]
    stock = rules.network.check_rings(facts, validate({"network": {"interfaces": ["ens1f0np0"]}}))
    assert stock["status"] == "pass"


def test_recorded_ena_and_virtio(tmp_path):
    facts = _collected(tmp_path, [{"name": "ens5", "driver": "ena", "mtu": 9001}], ETHTOOL_FIX / "ena")
    finding = rules.network.check_rings(facts, validate({}))
    assert finding["status"] == "warn" and finding["severity"] == "info"
    assert "pps_allowance_exceeded +208" in finding["message"]
    assert rules.network.check_mtu(facts, validate({"network": {"mtu": {"ens*": 9001}}}))["status"] == "pass"
    facts = _collected(
        tmp_path / "v", [{"name": "eth0", "driver": "virtio_net", "mtu": 1460}], ETHTOOL_FIX / "virtio_net", state=False
    )
    (eth0,) = facts["network"]["nics"]
    assert eth0["drops"] is None and "virtio_net" in eth0["unsupported"]["drops"]
    assert rules.network.check_rings(facts, validate({}))["status"] == "skip"
    assert rules.network.check_mtu(facts, validate({}))["status"] == "pass"  # 1460 with nothing declared
