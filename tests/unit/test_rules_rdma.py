"""The rules of rules/rdma.py: NET-RDMA-001 (port ACTIVE / LinkUp), NET-RDMA-002 (port at its rate), NET-RDMA-003
(error counters growing over the sample window), a passing and a failing case each (CASES), and their tests.

The healthy host (rule_facts.py) has eight 400 Gb/s NDR InfiniBand ports and a RoCE LAG (mlx5_bond_0 over bond0,
200 Gb/s). The last tests judge what the real reader (module_utils/rdma.py) reads: the reference HGX H100 node of
tests/sim/reference.py with one port Disabled and one trained at 2X, and the recorded trees of tests/fixtures/rdma.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import rule_cases
import simulators
from ansible_collections.gpufleet.tuning.plugins.module_utils import rdma as rdma_mod
from ansible_collections.gpufleet.tuning.plugins.module_utils.hostfs import HostFS
from ansible_collections.gpufleet.tuning.plugins.module_utils.policy import PolicyError, validate
from rule_cases import evaluate
from rule_facts import healthy

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "rdma"
netroot = simulators.netroot()
reference = simulators.load("gpufleet_sim_reference", simulators.SIM / "reference.py")


def ports(f):
    return {p["name"]: p for p in f["rdma"]["ports"]}


def port(name, **values):
    def mutate(f):
        ports(f)[name].update(values)

    return mutate


CASES = {
    # A RoCE port whose netdev the owner took down is not judged; a port Disabled fails.
    "NET-RDMA-001": (
        port("mlx5_bond_0/1", state="DOWN", phys_state="Disabled", netdev_up=False),
        port("mlx5_3/1", state="DOWN", state_code=1, phys_state="Disabled", phys_state_code=3),
    ),
    # The RoCE bond at its own 200 Gb/s passes (judged apart from InfiniBand); an NDR port trained at 2X fails.
    "NET-RDMA-002": (None, port("mlx5_5/1", rate="200 Gb/sec (2X NDR)", rate_gbps=200.0, width="2X")),
    # Counts left from earlier pass; a counter growing in the window fails.
    "NET-RDMA-003": (
        port("mlx5_2/1", counters={"symbol_error": 1200, "link_downed": 3}),
        port("mlx5_2/1", deltas={"symbol_error": 37}),
    ),
}

test_rule_passes, test_rule_fails = rule_cases.pass_and_fail(CASES)


def test_a_down_and_a_downtrained_port_are_each_named():
    facts = healthy()
    port("mlx5_3/1", state="DOWN", phys_state="Disabled")(facts)
    port("mlx5_6/1", rate="200 Gb/sec (2X NDR)", rate_gbps=200.0, width="2X")(facts)
    found = evaluate(facts)
    down, slow = found["NET-RDMA-001"], found["NET-RDMA-002"]
    assert [i["nic"] for i in down["items"]] == ["mlx5_3/1"]
    assert "mlx5_3/1 DOWN/Disabled" in down["message"] and "disabled" in down["message"]
    assert [i["nic"] for i in slow["items"]] == ["mlx5_6/1"]
    item = slow["items"][0]
    assert (item["device"], item["port"], item["rate_gbps"], item["expected_gbps"]) == ("mlx5_6", 1, 200.0, 400.0)
    assert "mlx5_6/1 at 200 Gb/s (200 Gb/sec (2X NDR)), expected 400 Gb/s" in slow["message"]
    assert "6 of 7" in slow["expected"]["mlx5_6/1"]  # the ACTIVE ports: mlx5_3 is down


@pytest.mark.parametrize(
    ("state", "phys", "words"),
    [
        ("DOWN", "Polling", "no physical link"),
        ("INIT", "LinkUp", "subnet manager"),
        ("ARMED", "LinkUp", "subnet manager"),
        ("ACTIVE", "LinkErrorRecovery", "error recovery"),
    ],
)
def test_the_message_says_what_to_check_for_each_state(state, phys, words):
    facts = healthy()
    port("mlx5_0/1", state=state, phys_state=phys)(facts)
    finding = evaluate(facts)["NET-RDMA-001"]
    assert finding["status"] == "fail" and words in finding["message"]


def test_a_roce_port_without_link_names_its_netdev():
    facts = healthy()
    port("mlx5_bond_0/1", state="DOWN", phys_state="Disabled")(facts)
    finding = evaluate(facts)["NET-RDMA-001"]
    assert finding["status"] == "fail" and "bond0 is up but the port has no link" in finding["message"]


@pytest.mark.parametrize("glob", ["mlx5_3", "mlx5_3/1", "mlx5_[3]*", "ibp3s0"])
def test_excluded_ports_are_not_judged(glob):
    facts = healthy()
    port("mlx5_3/1", state="DOWN", phys_state="Polling", rate_gbps=100.0, deltas={"link_downed": 2})(facts)
    found = evaluate(facts, {"network": {"rdma": {"exclude": [glob]}}})
    for rule in ("NET-RDMA-001", "NET-RDMA-002", "NET-RDMA-003"):
        assert found[rule]["status"] == "pass", (rule, found[rule])
    assert "excluded" in found["NET-RDMA-001"]["observed"]["mlx5_3/1"]


def test_every_port_excluded_or_no_rdma_skips():
    found = evaluate(healthy(), {"network": {"rdma": {"exclude": ["*"]}}})
    assert found["NET-RDMA-001"]["status"] == "skip" and "excluded" in found["NET-RDMA-001"]["message"]
    facts = healthy()
    facts["rdma"] = rdma_mod.collect(HostFS("/nonexistent-root"), sample_seconds=1)
    for rule in ("NET-RDMA-001", "NET-RDMA-002", "NET-RDMA-003"):
        finding = evaluate(facts)[rule]
        assert finding["status"] == "skip" and "no RDMA devices" in finding["message"], finding
    del facts["rdma"]
    assert evaluate(facts)["NET-RDMA-001"]["message"] == "RDMA facts not gathered"


def test_declared_rates_by_glob_and_exact_name():
    facts = healthy()
    declared = {"mlx5_*": 400, "mlx5_bond_0": 400}
    finding = evaluate(facts, {"network": {"rdma": {"expected_rate_gbps": declared}}})["NET-RDMA-002"]
    assert finding["status"] == "fail" and [i["nic"] for i in finding["items"]] == ["mlx5_bond_0/1"]
    assert finding["items"][0]["source"] == "network.rdma.expected_rate_gbps.mlx5_bond_0"
    declared = {"mlx5_*": 400, "mlx5_bond_*": 200}  # the longer glob wins for the bond
    assert evaluate(facts, {"network": {"rdma": {"expected_rate_gbps": declared}}})["NET-RDMA-002"]["status"] == "pass"
    # a port faster than declared passes; a null key removes a broader declaration (the majority judges the port)
    port("mlx5_1/1", rate_gbps=800.0)(facts)
    port("mlx5_0/1", rate_gbps=100.0)(facts)
    declared = {"mlx5_*": 400, "mlx5_bond_*": 200, "mlx5_0/1": None}
    finding = evaluate(facts, {"network": {"rdma": {"expected_rate_gbps": declared}}})["NET-RDMA-002"]
    assert finding["status"] == "fail" and [i["nic"] for i in finding["items"]] == ["mlx5_0/1"]
    assert finding["items"][0]["source"] == "the host's InfiniBand ports: 6 of 8 at 400 Gb/s"


def test_no_majority_and_nothing_declared_is_not_judged():
    facts = healthy()
    facts["rdma"]["ports"] = [p for p in facts["rdma"]["ports"] if p["device"] in ("mlx5_0", "mlx5_1")]
    port("mlx5_1/1", rate_gbps=200.0)(facts)
    finding = evaluate(facts)["NET-RDMA-002"]
    assert finding["status"] == "skip" and "network.rdma.expected_rate_gbps" in finding["message"]


def test_a_saturated_counter_is_noted_never_judged_as_growing():
    facts = healthy()
    port("mlx5_1/1", counters={"link_downed": 255}, saturated=["link_downed"], deltas={})(facts)
    finding = evaluate(facts)["NET-RDMA-003"]
    assert finding["status"] == "warn" and finding["severity"] == "low"
    assert "saturated" in finding["message"] and "mlx5_1/1 link_downed" in finding["message"]
    # a saturated counter that "grew" (a reader that did not know its width) is still not judged
    port("mlx5_1/1", deltas={"link_downed": 1})(facts)
    assert evaluate(facts)["NET-RDMA-003"]["status"] == "warn"


def test_a_link_going_down_in_the_window_is_high():
    facts = healthy()
    port("mlx5_4/1", deltas={"link_downed": 1, "symbol_error": 12})(facts)
    finding = evaluate(facts)["NET-RDMA-003"]
    assert finding["status"] == "fail" and finding["severity"] == "high"
    assert finding["items"][0]["grew"] == {"link_downed": 1, "symbol_error": 12}


def test_counters_read_once_are_not_judged():
    facts = healthy()
    for p in facts["rdma"]["ports"]:
        p["deltas"] = None
    assert evaluate(facts)["NET-RDMA-003"]["status"] == "skip"


@pytest.mark.parametrize(
    ("rdma", "words"),
    [
        ({"expected_rate_gbps": {"mlx5_*": 0}}, "expected_rate_gbps.mlx5_*: a rate in Gb/s"),
        ({"expected_rate_gbps": {"mlx5_*": "400G"}}, "a number > 0 and <= 3200"),
        ({"expected_rate_gbps": {"": 400}}, "keys are RDMA devices"),
        ({"exclude": [""]}, "network.rdma.exclude[0]"),
        ({"exclude": "mlx5_4"}, "network.rdma.exclude: expected list"),
        ({"exlude": []}, "network.rdma.exlude: unknown key (known: exclude, expected_rate_gbps)"),
    ],
)
def test_policy_errors_name_the_key_and_what_is_allowed(rdma, words):
    with pytest.raises(PolicyError) as err:
        validate({"network": {"rdma": rdma}})
    assert words in str(err.value)


def test_dotted_policy_keys():
    pol = validate({"network.rdma.exclude": ["mlx5_bond_*"], "network.rdma.expected_rate_gbps": {"mlx5_*": 400}})
    assert pol["network"]["rdma"] == {"exclude": ["mlx5_bond_*"], "expected_rate_gbps": {"mlx5_*": 400}}


# ---------------------------------------------------------------- the real reader


def _judge(root, policy=None):
    facts = healthy()
    facts["rdma"] = rdma_mod.collect(HostFS(str(root)), sample_seconds=0.01)
    return evaluate(facts, policy), facts["rdma"]


def test_reference_hgx_h100_with_a_port_disabled_and_one_downtrained(tmp_path):
    spec = [dict(p) for p in reference.HOSTS["dgx-h100"]["infiniband"]]
    assert len([p for p in spec if p.get("link_layer", "InfiniBand") == "InfiniBand"]) == 8
    assert any(p.get("netdevs") == ["bond0"] for p in spec)
    healthy_root = netroot.build_netroot(tmp_path / "healthy", nics=[], infiniband=spec)
    found, _facts = _judge(healthy_root)
    assert [found[r]["status"] for r in ("NET-RDMA-001", "NET-RDMA-002")] == ["pass", "pass"]
    spec[2].update(state="DOWN", phys_state="Disabled")
    spec[5].update(rate_gbps=200, width="2X")
    found, facts = _judge(netroot.build_netroot(tmp_path / "broken", nics=[], infiniband=spec))
    bond = {p["name"]: p for p in facts["ports"]}["mlx5_bond_0/1"]
    assert (bond["link_layer"], bond["netdevs"], bond["rate_gbps"]) == ("Ethernet", ["bond0"], 400.0)
    assert [i["nic"] for i in found["NET-RDMA-001"]["items"]] == ["mlx5_2/1"]
    assert [(i["nic"], i["rate_gbps"], i["expected_gbps"]) for i in found["NET-RDMA-002"]["items"]] == [
        ("mlx5_5/1", 200.0, 400.0)
    ]
    assert "200 Gb/sec (2X NDR)" in found["NET-RDMA-002"]["message"]


def test_recorded_h100_tree_from_gpud():
    found, facts = _judge(FIXTURES / "gpud-h100")
    assert found["NET-RDMA-001"]["status"] == "pass" and found["NET-RDMA-002"]["status"] == "pass"
    # the InfiniBand ports are held to their majority (400), the RoCE bond at 200 is alone in its link layer
    assert set(found["NET-RDMA-002"]["expected"]) == {f"mlx5_{i}/1" for i in (0, 1, 4, 5, 6, 7, 8, 9)}
    # as recorded, link_downed is at its 8-bit maximum on mlx5_1 and excessive_buffer_overrun_errors at its 4-bit
    # maximum everywhere: noted, not judged as growing
    errors = found["NET-RDMA-003"]
    assert errors["status"] == "warn" and "mlx5_1/1 excessive_buffer_overrun_errors, link_downed" in errors["message"]


def test_recorded_procfs_tree_names_the_port_whose_phys_state_is_not_linkup():
    found, _facts = _judge(FIXTURES / "procfs")
    assert [i["nic"] for i in found["NET-RDMA-001"]["items"]] == ["mlx5_0/1"]
    # the host's mixed HCAs: the 1X EDR port is below the InfiniBand majority (the dual-port QDR card) ...
    assert [i["nic"] for i in found["NET-RDMA-002"]["items"]] == ["mlx5_0/1"]
    # ... until the owner declares each card's rate
    declared = {"network": {"rdma": {"expected_rate_gbps": {"mlx4_*": 40, "mlx5_0": 25, "hfi1_*": 100}}}}
    found, _facts = _judge(FIXTURES / "procfs", declared)
    assert found["NET-RDMA-002"]["status"] == "pass"
