"""The contract between the audit and the fix, over the whole catalog (issue 27 point 1): for random valid policies
(hypothesis), a host that fails every fixable rule, with each role's targets (``targets.compute``: every rule's
``target`` next to its check) applied as the role applies them, passes every fixable rule when judged again.

The host starts from ``rule_facts.healthy()`` with every fixable rule's failing mutation of its area file (CASES)
applied at once, plus the shapes hypothesis varies (a Slurm daemon running with a low memlock limit, NICs with drops
or a wrong MTU). ``apply`` is the model of what each role writes, key by key (roles/*/tasks: the sysctl, sysfs,
limits and drop-in files, ethtool settings, NVML settings); it is the only place this test knows a role. A rule may
still warn where the fix cannot erase the evidence (ring drops counted since the driver loaded) or the kernel lacks
what the policy wants (a congestion control it does not offer): never fail.

Replaces the tests that held copies equal (the role's Jinja against the audit's Python): there is one copy now.
"""

from __future__ import annotations

import copy

import pytest
import rule_cases
from ansible_collections.gpufleet.tuning.plugins.module_utils import policy as pol_mod
from ansible_collections.gpufleet.tuning.plugins.module_utils import rules, targets
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from rule_facts import healthy

FIXABLE = targets.fixable()
FIXABLE_IDS = [r.id for r in FIXABLE]
NICS = ("ens1", "ens2")
GOVERNORS = ("performance", "powersave", "schedutil", "ondemand")
THP_ENABLED = ("always", "madvise", "never")
THP_DEFRAG = ("always", "defer", "defer+madvise", "madvise", "never")


def _subset(values):
    return st.lists(st.sampled_from(values), min_size=1, max_size=len(values), unique=True)


def _optional(strategy):
    return st.one_of(st.none(), strategy)


# Each policy key a fixable rule reads, with the values an owner may give it (validate() decides what is valid).
POLICY_KEYS = {
    "memory.max_swappiness": st.integers(0, 100),
    "memory.thp_enabled": _subset(THP_ENABLED),
    "memory.thp_defrag": _subset(THP_DEFRAG),
    "memory.min_memlock_kb": _optional(st.integers(64, 1 << 30)),
    "memory.overcommit_memory": _subset((0, 1, 2)),
    "cpu.governor": st.sampled_from(GOVERNORS),
    "cpu.hwp_epp": st.just([]),  # the governor judged as such: powersave is not excused by an EPP hint
    "cpu.numa_balancing": st.booleans(),
    "cpu.irqbalance": st.sampled_from(("running", "stopped", "any")),
    "network.interfaces": _subset(NICS),
    "network.mtu": st.one_of(st.just({}), st.fixed_dictionaries({"ens*": st.sampled_from((1500, 4200, 9000))})),
    "network.min_mtu": _optional(st.sampled_from((1500, 9000))),
    "network.offloads": _subset(("generic-receive-offload", "tcp-segmentation-offload", "scatter-gather")),
    "network.long_link_rtt_ms": st.floats(1.0, 400.0),
    "network.buffer_factor": st.floats(0.5, 16.0),
    "network.max_buffer_bytes": st.integers(1 << 20, 1 << 30),
    "network.congestion_control": st.sampled_from(("bbr", "cubic", "htcp")),
    "power.ecc": st.booleans(),
    "power.min_power_limit_pct": st.floats(50.0, 100.0),
    "software.driver_branch": _optional(st.sampled_from((535, 550, 570))),
}
POWER_CAP = st.one_of(
    st.just({}),
    st.fixed_dictionaries({"power.limit_w": st.floats(100.0, 900.0)}),
    st.fixed_dictionaries({"power.limit_pct": st.floats(30.0, 100.0)}),
)
LINKS = st.lists(
    st.fixed_dictionaries(
        {"site": st.sampled_from(("eu_west", "us_east")), "rtt_ms": st.floats(1.0, 300.0),
         "bandwidth_gbps": st.floats(0.1, 400.0)}
    ),
    max_size=2,
)


@st.composite
def policies(draw):
    layer = dict((key, draw(strategy)) for key, strategy in POLICY_KEYS.items())
    layer.update(draw(POWER_CAP))
    try:
        return pol_mod.validate(pol_mod.expand_dotted(layer), known_rules=rules.BY_ID)
    except pol_mod.PolicyError:
        assume(False)


def bad_host():
    """The healthy host with every fixable rule's failing mutation applied (each area file's CASES)."""
    facts = healthy()
    cases = rule_cases.all_cases()
    for rule_id in FIXABLE_IDS:
        if rule_id in cases:
            cases[rule_id][1](facts)
    return facts


