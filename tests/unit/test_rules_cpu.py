"""The rules of rules/cpu.py: HOST-CPU-001..004 and GPU-NUMA-001, a passing and a failing case each (CASES), and
their tests.

Issue 13: HOST-CPU-002 counts what the clouds sell and an Arm (Grace Hopper) host is judged sensibly. Issue 25
point 4: HOST-CPU-001 judges what the governor does under the host's scaling driver (kernel
admin-guide/pm/cpufreq.rst: the generic powersave sets the policy's lowest frequency, ondemand/conservative follow
the CPU load, schedutil the scheduler's utilization, userspace holds what a program wrote to scaling_setspeed;
intel_pstate.rst and amd-pstate.rst: the active-mode drivers' own powersave is dynamic (HWP with an
energy-performance preference; intel_pstate without HWP by utilization)).
Host facts come from the real reader (module_utils/host.py) over mkroot fixture roots (rule_cases.host_facts); GPU
facts from rule_facts. Each test marked "old code: ..." failed against the rules before its change."""

from __future__ import annotations

import pytest
import rule_cases
from ansible_collections.gpufleet.tuning.plugins.module_utils import host as host_mod
from ansible_collections.gpufleet.tuning.plugins.module_utils import policy as pol_mod
from ansible_collections.gpufleet.tuning.plugins.module_utils import rules, targets
from ansible_collections.gpufleet.tuning.plugins.module_utils.hostfs import HostFS
from rule_cases import evaluate, host, host_facts, mkroot, nics, set_
from rule_facts import gpu, healthy


def _nic_on_one_node(f):
    for n in nics(f):
        n["numa_node"] = 0


# rule id -> (mutation that still passes (None: the healthy host), mutation that fails[, policy for both])
CASES = {
    # acpi-cpufreq's powersave pins the lowest frequency (the governor tests below: what each one does per driver).
    "HOST-CPU-001": (
        None,
        set_(lambda f: host(f)["cpu"], governors={"powersave": "0-223"}, scaling_driver="acpi-cpufreq"),
    ),
    # Logical CPUs, as the clouds sell them: Azure ND H100 v5 (96 vCPUs, 48 cores, 8 GPUs) passes; 8 per GPU fails.
    "HOST-CPU-002": (
        set_(lambda f: host(f)["cpu"], threads=96, cores=48),
        set_(lambda f: host(f)["cpu"], threads=64, cores=32),
    ),
    "GPU-NUMA-001": (None, _nic_on_one_node),
    "HOST-CPU-003": (None, set_(lambda f: host(f)["numa"], balancing=True)),
    "HOST-CPU-004": (None, set_(lambda f: host(f)["irqbalance"], running=False), {"cpu": {"irqbalance": "running"}}),
}

test_rule_passes, test_rule_fails = rule_cases.pass_and_fail(CASES)


def _finding(facts, rule_id, overrides=None):
    return evaluate(facts, overrides)[rule_id]


def test_irqbalance_any_by_default_and_pinned_irqs_are_kept():
    facts = healthy()
    host(facts)["irqbalance"]["running"] = False
    assert evaluate(facts)["HOST-CPU-004"]["status"] == "pass"  # default any: the owner's choice
    running = {"cpu": {"irqbalance": "running"}}
    assert evaluate(facts, running)["HOST-CPU-004"]["status"] == "fail"  # stopped, nothing pinned
    host(facts)["irq"]["pinned"] = [
        {"irq": 120, "device": "ens1", "cpus": "2"},
        {"irq": 121, "device": "ens1", "cpus": "3"},
        {"irq": 300, "device": "0000:18:00.0", "cpus": "4"},
    ]
    finding = evaluate(facts, running)["HOST-CPU-004"]
    assert finding["status"] == "pass", finding
    assert finding["message"] == (
        "irqbalance is stopped; IRQs pinned by hand: 0000:18:00.0 (IRQ 300), ens1 (IRQs 120-121)"
    )
    assert len(finding["items"]) == 3
    # Pinned IRQs do not excuse a running irqbalance that the policy wants stopped.
    host(facts)["irqbalance"]["running"] = True
    assert evaluate(facts, {"cpu": {"irqbalance": "stopped"}})["HOST-CPU-004"]["status"] == "fail"


