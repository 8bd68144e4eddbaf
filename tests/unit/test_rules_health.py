"""The rules of rules/health.py: GPU-HLT-001..003, HOST-HLT-001..003, GPU-NVL-001/002, GPU-FAB-001,
GPU-PCI-001/002, GPU-ECC-001..004, GPU-RCV-001 and GPU-FW-001, a passing and a failing case each (CASES), and their
tests.

Issue 13 §3: the GPU health rules (NVLink, fabric, ECC, recovery action, PCIe replays, VBIOS) are judged as NVIDIA's
DCGM health watches judge them (modules/health/DcgmHealthWatch.cpp, common/DcgmGPUHardwareLimits.h at
github.com/NVIDIA/DCGM commit 72fa3feaa67d716a75323a8f47c34ff3ee73f824). Issue 25 point 5: one cause, one finding
(a driver/library mismatch is SW-KMOD-001's, GPU-HLT-003 is unknown naming it), and unknown is not healthy (counters
NVML does not return leave GPU-NVL-002 and GPU-PCI-002 unknown). Issue 25 §8: a fabric still training past the boot
grace with nothing to train it fails. Facts in the shape gpu_info returns (rule_facts.healthy(), one mutation per
case); each test marked "old code: ..." failed before its change."""

from __future__ import annotations

import pytest
import rule_cases
from ansible_collections.gpufleet.tuning.plugins.module_utils import policy as pol_mod
from ansible_collections.gpufleet.tuning.plugins.module_utils import rules, targets
from ansible_collections.gpufleet.tuning.plugins.module_utils.rules import health
from rule_cases import each_gpu, evaluate, gpu_at, gpus, host, nvml_mismatch
from rule_facts import b200_fm_stopped, gb200_tray, healthy


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


# rule id -> (mutation that still passes (None: the healthy host), mutation that fails[, policy for both])
CASES = {
    "GPU-HLT-001": (None, gpu_at(6, lambda g: g["remapped_rows"].update(failure=True))),
    "GPU-HLT-002": (None, gpu_at(7, lambda g: g.update(lost=True))),
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
    "GPU-HLT-003": (None, _gpu_missing_from_nvml),
    "HOST-HLT-003": (None, _fatal_sxid),
    # Issue 13 §3, NVIDIA DCGM's health watches: a host with no NVLink link up anywhere (no bridge) passes.
    "GPU-NVL-001": (
        each_gpu(lambda g: g["nvlink"].update(up=0, down=list(range(18)))),
        gpu_at(2, lambda g: g["nvlink"].update(up=16, down=[3, 4])),
    ),
    # Lifetime totals alone are not judged (DCGM judges the increase); one replay while sampled fails.
    "GPU-NVL-002": (
        gpu_at(3, lambda g: g["nvlink"]["errors"].update(replay=12, crc_flit=4000)),
        gpu_at(3, lambda g: g["nvlink"]["errors_increase"].update(replay=1)),
    ),
    # A newer driver's health mask with every bit "false" (and configuration "none") passes.
    "GPU-FAB-001": (
        each_gpu(lambda g: g["fabric"].update(health_mask="0x000001aa")),
        gpu_at(0, lambda g: g["fabric"].update(state="not_started", status=None)),
    ),
    # An idle GPU with a trained-down link passes; a busy one at x8 fails.
    "GPU-PCI-001": (
        gpu_at(4, lambda g: (g["pcie"].update(gen_current=1), g["utilization"].update(gpu_pct=0))),
        gpu_at(4, lambda g: g["pcie"].update(width_current=8)),
    ),
    "GPU-ECC-001": (None, gpu_at(5, lambda g: g["ecc"].update(current=False, pending=False))),
    "GPU-ECC-002": (None, gpu_at(5, lambda g: g["ecc"].update(pending=False))),
    "GPU-ECC-003": (
        gpu_at(5, lambda g: g["ecc"].update(volatile_corrected=1200, aggregate_corrected=5000)),
        gpu_at(5, lambda g: g["ecc"].update(volatile_uncorrected=2, aggregate_uncorrected=2)),
    ),
    "GPU-ECC-004": (
        each_gpu(lambda g: g.update(retired_pages={"single_bit": 40, "double_bit": 2, "pending": False})),
        each_gpu(lambda g: g.update(retired_pages={"single_bit": 40, "double_bit": 23, "pending": False})),
    ),
    "GPU-RCV-001": (None, gpu_at(1, lambda g: g.update(recovery_action="gpu_reset"))),
    # An idle gen1 x16 link allows ceil(0.15 x 16) = 3 replays a minute; 40 in one second at gen5 x16 (31) fails.
    "GPU-PCI-002": (
        gpu_at(0, lambda g: g["pcie"].update(gen_current=1, replay_count=3, replay_increase=3)),
        gpu_at(0, lambda g: g["pcie"].update(replay_count=40, replay_increase=40)),
    ),
    "GPU-FW-001": (
        gpu_at(7, lambda g: g.update(name="NVIDIA H100 PCIe", vbios_version="96.00.30.00.01")),
        gpu_at(7, lambda g: g.update(vbios_version="96.00.30.00.01")),
    ),
}

