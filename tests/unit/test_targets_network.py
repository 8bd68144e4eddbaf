"""The network rules' targets (rules/network.py target_*): what network_tuning sets, computed from the facts and the
policy the check judges, next to the check. The fix applied to the facts makes the check pass (the contract); the
NIC fields follow the old nic_targets filter case by case, the buffer size the old tcp_buffer_bytes filter (both
folded in here, issue 27), and the role variables that take a policy value's place become override rows."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.tuning.plugins.module_utils import links, rules, targets
from ansible_collections.gpufleet.tuning.plugins.module_utils.policy import validate
from ansible_collections.gpufleet.tuning.plugins.module_utils.rules import network
from rule_cases import evaluate, nics, tcp
from rule_facts import healthy
from test_network_tuning_inputs import POLICY

SG = POLICY  # the same three links of site sg as the role-input tests


def _facts(policy, nic_list=None, **tcp_values):
    facts = healthy()
    facts["links"] = links.resolve(policy)
    if nic_list is not None:
        facts["network"]["nics"] = nic_list
    tcp(facts).update(tcp_values)
    return facts


def _role(facts, policy, role_vars=None):
    return targets.compute(facts, policy, role_vars, roles=["network_tuning"])


# --- NET-TCP-001 -------------------------------------------------------------------------------------------------


def test_buffer_target_is_the_checks_need_and_the_fixed_host_passes():
    """The size is NET-TCP-001's own expectation: the largest BDP of every link with a bandwidth, long or not
    (4 x 30 ms x 10 Gbit/s beats 4 x 220 ms x 1 Gbit/s); written into both maxima, the check passes, one byte less
    fails."""
    policy = validate(SG)
    facts = _facts(policy)
    out = network.target_tcp_buffers(facts, policy, {})
    assert out["buffer_bytes"] == 150000000
    assert [p["site"] for p in out["sized"]] == ["fra", "hk", "iad"]
    for size, status in ((150000000, "pass"), (149999999, "fail")):
        tcp(facts).update(rmem=[4096, 131072, size], wmem=[4096, 16384, size])
        assert network.check_tcp_buffers(facts, policy)["status"] == status


def test_buffer_floor_is_the_fixs_not_the_audits():
    """A short link (4 x 2 ms x 1 Gbit/s = 1 MB): the audit asks for 1 MB, so the stock kernel (tcp_rmem 6 MiB,
    tcp_wmem 4 MiB) passes; the role never writes a maximum below the kernel's default tcp_rmem maximum (6 MiB)."""
    policy = validate({"site": "sg", "sites": {"sg": {"links": {"fra": {"rtt_ms": 2, "bandwidth_gbps": 1}}}}})
    facts = _facts(policy, rmem=[4096, 131072, 6291456], wmem=[4096, 16384, 4194304])
    finding = network.check_tcp_buffers(facts, policy)
    assert finding["status"] == "pass" and finding["expected"]["tcp_rmem_max"] == ">= 1000000"
    assert network.target_tcp_buffers(facts, policy, {})["buffer_bytes"] == network.KERNEL_TCP_RMEM_MAX == 6291456
    # No link with a bandwidth: nothing to size, nothing judged.
    none = validate({"site": "sg"})
    assert network.target_tcp_buffers(_facts(none), none, {}) == {"buffer_bytes": 0, "sized": []}


