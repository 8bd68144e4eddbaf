"""Every rule in the catalog: one case that passes and one that fails, from the same healthy host."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.tuning.plugins.module_utils import policy as pol_mod
from ansible_collections.gpufleet.tuning.plugins.module_utils import rules
from rule_facts import gb200_tray, healthy


def gpus(f):
    return f["gpu"]["gpus"]


def host(f):
    return f["host"]


def nics(f):
    return f["network"]["nics"]


def tcp(f):
    return f["network"]["tcp"]


def _full_and_swapping(f):
    for g in gpus(f):
        g["memory"].update(used_mib=80281, used_pct=98.4)
    host(f)["memory"].update(
        swap_total_mib=8192, swap_used_mib=6000, swap_in_per_s=850.0, swap_out_per_s=1200.0, psi_some_avg10=35.2
    )


def _full_not_swapping(f):
    for g in gpus(f):
        g["memory"].update(used_mib=80281, used_pct=98.4)


def _set(getter, **values):
    def mutate(f):
        getter(f).update(values)

    return mutate


def _each_gpu(fn):
    def mutate(f):
        for g in gpus(f):
            fn(g)

    return mutate


def _gpu(i, fn):
    def mutate(f):
        fn(gpus(f)[i])

    return mutate


def _cuda_too_new(f):
    """A CUDA 13 toolkit on a 550 driver (CUDA 12.4): a major-version gap (13.x needs >= 580)."""
    f["gpu"]["driver"]["cuda_toolkits"] = [{"path": "/usr/local/cuda-13.0", "version": "13.0.1", "default": True}]


def _gpu_missing_from_nvml(f):
    """GPU 3 (0000:5d:00.0) is on the PCI bus but the driver never brought it up: NVML lists 7."""
    f["gpu"]["gpus"].pop(3)
    f["gpu"]["gpu_count"] = 7


def _fatal_sxid(f):
    host(f)["kernel_log"]["sxid"].append(
        {
            "code": 20034,
            "fatal": True,
            "severity": "critical",
            "count": 1,
            "pci": ["0000:c2:00.0"],
            "last": "nvidia-nvswitch0: SXid (PCI:0000:c2:00.0): 20034, Fatal, Link 28 LTSSM Fault Up",
        }
    )


def _swappiness_60_with_swap(f):
    host(f)["vm"]["swappiness"] = 60
    host(f)["memory"]["swap_total_mib"] = 8192


def _nic_on_one_node(f):
    for n in nics(f):
        n["numa_node"] = 0


# rule id -> (mutation that still passes (None: the healthy host), mutation that fails[, policy for both])
def _probe(f):
    return f["probe"]


def _starved(f):
    """GPU 0 waits for its input: 12 % busy while the 14 CPUs its process may use are saturated."""
    _probe(f)["gpus"][0]["utilization"].update(gpu_pct=12.0, memory_pct=3.0)
    _probe(f)["processes"][0].update(cpu_pct=1372.0, allowed_busy_pct=99.1, own_share_pct=98.0, saturation_pct=99.1)


def _gpu_busy_cpus_saturated(f):
    """Saturated CPUs with a busy GPU: the GPU is the bottleneck, as it should be."""
    _probe(f)["processes"][0].update(cpu_pct=1372.0, allowed_busy_pct=99.1, own_share_pct=98.0, saturation_pct=99.1)


def _far_node(f):
    """GPU 0 is on node 0; its process is bound to node 1's CPUs 56-69."""
    _probe(f)["processes"][0].update(
        allowed_cpus="56-69", last_cpu={str(56 + t): {"threads": 2, "cpu_pct": 51.6} for t in range(12)}
    )


def _one_thread_strays(f):
    """One of 12 busy CPUs is off the node (a migration caught mid-way): under far_numa_pct."""
    _probe(f)["processes"][0]["last_cpu"]["60"] = _probe(f)["processes"][0]["last_cpu"].pop("11")


def _pinned_to(cpus, count, pinned=True):
    return lambda f: _probe(f)["processes"][0].update(allowed_cpus=cpus, allowed_count=count, pinned=pinned)


def _probe_swapping(f):
    _probe(f)["memory"].update(swap_total_mib=8192, swap_used_mib=6000, swap_in_per_s=420.0, swap_out_per_s=610.0)


def _swapping_without_gpu_jobs(f):
    _probe_swapping(f)
    for p in _probe(f)["processes"]:
        p.update(visible=False)