test_rule_passes, test_rule_fails = rule_cases.pass_and_fail(CASES)


# ------------------------------------------------------------------ GPU-HLT-001, HOST-HLT-001


def test_xid_finding_takes_the_worst_code_severity():
    facts = healthy()
    CASES["HOST-HLT-001"][1](facts)
    assert evaluate(facts)["HOST-HLT-001"]["severity"] == "critical"


def test_pending_remap_is_high_and_failure_critical():
    facts = healthy()
    gpus(facts)[0]["remapped_rows"]["pending"] = True
    assert evaluate(facts)["GPU-HLT-001"]["severity"] == "high"
    gpus(facts)[1]["remapped_rows"]["failure"] = True
    assert evaluate(facts)["GPU-HLT-001"]["severity"] == "critical"


# ------------------------------------------------------------------ GPU-HLT-003, HOST-HLT-003


def test_gpu_count_below_expected_is_critical():
    facts = healthy()
    facts["gpu"]["gpus"][2]["lost"] = True
    findings = evaluate(facts, {"health": {"expected_gpu_count": 8}})
    assert findings["GPU-HLT-003"]["status"] == "fail" and findings["GPU-HLT-003"]["severity"] == "critical"
    assert "7 usable GPU(s), the policy expects 8" in findings["GPU-HLT-003"]["message"]


def test_gpu_count_nvml_unavailable_with_expected_count():
    # Issue 25: the mismatch is SW-KMOD-001's finding; the count is unknown, not a second failure.
    facts = healthy()
    nvml_mismatch(facts)
    facts["gpu"]["pci"]["available"] = False
    finding = evaluate(facts, {"health": {"expected_gpu_count": 8}})["GPU-HLT-003"]
    assert finding["status"] == "skip" and "SW-KMOD-001" in finding["message"]
    assert "LibRmVersionMismatch" in finding["message"]


def test_gpu_missing_from_nvml_is_high_without_expected_count():
    facts = healthy()
    _gpu_missing_from_nvml(facts)
    finding = evaluate(facts)["GPU-HLT-003"]
    assert finding["severity"] == "high" and finding["observed"]["not_in_nvml"] == ["0000:5d:00.0"]


def test_gpus_given_to_vms_or_virtual_functions_are_not_missing():
    facts = healthy()
    _gpu_missing_from_nvml(facts)
    facts["gpu"]["pci"]["gpus"][3]["driver"] = "vfio-pci"
    facts["gpu"]["pci"]["gpus"].append(
        {"address": "0000:18:00.4", "device": "0x2330", "class": "0x030200", "driver": "nvidia", "virtual": True}
    )
    assert evaluate(facts)["GPU-HLT-003"]["status"] == "pass"


def test_gpu_count_matches_expected():
    facts = healthy()
    assert evaluate(facts, {"health": {"expected_gpu_count": 8}})["GPU-HLT-003"]["status"] == "pass"


def test_non_fatal_sxid_is_medium_and_below_floor_ignored():
    facts = healthy()
    host(facts)["kernel_log"]["sxid"].append(
        {"code": 19084, "fatal": False, "severity": "medium", "count": 2, "pci": ["0000:c6:00.0"], "last": "..."}
    )
    finding = evaluate(facts)["HOST-HLT-003"]
    assert finding["status"] == "fail" and finding["severity"] == "medium"
    assert evaluate(facts, {"health": {"xid_min_severity": "high"}})["HOST-HLT-003"]["status"] == "pass"