# What hypothesis varies on the bad host (a small dict, so a failing example reads well).
VARIANTS = st.fixed_dictionaries(
    {
        "links": LINKS,
        "slurmd": st.booleans(),  # a Slurm node: slurmd's jobs inherit its unit's limit, and it runs with 8 MiB
        "mtu": st.tuples(*[st.sampled_from((1200, 1500, 9000))] * len(NICS)),
        "ring_delta": st.tuples(*[st.sampled_from((0, 17))] * len(NICS)),
        "rx_ring": st.tuples(*[st.sampled_from((1024, 8192))] * len(NICS)),
        "rmem_max": st.sampled_from((4194304, 6291456, 134217728)),
        "gpu0_limit_w": st.sampled_from((300.0, 700.0)),
    }
)


def host_of(variant):
    facts = bad_host()
    facts["links"]["peers"] = copy.deepcopy(variant["links"])
    if variant["slurmd"]:
        facts["host"]["memlock"]["services"] = [
            {"unit": "slurmd.service", "process": "slurmd", "fragment": "/lib/systemd/system/slurmd.service",
             "limit": None, "processes": [{"pid": 812, "soft_kb": 8192, "error": None}]}
        ]
    for i, nic in enumerate(facts["network"]["nics"]):
        nic["mtu"] = variant["mtu"][i]
        nic["drops"]["ring"]["rx_out_of_buffer"]["delta"] = variant["ring_delta"][i]
        nic["rings"]["rx"] = variant["rx_ring"][i]
    facts["network"]["tcp"]["rmem"][2] = variant["rmem_max"]
    facts["gpu"]["gpus"][0]["power"]["limit_w"] = variant["gpu0_limit_w"]
    return facts


# ---------------------------------------------------------------- what each role writes, key by key


def apply_host_tuning(facts, t):
    host = facts["host"]
    if t["swappiness"] is not None and host["vm"]["swappiness"] > t["swappiness"]:  # at most (an owner's lower kept)
        host["vm"]["swappiness"] = t["swappiness"]
    for key in ("enabled", "defrag"):
        if t["thp_" + key] is not None:
            host["thp"][key] = t["thp_" + key]
    if t["overcommit_memory"] is not None:
        host["vm"]["overcommit_memory"] = t["overcommit_memory"]
    if t["numa_balancing"] is not None:
        host["numa"]["balancing"] = bool(t["numa_balancing"])
    if t["tuned_profile"] is None:
        host["cpu"]["governors"] = {t["governor"]: "0-{}".format(host["cpu"]["threads"] - 1)}
    if t["irqbalance_state"] is not None and not t["irqbalance_blocked"]:
        host["irqbalance"]["running"] = t["irqbalance_state"] == "started"
    memlock = host["memlock"]
    memlock.setdefault("configured", []).append(  # limits.conf.j2: "*" and "@root"-free lines, soft and hard
        {"path": "/etc/security/limits.d/90-gpufleet-memlock.conf", "domain": "*", "type": "-",
         "value_kb": t["memlock_kb"]}
    )
    for svc in memlock.get("services") or []:
        if svc["unit"] in t["memlock_services"]:  # the drop-in, then the restart (host_tuning_restart_ok)
            svc["limit"] = {"soft_kb": t["memlock_kb"], "source": "gpufleet drop-in"}
            for proc in svc.get("processes") or []:
                proc["soft_kb"] = t["memlock_kb"]


def apply_network_tuning(facts, t):
    tcp = facts["network"]["tcp"]
    if t["buffer_bytes"]:
        for key in ("rmem", "wmem"):  # the maximum of each triple, never lowered (network_tuning_buffer_keep_larger)
            tcp[key][2] = max(tcp[key][2], t["buffer_bytes"])
    if t["long"]:
        if t["congestion_control_available"]:
            if t["congestion_control_scope"] == "host":
                tcp["congestion_control"] = t["congestion_control"]
            else:
                facts["network"]["routes"] = dict((p, t["congestion_control"]) for p in t["route_prefixes"])
        tcp["mtu_probing"] = t["mtu_probing"]
        tcp["slow_start_after_idle"] = t["slow_start_after_idle"]
    by_name = dict((n["name"], n) for n in facts["network"]["nics"])
    for name in t["interfaces"] or []:
        nic = by_name.get(name)
        if nic is None:
            continue
        if t["mtu"].get(name) is not None:
            nic["mtu"] = t["mtu"][name]
        nic["offloads"].update(t["offloads"].get(name) or {})
        if t["ring_drops"].get(name):  # resized: the next sample's counters no longer grow
            for side, value in t["rings"][name].items():
                nic["rings"][side] = nic["rings"][side + "_max"] if value == "max" else value
            for counter in nic["drops"]["ring"].values():
                counter["delta"] = 0