CASES = {
    "GPU-MEM-001": (_full_not_swapping, _full_and_swapping),
    "HOST-MEM-001": (None, _set(lambda f: host(f)["memory"], swap_in_per_s=300.0, swap_out_per_s=500.0)),
    # Without swap vm.swappiness is moot (the healthy host has none, as most cloud GPU VMs): judged where swap exists.
    "HOST-MEM-002": (_set(lambda f: host(f)["vm"], swappiness=60), _swappiness_60_with_swap),
    # RHEL's default (enabled=always, defrag=madvise) passes; the stalls come from defrag=always.
    "HOST-MEM-003": (_set(lambda f: host(f)["thp"], enabled="always"), _set(lambda f: host(f)["thp"], defrag="always")),
    "HOST-MEM-004": (
        None,
        lambda f: host(f).update(
            memlock={
                "process_soft_kb": 8192,
                "process_hard_kb": 8192,
                "configured": [{"path": "/etc/security/limits.conf", "domain": "*", "type": "soft", "value_kb": 65536}],
            }
        ),
    ),
    "HOST-MEM-005": (
        _set(lambda f: host(f)["vm"], overcommit_memory=1),
        _set(lambda f: host(f)["vm"], overcommit_memory=2),
    ),
    # acpi-cpufreq's powersave pins the lowest frequency (test_cpu_governor.py: what each governor does per driver).
    "HOST-CPU-001": (
        None,
        _set(lambda f: host(f)["cpu"], governors={"powersave": "0-223"}, scaling_driver="acpi-cpufreq"),
    ),
    # Logical CPUs, as the clouds sell them: Azure ND H100 v5 (96 vCPUs, 48 cores, 8 GPUs) passes; 8 per GPU fails.
    "HOST-CPU-002": (
        _set(lambda f: host(f)["cpu"], threads=96, cores=48),
        _set(lambda f: host(f)["cpu"], threads=64, cores=32),
    ),
    "GPU-NUMA-001": (None, _nic_on_one_node),
    "HOST-CPU-003": (None, _set(lambda f: host(f)["numa"], balancing=True)),
    "HOST-CPU-004": (None, _set(lambda f: host(f)["irqbalance"], running=False), {"cpu": {"irqbalance": "running"}}),
    # Nothing declared: a cloud's own MTU (GCP 1460) passes; below the IPv6 minimum 1280 fails.
    "NET-MTU-001": (lambda f: nics(f)[0].update(mtu=1460), lambda f: nics(f)[0].update(mtu=1200)),
    # Rings far below their maximum with no drops pass; a ring-drop counter growing between readings fails.
    "NET-RING-001": (
        lambda f: nics(f)[0]["rings"].update(rx=1024, tx=1024),
        lambda f: nics(f)[0]["drops"]["ring"]["rx_out_of_buffer"].update(total=1207310, delta=3366),
    ),
    "NET-OFFL-001": (None, lambda f: nics(f)[1]["offloads"].update({"generic-receive-offload": False})),
    "NET-TCP-001": (None, lambda f: tcp(f).update(rmem=[4096, 131072, 6291456], wmem=[4096, 16384, 4194304])),
    "NET-TCP-002": (None, _set(tcp, congestion_control="cubic")),
    "NET-TCP-003": (None, _set(tcp, mtu_probing=0)),
    "NET-TCP-004": (None, _set(tcp, slow_start_after_idle=1)),
    "GPU-PWR-001": (None, _gpu(3, lambda g: g.update(persistence_mode=False))),
    "GPU-PWR-002": (None, _gpu(0, lambda g: g["power"].update(limit_w=250.0, enforced_limit_w=250.0))),
    "GPU-PWR-003": (
        None,
        _gpu(
            1,
            lambda g: g["clock_event_reasons"].update(
                mask="0x44",
                active=["sw_power_cap", "hw_thermal_slowdown"],
                throttling=["sw_power_cap", "hw_thermal_slowdown"],
            ),
        ),
    ),
    "GPU-THM-001": (None, _gpu(2, lambda g: g["temperature"].update(gpu=86))),
    # An idle GPU with a trained-down link passes; a busy one at x8 fails.
    "GPU-PCI-001": (
        _gpu(4, lambda g: (g["pcie"].update(gen_current=1), g["utilization"].update(gpu_pct=0))),
        _gpu(4, lambda g: g["pcie"].update(width_current=8)),
    ),
    "GPU-ECC-001": (None, _gpu(5, lambda g: g["ecc"].update(current=False, pending=False))),
    "GPU-ECC-002": (None, _gpu(5, lambda g: g["ecc"].update(pending=False))),
    "GPU-HLT-001": (None, _gpu(6, lambda g: g["remapped_rows"].update(failure=True))),
    "GPU-HLT-002": (None, _gpu(7, lambda g: g.update(lost=True))),
    "HOST-HLT-001": (
        None,
        lambda f: host(f)["kernel_log"]["xid"].append(
            {
                "code": 79,
                "meaning": "GPU has fallen off the bus",
                "severity": "critical",
                "count": 1,
                "pci": ["0000:3b:00"],
                "last": "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.",
            }
        ),
    ),
    "HOST-HLT-002": (None, lambda f: host(f)["kernel_log"]["aer"].update(uncorrected=2, last="AER: Uncorrected")),
    # Issue 13 §3, NVIDIA DCGM's health watches: a host with no NVLink link up anywhere (no bridge) passes.
    "GPU-NVL-001": (
        _each_gpu(lambda g: g["nvlink"].update(up=0, down=list(range(18)))),
        _gpu(2, lambda g: g["nvlink"].update(up=16, down=[3, 4])),
    ),
    # Lifetime totals alone are not judged (DCGM judges the increase); one replay while sampled fails.
    "GPU-NVL-002": (
        _gpu(3, lambda g: g["nvlink"]["errors"].update(replay=12, crc_flit=4000)),
        _gpu(3, lambda g: g["nvlink"]["errors_increase"].update(replay=1)),
    ),
    # A newer driver's health mask with every bit "false" (and configuration "none") passes.
    "GPU-FAB-001": (
        _each_gpu(lambda g: g["fabric"].update(health_mask="0x000001aa")),
        _gpu(0, lambda g: g["fabric"].update(state="not_started", status=None)),
    ),
    "GPU-ECC-003": (
        _gpu(5, lambda g: g["ecc"].update(volatile_corrected=1200, aggregate_corrected=5000)),
        _gpu(5, lambda g: g["ecc"].update(volatile_uncorrected=2, aggregate_uncorrected=2)),
    ),
    "GPU-ECC-004": (
        _each_gpu(lambda g: g.update(retired_pages={"single_bit": 40, "double_bit": 2, "pending": False})),
        _each_gpu(lambda g: g.update(retired_pages={"single_bit": 40, "double_bit": 23, "pending": False})),
    ),
    "GPU-RCV-001": (None, _gpu(1, lambda g: g.update(recovery_action="gpu_reset"))),
    # An idle gen1 x16 link allows ceil(0.15 x 16) = 3 replays a minute; 40 in one second at gen5 x16 (31) fails.
    "GPU-PCI-002": (
        _gpu(0, lambda g: g["pcie"].update(gen_current=1, replay_count=3, replay_increase=3)),
        _gpu(0, lambda g: g["pcie"].update(replay_count=40, replay_increase=40)),
    ),
    "GPU-MIG-001": (
        _each_gpu(lambda g: g["mig"].update(current=True, pending=True)),
        _gpu(2, lambda g: g["mig"].update(pending=True)),
    ),
    "GPU-FW-001": (
        _gpu(7, lambda g: g.update(name="NVIDIA H100 PCIe", vbios_version="96.00.30.00.01")),
        _gpu(7, lambda g: g.update(vbios_version="96.00.30.00.01")),
    ),
    "SW-DRV-001": (
        None,
        lambda f: f["gpu"]["driver"].update(
            version="525.147.05", kernel_module_version="525.147.05", fabricmanager_version="525.147.05"
        ),
    ),
    "SW-CUDA-001": (None, _cuda_too_new),
    "GPU-HLT-003": (None, _gpu_missing_from_nvml),
    "HOST-HLT-003": (None, _fatal_sxid),
    "SW-KMOD-001": (None, lambda f: f["gpu"]["driver"].update(kernel_module_version="535.183.01")),
    "SW-FM-001": (None, lambda f: f["gpu"]["driver"].update(fabricmanager_version="550.54.15")),
    "SW-IMEX-001": (gb200_tray, lambda f: gb200_tray(f, imex_running=False)),
    # nvidia-ml-py 12.535 has no nvmlDeviceGetNumaNodeId: a GPU's NUMA node unknown (sysfs had none either).
    "SW-NVML-001": (
        None,
        lambda f: f["gpu"]["nvml"]["binding"].update(
            version="12.535.161", lacks={"numa_node": ["nvmlDeviceGetNumaNodeId"]}
        ),
    ),
    "HOST-BAL-001": (_gpu_busy_cpus_saturated, _starved),
    "HOST-BAL-002": (_one_thread_strays, _far_node),
    # Unpinned on a small host is HOST-CPU-002's finding, not a pinning one.
    "HOST-BAL-003": (_pinned_to("0-7", 8, pinned=False), _pinned_to("0-3", 4)),
    "HOST-BAL-004": (_swapping_without_gpu_jobs, _probe_swapping),
}