# ------------------------------------------------------------------ HOST-CPU-002


@pytest.mark.parametrize(
    "shape, threads, cores",
    [
        ("AWS p5.48xlarge", 192, 96),
        ("Google Cloud a3-highgpu-8g", 208, 104),
        ("Azure ND H100 v5", 96, 48),  # old code: fail (48 physical cores / 8 GPUs = 6 < 8)
    ],
)
def test_the_big_clouds_8_gpu_shapes_pass(shape, threads, cores):
    facts = healthy()
    facts["host"]["cpu"].update(threads=threads, cores=cores)
    f = _finding(facts, "HOST-CPU-002")
    assert f["status"] == "pass", (shape, f)
    assert f["observed"]["cpus_per_gpu"] == threads / 8


def test_fewer_cpus_than_any_cloud_shape_fails_low():
    facts = healthy()
    facts["host"]["cpu"].update(threads=64, cores=32)
    f = _finding(facts, "HOST-CPU-002")
    assert (f["status"], f["severity"]) == ("fail", "low")
    assert f["message"] == "too few CPUs for 8 GPUs: 8.0 logical CPUs per GPU"
    # An owner who also wants physical cores says so.
    facts["host"]["cpu"].update(threads=96, cores=48)
    f = _finding(facts, "HOST-CPU-002", {"cpu": {"min_cores_per_gpu": 8}})
    assert f["status"] == "fail" and "6.0 physical cores per GPU" in f["message"]


# ------------------------------------------------------------------ aarch64: Grace Hopper


def test_grace_hopper_host_is_judged_sensibly(tmp_path):
    """One GH200: 72 Neoverse V2 cores; NVML puts the GPU on NUMA node 1, its own HBM, which has no CPUs.
    old code: GPU-NUMA-001 failed (the GPU's affinity 0-71 "reaches outside" the CPU-less node 1)."""
    facts, host = host_facts(tmp_path, mkroot.grace_hopper())
    assert host["cpu"]["model"] == "ARM Neoverse-V2"
    g = gpu(0)
    g.update(name="NVIDIA GH200 480GB", numa_node=1, cpu_affinity="0-71")
    facts["gpu"]["gpus"] = [g]
    facts["gpu"]["gpu_count"] = 1
    facts["network"]["nics"][0]["numa_node"] = 0
    facts["network"]["nics"][1]["numa_node"] = 0
    assert _finding(facts, "HOST-CPU-002")["status"] == "pass"
    assert _finding(facts, "HOST-CPU-002")["observed"]["cpus_per_gpu"] == 72.0
    numa = _finding(facts, "GPU-NUMA-001")
    assert numa["status"] == "pass", numa
    assert _finding(facts, "HOST-CPU-001")["status"] == "pass"  # cppc_cpufreq on performance
    # The same GPU on node 0 with an affinity beyond the node's CPUs still fails.
    g.update(numa_node=0, cpu_affinity="0-80")
    assert _finding(facts, "GPU-NUMA-001")["status"] == "fail"


# ------------------------------------------------------------------ HOST-CPU-001 under HWP


