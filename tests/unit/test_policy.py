import re
from pathlib import Path

import pytest
from ansible_collections.gpufleet.tuning.plugins.module_utils import policy, rules
from ansible_collections.gpufleet.tuning.plugins.module_utils.policy import DEFAULTS, PolicyError, documented, validate

REPO = Path(__file__).resolve().parents[2]


def test_defaults_validate_and_merge():
    policy = validate({"memory": {"max_swappiness": 1}})
    assert policy["memory"]["max_swappiness"] == 1
    assert policy["memory"]["gpu_full_pct"] == DEFAULTS["memory"]["gpu_full_pct"]
    assert DEFAULTS["memory"]["max_swappiness"] == 10  # merge does not touch the defaults


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"memroy": {}}, "policy.memroy: unknown key"),
        ({"memory": {"max_swapiness": 1}}, "policy.memory.max_swapiness: unknown key"),
        ({"memory": {"max_swappiness": "ten"}}, "policy.memory.max_swappiness: expected int"),
        ({"memory": {"max_swappiness": True}}, "policy.memory.max_swappiness: expected int"),
        ({"memory": {"gpu_full_pct": -5}}, "policy.memory.gpu_full_pct: must be >= 0"),
        ({"min_severity": "urgent"}, "policy.min_severity: 'urgent' is not a severity"),
        ({"cpu": {"irqbalance": "maybe"}}, "policy.cpu.irqbalance: 'maybe' is not one of running, stopped, any"),
        ({"cpu": "fast"}, "policy.cpu: expected a mapping"),
        ({"software": {"driver_min_version": "latest"}}, "policy.software.driver_min_version: expected version"),
        ({"rules": {"GPU-PWR-999": {"enabled": False}}}, "policy.rules.GPU-PWR-999: unknown rule id"),
        ({"rules": {"GPU-PWR-001": {"enable": False}}}, "policy.rules.GPU-PWR-001.enable: unknown key"),
        ({"rules": {"GPU-PWR-001": {"severity": "huge"}}}, "policy.rules.GPU-PWR-001.severity"),
        ({"sites": {"eu": {"links": {"us": {"rtt_ms": -180, "bandwidth_gbps": 1}}}}},
         "policy.sites.eu.links.us.rtt_ms: must be a number > 0, got -180"),
        ({"sites": {"eu": {"links": {"us": {"rtt_ms": 180}}}}}, "policy.sites.eu.links.us.bandwidth_gbps"),
        ({"sites": {"eu": {"link": {}}}}, "policy.sites.eu.link: unknown key"),
        ({"peers": [{"site": "us", "host": "h", "port": 70000}]}, "policy.peers[0].port: must be 1-65535"),
        ({"peers": [{"host": "h"}]}, "policy.peers[0]: expected {site, host"),
        ({"power": {"limit_w": 300, "limit_pct": 80}},
         "policy.power.limit_w and policy.power.limit_pct: set at most one of them"),
        ({"power": {"limit_w": 0}}, "policy.power.limit_w: must be a number > 0"),
        ({"power": {"limit_pct": "80%"}}, "policy.power.limit_pct: expected number"),
    ],
)
def test_bad_policies_name_the_key(overrides, message):
    with pytest.raises(PolicyError) as exc:
        validate(overrides, known_rules=rules.BY_ID)
    assert message in str(exc.value)


def test_every_key_is_documented():
    rows = documented()
    assert len(rows) >= 30
    assert all(doc and doc[0].isupper() for _, _, doc in rows)
    assert ("memory.max_swappiness", 10, rows[[r[0] for r in rows].index("memory.max_swappiness")][2]) in rows


def test_declared_power_cap_and_irqbalance_defaults():
    assert DEFAULTS["cpu"]["irqbalance"] == "any"  # an owner's choice unless the policy asks for one
    assert DEFAULTS["power"]["limit_w"] is None and DEFAULTS["power"]["limit_pct"] is None
    # A later layer switches kind by nulling the other key (the layers merge before validation).
    policy = validate({"power": {"limit_w": None, "limit_pct": 80}})
    assert (policy["power"]["limit_w"], policy["power"]["limit_pct"]) == (None, 80)


# ---- issue 15: keys as `gpufleet policy` lists them, and numbers that would turn a rule off


def test_dotted_keys_are_accepted_as_listed():
    pol = policy.validate({"memory.max_swappiness": 5, "network.mtu": {"eth0.100": 1450}})
    assert pol["memory"]["max_swappiness"] == 5
    assert pol["network"]["mtu"] == {"eth0.100": 1450}  # a VLAN's dot inside a value is a NIC name, kept