def _evaluate(facts, overrides=None):
    policy = pol_mod.validate(overrides or {}, known_rules=rules.BY_ID)
    return {f["rule"]: f for f in rules.evaluate(facts, policy)}


def case_policy(rule_id):
    """The policy a rule's cases run under, or None (test_policy_keys reads it too)."""
    return CASES[rule_id][2] if len(CASES[rule_id]) > 2 else None


def test_every_rule_has_a_pass_and_a_fail_case():
    assert set(CASES) == set(rules.BY_ID)


def test_healthy_host_passes_everything():
    findings = _evaluate(healthy())
    bad = {k: (f["status"], f["message"]) for k, f in findings.items() if f["status"] != "pass"}
    assert not bad


@pytest.mark.parametrize("rule_id", sorted(CASES))
def test_rule_passes(rule_id):
    facts = healthy()
    mutate = CASES[rule_id][0]
    if mutate:
        mutate(facts)
    finding = _evaluate(facts, case_policy(rule_id))[rule_id]
    assert finding["status"] == "pass", finding


@pytest.mark.parametrize("rule_id", sorted(CASES))
def test_rule_fails(rule_id):
    facts = healthy()
    CASES[rule_id][1](facts)
    findings = _evaluate(facts, case_policy(rule_id))
    finding = findings[rule_id]
    assert finding["status"] == "fail", finding
    assert finding["message"] and finding["expected"] is not None
    # The change trips its own rule; other rules may legitimately react too (GPU-MEM-001 implies swapping).
    rule = rules.BY_ID[rule_id]
    assert finding["area"] == rule.area and finding["title"] == rule.title
    assert finding["fix"]["role"] or finding["fix"]["manual"]