def test_gpus_without_bus_ids_are_compared_by_count():
    facts = healthy()
    for g in facts["gpu"]["gpus"]:
        g["pci_bus_id"] = None
    assert evaluate(facts)["GPU-HLT-003"]["status"] == "pass"
    facts["gpu"]["gpus"].pop()
    finding = evaluate(facts)["GPU-HLT-003"]
    assert finding["status"] == "fail" and "8 GPUs on the PCI bus, NVML lists 7" in finding["message"]


# ------------------------------------------------------------------ DCGM's health watches (issue 13 §3)


def _l40s(f):
    """A PCIe L40S host as gpu_info reads it: NVLink and fabric NotSupported, no MIG."""
    for g in gpus(f):
        g.update(name="NVIDIA L40S", nvlink=None, fabric=None, mig=None, vbios_version="95.02.66.00.02")
        g["unsupported"] = {"nvlink": "NotSupported", "fabric": "NotSupported", "mig.current": "NotSupported"}
        g["pcie"].update(gen_current=4, gen_max=4)


def test_pcie_cards_without_nvlink_or_fabric_are_no_finding():
    facts = healthy()
    _l40s(facts)
    findings = evaluate(facts)
    for rule_id in ("GPU-NVL-001", "GPU-NVL-002", "GPU-FAB-001"):
        assert findings[rule_id]["status"] == "skip", findings[rule_id]
    assert findings["GPU-MIG-001"]["status"] == "skip"
    bad = {k: f["message"] for k, f in findings.items() if f["status"] in ("fail", "warn")}
    assert not bad


def test_nvlink_partly_down_and_one_gpu_cut_off():
    facts = healthy()
    gpus(facts)[2]["nvlink"].update(up=16, down=[3, 4])
    gpus(facts)[5]["nvlink"].update(up=0, down=list(range(18)))
    finding = evaluate(facts)["GPU-NVL-001"]
    assert finding["status"] == "fail" and finding["severity"] == "high"
    assert [(i["gpu"], i["problem"]) for i in finding["items"]] == [
        (2, "links partly down"),
        (5, "every link down while the other GPUs' links are up"),
    ]
    assert "GPU 2 links [3, 4]" in finding["message"]


def test_nvlink_down_in_mig_mode_is_ignored_as_dcgm_does():
    facts = healthy()
    gpus(facts)[2]["nvlink"].update(up=0, down=list(range(18)))
    gpus(facts)[2]["mig"].update(current=True, pending=True)
    finding = evaluate(facts)["GPU-NVL-001"]
    assert finding["status"] == "skip" and "MIG" in finding["message"]


@pytest.mark.parametrize(
    "increase, status, severity",
    [
        ({"recovery": 1}, "fail", "high"),  # replay and recovery errors: DCGM FAIL at the first one
        ({"crc_flit": 5}, "warn", "medium"),  # CRC under 100/s: DCGM WARN
        ({"crc_data": 100}, "fail", "high"),  # 100/s over the 1 s sample: DCGM FAIL
        ({}, "pass", "high"),
    ],
)
def test_nvlink_errors_judged_by_their_increase(increase, status, severity):
    facts = healthy()
    gpus(facts)[4]["nvlink"]["errors"].update(replay=50, crc_flit=10**6)  # lifetime totals: not judged
    gpus(facts)[4]["nvlink"]["errors_increase"].update(increase)
    finding = evaluate(facts)["GPU-NVL-002"]
    assert (finding["status"], finding["severity"]) == (status, severity), finding


def test_nvlink_errors_need_two_reads():
    facts = healthy()
    for g in gpus(facts):
        g["nvlink"].update(errors_increase=None, sample_seconds=None)
    assert evaluate(facts)["GPU-NVL-002"]["status"] == "skip"


@pytest.mark.parametrize(
    "fabric, status, severity",
    [
        ({"state": "not_started", "status": None}, "fail", "critical"),  # fabric manager not running
        ({"state": "completed", "status": "NotSupported"}, "fail", "critical"),  # training failed
        ({"state": "in_progress", "status": None}, "warn", "medium"),  # DCGM WARN
        ({"health_problems": ["degraded_bandwidth"]}, "fail", "high"),
    ],
)
def test_fabric_states(fabric, status, severity):
    facts = healthy()
    gpus(facts)[6]["fabric"].update(fabric)
    finding = evaluate(facts)["GPU-FAB-001"]
    assert (finding["status"], finding["severity"]) == (status, severity), finding
    assert finding["items"][0]["gpu"] == 6