@pytest.mark.parametrize(
    "overrides, status, severity",
    [
        # stock Ubuntu on an Intel server: intel_pstate, powersave, EPP balance_performance -> a low warning
        ({"governor": "powersave"}, "warn", "low"),
        # the same driver steered to save power -> fails
        ({"governor": "powersave", "epp": "power"}, "fail", "high"),
        # acpi-cpufreq's powersave is the lowest clock -> fails
        ({"governor": "powersave", "scaling_driver": "acpi-cpufreq"}, "fail", "high"),
        ({}, "pass", "high"),
    ],
)
def test_powersave_under_hardware_p_states_is_a_warning_not_a_failure(tmp_path, overrides, status, severity):
    """old code: every stock Ubuntu server (intel_pstate powersave, EPP balance_performance) failed high."""
    facts, _ = host_facts(tmp_path, overrides)
    f = _finding(facts, "HOST-CPU-001")
    assert (f["status"], f["severity"]) == (status, severity), f
    if status == "warn":
        assert "balance_performance" in f["message"] and "intel_pstate" in f["message"]
    # cpu.hwp_epp: [] makes the governor the only passing state
    if status == "warn":
        assert _finding(facts, "HOST-CPU-001", {"cpu": {"hwp_epp": []}})["status"] == "fail"


# ------------------------------------------------------------------ GPU-NUMA-001 with the GPU's node unknown


def _numa_unread(facts, indexes, reason="binding lacks nvmlDeviceGetNumaNodeId"):
    for g in facts["gpu"]["gpus"]:
        if g["index"] in indexes:
            g["numa_node"] = None
            g.setdefault("unsupported", {})["numa_node"] = reason


def test_numa_node_unknown_is_not_a_pass(tmp_path):
    """Issue 25: nvidia-ml-py 12.535 has no nvmlDeviceGetNumaNodeId; where sysfs says -1 too, every GPU's node was
    None and GPU-NUMA-001 passed without judging anything (one failing finding fewer than 12.560 gave on the same
    GPUs). old code: "pass" with the NICs all on node 0."""
    facts = healthy()
    _nic_all_on_node0(facts)
    assert _finding(facts, "GPU-NUMA-001")["status"] == "fail"  # what a binding that reads the node says
    # Affinity that spans both sockets: the node cannot be inferred -> unknown, never a pass.
    for g in facts["gpu"]["gpus"]:
        g["cpu_affinity"] = _all_cpus(facts)
    _numa_unread(facts, {g["index"] for g in facts["gpu"]["gpus"]})
    f = _finding(facts, "GPU-NUMA-001")
    assert f["status"] == "skip", f
    assert f["message"].startswith("unknown:") and "binding lacks nvmlDeviceGetNumaNodeId" in f["message"]


def test_numa_node_inferred_from_the_gpus_cpu_affinity():
    """A GPU whose node NVML cannot give but whose CPU affinity lies within one node is on that node (nvidia-smi
    topo -m's NUMA Affinity): the same failing finding as a binding that reads the node."""
    facts = healthy()
    _nic_all_on_node0(facts)
    expected = _finding(facts, "GPU-NUMA-001")
    _numa_unread(facts, {g["index"] for g in facts["gpu"]["gpus"]})
    f = _finding(facts, "GPU-NUMA-001")
    assert f["status"] == "fail" and f["severity"] == expected["severity"]
    assert [i["gpus"] for i in f["items"]] == [i["gpus"] for i in expected["items"]]
    assert f["observed"]["numa_node_from_cpu_affinity"] == sorted(g["index"] for g in facts["gpu"]["gpus"])


def test_numa_node_unknown_is_named_next_to_a_failure():
    facts = healthy()
    _nic_all_on_node0(facts)
    gpus = facts["gpu"]["gpus"]
    gpus[0]["cpu_affinity"] = _all_cpus(facts)
    _numa_unread(facts, {gpus[0]["index"]})
    f = _finding(facts, "GPU-NUMA-001")
    assert f["status"] == "fail"
    assert f"NUMA node of GPU {gpus[0]['index']} unknown" in f["message"]


def _nic_all_on_node0(facts):
    for nic in facts["network"]["nics"]:
        nic["numa_node"] = 0


def _all_cpus(facts):
    return ",".join(node["cpus"] for node in facts["host"]["numa"]["nodes"])