def test_classic_case_study_fails_memory_rules_together():
    facts = healthy()
    _full_and_swapping(facts)
    findings = _evaluate(facts)
    failing = {k for k, f in findings.items() if f["status"] == "fail"}
    assert failing == {"GPU-MEM-001", "HOST-MEM-001"}
    assert findings["GPU-MEM-001"]["severity"] == "critical"
    assert [i["gpu"] for i in findings["GPU-MEM-001"]["items"]] == list(range(8))


def test_no_gpus_skips_gpu_rules_but_host_rules_run():
    facts = healthy()
    facts["gpu"] = {"nvml": {"available": False, "error": "DriverNotLoaded"}, "driver": {}, "gpus": [], "gpu_count": 0}
    findings = _evaluate(facts)
    for rule_id in ("GPU-PWR-001", "GPU-MEM-001", "HOST-CPU-002", "GPU-HLT-002", "SW-DRV-001"):
        assert findings[rule_id]["status"] == "skip", rule_id
    assert findings["HOST-CPU-001"]["status"] == "pass"


def test_missing_facts_skip_with_reason():
    findings = _evaluate({"gpu": None, "host": None, "network": None, "links": None})
    assert {f["status"] for f in findings.values()} == {"skip"}
    assert all(f["message"] for f in findings.values())


def test_no_declared_links_skips_long_haul_rules():
    facts = healthy()
    facts["links"] = {"source": "none", "peers": []}
    tcp(facts).update(congestion_control="cubic", rmem=[4096, 131072, 6291456])
    findings = _evaluate(facts)
    for rule_id in ("NET-TCP-001", "NET-TCP-002", "NET-TCP-003", "NET-TCP-004"):
        assert findings[rule_id]["status"] == "skip"


def test_bbr_unavailable_is_a_warning():
    facts = healthy()
    tcp(facts).update(congestion_control="cubic", available_congestion_control=["reno", "cubic"])
    assert _evaluate(facts)["NET-TCP-002"]["status"] == "warn"


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
    assert _evaluate(facts, scope)["NET-TCP-002"]["status"] == "pass"
    assert _evaluate(facts)["NET-TCP-002"]["status"] == "fail"  # scope host: the default is judged
    facts["network"]["routes"]["2001:db8:100::/48"] = None
    finding = _evaluate(facts, scope)["NET-TCP-002"]
    assert finding["status"] == "fail" and "2001:db8:100::/48" in finding["message"]
    del facts["network"]["routes"]
    assert _evaluate(facts, scope)["NET-TCP-002"]["status"] == "skip"
    del link["prefixes"]
    finding = _evaluate(facts, scope)["NET-TCP-002"]
    assert finding["status"] == "fail" and "no prefix is declared" in finding["message"]