def test_buffer_role_variables_take_the_policys_place():
    policy = validate(SG)
    facts = _facts(policy)
    assert network.target_tcp_buffers(facts, policy, {"buffer_factor": 2})["buffer_bytes"] == 75000000
    assert network.target_tcp_buffers(facts, policy, {"buffer_cap": 100000000})["buffer_bytes"] == 100000000
    given = network.target_tcp_buffers(_facts(validate({})), validate({}), {"buffer_bytes": 16777216})
    assert given["buffer_bytes"] == 16777216  # set as given, even without links
    out = _role(facts, policy, {"network_tuning_buffer_bytes": 150000001, "network_tuning_buffer_factor": None})
    assert out["roles"]["network_tuning"]["buffer_bytes"] == 150000001
    assert out["overrides"] == [
        {
            "variable": "network_tuning_buffer_bytes",
            "value": 150000001,
            "policy_key": "network.buffer_factor x bandwidth-delay product (site, sites, peers)",
            "policy_value": 150000000,
        }
    ]
    row = _role(facts, policy, {"network_tuning_buffer_factor": 5})["overrides"][0]
    assert (row["policy_key"], row["policy_value"]) == ("network.buffer_factor", 4.0)
    assert network.target_tcp_buffers(facts, policy, {"buffer_factor": "2"})["buffer_bytes"] == 75000000  # templated
    for key, bad in (("buffer_factor", "x"), ("buffer_cap", {}), ("buffer_bytes", -1)):
        with pytest.raises(ValueError, match=f"network_tuning_{key}: expected a number of 0 or more, got"):
            network.target_tcp_buffers(facts, policy, {key: bad})


# --- NET-TCP-002..004 ---------------------------------------------------------------------------------------------


def test_long_links_prefixes_and_the_kernels_offer():
    policy = validate(SG)
    facts = _facts(policy, available_congestion_control=["reno", "cubic"])
    out = network.target_congestion_control(facts, policy, {})
    assert [p["site"] for p in out["long"]] == [p["site"] for p in rules.long_haul_links(facts, policy)]
    assert [p["site"] for p in out["long"]] == ["fra", "iad"]
    assert out["route_prefixes"] == ["198.51.100.0/24", "2001:db8:100::/48"]  # hk's link is short
    assert (out["congestion_control"], out["congestion_control_scope"]) == ("bbr", "host")
    assert out["congestion_control_available"] is False
    given = network.target_congestion_control(facts, policy, {"congestion_control": "cubic"})
    assert given["congestion_control"] == "cubic" and given["congestion_control_available"] is True
    scope = network.target_congestion_control(facts, policy, {"congestion_control_scope": "routes"})
    assert scope["congestion_control_scope"] == "routes"


@pytest.mark.parametrize(
    "release, links_policy, wanted, qdisc",
    [
        ("4.9.0-19-amd64", SG, None, "fq"),  # BBR without internal pacing: fq needed
        ("4.13.0-1", SG, None, ""),  # paces by itself since 4.13
        ("6.1.0-27-amd64", SG, None, ""),
        ("4.9.0-19-amd64", SG, "cubic", ""),  # not BBR
        ("4.9.0-19-amd64", {"site": "sg"}, None, ""),  # no long link
        (None, SG, None, ""),  # release unknown: the owner's qdisc stays
    ],
)
def test_fq_only_where_bbr_needs_it(release, links_policy, wanted, qdisc):
    policy = validate(links_policy)
    facts = _facts(policy)
    facts["host"]["kernel"]["release"] = release
    given = {"congestion_control": wanted} if wanted else {}
    assert network.target_congestion_control(facts, policy, given)["default_qdisc"] == qdisc


def test_long_link_settings_only_where_a_link_is_long():
    """MTU probing and slow start after idle: set where the checks judge them (a long link), left alone (None)
    elsewhere; the fixed host passes NET-TCP-002..004."""
    policy = validate(SG)
    facts = _facts(policy, congestion_control="cubic", mtu_probing=0, slow_start_after_idle=1)
    assert {f: evaluate(facts, SG)[f]["status"] for f in ("NET-TCP-002", "NET-TCP-003", "NET-TCP-004")} == {
        "NET-TCP-002": "fail",
        "NET-TCP-003": "fail",
        "NET-TCP-004": "fail",
    }
    out = _role(facts, policy)["roles"]["network_tuning"]
    tcp(facts).update(
        congestion_control=out["congestion_control"],
        mtu_probing=out["mtu_probing"],
        slow_start_after_idle=out["slow_start_after_idle"],
    )
    assert {evaluate(facts, SG)[f]["status"] for f in ("NET-TCP-002", "NET-TCP-003", "NET-TCP-004")} == {"pass"}
    short = validate({"site": "sg", "sites": {"sg": {"links": {"hk": {"rtt_ms": 10, "bandwidth_gbps": 1}}}}})
    out = _role(_facts(short), short)["roles"]["network_tuning"]
    assert (out["long"], out["mtu_probing"], out["slow_start_after_idle"]) == ([], None, None)
    assert out["buffer_bytes"] == network.KERNEL_TCP_RMEM_MAX  # the short link is still sized (NET-TCP-001)