def test_an_unknown_dotted_key_says_how_to_nest_it():
    with pytest.raises(policy.PolicyError) as exc:
        policy.validate({"memory.max_swapiness": 5})
    assert "policy.memory.max_swapiness: unknown key" in str(exc.value)
    assert "write memory: {max_swapiness: <value>}" in str(exc.value)


@pytest.mark.parametrize("key", sorted(policy.POSITIVE))
def test_zero_that_would_turn_a_rule_off_is_refused(key):
    with pytest.raises(policy.PolicyError) as exc:
        policy.validate({key: 0})
    assert f"policy.{key}: must be > 0, got 0" in str(exc.value)
    assert f"rules: {{{policy.POSITIVE[key]}: {{enabled: false}}}}" in str(exc.value)


def test_a_later_layer_wins_however_either_writes_the_key():
    group = {"memory.max_swappiness": 5}
    host = {"memory": {"max_swappiness": 20}}
    assert policy.validate(policy.merge_layers([group, host]))["memory"]["max_swappiness"] == 20
    assert policy.validate(policy.merge_layers([host, group]))["memory"]["max_swappiness"] == 5
    with pytest.raises(policy.PolicyError) as exc:
        policy.merge_layers([{}, {"cpu.nope": 1}], names=["gpufleet_policy", "gpufleet_policy_group"])
    assert str(exc.value).startswith("gpufleet_policy_group: policy.cpu.nope: unknown key")


# ---------------------------------------------------------------- the policy layers (issue 27: one list, one merge)
# The host's policy layers are merged and validated once per host, on the host, by policy.from_option (the modules
# audit, gpu_probe and remediation_targets, whose action plugins hand over the layers named in policy.LAYERS). These
# tests were the effective_policy filter's (tests/unit/test_effective_policy.py), which the roles no longer use.

FLEET = {"sites": {"ap": {"links": {"eu": {"rtt_ms": 180, "bandwidth_gbps": 1}}}}, "network": {"min_mtu": 9000}}


def test_layers_merge_in_order_over_the_defaults():
    pol = policy.from_option([FLEET, {"site": "ap"}, None, {"network": {"buffer_factor": 8}}])
    assert pol["site"] == "ap"
    assert pol["network"]["buffer_factor"] == 8
    assert pol["network"]["min_mtu"] == 9000
    assert pol["network"]["max_buffer_bytes"] == DEFAULTS["network"]["max_buffer_bytes"]
    later = policy.from_option([{"network": {"min_mtu": 9000}}, {"network": {"min_mtu": 1500}}])
    assert later["network"]["min_mtu"] == 1500
    # A later layer wins whichever way either writes the key (dotted or nested).
    assert policy.from_option([{"network": {"min_mtu": 9000}}, {"network.min_mtu": 1500}])["network"]["min_mtu"] == 1500


@pytest.mark.parametrize(
    ("layers", "message"),
    [
        ([{"network": {"buffer_factor": "x"}}], "policy.network.buffer_factor"),
        ([{}, {"memory": {"swapiness": 5}}], "policy.memory.swapiness: unknown key"),
        ([{"rules": {"NOPE-001": {"enabled": False}}}], "policy.rules.NOPE-001: unknown rule id"),
        ([{}, "site: ap"], "gpufleet_policy_group must be a mapping"),
        ("not a list", "expected a mapping or a list of mappings"),
    ],
)
def test_bad_policy_layers_name_the_key_or_the_layer(layers, message):
    with pytest.raises(PolicyError, match=re.escape(message)):
        policy.from_option(layers, known_rules=rules.BY_ID)


def test_the_cli_checks_the_inventorys_layers_of_the_one_list():
    """gpufleet's preflight validates the layers the inventory holds: policy.LAYERS without the one the CLI passes
    itself (--policy, gpufleet_policy_overrides), derived rather than copied; gpufleet.cli re-exports the name."""
    from gpufleet import cli, preflight

    assert preflight.POLICY_LAYERS == tuple(n for n in policy.LAYERS if n != "gpufleet_policy_overrides")
    assert preflight.POLICY_LAYERS == policy.LAYERS[:-1] and policy.LAYERS[-1] == preflight.CLI_LAYER
    assert cli.POLICY_LAYERS == preflight.POLICY_LAYERS
    assert "POLICY_LAYERS = (" not in (REPO / "src" / "gpufleet" / "preflight.py").read_text()


