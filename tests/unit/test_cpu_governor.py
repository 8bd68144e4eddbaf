"""Issue 25 point 4: HOST-CPU-001 judges what the governor does under the host's scaling driver.

Kernel admin-guide/pm/cpufreq.rst: the generic powersave sets the policy's lowest frequency, ondemand/conservative
follow the CPU load, schedutil the scheduler's utilization, userspace holds what a program wrote to
scaling_setspeed; intel_pstate.rst and amd-pstate.rst: the active-mode drivers' own powersave is dynamic (HWP with
an energy-performance preference; intel_pstate without HWP by utilization). Rule facts from rule_facts.healthy(),
one mutation per case; the host_info test reads a fixture tree (mkroot) through the hostfs seam.
Each test marked "old code: ..." failed against the rule before this change."""

from __future__ import annotations

import pytest
import simulators
from ansible_collections.gpufleet.tuning.plugins.module_utils import host as host_mod
from ansible_collections.gpufleet.tuning.plugins.module_utils import policy as pol_mod
from ansible_collections.gpufleet.tuning.plugins.module_utils import rules
from ansible_collections.gpufleet.tuning.plugins.module_utils.hostfs import HostFS
from rule_facts import healthy

mkroot = simulators.mkroot()


def _finding(facts, overrides=None):
    policy = pol_mod.validate(overrides or {}, known_rules=rules.BY_ID)
    return {f["rule"]: f for f in rules.evaluate(facts, policy)}["HOST-CPU-001"]


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
    f = _finding(_cpu(scaling_driver=driver, governors={governor: "0-223"}))
    assert f["status"] == "warn" and f["severity"] == "low", f
    assert governor in f["message"] and "load" in f["message"]
    assert f["items"] == [
        {"governor": governor, "cpus": "0-223", "severity": "low", "meaning": f["items"][0]["meaning"]}
    ]
    assert f["observed"]["scaling_driver"] == driver


@pytest.mark.parametrize("driver", ["acpi-cpufreq", "intel_cpufreq", "amd-pstate", "cppc_cpufreq"])
def test_generic_powersave_pins_the_lowest_frequency_and_fails_high(driver):
    f = _finding(_cpu(scaling_driver=driver, governors={"powersave": "0-223"}))
    assert f["status"] == "fail" and f["severity"] == "high", f
    assert "lowest frequency" in f["message"] and driver in f["message"]


def test_hwp_powersave_with_balanced_epp_keeps_its_low_warning():
    f = _finding(
        _cpu(scaling_driver="intel_pstate", governors={"powersave": "0-223"}, epp={"balance_performance": "0-223"})
    )
    assert f["status"] == "warn" and f["severity"] == "low", f
    assert "balance_performance" in f["message"]
    f = _finding(_cpu(scaling_driver="amd-pstate-epp", governors={"powersave": "0-223"}, epp={"power": "0-223"}))
    assert f["status"] == "fail" and "power" in f["message"], f


def test_intel_pstate_powersave_without_hwp_follows_utilization():
    """No energy_performance_preference file: intel_pstate's own powersave without HWP (P-states in proportion to
    utilization), not the lowest clock. old code: fail at high."""
    f = _finding(_cpu(scaling_driver="intel_pstate", governors={"powersave": "0-223"}, epp={}))
    assert f["status"] == "warn" and f["severity"] == "low", f


def test_one_pinned_governor_among_load_following_ones_fails():
    f = _finding(
        _cpu(scaling_driver="acpi-cpufreq", governors={"ondemand": "0-111", "powersave": "112-223"}, epp={})
    )
    assert f["status"] == "fail", f
    assert [(i["governor"], i["severity"]) for i in f["items"]] == [("ondemand", "low"), ("powersave", "high")]


def test_userspace_is_judged_by_the_frequency_it_holds():
    at_max = {"setspeed_mhz": {"min": 3800, "max": 3800}, "below_max": ""}
    f = _finding(_cpu(scaling_driver="acpi-cpufreq", governors={"userspace": "0-223"}, userspace=at_max))
    assert f["status"] == "warn" and f["severity"] == "low" and "3800 MHz" in f["message"], f
    low = {"setspeed_mhz": {"min": 1500, "max": 3800}, "below_max": "0-3"}
    f = _finding(_cpu(scaling_driver="acpi-cpufreq", governors={"userspace": "0-223"}, userspace=low))
    assert f["status"] == "fail" and "0-3" in f["message"], f
    f = _finding(_cpu(scaling_driver="acpi-cpufreq", governors={"userspace": "0-223"}, userspace=None))
    assert f["status"] == "fail" and "not readable" in f["message"], f


def test_the_policy_governor_still_passes_and_is_what_the_fix_sets():
    facts = _cpu(scaling_driver="acpi-cpufreq", governors={"ondemand": "0-223"})
    f = _finding(facts, {"cpu": {"governor": "ondemand"}})
    assert f["status"] == "pass", f
    assert rules.BY_ID["HOST-CPU-001"].fix["role"] == "host_tuning"


def test_performance_under_a_policy_asking_for_another_governor_is_low():
    facts = _cpu(scaling_driver="acpi-cpufreq", governors={"performance": "0-223"})
    f = _finding(facts, {"cpu": {"governor": "schedutil"}})
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
    f = _finding(facts)
    assert f["status"] == "fail" and "CPUs 0 below" in f["message"], f


def test_host_info_names_an_unreadable_setspeed(tmp_path):
    root = _userspace_root(tmp_path, {})
    host = host_mod.collect(HostFS(str(root)), sample_seconds=0, kernel_log="none")
    assert host["cpu"]["userspace"] is None and "cpu.userspace" in host["unsupported"]
    # a host on another governor has no userspace block
    other = mkroot.build_root(tmp_path / "o", {"scaling_driver": "acpi-cpufreq", "governor": "ondemand"})
    assert host_mod.collect(HostFS(str(other)), sample_seconds=0, kernel_log="none")["cpu"]["userspace"] is None