# ------------------------------------------------------------------ HOST-CPU-001: what each governor does per driver


def _governor(facts, overrides=None):
    return _finding(facts, "HOST-CPU-001", overrides)


def _cpu(**values):
    facts = healthy()
    facts["host"]["cpu"].update(values)
    return facts


@pytest.mark.parametrize(
    ("driver", "governor"),
    [("acpi-cpufreq", "ondemand"), ("acpi-cpufreq", "conservative"), ("cppc_cpufreq", "schedutil")],
)
def test_load_following_governors_are_a_low_warning(driver, governor):
    """old code: fail at high, as for powersave. Ubuntu 22.04 on a bare-metal EPYC (acpi-cpufreq, ondemand on every
    CPU) and Grace (cppc_cpufreq, schedutil, the arm64 default) as shipped."""
    f = _governor(_cpu(scaling_driver=driver, governors={governor: "0-223"}))
    assert f["status"] == "warn" and f["severity"] == "low", f
    assert governor in f["message"] and "load" in f["message"]
    assert f["items"] == [
        {"governor": governor, "cpus": "0-223", "severity": "low", "meaning": f["items"][0]["meaning"]}
    ]
    assert f["observed"]["scaling_driver"] == driver


@pytest.mark.parametrize("driver", ["acpi-cpufreq", "intel_cpufreq", "amd-pstate", "cppc_cpufreq"])
def test_generic_powersave_pins_the_lowest_frequency_and_fails_high(driver):
    f = _governor(_cpu(scaling_driver=driver, governors={"powersave": "0-223"}))
    assert f["status"] == "fail" and f["severity"] == "high", f
    assert "lowest frequency" in f["message"] and driver in f["message"]


def test_hwp_powersave_with_balanced_epp_keeps_its_low_warning():
    f = _governor(
        _cpu(scaling_driver="intel_pstate", governors={"powersave": "0-223"}, epp={"balance_performance": "0-223"})
    )
    assert f["status"] == "warn" and f["severity"] == "low", f
    assert "balance_performance" in f["message"]
    f = _governor(_cpu(scaling_driver="amd-pstate-epp", governors={"powersave": "0-223"}, epp={"power": "0-223"}))
    assert f["status"] == "fail" and "power" in f["message"], f


def test_intel_pstate_powersave_without_hwp_follows_utilization():
    """No energy_performance_preference file: intel_pstate's own powersave without HWP (P-states in proportion to
    utilization), not the lowest clock. old code: fail at high."""
    f = _governor(_cpu(scaling_driver="intel_pstate", governors={"powersave": "0-223"}, epp={}))
    assert f["status"] == "warn" and f["severity"] == "low", f


def test_one_pinned_governor_among_load_following_ones_fails():
    f = _governor(_cpu(scaling_driver="acpi-cpufreq", governors={"ondemand": "0-111", "powersave": "112-223"}, epp={}))
    assert f["status"] == "fail", f
    assert [(i["governor"], i["severity"]) for i in f["items"]] == [("ondemand", "low"), ("powersave", "high")]


def test_userspace_is_judged_by_the_frequency_it_holds():
    at_max = {"setspeed_mhz": {"min": 3800, "max": 3800}, "below_max": ""}
    f = _governor(_cpu(scaling_driver="acpi-cpufreq", governors={"userspace": "0-223"}, userspace=at_max))
    assert f["status"] == "warn" and f["severity"] == "low" and "3800 MHz" in f["message"], f
    low = {"setspeed_mhz": {"min": 1500, "max": 3800}, "below_max": "0-3"}
    f = _governor(_cpu(scaling_driver="acpi-cpufreq", governors={"userspace": "0-223"}, userspace=low))
    assert f["status"] == "fail" and "0-3" in f["message"], f
    f = _governor(_cpu(scaling_driver="acpi-cpufreq", governors={"userspace": "0-223"}, userspace=None))
    assert f["status"] == "fail" and "not readable" in f["message"], f