@pytest.mark.parametrize(
    "action, status, severity, words",
    [
        ("gpu_reset", "fail", "critical", "reset the GPU"),
        ("node_reboot", "fail", "critical", "reboot the node"),
        ("drain_and_reset", "fail", "critical", "drain peer-to-peer traffic, then reset"),
        ("drain_p2p", "warn", "high", "drain peer-to-peer"),
        ("none", "pass", "critical", ""),
    ],
)
def test_recovery_action_names_the_action(action, status, severity, words):
    facts = healthy()
    gpus(facts)[1]["recovery_action"] = action
    finding = evaluate(facts)["GPU-RCV-001"]
    assert (finding["status"], finding["severity"]) == (status, severity)
    if words:
        spoken = action.replace("_", " ")
        assert f"GPU 1 asks for {spoken}" in finding["message"] and words in finding["message"]


def test_recovery_action_unknown_to_older_drivers_skips():
    facts = healthy()
    for g in gpus(facts):
        g["recovery_action"] = None
    assert evaluate(facts)["GPU-RCV-001"]["status"] == "skip"


def test_uncorrectable_ecc_volatile_fails_lifetime_only_is_low():
    facts = healthy()
    gpus(facts)[3]["ecc"].update(aggregate_uncorrected=4)
    finding = evaluate(facts)["GPU-ECC-003"]
    assert (finding["status"], finding["severity"]) == ("warn", "low")
    gpus(facts)[3]["ecc"].update(volatile_uncorrected=1)
    finding = evaluate(facts)["GPU-ECC-003"]
    assert (finding["status"], finding["severity"]) == ("fail", "high")
    assert finding["items"] == [{"gpu": 3, "volatile": 1}]


@pytest.mark.parametrize(
    "pages, status, severity",
    [
        ({"single_bit": 62, "double_bit": 0, "pending": False}, "pass", "high"),
        ({"single_bit": 60, "double_bit": 3, "pending": False}, "fail", "high"),  # 63 = DCGM_LIMIT_MAX_RETIRED_PAGES
        ({"single_bit": 1, "double_bit": 1, "pending": True}, "warn", "medium"),  # DCGM WARN: pending
        ({"single_bit": 0, "double_bit": 16, "pending": False}, "warn", "low"),  # over the soft limit, no history
    ],
)
def test_retired_pages_against_dcgm_limits(pages, status, severity):
    facts = healthy()
    gpus(facts)[0]["retired_pages"] = pages
    finding = evaluate(facts)["GPU-ECC-004"]
    assert (finding["status"], finding["severity"]) == (status, severity), finding


def test_dcgm_limits_pinned():
    """The numbers DCGM uses (DcgmGPUHardwareLimits.h, GetExpectedPcieReplayRate)."""
    assert health.DCGM_LIMIT_MAX_RETIRED_PAGES == 63
    assert health.DCGM_LIMIT_MAX_RETIRED_PAGES_SOFT_LIMIT == 15
    assert health.DCGM_LIMIT_MAX_NVLINK_ERROR == 1
    assert health.DCGM_LIMIT_MAX_NVLINK_CRC_ERROR == 100.0
    # ceil(per-lane rate x lanes): gen1 x16 0.15*16=2.4 -> 3; gen4 x16 15.36 -> 16; gen5 x16 30.72 -> 31;
    # gen6 and later use the gen6 rate (3.84 per lane).
    assert [health.pcie_replay_limit(gen, 16) for gen in (1, 2, 3, 4, 5, 6, 7)] == [3, 5, 8, 16, 31, 62, 62]
    assert health.pcie_replay_limit(4, 8) == 8 and health.pcie_replay_limit(None, 16) is None


def test_pcie_replays_use_the_current_link():
    facts = healthy()
    g = gpus(facts)[0]
    g["pcie"].update(gen_current=4, replay_increase=17)  # gen4 x16: 16 a minute
    finding = evaluate(facts)["GPU-PCI-002"]
    assert (finding["status"], finding["severity"]) == ("fail", "medium")
    assert finding["items"] == [{"gpu": 0, "increase": 17, "seconds": 1.0, "limit_per_minute": 16}]
    g["pcie"].update(replay_increase=16)
    assert evaluate(facts)["GPU-PCI-002"]["status"] == "pass"


