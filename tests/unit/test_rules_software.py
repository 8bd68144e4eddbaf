"""The rules of rules/software.py: SW-DRV-001, SW-CUDA-001, SW-KMOD-001, SW-FM-001, SW-IMEX-001 and SW-NVML-001, a
passing and a failing case each (CASES), and their tests.

Issue 13: SW-KMOD-001 takes a driver/library mismatch as its own finding, SW-CUDA-001 knows minor-version
compatibility and cuda-compat, SW-FM-001 asks for fabric manager on NVSwitch hosts only. Issue 25 §8 (Blackwell and
Grace): an HGX B200's NVSwitches sit behind the baseboard's ConnectX-7 bridge and need NVLSM beside fabric manager;
GB200 NVL72 compute trays need IMEX (SW-IMEX-001) instead; H100 PCIe, GH200 and single-GPU hosts are never asked for
either (gpud's users report exactly these false alarms). Facts: rule_facts' healthy host and platform shapes, changed
one thing at a time."""

from __future__ import annotations

import pytest
import rule_cases
from ansible_collections.gpufleet.tuning.plugins.module_utils import policy as pol_mod
from ansible_collections.gpufleet.tuning.plugins.module_utils import rules, targets
from rule_cases import evaluate, nvml_mismatch
from rule_facts import b200_fm_stopped, gb200_tray, gh200, h100_pcie, healthy, hgx_b200, single_gpu


def _cuda_too_new(f):
    """A CUDA 13 toolkit on a 550 driver (CUDA 12.4): a major-version gap (13.x needs >= 580)."""
    f["gpu"]["driver"]["cuda_toolkits"] = [{"path": "/usr/local/cuda-13.0", "version": "13.0.1", "default": True}]


# rule id -> (mutation that still passes (None: the healthy host), mutation that fails[, policy for both])
CASES = {
    "SW-DRV-001": (
        None,
        lambda f: f["gpu"]["driver"].update(
            version="525.147.05", kernel_module_version="525.147.05", fabricmanager_version="525.147.05"
        ),
    ),
    "SW-CUDA-001": (None, _cuda_too_new),
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
}

test_rule_passes, test_rule_fails = rule_cases.pass_and_fail(CASES)


# ------------------------------------------------------------------ SW-KMOD-001


def test_kmod_nvml_mismatch_error_is_itself_the_finding():
    # Old code: the audit marked NVML unavailable, driver.version was None and SW-KMOD-001 skipped.
    facts = healthy()
    nvml_mismatch(facts)
    finding = evaluate(facts)["SW-KMOD-001"]
    assert finding["status"] == "fail" and finding["severity"] == "critical"
    assert "535.183.01" in finding["message"] and "550.90.07" in finding["message"]
    assert "LIB_RM_VERSION_MISMATCH" in finding["message"]


def test_kmod_mismatch_error_without_versions_still_fails():
    facts = healthy()
    nvml_mismatch(facts, kmod=None, library=None)
    finding = evaluate(facts)["SW-KMOD-001"]
    assert finding["status"] == "fail" and "unknown" in finding["message"]


def test_kmod_compares_the_library_file_not_only_nvml():
    # NVML answered (a stale state), but the installed library is already 570: the loaded 550 module is stale.
    facts = healthy()
    facts["gpu"]["driver"]["library_version"] = "570.86.15"
    finding = evaluate(facts)["SW-KMOD-001"]
    assert finding["status"] == "fail" and "570.86.15" in finding["message"]


def test_kmod_other_nvml_errors_are_not_a_mismatch():
    facts = healthy()
    nvml_mismatch(facts, kmod=None, library="550.90.07")
    facts["gpu"]["nvml"]["error_code"] = "DriverNotLoaded"
    assert evaluate(facts)["SW-KMOD-001"]["status"] == "skip"


# ------------------------------------------------------------------ SW-CUDA-001


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
    finding = evaluate(facts)["SW-CUDA-001"]
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
    finding = evaluate(facts)["SW-CUDA-001"]
    assert finding["status"] == "fail" and finding["severity"] == "high", finding


def test_cuda_compat_package_covers_a_major_gap():
    facts = healthy()
    _toolkit(facts, "13.0.1", "12.4", "550.90.07")
    facts["gpu"]["driver"]["cuda_compat"] = [
        {"cuda": "13.0", "driver": "580.65.06", "path": "/usr/local/cuda-13.0/compat"}
    ]
    finding = evaluate(facts)["SW-CUDA-001"]
    assert finding["status"] == "pass" and "cuda-compat" in finding["message"]


def test_cuda_compat_too_old_does_not_cover():
    facts = healthy()
    _toolkit(facts, "13.0.1", "12.4", "550.90.07")
    facts["gpu"]["driver"]["cuda_compat"] = [
        {"cuda": "12.8", "driver": "570.86.15", "path": "/usr/local/cuda-12.8/compat"}
    ]
    assert evaluate(facts)["SW-CUDA-001"]["status"] == "fail"