def apply_gpu_runtime(facts, t):
    for g in facts["gpu"]["gpus"]:
        if t["persistence_mode"] is not None:
            g["persistence_mode"] = t["persistence_mode"]
        power = g["power"]
        spec = t["power_limit"]
        watts = power["default_limit_w"] * float(spec[:-1]) / 100.0 if spec.endswith("%") else float(spec)
        if t["power_limit_clamp"]:
            watts = min(max(watts, power["min_limit_w"]), power["max_limit_w"])
        if t["power_limit_at_least"]:
            watts = max(watts, power["limit_w"])
        power["limit_w"] = power["enforced_limit_w"] = min(max(watts, power["min_limit_w"]), power["max_limit_w"])
        if t["ecc_mode"] is not None:  # pending, then the reboot the role asks for
            g["ecc"]["current"] = g["ecc"]["pending"] = t["ecc_mode"]


def apply_nvidia_driver(facts, t):
    if t["driver_branch"] is not None:
        driver = facts["gpu"]["driver"]
        version = "{}.100.01".format(t["driver_branch"])
        driver.update(version=version, branch=int(t["driver_branch"]), kernel_module_version=version,
                      library_version=version, fabricmanager_version=version)


APPLY = {
    "host_tuning": apply_host_tuning,
    "network_tuning": apply_network_tuning,
    "gpu_runtime": apply_gpu_runtime,
    "nvidia_driver": apply_nvidia_driver,
}


def excused(rule_id, finding, roles):
    """Where the fix has nothing to set because the policy declares nothing it could set, and the finding says so:
    a NIC below the IPv6 minimum with no MTU declared for its network (only the owner knows it: network.mtu), or a
    driver older than the minimum with no branch declared (nvidia_driver never guesses one: software.driver_branch)."""
    if rule_id == "NET-MTU-001":
        return all(item["kind"] == "floor" for item in finding["items"]) and "network.mtu" in finding["message"]
    if rule_id == "SW-DRV-001":
        return roles["nvidia_driver"]["driver_branch"] is None
    return False


def judge(facts, policy):
    return dict((f["rule"], f) for f in rules.evaluate(facts, policy) if f["rule"] in FIXABLE_IDS)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(policy=policies(), variant=VARIANTS)
def test_applying_the_targets_makes_every_fixable_rule_pass(policy, variant):
    facts = host_of(variant)
    out = targets.compute(facts, policy)
    fixed = copy.deepcopy(facts)
    for role, apply in APPLY.items():
        apply(fixed, out["roles"][role])
    after = judge(fixed, policy)
    failing = dict(
        (rid, f["message"])
        for rid, f in after.items()
        if f["status"] in ("fail", "error") and not excused(rid, f, out["roles"])
    )
    assert not failing, failing


def test_every_rule_a_role_fixes_has_a_target():
    """The contract covers the catalog: each rule a role fixes has a target, except those whose fix follows the
    host's packages rather than a policy value (the fabric manager, CUDA and kernel module move with the driver)."""
    with_role = [r.id for r in rules.RULES if r.fix["role"]]
    assert FIXABLE_IDS and set(with_role) - set(FIXABLE_IDS) <= {"SW-FM-001", "SW-CUDA-001", "SW-KMOD-001"}


@pytest.mark.parametrize("rule_id", FIXABLE_IDS)
def test_each_rule_fails_alone_and_its_target_fixes_it(rule_id):
    """Rule by rule (so the property above cannot hold vacuously): the healthy host with only this rule's failing
    mutation (its area file's CASES, under the case's policy) fails it, and the targets applied make it pass."""
    case = rule_cases.all_cases()[rule_id]
    layer = pol_mod.merge(
        {"network": {"interfaces": list(NICS), "min_mtu": 9000}, "software": {"driver_branch": 570}},
        case[2] if len(case) > 2 else {},
    )
    policy = pol_mod.validate(layer, known_rules=rules.BY_ID)
    facts = healthy()
    case[1](facts)
    assert judge(facts, policy)[rule_id]["status"] == "fail"
    out = targets.compute(facts, policy)
    for role, apply in APPLY.items():
        apply(facts, out["roles"][role])
    after = judge(facts, policy)[rule_id]
    history = rule_id == "NET-RING-001" and after["status"] == "warn" and "since the driver loaded" in after["message"]
    assert after["status"] == "pass" or history, after["message"]