LAYER_LIST = re.compile(r"gpufleet_policy\w* \| default\(\{\}\)")


def test_no_role_merges_the_policy_layers_itself():
    """The roles read the policy (and their targets) from gpufleet.tuning.remediation_targets; none writes the layer
    list out (before issue 27 each role merged the layers in its vars with the effective_policy filter)."""
    files = [p for p in sorted((REPO / "roles").rglob("*")) if p.suffix in (".yml", ".yaml", ".j2") and p.is_file()]
    files += [REPO / "playbooks" / "watch.yml", REPO / "playbooks" / "remediate.yml"]
    assert [str(p.relative_to(REPO)) for p in files if LAYER_LIST.search(p.read_text())] == []


# ---- issue 29: every policy error is listed, not the first

# Four mistakes in four places: an unknown key, a wrong type, a value outside its set, a bad severity; and a dotted
# key that names nothing.
MANY_MISTAKES = {
    "memory": {"max_swapiness": 5},
    "power": {"ecc": "yes"},
    "cpu": {"irqbalance": "sometimes"},
    "min_severity": "urgent",
    "network.mtuu": 9000,
}
EVERY_MISTAKE = [
    "policy.memory.max_swapiness: unknown key (known: gpu_full_pct, max_swappiness,",
    "policy.power.ecc: expected bool, got 'yes' (str)",
    "policy.cpu.irqbalance: 'sometimes' is not one of running, stopped, any",
    "policy.min_severity: 'urgent' is not a severity (critical, high, medium, low, info)",
    "policy.network.mtuu: unknown key; a dotted key must name a policy key",
]


def test_every_problem_of_a_policy_is_listed_in_one_error():
    with pytest.raises(PolicyError) as exc:
        validate(MANY_MISTAKES, known_rules=rules.BY_ID)
    message = str(exc.value)
    assert message.startswith("policy: 5 problems:\n"), message
    for problem in EVERY_MISTAKE:
        assert sum(problem in line for line in message.splitlines()) == 1, (problem, message)
    assert len(exc.value.problems) == 5
    # One problem alone keeps its own message, with nothing around it.
    with pytest.raises(PolicyError) as exc:
        validate({"power": {"ecc": "yes"}})
    assert str(exc.value) == "policy.power.ecc: expected bool, got 'yes' (str)"


def test_the_checks_of_the_merged_policy_run_beside_a_wrong_type():
    """A value of the wrong type is left out of the merged policy (no traceback comparing it), and the checks of
    the merged policy still report theirs: a bad rule, a zero that would turn a rule off, a bad peer."""
    with pytest.raises(PolicyError) as exc:
        validate(
            {
                "probe": {"gpu_idle_pct": "half"},
                "network": {"buffer_factor": 0, "mtu": {"eth0": 10}},
                "rules": {"GPU-PWR-999": {"enabled": False}, "GPU-PWR-001": {"severity": "huge", "x": 1}},
                "peers": [{"site": "us", "host": "h", "port": 0}],
                "sites": {"eu": {"links": ["us"]}},
            },
            known_rules=rules.BY_ID,
        )
    problems = exc.value.problems
    for expected in (
        "policy.probe.gpu_idle_pct: expected number",
        "policy.network.buffer_factor: must be > 0, got 0",
        "policy.network.mtu.eth0: an MTU is an integer from 68 to 65535",
        "policy.rules.GPU-PWR-999: unknown rule id",
        "policy.rules.GPU-PWR-001.severity: 'huge' is not a severity",
        "policy.rules.GPU-PWR-001.x: unknown key (known: enabled, severity)",
        "policy.peers[0].port: must be 1-65535, got 0",
        "policy.sites.eu.links: expected a mapping",
    ):
        assert any(p.startswith(expected) for p in problems), (expected, problems)
    assert len(problems) == 8, problems


def test_every_problem_of_a_layer_is_listed_with_the_layers_name():
    with pytest.raises(PolicyError) as exc:
        policy.from_option([{}, {"memory.max_swapiness": 5, "cpu.governer": "performance"}])
    assert str(exc.value).startswith("gpufleet_policy_group: policy: 2 problems:\n"), exc.value
    assert [p.split(":")[:2] for p in exc.value.problems] == [
        ["gpufleet_policy_group", " policy.memory.max_swapiness"],
        ["gpufleet_policy_group", " policy.cpu.governer"],
    ]