# ------------------------------------------------------------------ SW-FM-001


def _no_nvswitch(f):
    f["gpu"]["pci"]["nvswitches"] = []


def test_fm_mismatch_without_nvswitch_is_info_only():
    # Old code: SW-FM-001 failed critical on any host with an installed fabric manager of another version
    # (a PCIe L40S or H100 PCIe box, a GH200) although nothing there uses it.
    facts = healthy()
    _no_nvswitch(facts)
    facts["gpu"]["driver"]["fabricmanager_version"] = "550.54.15"
    finding = evaluate(facts)["SW-FM-001"]
    assert finding["status"] == "warn" and finding["severity"] == "info"


def test_fm_not_installed_without_nvswitch_passes():
    facts = healthy()
    _no_nvswitch(facts)
    facts["gpu"]["driver"].update(fabricmanager_version=None, fabricmanager_running=False)
    assert evaluate(facts)["SW-FM-001"]["status"] == "pass"


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
    finding = evaluate(facts)["SW-FM-001"]
    assert finding["status"] == "fail" and finding["severity"] == "critical"
    assert words in finding["message"]


# ------------------------------------------------------------------ SW-FM-001 on Blackwell and Grace


def test_hgx_b200_with_fabric_manager_stopped_fails_fm_and_fabric():
    # Fails on the old code: SW-FM-001 passed ("no NVSwitch on the PCI bus") and GPU-FAB-001 warned at medium.
    findings = evaluate(b200_fm_stopped(healthy()))
    fm = findings["SW-FM-001"]
    assert fm["status"] == "fail" and fm["severity"] == "critical", fm
    assert "nv-fabricmanager is not running" in fm["message"] and "nvlsm is not running" in fm["message"]
    assert "SW_MNG" in fm["message"] and fm["observed"]["platform"] == "nvlink5_hgx"
    fab = findings["GPU-FAB-001"]
    assert fab["status"] == "fail" and fab["severity"] == "high", fab
    assert "3600 s after boot" in fab["message"] and "cudaErrorSystemNotReady" in fab["message"]
    assert [i["gpu"] for i in fab["items"]] == list(range(8))


def test_hgx_b200_without_nvlsm_fails():
    facts = hgx_b200(healthy())
    facts["gpu"]["driver"].update(nvlsm_installed=False, nvlsm_running=False)
    finding = evaluate(facts)["SW-FM-001"]
    assert finding["status"] == "fail" and "NVLSM (package nvlsm)" in finding["message"]


def test_healthy_hgx_b200_passes():
    findings = evaluate(hgx_b200(healthy()))
    assert findings["SW-FM-001"]["status"] == "pass" and "with NVLSM" in findings["SW-FM-001"]["message"]
    assert findings["GPU-FAB-001"]["status"] == "pass" and findings["SW-IMEX-001"]["status"] == "pass"


@pytest.mark.parametrize("shape", [h100_pcie, gh200, single_gpu, gb200_tray])
def test_no_fabric_manager_asked_of_h100_pcie_gh200_single_gpu_or_gb200_trays(shape):
    facts = shape(healthy())
    facts["gpu"]["driver"].update(
        fabricmanager_version=None, fabricmanager_running=False, nvlsm_installed=False, nvlsm_running=False
    )
    findings = evaluate(facts)
    assert findings["SW-FM-001"]["status"] == "pass", findings["SW-FM-001"]
    assert findings["GPU-FAB-001"]["status"] in ("pass", "skip")
    assert findings["SW-IMEX-001"]["status"] == "pass"


# ------------------------------------------------------------------ SW-IMEX-001


def _imex(f, **values):
    f["gpu"]["driver"]["imex"].update(values)
    return f


@pytest.mark.parametrize(
    "change, words",
    [
        ({"running": False}, "nvidia-imex is not running"),
        ({"installed": False, "running": False}, "nvidia-imex is not installed"),
        ({"nodes_file_present": False, "nodes": []}, "node list /etc/nvidia-imex/nodes_config.cfg is missing"),
        ({"nodes": []}, "is empty"),
        ({"invalid": ["gb200-tray-03"]}, "not IP addresses: ['gb200-tray-03']"),
        ({"nodes": ["10.114.0.1", "10.114.0.7", "10.114.0.1"]}, "lists ['10.114.0.1'] more than once"),
        ({"local_addresses": ["10.200.0.7"]}, "does not list this host"),
        ({"bind_ip": "10.114.0.99"}, "BIND_INTERFACE_IP 10.114.0.99"),
    ],
)
def test_imex_on_a_gb200_tray(change, words):
    # Fails on the old code: no rule checked IMEX at all.
    finding = evaluate(_imex(gb200_tray(healthy()), **change))["SW-IMEX-001"]
    assert finding["status"] == "fail" and finding["severity"] == "high", finding
    assert words in finding["message"]