def test_the_policy_governor_still_passes_and_is_what_the_fix_sets():
    facts = _cpu(scaling_driver="acpi-cpufreq", governors={"ondemand": "0-223"})
    f = _governor(facts, {"cpu": {"governor": "ondemand"}})
    assert f["status"] == "pass", f
    assert rules.BY_ID["HOST-CPU-001"].fix["role"] == "host_tuning"


def test_performance_under_a_policy_asking_for_another_governor_is_low():
    facts = _cpu(scaling_driver="acpi-cpufreq", governors={"performance": "0-223"})
    f = _governor(facts, {"cpu": {"governor": "schedutil"}})
    assert f["status"] == "warn" and f["severity"] == "low", f


def test_rule_cites_the_kernel_cpufreq_documentation():
    urls = {r[1] for r in rules.BY_ID["HOST-CPU-001"].references}
    assert {
        "https://docs.kernel.org/admin-guide/pm/cpufreq.html",
        "https://docs.kernel.org/admin-guide/pm/intel_pstate.html",
        "https://docs.kernel.org/admin-guide/pm/amd-pstate.html",
    } <= urls


def _userspace_root(tmp_path, speeds):
    """An acpi-cpufreq host on userspace (freq_max_mhz 3800): scaling_setspeed per CPU written as the kernel shows it
    (kHz) into the fixture tree."""
    root = mkroot.build_root(
        tmp_path / "r",
        {"sockets": 1, "cores_per_socket": 4, "threads_per_core": 1, "scaling_driver": "acpi-cpufreq",
         "governor": "userspace", "freq_max_mhz": 3800},
    )  # fmt: skip
    for cpu, khz in speeds.items():
        (root / f"sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_setspeed").write_text(f"{khz}\n")
    return root


def test_host_info_reads_the_userspace_setspeed(tmp_path):
    root = _userspace_root(tmp_path, {0: 1500000, 1: 3800000, 2: 3800000, 3: 3800000})
    host = host_mod.collect(HostFS(str(root)), sample_seconds=0, kernel_log="none")
    assert host["cpu"]["governors"] == {"userspace": "0-3"}
    assert host["cpu"]["userspace"] == {"setspeed_mhz": {"min": 1500, "max": 3800}, "below_max": "0"}
    facts = healthy()
    facts["host"]["cpu"] = host["cpu"]
    f = _governor(facts)
    assert f["status"] == "fail" and "CPUs 0 below" in f["message"], f


def test_host_info_names_an_unreadable_setspeed(tmp_path):
    root = _userspace_root(tmp_path, {})
    host = host_mod.collect(HostFS(str(root)), sample_seconds=0, kernel_log="none")
    assert host["cpu"]["userspace"] is None and "cpu.userspace" in host["unsupported"]
    # a host on another governor has no userspace block
    other = mkroot.build_root(tmp_path / "o", {"scaling_driver": "acpi-cpufreq", "governor": "ondemand"})
    assert host_mod.collect(HostFS(str(other)), sample_seconds=0, kernel_log="none")["cpu"]["userspace"] is None


# ------------------------------------------------------------------ targets (issue 27): what host_tuning sets
# Each fixable rule's target sits next to its check; host_tuning sets exactly what targets.compute returns. Before
# issue 27 the role computed them in Jinja (roles/host_tuning/tasks/targets.yml), so every test here failed then.


def _host_targets(facts, overrides=None, role_vars=None):
    policy = pol_mod.validate(overrides or {}, known_rules=rules.BY_ID)
    return targets.compute(facts, policy, role_vars, roles=("host_tuning",))


