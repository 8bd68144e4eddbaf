"""The rules of rules/gpudirect.py: NET-GDR-001..003 (GPUDirect RDMA's host prerequisites), a passing and a failing
case each (CASES), and what each says where it cannot judge (a VM, an unreadable bridge, no RDMA device)."""

from __future__ import annotations

import rule_cases
from rule_cases import evaluate, finding_after
from rule_facts import healthy


def gd(f):
    return f["gpudirect"]


def no_peermem_no_dmabuf(f):
    pm = gd(f)["peer_memory"]
    pm.update(loaded=[], available=False)
    pm["dmabuf"].update(
        open_kernel_module=False, flavour="proprietary", available=False, missing=["open_kernel_module"]
    )


def dmabuf_only(f):
    gd(f)["peer_memory"]["loaded"] = []


def acs_on(f):
    bridge = gd(f)["acs"][2]["bridges"][3]
    bridge.update(control="0x001d", enabled=["SrcValid", "ReqRedir", "CmpltRedir", "UpstreamFwd"], redirect=True)


def acs_source_validation_only(f):
    # SrcValid alone checks requester ids; it does not send peer traffic up (not ACS "on" for GPUDirect).
    gd(f)["acs"][0]["bridges"][0].update(control="0x0001", enabled=["SrcValid"], redirect=False)


def iommu_translated(f):
    io = gd(f)["iommu"]
    io.update(mode="translated", cmdline={"intel_iommu": "on"})
    io["groups"]["0000:18:00.0"] = "DMA-FQ"


def iommu_off(f):
    gd(f)["iommu"].update(units=[], cmdline={"intel_iommu": "off"}, groups={}, mode="off")


def as_vm(f, cloud="azure"):
    gd(f)["virtualization"].update(virtual=True, reason="the CPU reports the hypervisor flag", cloud=cloud)


# rule id -> (mutation that still passes (None: the healthy host), mutation that fails[, policy for both])
CASES = {
    "NET-GDR-001": (dmabuf_only, no_peermem_no_dmabuf),
    "NET-GDR-002": (acs_source_validation_only, acs_on),
    "NET-GDR-003": (iommu_off, iommu_translated),
}

test_rule_passes, test_rule_fails = rule_cases.pass_and_fail(CASES)


def test_peer_memory_failure_says_what_to_load_and_what_dmabuf_lacks():
    f = healthy()
    no_peermem_no_dmabuf(f)
    gd(f)["peer_memory"]["installed"]["nvidia_peermem"] = False
    finding = evaluate(f)["NET-GDR-001"]
    assert finding["status"] == "fail"
    assert "modprobe nvidia-peermem" in finding["message"] and "not installed for this kernel" in finding["message"]
    assert "the open GPU kernel modules" in finding["message"]
    assert "gpu_runtime_peermem_enabled" in finding["fix"]["manual"]


def test_dmabuf_passes_without_the_module_and_unknown_dmabuf_warns():
    f = healthy()
    dmabuf_only(f)
    assert "DMA-BUF" in evaluate(f)["NET-GDR-001"]["message"]
    gd(f)["peer_memory"].update(available=None)
    gd(f)["peer_memory"]["dmabuf"].update(open_kernel_module=None, available=None)
    finding = evaluate(f)["NET-GDR-001"]
    assert finding["status"] == "warn" and "open GPU kernel modules" in finding["message"]


def test_acs_failure_names_each_bridge_and_its_setpci_command():
    finding = finding_after("NET-GDR-002", acs_on)
    assert finding["items"] == [
        {
            "bridge": "0000:39:00.0",
            "control": "0x001d",
            "enabled": ["SrcValid", "ReqRedir", "CmpltRedir", "UpstreamFwd"],
            "between": ["GPU2-mlx5_2"],
            "command": "setpci -s 0000:39:00.0 ECAP_ACS+0x6.w=0000",
        }
    ]
    assert "pci=disable_acs_redir=0000:39:00.0" in finding["message"] and "BIOS" in finding["message"]


def test_unreadable_config_space_is_not_off():
    f = healthy()
    for path in gd(f)["acs"]:
        for bridge in path["bridges"]:
            bridge.update(readable=False, present=None, control=None, redirect=None)
    finding = evaluate(f)["NET-GDR-002"]
    assert finding["status"] == "skip" and "root" in finding["message"]


def test_iommu_failure_gives_the_kernel_parameter_for_the_architecture():
    finding = finding_after("NET-GDR-003", iommu_translated)
    assert "iommu=pt" in finding["message"] and "/etc/default/grub" in finding["message"]
    assert finding["items"] == [{"function": "0000:18:00.0", "domain": "DMA-FQ", "param": "iommu=pt"}]
    on_arm = finding_after("NET-GDR-003", iommu_translated, lambda f: gd(f)["virtualization"].update(arch="arm64"))
    assert "iommu.passthrough=1" in on_arm["message"]


def test_on_a_vm_acs_and_iommu_are_the_hypervisors_and_peer_memory_is_still_judged():
    f = healthy()
    acs_on(f)
    iommu_translated(f)
    no_peermem_no_dmabuf(f)
    as_vm(f)
    findings = evaluate(f)
    for rule_id in ("NET-GDR-002", "NET-GDR-003"):
        assert findings[rule_id]["status"] == "skip"
        assert "hypervisor" in findings[rule_id]["message"] and "learn.microsoft.com" in findings[rule_id]["message"]
    assert findings["NET-GDR-001"]["status"] == "fail"


def test_hosts_without_rdma_devices_are_skipped_with_the_reason():
    f = healthy()
    f["gpudirect"] = {"applies": False, "reason": "no RDMA device in /sys/class/infiniband", "rdma_devices": []}
    findings = evaluate(f)
    for rule_id in CASES:
        assert findings[rule_id]["status"] == "skip" and "no RDMA device" in findings[rule_id]["message"]