# --- NET-MTU-001, NET-OFFL-001, NET-RING-001: per named NIC ----------------------------------------------------------

NIC = {
    "name": "ens1f0",
    "present": True,
    "physical": True,
    "operstate": "up",
    "mtu": 1500,
    "offloads": {"generic-receive-offload": False, "tcp-segmentation-offload": True, "rx-checksumming": True},
    "offloads_fixed": ["rx-checksumming"],
    "rings": {"rx": 512, "tx": 4096, "rx_max": 4096, "tx_max": 4096},
}
DROPS = {"interval_s": 1.0, "ring": {"rx_out_of_buffer": {"total": 7000, "delta": 120}}, "other": {}, "allowance": {}}


def _nics(net, *nic_list, given=None):
    policy = validate({"network": dict(net, interfaces=[n["name"] for n in nic_list])})
    facts = _facts(policy, list(nic_list))
    out = {}
    for target in (network.target_mtu, network.target_offloads, network.target_rings):
        out.update(target(facts, policy, given or {}))
    return out


def test_only_named_nics_and_the_absent_ones_said():
    out = _nics({}, NIC)
    assert out["interfaces"] == ["ens1f0"] and out["nics"] == [{"name": "ens1f0"}] and out["nics_absent"] == []
    policy = validate({"network": {"interfaces": ["ens1f0", "ens9"]}})
    facts = _facts(policy, [NIC, {"name": "ens9", "present": False}])
    out = network.target_mtu(facts, policy, {})
    assert out["nics"] == [{"name": "ens1f0"}] and out["nics_absent"] == ["ens9"]
    # Nothing named: no NIC is touched, whatever the facts hold (the audit reads every physical NIC).
    nothing = validate({})
    out = network.target_offloads(_facts(nothing), nothing, {})
    assert (out["interfaces"], out["nics"], out["offloads"]) == ([], [], {})
    # network_tuning_interfaces takes network.interfaces' place.
    given = network.target_rings(_facts(nothing, [NIC]), nothing, {"interfaces": ["ens1f0"]})
    assert given["nics"] == [{"name": "ens1f0"}]


def test_every_field_and_what_is_already_at_its_target():
    want = {"generic-receive-offload": True, "tcp-segmentation-offload": True, "scatter-gather": True}
    out = _nics({"min_mtu": 9000}, dict(NIC, drops=DROPS), given={"offloads": want})
    assert out["mtu"] == {"ens1f0": 9000} and out["mtu_at_target"] == {"ens1f0": None}
    # Given offloads are passed as given (the NIC's features are not filtered).
    assert out["offloads"]["ens1f0"] == want
    assert out["offloads_at_target"]["ens1f0"] == {"tcp-segmentation-offload": True}
    assert out["rings"]["ens1f0"] == {"rx": "max", "tx": "max"} and out["ring_drops"]["ens1f0"] is True
    assert out["rings_at_target"]["ens1f0"] == {"tx": "max"}  # tx is at its maximum, rx (512 of 4096) is not


def test_policy_offloads_only_what_the_nic_has_and_can_change():
    policy_offloads = ["generic-receive-offload", "tcp-segmentation-offload", "rx-checksumming", "scatter-gather"]
    out = _nics({"offloads": policy_offloads}, NIC)
    # scatter-gather: the NIC has no such feature; rx-checksumming: fixed by the driver.
    assert out["offloads"]["ens1f0"] == {"generic-receive-offload": True, "tcp-segmentation-offload": True}


def test_mtu_never_lowered_by_the_floor_and_an_explicit_mtu_as_given():
    assert _nics({"min_mtu": 9000}, dict(NIC, mtu=9001))["mtu"] == {"ens1f0": None}
    kept = _nics({"min_mtu": 9000}, dict(NIC, mtu=9000))
    assert kept["mtu"] == kept["mtu_at_target"] == {"ens1f0": 9000}  # passed, so the persistence file keeps it
    assert _nics({}, dict(NIC, mtu=9001), given={"mtu": 1500})["mtu"] == {"ens1f0": 1500}


