"""Issue 25 point 5: one cause, one finding; unknown is not healthy.

- When nvmlInit fails, GPU-HLT-003 no longer lists every GPU on the PCI bus as "missing from NVML" next to
  SW-KMOD-001: a driver/library mismatch is SW-KMOD-001's finding and GPU-HLT-003 is unknown (skip) naming it;
  a start-up error no other rule reports (module not loaded) is reported once, naming the cause.
- NVLink error counters that NVML does not return (null in gpu_info's facts, the reason in ``unsupported``) leave
  GPU-NVL-002 unknown, never "no NVLink errors".

Facts from rule_facts.healthy(), one mutation per case; each test marked "old code: ..." failed before."""

from __future__ import annotations

from ansible_collections.gpufleet.tuning.plugins.module_utils import policy as pol_mod
from ansible_collections.gpufleet.tuning.plugins.module_utils import rules
from rule_facts import healthy

COUNTERS = ("replay", "recovery", "crc_flit", "crc_data")


def _evaluate(facts, overrides=None):
    policy = pol_mod.validate(overrides or {}, known_rules=rules.BY_ID)
    return {f["rule"]: f for f in rules.evaluate(facts, policy)}


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
    findings = _evaluate(facts)
    assert findings["SW-KMOD-001"]["status"] == "fail"
    hlt = findings["GPU-HLT-003"]
    assert hlt["status"] == "skip", hlt
    assert hlt["message"].startswith("unknown: NVML could not start") and "SW-KMOD-001" in hlt["message"]
    assert "8 NVIDIA GPU(s) on the PCI bus" in hlt["message"]
    assert hlt["observed"]["pci"] == 8 and hlt["observed"]["nvml"] is None
    # with an expected count too: the count is unknown, not a second failure
    assert _evaluate(facts, {"health": {"expected_gpu_count": 8}})["GPU-HLT-003"]["status"] == "skip"
    failing = [r for r, f in findings.items() if f["status"] == "fail"]
    assert "GPU-HLT-003" not in failing and "SW-KMOD-001" in failing


def test_a_start_up_error_no_other_rule_names_is_reported_once_with_its_cause():
    """Module not loaded: SW-KMOD-001 does not judge it, so GPU-HLT-003 names the cause, once, not per GPU.
    old code: "GPU(s) [...8 addresses...] are on the PCI bus but NVML does not list them ... look for RmInitAdapter"."""
    facts = healthy()
    _nvml_failed(facts, "DriverNotLoaded", NOT_LOADED)
    hlt = _evaluate(facts)["GPU-HLT-003"]
    assert hlt["status"] == "fail" and hlt["severity"] == "high", hlt
    assert hlt["message"].startswith("NVML could not start (" + NOT_LOADED + ")")
    assert "none of the 8 NVIDIA GPU(s) on the PCI bus can be used" in hlt["message"]
    assert "RmInitAdapter" not in hlt["message"] and "does not list them" not in hlt["message"]
    with_count = _evaluate(facts, {"health": {"expected_gpu_count": 8}})["GPU-HLT-003"]
    assert with_count["status"] == "fail" and with_count["severity"] == "critical"
    assert "the policy expects 8" in with_count["message"]


def test_a_gpu_the_driver_did_not_bring_up_is_still_missing_from_nvml():
    facts = healthy()
    facts["gpu"]["gpus"].pop(3)
    hlt = _evaluate(facts)["GPU-HLT-003"]
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
    f = _evaluate(facts)["GPU-NVL-002"]
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
    f = _evaluate(facts)["GPU-NVL-002"]
    assert f["status"] == "skip", f
    assert "replay on GPU 2 (NoPermission)" in f["message"] and "no errors in the 31 counter(s)" in f["message"]


def test_errors_in_the_counters_read_still_fail_and_name_the_unread():
    facts = healthy()
    _unread(facts, [2], ["crc_data"], "NotSupported")
    facts["gpu"]["gpus"][0]["nvlink"]["errors_increase"]["replay"] = 3
    f = _evaluate(facts)["GPU-NVL-002"]
    assert f["status"] == "fail" and "GPU 0 replay +3" in f["message"], f
    assert "not read: crc_data on GPU 2 (NotSupported)" in f["message"]


def test_all_counters_read_and_zero_pass():
    assert _evaluate(healthy())["GPU-NVL-002"]["status"] == "pass"


def test_a_pcie_replay_counter_nvml_does_not_return_is_unknown_not_within_rate():
    """old code: pass "PCIe replays within DCGM's rate" with GPU 5's counter unread."""
    facts = healthy()
    g = facts["gpu"]["gpus"][5]
    g["pcie"].update(replay_count=None, replay_increase=None)
    g["unsupported"]["pcie.replay_count"] = "NoPermission"
    f = _evaluate(facts)["GPU-PCI-002"]
    assert f["status"] == "skip", f
    assert f["message"].startswith("unknown: NVML does not return the PCIe replay counter of GPU 5 (NoPermission)")
    # a replay storm on another GPU still fails
    facts["gpu"]["gpus"][0]["pcie"]["replay_increase"] = 5000
    assert _evaluate(facts)["GPU-PCI-002"]["status"] == "fail"