def test_imex_passes_on_a_sound_tray_and_when_addresses_are_unknown():
    assert evaluate(gb200_tray(healthy()))["SW-IMEX-001"]["status"] == "pass"
    finding = evaluate(_imex(gb200_tray(healthy()), local_addresses=None))["SW-IMEX-001"]
    assert finding["status"] == "pass" and finding["observed"]["this_host_listed"] is None


def test_gh200_nvl32_trays_need_imex_and_a_single_gh200_does_not():
    facts = gh200(healthy())
    assert evaluate(facts)["SW-IMEX-001"]["status"] == "pass"
    # In an NVLink switch domain (GH200 NVL32) the GPU reports a fabric: a multi-node tray.
    facts["gpu"]["gpus"][0]["fabric"] = {
        "state": "completed",
        "status": "Success",
        "health_mask": "0x00000000",
        "health_problems": [],
    }
    finding = evaluate(facts)["SW-IMEX-001"]
    assert finding["status"] == "fail" and "nvidia-imex is not installed" in finding["message"]
    assert evaluate(facts)["SW-FM-001"]["status"] == "pass"


def test_imex_started_per_job():
    # NVIDIA Mission Control recommends starting IMEX per Slurm job: an idle tray runs none.
    per_job = {"software": {"imex_per_job": True}}
    idle = _imex(gb200_tray(healthy()), running=False)
    assert evaluate(idle)["SW-IMEX-001"]["status"] == "fail"
    assert evaluate(idle, per_job)["SW-IMEX-001"]["status"] == "pass"
    # A per-job daemon in a container (Kubernetes DRA driver): nothing of IMEX on the host but the process.
    containerised = _imex(gb200_tray(healthy()), installed=False, nodes_file_present=False, nodes=[])
    assert evaluate(containerised, per_job)["SW-IMEX-001"]["status"] == "pass"
    # A running per-job daemon's node list is still judged.
    finding = evaluate(_imex(gb200_tray(healthy()), local_addresses=["10.200.0.7"]), per_job)["SW-IMEX-001"]
    assert finding["status"] == "fail" and "does not list this host" in finding["message"]


def test_fabric_services_run_from_a_container():
    # The GPU operator's driver container runs nv-fabricmanager and nvlsm: running processes, no host package.
    facts = hgx_b200(healthy())
    facts["gpu"]["driver"].update(
        fabricmanager_version=None, fabricmanager_running=True, nvlsm_installed=False, nvlsm_running=True
    )
    finding = evaluate(facts)["SW-FM-001"]
    assert finding["status"] == "pass" and "version is not known" in finding["message"], finding
    facts["gpu"]["driver"]["nvlsm_running"] = False
    assert "NVLSM (package nvlsm)" in evaluate(facts)["SW-FM-001"]["message"]


# ---------------------------------------------------------------- targets (issue 27): the branch nvidia_driver installs
# SW-DRV-001's target sits next to its check: the pinned branch (software.driver_branch), or nvidia_driver_branch in
# its place. Before issue 27 the role read the policy in Jinja (roles/nvidia_driver/vars/main.yml).


def _driver_targets(overrides=None, role_vars=None):
    policy = pol_mod.validate(overrides or {}, known_rules=rules.BY_ID)
    return targets.compute({}, policy, role_vars, roles=("nvidia_driver",))


def test_installing_the_target_branch_makes_the_driver_rule_pass():
    facts = healthy()
    pol = {"software": {"driver_branch": 535}}
    assert evaluate(facts, pol)["SW-DRV-001"]["status"] == "fail"
    out = _driver_targets(pol)
    assert out["rules"]["SW-DRV-001"] == ["driver_branch"] and out["overrides"] == []
    branch = out["roles"]["nvidia_driver"]["driver_branch"]
    facts["gpu"]["driver"].update(version=f"{branch}.183.01", kernel_module_version=f"{branch}.183.01")
    assert evaluate(facts, pol)["SW-DRV-001"]["status"] == "pass"


def test_no_branch_pinned_and_the_role_variable_in_the_policys_place():
    assert _driver_targets()["roles"]["nvidia_driver"]["driver_branch"] is None  # the role stops: never guesses
    out = _driver_targets({"software": {"driver_branch": 535}}, {"nvidia_driver_branch": "550"})
    assert out["roles"]["nvidia_driver"]["driver_branch"] == "550"
    assert out["overrides"] == [
        {
            "variable": "nvidia_driver_branch",
            "value": "550",
            "policy_key": "software.driver_branch",
            "policy_value": 535,
        }
    ]