def test_tcp_buffer_threshold_is_four_bdp():
    facts = healthy()  # 180 ms x 1 Gbit/s -> BDP 22.5 MB, 4x = 90 MB
    tcp(facts).update(rmem=[4096, 131072, 90_000_000], wmem=[4096, 16384, 90_000_000])
    assert _evaluate(facts)["NET-TCP-001"]["status"] == "pass"
    tcp(facts).update(rmem=[4096, 131072, 89_999_999])
    finding = _evaluate(facts)["NET-TCP-001"]
    assert finding["status"] == "fail" and finding["expected"]["tcp_rmem_max"] == ">= 90000000"
    assert "4.0 x bandwidth-delay product" in finding["message"]
    two = _evaluate(facts, {"network": {"buffer_factor": 2.0}})["NET-TCP-001"]
    assert two["status"] == "pass" and two["expected"]["tcp_rmem_max"] == ">= 45000000"


def test_policy_toggle_and_regrade():
    facts = healthy()
    _swappiness_60_with_swap(facts)
    off = _evaluate(facts, {"rules": {"HOST-MEM-002": {"enabled": False}}})["HOST-MEM-002"]
    assert off["status"] == "skip" and "disabled by policy" in off["message"]
    low = _evaluate(facts, {"rules": {"HOST-MEM-002": {"severity": "low"}}})["HOST-MEM-002"]
    assert low["status"] == "fail" and low["severity"] == "low"


def test_min_severity_threshold():
    facts = healthy()
    _swappiness_60_with_swap(facts)  # medium
    findings = _evaluate(facts, {"min_severity": "high"})
    assert findings["HOST-MEM-002"]["status"] == "skip"
    assert findings["GPU-PWR-001"]["status"] == "pass"  # high: still evaluated


def test_xid_finding_takes_the_worst_code_severity():
    facts = healthy()
    CASES["HOST-HLT-001"][1](facts)
    assert _evaluate(facts)["HOST-HLT-001"]["severity"] == "critical"


def test_pending_remap_is_high_and_failure_critical():
    facts = healthy()
    gpus(facts)[0]["remapped_rows"]["pending"] = True
    assert _evaluate(facts)["GPU-HLT-001"]["severity"] == "high"
    gpus(facts)[1]["remapped_rows"]["failure"] = True
    assert _evaluate(facts)["GPU-HLT-001"]["severity"] == "critical"


def test_a_rule_that_raises_is_an_error_not_a_crash():
    facts = healthy()
    _swappiness_60_with_swap(facts)
    host(facts)["vm"]["swappiness"] = "sixty"  # a type the check does not expect
    finding = _evaluate(facts)["HOST-MEM-002"]
    assert finding["status"] == "error" and "TypeError" in finding["message"]


def test_summarize_counts_fail_and_warn():
    facts = healthy()
    _full_and_swapping(facts)
    summary = rules.summarize(list(_evaluate(facts).values()))
    assert summary["by_status"]["fail"] == 2
    assert summary["by_severity"]["critical"] == 1 and summary["by_severity"]["high"] == 1
    assert summary["by_area"]["memory"] == 2


def test_catalog_entries_are_complete():
    ids = [r["id"] for r in rules.catalog()]
    assert len(ids) == len(set(ids)) >= 30
    for r in rules.catalog():
        assert r["rationale"].endswith(".") and len(r["rationale"]) > 40
        assert r["fix"]["role"] or r["fix"]["manual"]
        if r["fix"]["role"]:
            assert r["fix"]["tag"] == r["id"]


def test_mtu_policy_for_jumbo_fabrics():
    facts = healthy()
    nics(facts)[0]["mtu"] = 1500
    finding = _evaluate(facts, {"network": {"min_mtu": 9000}})["NET-MTU-001"]
    assert finding["status"] == "fail" and finding["items"] == [
        {"nic": "ens1", "mtu": 1500, "expected": 9000, "kind": "min", "source": "network.min_mtu"}
    ]


# ---------------------------------------------------------------- issue 12: deliberate choices are kept


def _limits(f, *watts):
    for g, w in zip(gpus(f), watts, strict=True):
        g["power"].update(limit_w=w, enforced_limit_w=w)