def test_vbios_mismatch_names_versions_per_model():
    facts = healthy()
    gpus(facts)[6]["vbios_version"] = "96.00.30.00.01"
    finding = evaluate(facts)["GPU-FW-001"]
    assert finding["status"] == "fail"
    assert "96.00.30.00.01 on GPU(s) [6]" in finding["message"]
    assert "96.00.5E.00.01 on GPU(s) [0, 1, 2, 3, 4, 5, 7]" in finding["message"]


def test_references_cite_dcgm_sources():
    for rule_id in ("GPU-NVL-001", "GPU-NVL-002", "GPU-FAB-001", "GPU-ECC-003", "GPU-ECC-004", "GPU-RCV-001",
                    "GPU-PCI-002"):  # fmt: skip
        urls = [url for _title, url in rules.BY_ID[rule_id].references]
        assert "https://github.com/NVIDIA/DCGM/blob/master/modules/health/DcgmHealthWatch.cpp" in urls, rule_id


def test_nvidia_smi_fallback_loses_only_the_gpu_in_trouble():
    """gpu_info's nvidia-smi reader over the recorded outputs: GPU-HLT-002 names the one GPU, the others are judged."""
    from pathlib import Path

    from ansible_collections.gpufleet.tuning.plugins.module_utils import nvidia_smi

    fix = Path(__file__).resolve().parents[1] / "fixtures" / "nvidia-smi"
    for name, reason in (
        ("h100x4-reset-required.csv", "GPU 2: nvidia-smi: [GPU requires reset]"),
        ("h100x4-handle-error.csv", "GPU 2: nvidia-smi: Unknown Error"),
    ):
        driver, read = nvidia_smi.parse((fix / name).read_text())
        facts = {"gpu": {"nvml": {"available": True, "source": "nvidia-smi"}, "driver": {"version": driver},
                         "gpus": read, "gpu_count": len(read)}}  # fmt: skip
        findings = evaluate(facts)
        lost = findings["GPU-HLT-002"]
        assert lost["status"] == "fail" and lost["observed"] == {"lost": [2]}, lost
        assert reason in lost["message"]
        # The three good GPUs are still read and judged: persistence mode is on for all of them.
        assert findings["GPU-PWR-001"]["status"] == "pass"
        assert sorted(findings["GPU-PWR-001"]["observed"]) == ["0", "1", "3"]


# ------------------------------------------------------------------ GPU-FAB-001 on Blackwell and Grace (issue 25 §8)


@pytest.mark.parametrize(
    "uptime, fm_running, status, severity",
    [
        (45.0, False, "warn", "medium"),  # just booted: training is normal
        (None, False, "warn", "medium"),  # uptime unknown: no claim beyond the warning
        (3600.0, True, "warn", "medium"),  # past the grace, but fabric manager runs: its log says more
        (3600.0, False, "fail", "high"),  # past the grace, nothing trains it: it never completes
    ],
)
def test_fabric_in_progress_after_the_boot_grace(uptime, fm_running, status, severity):
    facts = healthy()  # HGX H100: NVSwitches on the PCI bus
    facts["gpu"]["driver"]["fabricmanager_running"] = fm_running
    facts["gpu"]["gpus"][2]["fabric"].update(state="in_progress", status=None)
    facts["gpu"]["uptime_s"] = uptime
    finding = evaluate(facts)["GPU-FAB-001"]
    assert (finding["status"], finding["severity"]) == (status, severity), finding


def test_the_boot_grace_is_a_policy_key():
    facts = b200_fm_stopped(healthy())
    assert evaluate(facts, {"health": {"fabric_boot_grace_s": 7200}})["GPU-FAB-001"]["status"] == "warn"


def test_a_gb200_tray_in_training_past_the_grace_is_not_blamed_on_a_local_fabric_manager():
    facts = gb200_tray(healthy())
    facts["gpu"]["gpus"][0]["fabric"].update(state="in_progress", status=None)
    facts["gpu"]["uptime_s"] = 3600.0
    finding = evaluate(facts)["GPU-FAB-001"]
    assert finding["status"] == "warn" and finding["severity"] == "medium"


# ------------------------------------------------------------------ one cause, one finding; unknown is not healthy


COUNTERS = ("replay", "recovery", "crc_flit", "crc_data")