@pytest.mark.parametrize("policy", [None, {"cpu": {"governor": "schedutil"}}])
def test_setting_the_governor_target_passes_the_check(policy):
    facts = _cpu(scaling_driver="acpi-cpufreq", governors={"powersave": "0-223"})
    assert _governor(facts, policy)["status"] == "fail"
    t = _host_targets(facts, policy)["roles"]["host_tuning"]
    assert t["tuned_profile"] is None  # no TuneD: the role sets the governor
    facts["host"]["cpu"]["governors"] = {t["governor"]: "0-223"}
    assert _governor(facts, policy)["status"] == "pass", t


def test_the_governor_target_names_an_active_tuned_profile_and_a_role_variable_wins(tmp_path):
    root = mkroot.build_root(tmp_path / "r", {"governor": "powersave"})
    (root / "etc/tuned").mkdir(parents=True, exist_ok=True)
    (root / "etc/tuned/active_profile").write_text("balanced\n")
    facts = healthy()
    facts["host"] = host_mod.collect(HostFS(str(root)), sample_seconds=0, kernel_log="none")
    out = _host_targets(facts, None, {"host_tuning_governor": "ondemand"})
    assert (out["roles"]["host_tuning"]["governor"], out["roles"]["host_tuning"]["tuned_profile"]) == (
        "ondemand",
        "balanced",
    )
    assert out["overrides"] == [
        {"variable": "host_tuning_governor", "value": "ondemand", "policy_key": "cpu.governor",
         "policy_value": "performance"}
    ]  # fmt: skip


def test_numa_balancing_target_is_off_unless_the_policy_allows_it():
    facts = healthy()
    host(facts)["numa"]["balancing"] = True
    assert _finding(facts, "HOST-CPU-003")["status"] == "fail"
    t = _host_targets(facts)["roles"]["host_tuning"]
    assert t["numa_balancing"] == 0
    host(facts)["numa"]["balancing"] = bool(t["numa_balancing"])
    assert _finding(facts, "HOST-CPU-003")["status"] == "pass"
    allowed = {"cpu": {"numa_balancing": True}}
    for running, kept in ((True, 1), (False, 0), (None, None)):  # allowed: the running value is kept
        host(facts)["numa"]["balancing"] = running
        assert _host_targets(facts, allowed)["roles"]["host_tuning"]["numa_balancing"] == kept, running
    out = _host_targets(facts, None, {"host_tuning_numa_balancing": 1})
    assert out["roles"]["host_tuning"]["numa_balancing"] == 1
    assert [(o["policy_key"], o["policy_value"]) for o in out["overrides"]] == [("cpu.numa_balancing", False)]


PINNED = [{"irq": 120, "device": "ens1", "cpus": "2"}, {"irq": 121, "device": "ens1", "cpus": "3"}]


def test_irqbalance_target_follows_the_policy_and_keeps_off_irqs_pinned_by_hand():
    facts = healthy()
    host(facts)["irqbalance"]["running"] = False

    def irq(policy=None, role_vars=None):
        t = _host_targets(facts, policy, role_vars)["roles"]["host_tuning"]
        return t["irqbalance_state"], t["irqbalance_running"], t["irqbalance_blocked"], t["irq_pinned"]

    assert irq() == (None, False, False, [])  # any: left to the owner
    running = {"cpu": {"irqbalance": "running"}}
    assert irq(running) == ("started", False, False, [])
    assert irq({"cpu": {"irqbalance": "stopped"}}) == ("stopped", False, False, [])
    host(facts)["irq"]["pinned"] = PINNED
    # Not started over IRQs pinned by hand: exactly where the check passes the stopped irqbalance.
    assert irq(running) == ("started", False, True, PINNED)
    finding = _finding(facts, "HOST-CPU-004", running)
    assert finding["status"] == "pass" and "IRQs pinned by hand" in finding["message"]
    assert irq() == (None, False, False, PINNED)
    assert irq(None, {"host_tuning_irqbalance_state": "started"}) == ("started", False, True, PINNED)
    host(facts)["irqbalance"]["running"] = True
    assert irq(running) == ("started", True, False, PINNED)  # running already: nothing to keep it from