@pytest.mark.parametrize(
    "power, limits, status, problems",
    [
        ({"limit_w": 500}, [500.0] * 8, "pass", []),
        ({"limit_w": 500}, [700.0] + [500.0] * 7, "fail", ["above the declared cap"]),  # the default is not the cap
        ({"limit_w": 500}, [450.0] + [500.0] * 7, "fail", ["below the declared cap"]),
        ({"limit_pct": 80}, [560.0] * 8, "pass", []),  # 80 % of 700 W
        ({"limit_pct": 80}, [700.0] * 8, "fail", ["above the declared cap"] * 8),
        ({"limit_w": 150}, [200.0] * 8, "pass", []),  # below the GPU's 200 W minimum: clamped to it
        ({"limit_w": 900}, [700.0] * 8, "pass", []),  # above the 700 W maximum: clamped to it
        ({}, [500.0] + [700.0] * 7, "fail", ["power limit below"]),  # no cap declared: a capped GPU is a finding
    ],
)
def test_power_limit_against_a_declared_cap(power, limits, status, problems):
    facts = healthy()
    _limits(facts, *limits)
    finding = _evaluate(facts, {"power": power})["GPU-PWR-002"]
    assert finding["status"] == status, finding
    if power:
        assert [i["problem"] for i in finding["items"]] == problems
        assert "declared cap" in finding["expected"]
    elif problems:
        assert problems[0] in finding["message"] and finding["items"][0]["gpu"] == 0


def test_above_the_declared_cap_names_the_gpu_and_the_cap():
    facts = healthy()
    _limits(facts, *([300.0] + [250.0] * 7))
    finding = _evaluate(facts, {"power": {"limit_w": 250}})["GPU-PWR-002"]
    assert finding["status"] == "fail"
    assert finding["items"] == [
        {"gpu": 0, "limit_w": 300.0, "declared_cap_w": 250.0, "problem": "above the declared cap"}
    ]
    assert "GPU(s) [0] above the declared cap" in finding["message"] and "250 W" in finding["message"]


def test_irqbalance_any_by_default_and_pinned_irqs_are_kept():
    facts = healthy()
    host(facts)["irqbalance"]["running"] = False
    assert _evaluate(facts)["HOST-CPU-004"]["status"] == "pass"  # default any: the owner's choice
    running = {"cpu": {"irqbalance": "running"}}
    assert _evaluate(facts, running)["HOST-CPU-004"]["status"] == "fail"  # stopped, nothing pinned
    host(facts)["irq"]["pinned"] = [
        {"irq": 120, "device": "ens1", "cpus": "2"},
        {"irq": 121, "device": "ens1", "cpus": "3"},
        {"irq": 300, "device": "0000:18:00.0", "cpus": "4"},
    ]
    finding = _evaluate(facts, running)["HOST-CPU-004"]
    assert finding["status"] == "pass", finding
    assert finding["message"] == (
        "irqbalance is stopped; IRQs pinned by hand: 0000:18:00.0 (IRQ 300), ens1 (IRQs 120-121)"
    )
    assert len(finding["items"]) == 3
    # Pinned IRQs do not excuse a running irqbalance that the policy wants stopped.
    host(facts)["irqbalance"]["running"] = True
    assert _evaluate(facts, {"cpu": {"irqbalance": "stopped"}})["HOST-CPU-004"]["status"] == "fail"


def test_swappiness_is_moot_without_swap():
    facts = healthy()
    host(facts)["vm"]["swappiness"] = 60  # Ubuntu's default, on a cloud VM with no swap
    finding = _evaluate(facts)["HOST-MEM-002"]
    assert finding["status"] == "pass" and "no swap" in finding["message"]
    host(facts)["memory"]["swap_total_mib"] = None  # unknown: judged as before
    assert _evaluate(facts)["HOST-MEM-002"]["status"] == "fail"


def test_power_cap_alone_is_info_not_throttling():
    facts = healthy()
    gpus(facts)[1]["clock_event_reasons"].update(mask="0x4", active=["sw_power_cap"], throttling=["sw_power_cap"])
    finding = _evaluate(facts)["GPU-PWR-003"]
    assert finding["status"] == "warn" and finding["severity"] == "info"
    assert finding["items"] == [{"gpu": 1, "reasons": ["sw_power_cap"]}]
    # With a thermal reason too it is a fault, and the message names only the reasons that mean trouble.
    gpus(facts)[1]["clock_event_reasons"].update(
        mask="0x44", active=["sw_power_cap", "hw_thermal_slowdown"], throttling=["sw_power_cap", "hw_thermal_slowdown"]
    )
    finding = _evaluate(facts)["GPU-PWR-003"]
    assert finding["status"] == "fail" and finding["severity"] == "high"
    assert finding["items"] == [{"gpu": 1, "reasons": ["hw_thermal_slowdown"]}]


# --- issue 13: SW-KMOD-001, SW-CUDA-001, SW-FM-001 on NVSwitch hosts only, GPU-HLT-003, HOST-HLT-003 -------------