def _nvml_failed(f, code, error):
    """What gpu_info returns when nvmlInit fails: no GPU listed; the PCI bus still shows the 8 GPUs."""
    f["gpu"]["nvml"] = {"available": False, "source": "pynvml", "error_code": code, "error": error, "library": None}
    f["gpu"]["gpus"] = []
    f["gpu"]["gpu_count"] = 0


MISMATCH = "NVML could not be initialised: LibRmVersionMismatch (RM has detected an NVML/RM version mismatch.)"
NOT_LOADED = "NVML could not be initialised: DriverNotLoaded (Driver Not Loaded)"


def test_version_mismatch_is_one_finding_and_gpu_count_is_unknown():
    """old code: GPU-HLT-003 failed at high listing all 8 GPUs as on the bus but not in NVML, next to SW-KMOD-001."""
    facts = healthy()
    _nvml_failed(facts, "LibRmVersionMismatch", MISMATCH)
    facts["gpu"]["driver"].update(kernel_module_version="535.183.01", library_version="550.90.07", version=None)
    findings = evaluate(facts)
    assert findings["SW-KMOD-001"]["status"] == "fail"
    hlt = findings["GPU-HLT-003"]
    assert hlt["status"] == "skip", hlt
    assert hlt["message"].startswith("unknown: NVML could not start") and "SW-KMOD-001" in hlt["message"]
    assert "8 NVIDIA GPU(s) on the PCI bus" in hlt["message"]
    assert hlt["observed"]["pci"] == 8 and hlt["observed"]["nvml"] is None
    # with an expected count too: the count is unknown, not a second failure
    assert evaluate(facts, {"health": {"expected_gpu_count": 8}})["GPU-HLT-003"]["status"] == "skip"
    failing = [r for r, f in findings.items() if f["status"] == "fail"]
    assert "GPU-HLT-003" not in failing and "SW-KMOD-001" in failing


def test_a_start_up_error_no_other_rule_names_is_reported_once_with_its_cause():
    """Module not loaded: SW-KMOD-001 does not judge it, so GPU-HLT-003 names the cause, once, not per GPU.
    old code: "GPU(s) [...8 addresses...] are on the PCI bus but NVML does not list them ... look for RmInitAdapter"."""
    facts = healthy()
    _nvml_failed(facts, "DriverNotLoaded", NOT_LOADED)
    hlt = evaluate(facts)["GPU-HLT-003"]
    assert hlt["status"] == "fail" and hlt["severity"] == "high", hlt
    assert hlt["message"].startswith("NVML could not start (" + NOT_LOADED + ")")
    assert "none of the 8 NVIDIA GPU(s) on the PCI bus can be used" in hlt["message"]
    assert "RmInitAdapter" not in hlt["message"] and "does not list them" not in hlt["message"]
    with_count = evaluate(facts, {"health": {"expected_gpu_count": 8}})["GPU-HLT-003"]
    assert with_count["status"] == "fail" and with_count["severity"] == "critical"
    assert "the policy expects 8" in with_count["message"]


def test_a_gpu_the_driver_did_not_bring_up_is_still_missing_from_nvml():
    facts = healthy()
    facts["gpu"]["gpus"].pop(3)
    hlt = evaluate(facts)["GPU-HLT-003"]
    assert hlt["status"] == "fail" and hlt["observed"]["not_in_nvml"] == ["0000:5d:00.0"]


def _unread(f, gpus, counters, reason):
    for g in f["gpu"]["gpus"]:
        if g["index"] in gpus:
            for name in counters:
                g["nvlink"]["errors"][name] = None
                g["nvlink"]["errors_increase"][name] = None
                g["unsupported"]["nvlink.errors." + name] = reason


def test_nvlink_counters_nvml_does_not_return_are_unknown_not_zero():
    """old code: pass "no NVLink errors while sampled" with every counter null."""
    facts = healthy()
    _unread(facts, range(8), COUNTERS, "NotSupported")
    f = evaluate(facts)["GPU-NVL-002"]
    assert f["status"] == "skip", f
    assert f["message"] == (
        "unknown: NVML does not return NVLink error counters: replay, recovery, crc_flit, crc_data on GPU "
        "0, 1, 2, 3, 4, 5, 6, 7 (NotSupported)"
    )
    assert len(f["observed"]["unread"]) == 32