def test_mtu_is_what_the_audit_declares_and_the_fixed_nic_passes():
    """network.mtu is the network's MTU: set exactly, raised or lowered (exact name, then the longest glob); nothing
    declared: left alone. The declaration beats the fabric floor for that NIC, exactly as NET-MTU-001 judges it."""
    table = {"ens*": 9001, "ens1f*": 9000, "ens4": 1460}
    expected = {"ens4": 1460, "ens1f0": 9000, "ens5": 9001, "eth0": None}
    for name, mtu in expected.items():
        assert _nics({"mtu": table}, dict(NIC, name=name))["mtu"] == {name: mtu}
    assert _nics({}, dict(NIC, mtu=1460))["mtu"] == {"ens1f0": None}  # GCP's 1460, nothing declared
    for name in ("ens4", "ens1f0"):
        policy = validate({"network": {"mtu": table, "min_mtu": 9000, "interfaces": [name]}})
        facts = _facts(policy, [dict(NIC, name=name)])
        assert network.check_mtu(facts, policy)["status"] == "fail"
        nics(facts)[0]["mtu"] = network.target_mtu(facts, policy, {})["mtu"][name]
        assert network.check_mtu(facts, policy)["status"] == "pass"


def test_the_fixed_nic_passes_offloads():
    policy = validate({"network": {"interfaces": ["ens1"]}})
    facts = _facts(policy)
    nics(facts)[0]["offloads"]["generic-receive-offload"] = False
    assert network.check_offloads(facts, policy)["status"] == "fail"
    nics(facts)[0]["offloads"].update(network.target_offloads(facts, policy, {})["offloads"]["ens1"])
    assert network.check_offloads(facts, policy)["status"] == "pass"


def test_rings_flagged_where_the_audit_sees_drops():
    counted = {"interval_s": 1.0, "ring": {"rx_out_of_buffer": {"total": 7000, "delta": 0}}}
    clean = {"interval_s": 1.0, "ring": {"rx_out_of_buffer": {"total": 0, "delta": 0}}}
    assert _nics({}, dict(NIC, drops=DROPS))["ring_drops"] == {"ens1f0": True}
    assert _nics({}, dict(NIC, drops=counted))["ring_drops"] == {"ens1f0": True}  # NET-RING-001 warns: flagged
    assert _nics({}, dict(NIC, drops=clean))["ring_drops"] == {"ens1f0": False}
    assert _nics({}, NIC)["ring_drops"] == {"ens1f0": False}  # no ring counter (virtio)
    sized = _nics({}, NIC, given={"rings": {"rx": 4096}})
    assert sized["rings"]["ens1f0"] == {"rx": 4096} and sized["rings_at_target"]["ens1f0"] == {}
    with pytest.raises(ValueError, match=r"network_tuning_rings.ring: unknown side \(allowed: rx, tx\)"):
        _nics({}, NIC, given={"rings": {"ring": "max"}})


def test_role_variables_of_network_tuning():
    variables = targets.role_variables(roles=["network_tuning"])
    assert variables == [
        "network_tuning_mtu",
        "network_tuning_interfaces",
        "network_tuning_rings",
        "network_tuning_offloads",
        "network_tuning_buffer_factor",
        "network_tuning_buffer_cap",
        "network_tuning_buffer_bytes",
        "network_tuning_congestion_control",
        "network_tuning_congestion_control_scope",
    ]
    assert {r.id for r in targets.fixable(roles=["network_tuning"])} == {
        r.id for r in rules.RULES if r.fix["role"] == "network_tuning"
    }
    policy = validate({"network": {"interfaces": ["ens1"]}})
    out = _role(_facts(policy), policy, {"network_tuning_interfaces": ["ens2"]})
    assert out["overrides"] == [
        {
            "variable": "network_tuning_interfaces",
            "value": ["ens2"],
            "policy_key": "network.interfaces",
            "policy_value": ["ens1"],
        }
    ]
    assert out["roles"]["network_tuning"]["nics"] == [{"name": "ens2"}]