def _nvml_mismatch(f, kmod="535.183.01", library="550.90.07"):
    """What gpu_info returns when nvmlInit fails with NVML_ERROR_LIB_RM_VERSION_MISMATCH: no NVML facts at all."""
    f["gpu"]["nvml"] = {
        "available": False,
        "source": "pynvml",
        "error_code": "LibRmVersionMismatch",
        "error": "NVML could not be initialised: LibRmVersionMismatch (RM has detected an NVML/RM version mismatch.)",
        "library": None,
    }
    f["gpu"]["driver"].update(
        version=None,
        branch=None,
        nvml_version=None,
        cuda_driver_version=None,
        kernel_module_version=kmod,
        library_version=library,
    )
    f["gpu"]["gpus"] = []
    f["gpu"]["gpu_count"] = 0


def test_kmod_nvml_mismatch_error_is_itself_the_finding():
    # Old code: the audit marked NVML unavailable, driver.version was None and SW-KMOD-001 skipped.
    facts = healthy()
    _nvml_mismatch(facts)
    finding = _evaluate(facts)["SW-KMOD-001"]
    assert finding["status"] == "fail" and finding["severity"] == "critical"
    assert "535.183.01" in finding["message"] and "550.90.07" in finding["message"]
    assert "LIB_RM_VERSION_MISMATCH" in finding["message"]


def test_kmod_mismatch_error_without_versions_still_fails():
    facts = healthy()
    _nvml_mismatch(facts, kmod=None, library=None)
    finding = _evaluate(facts)["SW-KMOD-001"]
    assert finding["status"] == "fail" and "unknown" in finding["message"]


def test_kmod_compares_the_library_file_not_only_nvml():
    # NVML answered (a stale state), but the installed library is already 570: the loaded 550 module is stale.
    facts = healthy()
    facts["gpu"]["driver"]["library_version"] = "570.86.15"
    finding = _evaluate(facts)["SW-KMOD-001"]
    assert finding["status"] == "fail" and "570.86.15" in finding["message"]


def test_kmod_other_nvml_errors_are_not_a_mismatch():
    facts = healthy()
    _nvml_mismatch(facts, kmod=None, library="550.90.07")
    facts["gpu"]["nvml"]["error_code"] = "DriverNotLoaded"
    assert _evaluate(facts)["SW-KMOD-001"]["status"] == "skip"


def _toolkit(f, version, driver_cuda, driver_version):
    f["gpu"]["driver"].update(
        cuda_driver_version=driver_cuda,
        version=driver_version,
        library_version=driver_version,
        kernel_module_version=driver_version,
        fabricmanager_version=driver_version,
    )
    f["gpu"]["driver"]["cuda_toolkits"] = [
        {"path": f"/usr/local/cuda-{version[:4]}", "version": version, "default": True}
    ]


def test_cuda_minor_gap_is_a_low_warning_naming_ptx():
    # Old code: a 12.4 toolkit on driver 535 (CUDA 12.2) failed at high severity; minor-version compatibility runs it.
    facts = healthy()
    _toolkit(facts, "12.4.1", "12.2", "535.183.01")
    finding = _evaluate(facts)["SW-CUDA-001"]
    assert finding["status"] == "warn" and finding["severity"] == "low"
    assert "PTX" in finding["message"]


@pytest.mark.parametrize(
    "toolkit, driver_cuda, driver",
    [
        ("13.0.1", "12.8", "570.86.15"),  # a newer major than the driver's CUDA
        ("12.4.1", "11.8", "520.61.05"),  # 12.x on a pre-525 branch
        ("12.0.1", "12.0", "520.61.05"),  # a 12.0 driver CUDA version reported by a branch below the 12.x minimum
    ],
)
def test_cuda_major_gap_fails(toolkit, driver_cuda, driver):
    facts = healthy()
    _toolkit(facts, toolkit, driver_cuda, driver)
    finding = _evaluate(facts)["SW-CUDA-001"]
    assert finding["status"] == "fail" and finding["severity"] == "high", finding


def test_cuda_compat_package_covers_a_major_gap():
    facts = healthy()
    _toolkit(facts, "13.0.1", "12.4", "550.90.07")
    facts["gpu"]["driver"]["cuda_compat"] = [
        {"cuda": "13.0", "driver": "580.65.06", "path": "/usr/local/cuda-13.0/compat"}
    ]
    finding = _evaluate(facts)["SW-CUDA-001"]
    assert finding["status"] == "pass" and "cuda-compat" in finding["message"]


def test_cuda_compat_too_old_does_not_cover():
    facts = healthy()
    _toolkit(facts, "13.0.1", "12.4", "550.90.07")
    facts["gpu"]["driver"]["cuda_compat"] = [
        {"cuda": "12.8", "driver": "570.86.15", "path": "/usr/local/cuda-12.8/compat"}
    ]
    assert _evaluate(facts)["SW-CUDA-001"]["status"] == "fail"


