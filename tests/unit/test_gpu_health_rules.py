"""GPU health rules of issue 13 §3 (NVLink, fabric, ECC, recovery action, PCIe replays, MIG, VBIOS), judged as
NVIDIA's DCGM health watches judge them (modules/health/DcgmHealthWatch.cpp, common/DcgmGPUHardwareLimits.h at
github.com/NVIDIA/DCGM commit 72fa3feaa67d716a75323a8f47c34ff3ee73f824). Facts in the shape gpu_info returns."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.tuning.plugins.module_utils import policy as pol_mod
from ansible_collections.gpufleet.tuning.plugins.module_utils import rules
from ansible_collections.gpufleet.tuning.plugins.module_utils.rules import health
from rule_facts import healthy


def _evaluate(facts, overrides=None):
    policy = pol_mod.validate(overrides or {}, known_rules=rules.BY_ID)
    return {f["rule"]: f for f in rules.evaluate(facts, policy)}


def gpus(f):
    return f["gpu"]["gpus"]


def _l40s(f):
    """A PCIe L40S host as gpu_info reads it: NVLink and fabric NotSupported, no MIG."""
    for g in gpus(f):
        g.update(name="NVIDIA L40S", nvlink=None, fabric=None, mig=None, vbios_version="95.02.66.00.02")
        g["unsupported"] = {"nvlink": "NotSupported", "fabric": "NotSupported", "mig.current": "NotSupported"}
        g["pcie"].update(gen_current=4, gen_max=4)


def test_pcie_cards_without_nvlink_or_fabric_are_no_finding():
    facts = healthy()
    _l40s(facts)
    findings = _evaluate(facts)
    for rule_id in ("GPU-NVL-001", "GPU-NVL-002", "GPU-FAB-001"):
        assert findings[rule_id]["status"] == "skip", findings[rule_id]
    assert findings["GPU-MIG-001"]["status"] == "skip"
    bad = {k: f["message"] for k, f in findings.items() if f["status"] in ("fail", "warn")}
    assert not bad


def test_nvlink_partly_down_and_one_gpu_cut_off():
    facts = healthy()
    gpus(facts)[2]["nvlink"].update(up=16, down=[3, 4])
    gpus(facts)[5]["nvlink"].update(up=0, down=list(range(18)))
    finding = _evaluate(facts)["GPU-NVL-001"]
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
    finding = _evaluate(facts)["GPU-NVL-001"]
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
    finding = _evaluate(facts)["GPU-NVL-002"]
    assert (finding["status"], finding["severity"]) == (status, severity), finding


def test_nvlink_errors_need_two_reads():
    facts = healthy()
    for g in gpus(facts):
        g["nvlink"].update(errors_increase=None, sample_seconds=None)
    assert _evaluate(facts)["GPU-NVL-002"]["status"] == "skip"


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
    finding = _evaluate(facts)["GPU-FAB-001"]
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
    finding = _evaluate(facts)["GPU-RCV-001"]
    assert (finding["status"], finding["severity"]) == (status, severity)
    if words:
        spoken = action.replace("_", " ")
        assert f"GPU 1 asks for {spoken}" in finding["message"] and words in finding["message"]


def test_recovery_action_unknown_to_older_drivers_skips():
    facts = healthy()
    for g in gpus(facts):
        g["recovery_action"] = None
    assert _evaluate(facts)["GPU-RCV-001"]["status"] == "skip"


def test_uncorrectable_ecc_volatile_fails_lifetime_only_is_low():
    facts = healthy()
    gpus(facts)[3]["ecc"].update(aggregate_uncorrected=4)
    finding = _evaluate(facts)["GPU-ECC-003"]
    assert (finding["status"], finding["severity"]) == ("warn", "low")
    gpus(facts)[3]["ecc"].update(volatile_uncorrected=1)
    finding = _evaluate(facts)["GPU-ECC-003"]
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
    finding = _evaluate(facts)["GPU-ECC-004"]
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
    finding = _evaluate(facts)["GPU-PCI-002"]
    assert (finding["status"], finding["severity"]) == ("fail", "medium")
    assert finding["items"] == [{"gpu": 0, "increase": 17, "seconds": 1.0, "limit_per_minute": 16}]
    g["pcie"].update(replay_increase=16)
    assert _evaluate(facts)["GPU-PCI-002"]["status"] == "pass"


def test_vbios_mismatch_names_versions_per_model():
    facts = healthy()
    gpus(facts)[6]["vbios_version"] = "96.00.30.00.01"
    finding = _evaluate(facts)["GPU-FW-001"]
    assert finding["status"] == "fail"
    assert "96.00.30.00.01 on GPU(s) [6]" in finding["message"]
    assert "96.00.5E.00.01 on GPU(s) [0, 1, 2, 3, 4, 5, 7]" in finding["message"]


def test_mig_change_pending():
    facts = healthy()
    gpus(facts)[2]["mig"].update(pending=True)
    finding = _evaluate(facts)["GPU-MIG-001"]
    assert finding["status"] == "fail" and finding["severity"] == "medium"
    assert finding["items"] == [{"gpu": 2, "current": False, "pending": True}]


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
        findings = _evaluate(facts)
        lost = findings["GPU-HLT-002"]
        assert lost["status"] == "fail" and lost["observed"] == {"lost": [2]}, lost
        assert reason in lost["message"]
        # The three good GPUs are still read and judged: persistence mode is on for all of them.
        assert findings["GPU-PWR-001"]["status"] == "pass"
        assert sorted(findings["GPU-PWR-001"]["observed"]) == ["0", "1", "3"]