def test_some_counters_unread_name_them_and_what_was_read():
    """old code: pass. NoPermission on one GPU's replay counter: the other 31 counters show no error."""
    facts = healthy()
    _unread(facts, [2], ["replay"], "NoPermission")
    f = evaluate(facts)["GPU-NVL-002"]
    assert f["status"] == "skip", f
    assert "replay on GPU 2 (NoPermission)" in f["message"] and "no errors in the 31 counter(s)" in f["message"]


def test_errors_in_the_counters_read_still_fail_and_name_the_unread():
    facts = healthy()
    _unread(facts, [2], ["crc_data"], "NotSupported")
    facts["gpu"]["gpus"][0]["nvlink"]["errors_increase"]["replay"] = 3
    f = evaluate(facts)["GPU-NVL-002"]
    assert f["status"] == "fail" and "GPU 0 replay +3" in f["message"], f
    assert "not read: crc_data on GPU 2 (NotSupported)" in f["message"]


def test_all_counters_read_and_zero_pass():
    assert evaluate(healthy())["GPU-NVL-002"]["status"] == "pass"


def test_a_pcie_replay_counter_nvml_does_not_return_is_unknown_not_within_rate():
    """old code: pass "PCIe replays within DCGM's rate" with GPU 5's counter unread."""
    facts = healthy()
    g = facts["gpu"]["gpus"][5]
    g["pcie"].update(replay_count=None, replay_increase=None)
    g["unsupported"]["pcie.replay_count"] = "NoPermission"
    f = evaluate(facts)["GPU-PCI-002"]
    assert f["status"] == "skip", f
    assert f["message"].startswith("unknown: NVML does not return the PCIe replay counter of GPU 5 (NoPermission)")
    # a replay storm on another GPU still fails
    facts["gpu"]["gpus"][0]["pcie"]["replay_increase"] = 5000
    assert evaluate(facts)["GPU-PCI-002"]["status"] == "fail"


# ---------------------------------------------------------------- targets (issue 27): what gpu_runtime sets for ECC
# GPU-ECC-001/002's target sits next to the check (power.ecc true: on; false: left alone); gpu_runtime sets the
# pending mode, which becomes current at the next reboot. Before issue 27 the role read power.ecc in Jinja
# (roles/gpu_runtime/vars/main.yml) and targets.compute returned nothing for gpu_runtime.


def _ecc_targets(overrides=None, role_vars=None):
    policy = pol_mod.validate(overrides or {}, known_rules=rules.BY_ID)
    return targets.compute({}, policy, role_vars, roles=("gpu_runtime",))


def test_applying_the_ecc_target_and_rebooting_makes_the_ecc_rules_pass():
    facts = healthy()
    gpus(facts)[2]["ecc"].update(current=False, pending=False)
    gpus(facts)[5]["ecc"].update(current=False, pending=True)  # on at the next reboot already
    assert evaluate(facts)["GPU-ECC-001"]["status"] == "fail"
    assert evaluate(facts)["GPU-ECC-002"]["status"] == "fail"
    out = _ecc_targets()
    assert out["rules"]["GPU-ECC-001"] == out["rules"]["GPU-ECC-002"] == ["ecc_mode"]
    wanted = out["roles"]["gpu_runtime"]["ecc_mode"]
    assert wanted is True
    for g in gpus(facts):  # gpu_settings sets the pending mode; the reboot makes it current
        g["ecc"].update(pending=wanted)
        g["ecc"].update(current=g["ecc"]["pending"])
    after = evaluate(facts)
    assert after["GPU-ECC-001"]["status"] == "pass" and after["GPU-ECC-002"]["status"] == "pass"


def test_ecc_not_required_is_left_alone_and_a_role_variable_takes_the_policys_place():
    assert _ecc_targets({"power": {"ecc": False}})["roles"]["gpu_runtime"]["ecc_mode"] is None
    facts = healthy()
    gpus(facts)[0]["ecc"].update(current=False, pending=False)
    assert evaluate(facts, {"power": {"ecc": False}})["GPU-ECC-001"]["status"] == "skip"
    out = _ecc_targets({}, {"gpu_runtime_ecc_mode": False})
    assert out["roles"]["gpu_runtime"]["ecc_mode"] is False
    assert out["overrides"] == [
        {"variable": "gpu_runtime_ecc_mode", "value": False, "policy_key": "power.ecc", "policy_value": True}
    ]