def _no_nvswitch(f):
    f["gpu"]["pci"]["nvswitches"] = []


def test_fm_mismatch_without_nvswitch_is_info_only():
    # Old code: SW-FM-001 failed critical on any host with an installed fabric manager of another version
    # (a PCIe L40S or H100 PCIe box, a GH200) although nothing there uses it.
    facts = healthy()
    _no_nvswitch(facts)
    facts["gpu"]["driver"]["fabricmanager_version"] = "550.54.15"
    finding = _evaluate(facts)["SW-FM-001"]
    assert finding["status"] == "warn" and finding["severity"] == "info"


def test_fm_not_installed_without_nvswitch_passes():
    facts = healthy()
    _no_nvswitch(facts)
    facts["gpu"]["driver"].update(fabricmanager_version=None, fabricmanager_running=False)
    assert _evaluate(facts)["SW-FM-001"]["status"] == "pass"


@pytest.mark.parametrize(
    "change, words",
    [
        ({"fabricmanager_version": None, "fabricmanager_running": False}, "not installed"),
        ({"fabricmanager_running": False}, "not running"),
    ],
)
def test_fm_on_nvswitch_host_must_be_installed_and_running(change, words):
    # Old code: FM not installed skipped, FM stopped passed.
    facts = healthy()
    facts["gpu"]["driver"].update(change)
    finding = _evaluate(facts)["SW-FM-001"]
    assert finding["status"] == "fail" and finding["severity"] == "critical"
    assert words in finding["message"]


def test_gpu_count_below_expected_is_critical():
    facts = healthy()
    facts["gpu"]["gpus"][2]["lost"] = True
    findings = _evaluate(facts, {"health": {"expected_gpu_count": 8}})
    assert findings["GPU-HLT-003"]["status"] == "fail" and findings["GPU-HLT-003"]["severity"] == "critical"
    assert "7 usable GPU(s), the policy expects 8" in findings["GPU-HLT-003"]["message"]


def test_gpu_count_nvml_unavailable_with_expected_count():
    # Issue 25: the mismatch is SW-KMOD-001's finding; the count is unknown, not a second failure.
    facts = healthy()
    _nvml_mismatch(facts)
    facts["gpu"]["pci"]["available"] = False
    finding = _evaluate(facts, {"health": {"expected_gpu_count": 8}})["GPU-HLT-003"]
    assert finding["status"] == "skip" and "SW-KMOD-001" in finding["message"]
    assert "LibRmVersionMismatch" in finding["message"]


def test_gpu_missing_from_nvml_is_high_without_expected_count():
    facts = healthy()
    _gpu_missing_from_nvml(facts)
    finding = _evaluate(facts)["GPU-HLT-003"]
    assert finding["severity"] == "high" and finding["observed"]["not_in_nvml"] == ["0000:5d:00.0"]


def test_gpus_given_to_vms_or_virtual_functions_are_not_missing():
    facts = healthy()
    _gpu_missing_from_nvml(facts)
    facts["gpu"]["pci"]["gpus"][3]["driver"] = "vfio-pci"
    facts["gpu"]["pci"]["gpus"].append(
        {"address": "0000:18:00.4", "device": "0x2330", "class": "0x030200", "driver": "nvidia", "virtual": True}
    )
    assert _evaluate(facts)["GPU-HLT-003"]["status"] == "pass"


def test_gpu_count_matches_expected():
    facts = healthy()
    assert _evaluate(facts, {"health": {"expected_gpu_count": 8}})["GPU-HLT-003"]["status"] == "pass"


def test_non_fatal_sxid_is_medium_and_below_floor_ignored():
    facts = healthy()
    host(facts)["kernel_log"]["sxid"].append(
        {"code": 19084, "fatal": False, "severity": "medium", "count": 2, "pci": ["0000:c6:00.0"], "last": "..."}
    )
    finding = _evaluate(facts)["HOST-HLT-003"]
    assert finding["status"] == "fail" and finding["severity"] == "medium"
    assert _evaluate(facts, {"health": {"xid_min_severity": "high"}})["HOST-HLT-003"]["status"] == "pass"


def test_gpus_without_bus_ids_are_compared_by_count():
    facts = healthy()
    for g in facts["gpu"]["gpus"]:
        g["pci_bus_id"] = None
    assert _evaluate(facts)["GPU-HLT-003"]["status"] == "pass"
    facts["gpu"]["gpus"].pop()
    finding = _evaluate(facts)["GPU-HLT-003"]
    assert finding["status"] == "fail" and "8 GPUs on the PCI bus, NVML lists 7" in finding["message"]
